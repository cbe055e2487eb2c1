/* Claim every node, then cluster the claimed ones (cluster.c: convex clusters in time linear in
 * the graph), and write the claim report. */
#include "partition/partition.h"

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
  if (cluster_claimed(g, p, d)) {
    partition_free(p);
    return -1;
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
