/* Linear quantization ops: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger
 * and QLinearMatMul for the 8- and 16-bit integer types MLX has. Arithmetic follows ORT's CPU
 * kernels step by step (float32 division, round half to even, add the zero point, saturate), and
 * integer matrix products are accumulated in float64 on the CPU, which is exact for 8-bit operands
 * (MLX's matmul has no integer kernels). The 4-bit and float8 types are declined. */
#include <string.h>

#include "ops/op_util.h"


#define DT_Q8 (DT(ONNX_INT8) | DT(ONNX_UINT8))
#define DT_Q16 (DT(ONNX_INT16) | DT(ONNX_UINT16))

/* ---- helpers ------------------------------------------------------------------------------ */

static bool q_in(uint64_t set, int32_t t) { return t != ONNX_UNDEFINED && (set & DT(t)); }

/* The representable range of an integer MLX dtype (as doubles, exact up to 32 bits). */
static void q_range(mlxb_dtype t, double *lo, double *hi) {
  switch (t) {
    case MLXB_I8: *lo = -128, *hi = 127; break;
    case MLXB_U8: *lo = 0, *hi = 255; break;
    case MLXB_I16: *lo = -32768, *hi = 32767; break;
    case MLXB_U16: *lo = 0, *hi = 65535; break;
    default: *lo = -2147483648.0, *hi = 2147483647.0; break;
  }
}

/* saturate(round_half_even(x / scale) + zp) in float32, NaN giving the type's minimum as ORT's
 * vectorized kernels do; every operand is already float32 and broadcastable. */
static mlxb_array *q_quantize(mlxb_scope *s, mlxb_array *x, mlxb_array *scale, mlxb_array *zp, mlxb_dtype t) {
  double lo, hi;
  q_range(t, &lo, &hi);
  mlxb_array *q = mlxb_unary(s, MLXB_ROUND, mlxb_binary(s, MLXB_DIV, x, scale));
  if (zp) q = mlxb_binary(s, MLXB_ADD, q, zp);
  mlxb_array *flo = mlxb_scalar_f64(s, lo, MLXB_F32);
  q = mlxb_clip(s, q, flo, mlxb_scalar_f64(s, hi, MLXB_F32));
  q = mlxb_where(s, mlxb_unary(s, MLXB_ISNAN, q), flo, q);
  return mlxb_astype(s, q, t);
}

/* The x, scale and optional zero point inputs of a Q/DQ node, the last two shaped for
 * broadcasting against x by the node's axis and block_size; *zpp stays NULL without a zero
 * point. 0 or -1. */
static int q_inputs(op_ctx *c, mlxb_array **x, mlxb_array **sp, mlxb_array **zpp) {
  mlxb_array *scale = op_input(c, 1), *zp = op_input(c, 2);
  *x = op_input(c, 0), *sp = *zpp = NULL;
  int rank = mlxb_ndim(*x);
  if (rank > OP_UTIL_MAX_RANK) return op_fail(c, "input rank %d is too large", rank);
  int64_t dims[OP_UTIL_MAX_RANK];
  mlxb_shape(*x, dims);
  const ir_node *n = op_node(c);
  int axis = op_util_axis(ir_attr_int(n, "axis", 1), rank);
  int64_t block = ir_attr_int(n, "block_size", 0);
  if (block < 0) return op_fail(c, "block_size must be non-negative");
  if (!(*sp = op_util_quant_param(c, scale, dims, rank, axis, block))) return -1;
  if (zp && !(*zpp = op_util_quant_param(c, zp, dims, rank, axis, block))) return -1;
  return 0;
}

/* ---- QuantizeLinear / DequantizeLinear ----------------------------------------------------- */

static bool claim_quantize(claim_ctx *c, const op_def *def) {
  int32_t xt = claim_input_dtype(c, 0), st = claim_input_dtype(c, 1), zt = claim_input_dtype(c, 2);
  if (st != xt) return claim_decline(c, "scale dtype %s differs from input's (ORT reads it as the input type)", ir_dtype_name(st));
  int64_t precision = ir_attr_int(c->node, "precision", 0); /* 0: the scale's dtype */
  if (precision != 0 && precision != st) return claim_decline(c, "precision %lld differs from the scale's dtype", (long long)precision);
  const ir_value *y = claim_output(c, 0);
  int32_t yt = y ? y->dtype : ONNX_UNDEFINED;
  if (!q_in(DT_Q8 | DT_Q16, yt)) return claim_decline(c, "output dtype %s (int8/uint8/int16/uint16 only)", ir_dtype_name(yt));
  if (zt != ONNX_UNDEFINED && zt != yt) return claim_decline(c, "zero point dtype differs from output's");
  return true;
}

static int lower_quantize(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x, *sp, *zpp;
  if (q_inputs(c, &x, &sp, &zpp)) return -1;
  int mt = op_mlx_dtype(op_output_dtype(c, 0));
  if (mt < 0) return op_fail(c, "unknown output dtype");
  mlxb_array *xf = op_util_cast(s, x, MLXB_F32);
  mlxb_array *y = q_quantize(s, xf, op_util_cast(s, sp, MLXB_F32), op_util_cast(s, zpp, MLXB_F32), (mlxb_dtype)mt);
  return op_set_output(c, 0, y);
}

static bool claim_dequantize(claim_ctx *c, const op_def *def) {
  int32_t xt = claim_input_dtype(c, 0), st = claim_input_dtype(c, 1), zt = claim_input_dtype(c, 2);
  if (st != ONNX_FLOAT && st != ONNX_FLOAT16) return claim_decline(c, "scale dtype %s (float/float16 only)", ir_dtype_name(st));
  if (zt != ONNX_UNDEFINED && zt != xt) return claim_decline(c, "zero point dtype differs from input's");
  const ir_value *y = claim_output(c, 0);
  if (!y || y->dtype != st) return claim_decline(c, "output dtype differs from the scale's");
  return true;
}

/* (float)((int32)x - (int32)zp) * (float)scale, rounded once to the output type (ORT's order). */
static int lower_dequantize(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x, *sp, *zpp;
  if (q_inputs(c, &x, &sp, &zpp)) return -1;
  mlxb_array *xi = op_util_cast(s, x, MLXB_I32);
  if (zpp) xi = mlxb_binary(s, MLXB_SUB, xi, op_util_cast(s, zpp, MLXB_I32));
  mlxb_array *y = mlxb_binary(s, MLXB_MUL, op_util_cast(s, xi, MLXB_F32), op_util_cast(s, sp, MLXB_F32));
  return op_set_output(c, 0, op_util_cast(s, y, mlxb_type(sp))); /* the scale's dtype */
}

/* ---- DynamicQuantizeLinear ---------------------------------------------------------------- */

/* ORT's GetQuantizationParameter: the range of x widened to hold 0, scale = range / 255 (1 for an
 * empty range), zero point = round_half_even(clamp(-min / scale, 0, 255)). */
static mlxb_array *q_dynamic(mlxb_scope *s, mlxb_array *x, mlxb_array **scale_out, mlxb_array **zp_out) {
  mlxb_array *zero = mlxb_scalar_f64(s, 0.0, MLXB_F32);
  mlxb_array *lo = zero, *hi = zero;
  if (mlxb_size(x) > 0) {
    lo = mlxb_binary(s, MLXB_MINIMUM, mlxb_reduce(s, MLXB_RMIN, x, NULL, 0, false), zero);
    hi = mlxb_binary(s, MLXB_MAXIMUM, mlxb_reduce(s, MLXB_RMAX, x, NULL, 0, false), zero);
  }
  mlxb_array *range = mlxb_binary(s, MLXB_SUB, hi, lo);
  mlxb_array *scale = mlxb_where(s, mlxb_binary(s, MLXB_EQUAL, hi, lo), mlxb_scalar_f64(s, 1.0, MLXB_F32),
                                 mlxb_binary(s, MLXB_DIV, range, mlxb_scalar_f64(s, 255.0, MLXB_F32)));
  mlxb_array *izp = mlxb_binary(s, MLXB_SUB, zero, mlxb_binary(s, MLXB_DIV, lo, scale));
  izp = mlxb_clip(s, izp, zero, mlxb_scalar_f64(s, 255.0, MLXB_F32));
  mlxb_array *zpf = mlxb_unary(s, MLXB_ROUND, izp);
  *scale_out = scale;
  *zp_out = mlxb_astype(s, zpf, MLXB_U8);
  return q_quantize(s, x, scale, zpf, MLXB_U8);
}

static int lower_dynamic_quantize(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *scale, *zp;
  mlxb_array *y = q_dynamic(s, op_input(c, 0), &scale, &zp);
  if (op_set_output(c, 0, y) || op_set_output(c, 1, scale)) return -1;
  return op_set_output(c, 2, zp);
}

/* ---- MatMulInteger / QLinearMatMul -------------------------------------------------------- */

/* (a - azp) @ (b - bzp) exactly, as int32 (wrapping like an int32 accumulator). A zero point of
 * A with several values holds one per row, of B one per column. */
static mlxb_array *q_int_matmul(op_ctx *c, mlxb_array *a, mlxb_array *azp, mlxb_array *b, mlxb_array *bzp) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *af = op_util_cast(s, a, MLXB_F64), *bf = op_util_cast(s, b, MLXB_F64);
  if (azp && mlxb_size(azp) == 1) {
    azp = mlxb_reshape(s, azp, NULL, 0);
  } else if (azp) {
    /* Per-row: [M] against a [..., M, K]. */
    int64_t m = mlxb_size(azp), shape[2] = {(int64_t)mlxb_size(azp), 1};
    if (mlxb_ndim(a) < 2 || mlxb_dim(a, -2) != m) {
      op_fail(c, "a_zero_point must be a scalar or hold one value per row of A");
      return NULL;
    }
    azp = mlxb_reshape(s, azp, shape, 2);
  }
  if (bzp && mlxb_size(bzp) == 1) bzp = mlxb_reshape(s, bzp, NULL, 0);
  /* The products run on the CPU: float64 has no GPU kernels, and its 53-bit mantissa holds every
   * partial sum of 8-bit products exactly. */
  bool old = mlxb_scope_force_cpu(s, true);
  if (azp) af = mlxb_binary(s, MLXB_SUB, af, op_util_cast(s, azp, MLXB_F64));
  if (bzp) bf = mlxb_binary(s, MLXB_SUB, bf, op_util_cast(s, bzp, MLXB_F64));
  mlxb_array *acc = mlxb_matmul(s, af, bf);
  acc = mlxb_astype(s, mlxb_astype(s, acc, MLXB_I64), MLXB_I32);
  mlxb_scope_force_cpu(s, old);
  return acc;
}

static bool claim_matmul_integer(claim_ctx *c, const op_def *def) {
  if (!q_in(DT_Q8, claim_input_dtype(c, 0)) || !q_in(DT_Q8, claim_input_dtype(c, 1)))
    return claim_decline(c, "A and B must be int8/uint8");
  for (int i = 0; i < 2; i++) {
    int32_t zt = claim_input_dtype(c, 2 + i);
    if (zt != ONNX_UNDEFINED && zt != claim_input_dtype(c, i)) return claim_decline(c, "zero point %d dtype differs from its matrix's", i);
  }
  const ir_value *a = claim_input(c, 0), *b = claim_input(c, 1);
  if ((a && a->rank > OP_UTIL_MAX_RANK) || (b && b->rank > OP_UTIL_MAX_RANK)) return claim_decline(c, "rank too large");
  return true;
}

static int lower_matmul_integer(op_ctx *c, const op_def *def) {
  mlxb_array *a = op_input(c, 0), *b = op_input(c, 1);
  mlxb_array *y = q_int_matmul(c, a, op_input(c, 2), b, op_input(c, 3));
  if (!y) return -1; /* the failure is recorded */
  return op_set_output(c, 0, y);
}

static bool claim_qlinear_matmul(claim_ctx *c, const op_def *def) {
  /* inputs: a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp */
  static const int ints[] = {0, 2, 3, 5, 7};
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
    if (!q_in(DT_Q8, claim_input_dtype(c, ints[i]))) return claim_decline(c, "input %d must be int8/uint8", ints[i]);
  static const int scales[] = {1, 4, 6};
  for (size_t i = 0; i < sizeof scales / sizeof scales[0]; i++)
    if (claim_input_dtype(c, scales[i]) != ONNX_FLOAT && claim_input_dtype(c, scales[i]) != ONNX_FLOAT16)
      return claim_decline(c, "scale %d is not float32/float16", scales[i]);
  const ir_value *y = claim_output(c, 0);
  if (claim_input_dtype(c, 2) != claim_input_dtype(c, 0) || claim_input_dtype(c, 5) != claim_input_dtype(c, 3) ||
      (y && y->dtype != claim_input_dtype(c, 7)))
    return claim_decline(c, "zero point dtypes differ from their tensors'");
  const ir_value *a = claim_input(c, 0), *b = claim_input(c, 3);
  if ((a && a->rank > OP_UTIL_MAX_RANK) || (b && b->rank > OP_UTIL_MAX_RANK)) return claim_decline(c, "rank too large");
  return true;
}

/* ORT requantizes the int32 accumulator with one float32 multiplier a_scale * b_scale / y_scale
 * (per column when B's parameters are), rounding half to even. */
static int lower_qlinear_matmul(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *in[8];
  for (int i = 0; i < 8; i++) in[i] = op_input(c, i);
  if (mlxb_size(in[1]) != 1 || mlxb_size(in[2]) != 1 || mlxb_size(in[6]) != 1 || mlxb_size(in[7]) != 1)
    return op_fail(c, "a and y scales and zero points must be scalars");
  mlxb_array *acc = q_int_matmul(c, in[0], in[2], in[3], in[5]);
  if (!acc) return -1; /* the failure is recorded */
  mlxb_array *bs = op_util_cast(s, mlxb_size(in[4]) == 1 ? mlxb_reshape(s, in[4], NULL, 0) : in[4], MLXB_F32);
  mlxb_array *as = op_util_cast(s, mlxb_reshape(s, in[1], NULL, 0), MLXB_F32);
  mlxb_array *ys = op_util_cast(s, mlxb_reshape(s, in[6], NULL, 0), MLXB_F32);
  mlxb_array *mult = mlxb_binary(s, MLXB_DIV, mlxb_binary(s, MLXB_MUL, as, bs), ys);
  mlxb_array *v = mlxb_unary(s, MLXB_ROUND, mlxb_binary(s, MLXB_MUL, mlxb_astype(s, acc, MLXB_F32), mult));
  mlxb_dtype yt = mlxb_type(in[7]);
  double lo, hi;
  q_range(yt, &lo, &hi);
  v = mlxb_binary(s, MLXB_ADD, v, mlxb_astype(s, mlxb_reshape(s, in[7], NULL, 0), MLXB_F32));
  v = mlxb_clip(s, v, mlxb_scalar_f64(s, lo, MLXB_F32), mlxb_scalar_f64(s, hi, MLXB_F32));
  return op_set_output(c, 0, mlxb_astype(s, v, yt));
}

/* ---- MatMulIntegerToFloat / DynamicQuantizeMatMul (com.microsoft) ---------------------------
 * ORT's fusions of dynamically quantized matmuls: the exact int32 product of (A - a_zp) and
 * (B - b_zp), times the float32 multiplier a_scale * b_scale (per column where B's scale is),
 * plus the bias, as MLAS's scale-bias output processor does. DynamicQuantizeMatMul quantizes A
 * first as DynamicQuantizeLinear does. */

/* acc (int32) scaled and biased: inputs a_scale and b_scale are float32 scalars or B's columns. */
static int q_scaled_product(op_ctx *c, mlxb_array *acc, mlxb_array *as, mlxb_array *bs, mlxb_array *bias) {
  mlxb_scope *s = op_scope(c);
  if (mlxb_size(as) != 1) return op_fail(c, "a_scale must be a scalar");
  int64_t n = mlxb_ndim(acc) ? mlxb_dim(acc, -1) : 1;
  if (mlxb_size(bs) != 1 && (int64_t)mlxb_size(bs) != n) return op_fail(c, "b_scale must be a scalar or hold one value per column of B");
  if (bias && (int64_t)mlxb_size(bias) != n) return op_fail(c, "bias must hold one value per column of B");
  mlxb_array *mult = mlxb_binary(s, MLXB_MUL, mlxb_reshape(s, as, NULL, 0),
                                 mlxb_size(bs) == 1 ? mlxb_reshape(s, bs, NULL, 0) : mlxb_reshape(s, bs, &n, 1));
  mlxb_array *y = mlxb_binary(s, MLXB_MUL, mlxb_astype(s, acc, MLXB_F32), mult);
  if (bias) y = mlxb_binary(s, MLXB_ADD, y, mlxb_reshape(s, bias, &n, 1));
  return op_set_output(c, 0, y);
}

static bool q_claim_rank(claim_ctx *c, int i) {
  const ir_value *v = claim_input(c, i);
  return !(v && v->rank > OP_UTIL_MAX_RANK) || claim_decline(c, "input %d's rank is too large", i);
}

/* The inputs given (absent ones pass) are float32. */
static bool q_claim_float32(claim_ctx *c, const int *inputs, size_t n) {
  for (size_t i = 0; i < n; i++) {
    int32_t t = claim_input_dtype(c, inputs[i]);
    if (t != ONNX_UNDEFINED && t != ONNX_FLOAT) return claim_decline(c, "input %d must be float32", inputs[i]);
  }
  return true;
}

/* B (input b) is int8/uint8 with its zero point (input b_zp) of its dtype. */
static bool q_claim_b_side(claim_ctx *c, int b, int b_zp) {
  if (!q_in(DT_Q8, claim_input_dtype(c, b))) return claim_decline(c, "B must be int8/uint8");
  int32_t zt = claim_input_dtype(c, b_zp);
  if (zt != ONNX_UNDEFINED && zt != claim_input_dtype(c, b)) return claim_decline(c, "b_zero_point's dtype differs from B's");
  return q_claim_rank(c, b);
}

static bool claim_matmul_integer_to_float(claim_ctx *c, const op_def *def) {
  if (!q_in(DT_Q8, claim_input_dtype(c, 0))) return claim_decline(c, "A must be int8/uint8");
  int32_t zt = claim_input_dtype(c, 4);
  if (zt != ONNX_UNDEFINED && zt != claim_input_dtype(c, 0)) return claim_decline(c, "a_zero_point's dtype differs from A's");
  return q_claim_float32(c, (const int[]){2, 3, 6}, 3) && q_claim_rank(c, 0) && q_claim_b_side(c, 1, 5);
}

static int lower_matmul_integer_to_float(op_ctx *c, const op_def *def) {
  mlxb_array *azp = op_input(c, 4);
  if (azp && mlxb_size(azp) != 1) return op_fail(c, "a_zero_point must be a scalar");
  mlxb_array *acc = q_int_matmul(c, op_input(c, 0), azp, op_input(c, 1), op_input(c, 5));
  if (!acc) return -1; /* the failure is recorded */
  return q_scaled_product(c, acc, op_input(c, 2), op_input(c, 3), op_input(c, 6));
}

static bool claim_dynamic_quantize_matmul(claim_ctx *c, const op_def *def) {
  return q_claim_float32(c, (const int[]){0, 2, 4}, 3) && q_claim_rank(c, 0) && q_claim_b_side(c, 1, 3);
}

static int lower_dynamic_quantize_matmul(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *a_scale, *a_zp;
  mlxb_array *aq = q_dynamic(s, op_input(c, 0), &a_scale, &a_zp);
  mlxb_array *acc = q_int_matmul(c, aq, a_zp, op_input(c, 1), op_input(c, 3));
  if (!acc) return -1; /* the failure is recorded */
  return q_scaled_product(c, acc, a_scale, op_input(c, 2), op_input(c, 4));
}

/* ---- the table ---------------------------------------------------------------------------- */

static bool claim_dynamic_quantize(claim_ctx *c, const op_def *def) { return true; }

static const op_def defs[] = {
  OP_ROW("", "QuantizeLinear", 10, 28, .inputs = {2, 3}, .outputs = {1, 1}, .dtypes = DT_F32 | DT_F16,
         .claim = claim_quantize, .lower = lower_quantize,
         .doc = "float/float16 input with a scale of the same dtype; int8/uint8/int16/uint16 outputs; per-tensor, "
                "per-axis and blocked (block_size); float32 division, round half to even, saturate (NaN gives the "
                "minimum, as in ORT). Declined: 4-bit/2-bit/float8 outputs (MLX lacks them), bfloat16 or int32 "
                "input, a precision other than the scale's dtype"),
  OP_ROW("", "DequantizeLinear", 10, 28, .inputs = {2, 3}, .outputs = {1, 1}, .dtypes = DT_Q8 | DT_Q16 | DT(ONNX_INT32),
         .claim = claim_dequantize, .lower = lower_dequantize,
         .doc = "int8/uint8/int16/uint16/int32 input, float/float16 scale and output; per-tensor, per-axis and "
                "blocked; computed as ORT does ((int32)x - zp in int32, times the scale in float32). Declined: "
                "4-bit/float8 inputs, bfloat16 scales, an output dtype other than the scale's"),
  OP_ROW("com.microsoft", "QuantizeLinear", 1, 1, .inputs = {2, 3}, .outputs = {1, 1}, .dtypes = DT_F32 | DT_F16,
         .claim = claim_quantize, .lower = lower_quantize,
         .doc = "the contrib form ORT's quantization tools write for 16-bit types: as QuantizeLinear (axis, "
                "int8/uint8/int16/uint16 outputs)"),
  OP_ROW("com.microsoft", "DequantizeLinear", 1, 1, .inputs = {2, 3}, .outputs = {1, 1},
         .dtypes = DT_Q8 | DT_Q16 | DT(ONNX_INT32), .claim = claim_dequantize, .lower = lower_dequantize,
         .doc = "the contrib form: as DequantizeLinear (axis, int8/uint8/int16/uint16/int32 inputs)"),
  OP_ROW("", "DynamicQuantizeLinear", 11, 11, .inputs = {1, 1}, .outputs = {3, 3}, .dtypes = DT_F32,
         .claim = claim_dynamic_quantize, .lower = lower_dynamic_quantize,
         .doc = "float32 to uint8 with ORT's scale and zero-point formulas"),
  OP_ROW("", "MatMulInteger", 10, 10, .inputs = {2, 4}, .outputs = {1, 1}, .dtypes = DT_Q8,
         .claim = claim_matmul_integer, .lower = lower_matmul_integer,
         .doc = "int8/uint8 A and B, optional zero points (A: scalar or per row, B: scalar or per column); exact "
                "int32 result accumulated in float64 on the CPU"),
  OP_ROW("com.microsoft", "MatMulIntegerToFloat", 1, 1, .inputs = {4, 7}, .outputs = {1, 1}, .dtypes = DT_Q8,
         .claim = claim_matmul_integer_to_float, .lower = lower_matmul_integer_to_float,
         .doc = "int8/uint8 A and B, float32 scales (a scalar, b scalar or per column), zero points (a scalar, b "
                "scalar or per column), optional bias; exact int32 product times a_scale * b_scale, plus bias"),
  OP_ROW("com.microsoft", "DynamicQuantizeMatMul", 1, 1, .inputs = {3, 5}, .outputs = {1, 1}, .dtypes = DT_F32,
         .claim = claim_dynamic_quantize_matmul, .lower = lower_dynamic_quantize_matmul,
         .doc = "float32 A quantized to uint8 as DynamicQuantizeLinear, int8/uint8 B with scalar or per-column "
                "scale and zero point, optional bias; then as MatMulIntegerToFloat"),
  OP_ROW("", "QLinearMatMul", 10, 21, .inputs = {8, 8}, .outputs = {1, 1}, .dtypes = DT_Q8,
         .claim = claim_qlinear_matmul, .lower = lower_qlinear_matmul,
         .doc = "int8/uint8 tensors with float32/float16 scales (B's per column allowed); exact integer "
                "accumulation, then ORT's float32 requantization (saturating). Declined: bfloat16 scales, float8 "
                "tensors"),
};

OPS_FAMILY(quantize, defs);
