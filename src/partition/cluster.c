/* Convex clustering in O(nodes + edges). Every node gets an integer label such that along each
 * edge u -> v the label does not decrease, and strictly increases when u is unclaimed:
 *   lab(v) >= lab(u) + (u unclaimed ? 1 : 0).
 * A cluster is a connected group of claimed nodes joined by edges whose ends share one label.
 * Labels never decrease along a path and rise after every unclaimed node, so a path that leaves a
 * cluster cannot come back to it (convexity), and a cycle of clusters and unclaimed nodes would
 * need one label all round, with no unclaimed node on it: one cluster. Any labels that obey the
 * rule give a valid partition; the fewer distinct labels neighbours get, the fewer clusters.
 *
 * Labels start as low as possible (the most unclaimed nodes on a path from a source). Then the
 * groups (clusters of those labels, and single unclaimed nodes) are visited consumers first and
 * raised as high as their consumers allow: always for an unclaimed node (that only loosens what
 * its producers may do), and for a cluster when that makes it meet a claimed consumer, which it
 * then joins (a mask computed from its own graph input joins the chain it feeds even when an
 * unclaimed node sits earlier in that chain). A group moves as a whole, so raising never splits
 * a cluster. */
#include "partition/cluster.h"

#include <limits.h>
#include <stdlib.h>

typedef struct dag {
  int n;           /* nodes */
  int *succ_start; /* n + 1 offsets into succ */
  int *succ;       /* consumers of each node, one entry per consuming input */
  int *order;      /* nodes in a topological order */
} dag;

typedef struct groups {
  int *of;       /* per node: its group (a node index: the cluster's root, or the node itself) */
  int *start;    /* n + 1 offsets into members, indexed by group */
  int *members;  /* nodes of each group */
  int *pending;  /* per group: consumer edges leaving it whose group is not yet visited */
  int *queue;    /* groups ready to visit */
} groups;

/* Producer node of the k-th input (implicit inputs after the explicit ones), or -1. */
static int node_pred(const ir_graph *g, const ir_node *n, int k) {
  int v = k < n->n_inputs ? n->inputs[k] : n->implicit_inputs[k - n->n_inputs];
  return v >= 0 ? g->values[v].producer : -1;
}

static int node_n_preds(const ir_node *n) { return n->n_inputs + n->n_implicit_inputs; }

/* ---- the node graph ------------------------------------------------------------------------ */

static void dag_free(dag *x) {
  free(x->succ_start);
  free(x->succ);
  free(x->order);
}

/* Consumer lists (CSR); x->order is used as the fill cursor and left for dag_sort. */
static int dag_edges(const ir_graph *g, dag *x) {
  size_t n_edges = 0;
  for (int i = 0; i < g->n_nodes; i++) n_edges += (size_t)node_n_preds(&g->nodes[i]);
  x->n = g->n_nodes;
  x->succ_start = calloc((size_t)x->n + 1, sizeof(int));
  x->succ = malloc((n_edges + 1) * sizeof(int));
  x->order = malloc(((size_t)x->n + 1) * sizeof(int));
  if (!x->succ_start || !x->succ || !x->order) return -1;
  for (int i = 0; i < x->n; i++)
    for (int k = 0; k < node_n_preds(&g->nodes[i]); k++) {
      int q = node_pred(g, &g->nodes[i], k);
      if (q >= 0) x->succ_start[q + 1]++;
    }
  for (int v = 0; v < x->n; v++) {
    x->succ_start[v + 1] += x->succ_start[v];
    x->order[v] = x->succ_start[v];
  }
  for (int i = 0; i < x->n; i++)
    for (int k = 0; k < node_n_preds(&g->nodes[i]); k++) {
      int q = node_pred(g, &g->nodes[i], k);
      if (q >= 0) x->succ[x->order[q]++] = i;
    }
  return 0;
}

/* Kahn's algorithm; returns 0, -1 on allocation failure, 1 when the graph has a cycle. */
static int dag_sort(const ir_graph *g, dag *x) {
  int *indeg = calloc((size_t)x->n + 1, sizeof(int));
  if (!indeg) return -1;
  for (int i = 0; i < x->n; i++)
    for (int k = 0; k < node_n_preds(&g->nodes[i]); k++) indeg[i] += node_pred(g, &g->nodes[i], k) >= 0;
  int head = 0, tail = 0;
  for (int i = 0; i < x->n; i++)
    if (!indeg[i]) x->order[tail++] = i;
  while (head < tail) {
    int v = x->order[head++];
    for (int e = x->succ_start[v]; e < x->succ_start[v + 1]; e++)
      if (--indeg[x->succ[e]] == 0) x->order[tail++] = x->succ[e];
  }
  free(indeg);
  return tail == x->n ? 0 : 1;
}

/* ---- labels and union-find ------------------------------------------------------------------ */

/* The lowest labels the rule allows: the most unclaimed nodes on any path from a source. */
static void labels_lowest(const bool *claimed, const dag *x, int *lab) {
  for (int v = 0; v < x->n; v++) lab[v] = 0;
  for (int t = 0; t < x->n; t++) {
    int v = x->order[t], next = lab[v] + !claimed[v];
    for (int e = x->succ_start[v]; e < x->succ_start[v + 1]; e++)
      if (lab[x->succ[e]] < next) lab[x->succ[e]] = next;
  }
}

static int uf_find(int *parent, int v) {
  while (parent[v] != v) {
    parent[v] = parent[parent[v]];
    v = parent[v];
  }
  return v;
}

/* The lower index becomes the root, so roots do not depend on the order of unions. */
static void uf_union(int *parent, int a, int b) {
  a = uf_find(parent, a);
  b = uf_find(parent, b);
  if (a < b) parent[b] = a;
  else if (b < a) parent[a] = b;
}

/* parent[v]: union-find over claimed nodes joined by an edge with one label at both ends. */
static void join_equal_labels(const bool *claimed, const dag *x, const int *lab, int *parent) {
  for (int v = 0; v < x->n; v++) parent[v] = v;
  for (int v = 0; v < x->n; v++) {
    if (!claimed[v]) continue;
    for (int e = x->succ_start[v]; e < x->succ_start[v + 1]; e++) {
      int s = x->succ[e];
      if (claimed[s] && lab[s] == lab[v]) uf_union(parent, v, s);
    }
  }
}

/* ---- raising groups, consumers first ---------------------------------------------------------- */

static void groups_free(groups *gr) {
  free(gr->of);
  free(gr->start);
  free(gr->members);
  free(gr->pending);
  free(gr->queue);
}

/* Groups of the union-find `parent`, their member lists and pending consumer-edge counts. */
static int groups_build(const dag *x, int *parent, groups *gr) {
  size_t n = (size_t)x->n + 1;
  gr->of = malloc(n * sizeof(int));
  gr->start = calloc(n, sizeof(int));
  gr->members = malloc(n * sizeof(int));
  gr->pending = calloc(n, sizeof(int));
  gr->queue = malloc(n * sizeof(int));
  if (!gr->of || !gr->start || !gr->members || !gr->pending || !gr->queue) return -1;
  for (int v = 0; v < x->n; v++) {
    gr->of[v] = uf_find(parent, v);
    gr->start[gr->of[v] + 1]++;
  }
  for (int u = 0; u < x->n; u++) gr->start[u + 1] += gr->start[u];
  for (int u = 0; u < x->n; u++) gr->queue[u] = gr->start[u]; /* fill cursor */
  for (int v = 0; v < x->n; v++) gr->members[gr->queue[gr->of[v]]++] = v;
  for (int v = 0; v < x->n; v++)
    for (int e = x->succ_start[v]; e < x->succ_start[v + 1]; e++)
      gr->pending[gr->of[v]] += gr->of[x->succ[e]] != gr->of[v];
  return 0;
}

/* Raises group u as far as its consumers allow, when that helps (see the file comment). */
static void raise_group(const bool *claimed, const dag *x, const groups *gr, int u, int *lab) {
  int step = !claimed[u], bound = INT_MAX;
  bool meets_claimed = false;
  for (int m = gr->start[u]; m < gr->start[u + 1]; m++) {
    int v = gr->members[m];
    for (int e = x->succ_start[v]; e < x->succ_start[v + 1]; e++) {
      int s = x->succ[e];
      if (gr->of[s] == u) continue;
      if (lab[s] - step < bound) {
        bound = lab[s] - step;
        meets_claimed = false;
      }
      if (lab[s] - step == bound && claimed[s]) meets_claimed = true;
    }
  }
  if (bound == INT_MAX || bound <= lab[u] || (claimed[u] && !meets_claimed)) return;
  for (int m = gr->start[u]; m < gr->start[u + 1]; m++) lab[gr->members[m]] = bound;
}

/* Visits every group after all the groups that consume from it (Kahn's algorithm on the groups,
 * backwards): the groups form a DAG because their labels obey the rule. */
static void raise_groups(const ir_graph *g, const bool *claimed, const dag *x, groups *gr, int *lab) {
  int head = 0, tail = 0;
  for (int u = 0; u < x->n; u++)
    if (gr->of[u] == u && !gr->pending[u]) gr->queue[tail++] = u;
  while (head < tail) {
    int u = gr->queue[head++];
    raise_group(claimed, x, gr, u, lab);
    for (int m = gr->start[u]; m < gr->start[u + 1]; m++) {
      const ir_node *n = &g->nodes[gr->members[m]];
      for (int k = 0; k < node_n_preds(n); k++) {
        int q = node_pred(g, n, k);
        if (q < 0 || gr->of[q] == u) continue;
        if (--gr->pending[gr->of[q]] == 0) gr->queue[tail++] = gr->of[q];
      }
    }
  }
}

/* ---- entry point ------------------------------------------------------------------------------- */

static void number_clusters(const bool *claimed, int n, int *parent, int *cluster_of, int *n_clusters) {
  int next = 0;
  for (int v = 0; v < n; v++) cluster_of[v] = -1;
  for (int v = 0; v < n; v++) {
    if (!claimed[v]) continue;
    int r = uf_find(parent, v);
    if (cluster_of[r] < 0) cluster_of[r] = next++; /* r <= v: roots are the lowest index */
    cluster_of[v] = cluster_of[r];
  }
  *n_clusters = next;
}

int cluster_convex(const ir_graph *g, const bool *claimed, int *cluster_of, int *n_clusters, diag *d) {
  dag x = {0};
  groups gr = {0};
  int rc = -1, sorted = 1;
  int *lab = calloc((size_t)g->n_nodes + 1, sizeof(int));
  int *parent = malloc(((size_t)g->n_nodes + 1) * sizeof(int));
  *n_clusters = 0;
  if (!lab || !parent || dag_edges(g, &x) || (sorted = dag_sort(g, &x)) < 0) {
    diag_fail(d, "out of memory while clustering");
    goto done;
  }
  if (sorted) {
    diag_fail(d, "the graph has a cycle");
    goto done;
  }
  labels_lowest(claimed, &x, lab);
  join_equal_labels(claimed, &x, lab, parent);
  if (groups_build(&x, parent, &gr)) {
    diag_fail(d, "out of memory while clustering");
    goto done;
  }
  raise_groups(g, claimed, &x, &gr, lab);
  join_equal_labels(claimed, &x, lab, parent);
  number_clusters(claimed, g->n_nodes, parent, cluster_of, n_clusters);
  rc = 0;
done:
  groups_free(&gr);
  dag_free(&x);
  free(lab);
  free(parent);
  return rc;
}
