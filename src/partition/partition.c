/* Claim every node, then cluster. Pass 1 walks nodes in topological order and lets a claimed
 * node join the cluster of a claimed producer unless that cluster also reaches it through a
 * node outside the cluster (which would make the fused node part of a cycle). Pass 2 merges a
 * producer cluster with a consumer cluster of the condensed graph when no path between them
 * passes through a third node. */
#include "partition/partition.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- bitsets over cluster ids ------------------------------------------------------------ */

typedef struct bitset_pool {
  size_t words;     /* uint64 words per set */
  uint64_t *bits;   /* n_sets * words */
} bitset_pool;

static uint64_t *set_at(bitset_pool *bp, int i) { return bp->bits + (size_t)i * bp->words; }
static void set_add(uint64_t *s, int b) { s[b >> 6] |= 1ull << (b & 63); }
static bool set_has(const uint64_t *s, int b) { return (s[b >> 6] >> (b & 63)) & 1; }
static void set_or(uint64_t *dst, const uint64_t *src, size_t words) {
  for (size_t w = 0; w < words; w++) dst[w] |= src[w];
}

/* Predecessor nodes of node i (value producers, implicit inputs included). */
static int node_pred(const ir_graph *g, const ir_node *n, int k) {
  int v = k < n->n_inputs ? n->inputs[k] : n->implicit_inputs[k - n->n_inputs];
  return v >= 0 ? g->values[v].producer : -1;
}

/* Pass 1: greedy topological clustering with reach/external sets. */
static int cluster_greedy(const ir_graph *g, partition *p) {
  int n = g->n_nodes;
  bitset_pool reach = {(size_t)(n + 63) / 64, NULL}, ext = reach;
  uint64_t *ext_in = calloc(reach.words ? reach.words : 1, sizeof(uint64_t));
  reach.bits = calloc((size_t)n * reach.words + 1, sizeof(uint64_t));
  ext.bits = calloc((size_t)n * ext.words + 1, sizeof(uint64_t));
  if (!reach.bits || !ext.bits || !ext_in) {
    free(reach.bits);
    free(ext.bits);
    free(ext_in);
    return -1;
  }
  int n_clusters = 0;
  for (int i = 0; i < n; i++) {
    const ir_node *node = &g->nodes[i];
    int n_pred = node->n_inputs + node->n_implicit_inputs;
    memset(ext_in, 0, reach.words * sizeof(uint64_t));
    for (int k = 0; k < n_pred; k++) {
      int q = node_pred(g, node, k);
      if (q < 0) continue;
      set_or(ext_in, set_at(&ext, q), ext.words);
      /* clusters reaching q, except q's own, reach i through q, which is outside them */
      for (size_t w = 0; w < reach.words; w++) {
        uint64_t r = set_at(&reach, q)[w];
        if (p->cluster_of[q] >= 0 && (size_t)(p->cluster_of[q] >> 6) == w)
          r &= ~(1ull << (p->cluster_of[q] & 63));
        ext_in[w] |= r;
      }
    }
    int chosen = -1;
    if (p->defs[i]) {
      for (int k = 0; k < n_pred && chosen < 0; k++) {
        int q = node_pred(g, node, k);
        if (q >= 0 && p->cluster_of[q] >= 0 && !set_has(ext_in, p->cluster_of[q])) chosen = p->cluster_of[q];
      }
      if (chosen < 0) chosen = n_clusters++;
      p->cluster_of[i] = chosen;
    }
    uint64_t *ri = set_at(&reach, i), *ei = set_at(&ext, i);
    for (int k = 0; k < n_pred; k++) {
      int q = node_pred(g, node, k);
      if (q >= 0) set_or(ri, set_at(&reach, q), reach.words);
    }
    if (chosen >= 0) set_add(ri, chosen);
    memcpy(ei, ext_in, ext.words * sizeof(uint64_t));
  }
  p->n_clusters = n_clusters;
  free(reach.bits);
  free(ext.bits);
  free(ext_in);
  return 0;
}

/* ---- pass 2: merging on the condensed graph ------------------------------------------------ */

/* Condensed node of graph node i: its cluster, or n_clusters + i for an unclaimed node. */
static int condensed_of(const partition *p, int i) {
  return p->cluster_of[i] >= 0 ? p->cluster_of[i] : p->n_clusters + i;
}

typedef struct condensed {
  int n;            /* condensed nodes */
  int *edge_start;  /* CSR successors */
  int *edges;
} condensed;

static void condensed_free(condensed *c) {
  free(c->edge_start);
  free(c->edges);
}

static int condensed_build(const ir_graph *g, const partition *p, condensed *c) {
  c->n = p->n_clusters + g->n_nodes;
  size_t n_edges = 0;
  for (int i = 0; i < g->n_nodes; i++) n_edges += (size_t)(g->nodes[i].n_inputs + g->nodes[i].n_implicit_inputs);
  c->edge_start = calloc((size_t)c->n + 1, sizeof(int));
  c->edges = calloc(n_edges + 1, sizeof(int));
  if (!c->edge_start || !c->edges) return -1;
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *node = &g->nodes[i];
    for (int k = 0; k < node->n_inputs + node->n_implicit_inputs; k++) {
      int q = node_pred(g, node, k);
      if (q >= 0 && condensed_of(p, q) != condensed_of(p, i)) c->edge_start[condensed_of(p, q) + 1]++;
    }
  }
  for (int v = 0; v < c->n; v++) c->edge_start[v + 1] += c->edge_start[v];
  int *fill = calloc((size_t)c->n + 1, sizeof(int));
  if (!fill) return -1;
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *node = &g->nodes[i];
    for (int k = 0; k < node->n_inputs + node->n_implicit_inputs; k++) {
      int q = node_pred(g, node, k);
      if (q < 0) continue;
      int a = condensed_of(p, q), b = condensed_of(p, i);
      if (a != b) c->edges[c->edge_start[a] + fill[a]++] = b;
    }
  }
  free(fill);
  return 0;
}

/* Is `to` reachable from `from` by a path of at least two edges (through another node)? */
static bool reachable_indirectly(const condensed *c, int from, int to, char *seen, int *stack) {
  memset(seen, 0, (size_t)c->n);
  int top = 0;
  for (int e = c->edge_start[from]; e < c->edge_start[from + 1]; e++) {
    int s = c->edges[e];
    if (s != to && !seen[s]) {
      seen[s] = 1;
      stack[top++] = s;
    }
  }
  while (top > 0) {
    int v = stack[--top];
    for (int e = c->edge_start[v]; e < c->edge_start[v + 1]; e++) {
      int s = c->edges[e];
      if (s == to) return true;
      if (!seen[s]) {
        seen[s] = 1;
        stack[top++] = s;
      }
    }
  }
  return false;
}

static void renumber_clusters(partition *p) {
  int *map = malloc(sizeof(int) * (size_t)(p->n_clusters + 1));
  if (!map) return;
  for (int k = 0; k < p->n_clusters; k++) map[k] = -1;
  int next = 0;
  for (int i = 0; i < p->n_nodes; i++) {
    int k = p->cluster_of[i];
    if (k < 0) continue;
    if (map[k] < 0) map[k] = next++;
    p->cluster_of[i] = map[k];
  }
  p->n_clusters = next;
  free(map);
}

/* Merges one pair of clusters if any pair can be merged; returns 1 when it merged, 0 when no
 * pair can, -1 on allocation failure. */
static int merge_one_pair(const ir_graph *g, partition *p) {
  condensed c = {0};
  if (condensed_build(g, p, &c)) {
    condensed_free(&c);
    return -1;
  }
  char *seen = malloc((size_t)c.n + 1);
  int *stack = malloc(sizeof(int) * ((size_t)c.n + 1));
  int merged = seen && stack ? 0 : -1;
  /* Only clusters joined by an edge are candidates (a producer cluster and a consumer cluster);
   * the condensed graph is acyclic, so the edge a -> b rules out a path b -> a, and the pair may
   * merge unless b is also reachable from a through a third node. */
  for (int a = 0; merged == 0 && a < p->n_clusters; a++) {
    for (int e = c.edge_start[a]; merged == 0 && e < c.edge_start[a + 1]; e++) {
      int b = c.edges[e];
      if (b >= p->n_clusters || reachable_indirectly(&c, a, b, seen, stack)) continue;
      for (int i = 0; i < p->n_nodes; i++)
        if (p->cluster_of[i] == b) p->cluster_of[i] = a;
      merged = 1;
    }
  }
  free(seen);
  free(stack);
  condensed_free(&c);
  if (merged == 1) renumber_clusters(p);
  return merged;
}

enum { MERGE_PASS_LIMIT = 64 }; /* bounds pass 2 on pathological graphs */

int partition_graph(const ir_graph *g, mlxb_device dev, const bool *skip, partition **out, diag *d) {
  *out = NULL;
  partition *p = calloc(1, sizeof *p);
  if (!p) return diag_fail(d, "out of memory");
  p->n_nodes = g->n_nodes;
  size_t n = (size_t)g->n_nodes + 1;
  p->defs = calloc(n, sizeof *p->defs);
  p->reasons = calloc(n, sizeof *p->reasons);
  p->cluster_of = malloc(n * sizeof *p->cluster_of);
  if (!p->defs || !p->reasons || !p->cluster_of) goto oom;
  for (int i = 0; i < g->n_nodes; i++) p->cluster_of[i] = -1;
  if (claim_all(g, dev, skip, p) || cluster_greedy(g, p)) goto oom;
  for (int pass = 0; pass < MERGE_PASS_LIMIT && p->n_clusters > 1; pass++) {
    int rc = merge_one_pair(g, p);
    if (rc < 0) goto oom;
    if (rc == 0) break;
  }
  *out = p;
  return 0;
oom:
  partition_free(p);
  return diag_fail(d, "out of memory while partitioning");
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
