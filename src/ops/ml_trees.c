/* Tree ensembles of the ai.onnx.ml domain: TreeEnsembleRegressor, TreeEnsembleClassifier and
 * TreeEnsemble (opset 5). ONNX leaves much of their
 * arithmetic open, so every formula here follows ORT's CPU kernels step by step (float32 scores,
 * their post-transforms, their tie-breaking and their binary-class quirks); forms where ORT and the
 * spec disagree, or where ORT reads uninitialized memory, are declined. */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ml_util.h"

/* ---- tree ensembles: shared model ------------------------------------------------------- */

/* Node modes; LEAF nodes point to themselves so that descending past a leaf keeps it. */
enum { TREE_LEAF, TREE_LEQ, TREE_LT, TREE_GTE, TREE_GT, TREE_EQ, TREE_NEQ, TREE_MEMBER, TREE_MODES };
enum { TREE_AVERAGE, TREE_SUM, TREE_MIN, TREE_MAX };

#define TREE_MAX_DEPTH 4096 /* each level is a handful of gathers over [rows, trees] */

/* Every tree of an ensemble in one flat node table, whichever opset described it. Weights are
 * kept per (leaf, target) in ORT's order; values are doubles holding float or double data. */
typedef struct tree_model {
  int64_t n, trees, targets;   /* nodes, trees, targets (classes) */
  int32_t *feature, *tnext, *fnext, *roots;
  uint8_t *mode, *miss;         /* miss: NaN takes the true branch */
  double *value;                /* threshold; for leaves, the node value ORT falls back to */
  int64_t *set_off, *set_len;   /* BRANCH_MEMBER sets in `sets` */
  double *sets;
  int64_t max_set, depth;
  int32_t max_feature;
  int64_t nw;                   /* leaf weights */
  int32_t *w_node, *w_target;
  double *w_value;
  double base[2];               /* base_values when there are at most two (the classifier's binary case) */
  double *bases;
  int64_t nbase;
  int agg;
  ml_post post;
  bool dbl;                     /* thresholds and scores in double (ORT's ThresholdType) */
  uint32_t modes;               /* bit per mode used by a non-leaf node */
} tree_model;

static void tree_model_free(tree_model *m) {
  free(m->feature), free(m->tnext), free(m->fnext), free(m->roots), free(m->mode), free(m->miss);
  free(m->value), free(m->set_off), free(m->set_len), free(m->sets), free(m->w_node), free(m->w_target);
  free(m->w_value), free(m->bases);
  memset(m, 0, sizeof *m);
}

typedef struct tree_err {
  char msg[160];
} tree_err;

static bool tree_fail(tree_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool tree_fail(tree_err *e, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  va_end(ap);
  return false;
}

static bool tree_alloc_nodes(tree_model *m, int64_t n, tree_err *e) {
  size_t k = (size_t)(n ? n : 1);
  m->n = n;
  m->feature = calloc(k, sizeof *m->feature), m->tnext = calloc(k, sizeof *m->tnext);
  m->fnext = calloc(k, sizeof *m->fnext), m->mode = calloc(k, 1), m->miss = calloc(k, 1);
  m->value = calloc(k, sizeof *m->value), m->set_off = calloc(k, sizeof *m->set_off);
  m->set_len = calloc(k, sizeof *m->set_len);
  if (!m->feature || !m->tnext || !m->fnext || !m->mode || !m->miss || !m->value || !m->set_off || !m->set_len)
    return tree_fail(e, "out of memory");
  return true;
}

/* A real-valued attribute: the float list `list`, or the tensor `tensor` whose dtype must be the
 * threshold type (ORT reads it as such). *out is malloc'ed (NULL when empty). */
static bool tree_reals(const ir_node *n, const char *list, const char *tensor, bool dbl, double **out, int64_t *count,
                       tree_err *e) {
  const float *fl;
  int64_t nl = list ? (int64_t)ir_attr_floats(n, list, &fl) : 0;
  const ir_attr *a = tensor ? ir_node_attr(n, tensor) : NULL;
  const ir_tensor *t = a && a->type == IR_ATTR_TENSOR ? a->tensor : NULL;
  int64_t nt = 0;
  if (t) {
    if (t->dtype != (dbl ? ONNX_DOUBLE : ONNX_FLOAT)) return tree_fail(e, "%s is not %s", tensor, dbl ? "double" : "float");
    nt = (int64_t)(t->bytes / ir_dtype_size(t->dtype));
    if (nt && !t->data) return tree_fail(e, "%s has no data", tensor);
  }
  if (nl && nt) return tree_fail(e, "both %s and %s", list, tensor);
  *count = nl + nt;
  *out = NULL;
  if (!*count) return true;
  *out = malloc(sizeof(double) * (size_t)*count);
  if (!*out) return tree_fail(e, "out of memory");
  for (int64_t i = 0; i < *count; i++)
    (*out)[i] = nl ? fl[i] : dbl ? ((const double *)t->data)[i] : ((const float *)t->data)[i];
  return true;
}

/* Takes ownership of base. */
static void tree_set_base(tree_model *m, double *base, int64_t nbase) {
  m->bases = base, m->nbase = nbase;
  for (int64_t i = 0; i < nbase && i < 2; i++) m->base[i] = base[i];
}

/* Longest root-to-leaf path over every tree (iterative DFS); false on a cycle or past the limit. */
static bool tree_depth(tree_model *m, tree_err *e) {
  /* A node shared by several parents (a DAG) may sit on the stack once per incoming edge. */
  int64_t *depth = malloc(sizeof(int64_t) * (size_t)(m->n + 1)), *stack = malloc(sizeof(int64_t) * (size_t)(2 * m->n + 2));
  uint8_t *state = calloc((size_t)(m->n + 1), 1);
  bool ok = depth && stack && state;
  if (!ok) tree_fail(e, "out of memory");
  m->depth = 0;
  for (int64_t t = 0; ok && t < m->trees; t++) {
    int64_t top = 0;
    stack[top++] = m->roots[t];
    while (ok && top > 0) {
      int64_t v = stack[top - 1];
      if (state[v] == 2) { top--; continue; }
      if (m->mode[v] == TREE_LEAF) { depth[v] = 0, state[v] = 2, top--; continue; }
      int64_t a = m->tnext[v], b = m->fnext[v];
      if (state[v] == 0) {
        state[v] = 1;
        if (state[a] == 1 || state[b] == 1) { ok = tree_fail(e, "a tree has a cycle"); break; }
        if (state[a] == 0) stack[top++] = a;
        if (state[b] == 0 && b != a) stack[top++] = b;
        continue;
      }
      depth[v] = 1 + (depth[a] > depth[b] ? depth[a] : depth[b]);
      state[v] = 2, top--;
      if (depth[v] > TREE_MAX_DEPTH) ok = tree_fail(e, "a tree is deeper than %d", TREE_MAX_DEPTH);
    }
    if (ok && depth[m->roots[t]] > m->depth) m->depth = depth[m->roots[t]];
  }
  free(depth), free(stack), free(state);
  return ok;
}

/* Derived fields and checks shared by every opset: modes used, the widest feature, leaf weights'
 * targets in range, member sets, depth. */
static bool tree_finish(tree_model *m, tree_err *e) {
  if (m->trees < 1) return tree_fail(e, "no trees");
  if (m->targets < 1) return tree_fail(e, "no targets or classes");
  if (m->targets > INT32_MAX) return tree_fail(e, "too many targets or classes (above int32)");
  for (int64_t i = 0; i < m->n; i++) {
    if (m->mode[i] == TREE_LEAF) {
      m->tnext[i] = m->fnext[i] = (int32_t)i, m->feature[i] = 0;
      continue;
    }
    m->modes |= 1u << m->mode[i];
    if (m->feature[i] < 0) return tree_fail(e, "negative feature id");
    if (m->feature[i] > m->max_feature) m->max_feature = m->feature[i];
    if (m->set_len[i] > m->max_set) m->max_set = m->set_len[i];
  }
  for (int64_t i = 0; i < m->nw; i++)
    if (m->w_target[i] < 0 || m->w_target[i] >= m->targets) return tree_fail(e, "a target/class id is out of range");
  return tree_depth(m, e);
}

/* (tree id, node id) -> position, through a sorted copy. */
typedef struct tree_key {
  int64_t tree, node, pos;
} tree_key;

static int tree_key_cmp(const void *a, const void *b) {
  const tree_key *x = a, *y = b;
  if (x->tree != y->tree) return x->tree < y->tree ? -1 : 1;
  if (x->node != y->node) return x->node < y->node ? -1 : 1;
  return x->pos < y->pos ? -1 : x->pos > y->pos;
}

static int64_t tree_key_find(const tree_key *keys, int64_t n, int64_t tree, int64_t node) {
  tree_key k = {tree, node, -1};
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (tree_key_cmp(&keys[mid], &k) < 0) lo = mid + 1;
    else hi = mid;
  }
  return lo < n && keys[lo].tree == tree && keys[lo].node == node ? keys[lo].pos : -1;
}

static int tree_mode_parse(const char *s) {
  static const char *const names[TREE_MEMBER] = {"LEAF", "BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT",
                                                 "BRANCH_EQ", "BRANCH_NEQ"};
  for (int i = 0; i < TREE_MEMBER; i++)
    if (strcmp(s, names[i]) == 0) return i;
  return -1;
}

static int tree_agg_parse(const char *s) {
  static const char *const names[] = {"AVERAGE", "SUM", "MIN", "MAX"};
  for (int i = 0; i < 4; i++)
    if (strcmp(s, names[i]) == 0) return i;
  return -1;
}

/* TreeEnsembleRegressor / TreeEnsembleClassifier (opsets 1 and 3): nodes listed by (tree id, node
 * id); each tree's root is its first listed node, as in ORT. */
static bool tree_from_v3(const ir_node *n, bool classifier, bool dbl, tree_model *m, tree_err *e) {
  memset(m, 0, sizeof *m);
  m->dbl = dbl;
  const char *pfx = classifier ? "class" : "target";
  char ids_name[32], nodes_name[32], trees_name[32], w_name[32], wt_name[40];
  snprintf(ids_name, sizeof ids_name, "%s_ids", pfx), snprintf(nodes_name, sizeof nodes_name, "%s_nodeids", pfx);
  snprintf(trees_name, sizeof trees_name, "%s_treeids", pfx), snprintf(w_name, sizeof w_name, "%s_weights", pfx);
  snprintf(wt_name, sizeof wt_name, "%s_weights_as_tensor", pfx);
  const int64_t *treeids, *nodeids, *feats, *tids, *fids, *miss, *wids, *wnodes, *wtrees;
  int64_t n_nodes = (int64_t)ir_attr_ints(n, "nodes_treeids", &treeids);
  const ir_attr *modes = ir_node_attr(n, "nodes_modes");
  if ((int64_t)ir_attr_ints(n, "nodes_nodeids", &nodeids) != n_nodes ||
      (int64_t)ir_attr_ints(n, "nodes_featureids", &feats) != n_nodes ||
      (int64_t)ir_attr_ints(n, "nodes_truenodeids", &tids) != n_nodes ||
      (int64_t)ir_attr_ints(n, "nodes_falsenodeids", &fids) != n_nodes || !modes || modes->type != IR_ATTR_STRINGS ||
      (int64_t)modes->n != n_nodes)
    return tree_fail(e, "node attributes differ in length");
  int64_t nmiss = (int64_t)ir_attr_ints(n, "nodes_missing_value_tracks_true", &miss);
  int64_t nw = (int64_t)ir_attr_ints(n, ids_name, &wids);
  if ((int64_t)ir_attr_ints(n, nodes_name, &wnodes) != nw || (int64_t)ir_attr_ints(n, trees_name, &wtrees) != nw)
    return tree_fail(e, "weight attributes differ in length");
  double *values = NULL, *weights = NULL, *base = NULL;
  int64_t nvalues, nweights, nbase;
  bool ok = tree_reals(n, "nodes_values", "nodes_values_as_tensor", dbl, &values, &nvalues, e) &&
            tree_reals(n, w_name, wt_name, dbl, &weights, &nweights, e) &&
            tree_reals(n, "base_values", "base_values_as_tensor", dbl, &base, &nbase, e);
  tree_key *keys = NULL;
  if (!ok) goto fail;
  tree_set_base(m, base, nbase), base = NULL;
  if (nvalues != n_nodes) { ok = tree_fail(e, "nodes_values has %lld values for %lld nodes", (long long)nvalues, (long long)n_nodes); goto fail; }
  if (nweights != nw) { ok = tree_fail(e, "weights differ in length from their ids"); goto fail; }
  const char *agg = ir_attr_string(n, "aggregate_function", "SUM");
  m->agg = classifier ? TREE_SUM : tree_agg_parse(agg); /* ORT's classifier always sums */
  if (m->agg < 0) { ok = tree_fail(e, "aggregate_function '%s'", agg); goto fail; }
  m->post = ml_post_of(n);
  if (m->post == ML_POST_BAD) { ok = tree_fail(e, "unknown post_transform"); goto fail; }
  m->targets = classifier ? ml_attr_count(n, "classlabels_int64s") : ir_attr_int(n, "n_targets", 0);
  if (!(ok = tree_alloc_nodes(m, n_nodes, e))) goto fail;
  keys = malloc(sizeof *keys * (size_t)(n_nodes + 1));
  m->roots = malloc(sizeof *m->roots * (size_t)(n_nodes + 1));
  if (!keys || !m->roots) { ok = tree_fail(e, "out of memory"); goto fail; }
  for (int64_t i = 0; i < n_nodes; i++) {
    keys[i] = (tree_key){treeids[i], nodeids[i], i};
    if (i == 0 || treeids[i] != treeids[i - 1]) m->roots[m->trees++] = (int32_t)i;
    int md = tree_mode_parse(modes->strings[i]);
    if (md < 0) { ok = tree_fail(e, "node mode '%s'", modes->strings[i]); goto fail; }
    m->mode[i] = (uint8_t)md, m->value[i] = values[i], m->miss[i] = i < nmiss && miss[i] == 1;
    if (feats[i] > INT32_MAX) { ok = tree_fail(e, "feature id too large"); goto fail; }
    m->feature[i] = (int32_t)feats[i];
  }
  qsort(keys, (size_t)n_nodes, sizeof *keys, tree_key_cmp);
  for (int64_t i = 1; i < n_nodes; i++)
    if (keys[i].tree == keys[i - 1].tree && keys[i].node == keys[i - 1].node) { ok = tree_fail(e, "a node is listed twice"); goto fail; }
  /* A tree id split over two runs of nodes would count as two trees in ORT: keys are sorted by
   * tree id, so runs sharing an id show up as more run starts than distinct ids. */
  int64_t distinct = n_nodes > 0;
  for (int64_t i = 1; i < n_nodes; i++) distinct += keys[i].tree != keys[i - 1].tree;
  if (distinct != m->trees) { ok = tree_fail(e, "nodes of a tree are not contiguous"); goto fail; }
  for (int64_t i = 0; i < n_nodes; i++) {
    if (m->mode[i] == TREE_LEAF) continue;
    if (tids[i] < 0 || tids[i] >= n_nodes || fids[i] < 0 || fids[i] >= n_nodes) { ok = tree_fail(e, "child id out of range"); goto fail; }
    int64_t a = tree_key_find(keys, n_nodes, treeids[i], tids[i]), b = tree_key_find(keys, n_nodes, treeids[i], fids[i]);
    if (a < 0 || b < 0) { ok = tree_fail(e, "a child node is missing"); goto fail; }
    if (a == i || b == i) { ok = tree_fail(e, "a node points to itself"); goto fail; }
    m->tnext[i] = (int32_t)a, m->fnext[i] = (int32_t)b;
  }
  /* Weights in ORT's order: by (tree, node), then as listed; weights on non-leaves are ignored. */
  tree_key *wk = malloc(sizeof *wk * (size_t)(nw + 1));
  m->w_node = malloc(sizeof *m->w_node * (size_t)(nw + 1)), m->w_target = malloc(sizeof *m->w_target * (size_t)(nw + 1));
  m->w_value = malloc(sizeof *m->w_value * (size_t)(nw + 1));
  if (!wk || !m->w_node || !m->w_target || !m->w_value) { free(wk); ok = tree_fail(e, "out of memory"); goto fail; }
  for (int64_t i = 0; i < nw; i++) wk[i] = (tree_key){wtrees[i], wnodes[i], i};
  qsort(wk, (size_t)nw, sizeof *wk, tree_key_cmp);
  for (int64_t i = 0; i < nw && ok; i++) {
    int64_t pos = tree_key_find(keys, n_nodes, wk[i].tree, wk[i].node), src = wk[i].pos;
    if (pos < 0) ok = tree_fail(e, "a weight names a missing node");
    else if (m->mode[pos] == TREE_LEAF) {
      if (wids[src] < INT32_MIN || wids[src] > INT32_MAX) ok = tree_fail(e, "target id out of range");
      m->w_node[m->nw] = (int32_t)pos, m->w_target[m->nw] = (int32_t)wids[src], m->w_value[m->nw] = weights[src];
      m->nw++;
    }
  }
  free(wk);
  if (ok) ok = tree_finish(m, e);
fail:
  free(values), free(weights), free(base), free(keys);
  if (!ok) tree_model_free(m);
  return ok;
}

/* A typed tensor attribute read as doubles (float, double) or int64 (uint8, int64). */
static const ir_tensor *tree_tensor(const ir_node *n, const char *name) {
  const ir_attr *a = ir_node_attr(n, name);
  return a && a->type == IR_ATTR_TENSOR && a->tensor && (a->tensor->data || !a->tensor->bytes) ? a->tensor : NULL;
}

/* TreeEnsemble (opset 5): interior nodes and leaves in separate arrays, children flagged as leaf
 * or node, BRANCH_MEMBER sets separated by NaN in membership_values. Flattened as nodes followed
 * by leaves. */
static bool tree_from_v5(const ir_node *n, int32_t xt, tree_model *m, tree_err *e) {
  memset(m, 0, sizeof *m);
  m->dbl = xt == ONNX_DOUBLE;
  const int64_t *feats, *tids, *tleaf, *fids, *fleaf, *miss, *roots, *targets;
  int64_t nn = (int64_t)ir_attr_ints(n, "nodes_featureids", &feats);
  if ((int64_t)ir_attr_ints(n, "nodes_truenodeids", &tids) != nn || (int64_t)ir_attr_ints(n, "nodes_trueleafs", &tleaf) != nn ||
      (int64_t)ir_attr_ints(n, "nodes_falsenodeids", &fids) != nn || (int64_t)ir_attr_ints(n, "nodes_falseleafs", &fleaf) != nn)
    return tree_fail(e, "node attributes differ in length");
  int64_t nmiss = (int64_t)ir_attr_ints(n, "nodes_missing_value_tracks_true", &miss);
  int64_t ntrees = (int64_t)ir_attr_ints(n, "tree_roots", &roots);
  int64_t nl = (int64_t)ir_attr_ints(n, "leaf_targetids", &targets);
  const ir_tensor *modes = tree_tensor(n, "nodes_modes"), *splits = tree_tensor(n, "nodes_splits");
  const ir_tensor *lw = tree_tensor(n, "leaf_weights"), *mv = tree_tensor(n, "membership_values");
  int32_t want = m->dbl ? ONNX_DOUBLE : ONNX_FLOAT;
  if (!modes || modes->dtype != ONNX_UINT8 || (int64_t)modes->bytes != nn) return tree_fail(e, "nodes_modes must be uint8, one per node");
  if (!splits || splits->dtype != want || (int64_t)(splits->bytes / ir_dtype_size(want)) != nn)
    return tree_fail(e, "nodes_splits must be %s, one per node", ir_dtype_name(want));
  if (!lw || lw->dtype != want || (int64_t)(lw->bytes / ir_dtype_size(want)) != nl)
    return tree_fail(e, "leaf_weights must be %s, one per leaf", ir_dtype_name(want));
  if (mv && mv->dtype != want) return tree_fail(e, "membership_values must be %s", ir_dtype_name(want));
  int64_t agg = ir_attr_int(n, "aggregate_function", 1), post = ir_attr_int(n, "post_transform", 0);
  if (agg < 0 || agg > 3) return tree_fail(e, "aggregate_function %lld", (long long)agg);
  /* ORT numbers post_transform 1 and 2 as LOGISTIC and SOFTMAX, the spec as SOFTMAX and LOGISTIC. */
  if (post == 1 || post == 2) return tree_fail(e, "post_transform %lld (ORT and the spec swap SOFTMAX and LOGISTIC)", (long long)post);
  if (post < 0 || post > 4) return tree_fail(e, "post_transform %lld", (long long)post);
  m->agg = (int)agg, m->post = post == 0 ? ML_POST_NONE : post == 3 ? ML_POST_SOFTMAX_ZERO : ML_POST_PROBIT;
  m->targets = ir_attr_int(n, "n_targets", 0);
  if (!tree_alloc_nodes(m, nn + nl, e)) goto fail;
  const uint8_t *md = modes->data;
  const double *sd = splits->data, *wd = lw->data, *md_d = mv ? mv->data : NULL;
  const float *sf = splits->data, *wf = lw->data, *mf = mv ? mv->data : NULL;
  int64_t nmv = mv ? (int64_t)(mv->bytes / ir_dtype_size(want)) : 0, cur = 0;
  m->sets = malloc(sizeof(double) * (size_t)(nmv + 1));
  m->roots = malloc(sizeof *m->roots * (size_t)(ntrees + 1));
  m->w_node = malloc(sizeof *m->w_node * (size_t)(nl + 1)), m->w_target = malloc(sizeof *m->w_target * (size_t)(nl + 1));
  m->w_value = malloc(sizeof *m->w_value * (size_t)(nl + 1));
  if (!m->sets || !m->roots || !m->w_node || !m->w_target || !m->w_value) { tree_fail(e, "out of memory"); goto fail; }
  for (int64_t i = 0; i < nn; i++) {
    if (md[i] > 6) { tree_fail(e, "node mode %d", md[i]); goto fail; }
    m->mode[i] = md[i] == 6 ? TREE_MEMBER : (uint8_t)(md[i] + TREE_LEQ);
    m->value[i] = m->dbl ? sd[i] : sf[i];
    m->miss[i] = i < nmiss && miss[i] == 1;
    if (feats[i] < 0 || feats[i] > INT32_MAX) { tree_fail(e, "feature id out of range"); goto fail; }
    m->feature[i] = (int32_t)feats[i];
    if (tids[i] < 0 || fids[i] < 0 || (tleaf[i] ? tids[i] >= nl : tids[i] >= nn) || (fleaf[i] ? fids[i] >= nl : fids[i] >= nn)) {
      tree_fail(e, "child index out of range");
      goto fail;
    }
    int64_t t = tleaf[i] ? nn + tids[i] : tids[i], f = fleaf[i] ? nn + fids[i] : fids[i]; /* in range: no overflow */
    m->tnext[i] = (int32_t)t, m->fnext[i] = (int32_t)f;
    if (m->mode[i] == TREE_MEMBER) { /* values up to the next NaN */
      m->set_off[i] = cur;
      while (cur < nmv && !isnan(m->dbl ? md_d[cur] : mf[cur])) m->sets[cur] = m->dbl ? md_d[cur] : mf[cur], cur++;
      m->set_len[i] = cur - m->set_off[i];
      cur++;
      if (m->set_len[i] == 0) { tree_fail(e, "an empty membership set"); goto fail; }
    }
  }
  for (int64_t l = 0; l < nl; l++) {
    m->mode[nn + l] = TREE_LEAF;
    if (targets[l] < 0 || targets[l] >= m->targets) { tree_fail(e, "leaf target id out of range"); goto fail; }
    m->w_node[l] = (int32_t)(nn + l), m->w_target[l] = (int32_t)targets[l], m->w_value[l] = m->dbl ? wd[l] : wf[l];
    m->value[nn + l] = m->w_value[l];
  }
  m->nw = nl;
  for (int64_t t = 0; t < ntrees; t++) {
    int64_t r = roots[t];
    if (r < 0 || r >= nn) { tree_fail(e, "tree root out of range"); goto fail; }
    /* A single-leaf tree is a root whose branches both reach one leaf; ORT then reads the leaf at
     * the root's own index, so only the case where the two coincide is taken. */
    if (tleaf[r] && fleaf[r] && tids[r] == fids[r]) {
      if (fids[r] != r) { tree_fail(e, "single-leaf tree whose leaf index differs from its root's"); goto fail; }
      m->roots[m->trees++] = (int32_t)(nn + fids[r]);
    } else {
      m->roots[m->trees++] = (int32_t)r;
    }
  }
  if (!tree_finish(m, e)) goto fail;
  return true;
fail:
  tree_model_free(m);
  return false;
}

/* ---- tree ensembles: evaluation ----------------------------------------------------------- */

/* A node's ensemble as prepare leaves it (prepare_tree, below): the parsed model and, kept with
 * the plan's constants, every table the evaluation gathers from, in the threshold type t. Built
 * once at Compile, read by every eager Run and trace. NULL arrays are tables the model needs not. */
typedef struct tree_prepared {
  tree_model m;
  mlxb_dtype t;
  mlxb_array *feature, *value, *tnext, *fnext, *roots; /* per node (roots: per tree) */
  mlxb_array *mode;                    /* per node, with mixed node modes */
  mlxb_array *miss;                    /* per node, when some branch tracks missing values */
  mlxb_array *sets, *set_off, *set_len; /* BRANCH_MEMBER (tree_member_tables) */
  mlxb_array *single;                  /* one target: a score per node (tree_single_table) */
  mlxb_array *score, *has;             /* several targets: per (node, target) (tree_weight_tables) */
  mlxb_array *bases;                   /* base_values, when there are some */
} tree_prepared;

static mlxb_array *tab_i32(mlxb_scope *s, const int32_t *v, int64_t n) { return mlxb_from_data(s, v, &n, 1, MLXB_I32); }

static mlxb_array *tab_real(mlxb_scope *s, const double *v, int64_t n, mlxb_dtype t) {
  return ml_host_reals(s, v, &n, 1, t);
}

static mlxb_binary_op tree_cmp_op(int mode) {
  switch (mode) {
    case TREE_LEQ: return MLXB_LESS_EQUAL;
    case TREE_LT: return MLXB_LESS;
    case TREE_GTE: return MLXB_GREATER_EQUAL;
    case TREE_GT: return MLXB_GREATER;
    case TREE_EQ: return MLXB_EQUAL;
    default: return MLXB_NOT_EQUAL;
  }
}

/* BRANCH_MEMBER sets sorted on the host, one run per node in one flat table, with each node's
 * offset and length (0 for other nodes). */
static int tree_member_tables(op_ctx *c, const tree_model *m, mlxb_dtype t, mlxb_array **sets, mlxb_array **off,
                              mlxb_array **len) {
  int64_t total = 0;
  for (int64_t i = 0; i < m->n; i++) total += m->set_len[i];
  double *vals = malloc(sizeof(double) * (size_t)(total + 1));
  int32_t *o = calloc((size_t)(m->n + 1), sizeof *o), *l = calloc((size_t)(m->n + 1), sizeof *l);
  ml_key *tmp = malloc(sizeof *tmp * (size_t)(m->max_set + 1));
  if (!vals || !o || !l || !tmp) {
    free(vals), free(o), free(l), free(tmp);
    return op_fail(c, "out of memory");
  }
  int64_t at = 0;
  for (int64_t i = 0; i < m->n; i++) {
    if (m->mode[i] != TREE_MEMBER) continue;
    for (int64_t k = 0; k < m->set_len[i]; k++) tmp[k] = (ml_key){0, m->sets[m->set_off[i] + k], k};
    qsort(tmp, (size_t)m->set_len[i], sizeof *tmp, ml_key_cmp_real);
    o[i] = (int32_t)at, l[i] = (int32_t)m->set_len[i];
    for (int64_t k = 0; k < m->set_len[i]; k++) vals[at++] = tmp[k].r;
  }
  vals[at] = 0.0; /* keeps the table non-empty */
  mlxb_scope *s = op_scope(c);
  int64_t nv = at + 1;
  *sets = ml_host_reals(s, vals, &nv, 1, t), *off = tab_i32(s, o, m->n), *len = tab_i32(s, l, m->n);
  free(vals), free(o), free(l), free(tmp);
  return op_check(c);
}

/* Whether v is in the node's sorted set [off, off + len): bisection over the widest set, every
 * probe clipped into the node's run. */
static mlxb_array *tree_member(mlxb_scope *s, mlxb_array *sets, mlxb_array *off, mlxb_array *len, int64_t widest,
                               mlxb_array *v) {
  mlxb_array *one = mlxb_scalar_i64(s, 1, MLXB_I32), *zero = mlxb_scalar_i64(s, 0, MLXB_I32);
  mlxb_array *last = mlxb_binary(s, MLXB_MAXIMUM, op_util_sub(s, len, one), zero), *pos = op_util_mul(s, len, zero);
  int64_t step = 1;
  while (step * 2 <= widest) step *= 2;
  for (; step >= 1; step /= 2) {
    mlxb_array *cand = op_util_add(s, pos, mlxb_scalar_i64(s, step, MLXB_I32));
    mlxb_array *probe = mlxb_take(s, sets, op_util_add(s, off, mlxb_clip(s, op_util_sub(s, cand, one), zero, last)), 0);
    mlxb_array *ok = mlxb_binary(s, MLXB_LOGICAL_AND, mlxb_binary(s, MLXB_LESS_EQUAL, cand, len), mlxb_binary(s, MLXB_LESS, probe, v));
    pos = mlxb_where(s, ok, cand, pos);
  }
  mlxb_array *found = mlxb_take(s, sets, op_util_add(s, off, mlxb_clip(s, pos, zero, last)), 0);
  return mlxb_binary(s, MLXB_LOGICAL_AND, mlxb_binary(s, MLXB_GREATER, len, zero), mlxb_binary(s, MLXB_EQUAL, found, v));
}

/* The leaf every row reaches in every tree: [rows, trees] int32 node positions. x is [rows,
 * features] in the threshold type; each of `depth` steps gathers the node's feature, threshold
 * and children (leaves point to themselves, so finished rows stay). */
static mlxb_array *tree_leaves(op_ctx *c, const tree_prepared *tp, mlxb_array *x) {
  mlxb_scope *s = op_scope(c);
  const tree_model *m = &tp->m;
  int64_t rows = mlxb_dim(x, 0), nt[2] = {rows, m->trees};
  mlxb_array *feature = tp->feature, *value = tp->value, *tnext = tp->tnext, *fnext = tp->fnext, *mode = tp->mode;
  mlxb_array *miss = tp->miss, *sets = tp->sets, *set_off = tp->set_off, *set_len = tp->set_len;
  mlxb_array *node = mlxb_broadcast_to(s, op_util_reshape2(s, tp->roots, 1, m->trees), nt, 2);
  for (int64_t step = 0; step < m->depth; step++) {
    mlxb_array *v = mlxb_take_along_axis(s, x, mlxb_take(s, feature, node, 0), 1);
    mlxb_array *th = mlxb_take(s, value, node, 0), *cond = NULL;
    mlxb_array *md = m->modes & (m->modes - 1) ? mlxb_take(s, mode, node, 0) : NULL; /* only with mixed modes */
    for (int k = TREE_LEQ; k < TREE_MODES; k++) {
      if (!(m->modes & (1u << k))) continue;
      mlxb_array *ck;
      if (k == TREE_MEMBER) {
        ck = tree_member(s, sets, mlxb_take(s, set_off, node, 0), mlxb_take(s, set_len, node, 0), m->max_set, v);
      } else {
        ck = mlxb_binary(s, tree_cmp_op(k), v, th);
      }
      cond = !cond || !md ? ck : mlxb_where(s, mlxb_binary(s, MLXB_EQUAL, md, mlxb_scalar_i64(s, k, MLXB_U8)), ck, cond);
    }
    if (!cond) break; /* only leaves */
    if (miss)
      cond = mlxb_binary(s, MLXB_LOGICAL_OR, cond,
                         mlxb_binary(s, MLXB_LOGICAL_AND, mlxb_take(s, miss, node, 0), mlxb_unary(s, MLXB_ISNAN, v)));
    node = mlxb_where(s, cond, mlxb_take(s, tnext, node, 0), mlxb_take(s, fnext, node, 0));
  }
  return node;
}

/* Per-(node, target) tables of the leaf weights: their sum (or min/max) in the threshold type and
 * whether there is any; a target many leaves never name keeps has = 0. */
static int tree_weight_tables(op_ctx *c, const tree_model *m, mlxb_dtype t, mlxb_array **score, mlxb_array **has) {
  int64_t k = m->targets, cells;
  if (__builtin_mul_overflow(m->n, k, &cells) || cells > INT32_MAX)
    return op_fail(c, "%lld nodes x %lld targets: more cells than one MLX axis holds", (long long)m->n, (long long)k);
  double *sc = calloc((size_t)(cells ? cells : 1), sizeof *sc);
  float *scf = calloc((size_t)(cells ? cells : 1), sizeof *scf);
  uint8_t *hs = calloc((size_t)(cells ? cells : 1), 1);
  if (!sc || !scf || !hs) {
    free(sc), free(scf), free(hs);
    return op_fail(c, "out of memory");
  }
  for (int64_t i = 0; i < m->nw; i++) {
    int64_t cell = (int64_t)m->w_node[i] * k + m->w_target[i];
    double w = m->w_value[i];
    if (!m->dbl) w = (float)w;
    if (!hs[cell]) sc[cell] = w, scf[cell] = (float)w;
    else if (m->agg == TREE_MIN) sc[cell] = w < sc[cell] ? w : sc[cell];
    else if (m->agg == TREE_MAX) sc[cell] = w > sc[cell] ? w : sc[cell];
    else sc[cell] += w, scf[cell] += (float)w; /* float sums in float, as ORT accumulates */
    hs[cell] = 1;
  }
  if (!m->dbl && (m->agg == TREE_SUM || m->agg == TREE_AVERAGE))
    for (int64_t i = 0; i < cells; i++) sc[i] = scf[i];
  mlxb_scope *s = op_scope(c);
  int64_t d[2] = {m->n, k};
  *score = ml_host_reals(s, sc, d, 2, t);
  *has = mlxb_from_data(s, hs, d, 2, MLXB_BOOL);
  free(sc), free(scf), free(hs);
  return op_check(c);
}

/* One target's score per node: its leaf's first weight, or its node value when it has none. */
static mlxb_array *tree_single_table(op_ctx *c, const tree_model *m, mlxb_dtype t) {
  double *u = malloc(sizeof(double) * (size_t)(m->n + 1));
  uint8_t *seen = calloc((size_t)(m->n + 1), 1);
  if (!u || !seen) {
    free(u), free(seen);
    return op_fail(c, "out of memory"), NULL;
  }
  for (int64_t i = 0; i < m->n; i++) u[i] = m->value[i];
  for (int64_t i = 0; i < m->nw; i++)
    if (!seen[m->w_node[i]]) u[m->w_node[i]] = m->w_value[i], seen[m->w_node[i]] = 1;
  mlxb_array *table = tab_real(op_scope(c), u, m->n, t);
  free(u), free(seen);
  return table;
}

/* The aggregate over trees [rows, targets] before base values, and (for two or more targets)
 * whether any reached leaf names each target. One target follows ORT's single-score path: each
 * leaf contributes its first weight, or its node value when it has none. */
static int tree_aggregate(op_ctx *c, const tree_prepared *tp, mlxb_array *leaves, mlxb_array **out, mlxb_array **has) {
  mlxb_scope *s = op_scope(c);
  const tree_model *m = &tp->m;
  mlxb_dtype t = tp->t;
  int ax = 1;
  *has = NULL;
  if (m->targets == 1) {
    mlxb_array *vals = mlxb_take(s, tp->single, leaves, 0);
    mlxb_reduce_op op = m->agg == TREE_MIN ? MLXB_RMIN : m->agg == TREE_MAX ? MLXB_RMAX : MLXB_RSUM;
    *out = mlxb_reduce(s, op, vals, &ax, 1, true);
    return op_check(c);
  }
  mlxb_array *g = mlxb_take(s, tp->score, leaves, 0), *h = mlxb_take(s, tp->has, leaves, 0); /* [rows, trees, targets] */
  if (m->agg == TREE_MIN) g = mlxb_where(s, h, g, mlxb_scalar_f64(s, INFINITY, t));
  if (m->agg == TREE_MAX) g = mlxb_where(s, h, g, mlxb_scalar_f64(s, -INFINITY, t));
  if (m->agg == TREE_SUM || m->agg == TREE_AVERAGE) g = mlxb_where(s, h, g, mlxb_scalar_f64(s, 0.0, t));
  mlxb_reduce_op op = m->agg == TREE_MIN ? MLXB_RMIN : m->agg == TREE_MAX ? MLXB_RMAX : MLXB_RSUM;
  *out = mlxb_reduce(s, op, g, &ax, 1, false);
  *has = mlxb_reduce(s, MLXB_RANY, h, &ax, 1, false);
  return op_check(c);
}

/* The input as [rows, features] in the threshold type, with every feature id in range. */
static mlxb_array *tree_input(op_ctx *c, const tree_model *m, mlxb_dtype t) {
  int64_t rows, feats;
  mlxb_array *x = ml_rows(c, t, &rows, &feats);
  if (!x) return NULL;
  if (m->max_feature >= feats)
    return op_fail(c, "the trees read feature %d, the input has %lld", m->max_feature, (long long)feats), NULL;
  return x;
}

/* Regressor scores as ORT finalizes them: one target adds base_values[0] when there is exactly
 * one and applies PROBIT only; several targets add base_values (one per target), output 0 for a
 * target no reached leaf names, then apply the transform over the row. */
static mlxb_array *tree_regression_scores(op_ctx *c, const tree_prepared *tp, mlxb_array *agg, mlxb_array *has) {
  mlxb_scope *s = op_scope(c);
  const tree_model *m = &tp->m;
  mlxb_dtype t = tp->t;
  mlxb_array *z = agg;
  if (m->agg == TREE_AVERAGE) z = op_util_div(s, z, mlxb_scalar_f64(s, (double)m->trees, t));
  if (m->targets == 1) {
    if (m->nbase == 1) z = op_util_add(s, z, mlxb_scalar_f64(s, m->bases[0], t));
    return m->post == ML_POST_PROBIT ? op_util_cast(s, ml_probit(s, op_util_cast(s, z, MLXB_F32)), t) : z;
  }
  if (m->nbase == m->targets) z = op_util_add(s, z, tp->bases);
  z = mlxb_where(s, has, z, mlxb_scalar_f64(s, 0.0, t));
  return ml_post_rows(s, z, m->post);
}

static bool claim_tree_common(claim_ctx *c, tree_model *m, bool ok, tree_err *e) {
  if (!ok) return claim_decline(c, "%s", e->msg);
  tree_model_free(m);
  return ml_claim_rows_rank(c);
}

static bool claim_tree_regressor(claim_ctx *c, const op_def *def) {
  tree_model m;
  tree_err e;
  bool ok = tree_from_v3(c->node, false, claim_input_dtype(c, 0) == ONNX_DOUBLE, &m, &e);
  return claim_tree_common(c, &m, ok, &e);
}

static bool claim_tree_ensemble(claim_ctx *c, const op_def *def) {
  tree_model m;
  tree_err e;
  bool ok = tree_from_v5(c->node, claim_input_dtype(c, 0), &m, &e);
  return claim_tree_common(c, &m, ok, &e);
}

/* TreeEnsembleRegressor (float output) and TreeEnsemble (output of X's dtype). */
static int lower_tree_regressor(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const tree_prepared *tp = op_prepared(c);
  if (!tp) return op_fail(c, "the ensemble was not prepared");
  int32_t xt = op_input_dtype(c, 0);
  bool v5 = strcmp(op_node(c)->op_type, "TreeEnsemble") == 0;
  /* double work needs no CPU forcing: double inputs are declined on the GPU */
  mlxb_array *x = tree_input(c, &tp->m, tp->t), *agg, *has;
  if (!x || tree_aggregate(c, tp, tree_leaves(c, tp, x), &agg, &has)) return -1;
  mlxb_array *z = tree_regression_scores(c, tp, agg, has);
  return op_set_output(c, 0, op_util_cast(s, z, v5 ? (mlxb_dtype)op_mlx_dtype(xt) : MLXB_F32));
}

/* ---- TreeEnsembleClassifier --------------------------------------------------------------- */

/* Two classes are "binary" in ORT when the weights name a single class id. */
static bool tree_binary_case(const tree_model *m, bool *all_positive) {
  bool one_id = true;
  *all_positive = true;
  for (int64_t i = 0; i < m->nw; i++) {
    one_id = one_id && m->w_target[i] == m->w_target[0];
    *all_positive = *all_positive && m->w_value[i] >= 0;
  }
  return m->targets == 2 && one_id;
}

static bool claim_tree_classifier(claim_ctx *c, const op_def *def) {
  if (ml_attr_count(c->node, "classlabels_strings") > 0) return claim_decline(c, "string class labels (string output)");
  tree_model m;
  tree_err e;
  if (!tree_from_v3(c->node, true, claim_input_dtype(c, 0) == ONNX_DOUBLE, &m, &e)) return claim_decline(c, "%s", e.msg);
  bool all_pos, binary = tree_binary_case(&m, &all_pos);
  int64_t k = m.targets, nb = m.nbase;
  ml_post post = m.post;
  tree_model_free(&m);
  if (k < 2) return claim_decline(c, "fewer than two classes");
  if (k > 2 && nb != 0 && nb != k) return claim_decline(c, "base_values of another length than the classes");
  if (k == 2 && nb > 2) return claim_decline(c, "more than two base_values for two classes");
  if (k == 2 && nb != 2 && post == ML_POST_PROBIT)
    return claim_decline(c, "binary PROBIT leaves ORT's second score column unwritten");
  if (k == 2 && nb == 1 && !binary)
    return claim_decline(c, "two class ids with one base value leave ORT's second score column unwritten");
  return ml_claim_rows_rank(c);
}

/* The first class with a score that beats every earlier one under '>' (ORT's get_max_weight),
 * counting only classes some reached leaf names; 0 when none does. */
static mlxb_array *tree_best_class(mlxb_scope *s, mlxb_array *z, mlxb_array *has, int64_t k) {
  int64_t n = mlxb_dim(z, 0);
  mlxb_array *best = mlxb_full(s, &n, 1, mlxb_scalar_i64(s, -1, MLXB_I32), MLXB_I32), *bw = ml_column(s, z, 0);
  for (int64_t j = 0; j < k; j++) {
    mlxb_array *zj = ml_column(s, z, j), *hj = ml_column(s, has, j);
    mlxb_array *first = mlxb_binary(s, MLXB_LESS, best, mlxb_scalar_i64(s, 0, MLXB_I32));
    mlxb_array *take = mlxb_binary(s, MLXB_LOGICAL_AND, hj, mlxb_binary(s, MLXB_LOGICAL_OR, first, mlxb_binary(s, MLXB_GREATER, zj, bw)));
    best = mlxb_where(s, take, mlxb_scalar_i64(s, j, MLXB_I32), best);
    bw = mlxb_where(s, take, zj, bw);
  }
  return mlxb_binary(s, MLXB_MAXIMUM, best, mlxb_scalar_i64(s, 0, MLXB_I32));
}

/* Two classes, as ORT's TreeAggregatorClassifier finalizes them: with two base values a row
 * that reached class 1 scores base[1] + score[0] against its negation; with fewer, a row that
 * never reached class 1 has a single score widened to two columns. The label compares the
 * positive score with 0.5 (all weights >= 0) or 0; without a single class id it is 1 or 0. */
static int tree_binary_outputs(op_ctx *c, const tree_model *m, const int64_t *labels, mlxb_array *agg, mlxb_array *has,
                               mlxb_dtype t, mlxb_array **y, mlxb_array **z) {
  mlxb_scope *s = op_scope(c);
  int64_t n = mlxb_dim(agg, 0);
  mlxb_array *s0 = ml_column(s, agg, 0), *s1 = ml_column(s, agg, 1), *h0 = ml_column(s, has, 0), *h1 = ml_column(s, has, 1);
  mlxb_array *zero = mlxb_scalar_f64(s, 0.0, t), *two_cols;
  if (m->nbase == 2) {
    mlxb_array *t1 = op_util_add(s, mlxb_scalar_f64(s, m->base[1], t), s0);
    mlxb_array *n1 = op_util_add(s, s1, mlxb_scalar_f64(s, m->base[1], t)), *n0 = op_util_add(s, s0, mlxb_scalar_f64(s, m->base[0], t));
    s1 = mlxb_where(s, h1, t1, n1), s0 = mlxb_where(s, h1, mlxb_unary(s, MLXB_NEG, t1), n0);
    two_cols = mlxb_full(s, &n, 1, mlxb_scalar_i64(s, 1, MLXB_BOOL), MLXB_BOOL);
  } else {
    if (m->nbase == 1) s0 = op_util_add(s, s0, mlxb_scalar_f64(s, m->base[0], t));
    two_cols = h1;
  }
  mlxb_array *pos = mlxb_where(s, h1, s1, mlxb_where(s, h0, s0, zero));
  bool all_pos, binary = tree_binary_case(m, &all_pos);
  if (binary) {
    mlxb_array *win = mlxb_binary(s, MLXB_GREATER, pos, mlxb_scalar_f64(s, all_pos ? 0.5 : 0.0, t));
    *y = mlxb_where(s, win, mlxb_scalar_i64(s, labels[1], MLXB_I64), mlxb_scalar_i64(s, labels[0], MLXB_I64));
  } else {
    *y = mlxb_where(s, mlxb_binary(s, MLXB_GREATER, pos, zero), mlxb_scalar_i64(s, 1, MLXB_I64), mlxb_scalar_i64(s, 0, MLXB_I64));
  }
  mlxb_array *v0 = op_util_cast(s, mlxb_where(s, h0, s0, zero), MLXB_F32), *v1 = op_util_cast(s, mlxb_where(s, h1, s1, zero), MLXB_F32);
  mlxb_array *both = ml_post_rows(s, ml_concat2(s, op_util_reshape2(s, v0, n, 1), op_util_reshape2(s, v1, n, 1), 1), m->post);
  mlxb_array *one = ml_second_class(s, op_util_reshape2(s, v0, n, 1), binary && all_pos ? 0 : 2, m->post);
  *z = mlxb_where(s, op_util_reshape2(s, two_cols, n, 1), both, one);
  return op_check(c);
}

static int lower_tree_classifier(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const tree_prepared *tp = op_prepared(c);
  if (!tp) return op_fail(c, "the ensemble was not prepared");
  const tree_model *m = &tp->m;
  mlxb_dtype t = tp->t;
  const int64_t *labels;
  ir_attr_ints(op_node(c), "classlabels_int64s", &labels);
  mlxb_array *x = tree_input(c, m, t), *agg, *has, *y = NULL, *z = NULL;
  if (!x || tree_aggregate(c, tp, tree_leaves(c, tp, x), &agg, &has)) return -1;
  if (m->targets == 2) {
    if (tree_binary_outputs(c, m, labels, agg, has, t, &y, &z)) return -1;
  } else {
    if (m->nbase == m->targets) { /* every class gets its base value and counts as reached */
      int64_t dims[2] = {mlxb_dim(agg, 0), m->nbase};
      mlxb_array *base = tp->bases;
      agg = mlxb_where(s, has, op_util_add(s, agg, base), mlxb_broadcast_to(s, op_util_reshape2(s, base, 1, m->nbase), dims, 2));
      has = mlxb_full(s, dims, 2, mlxb_scalar_i64(s, 1, MLXB_BOOL), MLXB_BOOL);
    }
    y = ml_pick_labels(s, labels, m->targets, tree_best_class(s, agg, has, m->targets));
    z = ml_post_rows(s, op_util_cast(s, mlxb_where(s, has, agg, mlxb_scalar_f64(s, 0.0, t)), MLXB_F32), m->post);
  }
  if (op_set_output(c, 0, y)) return -1;
  return op_has_output(c, 1) ? op_set_output(c, 1, op_util_cast(s, z, MLXB_F32)) : 0;
}

/* ---- prepare: the model parsed and its tables built once per node, at Compile ----------- */

static void tree_release(void *state) {
  tree_prepared *tp = state;
  if (!tp) return;
  tree_model_free(&tp->m);
  free(tp);
}

/* Every table the evaluation gathers from, as MLX arrays kept with the plan's constants. */
static int tree_prepare_tables(op_ctx *c, tree_prepared *tp) {
  mlxb_scope *s = op_scope(c);
  tree_model *m = &tp->m;
  mlxb_dtype t = tp->t;
  tp->feature = op_prepare_keep(c, tab_i32(s, m->feature, m->n));
  tp->value = op_prepare_keep(c, tab_real(s, m->value, m->n, t));
  tp->tnext = op_prepare_keep(c, tab_i32(s, m->tnext, m->n));
  tp->fnext = op_prepare_keep(c, tab_i32(s, m->fnext, m->n));
  tp->roots = op_prepare_keep(c, tab_i32(s, m->roots, m->trees));
  if (!tp->feature || !tp->value || !tp->tnext || !tp->fnext || !tp->roots) return -1;
  if (m->modes & (m->modes - 1)) /* node modes are gathered only when they are mixed */
    if (!(tp->mode = op_prepare_keep(c, mlxb_from_data(s, m->mode, &m->n, 1, MLXB_U8)))) return -1;
  bool any_miss = false;
  for (int64_t i = 0; i < m->n; i++) any_miss = any_miss || (m->miss[i] && m->mode[i] != TREE_LEAF);
  if (any_miss && !(tp->miss = op_prepare_keep(c, mlxb_from_data(s, m->miss, &m->n, 1, MLXB_BOOL)))) return -1;
  if (m->modes & (1u << TREE_MEMBER)) {
    mlxb_array *sets = NULL, *off = NULL, *len = NULL;
    if (tree_member_tables(c, m, t, &sets, &off, &len)) return -1;
    tp->sets = op_prepare_keep(c, sets), tp->set_off = op_prepare_keep(c, off), tp->set_len = op_prepare_keep(c, len);
    if (!tp->sets || !tp->set_off || !tp->set_len) return -1;
  }
  if (m->targets == 1) {
    if (!(tp->single = op_prepare_keep(c, tree_single_table(c, m, t)))) return -1;
  } else {
    mlxb_array *score = NULL, *has = NULL;
    if (tree_weight_tables(c, m, t, &score, &has)) return -1;
    tp->score = op_prepare_keep(c, score), tp->has = op_prepare_keep(c, has);
    if (!tp->score || !tp->has) return -1;
  }
  if (m->nbase > 0 && !(tp->bases = op_prepare_keep(c, tab_real(s, m->bases, m->nbase, t)))) return -1;
  return 0;
}

/* Every row of the family: the model as the claim parsed it (the claim has just passed again at
 * Compile, so parsing fails here only for want of memory) and its tables. */
static int prepare_tree(op_ctx *c, const op_def *def, void **state) {
  const ir_node *n = op_node(c);
  int32_t xt = op_input_dtype(c, 0);
  tree_prepared *tp = calloc(1, sizeof *tp);
  if (!tp) return op_fail(c, "out of memory");
  *state = tp;
  tree_err e;
  bool ok = strcmp(n->op_type, "TreeEnsemble") == 0
                ? tree_from_v5(n, xt, &tp->m, &e)
                : tree_from_v3(n, strcmp(n->op_type, "TreeEnsembleClassifier") == 0, xt == ONNX_DOUBLE, &tp->m, &e);
  if (!ok) return op_fail(c, "%s", e.msg);
  tp->t = tp->m.dbl ? MLXB_F64 : MLXB_F32;
  return tree_prepare_tables(c, tp);
}

/* ---- the table ---------------------------------------------------------------------------- */

static const op_def defs[] = {
    OP_ROW(ML, "TreeEnsembleRegressor", 1, 3, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_F32 | DT_F64,
           .claim = claim_tree_regressor, .lower = lower_tree_regressor, .prepare = prepare_tree,
           .release = tree_release,
           .doc = "float/double X (double thresholds and sums for double, as ORT); BRANCH_LEQ/LT/GTE/GT/EQ/NEQ, "
                  "missing values tracking true; SUM/AVERAGE/MIN/MAX; base_values (a target no reached leaf names "
                  "gives 0, as ORT); every post_transform (one target: PROBIT only, leaves without weights give "
                  "their node value, as ORT); *_as_tensor attributes of the threshold type. Declined: trees split "
                  "into non-contiguous runs, cycles, depth > 4096"),
    OP_ROW(ML, "TreeEnsembleClassifier", 1, 3, .inputs = {1, 1}, .outputs = {2, 2}, .dtypes = DT_ML_IN,
           .claim = claim_tree_classifier, .lower = lower_tree_classifier, .prepare = prepare_tree,
           .release = tree_release,
           .doc = "float/double/int32/int64 X; int64 labels; node modes and missing tracking as the regressor; "
                  "scores summed with base_values and ORT's binary-class rules (one class id, all-positive weights, "
                  "widened single scores). Declined: classlabels_strings, one class, binary PROBIT or one base value "
                  "with two class ids (ORT leaves a column unwritten)"),
    OP_ROW(ML, "TreeEnsemble", 5, 5, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_F32 | DT_F64,
           .claim = claim_tree_ensemble, .lower = lower_tree_regressor, .prepare = prepare_tree,
           .release = tree_release,
           .doc = "float/double X and output; all node modes including BRANCH_MEMBER sets; AVERAGE/SUM/MIN/MAX; "
                  "post_transform NONE, SOFTMAX_ZERO, PROBIT. Declined: post_transform 1 and 2 (ORT swaps SOFTMAX "
                  "and LOGISTIC against the spec), single-leaf trees whose leaf index differs from the root index"),
};

OPS_FAMILY(ml_trees, defs);
