/* Indexing ops: Gather, GatherElements, GatherND, ScatterElements (and its old name Scatter),
 * ScatterND, TensorScatter, ReverseSequence, OneHot and Compress, lowered onto MLX
 * take/gather/scatter. MLX wraps negative indices itself but does no bounds checks: the bridge
 * clips every index array into its axis, and each lowering requires its indices in [-dim, dim)
 * (op_require), so an out-of-range index fails the Run as in ORT. */
#include <stdlib.h>
#include <string.h>

#include "ops/op_util.h"


/* ---- helpers ------------------------------------------------------------------------------ */

/* Requires every index in [-dim, dim) (ORT's rule: negative indices count from the end) and
 * returns idx; the bridge bounds the index again inside MLX's gather or scatter, so an invalid
 * value fails the Run without reaching memory outside the tensor. */
static mlxb_array *index_checked(op_ctx *c, mlxb_array *idx, int64_t dim) {
  return op_util_require_range(c, idx, -dim, dim, "index") ? NULL : idx;
}

/* Indices along an axis of size 0 can only be out of range. */
static int index_check_empty_axis(op_ctx *c, int64_t dim, mlxb_array *idx) {
  if (dim == 0 && mlxb_size(idx) > 0) return op_fail(c, "indices into an axis of size 0");
  return 0;
}

/* 0..n-1 of dtype t shaped to rank dims with n on `axis`, broadcast to dims. */
static mlxb_array *index_iota(op_ctx *c, const int64_t *dims, int rank, int axis, mlxb_dtype t) {
  mlxb_scope *s = op_scope(c);
  return mlxb_broadcast_to(s, op_util_iota(s, 0, dims[axis], axis, rank, t), dims, rank);
}

/* Component k of the last axis of ND indices [..., m], as an array of shape [...]. */
static mlxb_array *index_component(op_ctx *c, mlxb_array *idx, const int64_t *dims, int rank, int k) {
  mlxb_scope *s = op_scope(c);
  return mlxb_reshape(s, op_util_slice_axis(s, idx, rank - 1, k, k + 1, 1), dims, rank - 1);
}

static bool claim_rank(claim_ctx *c, const op_def *def) {
  for (int i = 0; i < c->node->n_inputs; i++) {
    const ir_value *v = claim_input(c, i);
    if (v && v->rank > OP_UTIL_MAX_RANK - 1) return claim_decline(c, "input %d has rank %d", i, v->rank);
  }
  return true;
}

/* ---- Gather ------------------------------------------------------------------------------- */

/* Shape arithmetic stays on the host: a Gather of known integers (a Shape's dims) by known indices
 * is known too, so its consumers read it without an evaluation and no gather reaches the device
 * (on MLX's CUDA backend each gather kernel is compiled by NVRTC at its first use on a machine). */
static bool gather_on_host(const op_ctx *c, const int64_t *dims, int rank, const int64_t *idims, int irank,
                           int axis) {
  int64_t rest = op_util_numel(dims, axis) * op_util_numel(dims + axis + 1, rank - axis - 1);
  int64_t n_idx = op_util_numel(idims, irank);
  return rest * n_idx <= OP_UTIL_HOST_INTS_MAX && op_util_input_host_ints(c, 0, op_util_numel(dims, rank)) &&
         op_util_input_host_ints(c, 1, n_idx);
}

static int gather_host(op_ctx *c, const int64_t *dims, int rank, const int64_t *idims, int irank, int axis) {
  int64_t data[OP_UTIL_HOST_INTS_MAX], idx[OP_UTIL_HOST_INTS_MAX], out[OP_UTIL_HOST_INTS_MAX];
  int64_t odims[2 * OP_UTIL_MAX_RANK];
  int64_t outer = op_util_numel(dims, axis), d = dims[axis], inner = op_util_numel(dims + axis + 1, rank - axis - 1);
  int64_t n_idx = op_util_numel(idims, irank), n = 0;
  if (op_util_read_host_ints(c, 0, data, op_util_numel(dims, rank)) < 0 ||
      op_util_read_host_ints(c, 1, idx, n_idx) < 0)
    return -1;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < n_idx; j++) {
      int64_t at = idx[j] < 0 ? idx[j] + d : idx[j];
      if (at < 0 || at >= d)
        return op_fail(c, "index %lld out of range [%lld, %lld)", (long long)idx[j], (long long)-d, (long long)d);
      for (int64_t k = 0; k < inner; k++) out[n++] = data[(o * d + at) * inner + k];
    }
  int orank = 0;
  for (int i = 0; i < axis; i++) odims[orank++] = dims[i];
  for (int i = 0; i < irank; i++) odims[orank++] = idims[i];
  for (int i = axis + 1; i < rank; i++) odims[orank++] = dims[i];
  return op_set_output_ints(c, 0, out, (int)n, odims, orank, op_input_dtype(c, 0));
}

static int lower_gather(op_ctx *c, const op_def *def) {
  mlxb_array *x, *idx;
  int64_t dims[OP_UTIL_MAX_RANK], idims[OP_UTIL_MAX_RANK];
  int rank = op_util_input_dims(c, 0, &x, dims), irank = rank < 0 ? -1 : op_util_input_dims(c, 1, &idx, idims);
  if (rank < 0 || irank < 0) return -1;
  if (rank == 0) return op_fail(c, "data must have rank >= 1");
  int axis = op_util_axis(ir_attr_int(op_node(c), "axis", 0), rank);
  if (axis < 0) return op_fail(c, "axis out of range for rank %d", rank);
  if (index_check_empty_axis(c, dims[axis], idx) < 0) return -1;
  if (gather_on_host(c, dims, rank, idims, irank, axis)) return gather_host(c, dims, rank, idims, irank, axis);
  return op_set_output(c, 0, mlxb_take(op_scope(c), x, index_checked(c, idx, dims[axis]), axis));
}

/* ---- GatherElements ----------------------------------------------------------------------- */

static int lower_gather_elements(op_ctx *c, const op_def *def) {
  mlxb_array *x, *idx;
  int64_t dims[OP_UTIL_MAX_RANK], idims[OP_UTIL_MAX_RANK];
  int rank = op_util_input_dims(c, 0, &x, dims);
  if (rank < 0 || op_util_input_dims(c, 1, &idx, idims) < 0) return -1;
  if (rank == 0 || mlxb_ndim(idx) != rank) return op_fail(c, "data and indices must have the same rank >= 1");
  int axis = op_util_axis(ir_attr_int(op_node(c), "axis", 0), rank);
  if (axis < 0) return op_fail(c, "axis out of range for rank %d", rank);
  if (index_check_empty_axis(c, dims[axis], idx) < 0) return -1;
  /* Indices may be shorter than data on other axes: narrow data there (MLX would broadcast). */
  int64_t start[OP_UTIL_MAX_RANK], stop[OP_UTIL_MAX_RANK], step[OP_UTIL_MAX_RANK];
  bool narrow = false;
  for (int i = 0; i < rank; i++) {
    start[i] = 0, step[i] = 1, stop[i] = dims[i];
    if (i == axis || idims[i] == dims[i]) continue;
    if (idims[i] > dims[i]) return op_fail(c, "indices dim %d (%lld) exceeds data's (%lld)", i, (long long)idims[i], (long long)dims[i]);
    stop[i] = idims[i], narrow = true;
  }
  mlxb_scope *s = op_scope(c);
  if (narrow) x = mlxb_slice(s, x, start, stop, step);
  return op_set_output(c, 0, mlxb_take_along_axis(s, x, index_checked(c, idx, dims[axis]), axis));
}

/* ---- GatherND ----------------------------------------------------------------------------- */

static int lower_gather_nd(op_ctx *c, const op_def *def) {
  mlxb_array *x, *idx;
  int64_t dims[OP_UTIL_MAX_RANK], idims[OP_UTIL_MAX_RANK];
  int r = op_util_input_dims(c, 0, &x, dims);
  int q = r < 0 ? -1 : op_util_input_dims(c, 1, &idx, idims);
  if (r < 0 || q < 0) return -1;
  int64_t b = ir_attr_int(op_node(c), "batch_dims", 0);
  if (q < 1 || b < 0 || b >= q || b >= r) return op_fail(c, "invalid batch_dims %lld for ranks %d, %d", (long long)b, r, q);
  int m = (int)idims[q - 1];
  if (m < 1 || b + m > r) return op_fail(c, "indices' last dimension %d does not fit data rank %d", m, r);
  mlxb_scope *s = op_scope(c);
  int64_t out[2 * OP_UTIL_MAX_RANK];
  int on = 0;
  for (int i = 0; i < q - 1; i++) out[on++] = idims[i];
  for (int i = (int)b + m; i < r; i++) out[on++] = dims[i];
  /* An empty result reads nothing: ORT gives it whatever the indices (and their batch dims) hold,
   * and so does the EP. */
  if (op_util_numel(out, on) == 0) return op_set_output(c, 0, mlxb_zeros(s, out, on, mlxb_type(x)));
  for (int i = 0; i < b; i++)
    if (dims[i] != idims[i]) return op_fail(c, "batch dimension %d differs between data and indices", i);
  /* Fold the batch dims into one axis of size B, indexed by a broadcast iota. */
  int64_t B = op_util_numel(dims, (int)b);
  int64_t xd[OP_UTIL_MAX_RANK], id[OP_UTIL_MAX_RANK];
  int xr = 0, ir = 0;
  if (b > 0) xd[xr++] = B, id[ir++] = B;
  for (int i = (int)b; i < r; i++) xd[xr++] = dims[i];
  for (int i = (int)b; i < q; i++) id[ir++] = idims[i];
  x = mlxb_reshape(s, x, xd, xr);
  idx = mlxb_reshape(s, idx, id, ir);
  mlxb_array *parts[OP_UTIL_MAX_RANK + 1];
  int axes[OP_UTIL_MAX_RANK + 1], n = 0;
  int64_t slice[OP_UTIL_MAX_RANK];
  if (b > 0) {
    parts[n] = index_iota(c, id, ir - 1, 0, mlxb_type(idx));
    axes[n++] = 0;
  }
  for (int k = 0; k < m; k++) {
    int a = (b > 0) + k;
    if (index_check_empty_axis(c, xd[a], idx) < 0) return -1;
    parts[n] = index_checked(c, index_component(c, idx, id, ir, k), xd[a]);
    axes[n++] = a;
  }
  for (int i = 0; i < xr; i++) slice[i] = i < n ? 1 : xd[i];
  mlxb_array *g = mlxb_gather(s, x, (const mlxb_array *const *)parts, n, axes, slice);
  return op_set_output(c, 0, mlxb_reshape(s, g, out, on));
}

/* ---- ScatterElements / ScatterND ---------------------------------------------------------- */

static bool scatter_mode(const char *reduction, mlxb_scatter_mode *mode) {
  static const struct {
    const char *name;
    mlxb_scatter_mode mode;
  } modes[] = {{"none", MLXB_SCATTER_SET},
               {"add", MLXB_SCATTER_ADD},
               {"mul", MLXB_SCATTER_PROD},
               {"max", MLXB_SCATTER_MAX},
               {"min", MLXB_SCATTER_MIN}};
  for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
    if (!strcmp(reduction, modes[i].name)) return *mode = modes[i].mode, true;
  return false;
}

static bool claim_scatter(claim_ctx *c, const op_def *def) {
  const char *red = ir_attr_string(c->node, "reduction", "none");
  mlxb_scatter_mode mode;
  if (!scatter_mode(red, &mode)) return claim_decline(c, "reduction '%s' is unknown", red);
  if (mode != MLXB_SCATTER_SET && claim_input_dtype(c, 0) == ONNX_BOOL)
    return claim_decline(c, "reduction '%s' on bool", red);
  return claim_rank(c, def);
}

static int lower_scatter_elements(op_ctx *c, const op_def *def) {
  mlxb_array *x, *idx, *upd;
  int64_t dims[OP_UTIL_MAX_RANK], idims[OP_UTIL_MAX_RANK], udims[OP_UTIL_MAX_RANK];
  int r = op_util_input_dims(c, 0, &x, dims);
  if (r < 0 || op_util_input_dims(c, 1, &idx, idims) < 0 || op_util_input_dims(c, 2, &upd, udims) < 0) return -1;
  mlxb_scatter_mode mode;
  if (!scatter_mode(ir_attr_string(op_node(c), "reduction", "none"), &mode)) return op_fail(c, "unknown reduction");
  if (r == 0 || mlxb_ndim(idx) != r || mlxb_ndim(upd) != r) return op_fail(c, "data, indices and updates need one rank >= 1");
  for (int i = 0; i < r; i++)
    if (idims[i] != udims[i]) return op_fail(c, "indices and updates differ in shape");
  int axis = op_util_axis(ir_attr_int(op_node(c), "axis", 0), r);
  if (axis < 0) return op_fail(c, "axis out of range for rank %d", r);
  for (int i = 0; i < r; i++)
    if (i != axis && idims[i] > dims[i]) return op_fail(c, "indices dim %d exceeds data's", i);
  if (index_check_empty_axis(c, dims[axis], idx) < 0) return -1;
  if (op_util_numel(idims, r) == 0) return op_set_output(c, 0, x);
  /* A full coordinate per update: the indices on `axis`, iotas elsewhere. */
  mlxb_scope *s = op_scope(c);
  mlxb_array *parts[OP_UTIL_MAX_RANK];
  int axes[OP_UTIL_MAX_RANK];
  mlxb_dtype t = mlxb_type(idx);
  for (int i = 0; i < r; i++) {
    parts[i] = i == axis ? index_checked(c, idx, dims[axis]) : index_iota(c, idims, r, i, t);
    axes[i] = i;
  }
  int64_t ud[2 * OP_UTIL_MAX_RANK];
  for (int i = 0; i < r; i++) ud[i] = idims[i], ud[r + i] = 1;
  upd = mlxb_reshape(s, upd, ud, 2 * r);
  return op_set_output(c, 0, mlxb_scatter(s, mode, x, (const mlxb_array *const *)parts, r, upd, axes));
}

static int lower_scatter_nd(op_ctx *c, const op_def *def) {
  mlxb_array *x, *idx, *upd;
  int64_t dims[OP_UTIL_MAX_RANK], idims[OP_UTIL_MAX_RANK], udims[OP_UTIL_MAX_RANK];
  int r = op_util_input_dims(c, 0, &x, dims);
  int q = r < 0 ? -1 : op_util_input_dims(c, 1, &idx, idims);
  if (q < 0 || op_util_input_dims(c, 2, &upd, udims) < 0) return -1;
  mlxb_scatter_mode mode;
  if (!scatter_mode(ir_attr_string(op_node(c), "reduction", "none"), &mode)) return op_fail(c, "unknown reduction");
  if (q < 1) return op_fail(c, "indices must have rank >= 1");
  int m = (int)idims[q - 1];
  if (m < 1 || m > r) return op_fail(c, "indices' last dimension %d does not fit data rank %d", m, r);
  /* updates: indices.shape[:-1] + data.shape[m:] */
  int ur = q - 1 + r - m;
  if (mlxb_ndim(upd) != ur) return op_fail(c, "updates have rank %d, expected %d", mlxb_ndim(upd), ur);
  for (int i = 0; i < ur; i++) {
    int64_t want = i < q - 1 ? idims[i] : dims[m + i - (q - 1)];
    if (udims[i] != want) return op_fail(c, "updates dim %d is %lld, expected %lld", i, (long long)udims[i], (long long)want);
  }
  if (op_util_numel(idims, q - 1) == 0) return op_set_output(c, 0, x);
  mlxb_scope *s = op_scope(c);
  mlxb_array *parts[OP_UTIL_MAX_RANK];
  int axes[OP_UTIL_MAX_RANK];
  for (int k = 0; k < m; k++) {
    if (index_check_empty_axis(c, dims[k], idx) < 0) return -1;
    parts[k] = index_checked(c, index_component(c, idx, idims, q, k), dims[k]);
    axes[k] = k;
  }
  int64_t ud[2 * OP_UTIL_MAX_RANK];
  int n = 0;
  for (int i = 0; i < q - 1; i++) ud[n++] = idims[i];
  for (int i = 0; i < m; i++) ud[n++] = 1;
  for (int i = m; i < r; i++) ud[n++] = dims[i];
  upd = mlxb_reshape(s, upd, ud, n);
  return op_set_output(c, 0, mlxb_scatter(s, mode, x, (const mlxb_array *const *)parts, m, upd, axes));
}

/* ---- OneHot ------------------------------------------------------------------------------- */

static int lower_one_hot(op_ctx *c, const op_def *def) {
  mlxb_array *idx, *vals;
  int64_t idims[OP_UTIL_MAX_RANK], vdims[OP_UTIL_MAX_RANK];
  int r = op_util_input_dims(c, 0, &idx, idims);
  if (r < 0 || op_util_input_dims(c, 2, &vals, vdims) < 0) return -1;
  if (r + 1 > OP_UTIL_MAX_RANK) return op_fail(c, "indices rank %d too large", r);
  if (mlxb_size(vals) != 2) return op_fail(c, "values must hold [off, on]");
  int64_t depth;
  if (op_util_onnx_is_float(op_input_dtype(c, 1))) {
    double d;
    if (op_input_doubles(c, 1, &d, 1) != 1) return op_fail(c, "depth must hold one value");
    if (!(d > -0x1p63 && d < 0x1p63)) return op_fail(c, "depth %g is not a count", d);
    depth = (int64_t)d; /* ORT casts the depth to int64 */
  } else if (op_input_ints(c, 1, &depth, 1) != 1) {
    return op_fail(c, "depth must hold one value");
  }
  if (depth <= 0) return op_fail(c, "depth %lld must be positive", (long long)depth);
  if (depth > INT32_MAX) /* an output dim MLX cannot make, even for empty indices */
    return op_fail(c, "depth %lld does not fit in int32 (MLX's dims)", (long long)depth);
  int axis = op_util_axis(ir_attr_int(op_node(c), "axis", -1), r + 1);
  if (axis < 0) return op_fail(c, "axis out of range for output rank %d", r + 1);
  mlxb_scope *s = op_scope(c);
  /* Compare in a dtype that holds every index and position exactly, as ORT compares
   * index == position: float indices in float32/64 (1.5 matches nothing), signed ones in int64,
   * unsigned ones in uint64 (never negative). Indices in [-depth, -1] count from the end. */
  int32_t it = op_input_dtype(c, 0);
  bool is_unsigned = it == ONNX_UINT8 || it == ONNX_UINT16 || it == ONNX_UINT32 || it == ONNX_UINT64;
  mlxb_dtype ct = is_unsigned ? MLXB_U64 : MLXB_I64;
  if (op_util_onnx_is_float(it)) ct = it == ONNX_DOUBLE ? MLXB_F64 : MLXB_F32;
  if (ct == MLXB_F32 && depth > (1 << 24)) return op_fail(c, "depth %lld is too large for float indices", (long long)depth);
  mlxb_array *pos = mlxb_astype(s, idx, ct);
  if (!is_unsigned) {
    mlxb_array *neg = mlxb_binary(s, MLXB_LESS, pos, mlxb_scalar_i64(s, 0, ct));
    pos = mlxb_where(s, neg, mlxb_binary(s, MLXB_ADD, pos, mlxb_scalar_i64(s, depth, ct)), pos);
  }
  int64_t ed[OP_UTIL_MAX_RANK];
  for (int i = 0, j = 0; i <= r; i++) ed[i] = i == axis ? 1 : idims[j++];
  mlxb_array *iota = op_util_iota(s, 0, depth, axis, r + 1, ct);
  mlxb_array *hit = mlxb_binary(s, MLXB_EQUAL, mlxb_reshape(s, pos, ed, r + 1), iota);
  mlxb_array *flat = mlxb_reshape(s, vals, (const int64_t[]){2}, 1);
  mlxb_array *off = mlxb_reshape(s, op_util_slice_axis(s, flat, 0, 0, 1, 1), NULL, 0);
  mlxb_array *on = mlxb_reshape(s, op_util_slice_axis(s, flat, 0, 1, 2, 1), NULL, 0);
  return op_set_output(c, 0, mlxb_where(s, hit, on, off));
}

/* ---- Compress ----------------------------------------------------------------------------- */

static int lower_compress(op_ctx *c, const op_def *def) {
  mlxb_array *x, *cond;
  int64_t dims[OP_UTIL_MAX_RANK], cdims[OP_UTIL_MAX_RANK];
  int r = op_util_input_dims(c, 0, &x, dims);
  if (r < 0 || op_util_input_dims(c, 1, &cond, cdims) < 0) return -1;
  if (mlxb_ndim(cond) != 1) return op_fail(c, "condition must be 1-D");
  mlxb_scope *s = op_scope(c);
  const ir_attr *axis_attr = ir_node_attr(op_node(c), "axis");
  int axis = 0;
  int64_t dim;
  if (axis_attr) {
    axis = op_util_axis(axis_attr->i, r);
    if (axis < 0) return op_fail(c, "axis out of range for rank %d", r);
    dim = dims[axis];
  } else {
    dim = op_util_numel(dims, r);
    x = mlxb_reshape(s, x, &dim, 1);
  }
  /* The condition's values decide the output shape: read them on the host. Entries past the
   * axis are ignored (ORT does the same). */
  int64_t n = cdims[0];
  int64_t *keep = malloc((size_t)(n ? n : 1) * sizeof *keep);
  if (!keep) return op_fail(c, "out of memory");
  if (n && op_input_ints(c, 1, keep, (int)n) != n) {
    free(keep);
    return op_fail(c, "cannot read the condition");
  }
  int64_t k = 0;
  for (int64_t i = 0; i < n && i < dim; i++)
    if (keep[i]) keep[k++] = i;
  mlxb_array *sel = mlxb_from_data(s, keep, &k, 1, MLXB_I64);
  free(keep);
  return op_set_output(c, 0, mlxb_take(s, x, sel, axis));
}

/* ---- the table ---------------------------------------------------------------------------- */

#define DT_INDEX (DT(ONNX_INT32) | DT(ONNX_INT64))

static bool claim_indices(claim_ctx *c, const op_def *def) {
  int32_t t = claim_input_dtype(c, 1);
  if (t != ONNX_UNDEFINED && !(DT_INDEX & DT(t))) return claim_decline(c, "indices dtype %s", ir_dtype_name(t));
  return claim_rank(c, def);
}

static bool claim_scatter_indices(claim_ctx *c, const op_def *def) {
  return claim_indices(c, def) && claim_scatter(c, def);
}

static bool claim_one_hot(claim_ctx *c, const op_def *def) {
  int32_t t = claim_input_dtype(c, 0);
  if (t == ONNX_BOOL) return claim_decline(c, "bool indices");
  return claim_rank(c, def);
}

static bool claim_input0_rank(claim_ctx *c, const op_def *def) { return op_util_claim_input_rank(c, 0); }

/* ---- ReverseSequence ---------------------------------------------------------------------- */

/* out[t, b] = in[len[b] - 1 - t, b] for t < len[b], else in[t, b]: one gather along time.
 * A length outside [0, T] fails the Run, as in ORT; the gather's lengths are clipped into
 * [0, T] as well, so none reaches memory outside x. */
static int lower_reverse_sequence(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x = op_input(c, 0), *lens = op_input(c, 1);
  int64_t dims[OP_UTIL_MAX_RANK];
  int r = op_util_dims(c, x, dims);
  if (r < 0) return -1;
  const ir_node *n = op_node(c);
  int64_t ta = ir_attr_int(n, "time_axis", 0), ba = ir_attr_int(n, "batch_axis", 1);
  if (r < 2 || !((ta == 0 && ba == 1) || (ta == 1 && ba == 0))) return op_fail(c, "time_axis/batch_axis must be 0/1 or 1/0 on rank >= 2");
  int64_t steps = dims[ta], batch = dims[ba];
  if (mlxb_ndim(lens) != 1 || mlxb_dim(lens, 0) != batch) return op_fail(c, "sequence_lens must hold one length per batch entry");
  if (op_util_require_range(c, lens, 0, steps + 1, "sequence length")) return -1;
  int64_t bshape[2];
  bshape[ta] = 1, bshape[ba] = batch;
  mlxb_array *t = op_util_iota(s, 0, steps, (int)ta, 2, MLXB_I64);
  mlxb_array *len = mlxb_clip(s, mlxb_astype(s, lens, MLXB_I64), mlxb_scalar_i64(s, 0, MLXB_I64), mlxb_scalar_i64(s, steps, MLXB_I64));
  len = mlxb_reshape(s, len, bshape, 2);
  mlxb_array *rev = mlxb_binary(s, MLXB_SUB, mlxb_binary(s, MLXB_SUB, len, mlxb_scalar_i64(s, 1, MLXB_I64)), t);
  mlxb_array *idx = mlxb_where(s, mlxb_binary(s, MLXB_LESS, t, len), rev, t);
  int64_t idims[OP_UTIL_MAX_RANK];
  for (int i = 0; i < r; i++) idims[i] = i < 2 ? (i == ta ? steps : batch) : 1;
  idx = mlxb_broadcast_to(s, mlxb_reshape(s, idx, idims, r), dims, r);
  return op_set_output(c, 0, mlxb_take_along_axis(s, x, idx, (int)ta));
}

/* ---- TensorScatter ------------------------------------------------------------------------ */

static bool claim_tensor_scatter(claim_ctx *c, const op_def *def) {
  const char *mode = ir_attr_string(c->node, "mode", "linear");
  if (strcmp(mode, "linear") && strcmp(mode, "circular")) return claim_decline(c, "mode '%s' is unknown", mode);
  return op_util_claim_input_rank(c, 0);
}

/* present = past with update written at write_indices[b] + s (mod the cache length when
 * circular) along axis; linear positions past the end are clipped (ORT rejects them). */
static int lower_tensor_scatter(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *past = op_input(c, 0), *upd = op_input(c, 1), *w = op_input(c, 2);
  int64_t dims[OP_UTIL_MAX_RANK], udims[OP_UTIL_MAX_RANK];
  int r = op_util_dims(c, past, dims);
  if (r < 0 || op_util_dims(c, upd, udims) != r)
    return op_fail(c, "past_cache and update ranks differ");
  int axis = op_util_axis(ir_attr_int(op_node(c), "axis", -2), r);
  if (r < 2 || axis <= 0) return op_fail(c, "axis must name a non-batch axis");
  for (int i = 0; i < r; i++)
    if (i != axis && dims[i] != udims[i]) return op_fail(c, "update differs from past_cache outside the sequence axis");
  int64_t cache = dims[axis], seq = udims[axis], batch = dims[0];
  if (seq > cache) return op_fail(c, "update holds %lld steps, the cache %lld", (long long)seq, (long long)cache);
  if (seq == 0 || mlxb_size(upd) == 0) return op_set_output(c, 0, past);
  bool circular = !strcmp(ir_attr_string(op_node(c), "mode", "linear"), "circular");
  int64_t bshape[2] = {batch, 1};
  mlxb_array *start = w ? mlxb_reshape(s, mlxb_astype(s, w, MLXB_I64), bshape, 2) : mlxb_zeros(s, bshape, 2, MLXB_I64);
  if (w && (mlxb_ndim(w) != 1 || mlxb_dim(w, 0) != batch)) return op_fail(c, "write_indices must hold one index per batch entry");
  mlxb_array *pos = mlxb_binary(s, MLXB_ADD, start, op_util_iota(s, 0, seq, 1, 2, MLXB_I64));
  mlxb_array *cl = mlxb_scalar_i64(s, cache, MLXB_I64);
  pos = circular ? mlxb_binary(s, MLXB_REMAINDER, pos, cl)
                 : mlxb_clip(s, pos, mlxb_scalar_i64(s, 0, MLXB_I64), mlxb_scalar_i64(s, cache - 1, MLXB_I64));
  int64_t pdims[OP_UTIL_MAX_RANK];
  for (int i = 0; i < r; i++) pdims[i] = i == 0 ? batch : i == axis ? seq : 1;
  mlxb_array *idx = mlxb_broadcast_to(s, mlxb_reshape(s, pos, pdims, r), udims, r);
  return op_set_output(c, 0, mlxb_put_along_axis(s, past, idx, upd, axis));
}

/* Gather of one constant index from a 1-D shape vector whose element j is a padded length:
 * the result is that padded length when the index is j, unaffected otherwise. */
static bool pad_gather(const ir_graph *g, const ir_node *n, const pad_fact *in, pad_fact *out,
                     pad_bound *bound) {
  const ir_value *data = &g->values[n->inputs[0]];
  if (in[0].kind != PAD_LENGTH || in[1].kind != PAD_NONE || data->rank != 1 || data->dims[0] < 0) return false;
  if (ir_attr_int(n, "axis", 0) != 0) return false;
  claim_ctx c = {.graph = g, .node = n};
  const ir_value *idx = claim_input(&c, 1);
  int64_t i;
  if (!idx || idx->rank > 1 || claim_const_ints(&c, 1, &i, 1) != 1) return false;
  if (i < 0) i += data->dims[0];
  if (i == in[0].axis) out[0] = (pad_fact){PAD_LENGTH, 0};
  return true;
}

static const op_def defs[] = {
  OP_ROW("", "Gather", 1, 13, .inputs = {2, 2}, .outputs = {1, 1}, .dtypes = DT_ALL, .claim = claim_indices,
         .lower = lower_gather, .pad = pad_gather,
         .doc = "int32/int64 indices, negative indices wrap, negative axis; an index outside [-n, n) fails the Run"),
  OP_ROW("", "GatherElements", 11, 13, .inputs = {2, 2}, .outputs = {1, 1}, .dtypes = DT_ALL, .claim = claim_indices,
         .lower = lower_gather_elements,
         .doc = "int32/int64 indices, negative indices wrap; indices may be shorter than data on other axes; an "
                "index outside [-n, n) fails the Run"),
  OP_ROW("com.microsoft", "GatherND", 1, 1, .inputs = {2, 2}, .outputs = {1, 1}, .dtypes = DT_ALL, .claim = claim_indices,
         .lower = lower_gather_nd, .doc = "the contrib form: GatherND without batch_dims, the same index rules"),
  OP_ROW("", "GatherND", 11, 13, .inputs = {2, 2}, .outputs = {1, 1}, .dtypes = DT_ALL, .claim = claim_indices,
         .lower = lower_gather_nd,
         .doc = "int64 indices, batch_dims (12+), negative indices wrap; an empty last index axis is declined at run "
                "time; an index outside [-n, n) fails the Run"),
  OP_ROW("", "ScatterElements", 11, 18, .inputs = {3, 3}, .outputs = {1, 1}, .dtypes = DT_ALL,
         .claim = claim_scatter_indices, .lower = lower_scatter_elements,
         .doc = "reduction none/add/mul/max/min (reductions on bool declined); duplicate indices with none keep one "
                "update; an index outside [-n, n) fails the Run"),
  OP_ROW("", "ScatterND", 11, 18, .inputs = {3, 3}, .outputs = {1, 1}, .dtypes = DT_ALL, .claim = claim_scatter_indices,
         .lower = lower_scatter_nd,
         .doc = "reduction none/add/mul/max/min (reductions on bool declined); duplicate indices with none keep one "
                "update; an index outside [-n, n) fails the Run"),
  OP_ROW("", "OneHot", 9, 11, .inputs = {3, 3}, .outputs = {1, 1}, .dtypes = DT_NUMERIC, .claim = claim_one_hot,
         .lower = lower_one_hot,
         .doc = "depth read on the host; negative indices count from depth, out-of-range or non-integral indices "
                "give off_value"),
  OP_ROW("", "Compress", 9, 11, .inputs = {2, 2}, .outputs = {1, 1}, .dtypes = DT_ALL, .claim = claim_rank,
         .lower = lower_compress,
         .doc = "the condition is read on the host (its values decide the output shape); with or without axis"),
  OP_ROW("", "ReverseSequence", 10, 28, .inputs = {2, 2}, .outputs = {1, 1}, .dtypes = DT_ALL,
         .claim = claim_input0_rank, .lower = lower_reverse_sequence,
         .doc = "time_axis/batch_axis 0/1 and 1/0, any rank >= 2; a length outside [0, T] fails the Run"),
  OP_ROW("", "TensorScatter", 24, 24, .inputs = {2, 3}, .outputs = {1, 1}, .dtypes = DT_ALL,
         .claim = claim_tensor_scatter, .lower = lower_tensor_scatter,
         .doc = "linear and circular modes, optional write_indices, any sequence axis but 0; linear writes past the "
                "cache end are clipped (ORT rejects them)"),
  OP_ROW("", "Scatter", 9, 10, .inputs = {3, 3}, .outputs = {1, 1}, .dtypes = DT_ALL, .claim = claim_scatter_indices,
         .lower = lower_scatter_elements,
         .doc = "the deprecated name of ScatterElements (same lowering, reduction none)"),
};

OPS_FAMILY(indexing, defs);
