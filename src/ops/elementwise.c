/* Elementwise ops: unary math, binary arithmetic with ONNX's integer semantics (truncating Div,
 * both Mod flavours, guarded BitShift), logic, comparisons, Where and the variadic
 * Min/Max/Mean/Sum. MLX broadcasts like NumPy, which is ONNX's multidirectional broadcasting. */
#include <string.h>

#include "ops/op_util.h"

/* ---- small helpers ------------------------------------------------------------------------ */

static bool dtype_is_signed_int(mlxb_dtype t) { return t >= MLXB_I8 && t <= MLXB_I64; }

/* Fails cleanly when a required input is missing instead of passing NULL on. */
static int inputs_present(op_ctx *c, int n) {
  for (int i = 0; i < n; i++)
    if (!op_input(c, i)) return op_fail(c, "input %d is missing", i);
  return 0;
}

/* ---- unary -------------------------------------------------------------------------------- */

static int lower_unary(op_ctx *c, const op_def *def) {
  mlxb_array *y = mlxb_unary(op_scope(c), (mlxb_unary_op)def->arg, op_input(c, 0));
  return op_set_output(c, 0, y);
}

/* Erf and Sin are odd with f(0) = 0, so f(+0) = +0 and f(-0) = -0 (C99 Annex F, ORT's kernels);
 * MLX's erf gives -0 for +0 and its sin +0 for -0, which a later Reciprocal or Div turns into an
 * infinity of the other sign. Zeros pass through unchanged. */
static int lower_odd_unary(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x = op_input(c, 0);
  mlxb_array *y = mlxb_unary(s, (mlxb_unary_op)def->arg, x);
  mlxb_array *zero = mlxb_binary(s, MLXB_EQUAL, x, mlxb_scalar_f64(s, 0.0, mlxb_type(x)));
  return op_set_output(c, 0, mlxb_where(s, zero, x, y));
}

/* float64 through op_util_exp: MLX's own float64 exp is float32-accurate. */
static int lower_exp(op_ctx *c, const op_def *def) {
  mlxb_array *x = op_input(c, 0);
  return op_set_output(c, 0, op_util_exp(op_scope(c), x));
}

/* MLX's sign maps NaN to 0; ONNX (and ORT) keep the NaN. */
static int lower_sign(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x = op_input(c, 0);
  mlxb_array *y = mlxb_unary(s, MLXB_SIGN, x);
  if (op_util_is_float(mlxb_type(x))) y = mlxb_where(s, mlxb_unary(s, MLXB_ISNAN, x), x, y);
  return op_set_output(c, 0, y);
}

static int lower_isinf(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  bool pos = ir_attr_int(n, "detect_positive", 1) != 0;
  bool neg = ir_attr_int(n, "detect_negative", 1) != 0;
  mlxb_array *x = op_input(c, 0);
  mlxb_array *y;
  if (pos && neg) y = mlxb_unary(s, MLXB_ISINF, x);
  else if (pos) y = mlxb_unary(s, MLXB_ISPOSINF, x);
  else if (neg) y = mlxb_unary(s, MLXB_ISNEGINF, x);
  else y = mlxb_binary(s, MLXB_LOGICAL_AND, mlxb_unary(s, MLXB_ISINF, x), mlxb_scalar_i64(s, 0, MLXB_BOOL));
  return op_set_output(c, 0, y);
}

/* ---- binary ------------------------------------------------------------------------------- */

static int lower_binary(op_ctx *c, const op_def *def) {
  mlxb_array *y = mlxb_binary(op_scope(c), (mlxb_binary_op)def->arg, op_input(c, 0), op_input(c, 1));
  return op_set_output(c, 0, y);
}

/* a / b rounded toward zero (C, ORT) for integers, built from MLX's floor division: the two
 * differ by one where the remainder is nonzero and the operands' signs differ. The bridge
 * already answers INT_MIN / -1 without trapping. */
static mlxb_array *int_div_trunc(mlxb_scope *s, mlxb_array *a, mlxb_array *b, mlxb_dtype t) {
  mlxb_array *q = mlxb_binary(s, MLXB_FLOOR_DIVIDE, a, b);
  if (!dtype_is_signed_int(t)) return q;
  mlxb_array *zero = mlxb_scalar_i64(s, 0, t);
  mlxb_array *r = mlxb_binary(s, MLXB_REMAINDER, a, b);
  mlxb_array *inexact = mlxb_binary(s, MLXB_NOT_EQUAL, r, zero);
  mlxb_array *signs_differ =
      mlxb_binary(s, MLXB_NOT_EQUAL, mlxb_binary(s, MLXB_LESS, a, zero), mlxb_binary(s, MLXB_LESS, b, zero));
  mlxb_array *fix = mlxb_binary(s, MLXB_LOGICAL_AND, inexact, signs_differ);
  return mlxb_where(s, fix, mlxb_binary(s, MLXB_ADD, q, mlxb_scalar_i64(s, 1, t)), q);
}

/* ORT's CPU EP refuses an integer division or modulo by zero ("Integer division by zero"); MLX
 * answers one without trapping, so the check only decides the error. */
static int require_nonzero_divisor(op_ctx *c, mlxb_array *b, const char *what) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *ok = mlxb_binary(s, MLXB_NOT_EQUAL, b, mlxb_scalar_i64(s, 0, mlxb_type(b)));
  return op_require(c, ok, NULL, "integer %s by zero", what);
}

static int lower_div(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *a = op_input(c, 0), *b = op_input(c, 1);
  mlxb_dtype t = mlxb_type(a);
  if (op_util_is_float(t)) return op_set_output(c, 0, mlxb_binary(s, MLXB_DIV, a, b));
  if (require_nonzero_divisor(c, b, "division")) return -1;
  return op_set_output(c, 0, int_div_trunc(s, a, b, t));
}

/* C's fmod for floats: MLX's remainder of the magnitudes is fmod(|a|, |b|) exactly (the IEEE
 * remainder plus |b| when negative, a sum whose exact value is representable), then a's sign. */
static mlxb_array *float_fmod(mlxb_scope *s, mlxb_array *a, mlxb_array *b, mlxb_dtype t) {
  mlxb_array *r = mlxb_binary(s, MLXB_REMAINDER, mlxb_unary(s, MLXB_ABS, a), mlxb_unary(s, MLXB_ABS, b));
  mlxb_array *a_neg = mlxb_binary(s, MLXB_LESS, a, mlxb_scalar_f64(s, 0.0, t));
  return mlxb_where(s, a_neg, mlxb_unary(s, MLXB_NEG, r), r);
}

/* C's % for signed integers (sign of the dividend) from MLX's remainder (sign of the divisor). */
static mlxb_array *int_fmod(mlxb_scope *s, mlxb_array *a, mlxb_array *b, mlxb_dtype t) {
  mlxb_array *r = mlxb_binary(s, MLXB_REMAINDER, a, b);
  if (!dtype_is_signed_int(t)) return r;
  mlxb_array *zero = mlxb_scalar_i64(s, 0, t);
  mlxb_array *nonzero = mlxb_binary(s, MLXB_NOT_EQUAL, r, zero);
  mlxb_array *signs_differ =
      mlxb_binary(s, MLXB_NOT_EQUAL, mlxb_binary(s, MLXB_LESS, r, zero), mlxb_binary(s, MLXB_LESS, a, zero));
  mlxb_array *fix = mlxb_binary(s, MLXB_LOGICAL_AND, nonzero, signs_differ);
  return mlxb_where(s, fix, mlxb_binary(s, MLXB_SUB, r, b), r);
}

static bool claim_mod(claim_ctx *c, const op_def *def) {
  if (op_util_onnx_is_float(claim_input_dtype(c, 0)) && ir_attr_int(c->node, "fmod", 0) == 0)
    return claim_decline(c, "fmod=0 on a float type (the spec requires fmod=1; ORT rejects it)");
  return true;
}

static int lower_mod(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *a = op_input(c, 0), *b = op_input(c, 1);
  mlxb_dtype t = mlxb_type(a);
  bool fmod = ir_attr_int(op_node(c), "fmod", 0) != 0;
  if (op_util_is_float(t)) {
    if (!fmod) return op_fail(c, "fmod=0 is not defined for floats");
    return op_set_output(c, 0, float_fmod(s, a, b, t));
  }
  if (require_nonzero_divisor(c, b, "modulo")) return -1;
  mlxb_array *y = fmod ? int_fmod(s, a, b, t) : mlxb_binary(s, MLXB_REMAINDER, a, b);
  return op_set_output(c, 0, y);
}

/* Integer power with ORT's answers for negative exponents (ORT computes pow in double and
 * truncates: 1 and -1 keep their power, every other base gives 0; 0^-n is infinite there, cast to an
 * int platform-dependently, so 0 here). Overflow wraps like repeated multiplication in the type. */
static mlxb_array *int_pow(mlxb_scope *s, mlxb_array *a, mlxb_array *e, mlxb_dtype t) {
  if (!dtype_is_signed_int(t)) return mlxb_binary(s, MLXB_POW, a, e);
  mlxb_array *zero = mlxb_scalar_i64(s, 0, t), *one = mlxb_scalar_i64(s, 1, t);
  mlxb_array *p = mlxb_binary(s, MLXB_POW, a, mlxb_unary(s, MLXB_ABS, e));
  mlxb_array *unit = mlxb_binary(s, MLXB_EQUAL, mlxb_unary(s, MLXB_ABS, a), one);
  mlxb_array *vanish = mlxb_binary(s, MLXB_LOGICAL_AND, mlxb_binary(s, MLXB_LESS, e, zero),
                                   mlxb_unary(s, MLXB_LOGICAL_NOT, unit));
  return mlxb_where(s, vanish, zero, p);
}


/* Same dtypes: MLX's power. Mixed dtypes: float64, as ORT's std::pow does, then the base type. */
static int lower_pow(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *a = op_input(c, 0), *e = op_input(c, 1);
  mlxb_dtype ta = mlxb_type(a), te = mlxb_type(e);
  mlxb_array *y;
  if (ta != te) {
    y = mlxb_binary(s, MLXB_POW, op_util_cast(s, a, MLXB_F64), op_util_cast(s, e, MLXB_F64));
    y = op_util_cast(s, y, ta);
  } else if (op_util_is_float(ta)) {
    y = mlxb_binary(s, MLXB_POW, a, e);
  } else {
    y = int_pow(s, a, e, ta);
  }
  return op_set_output(c, 0, y);
}

static bool claim_bitshift(claim_ctx *c, const op_def *def) {
  const char *dir = ir_attr_string(c->node, "direction", "");
  if (strcmp(dir, "LEFT") && strcmp(dir, "RIGHT"))
    return claim_decline(c, "direction '%s' is neither LEFT nor RIGHT", dir);
  return true;
}

/* Shifts by the type's width or more give 0 (and -1 for a right shift of a negative signed
 * value); negative amounts of signed types act the same. MLX would pass the amount to the CPU,
 * which masks it. */
static int lower_bitshift(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x = op_input(c, 0), *y = op_input(c, 1);
  bool left = strcmp(ir_attr_string(op_node(c), "direction", ""), "LEFT") == 0;
  mlxb_dtype t = mlxb_type(x), ty = mlxb_type(y);
  int64_t bits = (int64_t)mlxb_dtype_size(t) * 8;
  mlxb_array *out_of_range = mlxb_binary(s, MLXB_GREATER_EQUAL, y, mlxb_scalar_i64(s, bits, ty));
  if (dtype_is_signed_int(ty))
    out_of_range = mlxb_binary(s, MLXB_LOGICAL_OR, out_of_range,
                               mlxb_binary(s, MLXB_LESS, y, mlxb_scalar_i64(s, 0, ty)));
  mlxb_array *out;
  if (!left && dtype_is_signed_int(t)) {
    /* Shifting by width - 1 yields the sign fill (0 or -1), the answer for any larger amount. */
    mlxb_array *amount = mlxb_where(s, out_of_range, mlxb_scalar_i64(s, bits - 1, ty), y);
    out = mlxb_binary(s, MLXB_RIGHT_SHIFT, x, amount);
  } else {
    mlxb_array *shifted = mlxb_binary(s, left ? MLXB_LEFT_SHIFT : MLXB_RIGHT_SHIFT, x, y);
    out = mlxb_where(s, out_of_range, mlxb_scalar_i64(s, 0, t), shifted);
  }
  return op_set_output(c, 0, out);
}

static int lower_where(op_ctx *c, const op_def *def) {
  mlxb_array *y = mlxb_where(op_scope(c), op_input(c, 0), op_input(c, 1), op_input(c, 2));
  return op_set_output(c, 0, y);
}

/* ---- variadic ----------------------------------------------------------------------------- */

/* Folds inputs 0..n-1 with a binary op in dtype t. */
static mlxb_array *fold_inputs(op_ctx *c, mlxb_binary_op op, mlxb_dtype t) {
  mlxb_scope *s = op_scope(c);
  int n = op_num_inputs(c);
  mlxb_array *acc = op_util_cast(s, op_input(c, 0), t);
  for (int i = 1; i < n && acc; i++) acc = mlxb_binary(s, op, acc, op_util_cast(s, op_input(c, i), t));
  return acc;
}

static bool claim_variadic(claim_ctx *c, const op_def *def) {
  for (int i = 0; i < c->node->n_inputs; i++)
    if (!claim_input(c, i)) return claim_decline(c, "input %d is absent", i);
  return true;
}

/* The input count of a variadic node, or -1 (recorded) when an input is missing. */
static int variadic_count(op_ctx *c) {
  int n = op_num_inputs(c);
  return inputs_present(c, n) ? -1 : n;
}

/* Min and Max are exact in any dtype; Sum accumulates halves in float32 like ORT. */
static int lower_variadic(op_ctx *c, const op_def *def) {
  if (variadic_count(c) < 0) return -1;
  mlxb_dtype t = mlxb_type(op_input(c, 0));
  mlxb_binary_op op = (mlxb_binary_op)def->arg;
  mlxb_dtype acc = op == MLXB_ADD ? op_util_compute_type(t) : t;
  return op_set_output(c, 0, op_util_cast(op_scope(c), fold_inputs(c, op, acc), t));
}

static int lower_mean(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  int n = variadic_count(c);
  if (n < 0) return -1;
  mlxb_dtype t = mlxb_type(op_input(c, 0)), acc = op_util_compute_type(t);
  mlxb_array *sum = fold_inputs(c, MLXB_ADD, acc);
  if (n > 1) sum = mlxb_binary(s, MLXB_DIV, sum, op_util_scalar(s, (double)n, acc));
  return op_set_output(c, 0, op_util_cast(s, sum, t));
}

/* ---- the table ---------------------------------------------------------------------------- */

#define DT_FLOATS DT_FLOAT
#define DT_SIGNED_NUM (DT_FLOAT | DT_SINT)
/* MLX's float64 sin, cos and erf run at float32 precision, with no exact rebuild from other ops. */
#define DT_FLOATS_NO_F64 (DT_F32 | DT_F16 | DT_BF16)

static const op_def defs[] = {
    /* unary math */
    OP_ROW("", "Abs", 6, 13, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_NUMERIC, .lower = lower_unary,
           .arg = MLXB_ABS, .doc = "all numeric dtypes; unsigned pass through"),
    OP_ROW("", "Neg", 6, 13, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_SIGNED_NUM, .lower = lower_unary,
           .arg = MLXB_NEG, .doc = "floats and signed ints (wraps on INT_MIN)"),
    OP_ROW("", "Sqrt", 6, 13, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOATS, .lower = lower_unary,
           .arg = MLXB_SQRT, .doc = "float dtypes"),
    OP_ROW("", "Reciprocal", 6, 13, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOATS, .lower = lower_unary,
           .arg = MLXB_RECIPROCAL, .doc = "float dtypes"),
    OP_ROW("", "Exp", 6, 13, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOATS, .lower = lower_exp,
           .doc = "float dtypes (float64 rebuilt from expm1 for full precision)"),
    OP_ROW("", "Log", 6, 13, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOATS, .lower = lower_unary,
           .arg = MLXB_LOG, .doc = "float dtypes"),
    OP_ROW("", "Erf", 9, 13, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOATS_NO_F64, .lower = lower_odd_unary,
           .arg = MLXB_ERF,
           .doc = "float16/bfloat16/float; erf(-0) = -0, erf(+0) = +0; declined: float64 (MLX computes it at float32 "
                  "precision)"),
    OP_ROW("", "Tanh", 6, 13, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOATS, .lower = lower_unary,
           .arg = MLXB_TANH, .doc = "float dtypes"),
    OP_ROW("", "Ceil", 6, 13, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOATS, .lower = lower_unary,
           .arg = MLXB_CEIL, .doc = "float dtypes"),
    OP_ROW("", "Floor", 6, 13, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOATS, .lower = lower_unary,
           .arg = MLXB_FLOOR, .doc = "float dtypes"),
    OP_ROW("", "Round", 11, 22, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOATS, .lower = lower_unary,
           .arg = MLXB_ROUND, .doc = "float dtypes; halves to even"),
    OP_ROW("", "Sign", 9, 13, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_NUMERIC, .lower = lower_sign,
           .doc = "all numeric dtypes; NaN stays NaN"),
    OP_ROW("", "Sin", 7, 22, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOATS_NO_F64, .lower = lower_odd_unary,
           .arg = MLXB_SIN,
           .doc = "float16/bfloat16/float; sin(-0) = -0; declined: float64 (MLX computes it at float32 precision)"),
    OP_ROW("", "Cos", 7, 22, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOATS_NO_F64, .lower = lower_unary,
           .arg = MLXB_COS, .doc = "float16/bfloat16/float; declined: float64 (MLX computes it at float32 precision)"),
    OP_ROW("", "Tan", 7, 22, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOATS, .lower = lower_unary,
           .arg = MLXB_TAN, .doc = "float dtypes"),
    OP_ROW("", "Asin", 7, 22, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOATS, .lower = lower_unary,
           .arg = MLXB_ASIN, .doc = "float dtypes"),
    OP_ROW("", "Acos", 7, 22, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOATS, .lower = lower_unary,
           .arg = MLXB_ACOS, .doc = "float dtypes"),
    OP_ROW("", "Atan", 7, 22, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOATS, .lower = lower_unary,
           .arg = MLXB_ATAN, .doc = "float dtypes"),
    OP_ROW("", "Sinh", 9, 22, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOATS, .lower = lower_unary,
           .arg = MLXB_SINH, .doc = "float dtypes"),
    OP_ROW("", "Cosh", 9, 22, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOATS, .lower = lower_unary,
           .arg = MLXB_COSH, .doc = "float dtypes"),
    OP_ROW("", "Asinh", 9, 22, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOATS, .lower = lower_unary,
           .arg = MLXB_ASINH, .doc = "float dtypes"),
    OP_ROW("", "Acosh", 9, 22, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOATS, .lower = lower_unary,
           .arg = MLXB_ACOSH, .doc = "float dtypes"),
    OP_ROW("", "Atanh", 9, 22, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOATS, .lower = lower_unary,
           .arg = MLXB_ATANH, .doc = "float dtypes"),
    OP_ROW("", "IsNaN", 9, 20, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOATS, .lower = lower_unary,
           .arg = MLXB_ISNAN, .doc = "float dtypes"),
    OP_ROW("", "IsInf", 10, 20, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOATS, .lower = lower_isinf,
           .doc = "float dtypes; detect_positive/detect_negative in every combination"),
    OP_ROW("", "Not", 1, 1, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_BOOL, .lower = lower_unary,
           .arg = MLXB_LOGICAL_NOT, .doc = "bool"),
    OP_ROW("", "BitwiseNot", 18, 18, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_INT, .lower = lower_unary,
           .arg = MLXB_BITWISE_INVERT, .doc = "integer dtypes"),
    /* binary arithmetic; opset 6 and older used the legacy broadcast/axis attributes */
    OP_ROW("", "Add", 7, 14, .inputs = {2, 2}, .outputs = {1, 1}, .dtypes = DT_NUMERIC, .lower = lower_binary,
           .arg = MLXB_ADD, .doc = "all numeric dtypes, broadcasting; ints wrap"),
    OP_ROW("", "Sub", 7, 14, .inputs = {2, 2}, .outputs = {1, 1}, .dtypes = DT_NUMERIC, .lower = lower_binary,
           .arg = MLXB_SUB, .doc = "all numeric dtypes, broadcasting; ints wrap"),
    OP_ROW("", "Mul", 7, 14, .inputs = {2, 2}, .outputs = {1, 1}, .dtypes = DT_NUMERIC, .lower = lower_binary,
           .arg = MLXB_MUL, .doc = "all numeric dtypes, broadcasting; ints wrap"),
    OP_ROW("", "Div", 7, 14, .inputs = {2, 2}, .outputs = {1, 1}, .dtypes = DT_NUMERIC, .lower = lower_div,
           .doc = "all numeric dtypes, broadcasting; integer division truncates toward zero (x/0 gives 0)"),
    OP_ROW("", "Pow", 7, 15, .inputs = {2, 2}, .outputs = {1, 1}, .dtypes = DT(ONNX_INT32) | DT(ONNX_INT64) | DT_FLOATS,
           .lower = lower_pow,
           .doc = "base int32/int64/float, any numeric exponent; mixed dtypes are computed in float64 like ORT "
                  "(declined on GPU); integer bases with negative exponents give ORT's truncated results (1 and -1 "
                  "keep their power, 0^-n and every other base give 0); integer overflow wraps: the value repeated "
                  "multiplication gives in the type (ORT casts a double pow, platform-dependent past the range)"),
    OP_ROW("", "Mod", 10, 28, .inputs = {2, 2}, .outputs = {1, 1}, .dtypes = DT_NUMERIC, .claim = claim_mod,
           .lower = lower_mod,
           .doc = "integers with fmod=0 (sign of divisor) or fmod=1 (sign of dividend); floats with fmod=1; "
                  "declined: floats with fmod=0 (invalid per spec)"),
    OP_ROW("", "BitShift", 11, 28, .inputs = {2, 2}, .outputs = {1, 1}, .dtypes = DT_INT, .claim = claim_bitshift,
           .lower = lower_bitshift,
           .doc = "integer dtypes; amounts >= the bit width (or negative) give 0, or -1 for right shifts of negatives"),
    OP_ROW("", "BitwiseAnd", 18, 18, .inputs = {2, 2}, .outputs = {1, 1}, .dtypes = DT_INT, .lower = lower_binary,
           .arg = MLXB_BITWISE_AND, .doc = "integer dtypes, broadcasting"),
    OP_ROW("", "BitwiseOr", 18, 18, .inputs = {2, 2}, .outputs = {1, 1}, .dtypes = DT_INT, .lower = lower_binary,
           .arg = MLXB_BITWISE_OR, .doc = "integer dtypes, broadcasting"),
    OP_ROW("", "BitwiseXor", 18, 18, .inputs = {2, 2}, .outputs = {1, 1}, .dtypes = DT_INT, .lower = lower_binary,
           .arg = MLXB_BITWISE_XOR, .doc = "integer dtypes, broadcasting"),
    OP_ROW("", "And", 7, 7, .inputs = {2, 2}, .outputs = {1, 1}, .dtypes = DT_BOOL, .lower = lower_binary,
           .arg = MLXB_LOGICAL_AND, .doc = "bool, broadcasting"),
    OP_ROW("", "Or", 7, 7, .inputs = {2, 2}, .outputs = {1, 1}, .dtypes = DT_BOOL, .lower = lower_binary,
           .arg = MLXB_LOGICAL_OR, .doc = "bool, broadcasting"),
    OP_ROW("", "Xor", 7, 7, .inputs = {2, 2}, .outputs = {1, 1}, .dtypes = DT_BOOL, .lower = lower_binary,
           .arg = MLXB_NOT_EQUAL, .doc = "bool, broadcasting"),
    /* comparisons: bool outputs */
    OP_ROW("", "Equal", 7, 19, .inputs = {2, 2}, .outputs = {1, 1}, .dtypes = DT_ALL, .lower = lower_binary,
           .arg = MLXB_EQUAL, .doc = "numeric and bool dtypes; strings are declined"),
    OP_ROW("", "Less", 7, 13, .inputs = {2, 2}, .outputs = {1, 1}, .dtypes = DT_NUMERIC, .lower = lower_binary,
           .arg = MLXB_LESS, .doc = "all numeric dtypes"),
    OP_ROW("", "Greater", 7, 13, .inputs = {2, 2}, .outputs = {1, 1}, .dtypes = DT_NUMERIC, .lower = lower_binary,
           .arg = MLXB_GREATER, .doc = "all numeric dtypes"),
    OP_ROW("", "LessOrEqual", 12, 16, .inputs = {2, 2}, .outputs = {1, 1}, .dtypes = DT_NUMERIC, .lower = lower_binary,
           .arg = MLXB_LESS_EQUAL, .doc = "all numeric dtypes"),
    OP_ROW("", "GreaterOrEqual", 12, 16, .inputs = {2, 2}, .outputs = {1, 1}, .dtypes = DT_NUMERIC,
           .lower = lower_binary, .arg = MLXB_GREATER_EQUAL, .doc = "all numeric dtypes"),
    OP_ROW("", "Where", 9, 16, .inputs = {3, 3}, .outputs = {1, 1}, .dtypes = DT_BOOL, .lower = lower_where,
           .doc = "every MLX dtype for X/Y, broadcasting"),
    /* variadic; opset 6 required equal shapes, which NumPy broadcasting also handles */
    OP_ROW("", "Min", 6, 13, .inputs = {1, OP_VARIADIC}, .outputs = {1, 1}, .dtypes = DT_NUMERIC,
           .claim = claim_variadic, .lower = lower_variadic, .arg = MLXB_MINIMUM,
           .doc = "1..N inputs, all numeric dtypes, broadcasting; NaN propagates"),
    OP_ROW("", "Max", 6, 13, .inputs = {1, OP_VARIADIC}, .outputs = {1, 1}, .dtypes = DT_NUMERIC,
           .claim = claim_variadic, .lower = lower_variadic, .arg = MLXB_MAXIMUM,
           .doc = "1..N inputs, all numeric dtypes, broadcasting; NaN propagates"),
    OP_ROW("", "Sum", 6, 13, .inputs = {1, OP_VARIADIC}, .outputs = {1, 1}, .dtypes = DT_FLOATS,
           .claim = claim_variadic, .lower = lower_variadic, .arg = MLXB_ADD,
           .doc = "1..N inputs, float dtypes, broadcasting; halves accumulate in float32"),
    OP_ROW("", "Mean", 6, 13, .inputs = {1, OP_VARIADIC}, .outputs = {1, 1}, .dtypes = DT_FLOATS,
           .claim = claim_variadic, .lower = lower_mean,
           .doc = "1..N inputs, float dtypes, broadcasting; halves accumulate in float32"),
};

OPS_FAMILY(elementwise, defs);
