/* Cast and CastLike between the dtypes MLX represents, and BitCast (a bit view between dtypes of
 * one width). MLX's astype is C++'s static_cast, as in ORT's CPU kernels: float-to-integer
 * truncates toward zero and nonzero (and NaN) becomes true. What a NaN or out-of-range float
 * becomes as an integer is no part of static_cast, and MLX's backends differ there (its CPU
 * backend follows the x86 instructions ORT's CPU EP uses, its CUDA backend saturates), so
 * float-to-integer casts spell ORT's answers out with comparisons and hand astype only values in
 * range (cast_float_to_int). */
#include "ops/op.h"
#include "ops/op_util.h"

static bool claim_cast(claim_ctx *c, const op_def *def) {
  int64_t to = ir_attr_int(c->node, "to", ONNX_UNDEFINED);
  if (to <= ONNX_UNDEFINED || to > INT32_MAX || op_mlx_dtype((int32_t)to) < 0)
    return claim_decline(c, "target dtype %s is not an MLX dtype (float8/int4 come later)",
                         ir_dtype_name((int32_t)to));
  return true;
}

/* ---- float to integer ---------------------------------------------------------------------
 * ORT's CPU EP on x86-64 (1.31, checked value by value against its Cast) converts with the SSE
 * truncating conversions, whose answer for NaN and for a truncated value outside the signed
 * destination is the "integer indefinite", INT_MIN of that width:
 *   int32                        NaN, v >= 2^31, v < -2^31 -> INT32_MIN
 *   int8, int16, uint8, uint16   the int32 conversion, then its low bits
 *   int64                        NaN, v >= 2^63, v < -2^63 -> INT64_MIN
 *   uint32                       v >= 2^31 ? conv32(v - 2^31) ^ 2^31 : conv32(v): NaN and
 *                                v < -2^31 -> 2^31, v >= 2^32 -> 0; from float16 NaN and
 *                                +-inf -> 0 (the two agree on every finite float16)
 *   uint64                       the same over 64 bits: NaN and v < -2^63 -> 2^63, v >= 2^64 -> 0
 * The uint32 row is ORT's vectorized loop (blocks of 4 floats or doubles, 8 bfloat16s). The last
 * size % 4 (% 8) elements of a tensor go through its scalar loop instead, which keeps the low 32
 * bits of the int64 conversion (NaN, -inf -> 0, -1e10 -> 2884901888): ORT's answer depends on
 * where an element sits. This follows the blocks, i.e. every element of a tensor whose size is a
 * multiple of the block and all but the last few of any other; float16 has only the scalar loop.
 * A truncated value in (-2^31 - 1, -2^31] is INT32_MIN either way, so comparing v itself against
 * the powers of two (exact in every float dtype but float16, which is widened first) suffices. */

#define TWO_31 2147483648.0
#define TWO_32 4294967296.0
#define TWO_63 9223372036854775808.0
#define TWO_64 18446744073709551616.0

/* x where lo <= x, else `below` (NaN too: it fails every comparison); then that value where it is
 * below hi, else `above`. below must be under hi. Every result lies in [lo, hi) or is a fill. */
static mlxb_array *bound(mlxb_scope *s, mlxb_array *x, double lo, double below, double hi, double above) {
  mlxb_array *ge = mlxb_binary(s, MLXB_GREATER_EQUAL, x, op_util_scalar_like(s, lo, x));
  mlxb_array *y = mlxb_where(s, ge, x, op_util_scalar_like(s, below, x));
  mlxb_array *lt = mlxb_binary(s, MLXB_LESS, y, op_util_scalar_like(s, hi, x));
  return mlxb_where(s, lt, y, op_util_scalar_like(s, above, x));
}

/* A float in [-2^63, 2^64) as uint64 modulo 2^64: the part from 2^63 up moves down by 2^64
 * (exact: both are multiples of x's ulp there) so that the conversion stays within int64. */
static mlxb_array *to_u64_mod(mlxb_scope *s, mlxb_array *x) {
  mlxb_array *high = mlxb_binary(s, MLXB_GREATER_EQUAL, x, op_util_scalar_like(s, TWO_63, x));
  mlxb_array *folded = mlxb_where(s, high, op_util_sub(s, x, op_util_scalar_like(s, TWO_64, x)), x);
  return mlxb_astype(s, mlxb_astype(s, folded, MLXB_I64), MLXB_U64);
}

/* ORT's float-to-integer conversion (the table above) of float x to integer dtype t. */
static mlxb_array *cast_float_to_int(mlxb_scope *s, mlxb_array *x, mlxb_dtype t) {
  bool half = mlxb_type(x) == MLXB_F16;
  if (half) x = mlxb_astype(s, x, MLXB_F32); /* exact; float16 cannot hold 2^31 */
  switch (t) {
    case MLXB_I64: return mlxb_astype(s, bound(s, x, -TWO_63, -TWO_63, TWO_63, -TWO_63), MLXB_I64);
    case MLXB_U64: return to_u64_mod(s, bound(s, x, -TWO_63, -TWO_63, TWO_64, 0.0));
    case MLXB_U32: {
      mlxb_array *b = bound(s, x, -TWO_31, half ? 0.0 : -TWO_31, TWO_32, 0.0);
      return mlxb_astype(s, mlxb_astype(s, b, MLXB_I64), MLXB_U32);
    }
    default: { /* int32, and the narrow types as int32's low bits */
      mlxb_array *i32 = mlxb_astype(s, bound(s, x, -TWO_31, -TWO_31, TWO_31, -TWO_31), MLXB_I32);
      return op_util_cast(s, i32, t);
    }
  }
}

static bool is_int(int32_t t) {
  return t == ONNX_INT32 || t == ONNX_INT64 || t == ONNX_INT16 || t == ONNX_INT8 || t == ONNX_UINT8 ||
         t == ONNX_UINT16 || t == ONNX_UINT32 || t == ONNX_UINT64;
}

/* Shape arithmetic stays on the host: known int32/int64 values (a Shape's dims, a Gather of them)
 * cast to int32/int64 are known too, so no cast reaches the device and consumers read them without
 * an evaluation. int64 to int32 keeps the low 32 bits, as ORT and MLX do. */
static bool cast_on_host(const op_ctx *c, int32_t to, int64_t count) {
  return (to == ONNX_INT64 || to == ONNX_INT32) && op_util_input_host_ints(c, 0, count);
}

static int cast_host(op_ctx *c, int32_t to, const int64_t *dims, int rank) {
  int64_t vals[OP_UTIL_HOST_INTS_MAX];
  int n = op_util_read_host_ints(c, 0, vals, op_util_numel(dims, rank));
  if (n < 0) return -1;
  for (int i = 0; to == ONNX_INT32 && i < n; i++) vals[i] = (int32_t)(uint32_t)(uint64_t)vals[i]; /* the low 32 bits */
  return op_set_output_ints(c, 0, vals, n, dims, rank, to);
}

/* Converts input 0 to the ONNX dtype `to`. */
static int cast_input(op_ctx *c, int32_t to) {
  mlxb_array *x = op_input(c, 0);
  int t = op_mlx_dtype(to);
  if (t < 0) return op_fail(c, "target dtype %s is not an MLX dtype", ir_dtype_name(to));
  int64_t dims[OP_UTIL_MAX_RANK];
  int rank = mlxb_ndim(x);
  if (rank >= 0 && rank <= OP_UTIL_MAX_RANK) {
    mlxb_shape(x, dims);
    if (cast_on_host(c, to, op_util_numel(dims, rank))) return cast_host(c, to, dims, rank);
  }
  if (mlxb_type(x) == (mlxb_dtype)t) return op_set_output(c, 0, mlxb_ref(op_scope(c), x));
  if (op_util_is_float(mlxb_type(x)) && is_int(to))
    return op_set_output(c, 0, cast_float_to_int(op_scope(c), x, (mlxb_dtype)t));
  return op_set_output(c, 0, mlxb_astype(op_scope(c), x, (mlxb_dtype)t));
}

static int lower_cast(op_ctx *c, const op_def *def) {
  return cast_input(c, (int32_t)ir_attr_int(op_node(c), "to", ONNX_UNDEFINED));
}

static int lower_cast_like(op_ctx *c, const op_def *def) { return cast_input(c, op_input_dtype(c, 1)); }

/* Zero rows stay zero (or false) in every target type; a padded length stays exact between
 * integer types wide enough for it. */
static bool pad_cast(const ir_graph *g, const ir_node *n, const pad_fact *in, pad_fact *out,
                     pad_bound *bound) {
  int32_t to = (int32_t)ir_attr_int(n, "to", ONNX_UNDEFINED);
  if (in[0].kind == PAD_LENGTH &&
      !(is_int(g->values[n->inputs[0]].dtype) && (to == ONNX_INT32 || to == ONNX_INT64)))
    return false;
  out[0] = in[0];
  return true;
}

/* ---- BitCast ----------------------------------------------------------------------------- */

static bool claim_bitcast(claim_ctx *c, const op_def *def) {
  const ir_attr *to = ir_node_attr(c->node, "to");
  if (!to || to->type != IR_ATTR_INT) return claim_decline(c, "missing attribute 'to'");
  int32_t from = claim_input_dtype(c, 0), dst = (int32_t)to->i;
  if (op_mlx_dtype(dst) < 0 || ir_dtype_emulated_bits(dst)) return claim_decline(c, "target dtype %s", ir_dtype_name(dst));
  if (ir_dtype_size(from) == 0 || ir_dtype_size(from) != ir_dtype_size(dst))
    return claim_decline(c, "%s and %s differ in width", ir_dtype_name(from), ir_dtype_name(dst));
  /* Bytes other than 0 and 1 are not valid bools. */
  if (dst == ONNX_BOOL && from != ONNX_BOOL) return claim_decline(c, "bits of %s viewed as bool", ir_dtype_name(from));
  return true;
}

/* The same bits (little endian on every host MLX runs on) read as the target dtype. */
static int lower_bitcast(op_ctx *c, const op_def *def) {
  mlxb_array *x = op_input(c, 0);
  int t = op_mlx_dtype((int32_t)ir_attr_int(op_node(c), "to", ONNX_UNDEFINED));
  if (t < 0) return op_fail(c, "target dtype has no MLX dtype");
  if (t == (int)mlxb_type(x)) return op_set_output(c, 0, x);
  return op_set_output(c, 0, mlxb_view(op_scope(c), x, (mlxb_dtype)t));
}

static const op_def defs[] = {
    OP_ROW("", "Cast", 6, 28, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_ALL, .claim = claim_cast,
           .lower = lower_cast, .pad = pad_cast,
           .doc = "every pair of MLX dtypes (bool, ints, float16/bfloat16/float/double); float-to-int truncates, "
                  "and NaN or out-of-range floats become what ORT's CPU EP gives on x86-64 on every backend "
                  "(int32/int64: the type's minimum; narrower ints: int32's low bits; uint32/uint64: see cast.c, "
                  "where ORT's own uint32 answer differs for the last size % 4 elements and is not followed); "
                  "declined: string, float8, int4 and other dtypes MLX lacks (saturate only concerns float8)"),
    OP_ROW("", "CastLike", 15, 25, .inputs = {2, 2}, .outputs = {1, 1}, .dtypes = DT_ALL, .lower = lower_cast_like,
           .doc = "every pair of MLX dtypes, as Cast; declined: dtypes MLX lacks"),
    OP_ROW("", "BitCast", 26, 28, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_ALL, .claim = claim_bitcast,
           .lower = lower_bitcast,
           .doc = "between any two MLX dtypes of one width (8/16/32/64-bit integers, float16, bfloat16, float32, "
                  "float64), bits kept exactly; bool to bool and 8-bit integers as the spec's byte view (ORT 1.31 "
                  "has no bool kernel). Declined: dtypes MLX lacks (sub-byte, float8, complex, string), widths that "
                  "differ, non-bool bits as bool"),
};

OPS_FAMILY(cast, defs);
