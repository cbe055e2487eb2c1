/* GELU-family and bias-fusion activations of ORT's com.microsoft domain: Gelu, BiasGelu, FastGelu
 * and QuickGelu follow ORT's float32 CPU kernels (float16 runs there through inserted casts, i.e.
 * float32 math rounded once, as here); BiasAdd and BiasSplitGelu have CUDA kernels only in ORT and
 * follow the schema, computed in float32. */
#include <string.h>

#include "ops/op_util.h"

/* ORT's constants, float32 as the kernels use them. */
#define ACT_FAST_B 0.7978845608028654      /* sqrt(2 / pi) */
#define ACT_FAST_C 0.035677408136300125    /* 0.044715 * sqrt(2 / pi) */

enum { GELU_ERF, GELU_BIAS_ERF, GELU_FAST, GELU_QUICK };

/* ---- helpers ------------------------------------------------------------------------------ */

static mlxb_array *num(mlxb_scope *s, double v) { return mlxb_scalar_f64(s, v, MLXB_F32); }

/* (0.5 * v) * (erf(v * sqrt(1/2)) + 1), v float32 (ORT's Gelu and BiasGelu). */
static mlxb_array *gelu_erf(mlxb_scope *s, mlxb_array *v) { return mlxb_unary(s, MLXB_GELU_ERF, v); }

/* (0.5 * v) * (tanh(v * (C * v * v + B)) + 1) (ORT's FastGelu, evaluated in its order). */
static mlxb_array *gelu_fast(mlxb_scope *s, mlxb_array *v) {
  mlxb_array *inner = op_util_add(s, op_util_mul(s, op_util_mul(s, num(s, ACT_FAST_C), v), v), num(s, ACT_FAST_B));
  mlxb_array *th = mlxb_unary(s, MLXB_TANH, op_util_mul(s, v, inner));
  return op_util_mul(s, op_util_mul(s, v, num(s, 0.5)), op_util_add(s, th, num(s, 1.0)));
}

/* x * sigmoid(alpha * x) (ORT's QuickGelu). */
static mlxb_array *gelu_quick(mlxb_scope *s, mlxb_array *v, float alpha) {
  return op_util_mul(s, v, mlxb_unary(s, MLXB_SIGMOID, op_util_mul(s, v, num(s, alpha))));
}

/* ---- Gelu, BiasGelu, FastGelu, QuickGelu -------------------------------------------------- */

static bool claim_gelu_family(claim_ctx *c, const op_def *def) {
  int32_t t = claim_input_dtype(c, 0);
  const ir_value *bias = claim_input(c, 1);
  if (bias && bias->dtype != t) return claim_decline(c, "bias dtype differs from the input");
  if (def->arg == GELU_BIAS_ERF && !bias) return claim_decline(c, "BiasGelu needs its bias input");
  return true;
}

/* v = x (+ bias broadcast over the last axis) in float32, the formula, rounded once to T. */
static int lower_gelu_family(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x = op_input(c, 0);
  mlxb_dtype t = mlxb_type(x);
  mlxb_array *v = op_util_cast(s, x, MLXB_F32);
  if (op_num_inputs(c) > 1 && op_has_input(c, 1)) v = op_util_add(s, v, op_util_cast(s, op_input(c, 1), MLXB_F32));
  mlxb_array *y;
  switch (def->arg) {
    case GELU_ERF:
    case GELU_BIAS_ERF: y = gelu_erf(s, v); break;
    case GELU_FAST: y = gelu_fast(s, v); break;
    case GELU_QUICK: y = gelu_quick(s, v, ir_attr_float(op_node(c), "alpha", 1.702f)); break;
    default: return op_fail(c, "bad gelu kind %d", def->arg);
  }
  return op_set_output(c, 0, op_util_cast(s, y, t));
}

/* ---- BiasAdd, BiasSplitGelu --------------------------------------------------------------- */

static bool claim_bias_ops(claim_ctx *c, const op_def *def) {
  int32_t t = claim_input_dtype(c, 0);
  for (int i = 1; i < c->node->n_inputs; i++) {
    const ir_value *v = claim_input(c, i);
    if (v && v->dtype != t) return claim_decline(c, "input %d dtype differs from X", i);
  }
  const ir_value *x = claim_input(c, 0);
  if (x->rank >= 0 && x->rank != 3) return claim_decline(c, "X rank %d (the schema takes 3-D)", x->rank);
  return true;
}

/* Y = X + bias + skip (X, skip [N, S, C], bias [C]). */
static int lower_bias_add(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x = op_input(c, 0), *bias = op_input(c, 1), *skip = op_input(c, 2);
  mlxb_dtype t = mlxb_type(x);
  mlxb_array *y = op_util_add(s, op_util_cast(s, x, MLXB_F32), op_util_cast(s, bias, MLXB_F32));
  y = op_util_add(s, y, op_util_cast(s, skip, MLXB_F32));
  return op_set_output(c, 0, op_util_cast(s, y, t));
}

/* v = X + bias; Y = v[..., :D/2] * gelu(v[..., D/2:]) with the erf GELU. */
static int lower_bias_split_gelu(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x = op_input(c, 0), *bias = op_input(c, 1);
  if (mlxb_ndim(x) != 3) return op_fail(c, "X must be 3-D");
  int64_t d = mlxb_dim(x, 2);
  if (d % 2) return op_fail(c, "last dimension %lld is odd", (long long)d);
  mlxb_dtype t = mlxb_type(x);
  mlxb_array *v = op_util_add(s, op_util_cast(s, x, MLXB_F32), op_util_cast(s, bias, MLXB_F32));
  mlxb_array *halves[2] = {NULL, NULL};
  int64_t at = d / 2;
  if (!v || mlxb_split(s, v, &at, 1, 2, halves)) return op_fail(c, "split failed");
  return op_set_output(c, 0, op_util_cast(s, op_util_mul(s, halves[0], gelu_erf(s, halves[1])), t));
}

/* ---- the table ---------------------------------------------------------------------------- */

#define DOC_HALF " float16 computed in float32 and rounded once (ORT runs it through inserted casts)."
#define DOC_DECLINED " Declined: float64 and bfloat16 (no ORT CPU kernel)."

static const op_def defs[] = {
    OP_ROW("com.microsoft", "Gelu", 1, 1, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_F32 | DT_F16,
           .claim = claim_gelu_family, .lower = lower_gelu_family, .arg = GELU_ERF,
           .doc = "0.5 * x * (1 + erf(x / sqrt(2)))," DOC_HALF DOC_DECLINED),
    OP_ROW("com.microsoft", "BiasGelu", 1, 1, .inputs = {2, 2}, .outputs = {1, 1}, .dtypes = DT_F32 | DT_F16,
           .claim = claim_gelu_family, .lower = lower_gelu_family, .arg = GELU_BIAS_ERF,
           .doc = "erf GELU of A + B (B broadcast over the last axis)," DOC_HALF DOC_DECLINED),
    OP_ROW("com.microsoft", "FastGelu", 1, 1, .inputs = {1, 2}, .outputs = {1, 1}, .dtypes = DT_F32 | DT_F16,
           .claim = claim_gelu_family, .lower = lower_gelu_family, .arg = GELU_FAST,
           .doc = "tanh GELU with ORT's constants and evaluation order, optional bias," DOC_HALF DOC_DECLINED),
    OP_ROW("com.microsoft", "QuickGelu", 1, 1, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_F32 | DT_F16,
           .claim = claim_gelu_family, .lower = lower_gelu_family, .arg = GELU_QUICK,
           .doc = "x * sigmoid(alpha * x), alpha default 1.702," DOC_HALF DOC_DECLINED),
    OP_ROW("com.microsoft", "BiasAdd", 1, 1, .inputs = {3, 3}, .outputs = {1, 1}, .dtypes = DT_F32 | DT_F16,
           .claim = claim_bias_ops, .lower = lower_bias_add,
           .doc = "X + bias + skip for 3-D X and skip, bias over the last axis; float32 math rounded once (ORT has a "
                  "CUDA kernel only)."),
    OP_ROW("com.microsoft", "BiasSplitGelu", 1, 1, .inputs = {2, 2}, .outputs = {1, 1}, .dtypes = DT_F32 | DT_F16,
           .claim = claim_bias_ops, .lower = lower_bias_split_gelu,
           .doc = "(X + bias) split in halves on the last axis: left * erf-GELU(right); float32 math rounded once "
                  "(ORT has a CUDA kernel only)."),
};

OPS_FAMILY(contrib_act, defs);
