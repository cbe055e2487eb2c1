/* Helpers shared by the op families (see op_util.h): small, stateless, and failing the way a
 * lowering does, through op_fail or the scope's sticky error. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op_util.h"

/* ---- dtypes ------------------------------------------------------------------------------- */

bool op_util_is_float(mlxb_dtype t) { return t == MLXB_F16 || t == MLXB_BF16 || t == MLXB_F32 || t == MLXB_F64; }

bool op_util_onnx_is_float(int32_t t) {
  return t == ONNX_FLOAT || t == ONNX_FLOAT16 || t == ONNX_BFLOAT16 || t == ONNX_DOUBLE;
}

mlxb_dtype op_util_compute_type(mlxb_dtype t) { return (t == MLXB_F16 || t == MLXB_BF16) ? MLXB_F32 : t; }

mlxb_array *op_util_cast(mlxb_scope *s, mlxb_array *x, mlxb_dtype t) {
  if (!x || mlxb_type(x) == t) return x;
  return mlxb_astype(s, x, t);
}

mlxb_array *op_util_scalar(mlxb_scope *s, double v, mlxb_dtype t) {
  if (op_util_is_float(t)) return mlxb_scalar_f64(s, v, t);
  return mlxb_scalar_i64(s, (int64_t)v, t);
}

mlxb_array *op_util_scalar_like(mlxb_scope *s, double v, const mlxb_array *x) {
  return x ? mlxb_scalar_f64(s, v, mlxb_type(x)) : NULL;
}

/* ---- arithmetic shorthands ---------------------------------------------------------------- */

mlxb_array *op_util_add(mlxb_scope *s, mlxb_array *a, mlxb_array *b) { return mlxb_binary(s, MLXB_ADD, a, b); }
mlxb_array *op_util_sub(mlxb_scope *s, mlxb_array *a, mlxb_array *b) { return mlxb_binary(s, MLXB_SUB, a, b); }
mlxb_array *op_util_mul(mlxb_scope *s, mlxb_array *a, mlxb_array *b) { return mlxb_binary(s, MLXB_MUL, a, b); }
mlxb_array *op_util_div(mlxb_scope *s, mlxb_array *a, mlxb_array *b) { return mlxb_binary(s, MLXB_DIV, a, b); }

/* MLX's float64 exp runs at float32 precision; its expm1 does not. Float64 exp is therefore
 * expm1(x) + 1 for x >= 0 and (1 / (expm1(-x/2) + 1))^2 below (the square reaches the
 * subnormals): a few ulp everywhere. */
mlxb_array *op_util_exp(mlxb_scope *s, mlxb_array *x) {
  if (!x) return NULL;
  mlxb_dtype t = mlxb_type(x);
  if (t != MLXB_F64) return mlxb_unary(s, MLXB_EXP, x);
  mlxb_array *one = mlxb_scalar_f64(s, 1.0, t);
  mlxb_array *up = mlxb_binary(s, MLXB_ADD, mlxb_unary(s, MLXB_EXPM1, x), one);
  mlxb_array *half_neg = mlxb_binary(s, MLXB_MUL, x, mlxb_scalar_f64(s, -0.5, t));
  mlxb_array *r = mlxb_binary(s, MLXB_DIV, one, mlxb_binary(s, MLXB_ADD, mlxb_unary(s, MLXB_EXPM1, half_neg), one));
  mlxb_array *pos = mlxb_binary(s, MLXB_GREATER_EQUAL, x, mlxb_scalar_f64(s, 0.0, t));
  return mlxb_where(s, pos, up, mlxb_binary(s, MLXB_MUL, r, r));
}

/* ---- axes and shapes ---------------------------------------------------------------------- */

int op_util_axis(int64_t axis, int rank) {
  if (axis < -(int64_t)rank || axis >= rank) return -1;
  return (int)(axis < 0 ? axis + rank : axis);
}

int op_util_resolve_axis(op_ctx *c, int64_t axis, int rank) {
  int a = op_util_axis(axis, rank);
  if (a < 0) return op_fail(c, "axis %lld is out of range for rank %d", (long long)axis, rank);
  return a;
}

/* Saturates at INT64_MAX (sizes read from data can overflow; a saturated size fails every memory
 * check after), and is 0 when any dim is, whatever the others. */
int64_t op_util_numel(const int64_t *dims, int n) {
  for (int i = 0; i < n; i++)
    if (dims[i] == 0) return 0;
  int64_t total = 1;
  for (int i = 0; i < n; i++)
    if (__builtin_mul_overflow(total, dims[i], &total)) return INT64_MAX;
  return total;
}

int64_t op_util_mul_sat(int64_t a, int64_t b) { return op_util_numel((const int64_t[]){a, b}, 2); }

int op_util_input_dims(op_ctx *c, int i, mlxb_array **x, int64_t *dims) {
  *x = op_input(c, i);
  if (!*x) return op_fail(c, "input %d is missing", i);
  int rank = mlxb_ndim(*x);
  if (rank < 0 || rank > OP_UTIL_MAX_RANK)
    return op_fail(c, "input %d has rank %d (at most %d)", i, rank, OP_UTIL_MAX_RANK);
  mlxb_shape(*x, dims);
  return rank;
}

int op_util_dims(op_ctx *c, const mlxb_array *x, int64_t *dims) {
  int rank = mlxb_ndim(x);
  if (rank > OP_UTIL_MAX_RANK) return op_fail(c, "rank %d exceeds %d", rank, OP_UTIL_MAX_RANK);
  mlxb_shape(x, dims);
  return rank;
}

bool op_util_broadcasts_to(const mlxb_array *p, const int64_t *dims, int rank) {
  if (!p) return true;
  int pr = mlxb_ndim(p);
  if (pr > rank) return false;
  for (int i = 1; i <= pr; i++) {
    int64_t d = mlxb_dim(p, pr - i);
    if (d != 1 && d != dims[rank - i]) return false;
  }
  return true;
}

mlxb_array *op_util_iota(mlxb_scope *s, int64_t start, int64_t n, int axis, int rank, mlxb_dtype t) {
  if (rank < 1 || rank > OP_UTIL_MAX_RANK || axis < 0 || axis >= rank) {
    mlxb_set_error(s, "iota of an unsupported rank or axis");
    return NULL;
  }
  int64_t dims[OP_UTIL_MAX_RANK];
  for (int i = 0; i < rank; i++) dims[i] = i == axis ? n : 1;
  return mlxb_reshape(s, mlxb_arange(s, (double)start, (double)(start + n), 1, t), dims, rank);
}

mlxb_array *op_util_reshape2(mlxb_scope *s, mlxb_array *x, int64_t d0, int64_t d1) {
  int64_t dims[2] = {d0, d1};
  return mlxb_reshape(s, x, dims, 2);
}

mlxb_array *op_util_slice_axis(mlxb_scope *s, mlxb_array *x, int axis, int64_t start, int64_t stop, int64_t step) {
  if (!x) return NULL;
  int rank = mlxb_ndim(x);
  if (rank < 1 || rank > OP_UTIL_MAX_RANK || axis < 0 || axis >= rank) {
    mlxb_set_error(s, "slice of an unsupported rank or axis");
    return NULL;
  }
  int64_t lo[OP_UTIL_MAX_RANK], hi[OP_UTIL_MAX_RANK], st[OP_UTIL_MAX_RANK];
  mlxb_shape(x, hi);
  for (int i = 0; i < rank; i++) lo[i] = 0, st[i] = 1;
  lo[axis] = start, hi[axis] = stop, st[axis] = step;
  return mlxb_slice(s, x, lo, hi, st);
}

/* ---- values read on the host -------------------------------------------------------------- */

int op_util_attr_or_input_ints(op_ctx *c, const char *attr, int input, int input_since, int64_t *out, int max) {
  const ir_node *n = op_node(c);
  if (n->since_version < input_since) {
    const int64_t *v;
    size_t cnt = ir_attr_ints(n, attr, &v);
    if (cnt > (size_t)max) return op_fail(c, "attribute %s has %zu values (at most %d)", attr, cnt, max);
    if (cnt) memcpy(out, v, cnt * sizeof *v);
    return (int)cnt;
  }
  if (!op_has_input(c, input)) return 0;
  int cnt = op_input_ints(c, input, out, max);
  if (cnt < 0) return op_fail(c, "cannot read input %d on the host (at most %d values)", input, max);
  return cnt;
}

int op_util_claim_attr_or_input_ints(const claim_ctx *c, const char *attr, int input, int input_since, int64_t *out,
                                     int max) {
  if (c->node->since_version < input_since) {
    const int64_t *v;
    size_t cnt = ir_attr_ints(c->node, attr, &v);
    if (cnt > (size_t)max) return -1;
    if (cnt) memcpy(out, v, cnt * sizeof *v);
    return (int)cnt;
  }
  return claim_input(c, input) ? claim_const_ints(c, input, out, max) : 0;
}

/* op_input_ints/op_input_doubles record their own failures; only a wrong count is left to say. */
int op_util_input_int(op_ctx *c, int i, int64_t *v) {
  int n = op_input_ints(c, i, v, 1);
  if (n < 0) return -1;
  return n == 1 ? 0 : op_fail(c, "input %d must hold one value", i);
}

int op_util_input_double(op_ctx *c, int i, double *v) {
  int n = op_input_doubles(c, i, v, 1);
  if (n < 0) return -1;
  return n == 1 ? 0 : op_fail(c, "input %d must hold one value", i);
}

/* ---- outputs ------------------------------------------------------------------------------ */

int op_util_set_optional(op_ctx *c, int i, mlxb_array *a) {
  if (!op_has_output(c, i)) return 0;
  return op_set_output(c, i, a);
}

int op_util_set_host_data(op_ctx *c, int i, const void *data, const int64_t *dims, int rank, int32_t dtype) {
  int t = op_mlx_dtype(dtype);
  if (t < 0) return op_fail(c, "dtype %s has no MLX equivalent", ir_dtype_name(dtype));
  return op_set_output(c, i, mlxb_from_data(op_scope(c), data, dims, rank, (mlxb_dtype)t));
}

/* ---- quantization parameters -------------------------------------------------------------- */

static mlxb_array *quant_param_per_axis(op_ctx *c, mlxb_array *p, const int64_t *dims, int rank, int axis) {
  if (mlxb_ndim(p) != 1 || mlxb_dim(p, 0) != dims[axis]) {
    op_fail(c, "per-axis parameters must be 1-D of length %lld", (long long)dims[axis]);
    return NULL;
  }
  int64_t shape[OP_UTIL_MAX_RANK];
  for (int i = 0; i < rank; i++) shape[i] = i == axis ? dims[axis] : 1;
  return mlxb_reshape(op_scope(c), p, shape, rank);
}

static mlxb_array *quant_param_blocked(op_ctx *c, mlxb_array *p, const int64_t *dims, int rank, int axis,
                                       int64_t block) {
  if (mlxb_ndim(p) != rank) {
    op_fail(c, "blocked parameters must have the input's rank %d", rank);
    return NULL;
  }
  if (block > INT32_MAX) { /* checked first: dims + block - 1 below must not pass int64 */
    op_fail(c, "block_size %lld is too large", (long long)block);
    return NULL;
  }
  int64_t pd[OP_UTIL_MAX_RANK];
  mlxb_shape(p, pd);
  for (int i = 0; i < rank; i++) {
    int64_t want = i == axis ? (dims[i] + block - 1) / block : dims[i];
    if (pd[i] != want) {
      op_fail(c, "blocked parameter dim %d is %lld, expected %lld", i, (long long)pd[i], (long long)want);
      return NULL;
    }
  }
  /* the last block may be partial: cut the repeats back to the input's length */
  mlxb_scope *s = op_scope(c);
  return op_util_slice_axis(s, mlxb_repeat(s, p, (int)block, axis), axis, 0, dims[axis], 1);
}

mlxb_array *op_util_quant_param(op_ctx *c, mlxb_array *p, const int64_t *dims, int rank, int axis, int64_t block) {
  if (!p) return NULL;
  if (mlxb_size(p) == 1 && mlxb_ndim(p) <= 1 && block == 0) return mlxb_reshape(op_scope(c), p, NULL, 0);
  if (axis < 0) {
    op_fail(c, "axis out of range for rank %d", rank);
    return NULL;
  }
  if (block == 0) return quant_param_per_axis(c, p, dims, rank, axis);
  return quant_param_blocked(c, p, dims, rank, axis, block);
}

/* ---- spatial attributes (convolutions and poolings) --------------------------------------- */

op_util_pad op_util_auto_pad(const ir_node *n) {
  const char *s = ir_attr_string(n, "auto_pad", "NOTSET");
  if (!strcmp(s, "NOTSET") || !*s) return OP_UTIL_PAD_NOTSET;
  if (!strcmp(s, "VALID")) return OP_UTIL_PAD_VALID;
  if (!strcmp(s, "SAME_UPPER")) return OP_UTIL_PAD_SAME_UPPER;
  if (!strcmp(s, "SAME_LOWER")) return OP_UTIL_PAD_SAME_LOWER;
  return OP_UTIL_PAD_BAD;
}

bool op_util_attr_ints(const ir_node *node, const char *name, int64_t *out, int n, int64_t dflt) {
  const int64_t *v;
  size_t cnt = ir_attr_ints(node, name, &v);
  if (cnt == 0) {
    for (int i = 0; i < n; i++) out[i] = dflt;
    return true;
  }
  if (cnt != (size_t)n) return false;
  memcpy(out, v, (size_t)n * sizeof *out);
  return true;
}

int op_util_spatial_attrs(op_ctx *c, int nsp, int64_t *strides, int64_t *dilations, int64_t *pad_lo, int64_t *pad_hi) {
  const ir_node *n = op_node(c);
  int64_t pads[2 * OP_UTIL_MAX_RANK];
  if (nsp < 0 || nsp > OP_UTIL_MAX_RANK) return op_fail(c, "spatial rank %d is out of range", nsp);
  if (!op_util_attr_ints(n, "strides", strides, nsp, 1) || !op_util_attr_ints(n, "dilations", dilations, nsp, 1) ||
      !op_util_attr_ints(n, "pads", pads, 2 * nsp, 0))
    return op_fail(c, "strides, dilations or pads do not match the spatial rank %d", nsp);
  for (int i = 0; i < nsp; i++) pad_lo[i] = pads[i], pad_hi[i] = pads[i + nsp];
  return 0;
}

/* ---- claims ------------------------------------------------------------------------------- */

bool op_util_claim_input_rank(claim_ctx *c, int i) {
  const ir_value *x = claim_input(c, i);
  if (x && x->rank > OP_UTIL_MAX_RANK - 1) return claim_decline(c, "rank %d is too large", x->rank);
  return true;
}

bool op_util_claim_same_dtypes(claim_ctx *c, const int *inputs, int n) {
  int32_t t = claim_input_dtype(c, 0);
  for (int i = 0; i < n; i++) {
    int32_t u = claim_input_dtype(c, inputs[i]);
    if (u != ONNX_UNDEFINED && u != t)
      return claim_decline(c, "input %d has dtype %s, input 0 %s", inputs[i], ir_dtype_name(u), ir_dtype_name(t));
  }
  return true;
}

bool op_util_claim_auto_pad(claim_ctx *c) {
  if (op_util_auto_pad(c->node) != OP_UTIL_PAD_BAD) return true;
  return claim_decline(c, "auto_pad '%s' is unknown", ir_attr_string(c->node, "auto_pad", ""));
}

/* ---- shape arithmetic on the host ------------------------------------------------------------ */

bool op_util_input_host_ints(const op_ctx *c, int i, int64_t count) {
  int32_t t = op_input_dtype(c, i);
  return (t == ONNX_INT64 || t == ONNX_INT32) && count <= OP_UTIL_HOST_INTS_MAX && op_input_known(c, i);
}

int op_util_read_host_ints(op_ctx *c, int i, int64_t *vals, int64_t count) {
  int n = op_input_ints(c, i, vals, OP_UTIL_HOST_INTS_MAX);
  if (n < 0) return -1;
  if (n != count) return op_fail(c, "input %d: %d known values for %lld elements", i, n, (long long)count);
  return n;
}

/* ---- untrusted data ----------------------------------------------------------------------- */

static void int_dtype_range(mlxb_dtype t, int64_t *lo, int64_t *hi) {
  switch (t) {
    case MLXB_I8: *lo = INT8_MIN, *hi = INT8_MAX; return;
    case MLXB_I16: *lo = INT16_MIN, *hi = INT16_MAX; return;
    case MLXB_I32: *lo = INT32_MIN, *hi = INT32_MAX; return;
    case MLXB_U8: *lo = 0, *hi = UINT8_MAX; return;
    case MLXB_U16: *lo = 0, *hi = UINT16_MAX; return;
    case MLXB_U32: *lo = 0, *hi = UINT32_MAX; return;
    case MLXB_U64: *lo = 0, *hi = INT64_MAX; return;
    default: *lo = INT64_MIN, *hi = INT64_MAX; return;
  }
}

static int require_range(op_ctx *c, const char *key, mlxb_array *x, int64_t lo, int64_t hi, const char *what) {
  mlxb_scope *s = op_scope(c);
  if (!x) return op_fail(c, "%s: no array", what);
  if (mlxb_size(x) == 0) return 0;
  int64_t tlo, thi;
  int_dtype_range(mlxb_type(x), &tlo, &thi);
  bool check_lo = lo > tlo, check_hi = hi <= thi;
  if (!check_lo && !check_hi) return op_check(c); /* the dtype holds no value outside the range */
  mlxb_array *summary = mlxb_range_violation(s, x, lo, hi, check_lo, check_hi);
  return op_require_summary(c, key, summary, "%s {} out of range [%lld, %lld)", what, (long long)lo, (long long)hi);
}

int op_util_require_range(op_ctx *c, mlxb_array *x, int64_t lo, int64_t hi, const char *what) {
  return require_range(c, NULL, x, lo, hi, what);
}

int op_util_require_range_once(op_ctx *c, const char *data, mlxb_array *x, int64_t lo, int64_t hi, const char *what) {
  char key[256];
  snprintf(key, sizeof key, "range|%s|%s|%lld|%lld", data, what, (long long)lo, (long long)hi);
  if (op_require_seen(c, key)) return 0; /* built nothing: an earlier node checks the same */
  return require_range(c, key, x, lo, hi, what);
}

/* ---- host tables ------------------------------------------------------------------------- */

mlxb_array *op_util_index_array(mlxb_scope *s, const int64_t *v, int64_t n) {
  int32_t *tmp = malloc(sizeof *tmp * (size_t)(n ? n : 1));
  if (!tmp) return NULL;
  for (int64_t i = 0; i < n; i++) tmp[i] = (int32_t)v[i];
  mlxb_array *a = mlxb_from_data(s, tmp, &n, 1, MLXB_I32);
  free(tmp);
  return a;
}

mlxb_array *op_util_float_array(mlxb_scope *s, const float *v, const int64_t *dims, int rank, mlxb_dtype t) {
  mlxb_array *a = mlxb_from_data(s, v, dims, rank, MLXB_F32);
  return t == MLXB_F32 ? a : mlxb_astype(s, a, t);
}

/* ---- packed integers -------------------------------------------------------------------- */

mlxb_array *op_util_unpack_bits(mlxb_scope *s, mlxb_array *packed, int bits) {
  if (!packed || bits == 8) return packed;
  int per_byte = 8 / bits, rank = mlxb_ndim(packed), last = -1;
  uint8_t shifts[8];
  for (int i = 0; i < per_byte; i++) shifts[i] = (uint8_t)(i * bits);
  int64_t n = per_byte, dims[OP_UTIL_MAX_RANK];
  if (rank < 1 || rank > OP_UTIL_MAX_RANK) return NULL;
  mlxb_array *sh = mlxb_from_data(s, shifts, &n, 1, MLXB_U8);
  mlxb_array *mask = mlxb_scalar_i64(s, (1 << bits) - 1, MLXB_U8);
  mlxb_array *e = mlxb_expand_dims(s, packed, &last, 1);
  mlxb_array *v = mlxb_binary(s, MLXB_BITWISE_AND, mlxb_binary(s, MLXB_RIGHT_SHIFT, e, sh), mask);
  if (!v) return NULL;
  mlxb_shape(packed, dims);
  dims[rank - 1] *= per_byte;
  return mlxb_reshape(s, v, dims, rank);
}

/* ---- computing ahead ------------------------------------------------------------------------ */

const ir_node *op_util_sole_reader(const op_ctx *c, const ir_node *n) {
  const ir_graph *g = op_graph(c);
  int v = n->n_outputs > 0 ? n->outputs[0] : -1;
  if (!op_can_compute_for(c) || v < 0 || g->values[v].n_consumers != 1 || g->values[v].is_graph_output) return NULL;
  for (const ir_node *r = n + 1; r < g->nodes + g->n_nodes; r++)
    for (int i = 0; i < r->n_inputs; i++)
      if (r->inputs[i] == v) return r;
  return NULL;
}

bool op_util_is_relu(const ir_node *n) {
  return !strcmp(n->op_type, "Relu") && !*n->domain && n->n_inputs == 1 && n->n_outputs == 1;
}

mlxb_array *op_util_quantize_blocks(mlxb_scope *s, mlxb_array *x, int64_t block) {
  if (x && mlxb_quantize_blocks_available(s, mlxb_type(x))) return mlxb_quantize_blocks(s, x, block);
  int rank = x ? mlxb_ndim(x) : 0;
  int64_t dims[OP_UTIL_MAX_RANK + 1];
  if (rank < 1 || rank >= OP_UTIL_MAX_RANK || block < 1) return NULL;
  mlxb_shape(x, dims);
  int64_t k = dims[rank - 1];
  dims[rank - 1] = k / block;
  dims[rank] = block;
  mlxb_array *xb = mlxb_reshape(s, x, dims, rank + 1);
  int last = rank;
  mlxb_array *amax = mlxb_reduce(s, MLXB_RMAX, mlxb_unary(s, MLXB_ABS, xb), &last, 1, true);
  mlxb_array *c127 = mlxb_scalar_f64(s, 127.0, MLXB_F32), *zero = mlxb_scalar_f64(s, 0.0, MLXB_F32);
  mlxb_array *scale = mlxb_binary(s, MLXB_DIV, amax, c127);
  mlxb_array *inv =
      mlxb_where(s, mlxb_binary(s, MLXB_NOT_EQUAL, amax, zero), mlxb_binary(s, MLXB_DIV, c127, amax), zero);
  mlxb_array *q = mlxb_unary(s, MLXB_ROUND, mlxb_binary(s, MLXB_MUL, xb, inv));
  dims[rank - 1] = k;
  return mlxb_reshape(s, mlxb_binary(s, MLXB_MUL, q, scale), dims, rank);
}
