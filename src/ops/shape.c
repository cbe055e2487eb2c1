/* Shape-manipulation ops (Reshape, Transpose, Concat, Slice, Split, Pad, ...), Identity and
 * inference Dropout (the identity with ORT's mask), and the ops that
 * create tensors from shapes or attributes (Shape, Constant, Range, ConstantOfShape, EyeLike).
 * Shapes are concrete while a cluster is lowered, so every output shape is computed here on the
 * host exactly as the ONNX spec says, and MLX only moves data. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op_util.h"


/* ---- helpers ------------------------------------------------------------------------------ */

/* Output `out` as input 0 reshaped to dims[rank] (MLX checks the element count): host-known values
 * stay known (Unsqueeze, Squeeze, Flatten and Reshape of shape arithmetic put nothing on the
 * device), anything else is a reshape. */
static int shape_set_reshaped(op_ctx *c, int out, mlxb_array *x, const int64_t *dims, int rank) {
  int64_t vals[OP_UTIL_HOST_INTS_MAX], count = op_util_numel(dims, rank);
  if (!op_util_input_host_ints(c, 0, count)) return op_set_output(c, out, mlxb_reshape(op_scope(c), x, dims, rank));
  int n = op_util_read_host_ints(c, 0, vals, count);
  return n < 0 ? -1 : op_set_output_ints(c, out, vals, n, dims, rank, op_input_dtype(c, 0));
}

/* Any input rank known at claim time must fit the fixed-size buffers. */
static bool shape_claim_rank(claim_ctx *c, const op_def *def) {
  for (int i = 0; i < c->node->n_inputs; i++) {
    const ir_value *v = claim_input(c, i);
    if (v && v->rank > OP_UTIL_MAX_RANK) return claim_decline(c, "input %d has rank %d (at most %d)", i, v->rank, OP_UTIL_MAX_RANK);
  }
  return true;
}

/* Host-read inputs (shapes, axes, pads, ...) longer than the fixed buffers are declined; the
 * row's arg raises the limit (Pad reads two values per axis). */
static bool shape_claim_host(claim_ctx *c, const op_def *def) {
  int max = def->arg ? def->arg : OP_UTIL_MAX_RANK;
  for (int i = 1; i < c->node->n_inputs; i++) {
    const ir_value *v = claim_input(c, i);
    if (v && v->rank == 1 && v->dims[0] > max)
      return claim_decline(c, "input %d has %lld values (at most %d)", i, (long long)v->dims[0], max);
  }
  return shape_claim_rank(c, def);
}

/* ---- Reshape ------------------------------------------------------------------------------ */

static int lower_reshape(op_ctx *c, const op_def *def) {
  mlxb_array *x;
  int64_t in_dims[OP_UTIL_MAX_RANK], want[OP_UTIL_MAX_RANK];
  int in_rank = op_util_input_dims(c, 0, &x, in_dims);
  if (in_rank < 0) return -1;
  int rank = op_input_ints(c, 1, want, OP_UTIL_MAX_RANK);
  if (rank < 0) return op_fail(c, "cannot read the shape input (at most %d values)", OP_UTIL_MAX_RANK);
  bool allowzero = ir_attr_int(op_node(c), "allowzero", 0) != 0;
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < rank; i++) {
    if (want[i] == -1) {
      if (infer >= 0) return op_fail(c, "more than one -1 in the shape");
      infer = i;
      continue;
    }
    if (want[i] == 0 && !allowzero) {
      if (i >= in_rank) return op_fail(c, "shape[%d] = 0 copies a dimension the input lacks", i);
      want[i] = in_dims[i];
    }
    if (want[i] < 0) return op_fail(c, "invalid shape value %lld", (long long)want[i]);
    known = op_util_mul_sat(known, want[i]); /* saturates: such a shape fits nothing */
  }
  int64_t total = op_util_numel(in_dims, in_rank);
  if (infer >= 0) {
    if (known == 0) return op_fail(c, "cannot infer -1 when the other dimensions multiply to 0");
    if (total % known) return op_fail(c, "cannot reshape %lld elements with -1", (long long)total);
    want[infer] = total / known;
  } else if (known != total) {
    return op_fail(c, "cannot reshape %lld elements into %lld", (long long)total, (long long)known);
  }
  return shape_set_reshaped(c, 0, x, want, rank);
}

/* ---- Transpose ---------------------------------------------------------------------------- */

static int lower_transpose(op_ctx *c, const op_def *def) {
  mlxb_array *x;
  int64_t dims[OP_UTIL_MAX_RANK];
  int rank = op_util_input_dims(c, 0, &x, dims);
  if (rank < 0) return -1;
  const int64_t *p;
  size_t n = ir_attr_ints(op_node(c), "perm", &p);
  int perm[OP_UTIL_MAX_RANK];
  bool seen[OP_UTIL_MAX_RANK] = {false};
  if (n == 0) {
    for (int i = 0; i < rank; i++) perm[i] = rank - 1 - i;
    return op_set_output(c, 0, mlxb_transpose(op_scope(c), x, perm, rank));
  }
  if (n != (size_t)rank) return op_fail(c, "perm has %zu entries for rank %d", n, rank);
  for (int i = 0; i < rank; i++) {
    if (p[i] < 0 || p[i] >= rank || seen[p[i]]) return op_fail(c, "perm is not a permutation");
    seen[p[i]] = true;
    perm[i] = (int)p[i];
  }
  return op_set_output(c, 0, mlxb_transpose(op_scope(c), x, perm, rank));
}

/* ---- Concat ------------------------------------------------------------------------------- */

/* Concat of host-known integers (shape arithmetic) on the host: false where any input is not (the
 * device path then reports whatever is wrong with the inputs). */
static bool concat_on_host(op_ctx *c, int n, int axis, int rank) {
  int32_t t = op_input_dtype(c, 0);
  int64_t total = 0, dims[OP_UTIL_MAX_RANK];
  if (axis < 0 || rank > OP_UTIL_MAX_RANK) return false;
  for (int i = 0; i < n; i++) {
    mlxb_array *x = op_input(c, i);
    if (!x || op_input_dtype(c, i) != t || mlxb_ndim(x) != rank) return false;
    mlxb_shape(x, dims);
    int64_t count = op_util_numel(dims, rank);
    if (!op_util_input_host_ints(c, i, count)) return false;
    total += count;
  }
  return total <= OP_UTIL_HOST_INTS_MAX;
}

static int concat_host(op_ctx *c, int n, int axis, int rank) {
  int64_t vals[OP_UTIL_HOST_INTS_MAX], out[OP_UTIL_HOST_INTS_MAX], dims[OP_UTIL_MAX_RANK], odims[OP_UTIL_MAX_RANK];
  mlxb_array *x;
  op_util_input_dims(c, 0, &x, odims);
  odims[axis] = 0;
  for (int i = 0; i < n; i++) {
    op_util_input_dims(c, i, &x, dims);
    for (int d = 0; d < rank; d++)
      if (d != axis && dims[d] != odims[d])
        return op_fail(c, "input %d has dimension %d = %lld, input 0 has %lld", i, d, (long long)dims[d],
                       (long long)odims[d]);
    odims[axis] += dims[axis];
  }
  int64_t outer = op_util_numel(odims, axis), inner = op_util_numel(odims + axis + 1, rank - axis - 1), at = 0;
  for (int i = 0; i < n; i++) {
    op_util_input_dims(c, i, &x, dims);
    int64_t count = op_util_numel(dims, rank), block = dims[axis] * inner;
    if (op_util_read_host_ints(c, i, vals, count) < 0) return -1;
    for (int64_t o = 0; o < outer; o++)
      for (int64_t k = 0; k < block; k++) out[o * odims[axis] * inner + at + k] = vals[o * block + k];
    at += block;
  }
  return op_set_output_ints(c, 0, out, (int)op_util_numel(odims, rank), odims, rank, op_input_dtype(c, 0));
}

static int lower_concat(op_ctx *c, const op_def *def) {
  int n = op_num_inputs(c);
  if (n < 1) return op_fail(c, "no inputs");
  int rank0 = op_has_input(c, 0) ? mlxb_ndim(op_input(c, 0)) : -1;
  int axis0 = rank0 > 0 ? op_util_axis(ir_attr_int(op_node(c), "axis", 0), rank0) : -1;
  if (rank0 > 0 && concat_on_host(c, n, axis0, rank0)) return concat_host(c, n, axis0, rank0);
  const mlxb_array **xs = calloc((size_t)n, sizeof *xs);
  if (!xs) return op_fail(c, "out of memory");
  int rank = -1;
  for (int i = 0; i < n; i++) {
    xs[i] = op_input(c, i);
    if (!xs[i]) {
      free(xs);
      return op_fail(c, "input %d is missing", i);
    }
    if (rank < 0) rank = mlxb_ndim(xs[i]);
  }
  int axis = op_util_axis(ir_attr_int(op_node(c), "axis", 0), rank);
  if (axis < 0) {
    free(xs);
    return op_fail(c, "axis out of range for rank %d", rank);
  }
  mlxb_array *y = n == 1 ? (mlxb_array *)xs[0] : mlxb_concat(op_scope(c), xs, n, axis);
  free(xs);
  return op_set_output(c, 0, y);
}

/* ---- Slice -------------------------------------------------------------------------------- */

/* One axis of an ONNX Slice: clamps start/end as the spec says and writes a canonical literal
 * window (start, stop, step: elements start, start+step, ... before stop). */
static void slice_axis_window(int64_t dim, int64_t start, int64_t end, int64_t step, int64_t *w_start,
                              int64_t *w_stop, int64_t *w_step) {
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  int64_t count;
  if (dim == 0) {
    count = 0; /* an empty axis: [0, dim - 1] is empty for a negative step too */
  } else if (step > 0) {
    start = start < 0 ? 0 : start > dim ? dim : start;
    end = end < 0 ? 0 : end > dim ? dim : end;
    count = end > start ? (end - start - 1) / step + 1 : 0;
  } else {
    start = start < 0 ? 0 : start > dim - 1 ? dim - 1 : start;
    end = end < -1 ? -1 : end > dim - 1 ? dim - 1 : end;
    count = start > end ? (step == INT64_MIN ? 1 : (start - end - 1) / -step + 1) : 0;
  }
  /* Canonical forms keep huge steps away from MLX's 32-bit strides. */
  if (count == 0) {
    *w_start = 0, *w_stop = 0, *w_step = 1;
  } else if (count == 1) {
    *w_start = start, *w_stop = start + 1, *w_step = 1;
  } else {
    *w_start = start, *w_stop = end, *w_step = step;
  }
}

static int lower_slice(op_ctx *c, const op_def *def) {
  mlxb_array *x;
  int64_t dims[OP_UTIL_MAX_RANK];
  int rank = op_util_input_dims(c, 0, &x, dims);
  if (rank < 0) return -1;
  const ir_node *node = op_node(c);
  int64_t starts[OP_UTIL_MAX_RANK], ends[OP_UTIL_MAX_RANK], axes[OP_UTIL_MAX_RANK], steps[OP_UTIL_MAX_RANK];
  int ns, ne, na, nt = 0;
  if (node->since_version < 10) {
    ns = op_util_attr_or_input_ints(c, "starts", -1, INT_MAX, starts, OP_UTIL_MAX_RANK);
    ne = op_util_attr_or_input_ints(c, "ends", -1, INT_MAX, ends, OP_UTIL_MAX_RANK);
    na = op_util_attr_or_input_ints(c, "axes", -1, INT_MAX, axes, OP_UTIL_MAX_RANK);
  } else {
    ns = op_input_ints(c, 1, starts, OP_UTIL_MAX_RANK);
    ne = op_input_ints(c, 2, ends, OP_UTIL_MAX_RANK);
    if (ns < 0 || ne < 0) return op_fail(c, "cannot read starts/ends on the host");
    na = op_util_attr_or_input_ints(c, "", 3, 0, axes, OP_UTIL_MAX_RANK);
    nt = op_util_attr_or_input_ints(c, "", 4, 0, steps, OP_UTIL_MAX_RANK);
  }
  if (ns < 0 || ne < 0 || na < 0 || nt < 0) return -1;
  if (ns != ne) return op_fail(c, "starts and ends differ in length (%d, %d)", ns, ne);
  if (na == 0) {
    if (ns > rank) return op_fail(c, "%d starts for rank %d", ns, rank);
    for (int i = 0; i < ns; i++) axes[i] = i;
    na = ns;
  }
  if (nt == 0) {
    for (int i = 0; i < ns; i++) steps[i] = 1;
    nt = ns;
  }
  if (na != ns || nt != ns) return op_fail(c, "starts, ends, axes and steps differ in length");
  int64_t w_start[OP_UTIL_MAX_RANK], w_stop[OP_UTIL_MAX_RANK], w_step[OP_UTIL_MAX_RANK];
  bool seen[OP_UTIL_MAX_RANK] = {false};
  for (int i = 0; i < rank; i++) w_start[i] = 0, w_stop[i] = dims[i], w_step[i] = 1;
  for (int k = 0; k < ns; k++) {
    int a = op_util_axis(axes[k], rank);
    if (a < 0 || seen[a]) return op_fail(c, "axis %lld is out of range or repeated", (long long)axes[k]);
    if (steps[k] == 0) return op_fail(c, "step 0 on axis %d", a);
    seen[a] = true;
    slice_axis_window(dims[a], starts[k], ends[k], steps[k], &w_start[a], &w_stop[a], &w_step[a]);
  }
  return op_set_output(c, 0, mlxb_slice(op_scope(c), x, w_start, w_stop, w_step));
}

/* ---- Squeeze / Unsqueeze / Flatten -------------------------------------------------------- */

static int lower_squeeze(op_ctx *c, const op_def *def) {
  mlxb_array *x;
  int64_t dims[OP_UTIL_MAX_RANK], axes[OP_UTIL_MAX_RANK], out[OP_UTIL_MAX_RANK];
  int rank = op_util_input_dims(c, 0, &x, dims);
  if (rank < 0) return -1;
  int na = op_util_attr_or_input_ints(c, "axes", 1, 13, axes, OP_UTIL_MAX_RANK);
  if (na < 0) return -1;
  bool drop[OP_UTIL_MAX_RANK] = {false};
  for (int k = 0; k < na; k++) {
    int a = op_util_axis(axes[k], rank);
    if (a < 0) return op_fail(c, "axis %lld out of range for rank %d", (long long)axes[k], rank);
    if (dims[a] != 1) return op_fail(c, "cannot squeeze axis %d of size %lld", a, (long long)dims[a]);
    drop[a] = true;
  }
  int n = 0;
  for (int i = 0; i < rank; i++)
    if (na ? !drop[i] : dims[i] != 1) out[n++] = dims[i];
  return shape_set_reshaped(c, 0, x, out, n);
}

static int lower_unsqueeze(op_ctx *c, const op_def *def) {
  mlxb_array *x;
  int64_t dims[OP_UTIL_MAX_RANK], axes[OP_UTIL_MAX_RANK], out[OP_UTIL_MAX_RANK];
  int rank = op_util_input_dims(c, 0, &x, dims);
  if (rank < 0) return -1;
  int na = op_util_attr_or_input_ints(c, "axes", 1, 13, axes, OP_UTIL_MAX_RANK);
  if (na < 0) return -1;
  int out_rank = rank + na;
  if (out_rank > OP_UTIL_MAX_RANK) return op_fail(c, "output rank %d exceeds %d", out_rank, OP_UTIL_MAX_RANK);
  bool add[OP_UTIL_MAX_RANK] = {false};
  for (int k = 0; k < na; k++) {
    int a = op_util_axis(axes[k], out_rank);
    if (a < 0 || add[a]) return op_fail(c, "axis %lld is out of range or repeated", (long long)axes[k]);
    add[a] = true;
  }
  for (int i = 0, j = 0; i < out_rank; i++) out[i] = add[i] ? 1 : dims[j++];
  return shape_set_reshaped(c, 0, x, out, out_rank);
}

/* com.microsoft ExpandDims: one axis of size 1 inserted at the axis input (read on the host), in
 * [-rank - 1, rank] as ORT checks it. */
static int lower_expand_dims(op_ctx *c, const op_def *def) {
  mlxb_array *x;
  int64_t dims[OP_UTIL_MAX_RANK], out[OP_UTIL_MAX_RANK], axis;
  int rank = op_util_input_dims(c, 0, &x, dims);
  if (rank < 0 || op_util_input_int(c, 1, &axis)) return -1;
  if (axis < -(int64_t)rank - 1 || axis > rank)
    return op_fail(c, "axis %lld is outside [%d, %d]", (long long)axis, -rank - 1, rank);
  if (rank + 1 > OP_UTIL_MAX_RANK) return op_fail(c, "output rank %d exceeds %d", rank + 1, OP_UTIL_MAX_RANK);
  if (axis < 0) axis += rank + 1;
  for (int i = 0, j = 0; i <= rank; i++) out[i] = i == axis ? 1 : dims[j++];
  return shape_set_reshaped(c, 0, x, out, rank + 1);
}

static int lower_flatten(op_ctx *c, const op_def *def) {
  mlxb_array *x;
  int64_t dims[OP_UTIL_MAX_RANK];
  int rank = op_util_input_dims(c, 0, &x, dims);
  if (rank < 0) return -1;
  int64_t axis = ir_attr_int(op_node(c), "axis", 1);
  if (axis < -(int64_t)rank || axis > rank) return op_fail(c, "axis %lld out of range for rank %d", (long long)axis, rank);
  if (axis < 0) axis += rank;
  int64_t out[2] = {op_util_numel(dims, (int)axis), op_util_numel(dims + axis, rank - (int)axis)};
  return shape_set_reshaped(c, 0, x, out, 2);
}

/* ---- Expand / Tile ------------------------------------------------------------------------ */

static int lower_expand(op_ctx *c, const op_def *def) {
  mlxb_array *x;
  int64_t dims[OP_UTIL_MAX_RANK], want[OP_UTIL_MAX_RANK], out[OP_UTIL_MAX_RANK];
  int rank = op_util_input_dims(c, 0, &x, dims);
  if (rank < 0) return -1;
  int nw = op_input_ints(c, 1, want, OP_UTIL_MAX_RANK);
  if (nw < 0) return op_fail(c, "cannot read the shape input (at most %d values)", OP_UTIL_MAX_RANK);
  int out_rank = rank > nw ? rank : nw;
  /* Bidirectional broadcast, aligned on the right. */
  for (int i = 0; i < out_rank; i++) {
    int ix = i - (out_rank - rank), iw = i - (out_rank - nw);
    int64_t a = ix >= 0 ? dims[ix] : 1, b = iw >= 0 ? want[iw] : 1;
    if (b < 0) return op_fail(c, "negative dimension %lld in shape", (long long)b);
    if (a == b || b == 1) out[i] = a;
    else if (a == 1) out[i] = b;
    else return op_fail(c, "cannot broadcast dimension %lld to %lld", (long long)a, (long long)b);
  }
  return op_set_output(c, 0, mlxb_broadcast_to(op_scope(c), x, out, out_rank));
}

/* Tile of an empty input: an empty result of the tiled shape. ORT still refuses one whose nonzero
 * output dims multiply past 4 GiB of elements' bytes (its output size check skips zero dims). */
static int tile_empty(op_ctx *c, mlxb_array *x, const int64_t *dims, const int64_t *reps, int rank) {
  int64_t out[OP_UTIL_MAX_RANK];
  uint64_t bytes = mlxb_dtype_size(mlxb_type(x));
  for (int i = 0; i < rank; i++) {
    if (__builtin_mul_overflow(dims[i], reps[i], &out[i])) return op_fail(c, "output dimension %d overflows int64", i);
    if (out[i] && __builtin_mul_overflow(bytes, (uint64_t)out[i], &bytes)) bytes = UINT64_MAX;
  }
  if (bytes > ((uint64_t)1 << 32))
    return op_fail(c, "output would require more than 4294967296 bytes (its nonzero dims), ORT's maximum for Tile");
  return op_set_output(c, 0, mlxb_zeros(op_scope(c), out, rank, mlxb_type(x)));
}

static int lower_tile(op_ctx *c, const op_def *def) {
  mlxb_array *x;
  int64_t dims[OP_UTIL_MAX_RANK], reps[OP_UTIL_MAX_RANK];
  int rank = op_util_input_dims(c, 0, &x, dims);
  if (rank < 0) return -1;
  int n = op_input_ints(c, 1, reps, OP_UTIL_MAX_RANK);
  if (n < 0) return op_fail(c, "cannot read the repeats input");
  if (n != rank) return op_fail(c, "repeats has %d values for rank %d", n, rank);
  for (int i = 0; i < n; i++)
    if (reps[i] < 0) return op_fail(c, "negative repeat %lld", (long long)reps[i]);
  if (rank == 0) return op_set_output(c, 0, x);
  if (mlxb_size(x) == 0) return tile_empty(c, x, dims, reps, rank);
  return op_set_output(c, 0, mlxb_tile(op_scope(c), x, reps, n));
}

/* ---- Dropout ------------------------------------------------------------------------------ */

/* Whether input i is a constant scalar float 0 (a dropout ratio that drops nothing). */
static bool claim_const_zero(const claim_ctx *c, int i) {
  const ir_value *v = claim_input(c, i);
  if (!v || !v->is_const || !v->const_data) return false;
  if (v->dtype == ONNX_FLOAT && v->const_bytes == sizeof(float)) return *(const float *)v->const_data == 0.0f;
  if (v->dtype == ONNX_DOUBLE && v->const_bytes == sizeof(double)) return *(const double *)v->const_data == 0.0;
  return false;
}

static bool claim_dropout(claim_ctx *c, const op_def *def) {
  if (c->node->since_version < 12 || !claim_input(c, 2)) return true;
  int64_t mode[1];
  if (claim_const_ints(c, 2, mode, 1) != 1) return claim_decline(c, "training_mode is not a constant");
  if (mode[0] && !claim_const_zero(c, 1)) return claim_decline(c, "training_mode is true (random dropout) with a nonzero ratio");
  return true;
}

/* Inference Dropout is the identity. ORT's mask is all false (zeros for opsets 7-9) before
 * opset 12 and all true from opset 12 on. */
static int lower_dropout(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x = op_input(c, 0);
  if (op_set_output(c, 0, x)) return -1;
  if (!op_has_output(c, 1)) return 0;
  int mt = op_mlx_dtype(op_output_dtype(c, 1));
  if (mt < 0) mt = MLXB_BOOL;
  int64_t dims[OP_UTIL_MAX_RANK];
  int r = op_util_dims(c, x, dims);
  if (r < 0) return -1;
  bool on = op_node(c)->since_version >= 12;
  mlxb_array *v = mlxb_scalar_i64(s, on ? 1 : 0, (mlxb_dtype)mt);
  return op_set_output(c, 1, mlxb_full(s, dims, r, v, (mlxb_dtype)mt));
}

/* ---- Identity / Shape / Size -------------------------------------------------------------- */

static int lower_identity(op_ctx *c, const op_def *def) {
  mlxb_array *x = op_input(c, 0);
  return op_set_output(c, 0, x);
}

static int64_t shape_clamp(int64_t v, int rank) {
  if (v < 0) v += rank;
  return v < 0 ? 0 : v > rank ? rank : v;
}

static int lower_shape(op_ctx *c, const op_def *def) {
  mlxb_array *x;
  int64_t dims[OP_UTIL_MAX_RANK];
  int rank = op_util_input_dims(c, 0, &x, dims);
  if (rank < 0) return -1;
  int64_t start = shape_clamp(ir_attr_int(op_node(c), "start", 0), rank);
  int64_t end = shape_clamp(ir_attr_int(op_node(c), "end", rank), rank);
  int64_t n = end > start ? end - start : 0;
  return op_set_output_ints(c, 0, dims + start, (int)n, &n, 1, ONNX_INT64);
}

/* Shape of a padded tensor: the padded axis reads pad more than without padding. */
static bool pad_shape(const ir_graph *g, const ir_node *n, const pad_fact *in, pad_fact *out,
                     pad_bound *bound) {
  const ir_value *x = &g->values[n->inputs[0]];
  if (in[0].kind != PAD_ROWS || x->rank < 0) return false;
  int64_t start = shape_clamp(ir_attr_int(n, "start", 0), x->rank);
  int64_t end = shape_clamp(ir_attr_int(n, "end", x->rank), x->rank);
  if (in[0].axis >= start && in[0].axis < end) out[0] = (pad_fact){PAD_LENGTH, (int)(in[0].axis - start)};
  return true;
}

static bool pad_identity(const ir_graph *g, const ir_node *n, const pad_fact *in, pad_fact *out,
                     pad_bound *bound) {
  out[0] = in[0];
  return true;
}

static int lower_size(op_ctx *c, const op_def *def) {
  mlxb_array *x;
  int64_t dims[OP_UTIL_MAX_RANK];
  int rank = op_util_input_dims(c, 0, &x, dims);
  if (rank < 0) return -1;
  int64_t n = op_util_numel(dims, rank);
  return op_set_output_ints(c, 0, &n, 1, dims, 0, ONNX_INT64);
}

/* ---- Constant ----------------------------------------------------------------------------- */

/* Sets output 0 from host data; small int32/int64 tensors stay host-known for shape math. */
static int shape_set_host_tensor(op_ctx *c, const void *data, const int64_t *dims, int rank, int32_t dtype) {
  int64_t n = op_util_numel(dims, rank);
  if ((dtype == ONNX_INT64 || dtype == ONNX_INT32) && n <= OP_UTIL_HOST_INTS_MAX) {
    int64_t vals[OP_UTIL_HOST_INTS_MAX];
    for (int64_t i = 0; i < n; i++)
      vals[i] = dtype == ONNX_INT64 ? ((const int64_t *)data)[i] : ((const int32_t *)data)[i];
    return op_set_output_ints(c, 0, vals, (int)n, dims, rank, dtype);
  }
  return op_util_set_host_data(c, 0, data, dims, rank, dtype);
}

static bool claim_constant(claim_ctx *c, const op_def *def) {
  const ir_node *n = c->node;
  if (ir_node_attr(n, "sparse_value")) return claim_decline(c, "sparse_value is not supported");
  if (ir_node_attr(n, "value_string") || ir_node_attr(n, "value_strings"))
    return claim_decline(c, "string constants have no MLX dtype");
  const ir_attr *v = ir_node_attr(n, "value");
  if (v) {
    if (v->type != IR_ATTR_TENSOR || !v->tensor) return claim_decline(c, "value is not a tensor");
    const ir_tensor *t = v->tensor;
    if (op_mlx_dtype(t->dtype) < 0 || !ir_dtype_size(t->dtype))
      return claim_decline(c, "value has dtype %s, which MLX lacks", ir_dtype_name(t->dtype));
    if (t->rank > OP_UTIL_MAX_RANK) return claim_decline(c, "value has rank %d", t->rank);
    int64_t cnt = op_util_numel(t->dims, t->rank); /* saturates: dims from the model file */
    size_t bytes;
    if (__builtin_mul_overflow((size_t)cnt, ir_dtype_size(t->dtype), &bytes) || bytes != t->bytes || (cnt && !t->data))
      return claim_decline(c, "value tensor data is not available");
    return true;
  }
  if (ir_node_attr(n, "value_float") || ir_node_attr(n, "value_floats") || ir_node_attr(n, "value_int") ||
      ir_node_attr(n, "value_ints"))
    return true;
  return claim_decline(c, "no supported value attribute");
}

static int lower_constant(op_ctx *c, const op_def *def) {
  const ir_node *n = op_node(c);
  const ir_attr *a;
  if ((a = ir_node_attr(n, "value")) && a->tensor)
    return shape_set_host_tensor(c, a->tensor->data, a->tensor->dims, a->tensor->rank, a->tensor->dtype);
  if ((a = ir_node_attr(n, "value_float")) && a->type == IR_ATTR_FLOAT)
    return shape_set_host_tensor(c, &a->f, NULL, 0, ONNX_FLOAT);
  if ((a = ir_node_attr(n, "value_int")) && a->type == IR_ATTR_INT)
    return shape_set_host_tensor(c, &a->i, NULL, 0, ONNX_INT64);
  if ((a = ir_node_attr(n, "value_floats")) && a->type == IR_ATTR_FLOATS) {
    int64_t d = (int64_t)a->n;
    return shape_set_host_tensor(c, a->floats, &d, 1, ONNX_FLOAT);
  }
  if ((a = ir_node_attr(n, "value_ints")) && a->type == IR_ATTR_INTS) {
    int64_t d = (int64_t)a->n;
    return shape_set_host_tensor(c, a->ints, &d, 1, ONNX_INT64);
  }
  return op_fail(c, "no supported value attribute");
}

/* ---- Split -------------------------------------------------------------------------------- */

static int lower_split(op_ctx *c, const op_def *def) {
  mlxb_array *x;
  int64_t dims[OP_UTIL_MAX_RANK];
  int rank = op_util_input_dims(c, 0, &x, dims);
  if (rank < 0) return -1;
  const ir_node *node = op_node(c);
  int nout = op_num_outputs(c);
  int axis = op_util_axis(ir_attr_int(node, "axis", 0), rank);
  if (axis < 0) return op_fail(c, "axis out of range for rank %d", rank);
  int64_t dim = dims[axis];
  int64_t *sizes = calloc((size_t)nout + 1, sizeof *sizes);
  int64_t *cuts = calloc((size_t)nout + 1, sizeof *cuts);
  mlxb_array **parts = calloc((size_t)nout + 1, sizeof *parts);
  int rc = -1;
  if (!sizes || !cuts || !parts) {
    op_fail(c, "out of memory");
    goto done;
  }
  int ns = op_util_attr_or_input_ints(c, "split", 1, 13, sizes, nout + 1);
  if (ns < 0) goto done;
  int64_t num_outputs = ir_attr_int(node, "num_outputs", 0);
  if (ns > 0) {
    if (ns != nout) {
      op_fail(c, "split has %d values for %d outputs", ns, nout);
      goto done;
    }
  } else if (num_outputs > 0) {
    /* Opset 18: chunks of ceil(dim / n); the last one takes what is left. */
    if (num_outputs != nout || num_outputs > dim) {
      op_fail(c, "num_outputs %lld does not fit %d outputs and dimension %lld", (long long)num_outputs, nout,
              (long long)dim);
      goto done;
    }
    int64_t chunk = (dim + num_outputs - 1) / num_outputs;
    for (int i = 0; i < nout - 1; i++) sizes[i] = chunk;
    sizes[nout - 1] = dim - chunk * (nout - 1);
    if (sizes[nout - 1] < 0) {
      op_fail(c, "dimension %lld cannot be split into %d chunks of %lld", (long long)dim, nout, (long long)chunk);
      goto done;
    }
  } else {
    if (dim % nout) {
      op_fail(c, "dimension %lld is not evenly splittable into %d", (long long)dim, nout);
      goto done;
    }
    for (int i = 0; i < nout; i++) sizes[i] = dim / nout;
  }
  int64_t at = 0;
  for (int i = 0; i < nout; i++) {
    if (sizes[i] < 0) {
      op_fail(c, "negative split size");
      goto done;
    }
    if (__builtin_add_overflow(at, sizes[i], &at) || at > dim) {
      op_fail(c, "split sizes add to more than dimension %lld", (long long)dim);
      goto done;
    }
    cuts[i] = at;
  }
  if (at != dim) {
    op_fail(c, "split sizes add to %lld, dimension is %lld", (long long)at, (long long)dim);
    goto done;
  }
  if (mlxb_split(op_scope(c), x, cuts, nout - 1, axis, parts) < 0) {
    op_check(c);
    goto done;
  }
  for (int i = 0; i < nout; i++)
    if (op_util_set_optional(c, i, parts[i]) < 0) goto done;
  rc = 0;
done:
  free(sizes);
  free(cuts);
  free(parts);
  return rc;
}

/* ---- Pad ---------------------------------------------------------------------------------- */

static bool claim_pad(claim_ctx *c, const op_def *def) {
  const char *mode = ir_attr_string(c->node, "mode", "constant");
  if (!strcmp(mode, "constant") || !strcmp(mode, "reflect") || !strcmp(mode, "edge")) return shape_claim_host(c, def);
  if (!strcmp(mode, "wrap") && c->node->since_version >= 19) return shape_claim_host(c, def);
  return claim_decline(c, "mode '%s' is not supported at opset %d", mode, c->node->since_version);
}

/* The com.microsoft Pad (opset 1) takes pads and the value as inputs, as ai.onnx Pad does from 11. */
static bool pad_inputs_form(const ir_node *n) { return n->since_version >= 11 || !strcmp(n->domain, "com.microsoft"); }

/* The pad value: opset 11+ input 2 (absent = 0), before that the `value` attribute. */
static mlxb_array *pad_value(op_ctx *c, mlxb_dtype t) {
  mlxb_scope *s = op_scope(c);
  if (!pad_inputs_form(op_node(c))) return mlxb_scalar_f64(s, ir_attr_float(op_node(c), "value", 0.0f), t);
  if (!op_has_input(c, 2)) return mlxb_scalar_i64(s, 0, t);
  mlxb_array *v = op_input(c, 2);
  if (!v) return NULL;
  if (mlxb_size(v) != 1) {
    op_fail(c, "constant_value must hold one element");
    return NULL;
  }
  return mlxb_ndim(v) == 0 ? v : mlxb_reshape(s, v, NULL, 0);
}

/* Wrap padding of one axis: a take with indices (j - lo) mod dim. */
static mlxb_array *pad_wrap_axis(op_ctx *c, mlxb_array *x, int axis, int64_t dim, int64_t lo, int64_t hi) {
  int64_t n = lo + dim + hi;
  int64_t *idx = malloc((size_t)n * sizeof *idx);
  if (!idx) {
    op_fail(c, "out of memory");
    return NULL;
  }
  for (int64_t j = 0; j < n; j++) idx[j] = (((j - lo) % dim) + dim) % dim;
  mlxb_array *ia = mlxb_from_data(op_scope(c), idx, &n, 1, MLXB_I64);
  free(idx);
  return mlxb_take(op_scope(c), x, ia, axis);
}

/* The padded extents dims + lo + hi, or -1 with the failure recorded when one passes int64. */
static int pad_extents(op_ctx *c, const int64_t *dims, const int64_t *lo, const int64_t *hi, int rank, int64_t *out) {
  for (int i = 0; i < rank; i++)
    if (__builtin_add_overflow(dims[i], lo[i], &out[i]) || __builtin_add_overflow(out[i], hi[i], &out[i]))
      return op_fail(c, "padded axis %d is too large (its extent overflows int64)", i);
  return 0;
}

/* Pads read from data may ask for more than memory holds: refused before anything is built, as
 * the other sizes read from data are. An empty result needs nothing. */
static int pad_size_fails(op_ctx *c, const mlxb_array *x, const int64_t *out, int rank) {
  size_t bytes = mlxb_dtype_size(mlxb_type(x)), limit = mlxb_memory_limit();
  for (int i = 0; i < rank; i++) {
    if (out[i] == 0) return 0;
    if (__builtin_mul_overflow(bytes, (size_t)out[i], &bytes)) bytes = SIZE_MAX;
  }
  if (limit && bytes > limit) return op_fail(c, "output 0 needs %zu bytes, more than the memory limit (%zu bytes)", bytes, limit);
  return 0;
}

/* An axis whose crops cross (one pad removes more than the other leaves): nothing of the input is
 * kept along it, and every output position there maps outside the input, as ORT's CPU EP computes
 * it (the constant fills the axis; edge, reflect and wrap have nothing to pad from, below). Its
 * extent is dim + lo + hi, refused when negative. Leaves the axis as an empty slice padded by that
 * extent before it. */
static int pad_crossed_axis(op_ctx *c, int i, int64_t *dim, int64_t *lo, int64_t *hi) {
  __int128 out = (__int128)*dim + *lo + *hi; /* exact: pads of opposite signs may each be near INT64's ends */
  if (out < 0) return op_fail(c, "pads crop axis %d below zero", i);
  if (out > INT64_MAX) return op_fail(c, "padded axis %d is too large (its extent overflows int64)", i);
  *dim = 0, *lo = (int64_t)out, *hi = 0;
  return 0;
}

/* ORT's rules for edge, reflect and wrap where there is nothing to pad from. An empty input may
 * give only an empty output that grows no axis of size 0 (wrap: none at all); a non-empty input
 * cropped to nothing along any axis fails. Returns 1 with the (empty) output set, 0 to go on,
 * -1 on failure. in_dims: the input's dims; extent: after the crop; out: the padded extents. */
static int pad_from_nothing(op_ctx *c, const char *mode, const int64_t *in_dims, const int64_t *extent,
                            const int64_t *out, int rank, mlxb_dtype t) {
  if (op_util_numel(in_dims, rank) == 0) {
    if (!strcmp(mode, "wrap")) return op_fail(c, "wrap mode cannot pad an empty input");
    for (int i = 0; i < rank; i++)
      if (in_dims[i] == 0 && out[i] > 0) return op_fail(c, "cannot pad axis %d of size 0 in %s mode", i, mode);
    return op_set_output(c, 0, mlxb_zeros(op_scope(c), out, rank, t)) ? -1 : 1;
  }
  for (int i = 0; i < rank; i++)
    if (extent[i] == 0) return op_fail(c, "pads crop axis %d to nothing: %s mode has no data to pad from", i, mode);
  return 0;
}

static int lower_pad(op_ctx *c, const op_def *def) {
  mlxb_array *x;
  int64_t dims[OP_UTIL_MAX_RANK], pads[2 * OP_UTIL_MAX_RANK], axes[OP_UTIL_MAX_RANK];
  int rank = op_util_input_dims(c, 0, &x, dims);
  if (rank < 0) return -1;
  const ir_node *node = op_node(c);
  const char *mode = ir_attr_string(node, "mode", "constant");
  int np = op_util_attr_or_input_ints(c, "pads", 1, pad_inputs_form(node) ? node->since_version : 11, pads,
                                      2 * OP_UTIL_MAX_RANK);
  if (np < 0) return -1;
  int na = node->since_version >= 18 ? op_util_attr_or_input_ints(c, "", 3, 0, axes, OP_UTIL_MAX_RANK) : 0;
  if (na < 0) return -1;
  if (na == 0) {
    for (int i = 0; i < rank; i++) axes[i] = i;
    na = rank;
  }
  if (np != 2 * na) return op_fail(c, "pads has %d values for %d axes", np, na);
  int64_t lo[OP_UTIL_MAX_RANK] = {0}, hi[OP_UTIL_MAX_RANK] = {0};
  for (int k = 0; k < na; k++) {
    int a = op_util_axis(axes[k], rank);
    if (a < 0) return op_fail(c, "axis %lld out of range for rank %d", (long long)axes[k], rank);
    lo[a] = pads[k], hi[a] = pads[k + na];
  }
  /* Negative pads crop first (ORT crops, then pads what is left). */
  int64_t start[OP_UTIL_MAX_RANK], stop[OP_UTIL_MAX_RANK], step[OP_UTIL_MAX_RANK], in_dims[OP_UTIL_MAX_RANK];
  bool crop = false, grow = false, crossed = false;
  memcpy(in_dims, dims, sizeof(int64_t) * (size_t)rank);
  for (int i = 0; i < rank; i++) {
    step[i] = 1;
    /* compared before any negation: a pad of INT64_MIN has no positive twin */
    bool crossing = lo[i] < -dims[i] || hi[i] < -dims[i];
    start[i] = crossing || lo[i] >= 0 ? 0 : -lo[i];
    stop[i] = crossing ? 0 : hi[i] < 0 ? dims[i] + hi[i] : dims[i];
    crop |= lo[i] < 0 || hi[i] < 0;
    if (crossing || stop[i] < start[i]) {
      if (pad_crossed_axis(c, i, &dims[i], &lo[i], &hi[i])) return -1;
      start[i] = stop[i] = 0, crossed = true;
      grow |= lo[i] > 0;
      continue;
    }
    lo[i] = lo[i] < 0 ? 0 : lo[i];
    hi[i] = hi[i] < 0 ? 0 : hi[i];
    dims[i] = stop[i] - start[i];
    grow |= lo[i] > 0 || hi[i] > 0;
  }
  if (crop) x = mlxb_slice(op_scope(c), x, start, stop, step);
  int64_t out[OP_UTIL_MAX_RANK];
  if (pad_extents(c, dims, lo, hi, rank, out)) return -1;
  if (strcmp(mode, "constant")) {
    int done = pad_from_nothing(c, mode, in_dims, dims, out, rank, mlxb_type(x));
    if (done) return done < 0 ? -1 : 0;
  }
  if (!grow) return op_set_output(c, 0, x);
  if (pad_size_fails(c, x, out, rank)) return -1;
  if (op_util_numel(out, rank) == 0) /* nothing to write, however far an axis grows */
    return op_set_output(c, 0, mlxb_zeros(op_scope(c), out, rank, mlxb_type(x)));
  for (int i = 0; i < rank; i++) {
    if (!lo[i] && !hi[i]) continue;
    if (!strcmp(mode, "reflect") && (lo[i] > dims[i] - 1 || hi[i] > dims[i] - 1))
      return op_fail(c, "reflect pads of axis %d exceed its size %lld minus one", i, (long long)dims[i]);
  }
  mlxb_dtype t = mlxb_type(x);
  if (!strcmp(mode, "constant")) {
    mlxb_array *v = pad_value(c, t);
    if (!v) {
      op_check(c);
      return -1;
    }
    if (crossed) /* every output position maps outside the input: no pad of an empty array */
      return op_set_output(c, 0, mlxb_full(op_scope(c), out, rank, v, t));
    return op_set_output(c, 0, mlxb_pad(op_scope(c), x, lo, hi, v, "constant"));
  }
  if (!strcmp(mode, "reflect") || !strcmp(mode, "edge"))
    return op_set_output(c, 0, mlxb_pad(op_scope(c), x, lo, hi, NULL, mode));
  if (strcmp(mode, "wrap")) return op_fail(c, "unsupported mode '%s'", mode);
  for (int i = 0; i < rank; i++) {
    if (!lo[i] && !hi[i]) continue;
    x = pad_wrap_axis(c, x, i, dims[i], lo[i], hi[i]);
    if (!x) {
      op_check(c);
      return -1;
    }
  }
  return op_set_output(c, 0, x);
}

/* ---- DepthToSpace / SpaceToDepth ---------------------------------------------------------- */

/* A blocksize past this would overflow the block's bs * bs * dim arithmetic (and no MLX axis holds
 * a block that large); an empty input divides by any blocksize. */
#define SHAPE_MAX_BLOCK 46340

static bool claim_blocks(claim_ctx *c, const op_def *def) {
  const ir_value *v = claim_input(c, 0);
  if (v && v->rank >= 0 && v->rank != 4) return claim_decline(c, "input rank %d (must be 4)", v->rank);
  int64_t bs = ir_attr_int(c->node, "blocksize", 0);
  if (bs <= 0 || bs > SHAPE_MAX_BLOCK) return claim_decline(c, "blocksize %lld out of range", (long long)bs);
  const char *mode = ir_attr_string(c->node, "mode", "DCR");
  if (strcmp(mode, "DCR") && strcmp(mode, "CRD")) return claim_decline(c, "mode '%s' is unknown", mode);
  return true;
}

/* Reshape to six dims, permute, reshape to four: the formulas of the ONNX spec. */
static int shape_blocks(op_ctx *c, mlxb_array *x, const int64_t *six, const int *perm, const int64_t *four) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *t = mlxb_transpose(s, mlxb_reshape(s, x, six, 6), perm, 6);
  return op_set_output(c, 0, mlxb_reshape(s, t, four, 4));
}

static int lower_depth_to_space(op_ctx *c, const op_def *def) {
  mlxb_array *x;
  int64_t d[OP_UTIL_MAX_RANK];
  if (op_util_input_dims(c, 0, &x, d) != 4) return op_fail(c, "input must have rank 4");
  int64_t bs = ir_attr_int(op_node(c), "blocksize", 0);
  if (bs <= 0 || bs > SHAPE_MAX_BLOCK) return op_fail(c, "blocksize %lld out of range", (long long)bs);
  if (d[1] % (bs * bs)) return op_fail(c, "channels %lld not divisible by blocksize^2", (long long)d[1]);
  int64_t cc = d[1] / (bs * bs);
  int64_t four[4] = {d[0], cc, d[2] * bs, d[3] * bs};
  if (!strcmp(ir_attr_string(op_node(c), "mode", "DCR"), "CRD")) {
    int64_t six[6] = {d[0], cc, bs, bs, d[2], d[3]};
    static const int perm[6] = {0, 1, 4, 2, 5, 3};
    return shape_blocks(c, x, six, perm, four);
  }
  int64_t six[6] = {d[0], bs, bs, cc, d[2], d[3]};
  static const int perm[6] = {0, 3, 4, 1, 5, 2};
  return shape_blocks(c, x, six, perm, four);
}

static int lower_space_to_depth(op_ctx *c, const op_def *def) {
  mlxb_array *x;
  int64_t d[OP_UTIL_MAX_RANK];
  if (op_util_input_dims(c, 0, &x, d) != 4) return op_fail(c, "input must have rank 4");
  int64_t bs = ir_attr_int(op_node(c), "blocksize", 0);
  if (bs <= 0 || bs > SHAPE_MAX_BLOCK) return op_fail(c, "blocksize %lld out of range", (long long)bs);
  if (d[2] % bs || d[3] % bs) return op_fail(c, "spatial dims not divisible by blocksize");
  int64_t six[6] = {d[0], d[1], d[2] / bs, bs, d[3] / bs, bs};
  int64_t four[4] = {d[0], d[1] * bs * bs, d[2] / bs, d[3] / bs};
  static const int perm[6] = {0, 3, 5, 1, 2, 4};
  return shape_blocks(c, x, six, perm, four);
}

/* ---- Range -------------------------------------------------------------------------------- */

/* A Range's element count, refused like ORT's kernel (not finite, past int64) or, before anything
 * is allocated, when its bytes pass MLX's memory limit. */
static int range_count_ok(op_ctx *c, int64_t count, size_t esz) {
  size_t limit = mlxb_memory_limit(), bytes;
  if (__builtin_mul_overflow((size_t)count, esz, &bytes)) bytes = SIZE_MAX;
  if (limit && bytes > limit)
    return op_fail(c, "output 0 needs %zu bytes (%lld elements), more than the memory limit (%zu bytes)", bytes,
                   (long long)count, limit);
  return 0;
}

/* Ranges up to this many elements are built on the host (small index vectors stay host-known);
 * longer integer ranges are built in the graph (start + arange * delta), with no host copy. */
#define RANGE_HOST_COUNT 4096

/* Integer Range: count = max(ceil((limit - start) / delta), 0), values start + i * delta wrapping
 * in int64 and truncated to the element type. */
static int range_ints(op_ctx *c, int32_t dtype) {
  int64_t v[3] = {0, 0, 1}; /* com.microsoft Range: delta 1 when absent */
  for (int i = 0; i < 3; i++)
    if (op_has_input(c, i) && op_util_input_int(c, i, &v[i])) return -1;
  int64_t start = v[0], limit = v[1], delta = v[2];
  if (delta == 0) return op_fail(c, "delta is zero");
  /* Differences in 128 bits: limit - start may overflow int64. */
  __int128 span = (__int128)limit - start;
  __int128 n = 0;
  if (delta > 0 && span > 0) n = (span + delta - 1) / delta;
  if (delta < 0 && span < 0) n = (-span + (-(__int128)delta) - 1) / -(__int128)delta;
  if (n > INT64_MAX) return op_fail(c, "the computed number of elements exceeds the supported range");
  int64_t count = (int64_t)n;
  size_t esz = ir_dtype_size(dtype);
  if (range_count_ok(c, count, esz)) return -1;
  if (count > INT32_MAX) /* MLX's arange counts in int */
    return op_fail(c, "%lld elements: more than MLX makes in one range (2^31 - 1)", (long long)count);
  if (count > RANGE_HOST_COUNT) {
    mlxb_scope *s = op_scope(c);
    mlxb_array *i = mlxb_arange(s, 0, (double)count, 1, MLXB_I64);
    mlxb_array *y = mlxb_binary(s, MLXB_ADD, mlxb_binary(s, MLXB_MUL, i, mlxb_scalar_i64(s, delta, MLXB_I64)),
                                mlxb_scalar_i64(s, start, MLXB_I64));
    if (y && dtype != ONNX_INT64) y = mlxb_astype(s, y, (mlxb_dtype)op_mlx_dtype(dtype));
    return op_set_output(c, 0, y);
  }
  void *buf = malloc(count ? (size_t)count * esz : 1);
  if (!buf) return op_fail(c, "out of memory");
  for (int64_t i = 0; i < count; i++) {
    int64_t val = (int64_t)((uint64_t)start + (uint64_t)i * (uint64_t)delta);
    if (dtype == ONNX_INT64) ((int64_t *)buf)[i] = val;
    else if (dtype == ONNX_INT32) ((int32_t *)buf)[i] = (int32_t)val;
    else ((int16_t *)buf)[i] = (int16_t)val;
  }
  int rc = shape_set_host_tensor(c, buf, &count, 1, dtype);
  free(buf);
  return rc;
}

/* Float Range accumulates in the element type exactly as ORT's kernel does (start += delta). Its
 * count is ceil((limit - start) / delta) in double for float32 too, as ORT's kernel computes it
 * (measured: float32 arithmetic gives another count for about one random case in sixteen); a
 * count that is not finite (NaN or infinite start, limit or delta) fails like ORT. */
static int range_floats(op_ctx *c, int32_t dtype) {
  double v[3] = {0.0, 0.0, 1.0}; /* com.microsoft Range: delta 1 when absent */
  for (int i = 0; i < 3; i++)
    if (op_has_input(c, i) && op_util_input_double(c, i, &v[i])) return -1;
  if (v[2] == 0) return op_fail(c, "delta is zero");
  double n = __builtin_ceil((v[1] - v[0]) / v[2]);
  if (!__builtin_isfinite(n)) return op_fail(c, "the computed number of elements is not a finite value");
  if (!(n > 0)) n = 0;
  if (n >= 0x1p63) return op_fail(c, "the computed number of elements exceeds the supported range");
  int64_t count = (int64_t)n;
  size_t esz = ir_dtype_size(dtype);
  if (range_count_ok(c, count, esz)) return -1;
  void *buf = malloc(count ? (size_t)count * esz : 1);
  if (!buf) return op_fail(c, "out of memory");
  if (dtype == ONNX_FLOAT) {
    float acc = (float)v[0], delta = (float)v[2];
    for (int64_t i = 0; i < count; i++, acc += delta) ((float *)buf)[i] = acc;
  } else {
    double acc = v[0];
    for (int64_t i = 0; i < count; i++, acc += v[2]) ((double *)buf)[i] = acc;
  }
  int rc = shape_set_host_tensor(c, buf, &count, 1, dtype);
  free(buf);
  return rc;
}

static int lower_range(op_ctx *c, const op_def *def) {
  int32_t t = op_input_dtype(c, 0);
  if (t == ONNX_FLOAT || t == ONNX_DOUBLE) return range_floats(c, t);
  if (t == ONNX_INT64 || t == ONNX_INT32 || t == ONNX_INT16) return range_ints(c, t);
  return op_fail(c, "unsupported dtype %s", ir_dtype_name(t));
}

/* ---- ConstantOfShape / EyeLike / Trilu ---------------------------------------------------- */

static bool claim_constant_of_shape(claim_ctx *c, const op_def *def) {
  const ir_attr *v = ir_node_attr(c->node, "value");
  if (!v) return true;
  if (v->type != IR_ATTR_TENSOR || !v->tensor) return claim_decline(c, "value is not a tensor");
  const ir_tensor *t = v->tensor;
  size_t esz = ir_dtype_size(t->dtype);
  if (op_mlx_dtype(t->dtype) < 0 || !esz) return claim_decline(c, "value has dtype %s, which MLX lacks", ir_dtype_name(t->dtype));
  if (t->bytes != esz || !t->data) return claim_decline(c, "value must hold exactly one element");
  return true;
}

static int lower_constant_of_shape(op_ctx *c, const op_def *def) {
  int64_t dims[OP_UTIL_MAX_RANK];
  int rank = op_input_ints(c, 0, dims, OP_UTIL_MAX_RANK);
  if (rank < 0) return op_fail(c, "cannot read the shape input (at most %d values)", OP_UTIL_MAX_RANK);
  for (int i = 0; i < rank; i++)
    if (dims[i] < 0) return op_fail(c, "negative dimension %lld", (long long)dims[i]);
  const ir_attr *a = ir_node_attr(op_node(c), "value");
  float zero = 0.0f;
  const void *data = &zero;
  int32_t dtype = ONNX_FLOAT;
  if (a && a->tensor) data = a->tensor->data, dtype = a->tensor->dtype;
  int64_t n = op_util_numel(dims, rank);
  if ((dtype == ONNX_INT64 || dtype == ONNX_INT32) && n <= OP_UTIL_HOST_INTS_MAX) {
    int64_t one = dtype == ONNX_INT64 ? *(const int64_t *)data : *(const int32_t *)data, vals[OP_UTIL_HOST_INTS_MAX];
    for (int64_t i = 0; i < n; i++) vals[i] = one;
    return op_set_output_ints(c, 0, vals, (int)n, dims, rank, dtype);
  }
  int t = op_mlx_dtype(dtype);
  if (t < 0) return op_fail(c, "dtype %s has no MLX equivalent", ir_dtype_name(dtype));
  mlxb_scope *s = op_scope(c);
  mlxb_array *v = mlxb_from_data(s, data, NULL, 0, (mlxb_dtype)t);
  return op_set_output(c, 0, mlxb_full(s, dims, rank, v, (mlxb_dtype)t));
}

static bool claim_eye_like(claim_ctx *c, const op_def *def) {
  const ir_value *v = claim_input(c, 0);
  if (v && v->rank >= 0 && v->rank != 2) return claim_decline(c, "input rank %d (must be 2)", v->rank);
  const ir_attr *d = ir_node_attr(c->node, "dtype");
  if (d && op_mlx_dtype((int32_t)d->i) < 0) return claim_decline(c, "dtype %lld has no MLX equivalent", (long long)d->i);
  return true;
}

static int64_t shape_clamp_range(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

static int lower_eye_like(op_ctx *c, const op_def *def) {
  mlxb_array *x;
  int64_t d[OP_UTIL_MAX_RANK];
  if (op_util_input_dims(c, 0, &x, d) != 2) return op_fail(c, "input must have rank 2");
  int32_t dtype = (int32_t)ir_attr_int(op_node(c), "dtype", op_input_dtype(c, 0));
  int t = op_mlx_dtype(dtype);
  if (t < 0) return op_fail(c, "dtype %s has no MLX equivalent", ir_dtype_name(dtype));
  /* Any |k| past the matrix gives zeros; clamping keeps k within 32 bits. */
  int64_t k = shape_clamp_range(ir_attr_int(op_node(c), "k", 0), -d[0], d[1]);
  return op_set_output(c, 0, mlxb_eye(op_scope(c), d[0], d[1], k, (mlxb_dtype)t));
}

static int lower_trilu(op_ctx *c, const op_def *def) {
  mlxb_array *x;
  int64_t d[OP_UTIL_MAX_RANK];
  int rank = op_util_input_dims(c, 0, &x, d);
  if (rank < 0) return -1;
  if (rank < 2) return op_fail(c, "input must have rank >= 2");
  int64_t k = 0;
  if (op_has_input(c, 1) && op_input_ints(c, 1, &k, 1) != 1)
    return op_fail(c, "k must be a scalar");
  k = shape_clamp_range(k, -d[rank - 2] - 1, d[rank - 1] + 1);
  bool upper = ir_attr_int(op_node(c), "upper", 1) != 0;
  mlxb_scope *s = op_scope(c);
  return op_set_output(c, 0, upper ? mlxb_triu(s, x, (int)k) : mlxb_tril(s, x, (int)k));
}

/* ---- the table ---------------------------------------------------------------------------- */

#define DT_RANGE (DT_F32 | DT_F64 | DT(ONNX_INT16) | DT(ONNX_INT32) | DT(ONNX_INT64))

static const op_def defs[] = {
  OP_ROW("", "Reshape", 5, 25, .inputs = {2, 2}, .outputs = {1, 1}, .dtypes = DT_ALL, .claim = shape_claim_host,
         .lower = lower_reshape,
         .doc = "shape input read on the host; 0 copies the input dim (allowzero honoured), one -1 inferred"),
  OP_ROW("", "Transpose", 1, 25, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_ALL, .claim = shape_claim_rank,
         .lower = lower_transpose, .doc = "perm attribute or reversed axes"),
  OP_ROW("", "Concat", 4, 13, .inputs = {1, OP_VARIADIC}, .outputs = {1, 1}, .dtypes = DT_ALL,
         .claim = shape_claim_rank, .lower = lower_concat, .doc = "any number of inputs, negative axis"),
  OP_ROW("", "Slice", 1, 13, .inputs = {1, 5}, .outputs = {1, 1}, .dtypes = DT_ALL, .claim = shape_claim_host,
         .lower = lower_slice,
         .doc = "opset 1 attributes or opset 10+ inputs (starts/ends/axes/steps read on the host); negative steps, "
                "clamping as the spec says"),
  OP_ROW("", "Squeeze", 1, 25, .inputs = {1, 2}, .outputs = {1, 1}, .dtypes = DT_ALL, .claim = shape_claim_host,
         .lower = lower_squeeze, .doc = "axes attribute (<13) or input (13+), or every size-1 axis"),
  OP_ROW("", "Unsqueeze", 1, 25, .inputs = {1, 2}, .outputs = {1, 1}, .dtypes = DT_ALL, .claim = shape_claim_host,
         .lower = lower_unsqueeze, .doc = "axes attribute (<13) or input (13+), negative axes"),
  OP_ROW("com.microsoft", "ExpandDims", 1, 1, .inputs = {2, 2}, .outputs = {1, 1}, .dtypes = DT_ALL,
         .claim = shape_claim_host, .lower = lower_expand_dims,
         .doc = "int32 axis read on the host, in [-rank - 1, rank]"),
  OP_ROW("", "Flatten", 1, 25, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_ALL, .claim = shape_claim_rank,
         .lower = lower_flatten, .doc = "axis in [-r, r]"),
  OP_ROW("", "Expand", 8, 13, .inputs = {2, 2}, .outputs = {1, 1}, .dtypes = DT_ALL, .claim = shape_claim_host,
         .lower = lower_expand, .doc = "shape read on the host; bidirectional broadcast"),
  OP_ROW("", "Dropout", 7, 22, .inputs = {1, 3}, .outputs = {1, 2}, .dtypes = DT_FLOAT, .claim = claim_dropout,
         .lower = lower_dropout,
         .doc = "inference (or training with a constant ratio of 0): identity, with ORT's mask (all false before "
                "opset 12, all true after). Declined: training_mode that is not a constant, or true with a ratio "
                "other than a constant 0"),
  OP_ROW("", "Identity", 1, 25, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_ALL, .lower = lower_identity,
         .pad = pad_identity, .doc = "tensors only; sequence and optional inputs are declined (no MLX dtype)"),
  OP_ROW("", "Shape", 1, 25, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_ALL, .claim = shape_claim_rank,
         .lower = lower_shape, .flags = OP_FLAG_SHAPE_ONLY, .pad = pad_shape,
         .doc = "start/end attributes (15+); the result is host-known"),
  OP_ROW("", "Size", 1, 25, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_ALL, .claim = shape_claim_rank,
         .lower = lower_size, .flags = OP_FLAG_SHAPE_ONLY, .doc = "the result is host-known"),
  OP_ROW("", "Constant", 1, 25, .inputs = {0, 0}, .outputs = {1, 1}, .claim = claim_constant, .lower = lower_constant,
         .doc = "value, value_float(s), value_int(s); value_string(s) and sparse_value declined"),
  OP_ROW("", "Tile", 6, 13, .inputs = {2, 2}, .outputs = {1, 1}, .dtypes = DT_ALL, .claim = shape_claim_host,
         .lower = lower_tile, .doc = "repeats read on the host"),
  OP_ROW("", "Split", 2, 18, .inputs = {1, 2}, .outputs = {1, OP_VARIADIC}, .dtypes = DT_ALL, .claim = shape_claim_rank,
         .lower = lower_split,
         .doc = "split attribute (<13) or input (13+), num_outputs with a smaller last chunk (18), or equal parts"),
  OP_ROW("", "Pad", 2, 25, .inputs = {1, 4}, .outputs = {1, 1}, .dtypes = DT_ALL, .claim = claim_pad,
         .lower = lower_pad, .arg = 2 * OP_UTIL_MAX_RANK,
         .doc = "modes constant/reflect/edge and wrap (19+); pads attribute (<11) or input, axes input (18+); "
                "negative pads crop first; reflect pads beyond size-1 fail like ORT"),
  OP_ROW("com.microsoft", "Pad", 1, 1, .inputs = {2, 3}, .outputs = {1, 1}, .dtypes = DT_ALL, .claim = claim_pad,
         .lower = lower_pad, .arg = 2 * OP_UTIL_MAX_RANK,
         .doc = "the contrib form of Pad: pads ([2 * rank] or [1, 2 * rank]) and value as inputs; constant, reflect "
                "and edge"),
  OP_ROW("", "DepthToSpace", 1, 13, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_ALL, .claim = claim_blocks,
         .lower = lower_depth_to_space, .doc = "DCR and CRD modes, rank 4"),
  OP_ROW("", "SpaceToDepth", 1, 13, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_ALL, .claim = claim_blocks,
         .lower = lower_space_to_depth, .doc = "rank 4"),
  OP_ROW("", "Range", 11, 11, .inputs = {3, 3}, .outputs = {1, 1}, .dtypes = DT_RANGE, .lower = lower_range,
         .doc = "float/double/int16/int32/int64 scalars read on the host; float values accumulated like ORT (start "
                "+= delta); a count that is not finite or passes int64 fails like ORT, one past the memory limit "
                "before allocating; long integer ranges built in the graph; float16/bfloat16 declined"),
  OP_ROW("com.microsoft", "Range", 1, 1, .inputs = {2, 3}, .outputs = {1, 1}, .dtypes = DT_RANGE, .lower = lower_range,
         .doc = "the contrib form of Range: delta optional (1), the same rules"),
  OP_ROW("", "ConstantOfShape", 9, 25, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT(ONNX_INT64),
         .claim = claim_constant_of_shape, .lower = lower_constant_of_shape,
         .doc = "shape read on the host; value of any MLX dtype (float8 declined)"),
  OP_ROW("", "EyeLike", 9, 22, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_ALL, .claim = claim_eye_like,
         .lower = lower_eye_like, .doc = "dtype and k attributes, rank 2"),
  OP_ROW("", "Trilu", 14, 14, .inputs = {1, 2}, .outputs = {1, 1}, .dtypes = DT_ALL, .claim = shape_claim_host,
         .lower = lower_trilu, .doc = "upper/lower, k input read on the host"),
  OP_ROW("com.microsoft", "Trilu", 1, 1, .inputs = {1, 2}, .outputs = {1, 1}, .dtypes = DT_ALL, .claim = shape_claim_host,
         .lower = lower_trilu, .doc = "the contrib form of Trilu (the same attributes and inputs)"),
};

OPS_FAMILY(shape, defs);
