/* Data-dependent ops whose output shapes come from their input values, NonZero and Unique: the
 * input is read on the host and the results built from host-made index arrays. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op_util.h"

static bool claim_input0_rank(claim_ctx *c, const op_def *def) { return op_util_claim_input_rank(c, 0); }

/* ---- host reads of data-dependent ops ----------------------------------------------------- */

/* Every element of input i on the host: floats as doubles, integers and bools as int64 (exact
 * for every dtype; uint64 keeps its bits). One of *f / *q is set; free() it. */
static int host_values(op_ctx *c, int i, size_t count, double **f, int64_t **q) {
  *f = NULL, *q = NULL;
  if (count > (size_t)INT32_MAX) return op_fail(c, "input %d has too many elements to read", i);
  if (op_util_onnx_is_float(op_input_dtype(c, i))) {
    *f = malloc((count ? count : 1) * sizeof **f);
    if (!*f) return op_fail(c, "out of memory");
    if (op_input_doubles(c, i, *f, (int)count) != (int)count) return free(*f), *f = NULL, op_fail(c, "cannot read input %d", i);
    return 0;
  }
  *q = malloc((count ? count : 1) * sizeof **q);
  if (!*q) return op_fail(c, "out of memory");
  if (op_input_ints(c, i, *q, (int)count) != (int)count) return free(*q), *q = NULL, op_fail(c, "cannot read input %d", i);
  return 0;
}

/* ---- NonZero ------------------------------------------------------------------------------ */

static bool claim_nonzero(claim_ctx *c, const op_def *def) {
  const ir_value *x = claim_input(c, 0);
  if (x && x->rank == 0) return claim_decline(c, "scalar input (ONNX says [0, N], ORT gives [1, N])");
  return op_util_claim_input_rank(c, 0);
}

/* The coordinates of every nonzero element, row-major: int64 [rank, count]. NaN counts as
 * nonzero. A scalar gives [1, count], as ORT does. */
static int lower_nonzero(op_ctx *c, const op_def *def) {
  mlxb_array *x;
  int64_t dims[OP_UTIL_MAX_RANK];
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

/* Lexicographic comparison of rows a and b. Floats follow numpy.unique (equal_nan=True, NumPy >=
 * 1.21, and the ONNX reference built on it): NaN sorts after every number and all NaNs are one value. */
static int unique_cmp(const unique_rows *u, size_t a, size_t b) {
  for (size_t k = 0; k < u->width; k++) {
    size_t ia = unique_at(u, a, k), ib = unique_at(u, b, k);
    if (u->f) {
      bool na = isnan(u->f[ia]), nb = isnan(u->f[ib]);
      if (na || nb) {
        if (na != nb) return na ? 1 : -1;
        continue;
      }
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
  int64_t dims[OP_UTIL_MAX_RANK];
  int r = op_util_input_dims(c, 0, &x, dims);
  if (r < 0) return -1;
  const ir_node *n = op_node(c);
  /* com.microsoft Unique: 1-D, values in order of first occurrence, outputs y, inverse, counts */
  bool contrib = !strcmp(n->domain, "com.microsoft");
  if (contrib && r != 1) return op_fail(c, "Input should be a 1-D tensor");
  const ir_attr *axis_attr = contrib ? NULL : ir_node_attr(n, "axis");
  bool sorted = !contrib && ir_attr_int(n, "sorted", 1) == 1; /* ORT: only 1 sorts */
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
  int inverse_out = contrib ? 1 : 2, counts_out = contrib ? 2 : 3;
  if (!contrib && op_has_output(c, 1) && op_set_output(c, 1, sel)) goto done;
  if (op_has_output(c, inverse_out) &&
      op_set_output(c, inverse_out, mlxb_from_data(s, nrows ? w.order : NULL, &nrows, 1, MLXB_I64)))
    goto done;
  if (op_has_output(c, counts_out) && op_set_output(c, counts_out, mlxb_from_data(s, k ? w.ocount : NULL, &k, 1, MLXB_I64)))
    goto done;
  rc = 0;
done:
  unique_work_free(&w);
  free(f), free(q);
  return rc;
}

/* ---- the table ---------------------------------------------------------------------------- */

static const op_def defs[] = {
  OP_ROW("", "NonZero", 9, 13, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_ALL, .claim = claim_nonzero,
         .lower = lower_nonzero,
         .doc = "any dtype; the input is read on the host (the output shape depends on it); NaN counts as nonzero. "
                "Declined: scalar inputs (ONNX and ORT disagree on the shape)"),
  OP_ROW("com.microsoft", "Unique", 1, 1, .inputs = {1, 1}, .outputs = {3, 3}, .dtypes = DT(ONNX_FLOAT), .claim = claim_input0_rank,
         .lower = lower_unique,
         .doc = "the contrib form: a 1-D float32 input (ORT's CPU kernel), values in order of first occurrence, "
                "outputs y, idx (each element's position in y) and counts; NaN as ai.onnx Unique here (one value)"),
  OP_ROW("", "Unique", 11, 28, .inputs = {1, 1}, .outputs = {1, 4}, .dtypes = DT_ALL, .claim = claim_input0_rank,
         .lower = lower_unique,
         .doc = "sorted and unsorted, with or without axis, all four outputs; the input is read on the host; -0.0 "
                "and 0.0 are one value (the first seen is kept); NaN follows numpy.unique and the ONNX reference, "
                "not ORT: all NaNs are one value, sorted after every number (ORT's CPU EP loses or splits NaN groups)"),
};

OPS_FAMILY(host_read, defs);
