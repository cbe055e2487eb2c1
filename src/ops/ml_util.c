/* Helpers shared by the ai.onnx.ml families (see ml_util.h). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ml_util.h"

#define ML_SQRT2_F 1.41421356f
#define ML_PI_F 3.14159265358979323846f

/* ---- small helpers ------------------------------------------------------------------------ */

mlxb_array *ml_f32(mlxb_scope *s, double v) { return mlxb_scalar_f64(s, v, MLXB_F32); }

mlxb_array *ml_vec_f32(mlxb_scope *s, const float *v, int64_t n) { return mlxb_from_data(s, v, &n, 1, MLXB_F32); }
mlxb_array *ml_vec_i64(mlxb_scope *s, const int64_t *v, int64_t n) { return mlxb_from_data(s, v, &n, 1, MLXB_I64); }

/* Host doubles as an array of float type t, converted on the host: a GPU scope has no float64
 * kernels to cast with. */
mlxb_array *ml_host_reals(mlxb_scope *s, const double *v, const int64_t *dims, int rank, mlxb_dtype t) {
  if (t == MLXB_F64) return mlxb_from_data(s, v, dims, rank, MLXB_F64);
  int64_t n = op_util_numel(dims, rank);
  float *f = malloc(sizeof(float) * (size_t)(n ? n : 1));
  if (!f) {
    mlxb_set_error(s, "out of memory");
    return NULL;
  }
  for (int64_t i = 0; i < n; i++) f[i] = (float)v[i];
  mlxb_array *a = mlxb_from_data(s, f, dims, rank, MLXB_F32);
  free(f);
  return op_util_cast(s, a, t);
}

mlxb_array *ml_reshape1(mlxb_scope *s, mlxb_array *x, int64_t a) { return mlxb_reshape(s, x, &a, 1); }

/* Column k of a [n, m] array, as [n]. */
mlxb_array *ml_column(mlxb_scope *s, mlxb_array *x, int64_t k) {
  int64_t n = mlxb_dim(x, 0);
  int64_t start[2] = {0, k}, stop[2] = {n, k + 1}, step[2] = {1, 1};
  return ml_reshape1(s, mlxb_slice(s, x, start, stop, step), n);
}

mlxb_array *ml_concat2(mlxb_scope *s, mlxb_array *a, mlxb_array *b, int axis) {
  const mlxb_array *xs[2] = {a, b};
  return mlxb_concat(s, xs, 2, axis);
}

int64_t ml_attr_count(const ir_node *n, const char *name) {
  const ir_attr *a = ir_node_attr(n, name);
  return a ? (int64_t)a->n : 0;
}

bool ml_attr_has(const ir_node *n, const char *name) { return ir_node_attr(n, name) != NULL; }

/* The input's rank when the graph knows it, else -1. */
int ml_claim_rank(const claim_ctx *c, int i) {
  const ir_value *v = claim_input(c, i);
  return v ? v->rank : -1;
}

/* ORT's ml kernels see X as rows of features: rank 1 is one row, rank 2 is [rows, features].
 * Returns X as [n, f] of dtype t, or NULL with the failure recorded. */
mlxb_array *ml_rows(op_ctx *c, mlxb_dtype t, int64_t *n, int64_t *f) {
  mlxb_array *x = op_input(c, 0);
  int r = mlxb_ndim(x);
  if (r < 1 || r > 2) return op_fail(c, "input rank %d (expected 1 or 2)", r), NULL;
  *n = r == 1 ? 1 : mlxb_dim(x, 0);
  *f = mlxb_dim(x, r - 1);
  return op_util_cast(op_scope(c), op_util_reshape2(op_scope(c), x, *n, *f), t);
}

/* ---- post-transforms, as ORT's ml_common.h computes them (float32) ------------------------ */

ml_post ml_post_parse(const char *p) {
  static const char *const names[] = {"NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"};
  _Static_assert(sizeof names / sizeof names[0] == ML_POST_BAD, "one name per ml_post value");
  for (int i = 0; i < ML_POST_BAD; i++)
    if (strcmp(p, names[i]) == 0) return (ml_post)i;
  return ML_POST_BAD;
}

ml_post ml_post_of(const ir_node *n) { return ml_post_parse(ir_attr_string(n, "post_transform", "NONE")); }

/* 1 / (1 + exp(-|x|)), mirrored for x < 0. */
mlxb_array *ml_logistic(mlxb_scope *s, mlxb_array *x) {
  mlxb_array *e = mlxb_unary(s, MLXB_EXP, mlxb_unary(s, MLXB_NEG, mlxb_unary(s, MLXB_ABS, x)));
  mlxb_array *v = op_util_div(s, ml_f32(s, 1.0), op_util_add(s, ml_f32(s, 1.0), e));
  return mlxb_where(s, mlxb_binary(s, MLXB_LESS, x, ml_f32(s, 0.0)), op_util_sub(s, ml_f32(s, 1.0), v), v);
}

/* sqrt(2) * ErfInv(2p - 1) with ORT's closed-form ErfInv approximation (a = 0.147). */
mlxb_array *ml_probit(mlxb_scope *s, mlxb_array *p) {
  const float a = 0.147f;
  const float c1 = 2.0f / (ML_PI_F * a), c2 = 1.0f / a;
  mlxb_array *x = op_util_sub(s, op_util_mul(s, ml_f32(s, 2.0), p), ml_f32(s, 1.0));
  mlxb_array *sgn = mlxb_where(s, mlxb_binary(s, MLXB_LESS, x, ml_f32(s, 0.0)), ml_f32(s, -1.0), ml_f32(s, 1.0));
  mlxb_array *lg = mlxb_unary(s, MLXB_LOG, op_util_mul(s, op_util_sub(s, ml_f32(s, 1.0), x), op_util_add(s, ml_f32(s, 1.0), x)));
  mlxb_array *v = op_util_add(s, ml_f32(s, c1), op_util_mul(s, ml_f32(s, 0.5), lg));
  mlxb_array *v2 = op_util_mul(s, ml_f32(s, c2), lg);
  mlxb_array *v3 = op_util_add(s, mlxb_unary(s, MLXB_NEG, v), mlxb_unary(s, MLXB_SQRT, op_util_sub(s, op_util_mul(s, v, v), v2)));
  return op_util_mul(s, ml_f32(s, ML_SQRT2_F), op_util_mul(s, sgn, mlxb_unary(s, MLXB_SQRT, v3)));
}

/* The row maximum as ORT's loops find it: starting at -FLT_MAX, NaN never taken. */
mlxb_array *ml_row_max(mlxb_scope *s, mlxb_array *x) {
  int ax = -1;
  mlxb_array *lo = ml_f32(s, -FLT_MAX);
  mlxb_array *clean = mlxb_where(s, mlxb_unary(s, MLXB_ISNAN, x), lo, x);
  return mlxb_binary(s, MLXB_MAXIMUM, mlxb_reduce(s, MLXB_RMAX, clean, &ax, 1, true), lo);
}

mlxb_array *ml_softmax(mlxb_scope *s, mlxb_array *x) {
  int ax = -1;
  mlxb_array *e = mlxb_unary(s, MLXB_EXP, op_util_sub(s, x, ml_row_max(s, x)));
  return op_util_div(s, e, mlxb_reduce(s, MLXB_RSUM, e, &ax, 1, true));
}

/* Softmax over the non-zero scores; zeros become zero * exp(-max) and stay out of the sum. ORT
 * computes in float32 even for double scores, except the products with zeros and the final
 * division, which are double there. */
mlxb_array *ml_softmax_zero(mlxb_scope *s, mlxb_array *x) {
  int ax = -1;
  mlxb_dtype t = mlxb_type(x);
  mlxb_array *xf = op_util_cast(s, x, MLXB_F32), *vmax = ml_row_max(s, xf);
  mlxb_array *nz = mlxb_binary(s, MLXB_LOGICAL_OR, mlxb_binary(s, MLXB_GREATER, xf, ml_f32(s, 1e-7f)), mlxb_binary(s, MLXB_LESS, xf, ml_f32(s, -1e-7f)));
  mlxb_array *e = mlxb_unary(s, MLXB_EXP, op_util_sub(s, xf, vmax));
  mlxb_array *zero = op_util_mul(s, x, op_util_cast(s, mlxb_unary(s, MLXB_EXP, mlxb_unary(s, MLXB_NEG, vmax)), t));
  mlxb_array *sum = mlxb_reduce(s, MLXB_RSUM, mlxb_where(s, nz, e, ml_f32(s, 0.0)), &ax, 1, true);
  return op_util_div(s, mlxb_where(s, nz, op_util_cast(s, e, t), zero), op_util_cast(s, sum, t));
}

/* The transform of rows of two or more scores (last axis), in float32 as ORT computes it
 * whatever the score type; the result keeps z's dtype. */
mlxb_array *ml_post_rows(mlxb_scope *s, mlxb_array *z, ml_post post) {
  mlxb_dtype t = mlxb_type(z);
  switch (post) {
    case ML_POST_LOGISTIC: return op_util_cast(s, ml_logistic(s, op_util_cast(s, z, MLXB_F32)), t);
    case ML_POST_SOFTMAX: return op_util_cast(s, ml_softmax(s, op_util_cast(s, z, MLXB_F32)), t);
    case ML_POST_SOFTMAX_ZERO: return ml_softmax_zero(s, z);
    case ML_POST_PROBIT: return op_util_cast(s, ml_probit(s, op_util_cast(s, z, MLXB_F32)), t);
    default: return z;
  }
}

/* ORT's transform of one score per row: only PROBIT applies. */
mlxb_array *ml_post_single(mlxb_scope *s, mlxb_array *z, ml_post post) {
  return post == ML_POST_PROBIT ? ml_probit(s, z) : z;
}

/* A one-score row [n, 1] widened to two classes as ORT does: [1 - p, p] with p the score, or its
 * logistic under LOGISTIC (modes 0 and 1; other transforms are not applied), or for mixed-sign
 * weights (modes 2 and 3) [-s, s] or, under LOGISTIC, the logistic of both. */
mlxb_array *ml_second_class(mlxb_scope *s, mlxb_array *z, int mode, ml_post post) {
  if (mode <= 1) {
    if (post == ML_POST_LOGISTIC) z = ml_logistic(s, z);
    return ml_concat2(s, op_util_sub(s, ml_f32(s, 1.0), z), z, 1);
  }
  if (post == ML_POST_LOGISTIC) return ml_concat2(s, ml_logistic(s, mlxb_unary(s, MLXB_NEG, z)), ml_logistic(s, z), 1);
  return ml_concat2(s, mlxb_unary(s, MLXB_NEG, z), z, 1);
}

/* Index of the first maximum of each row under '>', as ORT's loops and std::max_element pick it:
 * NaN never wins, except a NaN in column 0, which stays. Returns int32 [n]. */
mlxb_array *ml_argmax_first(mlxb_scope *s, mlxb_array *z) {
  mlxb_array *isn = mlxb_unary(s, MLXB_ISNAN, z);
  mlxb_array *clean = mlxb_where(s, isn, ml_f32(s, -INFINITY), z);
  mlxb_array *idx = op_util_cast(s, mlxb_argmax(s, clean, 1, false), MLXB_I32);
  mlxb_array *nan0 = ml_column(s, isn, 0);
  return mlxb_where(s, nan0, mlxb_scalar_i64(s, 0, MLXB_I32), idx);
}

/* labels[idx] for int32 indices known to be in range. */
mlxb_array *ml_pick_labels(mlxb_scope *s, const int64_t *labels, int64_t n, mlxb_array *idx) {
  return mlxb_take(s, ml_vec_i64(s, labels, n), idx, 0);
}

/* X [n, f] @ W^T for row-major weights W [m, f] given on the host. */
mlxb_array *ml_matmul_t(mlxb_scope *s, mlxb_array *x, const float *w, int64_t m, int64_t f) {
  int64_t d[2] = {m, f};
  int perm[2] = {1, 0};
  return mlxb_matmul(s, x, mlxb_transpose(s, mlxb_from_data(s, w, d, 2, MLXB_F32), perm, 2));
}


bool ml_claim_rows_rank(claim_ctx *c) {
  int r = ml_claim_rank(c, 0);
  if (r == 0 || r > 2) return claim_decline(c, "input rank %d (ORT's kernel takes rank 1 or 2)", r);
  return true;
}


int ml_key_cmp_int(const void *a, const void *b) {
  const ml_key *x = a, *y = b;
  if (x->i != y->i) return x->i < y->i ? -1 : 1;
  return x->pos < y->pos ? -1 : x->pos > y->pos;
}

int ml_key_cmp_real(const void *a, const void *b) {
  const ml_key *x = a, *y = b;
  if (x->r < y->r) return -1;
  if (x->r > y->r) return 1;
  return x->pos < y->pos ? -1 : x->pos > y->pos;
}
