/* Reductions (ReduceSum ... ReduceLogSumExp), ArgMax/ArgMin, CumSum/CumProd and TopK lowered onto MLX.
 * Integer reductions follow ORT's CPU EP: they accumulate in float64 and saturate when casting back
 * (ReduceSum of int32 gives INT32_MAX on overflow, not a wrapped value); float16/bfloat16 compute in
 * float32 and round once at the end, as ORT's inserted casts do. */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ops/op_util.h"


typedef enum reduce_kind {
  RK_SUM, RK_MEAN, RK_MAX, RK_MIN, RK_PROD, RK_L1, RK_L2, RK_LOGSUM, RK_LOGSUMEXP, RK_SUMSQUARE
} reduce_kind;

enum { ARG_MAX, ARG_MIN };

/* The reduction a node asks for, resolved against the input's concrete shape. */
typedef struct reduce_plan {
  int rank;
  int64_t dims[OP_UTIL_MAX_RANK];
  bool reduced[OP_UTIL_MAX_RANK];     /* axis is reduced */
  int axes[OP_UTIL_MAX_RANK];         /* reduced axes, ascending */
  int naxes;
  bool keepdims;
  bool noop;                         /* empty axes with noop_with_empty_axes: elementwise only */
  int64_t count;                     /* input elements folded into each output element */
  int64_t out_dims[OP_UTIL_MAX_RANK];
  int out_rank;
  int64_t out_size;
} reduce_plan;

/* ---- small helpers ------------------------------------------------------------------------- */

/* x reversed along one axis (a gather: no reliance on negative-stride slicing conventions). */
static mlxb_array *reverse_axis(mlxb_scope *s, mlxb_array *x, int axis) {
  int64_t n = mlxb_dim(x, axis);
  mlxb_array *idx = mlxb_arange(s, (double)(n - 1), -1.0, -1.0, MLXB_I32);
  return mlxb_take(s, x, idx, axis);
}

/* Saturating float64 -> int32/int64 conversion as ORT performs it: NaN and -inf give the lowest
 * value, +inf and overflow the highest, everything else truncates toward zero. */
static mlxb_array *cast_saturate(mlxb_scope *s, mlxb_array *x, mlxb_dtype t) {
  double lo, hi;
  if (t == MLXB_I32) {
    lo = -2147483648.0;
    hi = 2147483647.0;
  } else {
    lo = -9223372036854775808.0;
    hi = 9223372036854774784.0; /* largest double below 2^63 */
  }
  mlxb_array *lo_a = mlxb_scalar_f64(s, lo, MLXB_F64);
  mlxb_array *nan = mlxb_unary(s, MLXB_ISNAN, x);
  mlxb_array *clean = mlxb_where(s, nan, lo_a, x);
  mlxb_array *y = mlxb_astype(s, mlxb_clip(s, clean, lo_a, mlxb_scalar_f64(s, hi, MLXB_F64)), t);
  if (t != MLXB_I64) return y;
  mlxb_array *over = mlxb_binary(s, MLXB_GREATER_EQUAL, clean, mlxb_scalar_f64(s, 9223372036854775808.0, MLXB_F64));
  return mlxb_where(s, over, mlxb_scalar_i64(s, INT64_MAX, MLXB_I64), y);
}

/* ---- reduce plan ------------------------------------------------------------------------- */

/* Axes come from an input from ReduceSum-13 / other Reduce*-18 on, from an attribute before. */
static bool reduce_axes_from_input(const op_def *def) { return def->since_min >= 13; }

/* The node's axes (count 0 when none are given); noop when an empty list must leave x as it is. */
static int reduce_read_axes(op_ctx *c, const op_def *def, int64_t *axes, int *count, bool *noop) {
  int since = reduce_axes_from_input(def) ? 0 : INT_MAX;
  *count = op_util_attr_or_input_ints(c, "axes", 1, since, axes, OP_UTIL_MAX_RANK);
  *noop = since == 0 && *count == 0 && ir_attr_int(op_node(c), "noop_with_empty_axes", 0) != 0;
  return *count < 0 ? -1 : 0;
}

static int reduce_plan_build(op_ctx *c, const op_def *def, const mlxb_array *x, reduce_plan *p) {
  int64_t axes[OP_UTIL_MAX_RANK];
  int count;
  memset(p, 0, sizeof *p);
  p->rank = op_util_dims(c, x, p->dims);
  if (p->rank < 0) return -1;
  p->keepdims = ir_attr_int(op_node(c), "keepdims", 1) == 1; /* ORT: only 1 keeps (2 or -1 reduce them away) */
  if (reduce_read_axes(c, def, axes, &count, &p->noop)) return -1;
  if (p->noop) {
    p->count = 1;
    p->out_rank = p->rank;
    memcpy(p->out_dims, p->dims, sizeof p->dims);
    p->out_size = (int64_t)mlxb_size(x);
    return 0;
  }
  for (int i = 0; i < count; i++) {
    int a = op_util_resolve_axis(c, axes[i], p->rank);
    if (a < 0) return -1;
    p->reduced[a] = true;
  }
  p->count = 1;
  p->out_size = 1;
  for (int a = 0; a < p->rank; a++) {
    if (count == 0) p->reduced[a] = true; /* empty axes: every axis */
    if (p->reduced[a]) {
      p->axes[p->naxes++] = a;
      p->count *= p->dims[a];
      if (p->keepdims) p->out_dims[p->out_rank++] = 1;
    } else {
      p->out_dims[p->out_rank++] = p->dims[a];
      p->out_size *= p->dims[a];
    }
  }
  return 0;
}

/* ---- reduce lowering --------------------------------------------------------------------- */

static mlxb_array *reduce_core(mlxb_scope *s, mlxb_reduce_op op, mlxb_array *x, const reduce_plan *p) {
  if (p->noop) return x;
  /* a rank-0 input has nothing to reduce; naxes 0 then means "all axes" to the bridge */
  return mlxb_reduce(s, op, x, p->naxes ? p->axes : NULL, p->naxes, p->keepdims);
}

/* The float computation of every kind, on x already in its compute dtype. */
static mlxb_array *reduce_float(mlxb_scope *s, reduce_kind k, mlxb_array *x, const reduce_plan *p) {
  mlxb_dtype t = mlxb_type(x);
  switch (k) {
    case RK_SUM: return reduce_core(s, MLXB_RSUM, x, p);
    case RK_MAX: return reduce_core(s, MLXB_RMAX, x, p);
    case RK_MIN: return reduce_core(s, MLXB_RMIN, x, p);
    case RK_PROD: return reduce_core(s, MLXB_RPROD, x, p);
    case RK_LOGSUMEXP: return reduce_core(s, MLXB_RLOGSUMEXP, x, p);
    case RK_MEAN: {
      mlxb_array *sum = reduce_core(s, MLXB_RSUM, x, p);
      if (p->noop) return sum;
      return mlxb_binary(s, MLXB_DIV, sum, mlxb_scalar_f64(s, (double)p->count, t));
    }
    case RK_L1: return reduce_core(s, MLXB_RSUM, mlxb_unary(s, MLXB_ABS, x), p);
    case RK_L2: return mlxb_unary(s, MLXB_SQRT, reduce_core(s, MLXB_RSUM, mlxb_binary(s, MLXB_MUL, x, x), p));
    case RK_SUMSQUARE: return reduce_core(s, MLXB_RSUM, mlxb_binary(s, MLXB_MUL, x, x), p);
    case RK_LOGSUM: return mlxb_unary(s, MLXB_LOG, reduce_core(s, MLXB_RSUM, x, p));
  }
  mlxb_set_error(s, "unknown reduction");
  return NULL;
}

/* ORT's integer ReduceLogSumExp: max m in T, each exp(x - m) truncated to T, then log(sum) + m
 * truncated to T. */
static mlxb_array *reduce_int_logsumexp(mlxb_scope *s, mlxb_array *x, const reduce_plan *p) {
  mlxb_dtype t = mlxb_type(x);
  const int *axes = p->naxes ? p->axes : NULL;
  mlxb_array *m = mlxb_reduce(s, MLXB_RMAX, x, axes, p->naxes, true);
  mlxb_array *e = mlxb_unary(s, MLXB_EXP, mlxb_astype(s, mlxb_binary(s, MLXB_SUB, x, m), MLXB_F64));
  mlxb_array *terms = mlxb_astype(s, cast_saturate(s, e, t), MLXB_F64);
  mlxb_array *sum = mlxb_reduce(s, MLXB_RSUM, terms, axes, p->naxes, p->keepdims);
  if (!p->keepdims) m = mlxb_reshape(s, m, p->out_dims, p->out_rank);
  mlxb_array *l = mlxb_binary(s, MLXB_ADD, mlxb_unary(s, MLXB_LOG, sum), mlxb_astype(s, m, MLXB_F64));
  return cast_saturate(s, l, t);
}

/* Sum or mean on MLX's CUDA backend by one kernel of float64 arithmetic (the GPU stream only):
 * the reduced axes moved last, every output one row. */
static mlxb_array *reduce_int_rows(mlxb_scope *s, reduce_kind k, mlxb_array *x, const reduce_plan *p) {
  int perm[OP_UTIL_MAX_RANK], n = 0;
  bool moved = false;
  for (int a = 0; a < p->rank; a++)
    if (!p->reduced[a]) perm[n++] = a;
  for (int i = 0; i < p->naxes; i++) perm[n++] = p->axes[i];
  for (int a = 0; a < p->rank; a++) moved |= perm[a] != a;
  mlxb_array *xt = moved ? mlxb_transpose(s, x, perm, p->rank) : x;
  mlxb_array *rows = op_util_reshape2(s, xt, p->out_size, p->count);
  return mlxb_reshape(s, mlxb_int_reduce_rows(s, rows, k == RK_MEAN), p->out_dims, p->out_rank);
}

static mlxb_array *reduce_int(mlxb_scope *s, reduce_kind k, mlxb_array *x, const reduce_plan *p) {
  mlxb_dtype t = mlxb_type(x);
  if (k == RK_MAX || k == RK_MIN) return reduce_float(s, k, x, p); /* exact in T */
  if (p->noop && (k == RK_SUM || k == RK_MEAN || k == RK_PROD || k == RK_LOGSUMEXP)) return x;
  if (t != MLXB_I32 && t != MLXB_I64) {
    mlxb_set_error(s, "integer reduction supports int32 and int64 only");
    return NULL;
  }
  if ((k == RK_SUM || k == RK_MEAN) && p->count > 0 && p->out_size > 0 && mlxb_int_reduce_available(s, t))
    return reduce_int_rows(s, k, x, p);
  bool old = mlxb_scope_force_cpu(s, true); /* float64 work */
  mlxb_array *y;
  if (k == RK_LOGSUMEXP)
    y = reduce_int_logsumexp(s, x, p);
  else
    y = cast_saturate(s, reduce_float(s, k, mlxb_astype(s, x, MLXB_F64), p), t);
  mlxb_scope_force_cpu(s, old);
  return y;
}

/* The value of a reduction over zero elements, as ORT gives it. */
static mlxb_array *reduce_empty_value(mlxb_scope *s, reduce_kind k, mlxb_dtype t) {
  bool is_float = op_util_is_float(t);
  switch (k) {
    case RK_PROD: return mlxb_scalar_f64(s, 1.0, t);
    case RK_MAX:
    case RK_LOGSUM:
    case RK_LOGSUMEXP:
      if (is_float) return mlxb_scalar_f64(s, -INFINITY, t);
      if (t == MLXB_BOOL) return mlxb_scalar_i64(s, 0, t);
      switch (t) {
        case MLXB_I8: return mlxb_scalar_i64(s, INT8_MIN, t);
        case MLXB_I16: return mlxb_scalar_i64(s, INT16_MIN, t);
        case MLXB_I32: return mlxb_scalar_i64(s, INT32_MIN, t);
        case MLXB_I64: return mlxb_scalar_i64(s, INT64_MIN, t);
        default: return mlxb_scalar_i64(s, 0, t); /* unsigned */
      }
    case RK_MIN:
      if (is_float) return mlxb_scalar_f64(s, INFINITY, t);
      switch (t) {
        case MLXB_BOOL: return mlxb_scalar_i64(s, 1, t);
        case MLXB_I8: return mlxb_scalar_i64(s, INT8_MAX, t);
        case MLXB_I16: return mlxb_scalar_i64(s, INT16_MAX, t);
        case MLXB_I32: return mlxb_scalar_i64(s, INT32_MAX, t);
        case MLXB_I64: return mlxb_scalar_i64(s, INT64_MAX, t);
        case MLXB_U8: return mlxb_scalar_i64(s, UINT8_MAX, t);
        case MLXB_U16: return mlxb_scalar_i64(s, UINT16_MAX, t);
        case MLXB_U32: return mlxb_scalar_i64(s, UINT32_MAX, t);
        default: return mlxb_astype(s, mlxb_scalar_i64(s, -1, MLXB_I64), t); /* UINT64_MAX */
      }
    default: return mlxb_scalar_f64(s, 0.0, t); /* sums, means and norms of nothing are 0 */
  }
}

static mlxb_array *reduce_typed(mlxb_scope *s, reduce_kind k, mlxb_array *x, const reduce_plan *p) {
  mlxb_dtype t = mlxb_type(x);
  if (!p->noop && p->out_size == 0) return mlxb_zeros(s, p->out_dims, p->out_rank, t);
  if (!p->noop && p->count == 0)
    return mlxb_full(s, p->out_dims, p->out_rank, reduce_empty_value(s, k, t), t);
  if (!op_util_is_float(t)) return reduce_int(s, k, x, p);
  if (k == RK_MAX || k == RK_MIN) return reduce_float(s, k, x, p); /* exact in any float type */
  return op_util_cast(s, reduce_float(s, k, op_util_cast(s, x, op_util_compute_type(t)), p), t);
}

static int lower_reduce(op_ctx *c, const op_def *def) {
  mlxb_array *x = op_input(c, 0);
  reduce_plan p;
  if (reduce_plan_build(c, def, x, &p)) return -1;
  return op_set_output(c, 0, reduce_typed(op_scope(c), (reduce_kind)def->arg, x, &p));
}

/* MLX's float64 exp is only float32-accurate, which would show in a float64 ReduceLogSumExp. */
static bool claim_logsumexp(claim_ctx *c, const op_def *def) {
  if (claim_input_dtype(c, 0) == ONNX_DOUBLE)
    return claim_decline(c, "float64: MLX's float64 exp is float32-accurate");
  return true;
}

/* ---- ArgMax / ArgMin --------------------------------------------------------------------- */

static int lower_arg(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  mlxb_array *x = op_input(c, 0);
  int rank = mlxb_ndim(x);
  int axis = op_util_resolve_axis(c, ir_attr_int(n, "axis", 0), rank);
  if (axis < 0) return -1;
  bool keepdims = ir_attr_int(n, "keepdims", 1) == 1; /* as ORT reads it */
  bool last = ir_attr_int(n, "select_last_index", 0) != 0;
  int64_t len = mlxb_dim(x, axis);
  if (mlxb_size(x) == 0) {
    if (len == 0) return op_fail(c, "cannot take the %s over an empty axis", def->op_type);
    int64_t dims[OP_UTIL_MAX_RANK], out[OP_UTIL_MAX_RANK];
    int r = 0;
    if (op_util_dims(c, x, dims) < 0) return -1;
    for (int a = 0; a < rank; a++)
      if (a != axis || keepdims) out[r++] = a == axis ? 1 : dims[a];
    return op_set_output(c, 0, mlxb_zeros(s, out, r, MLXB_I64));
  }
  mlxb_array *in = last ? reverse_axis(s, x, axis) : x;
  mlxb_array *idx = def->arg == ARG_MAX ? mlxb_argmax(s, in, axis, keepdims) : mlxb_argmin(s, in, axis, keepdims);
  idx = mlxb_astype(s, idx, MLXB_I64);
  if (last) idx = mlxb_binary(s, MLXB_SUB, mlxb_scalar_i64(s, len - 1, MLXB_I64), idx);
  return op_set_output(c, 0, idx);
}

/* ---- CumSum / CumProd -------------------------------------------------------------------- */

/* Sums (arg MLXB_RSUM) or products (MLXB_RPROD) along the axis input, inclusive or exclusive
 * (a leading 0 or 1), forward or reversed; float16/bfloat16 accumulate in float32 and round once,
 * as ORT's result does. Integers wrap. */
static int lower_cumulative(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  mlxb_array *x = op_input(c, 0);
  int64_t raw;
  if (op_input_ints(c, 1, &raw, 1) != 1) return op_fail(c, "axis must be a single integer");
  int axis = op_util_resolve_axis(c, raw, mlxb_ndim(x));
  if (axis < 0) return -1;
  bool exclusive = ir_attr_int(n, "exclusive", 0) != 0, reverse = ir_attr_int(n, "reverse", 0) != 0;
  mlxb_dtype t = mlxb_type(x);
  mlxb_array *y = mlxb_cumulative(s, (mlxb_reduce_op)def->arg, op_util_cast(s, x, op_util_compute_type(t)), axis,
                                  reverse, !exclusive);
  return op_set_output(c, 0, op_util_cast(s, y, t));
}

/* ---- TopK -------------------------------------------------------------------------------- */

/* sorted=0 (ORT: anything but 1) leaves the order to the implementation (ORT's heap order), which
 * cannot be matched. */
static bool claim_topk(claim_ctx *c, const op_def *def) {
  if (ir_attr_int(c->node, "sorted", 1) == 1) return true;
  int64_t k;
  if (claim_const_ints(c, 1, &k, 1) == 1 && k <= 1) return true;
  return claim_decline(c, "sorted=0 with K > 1: ORT's unsorted order is implementation-defined");
}

static int topk_read_k(op_ctx *c, const op_def *def, int64_t *k) {
  if (def->since_min < 10) {
    const ir_attr *a = ir_node_attr(op_node(c), "k");
    if (!a || a->type != IR_ATTR_INT) return op_fail(c, "missing attribute k");
    *k = a->i;
    return 0;
  }
  if (op_input_ints(c, 1, k, 1) != 1) return op_fail(c, "K must be a single integer");
  return 0;
}

/* Stable ordering with ORT's tie rule (equal values: lower index first) in both directions. Largest
 * first: a stable ascending argsort of the reversed axis, read from its end, puts equal values in
 * ascending original index. */
static mlxb_array *topk_indices(mlxb_scope *s, mlxb_array *x, int axis, int64_t k, bool largest) {
  int64_t n = mlxb_dim(x, axis);
  if (!largest) {
    mlxb_array *order = mlxb_argsort(s, x, axis);
    return mlxb_astype(s, mlxb_take(s, order, mlxb_arange(s, 0.0, (double)k, 1.0, MLXB_I32), axis), MLXB_I64);
  }
  mlxb_array *order = mlxb_argsort(s, reverse_axis(s, x, axis), axis);
  mlxb_array *pick = mlxb_arange(s, (double)(n - 1), (double)(n - 1 - k), -1.0, MLXB_I32);
  mlxb_array *rev_idx = mlxb_astype(s, mlxb_take(s, order, pick, axis), MLXB_I64);
  return mlxb_binary(s, MLXB_SUB, mlxb_scalar_i64(s, n - 1, MLXB_I64), rev_idx);
}

static int lower_topk(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  mlxb_array *x = op_input(c, 0);
  int64_t k, dims[OP_UTIL_MAX_RANK];
  if (topk_read_k(c, def, &k)) return -1;
  int rank = op_util_dims(c, x, dims);
  if (rank < 0) return -1;
  int axis = op_util_resolve_axis(c, ir_attr_int(n, "axis", -1), rank);
  if (axis < 0) return -1;
  int64_t len = mlxb_dim(x, axis);
  if (k < 0 || k > len) return op_fail(c, "K=%lld is outside [0, %lld]", (long long)k, (long long)len);
  bool largest = ir_attr_int(n, "largest", 1) != 0;
  mlxb_array *values, *indices;
  if (k == 0 || mlxb_size(x) == 0) {
    dims[axis] = k;
    values = mlxb_zeros(s, dims, rank, mlxb_type(x));
    indices = mlxb_zeros(s, dims, rank, MLXB_I64);
  } else {
    indices = topk_indices(s, x, axis, k, largest);
    values = mlxb_take_along_axis(s, x, indices, axis);
  }
  if (op_util_set_optional(c, 0, values) || op_util_set_optional(c, 1, indices)) return -1;
  return op_check(c);
}

/* An integer sum over the padded axis adds only zeros: the result is the unpadded one. (Float
 * sums are declined: a longer axis may change the order of rounding.) */
static bool pad_reduce_sum(const ir_graph *g, const ir_node *n, const pad_fact *in, pad_fact *out,
                     pad_bound *bound) {
  const ir_value *x = &g->values[n->inputs[0]];
  int32_t t = x->dtype;
  if (in[0].kind != PAD_ROWS || x->rank < 0 || !(t == ONNX_INT32 || t == ONNX_INT64)) return false;
  for (int k = 1; k < n->n_inputs; k++)
    if (in[k].kind != PAD_NONE) return false;
  claim_ctx c = {.graph = g, .node = n};
  int64_t axes[OP_UTIL_MAX_RANK];
  int count = op_util_claim_attr_or_input_ints(&c, "axes", 1, 13, axes, OP_UTIL_MAX_RANK);
  if (count < 0 || (count == 0 && ir_attr_int(n, "noop_with_empty_axes", 0))) return false;
  bool reduced = count == 0;
  for (int k = 0; k < count; k++)
    reduced = reduced || axes[k] == in[0].axis || axes[k] + x->rank == in[0].axis;
  return reduced;
}

/* ---- the table --------------------------------------------------------------------------- */

#define DT_SUMLIKE (DT_FLOAT | DT(ONNX_INT32) | DT(ONNX_INT64))
#define DOC_F16 " float16/bfloat16 compute in float32."
#define DOC_INT DOC_F16 " int32/int64 accumulate in float64 and saturate on the cast back (ORT's CPU EP)."
#define DOC_EMPTY " empty reductions give ORT's identity value;"
#define DOC_ATTR "axes attribute (empty = all), keepdims, negative axes;" DOC_EMPTY
#define DOC_INPUT "axes input (constant or runtime), keepdims, noop_with_empty_axes, negative axes;" DOC_EMPTY

/* Two rows per reduction: axes as an attribute (opsets up to attr_max), then as an optional input. */
#define REDUCE_ROWS_FULL(name, kind, attr_max, in_min, in_max, dtypes_, claim_, pad_, extra)                       \
  OP_ROW("", name, 1, attr_max, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = dtypes_, .claim = claim_,            \
         .lower = lower_reduce, .arg = kind, .pad = pad_, .doc = DOC_ATTR extra),                                   \
  OP_ROW("", name, in_min, in_max, .inputs = {1, 2}, .outputs = {1, 1}, .dtypes = dtypes_, .claim = claim_,         \
         .lower = lower_reduce, .arg = kind, .pad = pad_, .doc = DOC_INPUT extra)
#define REDUCE_ROWS_CLAIM(name, kind, attr_max, in_min, in_max, dtypes, claim, extra) \
  REDUCE_ROWS_FULL(name, kind, attr_max, in_min, in_max, dtypes, claim, NULL, extra)
#define REDUCE_ROWS(name, kind, attr_max, in_min, in_max, dtypes, extra) \
  REDUCE_ROWS_CLAIM(name, kind, attr_max, in_min, in_max, dtypes, NULL, extra)

static const op_def defs[] = {
  REDUCE_ROWS_FULL("ReduceSum", RK_SUM, 12, 13, 13, DT_SUMLIKE, NULL, pad_reduce_sum, DOC_INT),
  REDUCE_ROWS("ReduceMean", RK_MEAN, 17, 18, 18, DT_SUMLIKE, DOC_INT " Integer means truncate."),
  REDUCE_ROWS("ReduceProd", RK_PROD, 17, 18, 18, DT_SUMLIKE, DOC_INT),
  REDUCE_ROWS("ReduceL1", RK_L1, 17, 18, 18, DT_SUMLIKE, DOC_INT),
  REDUCE_ROWS("ReduceL2", RK_L2, 17, 18, 18, DT_SUMLIKE, DOC_INT),
  REDUCE_ROWS("ReduceLogSum", RK_LOGSUM, 17, 18, 18, DT_SUMLIKE, DOC_INT),
  REDUCE_ROWS_CLAIM("ReduceLogSumExp", RK_LOGSUMEXP, 17, 18, 18, DT_SUMLIKE, claim_logsumexp,
                    DOC_F16 " int32/int64 follow ORT: exp terms truncate to the integer type, then"
                    " log(sum) + max does. Declined: float64 (MLX's float64 exp is float32-accurate)."),
  REDUCE_ROWS("ReduceSumSquare", RK_SUMSQUARE, 17, 18, 18, DT_SUMLIKE, DOC_INT),
  REDUCE_ROWS("ReduceMax", RK_MAX, 17, 18, 20, DT_FLOAT | DT_INT | DT_BOOL,
              " every float and integer type, bool (opset 20); exact. NaN handling may differ from ORT."),
  REDUCE_ROWS("ReduceMin", RK_MIN, 17, 18, 20, DT_FLOAT | DT_INT | DT_BOOL,
              " every float and integer type, bool (opset 20); exact. NaN handling may differ from ORT."),
  OP_ROW("", "ArgMax", 1, 13, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOAT | DT_INT, .lower = lower_arg,
         .arg = ARG_MAX,
         .doc = "axis, keepdims, select_last_index; int64 output; first index on ties. An empty reduced axis fails "
                "as in ORT. NaN inputs may pick a different index than ORT."),
  OP_ROW("", "ArgMin", 1, 13, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOAT | DT_INT, .lower = lower_arg,
         .arg = ARG_MIN,
         .doc = "axis, keepdims, select_last_index; int64 output; first index on ties. An empty reduced axis fails "
                "as in ORT. NaN inputs may pick a different index than ORT."),
  OP_ROW("", "CumSum", 11, 14, .inputs = {2, 2}, .outputs = {1, 1},
         .dtypes = DT_FLOAT | DT(ONNX_INT32) | DT(ONNX_INT64) | DT(ONNX_UINT32) | DT(ONNX_UINT64),
         .lower = lower_cumulative, .arg = MLXB_RSUM,
         .doc = "axis input (constant or runtime), exclusive, reverse; integers wrap; float16/bfloat16 accumulate in "
                "float32."),
  OP_ROW("", "CumProd", 26, 28, .inputs = {2, 2}, .outputs = {1, 1},
         .dtypes = DT_F32 | DT_F16 | DT_F64 | DT(ONNX_INT32) | DT(ONNX_INT64) | DT(ONNX_UINT32) | DT(ONNX_UINT64),
         .lower = lower_cumulative, .arg = MLXB_RPROD,
         .doc = "float32/float16/float64/int32/int64/uint32/uint64, axis from a constant or runtime input, exclusive "
                "and reverse; float16 multiplies in float32 (ORT's result); integers wrap. Declined: bfloat16 "
                "(untested)"),
  OP_ROW("", "TopK", 1, 1, .inputs = {1, 1}, .outputs = {2, 2}, .dtypes = DT_FLOAT | DT_INT, .lower = lower_topk,
         .doc = "k attribute; largest first, sorted; ties give the lower index first (stable sort)."),
  OP_ROW("", "TopK", 10, 24, .inputs = {2, 2}, .outputs = {2, 2}, .dtypes = DT_FLOAT | DT_INT, .claim = claim_topk,
         .lower = lower_topk,
         .doc = "K input (constant or runtime), axis, largest, sorted=1; ties give the lower index first as in ORT "
                "(stable sort). Declined: sorted=0 with K > 1 (ORT's unsorted order is implementation-defined). NaN "
                "ordering may differ from ORT."),
};

OPS_FAMILY(reduction, defs);
