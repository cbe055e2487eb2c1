/* Traditional-ML operators of the ai.onnx.ml domain on numeric tensors (linear models, SVMs, tree
 * ensembles, encoders and scalers). ONNX leaves much of their arithmetic open, so every formula
 * here follows ORT's CPU kernels step by step (float32 scores, their post-transforms, their
 * tie-breaking and their binary-class quirks); forms where ORT and the spec disagree, or where ORT
 * reads uninitialized memory, are declined. String tensors, maps and sequences are not MLX arrays
 * and stay with ORT. */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"

#define ML_MAX_RANK 8
#define ML_SQRT2_F 1.41421356f
#define ML_PI_F 3.14159265358979323846f
#define ML_MAX_PROB_CLASSES 32 /* SVM pairwise coupling: up to 100 sweeps of O(classes) ops each */

/* ---- small helpers ------------------------------------------------------------------------ */

static mlxb_array *f32(mlxb_scope *s, double v) { return mlxb_scalar_f64(s, v, MLXB_F32); }
static mlxb_array *add(mlxb_scope *s, mlxb_array *a, mlxb_array *b) { return mlxb_binary(s, MLXB_ADD, a, b); }
static mlxb_array *sub(mlxb_scope *s, mlxb_array *a, mlxb_array *b) { return mlxb_binary(s, MLXB_SUB, a, b); }
static mlxb_array *mul(mlxb_scope *s, mlxb_array *a, mlxb_array *b) { return mlxb_binary(s, MLXB_MUL, a, b); }
static mlxb_array *dvd(mlxb_scope *s, mlxb_array *a, mlxb_array *b) { return mlxb_binary(s, MLXB_DIV, a, b); }
static mlxb_array *cmp(mlxb_scope *s, mlxb_binary_op op, mlxb_array *a, mlxb_array *b) { return mlxb_binary(s, op, a, b); }

static mlxb_array *cast(mlxb_scope *s, mlxb_array *x, mlxb_dtype t) {
  if (!x || mlxb_type(x) == t) return x;
  return mlxb_astype(s, x, t);
}

static mlxb_array *zero_of(mlxb_scope *s, mlxb_dtype t) {
  return t == MLXB_F16 || t == MLXB_BF16 || t == MLXB_F32 || t == MLXB_F64 ? mlxb_scalar_f64(s, 0.0, t) : mlxb_scalar_i64(s, 0, t);
}

static mlxb_array *vec_f32(mlxb_scope *s, const float *v, int64_t n) { return mlxb_from_data(s, v, &n, 1, MLXB_F32); }
static mlxb_array *vec_i64(mlxb_scope *s, const int64_t *v, int64_t n) { return mlxb_from_data(s, v, &n, 1, MLXB_I64); }

/* Host doubles as an array of float type t, converted on the host: a GPU scope has no float64
 * kernels to cast with. */
static mlxb_array *host_reals(mlxb_scope *s, const double *v, const int64_t *dims, int rank, mlxb_dtype t) {
  if (t == MLXB_F64) return mlxb_from_data(s, v, dims, rank, MLXB_F64);
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= dims[i];
  float *f = malloc(sizeof(float) * (size_t)(n ? n : 1));
  if (!f) {
    mlxb_set_error(s, "out of memory");
    return NULL;
  }
  for (int64_t i = 0; i < n; i++) f[i] = (float)v[i];
  mlxb_array *a = mlxb_from_data(s, f, dims, rank, MLXB_F32);
  free(f);
  return cast(s, a, t);
}

static mlxb_array *reshape2(mlxb_scope *s, mlxb_array *x, int64_t a, int64_t b) {
  int64_t d[2] = {a, b};
  return mlxb_reshape(s, x, d, 2);
}

static mlxb_array *reshape1(mlxb_scope *s, mlxb_array *x, int64_t a) { return mlxb_reshape(s, x, &a, 1); }

/* Column k of a [n, m] array, as [n]. */
static mlxb_array *column(mlxb_scope *s, mlxb_array *x, int64_t k) {
  int64_t n = mlxb_dim(x, 0);
  int64_t start[2] = {0, k}, stop[2] = {n, k + 1}, step[2] = {1, 1};
  return reshape1(s, mlxb_slice(s, x, start, stop, step), n);
}

static mlxb_array *concat2(mlxb_scope *s, mlxb_array *a, mlxb_array *b, int axis) {
  const mlxb_array *xs[2] = {a, b};
  return mlxb_concat(s, xs, 2, axis);
}

static int64_t attr_count(const ir_node *n, const char *name) {
  const ir_attr *a = ir_node_attr(n, name);
  return a ? (int64_t)a->n : 0;
}

static bool attr_has(const ir_node *n, const char *name) { return ir_node_attr(n, name) != NULL; }

/* The input's rank when the graph knows it, else -1. */
static int claim_rank(const claim_ctx *c, int i) {
  const ir_value *v = claim_input(c, i);
  return v ? v->rank : -1;
}

/* ORT's ml kernels see X as rows of features: rank 1 is one row, rank 2 is [rows, features].
 * Returns X as [n, f] of dtype t, or NULL with the failure recorded. */
static mlxb_array *ml_rows(op_ctx *c, mlxb_dtype t, int64_t *n, int64_t *f) {
  mlxb_array *x = op_input(c, 0);
  if (!x) return op_check(c) ? NULL : (op_fail(c, "input 0 is missing"), NULL);
  int r = mlxb_ndim(x);
  if (r < 1 || r > 2) return op_fail(c, "input rank %d (expected 1 or 2)", r), NULL;
  *n = r == 1 ? 1 : mlxb_dim(x, 0);
  *f = mlxb_dim(x, r - 1);
  return cast(op_scope(c), reshape2(op_scope(c), x, *n, *f), t);
}

/* ---- post-transforms, as ORT's ml_common.h computes them (float32) ------------------------ */

typedef enum ml_post { ML_POST_NONE, ML_POST_LOGISTIC, ML_POST_SOFTMAX, ML_POST_SOFTMAX_ZERO, ML_POST_PROBIT, ML_POST_BAD } ml_post;

static ml_post ml_post_parse(const char *p) {
  static const char *const names[] = {"NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"};
  for (int i = 0; i < ML_POST_BAD; i++)
    if (strcmp(p, names[i]) == 0) return (ml_post)i;
  return ML_POST_BAD;
}

static ml_post ml_post_of(const ir_node *n) { return ml_post_parse(ir_attr_string(n, "post_transform", "NONE")); }

/* 1 / (1 + exp(-|x|)), mirrored for x < 0. */
static mlxb_array *ml_logistic(mlxb_scope *s, mlxb_array *x) {
  mlxb_array *e = mlxb_unary(s, MLXB_EXP, mlxb_unary(s, MLXB_NEG, mlxb_unary(s, MLXB_ABS, x)));
  mlxb_array *v = dvd(s, f32(s, 1.0), add(s, f32(s, 1.0), e));
  return mlxb_where(s, cmp(s, MLXB_LESS, x, f32(s, 0.0)), sub(s, f32(s, 1.0), v), v);
}

/* sqrt(2) * ErfInv(2p - 1) with ORT's closed-form ErfInv approximation (a = 0.147). */
static mlxb_array *ml_probit(mlxb_scope *s, mlxb_array *p) {
  const float a = 0.147f;
  const float c1 = 2.0f / (ML_PI_F * a), c2 = 1.0f / a;
  mlxb_array *x = sub(s, mul(s, f32(s, 2.0), p), f32(s, 1.0));
  mlxb_array *sgn = mlxb_where(s, cmp(s, MLXB_LESS, x, f32(s, 0.0)), f32(s, -1.0), f32(s, 1.0));
  mlxb_array *lg = mlxb_unary(s, MLXB_LOG, mul(s, sub(s, f32(s, 1.0), x), add(s, f32(s, 1.0), x)));
  mlxb_array *v = add(s, f32(s, c1), mul(s, f32(s, 0.5), lg));
  mlxb_array *v2 = mul(s, f32(s, c2), lg);
  mlxb_array *v3 = add(s, mlxb_unary(s, MLXB_NEG, v), mlxb_unary(s, MLXB_SQRT, sub(s, mul(s, v, v), v2)));
  return mul(s, f32(s, ML_SQRT2_F), mul(s, sgn, mlxb_unary(s, MLXB_SQRT, v3)));
}

/* The row maximum as ORT's loops find it: starting at -FLT_MAX, NaN never taken. */
static mlxb_array *ml_row_max(mlxb_scope *s, mlxb_array *x) {
  int ax = -1;
  mlxb_array *lo = f32(s, -FLT_MAX);
  mlxb_array *clean = mlxb_where(s, mlxb_unary(s, MLXB_ISNAN, x), lo, x);
  return mlxb_binary(s, MLXB_MAXIMUM, mlxb_reduce(s, MLXB_RMAX, clean, &ax, 1, true), lo);
}

static mlxb_array *ml_softmax(mlxb_scope *s, mlxb_array *x) {
  int ax = -1;
  mlxb_array *e = mlxb_unary(s, MLXB_EXP, sub(s, x, ml_row_max(s, x)));
  return dvd(s, e, mlxb_reduce(s, MLXB_RSUM, e, &ax, 1, true));
}

/* Softmax over the non-zero scores; zeros become zero * exp(-max) and stay out of the sum. ORT
 * computes in float32 even for double scores, except the products with zeros and the final
 * division, which are double there. */
static mlxb_array *ml_softmax_zero(mlxb_scope *s, mlxb_array *x) {
  int ax = -1;
  mlxb_dtype t = mlxb_type(x);
  mlxb_array *xf = cast(s, x, MLXB_F32), *vmax = ml_row_max(s, xf);
  mlxb_array *nz = mlxb_binary(s, MLXB_LOGICAL_OR, cmp(s, MLXB_GREATER, xf, f32(s, 1e-7f)), cmp(s, MLXB_LESS, xf, f32(s, -1e-7f)));
  mlxb_array *e = mlxb_unary(s, MLXB_EXP, sub(s, xf, vmax));
  mlxb_array *zero = mul(s, x, cast(s, mlxb_unary(s, MLXB_EXP, mlxb_unary(s, MLXB_NEG, vmax)), t));
  mlxb_array *sum = mlxb_reduce(s, MLXB_RSUM, mlxb_where(s, nz, e, f32(s, 0.0)), &ax, 1, true);
  return dvd(s, mlxb_where(s, nz, cast(s, e, t), zero), cast(s, sum, t));
}

/* The transform of rows of two or more scores (last axis), in float32 as ORT computes it
 * whatever the score type; the result keeps z's dtype. */
static mlxb_array *ml_post_rows(mlxb_scope *s, mlxb_array *z, ml_post post) {
  mlxb_dtype t = mlxb_type(z);
  switch (post) {
    case ML_POST_LOGISTIC: return cast(s, ml_logistic(s, cast(s, z, MLXB_F32)), t);
    case ML_POST_SOFTMAX: return cast(s, ml_softmax(s, cast(s, z, MLXB_F32)), t);
    case ML_POST_SOFTMAX_ZERO: return ml_softmax_zero(s, z);
    case ML_POST_PROBIT: return cast(s, ml_probit(s, cast(s, z, MLXB_F32)), t);
    default: return z;
  }
}

/* ORT's transform of one score per row: only PROBIT applies. */
static mlxb_array *ml_post_single(mlxb_scope *s, mlxb_array *z, ml_post post) {
  return post == ML_POST_PROBIT ? ml_probit(s, z) : z;
}

/* A one-score row [n, 1] widened to two classes as ORT does: [1 - p, p] with p the score, or its
 * logistic under LOGISTIC (modes 0 and 1; other transforms are not applied), or for mixed-sign
 * weights (modes 2 and 3) [-s, s] or, under LOGISTIC, the logistic of both. */
static mlxb_array *ml_second_class(mlxb_scope *s, mlxb_array *z, int mode, ml_post post) {
  if (mode <= 1) {
    if (post == ML_POST_LOGISTIC) z = ml_logistic(s, z);
    return concat2(s, sub(s, f32(s, 1.0), z), z, 1);
  }
  if (post == ML_POST_LOGISTIC) return concat2(s, ml_logistic(s, mlxb_unary(s, MLXB_NEG, z)), ml_logistic(s, z), 1);
  return concat2(s, mlxb_unary(s, MLXB_NEG, z), z, 1);
}

/* Index of the first maximum of each row under '>', as ORT's loops and std::max_element pick it:
 * NaN never wins, except a NaN in column 0, which stays. Returns int32 [n]. */
static mlxb_array *ml_argmax_first(mlxb_scope *s, mlxb_array *z) {
  mlxb_array *isn = mlxb_unary(s, MLXB_ISNAN, z);
  mlxb_array *clean = mlxb_where(s, isn, f32(s, -INFINITY), z);
  mlxb_array *idx = cast(s, mlxb_argmax(s, clean, 1, false), MLXB_I32);
  mlxb_array *nan0 = column(s, isn, 0);
  return mlxb_where(s, nan0, mlxb_scalar_i64(s, 0, MLXB_I32), idx);
}

/* labels[idx] for int32 indices known to be in range. */
static mlxb_array *ml_pick_labels(mlxb_scope *s, const int64_t *labels, int64_t n, mlxb_array *idx) {
  return mlxb_take(s, vec_i64(s, labels, n), idx, 0);
}

/* X [n, f] @ W^T for row-major weights W [m, f] given on the host. */
static mlxb_array *ml_matmul_t(mlxb_scope *s, mlxb_array *x, const float *w, int64_t m, int64_t f) {
  int64_t d[2] = {m, f};
  int perm[2] = {1, 0};
  return mlxb_matmul(s, x, mlxb_transpose(s, mlxb_from_data(s, w, d, 2, MLXB_F32), perm, 2));
}

/* ---- LinearClassifier / LinearRegressor ---------------------------------------------------- */

static bool claim_rows_rank(claim_ctx *c) {
  int r = claim_rank(c, 0);
  if (r == 0 || r > 2) return claim_decline(c, "input rank %d (ORT's kernel takes rank 1 or 2)", r);
  return true;
}

static bool claim_linear_classifier(claim_ctx *c, const op_def *def) {
  const ir_node *n = c->node;
  if (attr_count(n, "classlabels_strings") > 0) return claim_decline(c, "string class labels (string output)");
  int64_t classes = attr_count(n, "intercepts"), coefs = attr_count(n, "coefficients");
  int64_t labels = attr_count(n, "classlabels_ints");
  ml_post post = ml_post_of(n);
  if (post == ML_POST_BAD) return claim_decline(c, "unknown post_transform");
  if (classes < 1) return claim_decline(c, "no intercepts (ORT takes the class count from them)");
  if (coefs == 0 || coefs % classes) return claim_decline(c, "coefficients do not split into %lld classes", (long long)classes);
  if (classes > 1 && labels < classes) return claim_decline(c, "fewer class labels than classes");
  if (classes == 1 && labels != 0 && labels != 2) return claim_decline(c, "one class needs 0 or 2 labels (ORT fails)");
  if (classes == 1 && labels == 2 && post == ML_POST_PROBIT)
    return claim_decline(c, "binary PROBIT leaves ORT's second score column unwritten");
  return claim_rows_rank(c);
}

static int lower_linear_classifier(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  const float *coef, *icpt;
  const int64_t *labels;
  int64_t coefs = (int64_t)ir_attr_floats(n, "coefficients", &coef);
  int64_t classes = (int64_t)ir_attr_floats(n, "intercepts", &icpt);
  int64_t nlab = (int64_t)ir_attr_ints(n, "classlabels_ints", &labels);
  ml_post post = ml_post_of(n);
  int64_t rows, feats;
  mlxb_array *x = ml_rows(c, MLXB_F32, &rows, &feats);
  if (!x) return -1;
  if (coefs != classes * feats)
    return op_fail(c, "%lld coefficients for %lld classes and %lld features", (long long)coefs, (long long)classes,
                   (long long)feats);
  mlxb_array *z = add(s, ml_matmul_t(s, x, coef, classes, feats), vec_f32(s, icpt, classes));
  mlxb_array *y;
  if (classes == 1) {
    int64_t pos = nlab == 2 ? labels[1] : 1, neg = nlab == 2 ? labels[0] : 0;
    mlxb_array *gt = cmp(s, MLXB_GREATER, reshape1(s, z, rows), f32(s, 0.0));
    y = mlxb_where(s, gt, mlxb_scalar_i64(s, pos, MLXB_I64), mlxb_scalar_i64(s, neg, MLXB_I64));
    z = nlab == 2 ? ml_second_class(s, z, 1, post) : ml_post_single(s, z, post);
  } else {
    y = ml_pick_labels(s, labels, nlab, ml_argmax_first(s, z));
    z = ml_post_rows(s, z, post);
  }
  if (op_set_output(c, 0, y)) return -1;
  return op_has_output(c, 1) ? op_set_output(c, 1, z) : 0;
}

static bool claim_linear_regressor(claim_ctx *c, const op_def *def) {
  const ir_node *n = c->node;
  int64_t targets = ir_attr_int(n, "targets", 1), coefs = attr_count(n, "coefficients");
  if (ml_post_of(n) == ML_POST_BAD) return claim_decline(c, "unknown post_transform");
  if (targets < 1) return claim_decline(c, "targets %lld", (long long)targets);
  if (coefs == 0 || coefs % targets) return claim_decline(c, "coefficients do not split into %lld targets", (long long)targets);
  int r = claim_rank(c, 0);
  if (r > 2) return claim_decline(c, "input rank %d (ORT's kernel takes rank 0 to 2)", r);
  return true;
}

static int lower_linear_regressor(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  const float *coef, *icpt;
  int64_t coefs = (int64_t)ir_attr_floats(n, "coefficients", &coef);
  int64_t nicpt = (int64_t)ir_attr_floats(n, "intercepts", &icpt);
  int64_t targets = ir_attr_int(n, "targets", 1);
  mlxb_array *x = op_input(c, 0);
  if (!x) return op_fail(c, "input 0 is missing");
  int r = mlxb_ndim(x);
  if (r > 2) return op_fail(c, "input rank %d (at most 2)", r);
  /* Rank 0 and 1 are one row of every element. */
  int64_t rows = r <= 1 ? 1 : mlxb_dim(x, 0), feats = r <= 1 ? (int64_t)mlxb_size(x) : mlxb_dim(x, 1);
  if (coefs != targets * feats)
    return op_fail(c, "%lld coefficients for %lld targets and %lld features", (long long)coefs, (long long)targets,
                   (long long)feats);
  mlxb_array *z = ml_matmul_t(s, reshape2(s, x, rows, feats), coef, targets, feats);
  if (nicpt == targets) z = add(s, z, vec_f32(s, icpt, targets)); /* ORT ignores intercepts of another length */
  ml_post post = ml_post_of(n);
  z = targets == 1 ? ml_post_single(s, z, post) : ml_post_rows(s, z, post);
  return op_set_output(c, 0, z);
}

/* ---- Scaler, Normalizer, Binarizer, Imputer ----------------------------------------------- */

/* A per-feature table of size k applied along ORT's stride (dims[1], or dims[0] at rank 1): the
 * table broadcast along the last axis at rank <= 2; the flat index modulo the stride beyond. A
 * table of one value is a scalar. Returns an array broadcastable against x. */
static mlxb_array *ml_feature_table(mlxb_scope *s, mlxb_array *x, mlxb_array *table, int64_t k) {
  int r = mlxb_ndim(x);
  if (k == 1) return reshape1(s, table, 1);
  if (r <= 2) return table;
  int64_t dims[ML_MAX_RANK];
  mlxb_shape(x, dims);
  int64_t stride = dims[1];
  mlxb_array *flat = mlxb_arange(s, 0, (double)mlxb_size(x), 1, MLXB_I64);
  mlxb_array *idx = mlxb_binary(s, MLXB_REMAINDER, flat, mlxb_scalar_i64(s, stride, MLXB_I64));
  return mlxb_reshape(s, mlxb_take(s, table, idx, 0), dims, r);
}

/* ORT's stride for per-feature attributes; -1 (with the failure recorded) at rank 0 or above the limit. */
static int64_t ml_stride(op_ctx *c, mlxb_array *x) {
  int r = mlxb_ndim(x);
  if (r < 1 || r > ML_MAX_RANK) return op_fail(c, "input rank %d (expected 1 to %d)", r, ML_MAX_RANK), -1;
  return mlxb_dim(x, r == 1 ? 0 : 1);
}

static bool claim_scaler(claim_ctx *c, const op_def *def) {
  int64_t ns = attr_count(c->node, "scale"), no = attr_count(c->node, "offset");
  if (ns == 0 || ns != no) return claim_decline(c, "scale and offset must be non-empty and of one length");
  int r = claim_rank(c, 0);
  if (r == 0 || r > ML_MAX_RANK) return claim_decline(c, "input rank %d", r);
  return true;
}

/* float((x - offset) * scale): integers convert to float first (C's int - float), doubles
 * compute in double and round once. */
static int lower_scaler(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  const float *scale, *offset;
  int64_t k = (int64_t)ir_attr_floats(n, "scale", &scale);
  ir_attr_floats(n, "offset", &offset);
  mlxb_array *x = op_input(c, 0);
  if (!x) return op_fail(c, "input 0 is missing");
  int64_t stride = ml_stride(c, x);
  if (stride < 0) return -1;
  if (k != 1 && k != stride) return op_fail(c, "scale/offset of %lld values for %lld features", (long long)k, (long long)stride);
  mlxb_dtype t = mlxb_type(x) == MLXB_F64 ? MLXB_F64 : MLXB_F32;
  mlxb_array *sc = ml_feature_table(s, x, cast(s, vec_f32(s, scale, k), t), k);
  mlxb_array *of = ml_feature_table(s, x, cast(s, vec_f32(s, offset, k), t), k);
  mlxb_array *y = mul(s, sub(s, cast(s, x, t), of), sc);
  return op_set_output(c, 0, cast(s, y, MLXB_F32));
}

static bool claim_normalizer(claim_ctx *c, const op_def *def) {
  const char *norm = ir_attr_string(c->node, "norm", "MAX");
  if (strcmp(norm, "MAX") && strcmp(norm, "L1") && strcmp(norm, "L2")) return claim_decline(c, "norm '%s'", norm);
  int r = claim_rank(c, 0);
  if (r == 0 || r > 2) return claim_decline(c, "input rank %d (ORT's kernel takes rank 1 or 2)", r);
  return true;
}

/* Row-wise normalization in float32; a row whose norm is 0 is copied unchanged. */
static int lower_normalizer(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const char *norm = ir_attr_string(op_node(c), "norm", "MAX");
  mlxb_array *x = op_input(c, 0);
  if (!x) return op_fail(c, "input 0 is missing");
  int r = mlxb_ndim(x), ax = -1;
  if (r < 1 || r > 2) return op_fail(c, "input rank %d (expected 1 or 2)", r);
  mlxb_array *xf = cast(s, x, MLXB_F32), *den, *y;
  if (strcmp(norm, "MAX") == 0) {
    den = ml_row_max(s, xf); /* from numeric_limits<float>::lowest(), NaN skipped by std::max */
    y = dvd(s, xf, den);
  } else if (strcmp(norm, "L1") == 0) {
    den = mlxb_reduce(s, MLXB_RSUM, cast(s, mlxb_unary(s, MLXB_ABS, x), MLXB_F32), &ax, 1, true);
    y = dvd(s, xf, den);
  } else {
    /* x * x in the input's type (integers wrap), then float: sign(x) * sqrt(x^2 / sum). */
    mlxb_array *sq = cast(s, mul(s, x, x), MLXB_F32);
    den = mlxb_reduce(s, MLXB_RSUM, sq, &ax, 1, true);
    mlxb_array *mag = mlxb_unary(s, MLXB_SQRT, dvd(s, sq, den));
    mlxb_array *neg = cmp(s, MLXB_LESS, x, zero_of(s, mlxb_type(x)));
    y = mlxb_where(s, neg, mlxb_unary(s, MLXB_NEG, mag), mag);
  }
  y = mlxb_where(s, cmp(s, MLXB_NOT_EQUAL, den, f32(s, 0.0)), y, xf);
  return op_set_output(c, 0, y);
}

/* x > threshold ? 1 : 0 in x's dtype (the float threshold widened for double input). */
static int lower_binarizer(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x = op_input(c, 0);
  if (!x) return op_fail(c, "input 0 is missing");
  mlxb_dtype t = mlxb_type(x);
  float th = ir_attr_float(op_node(c), "threshold", 0.0f);
  mlxb_array *gt = cmp(s, MLXB_GREATER, x, mlxb_scalar_f64(s, th, t));
  return op_set_output(c, 0, mlxb_where(s, gt, mlxb_scalar_f64(s, 1.0, t), mlxb_scalar_f64(s, 0.0, t)));
}

static bool claim_imputer(claim_ctx *c, const op_def *def) {
  const ir_node *n = c->node;
  int64_t nf = attr_count(n, "imputed_value_floats"), ni = attr_count(n, "imputed_value_int64s");
  if ((nf > 0) == (ni > 0)) return claim_decline(c, "needs exactly one of imputed_value_floats / imputed_value_int64s");
  int32_t t = claim_input_dtype(c, 0);
  if (t == ONNX_FLOAT && nf == 0) return claim_decline(c, "float input with int64 imputed values");
  if (t == ONNX_INT64 && ni == 0) return claim_decline(c, "int64 input with float imputed values");
  int r = claim_rank(c, 0);
  if (r == 0 || r > ML_MAX_RANK) return claim_decline(c, "input rank %d", r);
  return true;
}

/* x == replaced (or both NaN) ? imputed : x; imputed per feature when it has one value per
 * feature, else its first value (as ORT). */
static int lower_imputer(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  mlxb_array *x = op_input(c, 0);
  if (!x) return op_fail(c, "input 0 is missing");
  int64_t stride = ml_stride(c, x);
  if (stride < 0) return -1;
  mlxb_array *table, *hit;
  int64_t k;
  if (mlxb_type(x) == MLXB_F32) {
    const float *v;
    k = (int64_t)ir_attr_floats(n, "imputed_value_floats", &v);
    table = vec_f32(s, v, k);
    float rv = ir_attr_float(n, "replaced_value_float", 0.0f);
    hit = isnan(rv) ? mlxb_unary(s, MLXB_ISNAN, x) : cmp(s, MLXB_EQUAL, x, f32(s, rv));
  } else {
    const int64_t *v;
    k = (int64_t)ir_attr_ints(n, "imputed_value_int64s", &v);
    table = vec_i64(s, v, k);
    hit = cmp(s, MLXB_EQUAL, x, mlxb_scalar_i64(s, ir_attr_int(n, "replaced_value_int64", 0), MLXB_I64));
  }
  if (k != stride) { /* ORT falls back to the first value */
    int64_t start = 0, one = 1;
    table = mlxb_slice(s, table, &start, &one, &one), k = 1;
  }
  return op_set_output(c, 0, mlxb_where(s, hit, ml_feature_table(s, x, table, k), x));
}

/* ---- ArrayFeatureExtractor, FeatureVectorizer, OneHotEncoder ------------------------------ */

/* A key of the table and its position in the attribute list. */
typedef struct ml_key {
  int64_t i;   /* integer keys */
  double r;    /* real keys */
  int64_t pos;
} ml_key;

static int ml_key_cmp_int(const void *a, const void *b) {
  const ml_key *x = a, *y = b;
  if (x->i != y->i) return x->i < y->i ? -1 : 1;
  return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* Real keys compare with < and > (so -0 equals 0), ties by position. */
static int ml_key_cmp_real(const void *a, const void *b) {
  const ml_key *x = a, *y = b;
  if (x->r < y->r) return -1;
  if (x->r > y->r) return 1;
  return x->pos < y->pos ? -1 : x->pos > y->pos;
}


static bool claim_array_feature_extractor(claim_ctx *c, const op_def *def) {
  if (claim_input_dtype(c, 1) != ONNX_INT64) return claim_decline(c, "indices must be int64");
  if (claim_rank(c, 0) == 0) return claim_decline(c, "X of rank 0");
  return true;
}

/* X[..., Y] along the last axis (Y flattened); rank-1 X gives [1, k]. Indices are clipped into
 * range: ORT fails on an index >= the last dimension. */
static int lower_array_feature_extractor(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x = op_input(c, 0), *y = op_input(c, 1);
  if (!x || !y) return op_fail(c, "X and Y are required");
  int r = mlxb_ndim(x);
  if (r < 1 || r > ML_MAX_RANK) return op_fail(c, "X rank %d", r);
  int64_t dims[ML_MAX_RANK], last = mlxb_dim(x, r - 1), k = (int64_t)mlxb_size(y);
  if (last == 0 && k > 0) return op_fail(c, "indices into an empty last axis");
  mlxb_shape(x, dims);
  mlxb_array *idx = reshape1(s, y, k);
  if (last > 0) idx = mlxb_clip(s, idx, mlxb_scalar_i64(s, 0, MLXB_I64), mlxb_scalar_i64(s, last - 1, MLXB_I64));
  mlxb_array *z = mlxb_take(s, x, idx, r - 1);
  if (r == 1) z = reshape2(s, z, 1, k);
  return op_set_output(c, 0, z);
}

static bool claim_feature_vectorizer(claim_ctx *c, const op_def *def) {
  const ir_node *n = c->node;
  if (attr_count(n, "inputdimensions") != n->n_inputs)
    return claim_decline(c, "inputdimensions has %lld values for %d inputs", (long long)attr_count(n, "inputdimensions"),
                         n->n_inputs);
  for (int i = 0; i < n->n_inputs; i++) {
    int32_t t = claim_input_dtype(c, i);
    if (t != ONNX_FLOAT && t != ONNX_DOUBLE && t != ONNX_INT32 && t != ONNX_INT64)
      return claim_decline(c, "input %d dtype %s", i, ir_dtype_name(t));
    if (claim_rank(c, i) == 0) return claim_decline(c, "input %d of rank 0", i);
  }
  return true;
}

/* Each input's rows (everything after dim 0, or the whole of a rank-1 input) cut or zero-padded
 * to its declared width, cast to float and concatenated. */
static int lower_feature_vectorizer(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  const int64_t *widths;
  ir_attr_ints(n, "inputdimensions", &widths);
  int k = n->n_inputs;
  mlxb_array **parts = calloc((size_t)k, sizeof *parts);
  if (!parts) return op_fail(c, "out of memory");
  int64_t rows = -1;
  int rc = 0;
  for (int i = 0; i < k && rc == 0; i++) {
    mlxb_array *x = op_input(c, i);
    if (!x) { rc = op_fail(c, "input %d is missing", i); break; }
    int r = mlxb_ndim(x);
    if (r < 1) { rc = op_fail(c, "input %d of rank 0", i); break; }
    int64_t nr = r == 1 ? 1 : mlxb_dim(x, 0);
    int64_t size = nr ? (int64_t)mlxb_size(x) / nr : 0;
    if (rows < 0) rows = nr;
    if (nr != rows) { rc = op_fail(c, "input %d has %lld rows, input 0 has %lld", i, (long long)nr, (long long)rows); break; }
    int64_t w = widths[i] < 0 ? 0 : widths[i], keep = size < w ? size : w;
    mlxb_array *m = reshape2(s, x, nr, size);
    int64_t start[2] = {0, 0}, stop[2] = {nr, keep}, step[2] = {1, 1};
    m = cast(s, mlxb_slice(s, m, start, stop, step), MLXB_F32);
    if (keep < w) {
      int64_t lo[2] = {0, 0}, hi[2] = {0, w - keep};
      m = mlxb_pad(s, m, lo, hi, f32(s, 0.0), "constant");
    }
    parts[i] = m;
  }
  if (rc == 0) rc = op_set_output(c, 0, mlxb_concat(s, (const mlxb_array *const *)parts, k, 1));
  free(parts);
  return rc;
}

static bool claim_one_hot_encoder(claim_ctx *c, const op_def *def) {
  if (attr_count(c->node, "cats_strings") > 0) return claim_decline(c, "string categories");
  if (attr_count(c->node, "cats_int64s") == 0) return claim_decline(c, "no categories");
  int r = claim_rank(c, 0);
  if (r > 2) return claim_decline(c, "input rank %d (ORT's kernel takes rank <= 2)", r);
  return true;
}

/* X cast to int64 (truncating floats) compared against the categories; a category listed twice
 * maps to its last position, as ORT's map keeps the last insert. Unknown values give a row of
 * zeros (ORT fails on them when zeros=0). */
static int lower_one_hot_encoder(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const int64_t *cats;
  int64_t k = (int64_t)ir_attr_ints(op_node(c), "cats_int64s", &cats);
  mlxb_array *x = op_input(c, 0);
  if (!x) return op_fail(c, "input 0 is missing");
  int r = mlxb_ndim(x);
  if (r > 2) return op_fail(c, "input rank %d (at most 2)", r);
  uint8_t *keep = calloc((size_t)(k + 1), 1);
  ml_key *sorted = malloc(sizeof *sorted * (size_t)(k + 1));
  if (!keep || !sorted) {
    free(keep), free(sorted);
    return op_fail(c, "out of memory");
  }
  for (int64_t i = 0; i < k; i++) sorted[i] = (ml_key){cats[i], 0.0, i};
  qsort(sorted, (size_t)k, sizeof *sorted, ml_key_cmp_int);
  for (int64_t i = 0; i < k; i++) /* the last position of each run of equal categories */
    if (i + 1 == k || sorted[i + 1].i != sorted[i].i) keep[sorted[i].pos] = 1;
  free(sorted);
  mlxb_array *kept = mlxb_from_data(s, keep, &k, 1, MLXB_BOOL);
  free(keep);
  int ax = r;
  mlxb_array *xi = mlxb_expand_dims(s, cast(s, x, MLXB_I64), &ax, 1);
  mlxb_array *eq = mlxb_binary(s, MLXB_LOGICAL_AND, cmp(s, MLXB_EQUAL, xi, vec_i64(s, cats, k)), kept);
  return op_set_output(c, 0, cast(s, eq, MLXB_F32));
}

/* ---- LabelEncoder (numeric keys and values) ----------------------------------------------- */

/* Keys or values of one LabelEncoder attribute family, widened to double / int64 on the host. */
typedef struct ml_list {
  int64_t n;
  bool is_int;      /* ints holds the values, else reals */
  const int64_t *ints;
  const float *floats;  /* float list attribute */
  const double *doubles; /* double tensor attribute */
} ml_list;

static double ml_list_real(const ml_list *l, int64_t i) { return l->floats ? l->floats[i] : l->doubles[i]; }

/* Finds `<stem>_int64s` / `<stem>_floats` (by dtype t) or, from opset 4, `<stem>_tensor` of
 * dtype t. Doubles come only from the tensor, as in ORT. Returns false when neither is there. */
static bool ml_list_find(const ir_node *n, const char *stem, int32_t t, ml_list *out) {
  char name[64];
  memset(out, 0, sizeof *out);
  out->is_int = t == ONNX_INT64;
  if (t == ONNX_INT64 || t == ONNX_FLOAT) {
    snprintf(name, sizeof name, "%s_%s", stem, t == ONNX_INT64 ? "int64s" : "floats");
    const ir_attr *a = ir_node_attr(n, name);
    if (a && a->type == (t == ONNX_INT64 ? IR_ATTR_INTS : IR_ATTR_FLOATS)) {
      out->n = (int64_t)a->n;
      out->ints = a->ints, out->floats = a->floats;
      return true;
    }
  }
  if (n->since_version < 4) return false;
  snprintf(name, sizeof name, "%s_tensor", stem);
  const ir_attr *a = ir_node_attr(n, name);
  if (!a || a->type != IR_ATTR_TENSOR || !a->tensor || a->tensor->dtype != t) return false;
  size_t esz = ir_dtype_size(t);
  out->n = (int64_t)(a->tensor->bytes / esz);
  if (t == ONNX_INT64) out->ints = a->tensor->data;
  else if (t == ONNX_FLOAT) out->floats = a->tensor->data;
  else out->doubles = a->tensor->data;
  return out->n == 0 || a->tensor->data != NULL;
}

static bool ml_label_dtype_ok(int32_t t) { return t == ONNX_INT64 || t == ONNX_FLOAT || t == ONNX_DOUBLE; }

/* The default output value (double, or int64 for integer outputs): `default_tensor` (opset 4),
 * else `default_int64` / `default_float`, else the schema defaults -1 and -0.0. */
static bool ml_label_default(const ir_node *n, int32_t vt, double *real, int64_t *integer) {
  *real = -0.0, *integer = -1;
  const ir_attr *a = n->since_version >= 4 ? ir_node_attr(n, "default_tensor") : NULL;
  if (a && a->type == IR_ATTR_TENSOR && a->tensor && a->tensor->dtype != ONNX_UNDEFINED) {
    const ir_tensor *t = a->tensor;
    if (t->dtype != vt || !t->data || t->bytes < ir_dtype_size(vt)) return false;
    if (vt == ONNX_INT64) memcpy(integer, t->data, sizeof *integer);
    else if (vt == ONNX_FLOAT) *real = ((const float *)t->data)[0];
    else memcpy(real, t->data, sizeof *real);
    return true;
  }
  if (vt == ONNX_INT64) *integer = ir_attr_int(n, "default_int64", -1);
  else if (vt == ONNX_FLOAT) *real = ir_attr_float(n, "default_float", -0.0f);
  return true;
}

static bool claim_label_encoder(claim_ctx *c, const op_def *def) {
  const ir_node *n = c->node;
  const ir_value *out = claim_output(c, 0);
  int32_t kt = claim_input_dtype(c, 0), vt = out ? out->dtype : ONNX_UNDEFINED;
  if (!ml_label_dtype_ok(kt) || !ml_label_dtype_ok(vt))
    return claim_decline(c, "key/value dtypes %s -> %s (numeric forms only)", ir_dtype_name(kt), ir_dtype_name(vt));
  if (n->since_version < 4 && (kt == ONNX_DOUBLE || vt == ONNX_DOUBLE)) return claim_decline(c, "double before opset 4");
  ml_list keys, vals;
  if (!ml_list_find(n, "keys", kt, &keys)) return claim_decline(c, "no keys of dtype %s", ir_dtype_name(kt));
  if (!ml_list_find(n, "values", vt, &vals)) return claim_decline(c, "no values of dtype %s", ir_dtype_name(vt));
  if (keys.n != vals.n) return claim_decline(c, "%lld keys but %lld values", (long long)keys.n, (long long)vals.n);
  double dr;
  int64_t di;
  if (!ml_label_default(n, vt, &dr, &di)) return claim_decline(c, "default_tensor dtype differs from the output's");
  return true;
}

/* The number of sorted keys below x, by bisection over host-known keys [m] (each probe index
 * is clipped into range, so gathers never leave the table). */
static mlxb_array *ml_lower_bound(mlxb_scope *s, mlxb_array *keys, int64_t m, mlxb_array *x) {
  int r = mlxb_ndim(x);
  int64_t dims[ML_MAX_RANK];
  mlxb_shape(x, dims);
  mlxb_array *pos = mlxb_zeros(s, dims, r, MLXB_I32), *lo = mlxb_scalar_i64(s, 0, MLXB_I32);
  mlxb_array *hi = mlxb_scalar_i64(s, m - 1, MLXB_I32);
  int64_t step = 1;
  while (step * 2 <= m) step *= 2;
  for (; step >= 1; step /= 2) {
    mlxb_array *cand = add(s, pos, mlxb_scalar_i64(s, step, MLXB_I32));
    mlxb_array *probe = mlxb_take(s, keys, mlxb_clip(s, sub(s, cand, mlxb_scalar_i64(s, 1, MLXB_I32)), lo, hi), 0);
    mlxb_array *ok = mlxb_binary(s, MLXB_LOGICAL_AND, cmp(s, MLXB_LESS_EQUAL, cand, mlxb_scalar_i64(s, m, MLXB_I32)),
                                 cmp(s, MLXB_LESS, probe, x));
    pos = mlxb_where(s, ok, cand, pos);
  }
  return pos;
}

/* y = the value of the key equal to x, or the default: keys sorted on the host, found by
 * bisection. Duplicate keys keep their first value (ORT's map emplace); a NaN key matches NaN
 * input from opset 4 only (NaN never equals itself in opset 2's map). */
static int lower_label_encoder(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  mlxb_array *x = op_input(c, 0);
  if (!x) return op_fail(c, "input 0 is missing");
  int32_t kt = op_input_dtype(c, 0), vt = op_output_dtype(c, 0);
  bool nan_matches = n->since_version >= 4;
  ml_list keys, vals;
  double dr;
  int64_t di;
  if (!ml_list_find(n, "keys", kt, &keys) || !ml_list_find(n, "values", vt, &vals) || keys.n != vals.n ||
      !ml_label_default(n, vt, &dr, &di))
    return op_fail(c, "keys, values or default no longer match the claim");
  if (mlxb_ndim(x) > ML_MAX_RANK) return op_fail(c, "rank %d", mlxb_ndim(x));
  ml_key *k = malloc(sizeof *k * (size_t)(keys.n + 1));
  int64_t *kint = malloc(sizeof(int64_t) * (size_t)(keys.n + 1)), *vint = malloc(sizeof(int64_t) * (size_t)(keys.n + 1));
  double *kreal = malloc(sizeof(double) * (size_t)(keys.n + 1)), *vreal = malloc(sizeof(double) * (size_t)(keys.n + 1));
  int64_t m = 0, nk = 0, nan_pos = -1;
  int rc = 0;
  if (!k || !kint || !vint || !kreal || !vreal) { rc = op_fail(c, "out of memory"); goto done; }
  for (int64_t i = 0; i < keys.n; i++) {
    double r = keys.is_int ? 0.0 : ml_list_real(&keys, i);
    if (isnan(r)) { /* kept apart: the first NaN key wins where NaN matches */
      if (nan_matches && nan_pos < 0) nan_pos = i;
      continue;
    }
    k[nk++] = (ml_key){keys.is_int ? keys.ints[i] : 0, r, i};
  }
  qsort(k, (size_t)nk, sizeof *k, keys.is_int ? ml_key_cmp_int : ml_key_cmp_real);
  for (int64_t i = 0; i < nk; i++) {
    if (i > 0 && (keys.is_int ? k[i].i == k[i - 1].i : k[i].r == k[i - 1].r)) continue; /* a later duplicate */
    kint[m] = k[i].i, kreal[m] = k[i].r;
    if (vals.is_int) vint[m] = vals.ints[k[i].pos];
    else vreal[m] = ml_list_real(&vals, k[i].pos);
    m++;
  }
  mlxb_dtype kd = (mlxb_dtype)op_mlx_dtype(kt), vd = (mlxb_dtype)op_mlx_dtype(vt);
  mlxb_array *y = vt == ONNX_INT64 ? mlxb_scalar_i64(s, di, MLXB_I64) : mlxb_scalar_f64(s, dr, vd);
  int64_t dims[ML_MAX_RANK];
  mlxb_shape(x, dims);
  y = mlxb_broadcast_to(s, y, dims, mlxb_ndim(x));
  if (m > 0) {
    mlxb_array *karr = keys.is_int ? vec_i64(s, kint, m) : host_reals(s, kreal, &m, 1, kd);
    mlxb_array *varr = vals.is_int ? vec_i64(s, vint, m) : host_reals(s, vreal, &m, 1, vd);
    mlxb_array *at = mlxb_clip(s, ml_lower_bound(s, karr, m, x), mlxb_scalar_i64(s, 0, MLXB_I32), mlxb_scalar_i64(s, m - 1, MLXB_I32));
    mlxb_array *hit = cmp(s, MLXB_EQUAL, mlxb_take(s, karr, at, 0), x);
    y = mlxb_where(s, hit, mlxb_take(s, varr, at, 0), y);
  }
  if (nan_pos >= 0) {
    mlxb_array *nv = vals.is_int ? mlxb_scalar_i64(s, vals.ints[nan_pos], MLXB_I64) : mlxb_scalar_f64(s, ml_list_real(&vals, nan_pos), vd);
    y = mlxb_where(s, mlxb_unary(s, MLXB_ISNAN, x), nv, y);
  }
  rc = op_set_output(c, 0, y);
done:
  free(k), free(kint), free(vint), free(kreal), free(vreal);
  return rc;
}

/* ---- SVMClassifier / SVMRegressor ---------------------------------------------------------- */

typedef enum svm_kernel { SVM_LINEAR, SVM_POLY, SVM_RBF, SVM_SIGMOID, SVM_BAD } svm_kernel;

typedef struct svm_params {
  svm_kernel kernel;
  float gamma, coef0, degree; /* kernel_params */
} svm_params;

/* kernel_type and kernel_params; false for an unknown kernel or fewer than three parameters (ORT
 * requires the attribute and reads three values from it). */
static bool svm_params_read(const ir_node *n, svm_params *p, const char **why) {
  static const char *const names[] = {"LINEAR", "POLY", "RBF", "SIGMOID"};
  const char *k = ir_attr_string(n, "kernel_type", "LINEAR");
  p->kernel = SVM_BAD;
  for (int i = 0; i < SVM_BAD; i++)
    if (strcmp(k, names[i]) == 0) p->kernel = (svm_kernel)i;
  if (p->kernel == SVM_BAD) return *why = "unknown kernel_type", false;
  const float *kp;
  size_t nk = ir_attr_floats(n, "kernel_params", &kp);
  if (!attr_has(n, "kernel_params")) return *why = "no kernel_params (ORT requires them)", false;
  if (nk > 0 && nk < 3) return *why = "kernel_params needs gamma, coef0 and degree", false;
  p->gamma = nk ? kp[0] : 0.0f, p->coef0 = nk ? kp[1] : 0.0f, p->degree = nk ? kp[2] : 0.0f;
  return true;
}

/* ORT's batched_kernel_dot: x [n, f] against rows w [m, f] -> [n, m]. RBF is exp(-gamma * |x -
 * w|^2); the others are alpha * x.w + c (alpha = 1 and c = bias for LINEAR, gamma and coef0 for
 * POLY and SIGMOID) followed by the power or tanh. */
static mlxb_array *svm_kernel_dot(mlxb_scope *s, const svm_params *p, mlxb_array *x, const float *w, int64_t m,
                                  int64_t f, float bias) {
  if (p->kernel == SVM_RBF) {
    int64_t d3[3] = {1, m, f};
    int ax1 = 1, ax2 = 2;
    mlxb_array *diff = sub(s, mlxb_expand_dims(s, x, &ax1, 1), mlxb_from_data(s, w, d3, 3, MLXB_F32));
    mlxb_array *sum = mlxb_reduce(s, MLXB_RSUM, mul(s, diff, diff), &ax2, 1, false);
    return mlxb_unary(s, MLXB_EXP, mul(s, f32(s, -p->gamma), sum));
  }
  float alpha = p->kernel == SVM_LINEAR ? 1.0f : p->gamma, c = p->kernel == SVM_LINEAR ? bias : p->coef0;
  mlxb_array *k = ml_matmul_t(s, x, w, m, f);
  if (alpha != 1.0f) k = mul(s, f32(s, alpha), k);
  if (c != 0.0f) k = add(s, k, f32(s, c));
  if (p->kernel == SVM_POLY) {
    if (p->degree == 2.0f) return mul(s, k, k);
    if (p->degree == 3.0f) return mul(s, mul(s, k, k), k);
    return mlxb_binary(s, MLXB_POW, k, f32(s, p->degree));
  }
  if (p->kernel == SVM_SIGMOID) return mlxb_unary(s, MLXB_TANH, k);
  return k;
}

static bool claim_svm_regressor(claim_ctx *c, const op_def *def) {
  const ir_node *n = c->node;
  svm_params p;
  const char *why;
  if (!svm_params_read(n, &p, &why)) return claim_decline(c, "%s", why);
  /* ORT never applies post_transform here; the spec does: decline where they differ. */
  if (ml_post_of(n) != ML_POST_NONE) return claim_decline(c, "post_transform (ORT ignores it, the spec applies it)");
  int64_t v = ir_attr_int(n, "n_supports", 0), sv = attr_count(n, "support_vectors"), coefs = attr_count(n, "coefficients");
  if (attr_count(n, "rho") < 1) return claim_decline(c, "no rho");
  if (coefs < 1) return claim_decline(c, "no coefficients");
  if (v < 0) return claim_decline(c, "n_supports %lld", (long long)v);
  if (v > 0 && (sv == 0 || sv % v || coefs < v)) return claim_decline(c, "support_vectors/coefficients do not match n_supports");
  return claim_rows_rank(c);
}

static int lower_svm_regressor(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  svm_params p;
  const char *why;
  if (!svm_params_read(n, &p, &why)) return op_fail(c, "%s", why);
  const float *coef, *rho, *sv;
  int64_t coefs = (int64_t)ir_attr_floats(n, "coefficients", &coef);
  int64_t nsv = (int64_t)ir_attr_floats(n, "support_vectors", &sv);
  ir_attr_floats(n, "rho", &rho);
  int64_t v = ir_attr_int(n, "n_supports", 0), rows, feats;
  mlxb_array *x = ml_rows(c, MLXB_F32, &rows, &feats), *y;
  if (!x) return -1;
  if (v > 0) {
    if (feats != nsv / v) return op_fail(c, "%lld features, support vectors have %lld", (long long)feats, (long long)(nsv / v));
    mlxb_array *k = svm_kernel_dot(s, &p, x, sv, v, feats, 0.0f);
    y = add(s, ml_matmul_t(s, k, coef, 1, v), f32(s, rho[0]));
  } else {
    if (feats != coefs) return op_fail(c, "%lld features, %lld coefficients", (long long)feats, (long long)coefs);
    svm_params lin = {SVM_LINEAR, 0, 0, 0};
    y = svm_kernel_dot(s, &lin, x, coef, 1, feats, rho[0]);
  }
  if (ir_attr_int(n, "one_class", 0))
    y = mlxb_where(s, cmp(s, MLXB_GREATER, y, f32(s, 0.0)), f32(s, 1.0), f32(s, -1.0));
  return op_set_output(c, 0, y);
}

/* The SVMClassifier attributes ORT reads, with its derived counts. */
typedef struct svm_model {
  svm_params p;
  int64_t classes, vectors, feats; /* feats: 0 until known from X */
  const int64_t *labels, *per_class;
  const float *coef, *rho, *sv, *prob_a, *prob_b;
  int64_t ncoef, nrho, nsv, nprob;
  ml_post post;
} svm_model;

static bool svm_model_read(const ir_node *n, svm_model *m, const char **why) {
  memset(m, 0, sizeof *m);
  if (attr_count(n, "classlabels_strings") > 0) return *why = "string class labels (string output)", false;
  if (!svm_params_read(n, &m->p, why)) return false;
  m->post = ml_post_of(n);
  if (m->post == ML_POST_BAD) return *why = "unknown post_transform", false;
  m->classes = (int64_t)ir_attr_ints(n, "classlabels_ints", &m->labels);
  int64_t npc = (int64_t)ir_attr_ints(n, "vectors_per_class", &m->per_class);
  m->ncoef = (int64_t)ir_attr_floats(n, "coefficients", &m->coef);
  m->nrho = (int64_t)ir_attr_floats(n, "rho", &m->rho);
  m->nsv = (int64_t)ir_attr_floats(n, "support_vectors", &m->sv);
  m->nprob = (int64_t)ir_attr_floats(n, "prob_a", &m->prob_a);
  if ((int64_t)ir_attr_floats(n, "prob_b", &m->prob_b) != m->nprob) return *why = "prob_a and prob_b differ in length", false;
  if (m->classes < 1) return *why = "no class labels", false;
  if (m->ncoef < 1) return *why = "no coefficients", false;
  for (int64_t i = 0; i < npc; i++) {
    if (m->per_class[i] < 0) return *why = "negative vectors_per_class", false;
    m->vectors += m->per_class[i];
  }
  int64_t pairs = m->classes * (m->classes - 1) / 2;
  if (m->vectors > 0) {
    if (npc != m->classes) return *why = "vectors_per_class does not match the class count", false;
    if (m->nsv == 0 || m->nsv % m->vectors) return *why = "support_vectors do not split into vectors", false;
    if (m->classes < 2) return *why = "one class", false;
    if (m->ncoef < (m->classes - 1) * m->vectors || m->nrho < pairs) return *why = "too few coefficients or rho", false;
    if (m->nprob > 0 && m->nprob < pairs) return *why = "too few prob_a/prob_b", false;
    if (m->nprob > 0 && m->classes > ML_MAX_PROB_CLASSES) return *why = "probabilities for more than 32 classes", false;
    if (m->nprob == 0 && m->classes == 2 && m->post == ML_POST_PROBIT)
      return *why = "binary PROBIT leaves ORT's second score column unwritten", false;
    m->feats = m->nsv / m->vectors;
  } else {
    if (m->ncoef % m->classes) return *why = "coefficients do not split into classes", false;
    if (m->nrho < 1) return *why = "no rho", false;
    m->p.kernel = SVM_LINEAR; /* liblinear mode */
    m->feats = m->ncoef / m->classes;
  }
  return true;
}

static bool claim_svm_classifier(claim_ctx *c, const op_def *def) {
  svm_model m;
  const char *why;
  if (!svm_model_read(c->node, &m, &why)) return claim_decline(c, "%s", why);
  return claim_rows_rank(c);
}

/* Whether every row has converged, read on the host (outside compile traces): sweeps stop early
 * once they no longer change anything. */
static bool svm_all_done(mlxb_scope *s, mlxb_array *done) {
  int64_t all = 0;
  mlxb_array *a = mlxb_reduce(s, MLXB_RALL, done, NULL, 0, false);
  return a && mlxb_read_i64(s, a, &all, 1) == 0 && all;
}

/* Pairwise coupling of the one-vs-one probabilities r into class probabilities (ORT's
 * multiclass_probability, after Wu, Lin and Weng): up to 100 Gauss-Seidel sweeps, each row
 * stopping when its error is below 0.005 / k. Every float32 operation is spelled out in ORT's
 * order so that rows stop on the same sweep. sig [n, pairs] holds the pair probabilities. */
static mlxb_array *svm_coupling(mlxb_scope *s, mlxb_array *sig, int64_t k, int64_t n) {
  mlxb_array *r[ML_MAX_PROB_CLASSES][ML_MAX_PROB_CLASSES] = {{0}};
  mlxb_array *q[ML_MAX_PROB_CLASSES][ML_MAX_PROB_CLASSES] = {{0}};
  mlxb_array *qrow[ML_MAX_PROB_CLASSES], *mask[ML_MAX_PROB_CLASSES];
  int64_t idx = 0;
  for (int64_t i = 0; i < k - 1; i++)
    for (int64_t j = i + 1; j < k; j++, idx++) {
      r[i][j] = column(s, sig, idx);
      r[j][i] = sub(s, f32(s, 1.0), r[i][j]);
    }
  for (int64_t i = 0; i < k; i++) {
    q[i][i] = mlxb_zeros(s, &n, 1, MLXB_F32);
    for (int64_t j = 0; j < k; j++) {
      if (j == i) continue;
      q[i][i] = add(s, q[i][i], mul(s, r[j][i], r[j][i]));
      if (j > i) q[i][j] = mul(s, mlxb_unary(s, MLXB_NEG, r[j][i]), r[i][j]);
    }
    for (int64_t j = 0; j < i; j++) q[i][j] = q[j][i];
  }
  for (int64_t i = 0; i < k; i++) {
    qrow[i] = mlxb_stack(s, (const mlxb_array *const *)q[i], (int)k, 1);
    mask[i] = cmp(s, MLXB_EQUAL, mlxb_arange(s, 0, (double)k, 1, MLXB_I32), mlxb_scalar_i64(s, i, MLXB_I32));
  }
  int64_t nk[2] = {n, k};
  mlxb_array *p = mlxb_full(s, nk, 2, f32(s, 1.0f / (float)k), MLXB_F32);
  mlxb_array *done = mlxb_zeros(s, &n, 1, MLXB_BOOL);
  mlxb_array *eps = f32(s, 0.005f / (float)k);
  int ax = 1;
  for (int loop = 0; loop < 100; loop++) {
    mlxb_array *qp = mlxb_zeros(s, nk, 2, MLXB_F32), *pqp = mlxb_zeros(s, &n, 1, MLXB_F32);
    for (int64_t j = 0; j < k; j++) qp = add(s, qp, mul(s, qrow[j], reshape2(s, column(s, p, j), n, 1)));
    for (int64_t i = 0; i < k; i++) pqp = add(s, pqp, mul(s, column(s, p, i), column(s, qp, i)));
    mlxb_array *err = mlxb_unary(s, MLXB_ABS, sub(s, qp, reshape2(s, pqp, n, 1)));
    err = mlxb_where(s, mlxb_unary(s, MLXB_ISNAN, err), f32(s, 0.0), err); /* '>' never takes NaN */
    mlxb_array *max_err = mlxb_reduce(s, MLXB_RMAX, err, &ax, 1, false);
    done = mlxb_binary(s, MLXB_LOGICAL_OR, done, cmp(s, MLXB_LESS, max_err, eps));
    if (loop % 4 == 0 && !mlxb_in_trace() && svm_all_done(s, done)) break; /* later sweeps change nothing */
    mlxb_array *np = p;
    for (int64_t i = 0; i < k; i++) {
      mlxb_array *qii = q[i][i], *qpi = column(s, qp, i);
      mlxb_array *diff = dvd(s, add(s, mlxb_unary(s, MLXB_NEG, qpi), pqp), qii);
      mlxb_array *one_d = add(s, f32(s, 1.0), diff), *diff2 = reshape2(s, diff, n, 1), *one_d2 = reshape2(s, one_d, n, 1);
      np = mlxb_where(s, mask[i], add(s, np, diff2), np);
      mlxb_array *inner = add(s, mul(s, diff, qii), mul(s, f32(s, 2.0), qpi));
      pqp = dvd(s, dvd(s, add(s, pqp, mul(s, diff, inner)), one_d), one_d);
      qp = dvd(s, add(s, qp, mul(s, diff2, qrow[i])), one_d2);
      np = dvd(s, np, one_d2);
    }
    p = mlxb_where(s, reshape2(s, done, n, 1), p, np);
  }
  return p;
}

/* One-vs-one decision values of libsvm: for classes i < j, the coefficients of row j-1 against
 * class i's support vectors plus those of row i against class j's, plus rho; float products
 * summed in double, as ORT. Returns the double sums [n, pairs]. */
static mlxb_array *svm_pair_sums(op_ctx *c, const svm_model *m, mlxb_array *kern, int *rc) {
  mlxb_scope *s = op_scope(c);
  int64_t k = m->classes, v = m->vectors, pairs = k * (k - 1) / 2;
  float *w = calloc((size_t)(v * pairs), sizeof *w);
  uint8_t *used = calloc((size_t)(v * pairs), 1);
  int64_t *start = calloc((size_t)k, sizeof *start);
  if (!w || !used || !start) {
    free(w), free(used), free(start);
    *rc = op_fail(c, "out of memory");
    return NULL;
  }
  for (int64_t i = 1; i < k; i++) start[i] = start[i - 1] + m->per_class[i - 1];
  int64_t pk = 0;
  for (int64_t i = 0; i < k - 1; i++)
    for (int64_t j = i + 1; j < k; j++, pk++) {
      for (int64_t t = 0; t < m->per_class[i]; t++) {
        w[(start[i] + t) * pairs + pk] = m->coef[v * (j - 1) + start[i] + t];
        used[(start[i] + t) * pairs + pk] = 1;
      }
      for (int64_t t = 0; t < m->per_class[j]; t++) {
        w[(start[j] + t) * pairs + pk] = m->coef[v * i + start[j] + t];
        used[(start[j] + t) * pairs + pk] = 1;
      }
    }
  int64_t d3[3] = {1, v, pairs};
  mlxb_array *wa = mlxb_from_data(s, w, d3, 3, MLXB_F32), *ua = mlxb_from_data(s, used, d3, 3, MLXB_BOOL);
  free(w), free(used), free(start);
  int ax2 = 2, ax1 = 1;
  mlxb_array *prod = mul(s, mlxb_expand_dims(s, kern, &ax2, 1), wa); /* float products, as ORT */
  prod = mlxb_where(s, ua, prod, f32(s, 0.0));                       /* no inf * 0 from other classes */
  bool old = mlxb_scope_force_cpu(s, true);                          /* float64 work */
  mlxb_array *sum = mlxb_reduce(s, MLXB_RSUM, cast(s, prod, MLXB_F64), &ax1, 1, false);
  sum = add(s, sum, cast(s, vec_f32(s, m->rho, pairs), MLXB_F64));
  mlxb_scope_force_cpu(s, old);
  return sum;
}

/* Votes of the one-vs-one classifiers (class i wins where the sum is > 0, else j), as float counts [n, k]. */
static mlxb_array *svm_votes(op_ctx *c, const svm_model *m, mlxb_array *pos, int *rc) {
  mlxb_scope *s = op_scope(c);
  int64_t k = m->classes, pairs = k * (k - 1) / 2;
  float *a = calloc((size_t)(pairs * k), sizeof *a), *b = calloc((size_t)(pairs * k), sizeof *b);
  if (!a || !b) {
    free(a), free(b);
    *rc = op_fail(c, "out of memory");
    return NULL;
  }
  int64_t pk = 0;
  for (int64_t i = 0; i < k - 1; i++)
    for (int64_t j = i + 1; j < k; j++, pk++) a[pk * k + i] = 1.0f, b[pk * k + j] = 1.0f;
  int64_t d[2] = {pairs, k};
  mlxb_array *aa = mlxb_from_data(s, a, d, 2, MLXB_F32), *ba = mlxb_from_data(s, b, d, 2, MLXB_F32);
  free(a), free(b);
  mlxb_array *pf = cast(s, pos, MLXB_F32);
  return add(s, mlxb_matmul(s, pf, aa), mlxb_matmul(s, sub(s, f32(s, 1.0), pf), ba));
}

/* Label of liblinear mode for two classes (ORT's ChooseClass): without probabilities a positive
 * best score (>= 0.5 when every coefficient is >= 0) picks labels[1]. */
static mlxb_array *svm_linear_labels(mlxb_scope *s, const svm_model *m, mlxb_array *z, mlxb_array *best) {
  mlxb_array *y = ml_pick_labels(s, m->labels, m->classes, best);
  if (m->classes != 2 || m->nprob > 0) return y;
  bool all_pos = true;
  for (int64_t i = 0; i < m->ncoef; i++) all_pos = all_pos && m->coef[i] >= 0.0f;
  int64_t n = mlxb_dim(z, 0);
  mlxb_array *maxw = reshape1(s, mlxb_take_along_axis(s, z, reshape2(s, best, n, 1), 1), n);
  mlxb_array *win = all_pos ? cmp(s, MLXB_GREATER_EQUAL, maxw, f32(s, 0.5)) : cmp(s, MLXB_GREATER, maxw, f32(s, 0.0));
  return mlxb_where(s, win, mlxb_scalar_i64(s, m->labels[1], MLXB_I64), y);
}

static int lower_svm_classifier(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  svm_model m;
  const char *why;
  if (!svm_model_read(op_node(c), &m, &why)) return op_fail(c, "%s", why);
  int64_t rows, feats, k = m.classes;
  mlxb_array *x = ml_rows(c, MLXB_F32, &rows, &feats), *y, *z;
  if (!x) return -1;
  if (feats != m.feats) return op_fail(c, "%lld features, the model has %lld", (long long)feats, (long long)m.feats);
  if (m.vectors == 0) {
    z = svm_kernel_dot(s, &m.p, x, m.coef, k, feats, m.rho[0]);
    y = svm_linear_labels(s, &m, z, ml_argmax_first(s, z));
    z = k >= 2 ? ml_post_rows(s, z, m.post) : ml_post_single(s, z, m.post);
  } else {
    int rc = 0;
    mlxb_array *kern = svm_kernel_dot(s, &m.p, x, m.sv, m.vectors, feats, 0.0f);
    mlxb_array *sums = svm_pair_sums(c, &m, kern, &rc);
    if (rc) return rc;
    bool old = mlxb_scope_force_cpu(s, true);
    mlxb_array *pos = cmp(s, MLXB_GREATER, sums, mlxb_scalar_f64(s, 0.0, MLXB_F64));
    mlxb_array *scores = cast(s, sums, MLXB_F32);
    mlxb_scope_force_cpu(s, old);
    mlxb_array *votes = svm_votes(c, &m, pos, &rc);
    if (rc) return rc;
    y = ml_pick_labels(s, m.labels, k, cast(s, mlxb_argmax(s, votes, 1, false), MLXB_I32));
    if (m.nprob > 0) {
      int64_t pairs = k * (k - 1) / 2;
      mlxb_array *val = add(s, mul(s, scores, vec_f32(s, m.prob_a, pairs)), vec_f32(s, m.prob_b, pairs));
      mlxb_array *sig = sub(s, f32(s, 1.0), ml_logistic(s, val));
      sig = mlxb_binary(s, MLXB_MINIMUM, mlxb_binary(s, MLXB_MAXIMUM, sig, f32(s, 1.0e-7f)), f32(s, 1.0f - 1.0e-7f));
      z = ml_post_rows(s, svm_coupling(s, sig, k, rows), m.post);
    } else if (k > 2) {
      z = ml_post_rows(s, scores, m.post);
    } else {
      z = ml_second_class(s, scores, m.post == ML_POST_NONE ? 2 : 0, m.post);
    }
  }
  if (op_set_output(c, 0, y)) return -1;
  return op_has_output(c, 1) ? op_set_output(c, 1, z) : 0;
}

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
  m->targets = classifier ? attr_count(n, "classlabels_int64s") : ir_attr_int(n, "n_targets", 0);
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
    int64_t t = tleaf[i] ? nn + tids[i] : tids[i], f = fleaf[i] ? nn + fids[i] : fids[i];
    if (tids[i] < 0 || fids[i] < 0 || (tleaf[i] ? tids[i] >= nl : tids[i] >= nn) || (fleaf[i] ? fids[i] >= nl : fids[i] >= nn)) {
      tree_fail(e, "child index out of range");
      goto fail;
    }
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

static mlxb_array *tab_i32(mlxb_scope *s, const int32_t *v, int64_t n) { return mlxb_from_data(s, v, &n, 1, MLXB_I32); }

static mlxb_array *tab_real(mlxb_scope *s, const double *v, int64_t n, mlxb_dtype t) {
  return host_reals(s, v, &n, 1, t);
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
  *sets = host_reals(s, vals, &nv, 1, t), *off = tab_i32(s, o, m->n), *len = tab_i32(s, l, m->n);
  free(vals), free(o), free(l), free(tmp);
  return op_check(c);
}

/* Whether v is in the node's sorted set [off, off + len): bisection over the widest set, every
 * probe clipped into the node's run. */
static mlxb_array *tree_member(mlxb_scope *s, mlxb_array *sets, mlxb_array *off, mlxb_array *len, int64_t widest,
                               mlxb_array *v) {
  mlxb_array *one = mlxb_scalar_i64(s, 1, MLXB_I32), *zero = mlxb_scalar_i64(s, 0, MLXB_I32);
  mlxb_array *last = mlxb_binary(s, MLXB_MAXIMUM, sub(s, len, one), zero), *pos = mul(s, len, zero);
  int64_t step = 1;
  while (step * 2 <= widest) step *= 2;
  for (; step >= 1; step /= 2) {
    mlxb_array *cand = add(s, pos, mlxb_scalar_i64(s, step, MLXB_I32));
    mlxb_array *probe = mlxb_take(s, sets, add(s, off, mlxb_clip(s, sub(s, cand, one), zero, last)), 0);
    mlxb_array *ok = mlxb_binary(s, MLXB_LOGICAL_AND, cmp(s, MLXB_LESS_EQUAL, cand, len), cmp(s, MLXB_LESS, probe, v));
    pos = mlxb_where(s, ok, cand, pos);
  }
  mlxb_array *found = mlxb_take(s, sets, add(s, off, mlxb_clip(s, pos, zero, last)), 0);
  return mlxb_binary(s, MLXB_LOGICAL_AND, cmp(s, MLXB_GREATER, len, zero), cmp(s, MLXB_EQUAL, found, v));
}

/* The leaf every row reaches in every tree: [rows, trees] int32 node positions. x is [rows,
 * features] in the threshold type; each of `depth` steps gathers the node's feature, threshold
 * and children (leaves point to themselves, so finished rows stay). */
static mlxb_array *tree_leaves(op_ctx *c, const tree_model *m, mlxb_array *x, mlxb_dtype t) {
  mlxb_scope *s = op_scope(c);
  int64_t rows = mlxb_dim(x, 0), nt[2] = {rows, m->trees};
  mlxb_array *feature = tab_i32(s, m->feature, m->n), *value = tab_real(s, m->value, m->n, t);
  mlxb_array *tnext = tab_i32(s, m->tnext, m->n), *fnext = tab_i32(s, m->fnext, m->n);
  mlxb_array *mode = mlxb_from_data(s, m->mode, &m->n, 1, MLXB_U8), *miss = NULL, *sets = NULL;
  bool any_miss = false;
  for (int64_t i = 0; i < m->n; i++) any_miss = any_miss || (m->miss[i] && m->mode[i] != TREE_LEAF);
  if (any_miss) miss = mlxb_from_data(s, m->miss, &m->n, 1, MLXB_BOOL);
  mlxb_array *set_off = NULL, *set_len = NULL;
  if (m->modes & (1u << TREE_MEMBER)) {
    if (tree_member_tables(c, m, t, &sets, &set_off, &set_len)) return NULL;
  }
  mlxb_array *node = mlxb_broadcast_to(s, reshape2(s, tab_i32(s, m->roots, m->trees), 1, m->trees), nt, 2);
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
        ck = cmp(s, tree_cmp_op(k), v, th);
      }
      cond = !cond || !md ? ck : mlxb_where(s, cmp(s, MLXB_EQUAL, md, mlxb_scalar_i64(s, k, MLXB_U8)), ck, cond);
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
  int64_t k = m->targets, cells = m->n * k;
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
  *score = host_reals(s, sc, d, 2, t);
  *has = mlxb_from_data(s, hs, d, 2, MLXB_BOOL);
  free(sc), free(scf), free(hs);
  return op_check(c);
}

/* The aggregate over trees [rows, targets] before base values, and (for two or more targets)
 * whether any reached leaf names each target. One target follows ORT's single-score path: each
 * leaf contributes its first weight, or its node value when it has none. */
static int tree_aggregate(op_ctx *c, const tree_model *m, mlxb_array *leaves, mlxb_dtype t, mlxb_array **out,
                          mlxb_array **has) {
  mlxb_scope *s = op_scope(c);
  int ax = 1;
  *has = NULL;
  if (m->targets == 1) {
    double *u = malloc(sizeof(double) * (size_t)(m->n + 1));
    uint8_t *seen = calloc((size_t)(m->n + 1), 1);
    if (!u || !seen) {
      free(u), free(seen);
      return op_fail(c, "out of memory");
    }
    for (int64_t i = 0; i < m->n; i++) u[i] = m->value[i];
    for (int64_t i = 0; i < m->nw; i++)
      if (!seen[m->w_node[i]]) u[m->w_node[i]] = m->w_value[i], seen[m->w_node[i]] = 1;
    mlxb_array *vals = mlxb_take(s, tab_real(s, u, m->n, t), leaves, 0);
    free(u), free(seen);
    mlxb_reduce_op op = m->agg == TREE_MIN ? MLXB_RMIN : m->agg == TREE_MAX ? MLXB_RMAX : MLXB_RSUM;
    *out = mlxb_reduce(s, op, vals, &ax, 1, true);
    return op_check(c);
  }
  mlxb_array *table = NULL, *htable = NULL;
  if (tree_weight_tables(c, m, t, &table, &htable)) return -1;
  mlxb_array *g = mlxb_take(s, table, leaves, 0), *h = mlxb_take(s, htable, leaves, 0); /* [rows, trees, targets] */
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
static mlxb_array *tree_regression_scores(op_ctx *c, const tree_model *m, mlxb_array *agg, mlxb_array *has, mlxb_dtype t) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *z = agg;
  if (m->agg == TREE_AVERAGE) z = dvd(s, z, mlxb_scalar_f64(s, (double)m->trees, t));
  if (m->targets == 1) {
    if (m->nbase == 1) z = add(s, z, mlxb_scalar_f64(s, m->bases[0], t));
    return m->post == ML_POST_PROBIT ? cast(s, ml_probit(s, cast(s, z, MLXB_F32)), t) : z;
  }
  if (m->nbase == m->targets) z = add(s, z, tab_real(s, m->bases, m->nbase, t));
  z = mlxb_where(s, has, z, mlxb_scalar_f64(s, 0.0, t));
  return ml_post_rows(s, z, m->post);
}

static bool claim_tree_common(claim_ctx *c, tree_model *m, bool ok, tree_err *e) {
  if (!ok) return claim_decline(c, "%s", e->msg);
  tree_model_free(m);
  return claim_rows_rank(c);
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
  const ir_node *n = op_node(c);
  int32_t xt = op_input_dtype(c, 0);
  tree_model m;
  tree_err e;
  bool v5 = strcmp(n->op_type, "TreeEnsemble") == 0;
  if (!(v5 ? tree_from_v5(n, xt, &m, &e) : tree_from_v3(n, false, xt == ONNX_DOUBLE, &m, &e))) return op_fail(c, "%s", e.msg);
  mlxb_dtype t = m.dbl ? MLXB_F64 : MLXB_F32;
  int rc = -1; /* double work needs no CPU forcing: double inputs are declined on the GPU */
  mlxb_array *x = tree_input(c, &m, t), *agg, *has;
  if (x && !tree_aggregate(c, &m, tree_leaves(c, &m, x, t), t, &agg, &has)) {
    mlxb_array *z = tree_regression_scores(c, &m, agg, has, t);
    rc = op_set_output(c, 0, cast(s, z, v5 ? (mlxb_dtype)op_mlx_dtype(xt) : MLXB_F32));
  }
  tree_model_free(&m);
  return rc;
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
  if (attr_count(c->node, "classlabels_strings") > 0) return claim_decline(c, "string class labels (string output)");
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
  return claim_rows_rank(c);
}

/* The first class with a score that beats every earlier one under '>' (ORT's get_max_weight),
 * counting only classes some reached leaf names; 0 when none does. */
static mlxb_array *tree_best_class(mlxb_scope *s, mlxb_array *z, mlxb_array *has, int64_t k) {
  int64_t n = mlxb_dim(z, 0);
  mlxb_array *best = mlxb_full(s, &n, 1, mlxb_scalar_i64(s, -1, MLXB_I32), MLXB_I32), *bw = column(s, z, 0);
  for (int64_t j = 0; j < k; j++) {
    mlxb_array *zj = column(s, z, j), *hj = column(s, has, j);
    mlxb_array *first = cmp(s, MLXB_LESS, best, mlxb_scalar_i64(s, 0, MLXB_I32));
    mlxb_array *take = mlxb_binary(s, MLXB_LOGICAL_AND, hj, mlxb_binary(s, MLXB_LOGICAL_OR, first, cmp(s, MLXB_GREATER, zj, bw)));
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
  mlxb_array *s0 = column(s, agg, 0), *s1 = column(s, agg, 1), *h0 = column(s, has, 0), *h1 = column(s, has, 1);
  mlxb_array *zero = mlxb_scalar_f64(s, 0.0, t), *two_cols;
  if (m->nbase == 2) {
    mlxb_array *t1 = add(s, mlxb_scalar_f64(s, m->base[1], t), s0);
    mlxb_array *n1 = add(s, s1, mlxb_scalar_f64(s, m->base[1], t)), *n0 = add(s, s0, mlxb_scalar_f64(s, m->base[0], t));
    s1 = mlxb_where(s, h1, t1, n1), s0 = mlxb_where(s, h1, mlxb_unary(s, MLXB_NEG, t1), n0);
    two_cols = mlxb_full(s, &n, 1, mlxb_scalar_i64(s, 1, MLXB_BOOL), MLXB_BOOL);
  } else {
    if (m->nbase == 1) s0 = add(s, s0, mlxb_scalar_f64(s, m->base[0], t));
    two_cols = h1;
  }
  mlxb_array *pos = mlxb_where(s, h1, s1, mlxb_where(s, h0, s0, zero));
  bool all_pos, binary = tree_binary_case(m, &all_pos);
  if (binary) {
    mlxb_array *win = cmp(s, MLXB_GREATER, pos, mlxb_scalar_f64(s, all_pos ? 0.5 : 0.0, t));
    *y = mlxb_where(s, win, mlxb_scalar_i64(s, labels[1], MLXB_I64), mlxb_scalar_i64(s, labels[0], MLXB_I64));
  } else {
    *y = mlxb_where(s, cmp(s, MLXB_GREATER, pos, zero), mlxb_scalar_i64(s, 1, MLXB_I64), mlxb_scalar_i64(s, 0, MLXB_I64));
  }
  mlxb_array *v0 = cast(s, mlxb_where(s, h0, s0, zero), MLXB_F32), *v1 = cast(s, mlxb_where(s, h1, s1, zero), MLXB_F32);
  mlxb_array *both = ml_post_rows(s, concat2(s, reshape2(s, v0, n, 1), reshape2(s, v1, n, 1), 1), m->post);
  mlxb_array *one = ml_second_class(s, reshape2(s, v0, n, 1), binary && all_pos ? 0 : 2, m->post);
  *z = mlxb_where(s, reshape2(s, two_cols, n, 1), both, one);
  return op_check(c);
}

static int lower_tree_classifier(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  tree_model m;
  tree_err e;
  if (!tree_from_v3(n, true, op_input_dtype(c, 0) == ONNX_DOUBLE, &m, &e)) return op_fail(c, "%s", e.msg);
  const int64_t *labels;
  ir_attr_ints(n, "classlabels_int64s", &labels);
  mlxb_dtype t = m.dbl ? MLXB_F64 : MLXB_F32;
  mlxb_array *x = tree_input(c, &m, t), *agg, *has, *y = NULL, *z = NULL;
  int rc = -1;
  if (!x || tree_aggregate(c, &m, tree_leaves(c, &m, x, t), t, &agg, &has)) goto done;
  if (m.targets == 2) {
    if (tree_binary_outputs(c, &m, labels, agg, has, t, &y, &z)) goto done;
  } else {
    if (m.nbase == m.targets) { /* every class gets its base value and counts as reached */
      int64_t dims[2] = {mlxb_dim(agg, 0), m.nbase};
      mlxb_array *base = tab_real(s, m.bases, m.nbase, t);
      agg = mlxb_where(s, has, add(s, agg, base), mlxb_broadcast_to(s, reshape2(s, base, 1, m.nbase), dims, 2));
      has = mlxb_full(s, dims, 2, mlxb_scalar_i64(s, 1, MLXB_BOOL), MLXB_BOOL);
    }
    y = ml_pick_labels(s, labels, m.targets, tree_best_class(s, agg, has, m.targets));
    z = ml_post_rows(s, cast(s, mlxb_where(s, has, agg, mlxb_scalar_f64(s, 0.0, t)), MLXB_F32), m.post);
  }
  if (op_set_output(c, 0, y)) goto done;
  rc = op_has_output(c, 1) ? op_set_output(c, 1, cast(s, z, MLXB_F32)) : 0;
done:
  tree_model_free(&m);
  return rc;
}

/* ---- the table ---------------------------------------------------------------------------- */

#define ML "ai.onnx.ml"
#define DT_ML_IN (DT_F32 | DT_F64 | DT(ONNX_INT32) | DT(ONNX_INT64)) /* T of most ml ops */

static const op_def defs[] = {
    {ML, "LinearClassifier", 1, 1, DT_ML_IN, claim_linear_classifier, lower_linear_classifier, 0, 0,
     "float/double/int32/int64 X of rank 1 or 2 (cast to float, as ORT); int64 classlabels_ints; every "
     "post_transform; one class with two labels gives [1 - p, p] (p the score, or its logistic under LOGISTIC; "
     "other transforms ignored, as ORT), one class without labels a raw score (PROBIT only). "
     "Declined: classlabels_strings (string output), no intercepts, binary PROBIT (ORT leaves a column unwritten)"},
    {ML, "LinearRegressor", 1, 1, DT_F32, claim_linear_regressor, lower_linear_regressor, 0, 0,
     "float X of rank <= 2 (ORT's only type); intercepts used when one per target; every post_transform "
     "(one target: PROBIT only, as ORT)"},
    {ML, "Scaler", 1, 1, DT_ML_IN, claim_scaler, lower_scaler, 0, 0,
     "float/double/int32/int64 X; scale/offset of one value or one per feature (dim 1); float output"},
    {ML, "Normalizer", 1, 1, DT_ML_IN, claim_normalizer, lower_normalizer, 0, 0,
     "float/double/int32/int64 X of rank 1 or 2; MAX, L1, L2 per row in float32; rows of norm 0 copied"},
    {ML, "Binarizer", 1, 1, DT_F32 | DT_F64, NULL, lower_binarizer, 0, 0,
     "float/double X; x > threshold. NaN gives 0 where ORT fails"},
    {ML, "Imputer", 1, 1, DT_F32 | DT(ONNX_INT64), claim_imputer, lower_imputer, 0, 0,
     "float X with imputed_value_floats / replaced_value_float (NaN matches NaN), int64 X with "
     "imputed_value_int64s / replaced_value_int64; one value or one per feature"},
    {ML, "ArrayFeatureExtractor", 1, 1, DT_ML_IN, claim_array_feature_extractor, lower_array_feature_extractor, 0, 0,
     "float/double/int32/int64 X, int64 indices along the last axis (rank-1 X gives [1, k]); out-of-range "
     "indices are clipped (ORT fails). Declined: string X"},
    {ML, "FeatureVectorizer", 1, 1, DT_ML_IN, claim_feature_vectorizer, lower_feature_vectorizer, 0, 0,
     "float/double/int32/int64 inputs with equal row counts; each cut or zero-padded to inputdimensions"},
    {ML, "OneHotEncoder", 1, 1, DT_F32 | DT_F64 | DT(ONNX_INT64), claim_one_hot_encoder, lower_one_hot_encoder, 0, 0,
     "float/double/int64 X of rank <= 2 (truncated to int64), cats_int64s; unknown categories give zeros "
     "(ORT fails when zeros=0). Declined: cats_strings"},
    {ML, "LabelEncoder", 2, 4, DT_F32 | DT_F64 | DT(ONNX_INT64), claim_label_encoder, lower_label_encoder, 0, 0,
     "int64/float/double keys to int64/float/double values from *_int64s/*_floats lists or (opset 4) "
     "keys_tensor/values_tensor/default_tensor; duplicate keys keep the first value; NaN keys match NaN "
     "from opset 4. Declined: string keys or values, opset 1"},
    {ML, "SVMRegressor", 1, 1, DT_F32, claim_svm_regressor, lower_svm_regressor, 0, 0,
     "float X; LINEAR/POLY/RBF/SIGMOID kernels with support vectors, or liblinear coefficients; one_class. "
     "Declined: post_transform other than NONE (ORT ignores it), missing kernel_params"},
    {ML, "SVMClassifier", 1, 1, DT_ML_IN, claim_svm_classifier, lower_svm_classifier, 0, 0,
     "float/double/int32/int64 X (cast to float); int64 labels; LINEAR/POLY/RBF/SIGMOID kernels with one-vs-one "
     "voting, prob_a/prob_b probabilities by ORT's pairwise coupling (<= 32 classes), or liblinear "
     "coefficients; every post_transform. Declined: string labels, binary PROBIT without probabilities "
     "(ORT leaves a column unwritten)"},
    {ML, "TreeEnsembleRegressor", 1, 3, DT_F32 | DT_F64, claim_tree_regressor, lower_tree_regressor, 0, 0,
     "float/double X (double thresholds and sums for double, as ORT); BRANCH_LEQ/LT/GTE/GT/EQ/NEQ, missing "
     "values tracking true; SUM/AVERAGE/MIN/MAX; base_values (a target no reached leaf names gives 0, as ORT); "
     "every post_transform (one target: PROBIT only, leaves without weights give their node value, as ORT); "
     "*_as_tensor attributes of the threshold type. Declined: trees split into non-contiguous runs, "
     "cycles, depth > 4096"},
    {ML, "TreeEnsembleClassifier", 1, 3, DT_ML_IN, claim_tree_classifier, lower_tree_classifier, 0, 0,
     "float/double/int32/int64 X; int64 labels; node modes and missing tracking as the regressor; scores summed "
     "with base_values and ORT's binary-class rules (one class id, all-positive weights, widened single "
     "scores). Declined: classlabels_strings, one class, binary PROBIT or one base value with two class ids "
     "(ORT leaves a column unwritten)"},
    {ML, "TreeEnsemble", 5, 5, DT_F32 | DT_F64, claim_tree_ensemble, lower_tree_regressor, 0, 0,
     "float/double X and output; all node modes including BRANCH_MEMBER sets; AVERAGE/SUM/MIN/MAX; "
     "post_transform NONE, SOFTMAX_ZERO, PROBIT. Declined: post_transform 1 and 2 (ORT swaps SOFTMAX and "
     "LOGISTIC against the spec), single-leaf trees whose leaf index differs from the root index"},
};

OPS_FAMILY(ml, defs);
