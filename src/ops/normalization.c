/* Softmax-like ops and normalizations (LayerNorm, RMSNorm, BatchNorm, InstanceNorm, GroupNorm,
 * LpNorm, MeanVarianceNorm, LRN) lowered onto MLX. Statistics are computed in float32 for
 * float16/bfloat16 inputs (float64 stays float64) and the variance as mean((x - mean)^2), which is
 * what ORT's CPU kernels compute. */
#include <stdint.h>
#include <string.h>

#include "ops/op_util.h"

#define LRN_MAX_SIZE 128

enum { SM_SOFTMAX, SM_LOGSOFTMAX, SM_HARDMAX };
enum { GN_PER_GROUP, GN_PER_CHANNEL };

/* ---- small helpers ------------------------------------------------------------------------- */

static mlxb_array *reshape_3(mlxb_scope *s, mlxb_array *x, int64_t d0, int64_t d1, int64_t d2) {
  int64_t dims[3] = {d0, d1, d2};
  return mlxb_reshape(s, x, dims, 3);
}

static mlxb_array *reduce_axis(mlxb_scope *s, mlxb_reduce_op op, mlxb_array *x, int axis) {
  return mlxb_reduce(s, op, x, &axis, 1, true);
}

/* x's dims; the rank, or -1 with the failure recorded when it is above OP_UTIL_MAX_RANK or below
 * min_rank. */
static int norm_dims(op_ctx *c, const mlxb_array *x, int64_t *dims, int min_rank) {
  int rank = op_util_dims(c, x, dims);
  if (rank >= 0 && rank < min_rank) return op_fail(c, "input rank %d < %d", rank, min_rank);
  return rank;
}

/* x's dims and the node's `axis` attribute (default -1) resolved against x's rank: the axis, or
 * -1 with the failure recorded. */
static int norm_dims_axis(op_ctx *c, mlxb_array *x, int64_t *dims, int *rank) {
  *rank = op_util_dims(c, x, dims);
  if (*rank < 0) return -1;
  return op_util_resolve_axis(c, ir_attr_int(op_node(c), "axis", -1), *rank);
}

/* x as 2-D [prod(dims[:axis]), prod(dims[axis:])]: norms over axis..end work on its rows. */
static mlxb_array *norm_flatten_at(mlxb_scope *s, mlxb_array *x, const int64_t *dims, int rank, int axis) {
  return op_util_reshape2(s, x, op_util_numel(dims, axis), op_util_numel(dims + axis, rank - axis));
}

/* Normalizes the last axis of a 2-D/3-D float array: returns (x - mean) / sqrt(var + eps) and,
 * when asked, the mean and the standard deviation (keepdims). */
static mlxb_array *standardize_last(mlxb_scope *s, mlxb_array *x, double eps, mlxb_array **mean_out,
                                    mlxb_array **std_out) {
  int axis = mlxb_ndim(x) - 1;
  mlxb_array *mean = reduce_axis(s, MLXB_RMEAN, x, axis);
  mlxb_array *d = mlxb_binary(s, MLXB_SUB, x, mean);
  mlxb_array *var = reduce_axis(s, MLXB_RMEAN, mlxb_binary(s, MLXB_MUL, d, d), axis);
  mlxb_array *std = mlxb_unary(s, MLXB_SQRT, mlxb_binary(s, MLXB_ADD, var, op_util_scalar_like(s, eps, var)));
  if (mean_out) *mean_out = mean;
  if (std_out) *std_out = std;
  return mlxb_binary(s, MLXB_DIV, d, std);
}

/* A per-channel vector [C] reshaped to [C, 1, ..., 1] so it broadcasts over [N, C, D...]. */
static mlxb_array *channel_param(mlxb_scope *s, mlxb_array *v, int rank, mlxb_dtype t) {
  int64_t dims[OP_UTIL_MAX_RANK];
  if (!v) return NULL;
  dims[0] = (int64_t)mlxb_size(v);
  for (int i = 1; i < rank - 1; i++) dims[i] = 1;
  return op_util_cast(s, mlxb_reshape(s, v, dims, rank - 1), t);
}

/* y * scale + bias, both per-channel vectors shaped by channel_param for rank and dtype t. */
static mlxb_array *channel_affine(mlxb_scope *s, mlxb_array *y, mlxb_array *scale, mlxb_array *bias, int rank,
                                  mlxb_dtype t) {
  y = mlxb_binary(s, MLXB_MUL, y, channel_param(s, scale, rank, t));
  return mlxb_binary(s, MLXB_ADD, y, channel_param(s, bias, rank, t));
}

/* ---- Softmax, LogSoftmax, Hardmax --------------------------------------------------------- */

static mlxb_array *softmax_kind(mlxb_scope *s, int kind, mlxb_array *x, int axis) {
  mlxb_dtype t = mlxb_type(x);
  if (kind == SM_HARDMAX) {
    mlxb_array *pos = op_util_iota(s, 0, mlxb_dim(x, axis), axis, mlxb_ndim(x), MLXB_U32);
    mlxb_array *best = mlxb_argmax(s, x, axis, true); /* first index on ties, as ORT */
    return mlxb_astype(s, mlxb_binary(s, MLXB_EQUAL, pos, best), t);
  }
  mlxb_array *xc = op_util_cast(s, x, op_util_compute_type(t));
  if (kind == SM_SOFTMAX) return op_util_cast(s, mlxb_softmax(s, xc, &axis, 1, false), t);
  mlxb_array *shifted = mlxb_binary(s, MLXB_SUB, xc, reduce_axis(s, MLXB_RMAX, xc, axis));
  mlxb_array *lse = mlxb_unary(s, MLXB_LOG, reduce_axis(s, MLXB_RSUM, mlxb_unary(s, MLXB_EXP, shifted), axis));
  return op_util_cast(s, mlxb_binary(s, MLXB_SUB, shifted, lse), t);
}

/* MLX's float64 exp is only float32-accurate; Hardmax needs no exp. */
static bool claim_softmax(claim_ctx *c, const op_def *def) {
  if (def->arg != SM_HARDMAX && claim_input_dtype(c, 0) == ONNX_DOUBLE)
    return claim_decline(c, "float64: MLX's float64 exp is float32-accurate");
  return true;
}

/* Before opset 13 the input is coerced to 2-D [prod(dims[:axis]), prod(dims[axis:])] (axis default
 * 1) and normalized over the second dimension; from 13 on, over one axis (default -1). */
static int lower_softmax(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x = op_input(c, 0);
  int64_t dims[OP_UTIL_MAX_RANK];
  int rank = op_util_dims(c, x, dims);
  if (rank < 0) return -1;
  bool legacy = def->since_max < 13;
  int64_t raw = ir_attr_int(op_node(c), "axis", legacy ? 1 : -1);
  int axis = legacy && (raw == rank) ? rank : op_util_resolve_axis(c, raw, rank);
  if (axis < 0) return -1;
  if (mlxb_size(x) == 0) return op_set_output(c, 0, x);
  if (!legacy) return op_set_output(c, 0, softmax_kind(s, def->arg, x, axis));
  mlxb_array *x2 = norm_flatten_at(s, x, dims, rank, axis);
  mlxb_array *y = x2 ? softmax_kind(s, def->arg, x2, 1) : NULL;
  return op_set_output(c, 0, y ? mlxb_reshape(s, y, dims, rank) : NULL);
}

/* ---- LayerNormalization, RMSNormalization ------------------------------------------------- */

static bool claim_stash_f32(claim_ctx *c, const op_def *def) {
  int64_t stash = ir_attr_int(c->node, "stash_type", 1);
  if (stash != ONNX_FLOAT) return claim_decline(c, "stash_type %lld (only float32 statistics)", (long long)stash);
  return true;
}

/* Whether v is a 1-D vector of length n (MLX's fused norms take exactly that). */
static bool is_vector_of(const mlxb_array *v, int64_t n) { return v && mlxb_ndim(v) == 1 && mlxb_dim(v, 0) == n; }

static int layernorm_stats_output(op_ctx *c, int i, mlxb_array *v, const int64_t *dims, int axis, int rank) {
  mlxb_scope *s = op_scope(c);
  int64_t shape[OP_UTIL_MAX_RANK];
  for (int k = 0; k < rank; k++) shape[k] = k < axis ? dims[k] : 1;
  int t = op_mlx_dtype(op_output_dtype(c, i));
  if (t < 0) t = MLXB_F32;
  return op_set_output(c, i, op_util_cast(s, mlxb_reshape(s, v, shape, rank), (mlxb_dtype)t));
}

/* ORT's CPU kernels refuse a Scale or B that does not broadcast one way to X (op_util_broadcasts_to). */
static int refuse_norm_params(op_ctx *c) {
  return op_fail(c, "Scale and (optional) bias must match X.shape[axis:] or be NumPy-broadcastable to it (each no "
                    "higher in rank than X, every dimension 1 or X's)");
}

static int lower_layernorm(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x = op_input(c, 0), *scale = op_input(c, 1), *bias = op_input(c, 2);
  int64_t dims[OP_UTIL_MAX_RANK];
  int rank;
  int axis = norm_dims_axis(c, x, dims, &rank);
  if (axis < 0) return -1;
  int64_t norm_size = 1;
  for (int k = axis; k < rank; k++) norm_size *= dims[k];
  if (norm_size == 0) /* ORT's CPU kernel refuses an empty normalized block */
    return op_fail(c, "Size of X.shape[axis:] must be at least 1, got 0");
  if (!op_util_broadcasts_to(scale, dims, rank) || !op_util_broadcasts_to(bias, dims, rank))
    return refuse_norm_params(c);
  float eps = ir_attr_float(op_node(c), "epsilon", 1e-5f);
  bool want_mean = op_has_output(c, 1), want_inv = op_has_output(c, 2);
  mlxb_dtype t = mlxb_type(x);
  if (!want_mean && !want_inv && axis == rank - 1 && t != MLXB_F64 && is_vector_of(scale, dims[axis]) &&
      (!bias || is_vector_of(bias, dims[axis])))
    return op_set_output(c, 0, mlxb_layer_norm(s, x, scale, bias, eps));
  mlxb_dtype ct = op_util_compute_type(t);
  mlxb_array *mean, *std;
  mlxb_array *x2 = op_util_cast(s, norm_flatten_at(s, x, dims, rank, axis), ct);
  mlxb_array *y = mlxb_reshape(s, standardize_last(s, x2, eps, &mean, &std), dims, rank);
  y = mlxb_binary(s, MLXB_MUL, y, op_util_cast(s, scale, ct));
  if (bias) y = mlxb_binary(s, MLXB_ADD, y, op_util_cast(s, bias, ct));
  if (op_set_output(c, 0, op_util_cast(s, y, t))) return -1;
  if (want_mean && layernorm_stats_output(c, 1, mean, dims, axis, rank)) return -1;
  if (want_inv && layernorm_stats_output(c, 2, mlxb_unary(s, MLXB_RECIPROCAL, std), dims, axis, rank)) return -1;
  return 0;
}

static int lower_rmsnorm(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x = op_input(c, 0), *scale = op_input(c, 1);
  int64_t dims[OP_UTIL_MAX_RANK];
  int rank;
  int axis = norm_dims_axis(c, x, dims, &rank);
  if (axis < 0) return -1;
  if (!op_util_broadcasts_to(scale, dims, rank)) return refuse_norm_params(c);
  float eps = ir_attr_float(op_node(c), "epsilon", 1e-5f);
  mlxb_dtype t = mlxb_type(x);
  if (axis == rank - 1 && t != MLXB_F64 && is_vector_of(scale, dims[axis]) && mlxb_type(scale) == t)
    return op_set_output(c, 0, mlxb_rms_norm(s, x, scale, eps));
  /* the ONNX function: normalize in float32, cast to T, then multiply by scale in T */
  mlxb_array *x2 = op_util_cast(s, norm_flatten_at(s, x, dims, rank, axis), op_util_compute_type(t));
  mlxb_array *ms = reduce_axis(s, MLXB_RMEAN, mlxb_binary(s, MLXB_MUL, x2, x2), 1);
  mlxb_array *rms = mlxb_unary(s, MLXB_SQRT, mlxb_binary(s, MLXB_ADD, ms, op_util_scalar_like(s, eps, ms)));
  mlxb_array *y = op_util_cast(s, mlxb_reshape(s, mlxb_binary(s, MLXB_DIV, x2, rms), dims, rank), t);
  return op_set_output(c, 0, mlxb_binary(s, MLXB_MUL, y, op_util_cast(s, scale, t)));
}

/* ---- BatchNormalization (inference) ------------------------------------------------------- */

static bool claim_batchnorm(claim_ctx *c, const op_def *def) {
  if (c->node->since_version >= 14 && ir_attr_int(c->node, "training_mode", 0) != 0)
    return claim_decline(c, "training_mode=1 (only inference is lowered)");
  if (c->node->since_version < 9 && ir_attr_int(c->node, "spatial", 1) != 1)
    return claim_decline(c, "spatial=0 (per-activation statistics)");
  for (int i = 1; i < c->node->n_outputs; i++)
    if (claim_output(c, i)) return claim_decline(c, "training outputs requested (output %d)", i);
  const ir_value *x = claim_input(c, 0);
  if (x && x->rank >= 0 && x->rank < 2) return claim_decline(c, "input rank %d < 2", x->rank);
  return true;
}

static int lower_batchnorm(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x = op_input(c, 0);
  int rank = mlxb_ndim(x);
  if (rank < 2 || rank > OP_UTIL_MAX_RANK) return op_fail(c, "input rank %d is outside [2, %d]", rank, OP_UTIL_MAX_RANK);
  float eps = ir_attr_float(op_node(c), "epsilon", 1e-5f);
  mlxb_dtype t = mlxb_type(x), ct = op_util_compute_type(t);
  mlxb_array *scale = channel_param(s, op_input(c, 1), rank, ct), *b = channel_param(s, op_input(c, 2), rank, ct);
  mlxb_array *mean = channel_param(s, op_input(c, 3), rank, ct), *var = channel_param(s, op_input(c, 4), rank, ct);
  /* ORT's form: y = x * (scale / sqrt(var + eps)) + (b - mean * scale / sqrt(var + eps)) */
  mlxb_array *std = mlxb_unary(s, MLXB_SQRT, mlxb_binary(s, MLXB_ADD, var, op_util_scalar_like(s, eps, var)));
  mlxb_array *inv_std = mlxb_unary(s, MLXB_RECIPROCAL, std);
  mlxb_array *k = mlxb_binary(s, MLXB_MUL, inv_std, scale);
  mlxb_array *shift = mlxb_binary(s, MLXB_SUB, b, mlxb_binary(s, MLXB_MUL, mean, k));
  mlxb_array *y = mlxb_binary(s, MLXB_ADD, mlxb_binary(s, MLXB_MUL, op_util_cast(s, x, ct), k), shift);
  return op_set_output(c, 0, op_util_cast(s, y, t));
}

/* ---- InstanceNormalization, GroupNormalization -------------------------------------------- */

static int lower_instancenorm(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x = op_input(c, 0), *scale = op_input(c, 1), *bias = op_input(c, 2);
  int64_t dims[OP_UTIL_MAX_RANK];
  int rank = norm_dims(c, x, dims, 3);
  if (rank < 0) return -1;
  float eps = ir_attr_float(op_node(c), "epsilon", 1e-5f);
  mlxb_dtype t = mlxb_type(x), ct = op_util_compute_type(t);
  mlxb_array *x3 = op_util_cast(s, reshape_3(s, x, dims[0], dims[1], op_util_numel(dims + 2, rank - 2)), ct);
  mlxb_array *y = mlxb_reshape(s, standardize_last(s, x3, eps, NULL, NULL), dims, rank);
  return op_set_output(c, 0, op_util_cast(s, channel_affine(s, y, scale, bias, rank, ct), t));
}

static bool claim_groupnorm(claim_ctx *c, const op_def *def) {
  const ir_attr *g = ir_node_attr(c->node, "num_groups");
  if (!g || g->type != IR_ATTR_INT || g->i <= 0) return claim_decline(c, "num_groups missing or not positive");
  return def->arg == GN_PER_CHANNEL ? claim_stash_f32(c, def) : true;
}

/* Opset 18 scales per group ([G]) and computes in T; opset 21 computes the statistics in float32
 * (stash_type 1, even for float64 input) and scales per channel ([C]) in T after casting back. These
 * are the ONNX functions of each version, which ORT runs. */
static int lower_groupnorm(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x = op_input(c, 0), *scale = op_input(c, 1), *bias = op_input(c, 2);
  int64_t dims[OP_UTIL_MAX_RANK];
  int rank = norm_dims(c, x, dims, 2);
  if (rank < 0) return -1;
  int64_t groups = ir_attr_int(op_node(c), "num_groups", 0);
  if (groups <= 0 || dims[1] % groups)
    return op_fail(c, "channels %lld not divisible by num_groups %lld", (long long)dims[1], (long long)groups);
  float eps = ir_attr_float(op_node(c), "epsilon", 1e-5f);
  mlxb_dtype t = mlxb_type(x), ct = def->arg == GN_PER_GROUP ? op_util_compute_type(t) : MLXB_F32;
  int64_t spatial = op_util_numel(dims + 2, rank - 2);
  mlxb_array *x3 = op_util_cast(s, reshape_3(s, x, dims[0], groups, dims[1] / groups * spatial), ct);
  mlxb_array *norm = standardize_last(s, x3, eps, NULL, NULL);
  if (def->arg == GN_PER_GROUP) {
    mlxb_array *y = channel_affine(s, norm, scale, bias, 3, ct);
    return op_set_output(c, 0, op_util_cast(s, mlxb_reshape(s, y, dims, rank), t));
  }
  mlxb_array *y = op_util_cast(s, reshape_3(s, norm, dims[0], dims[1], spatial), t);
  return op_set_output(c, 0, mlxb_reshape(s, channel_affine(s, y, scale, bias, 3, t), dims, rank));
}

/* ---- LpNormalization, MeanVarianceNormalization ------------------------------------------- */

static bool claim_lpnorm(claim_ctx *c, const op_def *def) {
  int64_t p = ir_attr_int(c->node, "p", 2);
  if (p != 1 && p != 2) return claim_decline(c, "p=%lld (ONNX allows 1 and 2)", (long long)p);
  return true;
}

static int lower_lpnorm(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x = op_input(c, 0);
  int axis = op_util_resolve_axis(c, ir_attr_int(op_node(c), "axis", -1), mlxb_ndim(x));
  if (axis < 0) return -1;
  bool l1 = ir_attr_int(op_node(c), "p", 2) == 1;
  mlxb_dtype t = mlxb_type(x);
  mlxb_array *xc = op_util_cast(s, x, op_util_compute_type(t));
  mlxb_array *norm = l1 ? reduce_axis(s, MLXB_RSUM, mlxb_unary(s, MLXB_ABS, xc), axis)
                        : mlxb_unary(s, MLXB_SQRT, reduce_axis(s, MLXB_RSUM, mlxb_binary(s, MLXB_MUL, xc, xc), axis));
  /* ORT writes zeros where the norm is 0 */
  mlxb_array *zero = op_util_scalar_like(s, 0.0, xc);
  mlxb_array *y = mlxb_where(s, mlxb_binary(s, MLXB_EQUAL, norm, zero), zero, mlxb_binary(s, MLXB_DIV, xc, norm));
  return op_set_output(c, 0, op_util_cast(s, y, t));
}

/* ORT's kernel: (x - mean) / sqrt(mean((x - mean)^2)) without the function's 1e-9, axes out of
 * range dropped and duplicates ignored. */
static int lower_mvn(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x = op_input(c, 0);
  int rank = mlxb_ndim(x);
  if (rank > OP_UTIL_MAX_RANK) return op_fail(c, "rank %d exceeds %d", rank, OP_UTIL_MAX_RANK);
  static const int64_t dflt[3] = {0, 2, 3};
  const int64_t *axes = dflt;
  size_t n = 3;
  if (ir_node_attr(op_node(c), "axes")) n = ir_attr_ints(op_node(c), "axes", &axes);
  bool used[OP_UTIL_MAX_RANK] = {false};
  int list[OP_UTIL_MAX_RANK], count = 0;
  for (size_t i = 0; i < n; i++) {
    int a = op_util_axis(axes[i], rank);
    if (a >= 0) used[a] = true;
  }
  for (int a = 0; a < rank; a++)
    if (used[a]) list[count++] = a;
  mlxb_array *d;
  if (count == 0) {
    d = mlxb_binary(s, MLXB_SUB, x, x);
  } else {
    d = mlxb_binary(s, MLXB_SUB, x, mlxb_reduce(s, MLXB_RMEAN, x, list, count, true));
  }
  mlxb_array *sq = mlxb_binary(s, MLXB_MUL, d, d);
  mlxb_array *var = count ? mlxb_reduce(s, MLXB_RMEAN, sq, list, count, true) : sq;
  return op_set_output(c, 0, mlxb_binary(s, MLXB_DIV, d, mlxb_unary(s, MLXB_SQRT, var)));
}

/* ---- LRN ---------------------------------------------------------------------------------- */

static bool claim_lrn(claim_ctx *c, const op_def *def) {
  const ir_attr *size = ir_node_attr(c->node, "size");
  if (!size || size->type != IR_ATTR_INT || size->i < 1) return claim_decline(c, "size missing or < 1");
  if (size->i > LRN_MAX_SIZE)
    return claim_decline(c, "size %lld > %d (one slice per window element)", (long long)size->i, LRN_MAX_SIZE);
  return true;
}

/* y = x * (bias + alpha / size * sum of squares over the channel window)^-beta, the window being
 * [c - floor((size-1)/2), c + ceil((size-1)/2)], as ORT computes it. */
static int lower_lrn(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  mlxb_array *x = op_input(c, 0);
  int64_t dims[OP_UTIL_MAX_RANK];
  int rank = norm_dims(c, x, dims, 2);
  if (rank < 0) return -1;
  int64_t size = ir_attr_int(n, "size", 1);
  if (size < 1 || size > LRN_MAX_SIZE) return op_fail(c, "size %lld outside [1, %d]", (long long)size, LRN_MAX_SIZE);
  float alpha = ir_attr_float(n, "alpha", 1e-4f), beta = ir_attr_float(n, "beta", 0.75f);
  float bias = ir_attr_float(n, "bias", 1.0f);
  mlxb_dtype t = mlxb_type(x), ct = op_util_compute_type(t);
  mlxb_array *xc = op_util_cast(s, x, ct);
  int64_t lo[OP_UTIL_MAX_RANK] = {0}, hi[OP_UTIL_MAX_RANK] = {0};
  lo[1] = (size - 1) / 2;
  hi[1] = size - 1 - lo[1];
  mlxb_array *padded = mlxb_pad(s, mlxb_binary(s, MLXB_MUL, xc, xc), lo, hi, mlxb_scalar_f64(s, 0.0, ct), "constant");
  mlxb_array *sum = NULL;
  for (int64_t j = 0; j < size; j++) {
    mlxb_array *win = op_util_slice_axis(s, padded, 1, j, j + dims[1], 1);
    sum = sum ? mlxb_binary(s, MLXB_ADD, sum, win) : win;
  }
  float alpha_over_size = alpha / (float)size;
  mlxb_array *base = mlxb_binary(s, MLXB_ADD, mlxb_scalar_f64(s, bias, ct),
                                 mlxb_binary(s, MLXB_MUL, mlxb_scalar_f64(s, alpha_over_size, ct), sum));
  mlxb_array *y = mlxb_binary(s, MLXB_MUL, xc, mlxb_binary(s, MLXB_POW, base, mlxb_scalar_f64(s, -beta, ct)));
  return op_set_output(c, 0, op_util_cast(s, y, t));
}

/* ---- the table --------------------------------------------------------------------------- */

#define DOC_SM_LEGACY "opset < 13: input coerced to 2-D at axis (default 1), normalized over the flattened tail."
#define DOC_SM "opset 13: one axis (default -1), negative axes."
#define DOC_SM_F64 " Declined: float64 (MLX's float64 exp is float32-accurate)."

static const op_def defs[] = {
  OP_ROW("", "Softmax", 1, 12, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOAT, .claim = claim_softmax,
         .lower = lower_softmax, .arg = SM_SOFTMAX, .doc = DOC_SM_LEGACY " float16/bfloat16 in float32." DOC_SM_F64),
  OP_ROW("", "Softmax", 13, 13, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOAT, .claim = claim_softmax,
         .lower = lower_softmax, .arg = SM_SOFTMAX, .doc = DOC_SM " float16/bfloat16 in float32." DOC_SM_F64),
  OP_ROW("", "LogSoftmax", 1, 12, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOAT, .claim = claim_softmax,
         .lower = lower_softmax, .arg = SM_LOGSOFTMAX,
         .doc = DOC_SM_LEGACY " x - max - log(sum(exp(x - max))), float16/bfloat16 in float32." DOC_SM_F64),
  OP_ROW("", "LogSoftmax", 13, 13, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOAT, .claim = claim_softmax,
         .lower = lower_softmax, .arg = SM_LOGSOFTMAX,
         .doc = DOC_SM " x - max - log(sum(exp(x - max))), float16/bfloat16 in float32." DOC_SM_F64),
  OP_ROW("", "Hardmax", 1, 12, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOAT, .claim = claim_softmax,
         .lower = lower_softmax, .arg = SM_HARDMAX, .doc = DOC_SM_LEGACY " First index wins ties."),
  OP_ROW("", "Hardmax", 13, 13, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOAT, .claim = claim_softmax,
         .lower = lower_softmax, .arg = SM_HARDMAX, .doc = DOC_SM " First index wins ties."),
  OP_ROW("", "LayerNormalization", 1, 17, .inputs = {2, 3}, .outputs = {1, 3}, .dtypes = DT_FLOAT,
         .claim = claim_stash_f32, .lower = lower_layernorm,
         .doc = "Opset 17, and the opset-1 schema ORT registers in the ai.onnx domain for older models (same "
                "semantics). Any axis (normalized over axis..end), epsilon, optional B, Scale and B broadcast one way "
                "to X (refused otherwise, as ORT refuses them); Mean and InvStdDev outputs. Statistics in float32 "
                "(float64 for float64). Declined: stash_type != 1."),
  OP_ROW("", "RMSNormalization", 23, 23, .inputs = {2, 2}, .outputs = {1, 1}, .dtypes = DT_FLOAT,
         .claim = claim_stash_f32, .lower = lower_rmsnorm,
         .doc = "Any axis (normalized over axis..end), epsilon; float32 statistics, then scale in T (the ONNX "
                "function); Scale broadcast one way to X (refused otherwise, as ORT refuses it). Declined: "
                "stash_type != 1."),
  OP_ROW("", "BatchNormalization", 7, 15, .inputs = {5, 5}, .outputs = {1, 5}, .dtypes = DT_FLOAT,
         .claim = claim_batchnorm, .lower = lower_batchnorm,
         .doc = "Inference form, rank >= 2, channel axis 1; scale/B/mean/var may have other float types (opset 15). "
                "Declined: training_mode=1, training outputs, spatial=0."),
  OP_ROW("", "InstanceNormalization", 6, 22, .inputs = {3, 3}, .outputs = {1, 1}, .dtypes = DT_FLOAT,
         .lower = lower_instancenorm,
         .doc = "Rank >= 3, epsilon; statistics over the spatial dims in float32 (float64 for float64)."),
  OP_ROW("", "GroupNormalization", 18, 18, .inputs = {3, 3}, .outputs = {1, 1}, .dtypes = DT_FLOAT,
         .claim = claim_groupnorm, .lower = lower_groupnorm, .arg = GN_PER_GROUP,
         .doc = "Opset 18: scale and bias per group ([num_groups]); statistics as mean((x - mean)^2)."),
  OP_ROW("", "GroupNormalization", 21, 21, .inputs = {3, 3}, .outputs = {1, 1}, .dtypes = DT_FLOAT,
         .claim = claim_groupnorm, .lower = lower_groupnorm, .arg = GN_PER_CHANNEL,
         .doc = "Opset 21: scale and bias per channel; float32 statistics (also for float64, as stash_type=1 says), "
                "scale/bias applied in T. Declined: stash_type != 1."),
  OP_ROW("", "LpNormalization", 1, 22, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOAT, .claim = claim_lpnorm,
         .lower = lower_lpnorm, .doc = "p = 1 or 2, any axis; zero norms give 0 (as ORT). Declined: other p."),
  OP_ROW("", "MeanVarianceNormalization", 9, 13, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_F32,
         .lower = lower_mvn,
         .doc = "float32 (ORT's only kernel), axes attribute (default [0, 2, 3]); ORT's formula (x - mean) / "
                "sqrt(var) without the function's 1e-9, so constant slices give NaN as in ORT."),
  OP_ROW("", "LRN", 1, 13, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOAT, .claim = claim_lrn,
         .lower = lower_lrn,
         .doc = "Channel window over axis 1, alpha/size, beta, bias; any size (ORT's CPU EP takes odd sizes only); "
                "float16/bfloat16 in float32. Declined: size > 128."),
};

OPS_FAMILY(normalization, defs);
