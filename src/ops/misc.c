/* Assorted ops: Dropout (inference), Det (LU on MLX), ReverseSequence, TensorScatter, the legacy
 * Scatter (lowered by the ScatterElements row), and the data-dependent NonZero and Unique, whose
 * output shapes come from their input values: those are read on the host and the results built
 * from host-made index arrays. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op_util.h"

#define MISC_MAX_RANK OP_UTIL_MAX_RANK

/* ---- helpers ------------------------------------------------------------------------------ */

static bool claim_rank_limit(claim_ctx *c, const op_def *def) {
  const ir_value *x = claim_input(c, 0);
  if (x && x->rank > MISC_MAX_RANK - 1) return claim_decline(c, "rank %d is too large", x->rank);
  return true;
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
  if (!x) return op_check(c) ? -1 : op_fail(c, "input is required");
  if (op_set_output(c, 0, x)) return -1;
  if (!op_has_output(c, 1)) return 0;
  int mt = op_mlx_dtype(op_output_dtype(c, 1));
  if (mt < 0) mt = MLXB_BOOL;
  int64_t dims[MISC_MAX_RANK];
  int r = op_util_dims(c, x, dims);
  if (r < 0) return -1;
  bool on = op_node(c)->since_version >= 12;
  mlxb_array *v = mlxb_scalar_i64(s, on ? 1 : 0, (mlxb_dtype)mt);
  return op_set_output(c, 1, mlxb_full(s, dims, r, v, (mlxb_dtype)mt));
}

/* ---- Det ---------------------------------------------------------------------------------- */

/* det = prod(diag(U)) * (-1)^(row swaps) from MLX's partially pivoted LU (as Eigen's, which ORT
 * uses); float16 is factored in float32 and rounded once. */
static int lower_det(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x;
  int64_t dims[MISC_MAX_RANK];
  int r = op_util_input_dims(c, 0, &x, dims);
  if (r < 0) return -1;
  if (r < 2 || dims[r - 1] != dims[r - 2]) return op_fail(c, "input must be [..., M, M]");
  mlxb_dtype out = mlxb_type(x), work = out == MLXB_F64 ? MLXB_F64 : MLXB_F32;
  int64_t n = dims[r - 1];
  if (n == 0) return op_set_output(c, 0, mlxb_full(s, dims, r - 2, mlxb_scalar_f64(s, 1.0, out), out));
  if (op_util_numel(dims, r - 2) == 0) return op_set_output(c, 0, mlxb_zeros(s, dims, r - 2, out));
  mlxb_array *lu, *piv;
  if (mlxb_lu_factor(s, mlxb_astype(s, x, work), &lu, &piv)) return op_check(c);
  int64_t idims[MISC_MAX_RANK];
  for (int i = 0; i < r; i++) idims[i] = i == r - 1 ? 1 : dims[i];
  int64_t col[2] = {n, 1};
  mlxb_array *iota = mlxb_arange(s, 0, (double)n, 1, MLXB_I32);
  mlxb_array *idx = mlxb_broadcast_to(s, mlxb_reshape(s, iota, col, 2), idims, r);
  mlxb_array *diag = mlxb_take_along_axis(s, lu, idx, r - 1);
  int last = r - 1, rows = r - 2;
  mlxb_array *prod = mlxb_reduce(s, MLXB_RPROD, mlxb_squeeze(s, diag, &last, 1), &rows, 1, false);
  /* Each pivot that is not its own row is one swap. */
  mlxb_array *swaps = mlxb_binary(s, MLXB_NOT_EQUAL, mlxb_astype(s, piv, MLXB_I32), iota);
  int pax = r - 2;
  mlxb_array *odd = mlxb_binary(s, MLXB_REMAINDER, mlxb_reduce(s, MLXB_RSUM, mlxb_astype(s, swaps, MLXB_I32), &pax, 1, false),
                                mlxb_scalar_i64(s, 2, MLXB_I32));
  mlxb_array *det = mlxb_where(s, mlxb_astype(s, odd, MLXB_BOOL), mlxb_unary(s, MLXB_NEG, prod), prod);
  return op_set_output(c, 0, mlxb_astype(s, det, out));
}

/* ---- ReverseSequence ---------------------------------------------------------------------- */

/* out[t, b] = in[len[b] - 1 - t, b] for t < len[b], else in[t, b]: one gather along time.
 * Lengths are clipped into [0, T] (ORT rejects others). */
static int lower_reverse_sequence(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x = op_input(c, 0), *lens = op_input(c, 1);
  if (!x || !lens) return op_check(c) ? -1 : op_fail(c, "input and sequence_lens are required");
  int64_t dims[MISC_MAX_RANK];
  int r = op_util_dims(c, x, dims);
  if (r < 0) return -1;
  const ir_node *n = op_node(c);
  int64_t ta = ir_attr_int(n, "time_axis", 0), ba = ir_attr_int(n, "batch_axis", 1);
  if (r < 2 || !((ta == 0 && ba == 1) || (ta == 1 && ba == 0))) return op_fail(c, "time_axis/batch_axis must be 0/1 or 1/0 on rank >= 2");
  int64_t steps = dims[ta], batch = dims[ba];
  if (mlxb_ndim(lens) != 1 || mlxb_dim(lens, 0) != batch) return op_fail(c, "sequence_lens must hold one length per batch entry");
  int64_t bshape[2];
  bshape[ta] = 1, bshape[ba] = batch;
  mlxb_array *t = op_util_iota(s, 0, steps, (int)ta, 2, MLXB_I64);
  mlxb_array *len = mlxb_clip(s, mlxb_astype(s, lens, MLXB_I64), mlxb_scalar_i64(s, 0, MLXB_I64), mlxb_scalar_i64(s, steps, MLXB_I64));
  len = mlxb_reshape(s, len, bshape, 2);
  mlxb_array *rev = mlxb_binary(s, MLXB_SUB, mlxb_binary(s, MLXB_SUB, len, mlxb_scalar_i64(s, 1, MLXB_I64)), t);
  mlxb_array *idx = mlxb_where(s, mlxb_binary(s, MLXB_LESS, t, len), rev, t);
  int64_t idims[MISC_MAX_RANK];
  for (int i = 0; i < r; i++) idims[i] = i < 2 ? (i == ta ? steps : batch) : 1;
  idx = mlxb_broadcast_to(s, mlxb_reshape(s, idx, idims, r), dims, r);
  return op_set_output(c, 0, mlxb_take_along_axis(s, x, idx, (int)ta));
}

/* ---- TensorScatter ------------------------------------------------------------------------ */

static bool claim_tensor_scatter(claim_ctx *c, const op_def *def) {
  const char *mode = ir_attr_string(c->node, "mode", "linear");
  if (strcmp(mode, "linear") && strcmp(mode, "circular")) return claim_decline(c, "mode '%s' is unknown", mode);
  return claim_rank_limit(c, def);
}

/* present = past with update written at write_indices[b] + s (mod the cache length when
 * circular) along axis; linear positions past the end are clipped (ORT rejects them). */
static int lower_tensor_scatter(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *past = op_input(c, 0), *upd = op_input(c, 1), *w = op_input(c, 2);
  if (!past || !upd) return op_check(c) ? -1 : op_fail(c, "past_cache and update are required");
  int64_t dims[MISC_MAX_RANK], udims[MISC_MAX_RANK];
  int r = op_util_dims(c, past, dims);
  if (r < 0 || op_util_dims(c, upd, udims) != r)
    return op_check(c) ? -1 : op_fail(c, "past_cache and update ranks differ");
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
  int64_t pdims[MISC_MAX_RANK];
  for (int i = 0; i < r; i++) pdims[i] = i == 0 ? batch : i == axis ? seq : 1;
  mlxb_array *idx = mlxb_broadcast_to(s, mlxb_reshape(s, pos, pdims, r), udims, r);
  return op_set_output(c, 0, mlxb_put_along_axis(s, past, idx, upd, axis));
}

/* ---- Scatter (opsets 9-10): ScatterElements under its old name ---------------------------- */

static const op_def *scatter_elements_row(void) { return op_registry_find("", "ScatterElements", 11); }

static bool claim_scatter(claim_ctx *c, const op_def *def) {
  const op_def *se = scatter_elements_row();
  if (!se) return claim_decline(c, "no ScatterElements row to lower it");
  return se->claim ? se->claim(c, se) : true;
}

static int lower_scatter(op_ctx *c, const op_def *def) {
  const op_def *se = scatter_elements_row();
  if (!se) return op_fail(c, "no ScatterElements row to lower it");
  return se->lower(c, se);
}

/* ---- host reads of data-dependent ops ----------------------------------------------------- */

/* Every element of input i on the host: floats as doubles, integers and bools as int64 (exact
 * for every dtype; uint64 keeps its bits). One of *f / *q is set; free() it. */
static int host_values(op_ctx *c, int i, size_t count, double **f, int64_t **q) {
  *f = NULL, *q = NULL;
  if (count > (size_t)INT32_MAX) return op_fail(c, "input %d has too many elements to read", i);
  if (op_util_onnx_is_float(op_input_dtype(c, i))) {
    *f = malloc((count ? count : 1) * sizeof **f);
    if (!*f) return op_fail(c, "out of memory");
    if (op_input_doubles(c, i, *f, (int)count) != (int)count) return free(*f), *f = NULL, op_check(c) ? -1 : op_fail(c, "cannot read input %d", i);
    return 0;
  }
  *q = malloc((count ? count : 1) * sizeof **q);
  if (!*q) return op_fail(c, "out of memory");
  if (op_input_ints(c, i, *q, (int)count) != (int)count) return free(*q), *q = NULL, op_check(c) ? -1 : op_fail(c, "cannot read input %d", i);
  return 0;
}

/* ---- NonZero ------------------------------------------------------------------------------ */

static bool claim_nonzero(claim_ctx *c, const op_def *def) {
  const ir_value *x = claim_input(c, 0);
  if (x && x->rank == 0) return claim_decline(c, "scalar input (ONNX says [0, N], ORT gives [1, N])");
  return claim_rank_limit(c, def);
}

/* The coordinates of every nonzero element, row-major: int64 [rank, count]. NaN counts as
 * nonzero. A scalar gives [1, count], as ORT does. */
static int lower_nonzero(op_ctx *c, const op_def *def) {
  mlxb_array *x;
  int64_t dims[MISC_MAX_RANK];
  int r = op_util_input_dims(c, 0, &x, dims);
  if (r < 0) return -1;
  size_t n = mlxb_size(x);
  double *f;
  int64_t *q;
  if (host_values(c, 0, n, &f, &q)) return -1;
  size_t nz = 0;
  for (size_t k = 0; k < n; k++) nz += f ? f[k] != 0 : q[k] != 0;
  int rows = r > 0 ? r : 1;
  int64_t *out = malloc((size_t)rows * (nz ? nz : 1) * sizeof *out);
  if (!out) {
    free(f), free(q);
    return op_fail(c, "out of memory");
  }
  size_t j = 0;
  for (size_t k = 0; k < n; k++) {
    if (f ? f[k] == 0 : q[k] == 0) continue;
    size_t rest = k;
    for (int a = r - 1; a >= 0; a--) {
      out[(size_t)a * nz + j] = (int64_t)(rest % (size_t)dims[a]);
      rest /= (size_t)dims[a];
    }
    if (r == 0) out[j] = 0;
    j++;
  }
  int64_t odims[2] = {rows, (int64_t)nz};
  mlxb_array *y = mlxb_from_data(op_scope(c), nz ? out : NULL, odims, 2, MLXB_I64);
  free(out), free(f), free(q);
  return op_set_output(c, 0, y);
}

/* ---- Unique ------------------------------------------------------------------------------- */

typedef struct unique_rows {
  const double *f;   /* the input row-major as floats, or NULL */
  const int64_t *q;  /* the same as integers, or NULL */
  bool unsigned64;   /* q holds uint64 bits */
  size_t rows;       /* entries along the unique axis (all elements without axis) */
  size_t inner;      /* elements after the axis */
  size_t width;      /* elements per row: before-axis count * inner */
} unique_rows;

/* Flat position of element k of row i. */
static size_t unique_at(const unique_rows *u, size_t i, size_t k) {
  size_t outer = k / u->inner, in = k % u->inner;
  return (outer * u->rows + i) * u->inner + in;
}

/* Lexicographic comparison of rows a and b (NaN compares equal to everything). */
static int unique_cmp(const unique_rows *u, size_t a, size_t b) {
  for (size_t k = 0; k < u->width; k++) {
    size_t ia = unique_at(u, a, k), ib = unique_at(u, b, k);
    if (u->f) {
      if (u->f[ia] < u->f[ib]) return -1;
      if (u->f[ia] > u->f[ib]) return 1;
    } else if (u->unsigned64) {
      uint64_t x = (uint64_t)u->q[ia], y = (uint64_t)u->q[ib];
      if (x != y) return x < y ? -1 : 1;
    } else if (u->q[ia] != u->q[ib]) {
      return u->q[ia] < u->q[ib] ? -1 : 1;
    }
  }
  return 0;
}

/* Stable merge sort of idx[0..n) by row content (tmp has n entries); ties keep input order, so
 * the first row of every run of equal rows is its first occurrence. */
static void unique_sort(const unique_rows *u, int64_t *idx, int64_t *tmp, size_t n) {
  for (size_t width = 1; width < n; width *= 2) {
    for (size_t lo = 0; lo < n; lo += 2 * width) {
      size_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
      size_t i = lo, j = mid, k = lo;
      while (i < mid && j < hi) tmp[k++] = unique_cmp(u, (size_t)idx[j], (size_t)idx[i]) < 0 ? idx[j++] : idx[i++];
      while (i < mid) tmp[k++] = idx[i++];
      while (j < hi) tmp[k++] = idx[j++];
    }
    memcpy(idx, tmp, n * sizeof *idx);
  }
}

/* The work arrays of one Unique, each of `rows` entries. */
typedef struct unique_work {
  int64_t *order;  /* row indices sorted by content; later each row's output group */
  int64_t *tmp;    /* sort scratch; later the first occurrence of each output group */
  int64_t *group;  /* sorted group of each row */
  int64_t *first;  /* first occurrence of each sorted group */
  int64_t *counts; /* size of each sorted group */
  int64_t *rank;   /* output position of each sorted group */
  int64_t *ocount; /* counts in output order */
} unique_work;

static void unique_work_free(unique_work *w) {
  free(w->order), free(w->tmp), free(w->group), free(w->first), free(w->counts), free(w->rank), free(w->ocount);
}

static bool unique_work_alloc(unique_work *w, size_t rows) {
  size_t b = (rows ? rows : 1) * sizeof(int64_t);
  w->order = malloc(b), w->tmp = malloc(b), w->group = malloc(b), w->first = malloc(b);
  w->counts = malloc(b), w->rank = malloc(b), w->ocount = malloc(b);
  return w->order && w->tmp && w->group && w->first && w->counts && w->rank && w->ocount;
}

/* Groups equal rows; returns the number of groups and fills order/tmp/ocount in output order:
 * order[i] = output group of row i, tmp[g] = first occurrence, ocount[g] = count. */
static size_t unique_group(const unique_rows *u, unique_work *w, bool sorted) {
  size_t rows = u->rows, groups = 0;
  for (size_t i = 0; i < rows; i++) w->order[i] = (int64_t)i;
  unique_sort(u, w->order, w->tmp, rows);
  for (size_t i = 0; i < rows; i++) {
    if (i == 0 || unique_cmp(u, (size_t)w->order[i - 1], (size_t)w->order[i]) != 0) {
      w->first[groups] = w->order[i], w->counts[groups] = 0;
      groups++;
    }
    w->group[w->order[i]] = (int64_t)groups - 1;
    w->counts[groups - 1]++;
  }
  /* Output position of each group: its sorted rank, or its order of first occurrence. */
  size_t next = 0;
  for (size_t g = 0; g < groups; g++) w->rank[g] = sorted ? (int64_t)g : -1;
  for (size_t i = 0; !sorted && i < rows; i++)
    if (w->rank[w->group[i]] < 0) w->rank[w->group[i]] = (int64_t)next++;
  for (size_t g = 0; g < groups; g++) w->tmp[w->rank[g]] = w->first[g], w->ocount[w->rank[g]] = w->counts[g];
  for (size_t i = 0; i < rows; i++) w->order[i] = w->rank[w->group[i]];
  return groups;
}

static int lower_unique(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x;
  int64_t dims[MISC_MAX_RANK];
  int r = op_util_input_dims(c, 0, &x, dims);
  if (r < 0) return -1;
  const ir_node *n = op_node(c);
  const ir_attr *axis_attr = ir_node_attr(n, "axis");
  bool sorted = ir_attr_int(n, "sorted", 1) != 0;
  size_t total = mlxb_size(x);
  unique_rows u = {NULL, NULL, op_input_dtype(c, 0) == ONNX_UINT64, total, 1, 1};
  int axis = 0;
  if (axis_attr) {
    axis = op_util_axis(axis_attr->i, r);
    if (axis < 0) return op_fail(c, "axis out of range for rank %d", r);
    u.rows = (size_t)dims[axis];
    for (int i = axis + 1; i < r; i++) u.inner *= (size_t)dims[i];
    u.width = u.rows ? total / u.rows : 0;
    if (u.inner == 0) u.inner = 1; /* rows of no elements: all equal */
  } else {
    int64_t flat = (int64_t)total;
    x = mlxb_reshape(s, x, &flat, 1);
  }
  double *f;
  int64_t *q;
  if (host_values(c, 0, total, &f, &q)) return -1;
  u.f = f, u.q = q;
  unique_work w = {0};
  int rc = -1;
  if (!unique_work_alloc(&w, u.rows)) {
    op_fail(c, "out of memory");
    goto done;
  }
  int64_t k = (int64_t)unique_group(&u, &w, sorted), nrows = (int64_t)u.rows;
  mlxb_array *sel = mlxb_from_data(s, k ? w.tmp : NULL, &k, 1, MLXB_I64);
  if (op_set_output(c, 0, mlxb_take(s, x, sel, axis))) goto done;
  if (op_has_output(c, 1) && op_set_output(c, 1, sel)) goto done;
  if (op_has_output(c, 2) && op_set_output(c, 2, mlxb_from_data(s, nrows ? w.order : NULL, &nrows, 1, MLXB_I64))) goto done;
  if (op_has_output(c, 3) && op_set_output(c, 3, mlxb_from_data(s, k ? w.ocount : NULL, &k, 1, MLXB_I64))) goto done;
  rc = 0;
done:
  unique_work_free(&w);
  free(f), free(q);
  return rc;
}

/* ---- the table ---------------------------------------------------------------------------- */

static const op_def defs[] = {
  {"", "Dropout", 7, 22, DT_FLOAT, claim_dropout, lower_dropout, 0, 0,
   "inference (or training with a constant ratio of 0): identity, with ORT's mask (all false before opset 12, "
   "all true after). Declined: training_mode that is not a constant, or true with a ratio other than a constant 0"},
  {"", "Det", 11, 22, DT_F32 | DT_F16 | DT_F64, claim_rank_limit, lower_det, 0, 0,
   "float32/float16/float64 [..., M, M] via MLX's partially pivoted LU on the CPU (float16 factored in float32)"},
  {"", "ReverseSequence", 10, 28, DT_ALL, claim_rank_limit, lower_reverse_sequence, 0, 0,
   "time_axis/batch_axis 0/1 and 1/0, any rank >= 2; lengths clipped into [0, T] (ORT rejects others)"},
  {"", "TensorScatter", 24, 24, DT_ALL, claim_tensor_scatter, lower_tensor_scatter, 0, 0,
   "linear and circular modes, optional write_indices, any sequence axis but 0; linear writes past the cache "
   "end are clipped (ORT rejects them)"},
  {"", "Scatter", 9, 10, DT_ALL, claim_scatter, lower_scatter, 0, 0,
   "the deprecated name of ScatterElements (same lowering, reduction none)"},
  {"", "NonZero", 9, 13, DT_ALL, claim_nonzero, lower_nonzero, 0, OP_FLAG_HOST_VALUES,
   "any dtype; the input is read on the host (the output shape depends on it); NaN counts as nonzero. "
   "Declined: scalar inputs (ONNX and ORT disagree on the shape)"},
  {"", "Unique", 11, 28, DT_ALL, claim_rank_limit, lower_unique, 0, OP_FLAG_HOST_VALUES,
   "sorted and unsorted, with or without axis, all four outputs; the input is read on the host; -0.0 and 0.0 "
   "are one value (the first seen is kept); NaN grouping is unspecified (ORT's is order-dependent too)"},
};

OPS_FAMILY(misc, defs);
