/* Claim every node, then cluster the claimed ones (cluster.c: convex clusters in time linear in
 * the graph), and write the claim report. */
#include "partition/partition.h"

#include <stdint.h>
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
      snprintf(c.reason, sizeof c.reason, "inside a control-flow body (left to ORT for now)");
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

static bool seen_before(const ir_graph *g, const partition *p, int i, bool claimed) {
  for (int k = 0; k < i; k++) {
    if ((p->defs[k] != NULL) != claimed) continue;
    if (strcmp(g->nodes[k].op_type, g->nodes[i].op_type) || strcmp(g->nodes[k].domain, g->nodes[i].domain)) continue;
    if (claimed || !strcmp(p->reasons[k], p->reasons[i])) return true;
  }
  return false;
}

void partition_write_report(const ir_graph *g, const partition *p, const char *title, FILE *f) {
  int claimed = 0;
  for (int i = 0; i < p->n_nodes; i++) claimed += p->defs[i] != NULL;
  fprintf(f, "MLXExecutionProvider claim report%s%s\n", title ? ": " : "", title ? title : "");
  fprintf(f, "  nodes: %d, claimed: %d, declined: %d, clusters: %d\n", p->n_nodes, claimed,
          p->n_nodes - claimed, p->n_clusters);
  for (int pass = 0; pass < 2; pass++) {
    bool want_claimed = pass == 0;
    for (int i = 0; i < p->n_nodes; i++) {
      if ((p->defs[i] != NULL) != want_claimed || seen_before(g, p, i, want_claimed)) continue;
      int count = 0;
      for (int k = i; k < p->n_nodes; k++) {
        if ((p->defs[k] != NULL) != want_claimed) continue;
        if (strcmp(g->nodes[k].op_type, g->nodes[i].op_type) || strcmp(g->nodes[k].domain, g->nodes[i].domain)) continue;
        if (!want_claimed && strcmp(p->reasons[k], p->reasons[i])) continue;
        count++;
      }
      const ir_node *n = &g->nodes[i];
      if (want_claimed)
        fprintf(f, "  claimed  %s%s%s x%d\n", n->domain, *n->domain ? "::" : "", n->op_type, count);
      else
        fprintf(f, "  declined %s%s%s x%d: %s\n", n->domain, *n->domain ? "::" : "", n->op_type, count, p->reasons[i]);
    }
  }
  for (int k = 0; k < p->n_clusters; k++) {
    int members = 0;
    for (int i = 0; i < p->n_nodes; i++) members += p->cluster_of[i] == k;
    fprintf(f, "  cluster %d: %d nodes\n", k, members);
  }
  fflush(f);
}
