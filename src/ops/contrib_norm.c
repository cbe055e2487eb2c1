/* Normalizations of ORT's transformer exports: SimplifiedLayerNormalization (an ORT op registered
 * in the ai.onnx domain), SkipLayerNormalization, SkipSimplifiedLayerNormalization and
 * EmbedLayerNormalization, which follow ORT's CPU kernels (float16 computed in float32, the
 * variance of the Skip ops as E[x^2] - mean^2), and GroupNorm/SkipGroupNorm (NHWC, no CPU kernel
 * in ORT), which follow the schema and ORT's CUDA kernel. */
#include <stdint.h>
#include <string.h>

#include "ops/op_util.h"


enum { SLN_INPUT, SLN_SKIP, SLN_GAMMA, SLN_BETA, SLN_BIAS };
enum { SLN_OUT_Y, SLN_OUT_MEAN, SLN_OUT_INV_STD, SLN_OUT_SUM };
enum { SKIP_LN, SKIP_SIMPLIFIED };
enum { ELN_IDS, ELN_SEG_IDS, ELN_WORD, ELN_POS, ELN_SEG, ELN_GAMMA, ELN_BETA, ELN_MASK, ELN_POS_IDS };
enum { GN_X, GN_GAMMA, GN_BETA, GN_SKIP, GN_BIAS };
enum { GN_PLAIN, GN_SKIP_ADD };

/* ---- helpers ------------------------------------------------------------------------------ */


static mlxb_array *mean_last(mlxb_scope *s, mlxb_array *x) {
  int axis = x ? mlxb_ndim(x) - 1 : 0;
  return x ? mlxb_reduce(s, MLXB_RMEAN, x, &axis, 1, true) : NULL;
}

/* Whether output i exists and something reads it. */
static bool claim_output_used(const claim_ctx *c, int i) {
  const ir_value *v = claim_output(c, i);
  return v && (v->n_consumers > 0 || v->is_graph_output);
}

/* The dtype an optional statistics output is declared with (float32 when unknown). */
static mlxb_dtype output_dtype_or_f32(op_ctx *c, int i) {
  int t = op_mlx_dtype(op_output_dtype(c, i));
  return t < 0 ? MLXB_F32 : (mlxb_dtype)t;
}

/* ---- the norm inside its readers' launch (op_lower_normed_fn) -------------------------------
 * Where the first reader of y takes the norm into its own launch and computes every reader of y
 * ahead from the norm's inputs (a decode step's Q/K/V or gate/up projections on MLX's CUDA backend,
 * contrib_quant.c), the norm launches nothing: y is then the norm's own kernel, built but never
 * evaluated (nothing reads it), and the residual sum comes from the readers' launch. */
static int norm_in_readers(op_ctx *c, op_normed *nm) {
  const ir_graph *g = op_graph(c);
  const ir_node *self = op_node(c);
  int v = self->n_outputs > SLN_OUT_Y ? self->outputs[SLN_OUT_Y] : -1;
  if (!op_can_compute_for(c) || v < 0 || g->values[v].is_graph_output) return 1;
  for (const ir_node *n = self + 1; n < g->nodes + g->n_nodes; n++)
    for (int i = 0; i < n->n_inputs; i++) {
      if (n->inputs[i] != v) continue;
      const op_def *def = op_def_of(c, n);
      return def && def->lower_normed ? def->lower_normed(c, def, n, v, nm) : 1;
    }
  return 1;
}

/* The RMS norm of x's rows (skip, bias: NULL or as mlxb_rms_norm_fused takes them) in one kernel,
 * or inside its readers' launch (above): y and, with want_sum, the residual sum. */
static int lower_rms_rows(op_ctx *c, mlxb_array *x, mlxb_array *skip, mlxb_array *bias, mlxb_array *gamma, float eps,
                          bool want_sum, mlxb_array **y, mlxb_array **sum) {
  mlxb_scope *s = op_scope(c);
  op_normed nm = {.x = x, .skip = skip, .bias = bias, .gamma = gamma, .eps = eps, .want_sum = want_sum};
  int taken = norm_in_readers(c, &nm);
  if (taken < 0) return -1;
  if (taken == 0) {
    *sum = nm.sum;
    want_sum = false; /* y below is never evaluated: its readers have their results */
  }
  if (mlxb_rms_norm_fused(s, x, skip, bias, gamma, eps, want_sum, y, want_sum ? sum : NULL)) return op_check(c);
  return 0;
}

/* ---- SimplifiedLayerNormalization --------------------------------------------------------- */

static bool claim_simplified_ln(claim_ctx *c, const op_def *def) {
  static const int same[] = {1};
  if (!op_util_claim_same_dtypes(c, same, 1)) return false; /* ORT's CPU kernel reads scale as T */
  return true;
}

/* ORT's LayerNormImpl (simplified): y = x / sqrt(sum(x^2) / n + eps) * scale over axis..end,
 * float16 in float32; inv_std_var = 1 / that root. */
static int lower_simplified_ln(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x = op_input(c, 0), *scale = op_input(c, 1);
  int rank = mlxb_ndim(x);
  int64_t dims[OP_UTIL_MAX_RANK];
  if (rank < 1 || rank > OP_UTIL_MAX_RANK) return op_fail(c, "rank %d outside [1, %d]", rank, OP_UTIL_MAX_RANK);
  mlxb_shape(x, dims);
  int64_t raw = ir_attr_int(op_node(c), "axis", -1);
  int axis = op_util_axis(raw, rank);
  if (axis < 0) return op_fail(c, "axis %lld out of range for rank %d", (long long)raw, rank);
  int64_t outer = op_util_numel(dims, axis), inner = op_util_numel(dims + axis, rank - axis);
  if ((int64_t)mlxb_size(scale) != inner)
    return op_fail(c, "scale has %zu elements, normalized size is %lld", mlxb_size(scale), (long long)inner);
  float eps = ir_attr_float(op_node(c), "epsilon", 1e-5f);
  mlxb_dtype t = mlxb_type(x), ct = op_util_compute_type(t);
  if (!op_has_output(c, 1) && outer > 0 && inner > 0 && mlxb_rms_norm_fused_available(s, t)) {
    /* rows over the last axis are x's own shape: no reshape on either side of the kernel */
    bool last_axis = axis == rank - 1;
    mlxb_array *y = NULL, *unused = NULL, *gamma = mlxb_reshape(s, scale, &inner, 1);
    if (last_axis) {
      if (lower_rms_rows(c, x, NULL, NULL, gamma, eps, false, &y, &unused)) return -1;
      return op_set_output(c, 0, y);
    }
    if (mlxb_rms_norm_fused(s, op_util_reshape2(s, x, outer, inner), NULL, NULL, gamma, eps, false, &y, NULL))
      return op_check(c);
    return op_set_output(c, 0, mlxb_reshape(s, y, dims, rank));
  }
  mlxb_array *x2 = op_util_cast(s, op_util_reshape2(s, x, outer, inner), ct);
  if (!op_has_output(c, 1) && ct == MLXB_F32) { /* MLX's fused RMS norm: the same formula, one kernel */
    mlxb_array *w = op_util_cast(s, mlxb_reshape(s, scale, &inner, 1), ct);
    return op_set_output(c, 0, op_util_cast(s, mlxb_reshape(s, mlxb_rms_norm(s, x2, w, eps), dims, rank), t));
  }
  mlxb_array *root = mlxb_unary(s, MLXB_SQRT, op_util_add(s, mean_last(s, op_util_mul(s, x2, x2)), mlxb_scalar_f64(s, eps, ct)));
  mlxb_array *y = op_util_mul(s, op_util_div(s, x2, root), op_util_cast(s, mlxb_reshape(s, scale, &inner, 1), ct));
  if (op_set_output(c, 0, op_util_cast(s, mlxb_reshape(s, y, dims, rank), t))) return -1;
  if (!op_has_output(c, 1)) return 0;
  int64_t sdims[OP_UTIL_MAX_RANK];
  for (int i = 0; i < rank; i++) sdims[i] = i < axis ? dims[i] : 1;
  mlxb_array *inv = mlxb_unary(s, MLXB_RECIPROCAL, root);
  return op_set_output(c, 1, op_util_cast(s, mlxb_reshape(s, inv, sdims, rank), output_dtype_or_f32(c, 1)));
}

/* ---- SkipLayerNormalization, SkipSimplifiedLayerNormalization ----------------------------- */

static int skip_bias_index(const op_def *def) { return def->arg == SKIP_SIMPLIFIED ? 3 : SLN_BIAS; }

static bool claim_skip_ln(claim_ctx *c, const op_def *def) {
  static const int same[] = {1, 2, 3, 4};
  if (!op_util_claim_same_dtypes(c, same, def->arg == SKIP_SIMPLIFIED ? 3 : 4)) return false;
  if (claim_output_used(c, SLN_OUT_MEAN) || claim_output_used(c, SLN_OUT_INV_STD))
    return claim_decline(c, "mean/inv_std_var outputs requested (ORT's CPU kernel does not produce them)");
  const ir_value *x = claim_input(c, SLN_INPUT), *skip = claim_input(c, SLN_SKIP);
  if (x->rank >= 0 && x->rank != 2 && x->rank != 3)
    return claim_decline(c, "input rank %d (ORT takes 2 or 3)", x->rank);
  if (skip->rank >= 0 && skip->rank != 2 && skip->rank != 3)
    return claim_decline(c, "skip rank %d (ORT takes 2 or 3)", skip->rank);
  /* ORT's float16 kernel converts a constant skip once and then reads its first row for every row */
  if (x->dtype == ONNX_FLOAT16 && skip->is_const) {
    int64_t n = ir_value_static_size(skip), h = skip->rank > 0 ? skip->dims[skip->rank - 1] : -1;
    if (n < 0 || n != h)
      return claim_decline(c, "constant float16 skip with more than one row (ORT's CPU kernel reuses row 0)");
  }
  return true;
}

/* SkipSimplifiedLayerNormalization in one kernel where the bridge has it (MLX's CUDA backend). */
static int lower_skip_rms_fused(op_ctx *c, mlxb_array *x, mlxb_array *skip, mlxb_array *bias, mlxb_array *gamma,
                                float eps) {
  mlxb_scope *s = op_scope(c);
  int64_t h = mlxb_dim(x, -1);
  bool want_sum = op_has_output(c, SLN_OUT_SUM);
  mlxb_array *y = NULL, *sum = NULL;
  /* the kernel takes x and skip in their own shapes (rows: every axis but the last) */
  if (lower_rms_rows(c, x, skip, bias ? mlxb_reshape(s, bias, &h, 1) : NULL, mlxb_reshape(s, gamma, &h, 1), eps,
                     want_sum, &y, &sum))
    return -1;
  if (op_set_output(c, SLN_OUT_Y, y)) return -1;
  return want_sum ? op_set_output(c, SLN_OUT_SUM, sum) : 0;
}

/* ORT's SkipLayerNorm: s = input + skip (+ bias); mean = sum(s) / H, root = sqrt(sum(s^2) / H
 * - mean^2 + eps) (without the mean^2 when simplified); y = (s - mean) / root * gamma + beta. */
static int lower_skip_ln(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  bool simplified = def->arg == SKIP_SIMPLIFIED;
  mlxb_array *x = op_input(c, SLN_INPUT), *skip = op_input(c, SLN_SKIP), *gamma = op_input(c, SLN_GAMMA);
  mlxb_array *beta = simplified ? NULL : op_input(c, SLN_BETA), *bias = op_input(c, skip_bias_index(def));
  int rank = mlxb_ndim(x), srank = mlxb_ndim(skip);
  if (rank < 2 || rank > 3 || srank < 2 || srank > rank)
    return op_fail(c, "input rank %d / skip rank %d unsupported", rank, srank);
  if (mlxb_dim(skip, -1) != mlxb_dim(x, -1) || mlxb_dim(skip, -2) != mlxb_dim(x, -2) ||
      (srank == 3 && mlxb_dim(skip, 0) != 1 && mlxb_dim(skip, 0) != mlxb_dim(x, 0)))
    return op_fail(c, "skip shape does not broadcast to the input");
  float eps = ir_attr_float(op_node(c), "epsilon", 1e-12f);
  mlxb_dtype t = mlxb_type(x), ct = op_util_compute_type(t);
  if (simplified && mlxb_size(x) > 0 && mlxb_rms_norm_fused_available(s, t))
    return lower_skip_rms_fused(c, x, skip, bias, gamma, eps);
  mlxb_array *sum = op_util_add(s, op_util_cast(s, x, ct), op_util_cast(s, skip, ct));
  if (bias) sum = op_util_add(s, sum, op_util_cast(s, bias, ct));
  mlxb_array *y;
  if (simplified) {
    /* MLX's fused RMS norm (the rows claim float32/float16, so ct is float32): the same formula in one
     * kernel, x * rsqrt rather than x / sqrt */
    y = mlxb_rms_norm(s, sum, op_util_cast(s, gamma, ct), eps);
  } else {
    mlxb_array *mean_sq = mean_last(s, op_util_mul(s, sum, sum));
    mlxb_array *mean = mean_last(s, sum);
    mlxb_array *var = op_util_sub(s, mean_sq, op_util_mul(s, mean, mean));
    mlxb_array *root = mlxb_unary(s, MLXB_SQRT, op_util_add(s, var, mlxb_scalar_f64(s, eps, ct)));
    y = op_util_mul(s, op_util_div(s, op_util_sub(s, sum, mean), root), op_util_cast(s, gamma, ct));
    if (beta) y = op_util_add(s, y, op_util_cast(s, beta, ct));
  }
  if (op_set_output(c, SLN_OUT_Y, op_util_cast(s, y, t))) return -1;
  return op_util_set_optional(c, SLN_OUT_SUM, op_util_cast(s, sum, t));
}

/* ---- EmbedLayerNormalization -------------------------------------------------------------- */

static bool claim_embed_ln(claim_ctx *c, const op_def *def) {
  static const int same[] = {ELN_POS, ELN_SEG, ELN_GAMMA, ELN_BETA};
  if (claim_input_dtype(c, ELN_IDS) != ONNX_INT32) return claim_decline(c, "input_ids must be int32");
  int32_t t = claim_input_dtype(c, ELN_WORD);
  if (t != ONNX_FLOAT && t != ONNX_FLOAT16)
    return claim_decline(c, "embeddings dtype %s (float32/float16 only)", ir_dtype_name(t));
  for (int i = 0; i < 4; i++) {
    int32_t u = claim_input_dtype(c, same[i]);
    if (u != ONNX_UNDEFINED && u != t) return claim_decline(c, "input %d dtype differs from word_embedding", same[i]);
  }
  if ((claim_input(c, ELN_SEG_IDS) != NULL) != (claim_input(c, ELN_SEG) != NULL))
    return claim_decline(c, "segment_ids and segment_embedding must come together");
  const ir_value *ids = claim_input(c, ELN_IDS);
  if (ids->rank >= 0 && ids->rank != 2) return claim_decline(c, "input_ids rank %d (ORT takes 2)", ids->rank);
  return true;
}

/* ORT's EmbedLayerNorm: sum = word[ids] + position[pos] (+ segment[seg]), then a two-pass
 * layer norm in float32; mask_index counts the mask's ones per batch (zeros without a mask). */
static int lower_embed_ln(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *ids = op_input(c, ELN_IDS), *word = op_input(c, ELN_WORD), *pos = op_input(c, ELN_POS);
  mlxb_array *gamma = op_input(c, ELN_GAMMA), *beta = op_input(c, ELN_BETA);
  if (!word || !pos || !gamma || !beta) return op_fail(c, "missing a required input");
  if (mlxb_ndim(ids) != 2) return op_fail(c, "input_ids must be 2-D");
  int64_t b = mlxb_dim(ids, 0), seq = mlxb_dim(ids, 1);
  mlxb_dtype t = mlxb_type(word);
  float eps = ir_attr_float(op_node(c), "epsilon", 1e-12f);
  mlxb_array *pos_ids =
      op_has_input(c, ELN_POS_IDS) ? op_input(c, ELN_POS_IDS) : mlxb_arange(s, 0.0, (double)seq, 1.0, MLXB_I32);
  /* ORT's kernel refuses ids outside its tables; the bridge bounds them inside the graph. */
  if (op_util_require_range(c, ids, 0, mlxb_dim(word, 0), "input id") ||
      op_util_require_range(c, pos_ids, 0, mlxb_dim(pos, 0), "position id"))
    return -1;
  if (op_has_input(c, ELN_SEG_IDS) &&
      op_util_require_range(c, op_input(c, ELN_SEG_IDS), 0, mlxb_dim(op_input(c, ELN_SEG), 0), "segment id"))
    return -1;
  mlxb_array *sum = op_util_add(s, op_util_cast(s, mlxb_take(s, word, ids, 0), MLXB_F32),
                        op_util_cast(s, mlxb_take(s, pos, pos_ids, 0), MLXB_F32));
  if (op_has_input(c, ELN_SEG_IDS))
    sum = op_util_add(s, sum, op_util_cast(s, mlxb_take(s, op_input(c, ELN_SEG), op_input(c, ELN_SEG_IDS), 0), MLXB_F32));
  mlxb_array *d = op_util_sub(s, sum, mean_last(s, sum));
  mlxb_array *root = mlxb_unary(s, MLXB_SQRT, op_util_add(s, mean_last(s, op_util_mul(s, d, d)), mlxb_scalar_f64(s, eps, MLXB_F32)));
  mlxb_array *y = op_util_add(s, op_util_mul(s, op_util_div(s, d, root), op_util_cast(s, gamma, MLXB_F32)), op_util_cast(s, beta, MLXB_F32));
  if (op_set_output(c, 0, op_util_cast(s, y, t))) return -1;
  if (op_has_output(c, 1)) {
    mlxb_array *count;
    if (op_has_input(c, ELN_MASK)) {
      int axis = 1;
      mlxb_array *ones = mlxb_binary(s, MLXB_EQUAL, op_input(c, ELN_MASK), mlxb_scalar_i64(s, 1, MLXB_I32));
      count = mlxb_reduce(s, MLXB_RSUM, op_util_cast(s, ones, MLXB_I32), &axis, 1, false);
    } else {
      count = mlxb_zeros(s, &b, 1, MLXB_I32);
    }
    if (op_set_output(c, 1, op_util_cast(s, count, MLXB_I32))) return -1;
  }
  return op_util_set_optional(c, 2, op_util_cast(s, sum, t));
}

/* ---- GroupNorm, SkipGroupNorm ------------------------------------------------------------- */

static bool claim_group_norm(claim_ctx *c, const op_def *def) {
  const ir_node *n = c->node;
  if (ir_attr_int(n, "channels_last", 1) != 1) return claim_decline(c, "channels_last=0 (ORT implements NHWC only)");
  int64_t act = ir_attr_int(n, "activation", -1);
  if (act != 0 && act != 1) return claim_decline(c, "activation=%lld (0 or 1)", (long long)act);
  if (ir_attr_int(n, "groups", 0) <= 0) return claim_decline(c, "groups missing or not positive");
  const ir_value *x = claim_input(c, GN_X);
  if (x->rank >= 0 && x->rank != 4) return claim_decline(c, "X rank %d (NHWC 4-D)", x->rank);
  if (def->arg == GN_SKIP_ADD) {
    static const int same[] = {GN_SKIP, GN_BIAS};
    if (!op_util_claim_same_dtypes(c, same, 2)) return false;
  }
  int32_t g = claim_input_dtype(c, GN_GAMMA), bt = claim_input_dtype(c, GN_BETA);
  if (g != bt || (g != ONNX_FLOAT && g != ONNX_FLOAT16))
    return claim_decline(c, "gamma/beta must share a float32/float16 dtype");
  return true;
}

/* Statistics per (batch, group) over H*W*C/groups in float32 as ORT's CUDA kernel: mean = sum/n,
 * var = sumsq/n - mean^2; y = (x - mean) / sqrt(var + eps) * gamma + beta, then x*sigmoid(x)
 * when activation=1. SkipGroupNorm normalizes x + skip (+ bias) and can return that sum. */
static int lower_group_norm(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_node *node = op_node(c);
  mlxb_array *x = op_input(c, GN_X), *gamma = op_input(c, GN_GAMMA), *beta = op_input(c, GN_BETA);
  if (mlxb_ndim(x) != 4) return op_fail(c, "X must be 4-D NHWC");
  int64_t dims[4];
  mlxb_shape(x, dims);
  int64_t groups = ir_attr_int(node, "groups", 0), ch = dims[3];
  if (groups <= 0 || ch % groups)
    return op_fail(c, "channels %lld not divisible by groups %lld", (long long)ch, (long long)groups);
  float eps = ir_attr_float(node, "epsilon", 1e-5f);
  mlxb_dtype t = mlxb_type(x);
  mlxb_array *xf = op_util_cast(s, x, MLXB_F32);
  if (def->arg == GN_SKIP_ADD) {
    mlxb_array *skip = op_input(c, GN_SKIP);
    if (mlxb_ndim(skip) == 2) skip = mlxb_reshape(s, skip, (int64_t[]){mlxb_dim(skip, 0), 1, 1, mlxb_dim(skip, 1)}, 4);
    xf = op_util_add(s, xf, op_util_cast(s, skip, MLXB_F32));
    if (op_has_input(c, GN_BIAS)) xf = op_util_add(s, xf, op_util_cast(s, op_input(c, GN_BIAS), MLXB_F32));
    if (op_util_set_optional(c, 1, op_util_cast(s, xf, t))) return -1;
  }
  int64_t g4[4] = {dims[0], dims[1] * dims[2], groups, ch / groups};
  int axes[2] = {1, 3};
  mlxb_array *xg = mlxb_reshape(s, xf, g4, 4);
  mlxb_array *mean = mlxb_reduce(s, MLXB_RMEAN, xg, axes, 2, true);
  mlxb_array *mean_sq = mlxb_reduce(s, MLXB_RMEAN, op_util_mul(s, xg, xg), axes, 2, true);
  mlxb_array *var = op_util_sub(s, mean_sq, op_util_mul(s, mean, mean));
  mlxb_array *inv = mlxb_unary(s, MLXB_RSQRT, op_util_add(s, var, op_util_scalar_like(s, eps, var)));
  mlxb_array *y = mlxb_reshape(s, op_util_mul(s, op_util_sub(s, xg, mean), inv), dims, 4);
  y = op_util_add(s, op_util_mul(s, y, op_util_cast(s, gamma, MLXB_F32)), op_util_cast(s, beta, MLXB_F32));
  if (ir_attr_int(node, "activation", 0) == 1) y = op_util_mul(s, y, mlxb_unary(s, MLXB_SIGMOID, y));
  return op_set_output(c, 0, op_util_cast(s, y, t));
}

/* ---- the table ---------------------------------------------------------------------------- */

static const op_def defs[] = {
    OP_ROW("", "SimplifiedLayerNormalization", 1, 1, .inputs = {2, 2}, .outputs = {1, 2},
           .dtypes = DT_F32 | DT_F16 | DT_F64, .claim = claim_simplified_ln, .lower = lower_simplified_ln,
           .doc = "ORT's RMS norm (ai.onnx domain, opset 1): any axis, epsilon, scale with the normalized size, "
                  "optional inv_std_var; float16 in float32, stash_type ignored as ORT does. Declined: scale dtype "
                  "!= X dtype, bfloat16 (no ORT CPU kernel)."),
    OP_ROW("com.microsoft", "SkipLayerNormalization", 1, 1, .inputs = {3, 5}, .outputs = {1, 4},
           .dtypes = DT_F32 | DT_F16, .claim = claim_skip_ln, .lower = lower_skip_ln, .arg = SKIP_LN,
           .doc = "2-D/3-D input, skip of the input's shape or broadcast over batch, optional beta and bias, output "
                  "input_skip_bias_sum; ORT's formula sqrt(E[s^2] - mean^2 + eps), float16 in float32. Declined: "
                  "mean and inv_std_var outputs (ORT's CPU kernel leaves them unset), constant float16 skip with "
                  "several rows (ORT reuses its first row), bfloat16."),
    OP_ROW("com.microsoft", "SkipSimplifiedLayerNormalization", 1, 1, .inputs = {3, 4}, .outputs = {1, 4},
           .dtypes = DT_F32 | DT_F16, .claim = claim_skip_ln, .lower = lower_skip_ln, .arg = SKIP_SIMPLIFIED,
           .doc = "As SkipLayerNormalization with the RMS form s / sqrt(E[s^2] + eps) * gamma and optional bias; "
                  "same declined forms."),
    OP_ROW("com.microsoft", "EmbedLayerNormalization", 1, 1, .inputs = {1, 9}, .outputs = {1, 3},
           .dtypes = DT(ONNX_INT32), .claim = claim_embed_ln, .lower = lower_embed_ln,
           .doc = "int32 input_ids [B, S], optional segment ids/embedding, optional position_ids ([B, S] or [1, S]), "
                  "mask_index (count of ones per row; zeros without mask) and embedding_sum outputs; two-pass layer "
                  "norm in float32, float16 embeddings rounded once. Out-of-range ids are not reported (ORT fails "
                  "the run)."),
    OP_ROW("com.microsoft", "GroupNorm", 1, 1, .inputs = {3, 3}, .outputs = {1, 1}, .dtypes = DT_F32 | DT_F16,
           .claim = claim_group_norm, .lower = lower_group_norm, .arg = GN_PLAIN,
           .doc = "NHWC (channels_last=1), groups, epsilon, activation 0 or 1 (SiLU); float32 statistics E[x^2] - "
                  "mean^2 as ORT's CUDA kernel (ORT has no CPU kernel). Declined: channels_last=0."),
    OP_ROW("com.microsoft", "SkipGroupNorm", 1, 1, .inputs = {4, 5}, .outputs = {1, 2}, .dtypes = DT_F32 | DT_F16,
           .claim = claim_group_norm, .lower = lower_group_norm, .arg = GN_SKIP_ADD,
           .doc = "GroupNorm of X + skip ([N,H,W,C], [N,1,1,C] or [N,C]) + optional bias [C], with the sum as "
                  "optional output S; as GroupNorm otherwise (ORT has no CPU kernel)."),
};

OPS_FAMILY(contrib_norm, defs);
