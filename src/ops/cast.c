/* Cast and CastLike between the dtypes MLX represents, and BitCast (a bit view between dtypes of
 * one width). MLX's astype is C++'s static_cast, as in ORT's CPU kernels: float-to-integer
 * truncates toward zero, nonzero (and NaN) becomes true, and out-of-range or NaN float-to-integer
 * values follow the same CPU conversion instructions. */
#include "ops/op.h"

static bool claim_cast(claim_ctx *c, const op_def *def) {
  int64_t to = ir_attr_int(c->node, "to", ONNX_UNDEFINED);
  if (to <= ONNX_UNDEFINED || to > INT32_MAX || op_mlx_dtype((int32_t)to) < 0)
    return claim_decline(c, "target dtype %s is not an MLX dtype (float8/int4 come later)",
                         ir_dtype_name((int32_t)to));
  return true;
}

/* Converts input 0 to the ONNX dtype `to`. */
static int cast_input(op_ctx *c, int32_t to) {
  mlxb_array *x = op_input(c, 0);
  int t = op_mlx_dtype(to);
  if (t < 0) return op_fail(c, "target dtype %s is not an MLX dtype", ir_dtype_name(to));
  if (mlxb_type(x) == (mlxb_dtype)t) return op_set_output(c, 0, mlxb_ref(op_scope(c), x));
  return op_set_output(c, 0, mlxb_astype(op_scope(c), x, (mlxb_dtype)t));
}

static int lower_cast(op_ctx *c, const op_def *def) {
  return cast_input(c, (int32_t)ir_attr_int(op_node(c), "to", ONNX_UNDEFINED));
}

static int lower_cast_like(op_ctx *c, const op_def *def) { return cast_input(c, op_input_dtype(c, 1)); }

static bool is_int(int32_t t) {
  return t == ONNX_INT32 || t == ONNX_INT64 || t == ONNX_INT16 || t == ONNX_INT8 || t == ONNX_UINT8 ||
         t == ONNX_UINT16 || t == ONNX_UINT32 || t == ONNX_UINT64;
}

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
           .doc = "every pair of MLX dtypes (bool, ints, float16/bfloat16/float/double); float-to-int truncates; "
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
