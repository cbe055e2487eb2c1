/* Activation functions, each built from MLX ops with the formula of the ONNX spec (and the
 * numerically stable forms where ORT's CPU kernels use them, e.g. Softplus). Half-precision
 * inputs of multi-op formulas are computed in float32 and rounded once, as ORT does. */
#include <float.h>
#include <string.h>

#include "ops/op_util.h"

/* Gelu's constants. The tanh form follows the spec's function body, whose constants are float32
 * (CastLike to X): sqrt(float(2/pi)) and float(0.044715), so float64 matches ORT's expansion. */
#define ACT_SQRT_2_OVER_PI 0.7978845447087116 /* sqrt((double)(float)(2 / pi)) */
#define ACT_GELU_C0 0.044714998453855515     /* (double)0.044715f */

/* ---- helpers ------------------------------------------------------------------------------ */

/* The dtype a formula is evaluated in: float32 for halves, float64 for doubles; integer inputs
 * (Shrink only) follow C's int/float promotion of ORT's kernel: float32. */
static mlxb_dtype compute_type(mlxb_dtype t) {
  if (t == MLXB_F64) return MLXB_F64;
  return MLXB_F32;
}

static mlxb_array *num(mlxb_scope *s, double v, mlxb_dtype t) { return mlxb_scalar_f64(s, v, t); }

static mlxb_array *maxm(mlxb_scope *s, mlxb_array *a, mlxb_array *b) { return mlxb_binary(s, MLXB_MAXIMUM, a, b); }
static mlxb_array *minm(mlxb_scope *s, mlxb_array *a, mlxb_array *b) { return mlxb_binary(s, MLXB_MINIMUM, a, b); }
static mlxb_array *less(mlxb_scope *s, mlxb_array *a, mlxb_array *b) { return mlxb_binary(s, MLXB_LESS, a, b); }
static mlxb_array *greater(mlxb_scope *s, mlxb_array *a, mlxb_array *b) { return mlxb_binary(s, MLXB_GREATER, a, b); }

/* 1 / (1 + exp(-x)). MLX's float64 sigmoid, logaddexp and exp run at float32 precision, so
 * float64 builds it from e = op_util_exp(-|x|): 1 / (1 + e) for x >= 0, e / (1 + e) below. */
static mlxb_array *sigmoid_of(mlxb_scope *s, mlxb_array *x, mlxb_dtype t) {
  if (t != MLXB_F64) return mlxb_unary(s, MLXB_SIGMOID, x);
  mlxb_array *e = op_util_exp(s, mlxb_unary(s, MLXB_NEG, mlxb_unary(s, MLXB_ABS, x)));
  mlxb_array *den = op_util_add(s, num(s, 1.0, t), e);
  mlxb_array *pos = mlxb_binary(s, MLXB_DIV, num(s, 1.0, t), den);
  mlxb_array *neg = mlxb_binary(s, MLXB_DIV, e, den);
  return mlxb_where(s, mlxb_binary(s, MLXB_GREATER_EQUAL, x, num(s, 0.0, t)), pos, neg);
}

/* log(1 + exp(x)) without overflow, as ORT: max(x, 0) + log1p(exp(-|x|)). MLX's logaddexp(x, 0)
 * is that formula; float64 spells it out with the precise exp. */
static mlxb_array *softplus(mlxb_scope *s, mlxb_array *x, mlxb_dtype t) {
  if (t != MLXB_F64) return mlxb_binary(s, MLXB_LOGADDEXP, x, num(s, 0.0, t));
  mlxb_array *e = op_util_exp(s, mlxb_unary(s, MLXB_NEG, mlxb_unary(s, MLXB_ABS, x)));
  return op_util_add(s, maxm(s, x, num(s, 0.0, t)), mlxb_unary(s, MLXB_LOG1P, e));
}

/* ---- formulas: x is already in the compute type t ----------------------------------------- */

typedef mlxb_array *(*act_fn)(mlxb_scope *s, const ir_node *n, mlxb_array *x, mlxb_dtype t);

static mlxb_array *act_leaky_relu(mlxb_scope *s, const ir_node *n, mlxb_array *x, mlxb_dtype t) {
  mlxb_array *alpha = num(s, ir_attr_float(n, "alpha", 0.01f), t);
  return mlxb_where(s, less(s, x, num(s, 0.0, t)), op_util_mul(s, alpha, x), x);
}

static mlxb_array *act_gelu(mlxb_scope *s, const ir_node *n, mlxb_array *x, mlxb_dtype t) {
  /* (0.5 * x) * (1 + erf(x * sqrt(1/2))): the bridge's composition, one pass on a CPU scope */
  if (strcmp(ir_attr_string(n, "approximate", "none"), "tanh") != 0) return mlxb_unary(s, MLXB_GELU_ERF, x);
  /* (0.5 * x) * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))) */
  mlxb_array *cube = op_util_mul(s, op_util_mul(s, x, x), x);
  mlxb_array *arg = op_util_add(s, x, op_util_mul(s, num(s, ACT_GELU_C0, t), cube));
  mlxb_array *inner = mlxb_unary(s, MLXB_TANH, op_util_mul(s, num(s, ACT_SQRT_2_OVER_PI, t), arg));
  return op_util_mul(s, op_util_mul(s, num(s, 0.5, t), x), op_util_add(s, num(s, 1.0, t), inner));
}

/* Elu, Selu and Celu use expm1 for exp(x) - 1: exact where ORT's exp(x) - 1 is within an ulp of 1. */
static mlxb_array *act_elu(mlxb_scope *s, const ir_node *n, mlxb_array *x, mlxb_dtype t) {
  mlxb_array *alpha = num(s, ir_attr_float(n, "alpha", 1.0f), t);
  mlxb_array *neg = op_util_mul(s, alpha, mlxb_unary(s, MLXB_EXPM1, x));
  return mlxb_where(s, less(s, x, num(s, 0.0, t)), neg, x);
}

static mlxb_array *act_selu(mlxb_scope *s, const ir_node *n, mlxb_array *x, mlxb_dtype t) {
  mlxb_array *alpha = num(s, ir_attr_float(n, "alpha", 1.67326319217681884765625f), t);
  mlxb_array *gamma = num(s, ir_attr_float(n, "gamma", 1.05070102214813232421875f), t);
  mlxb_array *neg = op_util_mul(s, alpha, mlxb_unary(s, MLXB_EXPM1, x));
  return op_util_mul(s, gamma, mlxb_where(s, greater(s, x, num(s, 0.0, t)), x, neg));
}

static mlxb_array *act_celu(mlxb_scope *s, const ir_node *n, mlxb_array *x, mlxb_dtype t) {
  float a = ir_attr_float(n, "alpha", 1.0f);
  mlxb_array *alpha = num(s, a, t), *zero = num(s, 0.0, t);
  mlxb_array *e = mlxb_unary(s, MLXB_EXPM1, mlxb_binary(s, MLXB_DIV, x, alpha));
  mlxb_array *neg = minm(s, zero, op_util_mul(s, alpha, e));
  return op_util_add(s, maxm(s, zero, x), neg);
}

/* max(0, min(1, alpha * x + beta)) */
static mlxb_array *hard_sigmoid(mlxb_scope *s, mlxb_array *x, mlxb_dtype t, double alpha, double beta) {
  mlxb_array *lin = op_util_add(s, op_util_mul(s, num(s, alpha, t), x), num(s, beta, t));
  return maxm(s, num(s, 0.0, t), minm(s, num(s, 1.0, t), lin));
}

static mlxb_array *act_hard_sigmoid(mlxb_scope *s, const ir_node *n, mlxb_array *x, mlxb_dtype t) {
  return hard_sigmoid(s, x, t, ir_attr_float(n, "alpha", 0.2f), ir_attr_float(n, "beta", 0.5f));
}

static mlxb_array *act_hard_swish(mlxb_scope *s, const ir_node *n, mlxb_array *x, mlxb_dtype t) {
  return op_util_mul(s, x, hard_sigmoid(s, x, t, (double)(1.0f / 6.0f), 0.5));
}

static mlxb_array *act_softplus(mlxb_scope *s, const ir_node *n, mlxb_array *x, mlxb_dtype t) {
  return softplus(s, x, t);
}

static mlxb_array *act_softsign(mlxb_scope *s, const ir_node *n, mlxb_array *x, mlxb_dtype t) {
  mlxb_array *den = op_util_add(s, num(s, 1.0, t), mlxb_unary(s, MLXB_ABS, x));
  return mlxb_binary(s, MLXB_DIV, x, den);
}

static mlxb_array *act_mish(mlxb_scope *s, const ir_node *n, mlxb_array *x, mlxb_dtype t) {
  return op_util_mul(s, x, mlxb_unary(s, MLXB_TANH, softplus(s, x, t)));
}

static mlxb_array *act_thresholded_relu(mlxb_scope *s, const ir_node *n, mlxb_array *x, mlxb_dtype t) {
  mlxb_array *alpha = num(s, ir_attr_float(n, "alpha", 1.0f), t);
  return mlxb_where(s, greater(s, x, alpha), x, num(s, 0.0, t));
}

static mlxb_array *act_shrink(mlxb_scope *s, const ir_node *n, mlxb_array *x, mlxb_dtype t) {
  float lambd = ir_attr_float(n, "lambd", 0.5f), bias = ir_attr_float(n, "bias", 0.0f);
  mlxb_array *b = num(s, bias, t);
  mlxb_array *hi = mlxb_where(s, greater(s, x, num(s, lambd, t)), op_util_sub(s, x, b), num(s, 0.0, t));
  return mlxb_where(s, less(s, x, num(s, -(double)lambd, t)), op_util_add(s, x, b), hi);
}

static mlxb_array *act_swish(mlxb_scope *s, const ir_node *n, mlxb_array *x, mlxb_dtype t) {
  mlxb_array *alpha = num(s, ir_attr_float(n, "alpha", 1.0f), t);
  return op_util_mul(s, x, sigmoid_of(s, op_util_mul(s, alpha, x), t));
}

enum {
  ACT_LEAKY_RELU, ACT_GELU, ACT_ELU, ACT_SELU, ACT_CELU, ACT_HARD_SIGMOID, ACT_HARD_SWISH,
  ACT_SOFTPLUS, ACT_SOFTSIGN, ACT_MISH, ACT_THRESHOLDED_RELU, ACT_SHRINK, ACT_SWISH, ACT_COUNT
};

static const act_fn act_fns[ACT_COUNT] = {
    [ACT_LEAKY_RELU] = act_leaky_relu, [ACT_GELU] = act_gelu, [ACT_ELU] = act_elu,
    [ACT_SELU] = act_selu, [ACT_CELU] = act_celu, [ACT_HARD_SIGMOID] = act_hard_sigmoid,
    [ACT_HARD_SWISH] = act_hard_swish, [ACT_SOFTPLUS] = act_softplus, [ACT_SOFTSIGN] = act_softsign,
    [ACT_MISH] = act_mish, [ACT_THRESHOLDED_RELU] = act_thresholded_relu, [ACT_SHRINK] = act_shrink,
    [ACT_SWISH] = act_swish,
};

/* ---- lowerings ---------------------------------------------------------------------------- */

/* The shared worker: input to the compute type, formula, back to the input's dtype (a
 * float-to-integer cast truncates, as ORT's static_cast in Shrink does). */
static int lower_formula(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x = op_input(c, 0);
  if (def->arg < 0 || def->arg >= ACT_COUNT) return op_fail(c, "bad activation index %d", def->arg);
  mlxb_dtype t = mlxb_type(x), ct = compute_type(t);
  mlxb_array *y = act_fns[def->arg](s, op_node(c), op_util_cast(s, x, ct), ct);
  return op_set_output(c, 0, op_util_cast(s, y, t));
}

static int lower_relu(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x = op_input(c, 0);
  return op_set_output(c, 0, mlxb_binary(s, MLXB_MAXIMUM, x, op_util_scalar(s, 0.0, mlxb_type(x))));
}

static int lower_sigmoid(op_ctx *c, const op_def *def) {
  mlxb_array *x = op_input(c, 0);
  return op_set_output(c, 0, sigmoid_of(op_scope(c), x, mlxb_type(x)));
}

static bool claim_gelu(claim_ctx *c, const op_def *def) {
  const char *a = ir_attr_string(c->node, "approximate", "none");
  if (strcmp(a, "none") && strcmp(a, "tanh")) return claim_decline(c, "approximate='%s' is unknown", a);
  if (strcmp(a, "none") == 0 && claim_input_dtype(c, 0) == ONNX_DOUBLE)
    return claim_decline(c, "MLX's float64 erf runs at float32 precision");
  return true;
}

/* PRelu: x < 0 ? slope * x : x, slope broadcast to x. Integer slopes stay integer. */
static int lower_prelu(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x = op_input(c, 0), *slope = op_input(c, 1);
  mlxb_dtype t = mlxb_type(x), ct = op_util_compute_type(t);
  mlxb_array *xc = op_util_cast(s, x, ct);
  mlxb_array *zero = op_util_scalar(s, 0.0, ct);
  mlxb_array *y = mlxb_where(s, less(s, xc, zero), op_util_mul(s, op_util_cast(s, slope, ct), xc), xc);
  return op_set_output(c, 0, op_util_cast(s, y, t));
}

/* ---- Clip --------------------------------------------------------------------------------- */

/* numeric_limits<T>::max() for float types: the spec's default bound (ORT clips +inf to it). */
static double float_type_max(mlxb_dtype t) {
  switch (t) {
    case MLXB_F16: return 65504.0;
    case MLXB_BF16: return 3.3895313892515355e38;
    case MLXB_F32: return FLT_MAX;
    default: return DBL_MAX;
  }
}

static bool claim_clip(claim_ctx *c, const op_def *def) {
  for (int i = 1; i <= 2; i++) {
    const ir_value *v = claim_input(c, i);
    if (!v) continue;
    int64_t n = ir_value_static_size(v);
    if (n >= 0 && n != 1) return claim_decline(c, "input %d has %lld elements, not one", i, (long long)n);
    if (v->dtype != claim_input_dtype(c, 0)) return claim_decline(c, "input %d dtype differs from X", i);
  }
  return true;
}

/* The bound from input i (opset 11+) or attribute `name` (opset 6-10); absent bounds are the
 * type's limits for floats and no bound at all for integers. */
static mlxb_array *clip_bound(op_ctx *c, int i, const char *name, bool lower, mlxb_dtype t) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  if (n->since_version >= 11 && op_has_input(c, i)) {
    int64_t none[1] = {0};
    return mlxb_reshape(s, op_input(c, i), none, 0);
  }
  if (!op_util_is_float(t)) return NULL;
  double v = lower ? -float_type_max(t) : float_type_max(t);
  if (n->since_version < 11 && ir_node_attr(n, name)) v = ir_attr_float(n, name, 0.0f);
  return mlxb_scalar_f64(s, v, t);
}

/* min(max(x, lo), hi): with lo > hi every element becomes hi, as the spec says; NaN stays. */
static int lower_clip(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x = op_input(c, 0);
  mlxb_dtype t = mlxb_type(x);
  mlxb_array *lo = clip_bound(c, 1, "min", true, t);
  mlxb_array *hi = clip_bound(c, 2, "max", false, t);
  if (op_check(c)) return -1;
  mlxb_array *y = x;
  if (lo) y = maxm(s, y, lo);
  if (hi) y = minm(s, y, hi);
  if (y == x) y = mlxb_ref(s, x);
  return op_set_output(c, 0, y);
}

/* ---- the fused contrib ops' activations (op_util.h) --------------------------------------- */

enum { FA_RELU, FA_LEAKY_RELU, FA_TANH, FA_SIGMOID, FA_CLIP, FA_HARD_SIGMOID, FA_HARD_SWISH, FA_ELU, FA_SELU,
       FA_THRESHOLDED_RELU, FA_SCALED_TANH, FA_SOFTPLUS, FA_SOFTSIGN, FA_PARAMETRIC_SOFTPLUS, FA_COUNT };

static const struct {
  const char *name;
  int params;
} FUSED_ACTS[FA_COUNT] = {{"Relu", 0},        {"LeakyRelu", 1},       {"Tanh", 0},        {"Sigmoid", 0},
                          {"Clip", 2},        {"HardSigmoid", 2},     {"HardSwish", 0},   {"Elu", 1},
                          {"Selu", 2},        {"ThresholdedRelu", 1}, {"ScaledTanh", 2},  {"Softplus", 0},
                          {"Softsign", 0},    {"ParametricSoftplus", 2}};

int op_fused_act_find(const char *name) {
  for (int k = 0; name && k < FA_COUNT; k++)
    if (!strcmp(name, FUSED_ACTS[k].name)) return k;
  return -1;
}

int op_fused_act_params(int kind) { return kind >= 0 && kind < FA_COUNT ? FUSED_ACTS[kind].params : 0; }

mlxb_array *op_fused_act_apply(mlxb_scope *s, mlxb_array *x, int kind, const double *p) {
  mlxb_dtype t = mlxb_type(x);
  mlxb_array *zero = num(s, 0.0, t);
  switch (kind) {
  case FA_RELU: return maxm(s, x, zero);
  case FA_LEAKY_RELU: return mlxb_where(s, less(s, x, zero), op_util_mul(s, num(s, p[0], t), x), x);
  case FA_TANH: return mlxb_unary(s, MLXB_TANH, x);
  case FA_SIGMOID: return mlxb_unary(s, MLXB_SIGMOID, x);
  case FA_CLIP: return mlxb_clip(s, x, num(s, p[0], t), num(s, p[1], t));
  case FA_HARD_SIGMOID: return hard_sigmoid(s, x, t, p[0], p[1]);
  case FA_HARD_SWISH: return op_util_mul(s, x, hard_sigmoid(s, x, t, (double)(1.0f / 6.0f), 0.5));
  case FA_ELU:
  case FA_SELU: {
    mlxb_array *neg = op_util_mul(s, num(s, p[0], t), mlxb_unary(s, MLXB_EXPM1, x));
    mlxb_array *e = mlxb_where(s, greater(s, x, zero), x, neg);
    return kind == FA_SELU ? op_util_mul(s, num(s, p[1], t), e) : e;
  }
  case FA_THRESHOLDED_RELU: return mlxb_where(s, greater(s, x, num(s, p[0], t)), x, zero);
  case FA_SCALED_TANH: return op_util_mul(s, num(s, p[0], t), mlxb_unary(s, MLXB_TANH, op_util_mul(s, num(s, p[1], t), x)));
  case FA_SOFTPLUS: return softplus(s, x, t);
  case FA_SOFTSIGN: return mlxb_binary(s, MLXB_DIV, x, op_util_add(s, num(s, 1.0, t), mlxb_unary(s, MLXB_ABS, x)));
  case FA_PARAMETRIC_SOFTPLUS: return op_util_mul(s, num(s, p[0], t), softplus(s, op_util_mul(s, num(s, p[1], t), x), t));
  default: mlxb_set_error(s, "unknown fused activation"); return NULL;
  }
}

/* ---- the table ---------------------------------------------------------------------------- */

#define DT_FLOATS DT_FLOAT

static const op_def defs[] = {
    OP_ROW("", "Relu", 6, 13, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOATS, .lower = lower_relu,
           .doc = "float dtypes; NaN stays NaN"),
    OP_ROW("", "Relu", 14, 14, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOATS | DT_SINT, .lower = lower_relu,
           .doc = "float and signed integer dtypes"),
    OP_ROW("", "LeakyRelu", 6, 16, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOATS, .lower = lower_formula,
           .arg = ACT_LEAKY_RELU, .doc = "float dtypes, alpha"),
    OP_ROW("", "Sigmoid", 6, 13, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOATS, .lower = lower_sigmoid,
           .doc = "float dtypes"),
    OP_ROW("", "Gelu", 20, 20, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOATS, .claim = claim_gelu,
           .lower = lower_formula, .arg = ACT_GELU, .doc = "float dtypes, approximate none (erf) or tanh"),
    OP_ROW("", "Elu", 6, 22, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOATS, .lower = lower_formula,
           .arg = ACT_ELU, .doc = "float dtypes, alpha"),
    OP_ROW("", "Selu", 6, 22, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOATS, .lower = lower_formula,
           .arg = ACT_SELU, .doc = "float dtypes, alpha and gamma"),
    OP_ROW("", "Celu", 12, 28, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOATS, .lower = lower_formula,
           .arg = ACT_CELU, .doc = "float dtypes, alpha"),
    OP_ROW("", "HardSigmoid", 6, 22, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOATS, .lower = lower_formula,
           .arg = ACT_HARD_SIGMOID, .doc = "float dtypes, alpha and beta"),
    OP_ROW("", "HardSwish", 14, 22, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOATS, .lower = lower_formula,
           .arg = ACT_HARD_SWISH, .doc = "float dtypes"),
    OP_ROW("", "Softplus", 1, 22, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOATS, .lower = lower_formula,
           .arg = ACT_SOFTPLUS, .doc = "float dtypes; stable log1p form, as ORT (no overflow for large x)"),
    OP_ROW("", "Softsign", 1, 22, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOATS, .lower = lower_formula,
           .arg = ACT_SOFTSIGN, .doc = "float dtypes"),
    OP_ROW("", "Mish", 18, 22, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOATS, .lower = lower_formula,
           .arg = ACT_MISH, .doc = "float dtypes"),
    OP_ROW("", "PRelu", 7, 16, .inputs = {2, 2}, .outputs = {1, 1},
           .dtypes = DT_FLOATS | DT(ONNX_INT32) | DT(ONNX_INT64) | DT(ONNX_UINT32) | DT(ONNX_UINT64),
           .lower = lower_prelu, .doc = "float and (opset 16) 32/64-bit integer dtypes; slope broadcast to X"),
    OP_ROW("", "ThresholdedRelu", 10, 22, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOATS,
           .lower = lower_formula, .arg = ACT_THRESHOLDED_RELU, .doc = "float dtypes, alpha"),
    OP_ROW("", "Shrink", 9, 9, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_NUMERIC, .lower = lower_formula,
           .arg = ACT_SHRINK,
           .doc = "all numeric dtypes, lambd and bias; integers computed in float32 and truncated, as ORT"),
    OP_ROW("", "Swish", 24, 24, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOATS, .lower = lower_formula,
           .arg = ACT_SWISH, .doc = "float dtypes, alpha"),
    OP_ROW("", "Clip", 6, 10, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOATS, .lower = lower_clip,
           .doc = "float dtypes, min/max attributes (defaults: the type's limits)"),
    OP_ROW("", "Clip", 11, 13, .inputs = {1, 3}, .outputs = {1, 1}, .dtypes = DT_NUMERIC, .claim = claim_clip,
           .lower = lower_clip,
           .doc = "numeric dtypes, optional scalar min/max inputs (absent: the type's limits; ints unbounded); min > "
                  "max gives max"),
};

OPS_FAMILY(activation, defs);
