/* Claim every node, then cluster the claimed ones (cluster.c: convex clusters in time linear in
 * the graph), and write the claim report. */
#include "partition/partition.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "partition/cluster.h"

/* ---- claiming ----------------------------------------------------------------------------- */

static char *dup_reason(const char *s) {
  size_t n = strlen(s) + 1;
  char *r = malloc(n);
  if (r) memcpy(r, s, n);
  return r;
}

static int claim_all(const ir_graph *g, mlxb_device dev, const bool *skip, partition *p) {
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = &g->nodes[i];
    claim_ctx c = {.graph = g, .node = n, .device = dev};
    if (skip && skip[i]) {
      snprintf(c.reason, sizeof c.reason, "already assigned to another execution provider");
    } else if (g->is_subgraph) {
      /* ORT partitions bodies before their parent graph; a body runs whole with its control-flow
       * node, which the parent graph's call claims (with every body) or leaves to ORT */
      if (g->parent_name && *g->parent_name)
        snprintf(c.reason, sizeof c.reason, "in a body of %s node '%s': claimed or declined with it, whole",
                 g->parent_op, g->parent_name);
      else
        snprintf(c.reason, sizeof c.reason, "in a control-flow body: claimed or declined with its node, whole");
    } else if ((p->defs[i] = op_registry_claim(&c)) != NULL) {
      continue;
    }
    p->reasons[i] = dup_reason(c.reason[0] ? c.reason : "declined");
    if (!p->reasons[i]) return -1;
  }
  return 0;
}

static int cluster_claimed(const ir_graph *g, partition *p, diag *d) {
  bool *claimed = malloc(((size_t)g->n_nodes + 1) * sizeof *claimed);
  if (!claimed) return diag_fail(d, "out of memory while partitioning");
  for (int i = 0; i < g->n_nodes; i++) claimed[i] = p->defs[i] != NULL;
  int rc = cluster_convex(g, claimed, p->cluster_of, &p->n_clusters, d);
  free(claimed);
  return rc;
}

/* ORT's plugin-EP interface cannot carry a sequence in or out of a compiled node: an input comes
 * as an OrtValue the EP could read, but an output is allocated by ORT from the kernel context
 * (KernelContext_GetOutput: a tensor of given dims, or an empty TensorSeq that the C API offers
 * no way to fill). So a sequence value must begin and end inside one cluster: a claimed node
 * whose sequence input or output would cross a cluster's boundary (a graph input or output, a
 * node on ORT, another cluster) is declined, and the graph clustered again, until none crosses. */
static bool decline_for_sequence(partition *p, int node, const ir_value *v, const char *why) {
  if (!p->defs[node]) return false;
  char reason[512];
  snprintf(reason, sizeof reason,
           "sequence '%s' would cross the cluster's boundary (%s): ORT's plugin-EP interface cannot hand a "
           "sequence to or take one from a compiled node",
           v->name, why);
  p->defs[node] = NULL;
  free(p->reasons[node]);
  p->reasons[node] = dup_reason(reason);
  return true;
}

static int sequences_stay_inside(const ir_graph *g, partition *p, bool *changed) {
  *changed = false;
  int *producer_cluster = malloc(((size_t)g->n_values + 1) * sizeof *producer_cluster);
  if (!producer_cluster) return -1;
  for (int v = 0; v < g->n_values; v++) producer_cluster[v] = -1;
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_outputs; k++) {
      int v = g->nodes[i].outputs[k];
      if (v < 0 || !g->values[v].is_sequence) continue;
      producer_cluster[v] = p->cluster_of[i];
      if (g->values[v].is_graph_output) *changed |= decline_for_sequence(p, i, &g->values[v], "a graph output");
    }
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = &g->nodes[i];
    for (int k = 0; k < n->n_inputs + n->n_implicit_inputs; k++) {
      int v = k < n->n_inputs ? n->inputs[k] : n->implicit_inputs[k - n->n_inputs];
      if (v < 0 || !g->values[v].is_sequence) continue;
      const ir_value *val = &g->values[v];
      int from = val->producer >= 0 ? producer_cluster[v] : -1;
      if (from >= 0 && from == p->cluster_of[i]) continue;
      const char *why = val->producer < 0 ? "a graph input" : from < 0 ? "made on ORT" : "made in another cluster";
      *changed |= decline_for_sequence(p, i, val, why);
      if (val->producer >= 0 && from >= 0)
        *changed |= decline_for_sequence(p, val->producer, val, "read outside its cluster");
    }
  }
  free(producer_cluster);
  for (int i = 0; i < g->n_nodes; i++)
    if (!p->defs[i] && !p->reasons[i]) return -1; /* out of memory for a reason */
  return 0;
}

int partition_graph(const ir_graph *g, mlxb_device dev, const bool *skip, partition **out, diag *d) {
  *out = NULL;
  partition *p = calloc(1, sizeof *p);
  if (!p) return diag_fail(d, "out of memory");
  p->n_nodes = g->n_nodes;
  size_t n = (size_t)g->n_nodes + 1;
  p->defs = calloc(n, sizeof *p->defs);
  p->reasons = calloc(n, sizeof *p->reasons);
  p->cluster_of = malloc(n * sizeof *p->cluster_of);
  if (!p->defs || !p->reasons || !p->cluster_of || claim_all(g, dev, skip, p)) {
    partition_free(p);
    return diag_fail(d, "out of memory while partitioning");
  }
  bool changed = true;
  while (changed) {
    if (cluster_claimed(g, p, d)) {
      partition_free(p);
      return -1;
    }
    if (sequences_stay_inside(g, p, &changed)) {
      partition_free(p);
      return diag_fail(d, "out of memory while partitioning");
    }
  }
  *out = p;
  return 0;
}

void partition_free(partition *p) {
  if (!p) return;
  for (int i = 0; i < p->n_nodes && p->reasons; i++) free(p->reasons[i]);
  free(p->reasons);
  free(p->defs);
  free(p->cluster_of);
  free(p);
}

/* ---- report --------------------------------------------------------------------------------- */

/* One line of the report's op list: nodes of one op (and, for declined nodes, one reason). */
typedef struct report_key {
  const char *op_type, *domain, *reason; /* reason: NULL for claimed nodes */
  int node;                              /* node index; after grouping, the group's first node */
  int count;                             /* after grouping: nodes in the group */
} report_key;

static int cmp_str(const char *a, const char *b) { return strcmp(a ? a : "", b ? b : ""); }

/* Claimed before declined, then op, domain and reason, then node index. */
static int cmp_key(const void *pa, const void *pb) {
  const report_key *a = pa, *b = pb;
  int c = (a->reason != NULL) - (b->reason != NULL);
  if (!c) c = cmp_str(a->op_type, b->op_type);
  if (!c) c = cmp_str(a->domain, b->domain);
  if (!c) c = cmp_str(a->reason, b->reason);
  return c ? c : (a->node > b->node) - (a->node < b->node);
}

/* Claimed before declined, then by first node: the order in which the graph first shows them. */
static int cmp_group(const void *pa, const void *pb) {
  const report_key *a = pa, *b = pb;
  int c = (a->reason != NULL) - (b->reason != NULL);
  return c ? c : (a->node > b->node) - (a->node < b->node);
}

/* Sorts the nodes into groups (O(n log n)); returns the number of groups written over keys. */
static int group_nodes(const ir_graph *g, const partition *p, report_key *keys) {
  for (int i = 0; i < p->n_nodes; i++)
    keys[i] = (report_key){g->nodes[i].op_type, g->nodes[i].domain, p->defs[i] ? NULL : p->reasons[i], i, 1};
  qsort(keys, (size_t)p->n_nodes, sizeof *keys, cmp_key);
  int n_groups = 0;
  for (int i = 0; i < p->n_nodes; i++) {
    report_key *last = n_groups ? &keys[n_groups - 1] : NULL;
    if (last && (last->reason != NULL) == (keys[i].reason != NULL) && !cmp_str(last->op_type, keys[i].op_type) &&
        !cmp_str(last->domain, keys[i].domain) && !cmp_str(last->reason, keys[i].reason)) {
      last->count++;
      continue;
    }
    keys[n_groups++] = keys[i];
  }
  qsort(keys, (size_t)n_groups, sizeof *keys, cmp_group);
  return n_groups;
}

static void write_ops(const ir_graph *g, const partition *p, FILE *f) {
  report_key *keys = malloc(sizeof *keys * ((size_t)p->n_nodes + 1));
  if (!keys) {
    fprintf(f, "  (op list left out: out of memory)\n");
    return;
  }
  int n_groups = group_nodes(g, p, keys);
  for (int k = 0; k < n_groups; k++) {
    const report_key *r = &keys[k];
    const char *sep = *r->domain ? "::" : "";
    if (!r->reason) fprintf(f, "  claimed  %s%s%s x%d\n", r->domain, sep, r->op_type, r->count);
    else fprintf(f, "  declined %s%s%s x%d: %s\n", r->domain, sep, r->op_type, r->count, r->reason);
  }
  free(keys);
}

static void write_clusters(const partition *p, FILE *f) {
  int *members = calloc((size_t)p->n_clusters + 1, sizeof *members);
  if (!members) {
    fprintf(f, "  (cluster sizes left out: out of memory)\n");
    return;
  }
  for (int i = 0; i < p->n_nodes; i++)
    if (p->cluster_of[i] >= 0) members[p->cluster_of[i]]++;
  for (int k = 0; k < p->n_clusters; k++) fprintf(f, "  cluster %d: %d nodes\n", k, members[k]);
  free(members);
}

/* Nodes of a body, nested bodies included. */
static int body_nodes(const ir_graph *body) {
  int n = body->n_nodes;
  for (int i = 0; i < body->n_nodes; i++)
    for (int k = 0; body->nodes[i].subgraphs && k < body->nodes[i].n_subgraphs; k++)
      if (body->nodes[i].subgraphs[k]) n += body_nodes(body->nodes[i].subgraphs[k]);
  return n;
}

/* The bodies each claimed control-flow node brings into its cluster (ORT's body calls decline
 * them; this is where they show up as claimed). */
static void write_bodies(const ir_graph *g, const partition *p, FILE *f) {
  for (int i = 0; i < p->n_nodes; i++) {
    const ir_node *n = &g->nodes[i];
    if (!p->defs[i] || !n->n_subgraphs || !n->subgraphs) continue;
    fprintf(f, "  bodies of %s '%s' (cluster %d):", n->op_type, n->name, p->cluster_of[i]);
    for (int k = 0; k < n->n_subgraphs; k++)
      if (n->subgraphs[k]) fprintf(f, " %s %d nodes;", n->subgraph_attrs[k], body_nodes(n->subgraphs[k]));
    fprintf(f, " they run with it, on MLX\n");
  }
}

void partition_write_report(const ir_graph *g, const partition *p, const char *title, FILE *f) {
  int claimed = 0;
  for (int i = 0; i < p->n_nodes; i++) claimed += p->defs[i] != NULL;
  fprintf(f, "MLXExecutionProvider claim report%s%s\n", title ? ": " : "", title ? title : "");
  fprintf(f, "  nodes: %d, claimed: %d, declined: %d, clusters: %d\n", p->n_nodes, claimed,
          p->n_nodes - claimed, p->n_clusters);
  write_ops(g, p, f);
  write_bodies(g, p, f);
  write_clusters(p, f);
  fflush(f);
}
