/* Traditional-ML feature ops of the ai.onnx.ml domain on numeric tensors: Scaler, Normalizer,
 * Binarizer, Imputer, ArrayFeatureExtractor, FeatureVectorizer, OneHotEncoder and LabelEncoder,
 * ai.onnx's TfIdfVectorizer on integer tokens and com.microsoft's MurmurHash3 (linear models, SVMs and tree ensembles are ml_linear.c, ml_svm.c and ml_trees.c). Every formula
 * follows ORT's CPU kernels; string tensors, maps and sequences are not MLX arrays and stay with
 * ORT. */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ml_util.h"


/* ---- Scaler, Normalizer, Binarizer, Imputer ----------------------------------------------- */

/* A per-feature table of size k applied along ORT's stride (dims[1], or dims[0] at rank 1): the
 * table broadcast along the last axis at rank <= 2; the flat index modulo the stride beyond. A
 * table of one value is a scalar. Returns an array broadcastable against x. */
static mlxb_array *ml_feature_table(mlxb_scope *s, mlxb_array *x, mlxb_array *table, int64_t k) {
  int r = mlxb_ndim(x);
  if (k == 1) return ml_reshape1(s, table, 1);
  if (r <= 2) return table;
  int64_t dims[OP_UTIL_MAX_RANK];
  mlxb_shape(x, dims);
  int64_t stride = dims[1];
  mlxb_array *flat = mlxb_arange(s, 0, (double)mlxb_size(x), 1, MLXB_I64);
  mlxb_array *idx = mlxb_binary(s, MLXB_REMAINDER, flat, mlxb_scalar_i64(s, stride, MLXB_I64));
  return mlxb_reshape(s, mlxb_take(s, table, idx, 0), dims, r);
}

/* ORT's stride for per-feature attributes; -1 (with the failure recorded) at rank 0 or above the limit. */
static int64_t ml_stride(op_ctx *c, mlxb_array *x) {
  int r = mlxb_ndim(x);
  if (r < 1 || r > OP_UTIL_MAX_RANK) return op_fail(c, "input rank %d (expected 1 to %d)", r, OP_UTIL_MAX_RANK), -1;
  return mlxb_dim(x, r == 1 ? 0 : 1);
}

static bool claim_scaler(claim_ctx *c, const op_def *def) {
  int64_t ns = ml_attr_count(c->node, "scale"), no = ml_attr_count(c->node, "offset");
  if (ns == 0 || ns != no) return claim_decline(c, "scale and offset must be non-empty and of one length");
  int r = ml_claim_rank(c, 0);
  if (r == 0 || r > OP_UTIL_MAX_RANK) return claim_decline(c, "input rank %d", r);
  return true;
}

/* float((x - offset) * scale): integers convert to float first (C's int - float), doubles
 * compute in double and round once. */
static int lower_scaler(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  const float *scale, *offset;
  int64_t k = (int64_t)ir_attr_floats(n, "scale", &scale);
  ir_attr_floats(n, "offset", &offset);
  mlxb_array *x = op_input(c, 0);
  int64_t stride = ml_stride(c, x);
  if (stride < 0) return -1;
  if (k != 1 && k != stride) return op_fail(c, "scale/offset of %lld values for %lld features", (long long)k, (long long)stride);
  mlxb_dtype t = mlxb_type(x) == MLXB_F64 ? MLXB_F64 : MLXB_F32;
  mlxb_array *sc = ml_feature_table(s, x, op_util_cast(s, ml_vec_f32(s, scale, k), t), k);
  mlxb_array *of = ml_feature_table(s, x, op_util_cast(s, ml_vec_f32(s, offset, k), t), k);
  mlxb_array *y = op_util_mul(s, op_util_sub(s, op_util_cast(s, x, t), of), sc);
  return op_set_output(c, 0, op_util_cast(s, y, MLXB_F32));
}

static bool claim_normalizer(claim_ctx *c, const op_def *def) {
  const char *norm = ir_attr_string(c->node, "norm", "MAX");
  if (strcmp(norm, "MAX") && strcmp(norm, "L1") && strcmp(norm, "L2")) return claim_decline(c, "norm '%s'", norm);
  int r = ml_claim_rank(c, 0);
  if (r == 0 || r > 2) return claim_decline(c, "input rank %d (ORT's kernel takes rank 1 or 2)", r);
  return true;
}

/* Row-wise normalization in float32; a row whose norm is 0 is copied unchanged. */
static int lower_normalizer(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const char *norm = ir_attr_string(op_node(c), "norm", "MAX");
  mlxb_array *x = op_input(c, 0);
  int r = mlxb_ndim(x), ax = -1;
  if (r < 1 || r > 2) return op_fail(c, "input rank %d (expected 1 or 2)", r);
  mlxb_array *xf = op_util_cast(s, x, MLXB_F32), *den, *y;
  if (strcmp(norm, "MAX") == 0) {
    den = ml_row_max(s, xf); /* from numeric_limits<float>::lowest(), NaN skipped by std::max */
    y = op_util_div(s, xf, den);
  } else if (strcmp(norm, "L1") == 0) {
    den = mlxb_reduce(s, MLXB_RSUM, op_util_cast(s, mlxb_unary(s, MLXB_ABS, x), MLXB_F32), &ax, 1, true);
    y = op_util_div(s, xf, den);
  } else {
    /* x * x in the input's type (integers wrap), then float: sign(x) * sqrt(x^2 / sum). */
    mlxb_array *sq = op_util_cast(s, op_util_mul(s, x, x), MLXB_F32);
    den = mlxb_reduce(s, MLXB_RSUM, sq, &ax, 1, true);
    mlxb_array *mag = mlxb_unary(s, MLXB_SQRT, op_util_div(s, sq, den));
    mlxb_array *neg = mlxb_binary(s, MLXB_LESS, x, op_util_scalar(s, 0.0, mlxb_type(x)));
    y = mlxb_where(s, neg, mlxb_unary(s, MLXB_NEG, mag), mag);
  }
  y = mlxb_where(s, mlxb_binary(s, MLXB_NOT_EQUAL, den, ml_f32(s, 0.0)), y, xf);
  return op_set_output(c, 0, y);
}

/* x > threshold ? 1 : 0 in x's dtype (the float threshold widened for double input). */
static int lower_binarizer(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x = op_input(c, 0);
  mlxb_dtype t = mlxb_type(x);
  float th = ir_attr_float(op_node(c), "threshold", 0.0f);
  mlxb_array *gt = mlxb_binary(s, MLXB_GREATER, x, mlxb_scalar_f64(s, th, t));
  return op_set_output(c, 0, mlxb_where(s, gt, mlxb_scalar_f64(s, 1.0, t), mlxb_scalar_f64(s, 0.0, t)));
}

static bool claim_imputer(claim_ctx *c, const op_def *def) {
  const ir_node *n = c->node;
  int64_t nf = ml_attr_count(n, "imputed_value_floats"), ni = ml_attr_count(n, "imputed_value_int64s");
  if ((nf > 0) == (ni > 0)) return claim_decline(c, "needs exactly one of imputed_value_floats / imputed_value_int64s");
  int32_t t = claim_input_dtype(c, 0);
  if (t == ONNX_FLOAT && nf == 0) return claim_decline(c, "float input with int64 imputed values");
  if (t == ONNX_INT64 && ni == 0) return claim_decline(c, "int64 input with float imputed values");
  int r = ml_claim_rank(c, 0);
  if (r == 0 || r > OP_UTIL_MAX_RANK) return claim_decline(c, "input rank %d", r);
  return true;
}

/* x == replaced (or both NaN) ? imputed : x; imputed per feature when it has one value per
 * feature, else its first value (as ORT). */
static int lower_imputer(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  mlxb_array *x = op_input(c, 0);
  int64_t stride = ml_stride(c, x);
  if (stride < 0) return -1;
  mlxb_array *table, *hit;
  int64_t k;
  if (mlxb_type(x) == MLXB_F32) {
    const float *v;
    k = (int64_t)ir_attr_floats(n, "imputed_value_floats", &v);
    table = ml_vec_f32(s, v, k);
    float rv = ir_attr_float(n, "replaced_value_float", 0.0f);
    hit = isnan(rv) ? mlxb_unary(s, MLXB_ISNAN, x) : mlxb_binary(s, MLXB_EQUAL, x, ml_f32(s, rv));
  } else {
    const int64_t *v;
    k = (int64_t)ir_attr_ints(n, "imputed_value_int64s", &v);
    table = ml_vec_i64(s, v, k);
    hit = mlxb_binary(s, MLXB_EQUAL, x, mlxb_scalar_i64(s, ir_attr_int(n, "replaced_value_int64", 0), MLXB_I64));
  }
  if (k != stride) { /* ORT falls back to the first value */
    int64_t start = 0, one = 1;
    table = mlxb_slice(s, table, &start, &one, &one), k = 1;
  }
  return op_set_output(c, 0, mlxb_where(s, hit, ml_feature_table(s, x, table, k), x));
}

/* ---- ArrayFeatureExtractor, FeatureVectorizer, OneHotEncoder ------------------------------ */

static bool claim_array_feature_extractor(claim_ctx *c, const op_def *def) {
  if (claim_input_dtype(c, 1) != ONNX_INT64) return claim_decline(c, "indices must be int64");
  if (ml_claim_rank(c, 0) == 0) return claim_decline(c, "X of rank 0");
  return true;
}

/* X[..., Y] along the last axis (Y flattened); rank-1 X gives [1, k]. Indices are clipped into
 * range: ORT fails on an index >= the last dimension. */
static int lower_array_feature_extractor(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x = op_input(c, 0), *y = op_input(c, 1);
  int r = mlxb_ndim(x);
  if (r < 1 || r > OP_UTIL_MAX_RANK) return op_fail(c, "X rank %d", r);
  int64_t dims[OP_UTIL_MAX_RANK], last = mlxb_dim(x, r - 1), k = (int64_t)mlxb_size(y);
  if (last == 0 && k > 0) return op_fail(c, "indices into an empty last axis");
  mlxb_shape(x, dims);
  mlxb_array *idx = ml_reshape1(s, y, k);
  if (last > 0) idx = mlxb_clip(s, idx, mlxb_scalar_i64(s, 0, MLXB_I64), mlxb_scalar_i64(s, last - 1, MLXB_I64));
  mlxb_array *z = mlxb_take(s, x, idx, r - 1);
  if (r == 1) z = op_util_reshape2(s, z, 1, k);
  return op_set_output(c, 0, z);
}

static bool claim_feature_vectorizer(claim_ctx *c, const op_def *def) {
  const ir_node *n = c->node;
  if (ml_attr_count(n, "inputdimensions") != n->n_inputs)
    return claim_decline(c, "inputdimensions has %lld values for %d inputs", (long long)ml_attr_count(n, "inputdimensions"),
                         n->n_inputs);
  for (int i = 0; i < n->n_inputs; i++) {
    int32_t t = claim_input_dtype(c, i);
    if (t != ONNX_FLOAT && t != ONNX_DOUBLE && t != ONNX_INT32 && t != ONNX_INT64)
      return claim_decline(c, "input %d dtype %s", i, ir_dtype_name(t));
    if (ml_claim_rank(c, i) == 0) return claim_decline(c, "input %d of rank 0", i);
  }
  return true;
}

/* Each input's rows (everything after dim 0, or the whole of a rank-1 input) cut or zero-padded
 * to its declared width, cast to float and concatenated. */
static int lower_feature_vectorizer(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  const int64_t *widths;
  ir_attr_ints(n, "inputdimensions", &widths);
  int k = n->n_inputs;
  mlxb_array **parts = calloc((size_t)k, sizeof *parts);
  if (!parts) return op_fail(c, "out of memory");
  int64_t rows = -1;
  int rc = 0;
  for (int i = 0; i < k && rc == 0; i++) {
    mlxb_array *x = op_input(c, i);
    if (!x) { rc = op_fail(c, "input %d is missing", i); break; }
    int r = mlxb_ndim(x);
    if (r < 1) { rc = op_fail(c, "input %d of rank 0", i); break; }
    int64_t nr = r == 1 ? 1 : mlxb_dim(x, 0);
    int64_t size = nr ? (int64_t)mlxb_size(x) / nr : 0;
    if (rows < 0) rows = nr;
    if (nr != rows) { rc = op_fail(c, "input %d has %lld rows, input 0 has %lld", i, (long long)nr, (long long)rows); break; }
    int64_t w = widths[i] < 0 ? 0 : widths[i], keep = size < w ? size : w;
    mlxb_array *m = op_util_reshape2(s, x, nr, size);
    int64_t start[2] = {0, 0}, stop[2] = {nr, keep}, step[2] = {1, 1};
    m = op_util_cast(s, mlxb_slice(s, m, start, stop, step), MLXB_F32);
    if (keep < w) {
      int64_t lo[2] = {0, 0}, hi[2] = {0, w - keep};
      m = mlxb_pad(s, m, lo, hi, ml_f32(s, 0.0), "constant");
    }
    parts[i] = m;
  }
  if (rc == 0) rc = op_set_output(c, 0, mlxb_concat(s, (const mlxb_array *const *)parts, k, 1));
  free(parts);
  return rc;
}

static bool claim_one_hot_encoder(claim_ctx *c, const op_def *def) {
  if (ml_attr_count(c->node, "cats_strings") > 0) return claim_decline(c, "string categories");
  if (ml_attr_count(c->node, "cats_int64s") == 0) return claim_decline(c, "no categories");
  int r = ml_claim_rank(c, 0);
  if (r > 2) return claim_decline(c, "input rank %d (ORT's kernel takes rank <= 2)", r);
  return true;
}

/* X cast to int64 (truncating floats) compared against the categories; a category listed twice
 * maps to its last position, as ORT's map keeps the last insert. Unknown values give a row of
 * zeros (ORT fails on them when zeros=0). */
static int lower_one_hot_encoder(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const int64_t *cats;
  int64_t k = (int64_t)ir_attr_ints(op_node(c), "cats_int64s", &cats);
  mlxb_array *x = op_input(c, 0);
  int r = mlxb_ndim(x);
  if (r > 2) return op_fail(c, "input rank %d (at most 2)", r);
  uint8_t *keep = calloc((size_t)(k + 1), 1);
  ml_key *sorted = malloc(sizeof *sorted * (size_t)(k + 1));
  if (!keep || !sorted) {
    free(keep), free(sorted);
    return op_fail(c, "out of memory");
  }
  for (int64_t i = 0; i < k; i++) sorted[i] = (ml_key){cats[i], 0.0, i};
  qsort(sorted, (size_t)k, sizeof *sorted, ml_key_cmp_int);
  for (int64_t i = 0; i < k; i++) /* the last position of each run of equal categories */
    if (i + 1 == k || sorted[i + 1].i != sorted[i].i) keep[sorted[i].pos] = 1;
  free(sorted);
  mlxb_array *kept = mlxb_from_data(s, keep, &k, 1, MLXB_BOOL);
  free(keep);
  int ax = r;
  mlxb_array *xi = mlxb_expand_dims(s, op_util_cast(s, x, MLXB_I64), &ax, 1);
  mlxb_array *eq = mlxb_binary(s, MLXB_LOGICAL_AND, mlxb_binary(s, MLXB_EQUAL, xi, ml_vec_i64(s, cats, k)), kept);
  return op_set_output(c, 0, op_util_cast(s, eq, MLXB_F32));
}

/* ---- LabelEncoder (numeric keys and values) ----------------------------------------------- */

/* Keys or values of one LabelEncoder attribute family, widened to double / int64 on the host. */
typedef struct ml_list {
  int64_t n;
  bool is_int;      /* ints holds the values, else reals */
  const int64_t *ints;
  const float *floats;  /* float list attribute */
  const double *doubles; /* double tensor attribute */
} ml_list;

static double ml_list_real(const ml_list *l, int64_t i) { return l->floats ? l->floats[i] : l->doubles[i]; }

/* Finds `<stem>_int64s` / `<stem>_floats` (by dtype t) or, from opset 4, `<stem>_tensor` of
 * dtype t. Doubles come only from the tensor, as in ORT. Returns false when neither is there. */
static bool ml_list_find(const ir_node *n, const char *stem, int32_t t, ml_list *out) {
  char name[64];
  memset(out, 0, sizeof *out);
  out->is_int = t == ONNX_INT64;
  if (t == ONNX_INT64 || t == ONNX_FLOAT) {
    snprintf(name, sizeof name, "%s_%s", stem, t == ONNX_INT64 ? "int64s" : "floats");
    const ir_attr *a = ir_node_attr(n, name);
    if (a && a->type == (t == ONNX_INT64 ? IR_ATTR_INTS : IR_ATTR_FLOATS)) {
      out->n = (int64_t)a->n;
      out->ints = a->ints, out->floats = a->floats;
      return true;
    }
  }
  if (n->since_version < 4) return false;
  snprintf(name, sizeof name, "%s_tensor", stem);
  const ir_attr *a = ir_node_attr(n, name);
  if (!a || a->type != IR_ATTR_TENSOR || !a->tensor || a->tensor->dtype != t) return false;
  size_t esz = ir_dtype_size(t);
  out->n = (int64_t)(a->tensor->bytes / esz);
  if (t == ONNX_INT64) out->ints = a->tensor->data;
  else if (t == ONNX_FLOAT) out->floats = a->tensor->data;
  else out->doubles = a->tensor->data;
  return out->n == 0 || a->tensor->data != NULL;
}

static bool ml_label_dtype_ok(int32_t t) { return t == ONNX_INT64 || t == ONNX_FLOAT || t == ONNX_DOUBLE; }

/* The default output value (double, or int64 for integer outputs): `default_tensor` (opset 4),
 * else `default_int64` / `default_float`, else the schema defaults -1 and -0.0. */
static bool ml_label_default(const ir_node *n, int32_t vt, double *real, int64_t *integer) {
  *real = -0.0, *integer = -1;
  const ir_attr *a = n->since_version >= 4 ? ir_node_attr(n, "default_tensor") : NULL;
  if (a && a->type == IR_ATTR_TENSOR && a->tensor && a->tensor->dtype != ONNX_UNDEFINED) {
    const ir_tensor *t = a->tensor;
    if (t->dtype != vt || !t->data || t->bytes < ir_dtype_size(vt)) return false;
    if (vt == ONNX_INT64) memcpy(integer, t->data, sizeof *integer);
    else if (vt == ONNX_FLOAT) *real = ((const float *)t->data)[0];
    else memcpy(real, t->data, sizeof *real);
    return true;
  }
  if (vt == ONNX_INT64) *integer = ir_attr_int(n, "default_int64", -1);
  else if (vt == ONNX_FLOAT) *real = ir_attr_float(n, "default_float", -0.0f);
  return true;
}

static bool claim_label_encoder(claim_ctx *c, const op_def *def) {
  const ir_node *n = c->node;
  const ir_value *out = claim_output(c, 0);
  int32_t kt = claim_input_dtype(c, 0), vt = out ? out->dtype : ONNX_UNDEFINED;
  if (!ml_label_dtype_ok(kt) || !ml_label_dtype_ok(vt))
    return claim_decline(c, "key/value dtypes %s -> %s (numeric forms only)", ir_dtype_name(kt), ir_dtype_name(vt));
  if (n->since_version < 4 && (kt == ONNX_DOUBLE || vt == ONNX_DOUBLE)) return claim_decline(c, "double before opset 4");
  ml_list keys, vals;
  if (!ml_list_find(n, "keys", kt, &keys)) return claim_decline(c, "no keys of dtype %s", ir_dtype_name(kt));
  if (!ml_list_find(n, "values", vt, &vals)) return claim_decline(c, "no values of dtype %s", ir_dtype_name(vt));
  if (keys.n != vals.n) return claim_decline(c, "%lld keys but %lld values", (long long)keys.n, (long long)vals.n);
  double dr;
  int64_t di;
  if (!ml_label_default(n, vt, &dr, &di)) return claim_decline(c, "default_tensor dtype differs from the output's");
  return true;
}

/* The number of sorted keys below x, by bisection over host-known keys [m] (each probe index
 * is clipped into range, so gathers never leave the table). */
static mlxb_array *ml_lower_bound(mlxb_scope *s, mlxb_array *keys, int64_t m, mlxb_array *x) {
  int r = mlxb_ndim(x);
  int64_t dims[OP_UTIL_MAX_RANK];
  mlxb_shape(x, dims);
  mlxb_array *pos = mlxb_zeros(s, dims, r, MLXB_I32), *lo = mlxb_scalar_i64(s, 0, MLXB_I32);
  mlxb_array *hi = mlxb_scalar_i64(s, m - 1, MLXB_I32);
  int64_t step = 1;
  while (step * 2 <= m) step *= 2;
  for (; step >= 1; step /= 2) {
    mlxb_array *cand = op_util_add(s, pos, mlxb_scalar_i64(s, step, MLXB_I32));
    mlxb_array *probe = mlxb_take(s, keys, mlxb_clip(s, op_util_sub(s, cand, mlxb_scalar_i64(s, 1, MLXB_I32)), lo, hi), 0);
    mlxb_array *ok = mlxb_binary(s, MLXB_LOGICAL_AND, mlxb_binary(s, MLXB_LESS_EQUAL, cand, mlxb_scalar_i64(s, m, MLXB_I32)),
                                 mlxb_binary(s, MLXB_LESS, probe, x));
    pos = mlxb_where(s, ok, cand, pos);
  }
  return pos;
}

/* A LabelEncoder as prepare leaves it (prepare_label_encoder): the keys sorted on the host
 * without NaN and later duplicates, with their values, kept with the plan's constants; the
 * default and the value of a NaN key. Built once at Compile. */
typedef struct label_prepared {
  int64_t m;            /* distinct non-NaN keys */
  mlxb_array *keys, *values; /* [m] in the key and value dtypes; NULL when m == 0 */
  double dr, nan_r;     /* default and NaN-key values (float outputs) */
  int64_t di, nan_i;    /* the same for int64 outputs */
  bool nan_key;         /* a NaN key matches NaN input (opset 4 and later) */
} label_prepared;

static void label_release(void *state) { free(state); }

/* The keys sorted on the host for the bisection: duplicate keys keep their first value (ORT's map
 * emplace); a NaN key matches NaN input from opset 4 only (NaN never equals itself in opset 2's
 * map). */
static int prepare_label_encoder(op_ctx *c, const op_def *def, void **state) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  int32_t kt = op_input_dtype(c, 0), vt = op_output_dtype(c, 0);
  bool nan_matches = n->since_version >= 4;
  label_prepared *lp = calloc(1, sizeof *lp);
  if (!lp) return op_fail(c, "out of memory");
  *state = lp;
  ml_list keys, vals;
  if (!ml_list_find(n, "keys", kt, &keys) || !ml_list_find(n, "values", vt, &vals) || keys.n != vals.n ||
      !ml_label_default(n, vt, &lp->dr, &lp->di))
    return op_fail(c, "keys, values or default no longer match the claim");
  ml_key *k = malloc(sizeof *k * (size_t)(keys.n + 1));
  int64_t *kint = malloc(sizeof(int64_t) * (size_t)(keys.n + 1)), *vint = malloc(sizeof(int64_t) * (size_t)(keys.n + 1));
  double *kreal = malloc(sizeof(double) * (size_t)(keys.n + 1)), *vreal = malloc(sizeof(double) * (size_t)(keys.n + 1));
  int64_t m = 0, nk = 0, nan_pos = -1;
  int rc = 0;
  if (!k || !kint || !vint || !kreal || !vreal) { rc = op_fail(c, "out of memory"); goto done; }
  for (int64_t i = 0; i < keys.n; i++) {
    double r = keys.is_int ? 0.0 : ml_list_real(&keys, i);
    if (isnan(r)) { /* kept apart: the first NaN key wins where NaN matches */
      if (nan_matches && nan_pos < 0) nan_pos = i;
      continue;
    }
    k[nk++] = (ml_key){keys.is_int ? keys.ints[i] : 0, r, i};
  }
  qsort(k, (size_t)nk, sizeof *k, keys.is_int ? ml_key_cmp_int : ml_key_cmp_real);
  for (int64_t i = 0; i < nk; i++) {
    if (i > 0 && (keys.is_int ? k[i].i == k[i - 1].i : k[i].r == k[i - 1].r)) continue; /* a later duplicate */
    kint[m] = k[i].i, kreal[m] = k[i].r;
    if (vals.is_int) vint[m] = vals.ints[k[i].pos];
    else vreal[m] = ml_list_real(&vals, k[i].pos);
    m++;
  }
  lp->m = m;
  if (nan_pos >= 0) {
    lp->nan_key = true;
    if (vals.is_int) lp->nan_i = vals.ints[nan_pos];
    else lp->nan_r = ml_list_real(&vals, nan_pos);
  }
  if (m > 0) {
    mlxb_dtype kd = (mlxb_dtype)op_mlx_dtype(kt), vd = (mlxb_dtype)op_mlx_dtype(vt);
    lp->keys = op_prepare_keep(c, keys.is_int ? ml_vec_i64(s, kint, m) : ml_host_reals(s, kreal, &m, 1, kd));
    lp->values = op_prepare_keep(c, vals.is_int ? ml_vec_i64(s, vint, m) : ml_host_reals(s, vreal, &m, 1, vd));
    if (!lp->keys || !lp->values) rc = -1;
  }
done:
  free(k), free(kint), free(vint), free(kreal), free(vreal);
  return rc;
}

/* y = the value of the key equal to x (found by bisection over the prepared keys), or the default. */
static int lower_label_encoder(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const label_prepared *lp = op_prepared(c);
  if (!lp) return op_fail(c, "the keys were not prepared");
  mlxb_array *x = op_input(c, 0);
  int32_t vt = op_output_dtype(c, 0);
  mlxb_dtype vd = (mlxb_dtype)op_mlx_dtype(vt);
  if (mlxb_ndim(x) > OP_UTIL_MAX_RANK) return op_fail(c, "rank %d", mlxb_ndim(x));
  int64_t m = lp->m;
  mlxb_array *y = vt == ONNX_INT64 ? mlxb_scalar_i64(s, lp->di, MLXB_I64) : mlxb_scalar_f64(s, lp->dr, vd);
  int64_t dims[OP_UTIL_MAX_RANK];
  mlxb_shape(x, dims);
  y = mlxb_broadcast_to(s, y, dims, mlxb_ndim(x));
  if (m > 0) {
    mlxb_array *at = mlxb_clip(s, ml_lower_bound(s, lp->keys, m, x), mlxb_scalar_i64(s, 0, MLXB_I32), mlxb_scalar_i64(s, m - 1, MLXB_I32));
    mlxb_array *hit = mlxb_binary(s, MLXB_EQUAL, mlxb_take(s, lp->keys, at, 0), x);
    y = mlxb_where(s, hit, mlxb_take(s, lp->values, at, 0), y);
  }
  if (lp->nan_key) {
    mlxb_array *nv = vt == ONNX_INT64 ? mlxb_scalar_i64(s, lp->nan_i, MLXB_I64) : mlxb_scalar_f64(s, lp->nan_r, vd);
    y = mlxb_where(s, mlxb_unary(s, MLXB_ISNAN, x), nv, y);
  }
  return op_set_output(c, 0, y);
}

/* ---- TfIdfVectorizer (ai.onnx) ---------------------------------------------------------------
 * ORT's CPU kernel counts, in each row, every pool n-gram of a length in [min, max] taken at
 * positions s, s + d, ..., s + (n - 1) d for skip distances d = 1 .. max_skip_count + 1 (unigrams at
 * d = 1 only), and adds 1 (TF), the output's weight (TFIDF) or sets it (IDF) at the n-gram's output
 * index. Here each (length, distance) is a comparison of shifted copies of the row with the pool's
 * columns and a sum over positions; the pool, the indexes and the weights are attributes, so the
 * mapping to outputs is a gather built on the host. Token values are only compared, never used as
 * indices. */

enum { TFIDF_TF = 1, TFIDF_IDF = 2, TFIDF_TFIDF = 3, TFIDF_MAX_LENGTHS = 64, TFIDF_MAX_OUTPUTS = 1 << 26 };

typedef struct tfidf_attrs {
  int mode;
  int64_t min_n, max_n, max_skip, out_size, grams; /* grams: pool n-grams of every length */
  const int64_t *counts, *indexes, *pool;
  size_t n_counts, n_indexes, n_pool, n_weights;
  const float *weights;
} tfidf_attrs;

/* The pool's n-grams of length n: the first's offset in the pool and how many. */
static int64_t tfidf_span(const tfidf_attrs *a, int64_t n, int64_t *first) {
  int64_t start = a->counts[n - 1];
  int64_t end = (size_t)n < a->n_counts ? a->counts[n] : (int64_t)a->n_pool;
  *first = start;
  return (end - start) / n;
}

static _Thread_local const int64_t *tfidf_sort_pool;
static _Thread_local int64_t tfidf_sort_len;

static int tfidf_gram_cmp(const void *pa, const void *pb) {
  const int64_t *x = tfidf_sort_pool + *(const int64_t *)pa, *y = tfidf_sort_pool + *(const int64_t *)pb;
  for (int64_t i = 0; i < tfidf_sort_len; i++)
    if (x[i] != y[i]) return x[i] < y[i] ? -1 : 1;
  return 0;
}

/* Whether the n-grams of length n (offset first, count m) hold a repeat, which ORT refuses. */
static bool tfidf_has_duplicate(const tfidf_attrs *a, int64_t first, int64_t m, int64_t n, bool *oom) {
  int64_t *at = malloc((size_t)(m ? m : 1) * sizeof *at);
  if (!at) return *oom = true;
  for (int64_t j = 0; j < m; j++) at[j] = first + j * n;
  tfidf_sort_pool = a->pool;
  tfidf_sort_len = n;
  qsort(at, (size_t)m, sizeof *at, tfidf_gram_cmp);
  bool dup = false;
  for (int64_t j = 1; j < m && !dup; j++) dup = tfidf_gram_cmp(&at[j - 1], &at[j]) == 0;
  free(at);
  return dup;
}

/* Whether two of the counted n-grams (lengths min_n..max_n) share an output index. */
static bool tfidf_outputs_shared(const tfidf_attrs *a) {
  unsigned char *seen = calloc((size_t)a->out_size, 1);
  if (!seen) return true;
  bool shared = false;
  int64_t ordinal = 0;
  for (int64_t n = 1; n <= (int64_t)a->n_counts && !shared; n++) {
    int64_t first, m = tfidf_span(a, n, &first);
    for (int64_t j = 0; j < m && n >= a->min_n && n <= a->max_n && !shared; j++) {
      shared = seen[a->indexes[ordinal + j]];
      seen[a->indexes[ordinal + j]] = 1;
    }
    ordinal += m;
  }
  free(seen);
  return shared;
}

/* ORT's checks of the attributes (its kernel refuses the model otherwise) and the forms where its
 * kernel would read outside an attribute; NULL when the node is one the EP takes, else why not. */
static const char *tfidf_parse(const ir_node *n, tfidf_attrs *a) {
  *a = (tfidf_attrs){0};
  const char *mode = ir_attr_string(n, "mode", "");
  a->mode = !strcmp(mode, "TF") ? TFIDF_TF : !strcmp(mode, "IDF") ? TFIDF_IDF : !strcmp(mode, "TFIDF") ? TFIDF_TFIDF : 0;
  if (!a->mode) return "mode is not TF, IDF or TFIDF";
  a->min_n = ir_attr_int(n, "min_gram_length", 0);
  a->max_n = ir_attr_int(n, "max_gram_length", 0);
  a->max_skip = ir_attr_int(n, "max_skip_count", -1);
  if (a->min_n <= 0 || a->max_n < a->min_n || a->max_skip < 0 || a->max_skip > INT32_MAX)
    return "min_gram_length, max_gram_length or max_skip_count out of range";
  if (ir_node_attr(n, "pool_strings")) return "pool_strings (string n-grams stay with ORT)";
  a->n_counts = ir_attr_ints(n, "ngram_counts", &a->counts);
  a->n_indexes = ir_attr_ints(n, "ngram_indexes", &a->indexes);
  a->n_pool = ir_attr_ints(n, "pool_int64s", &a->pool);
  a->n_weights = ir_attr_floats(n, "weights", &a->weights);
  if (!a->n_counts || !a->n_indexes || !a->n_pool) return "ngram_counts, ngram_indexes or pool_int64s is empty";
  if ((size_t)a->max_n > a->n_counts) return "max_gram_length is past ngram_counts";
  if (ir_node_attr(n, "weights") && a->n_weights != a->n_indexes) return "weights and ngram_indexes differ in size";
  for (size_t i = 0; i < a->n_indexes; i++) {
    /* the output's width is the largest index + 1: the host tables of the lowering are that wide */
    if (a->indexes[i] < 0 || a->indexes[i] >= TFIDF_MAX_OUTPUTS) return "an ngram_indexes value is negative or past 2^26";
    if (a->indexes[i] + 1 > a->out_size) a->out_size = a->indexes[i] + 1;
  }
  for (size_t i = 0; i < a->n_counts; i++) {
    int64_t start = a->counts[i], end = i + 1 < a->n_counts ? a->counts[i + 1] : (int64_t)a->n_pool;
    if (start < 0 || end < start || end > (int64_t)a->n_pool) return "ngram_counts out of the pool's bounds";
    if ((end - start) % (int64_t)(i + 1)) return "ngram_counts leave a partial n-gram";
    a->grams += (end - start) / (int64_t)(i + 1);
  }
  if ((size_t)a->grams > a->n_indexes) return "fewer ngram_indexes than pool n-grams";
  if (a->max_n - a->min_n >= TFIDF_MAX_LENGTHS) return "more than 64 n-gram lengths";
  return NULL;
}

/* The checks over the whole pool, once, when the node is claimed (the lowering parses the same
 * attributes again but needs none of them): repeated n-grams, which ORT refuses, and outputs
 * shared where the EP declines them; NULL when the node is one the EP takes, else why not. */
static const char *tfidf_validate(const tfidf_attrs *a, char *why, size_t len) {
  bool shared = tfidf_outputs_shared(a);
  if (shared && a->grams * a->out_size > ((int64_t)1 << 24)) return "n-grams sharing output indexes over a large pool";
  if (shared && a->mode == TFIDF_IDF && a->n_weights)
    return "IDF weights of n-grams sharing an output index (ORT keeps the last one it meets)";
  for (int64_t g = a->min_n; g <= a->max_n; g++) {
    int64_t first, m = tfidf_span(a, g, &first);
    bool oom = false;
    if (tfidf_has_duplicate(a, first, m, g, &oom)) {
      snprintf(why, len, "the pool repeats a %lld-gram", (long long)g);
      return why;
    }
    if (oom) return "out of memory";
  }
  return NULL;
}

static bool claim_tfidf(claim_ctx *c, const op_def *def) {
  tfidf_attrs a;
  char why[64];
  const char *bad = tfidf_parse(c->node, &a);
  if (!bad) bad = tfidf_validate(&a, why, sizeof why);
  if (bad) return claim_decline(c, "%s", bad);
  const ir_value *x = claim_input(c, 0);
  if (x && x->rank > 2) return claim_decline(c, "input rank %d (ORT takes [C] or [B, C])", x->rank);
  return true;
}

/* Counts [B, m] of the n-grams of length n (pool offset first, m of them) in rows x [B, C] int64. */
static mlxb_array *tfidf_count(mlxb_scope *s, const tfidf_attrs *a, mlxb_array *x, int64_t b, int64_t cols,
                               int64_t n, int64_t first, int64_t m) {
  int64_t *column = malloc((size_t)m * sizeof *column);
  if (!column) return NULL;
  mlxb_array *total = NULL;
  int64_t distances = n == 1 ? 1 : a->max_skip + 1;
  for (int64_t d = 1; d <= distances && cols - (n - 1) * d > 0; d++) {
    int64_t starts = cols - (n - 1) * d;
    mlxb_array *match = NULL;
    for (int64_t t = 0; t < n; t++) {
      for (int64_t j = 0; j < m; j++) column[j] = a->pool[first + j * n + t];
      mlxb_array *want = mlxb_from_data(s, column, (int64_t[]){1, 1, m}, 3, MLXB_I64);
      mlxb_array *at = mlxb_slice(s, x, (int64_t[]){0, t * d}, (int64_t[]){b, t * d + starts}, (int64_t[]){1, 1});
      mlxb_array *eq = mlxb_binary(s, MLXB_EQUAL, mlxb_reshape(s, at, (int64_t[]){b, starts, 1}, 3), want);
      match = match ? mlxb_binary(s, MLXB_LOGICAL_AND, match, eq) : eq;
    }
    mlxb_array *cnt = mlxb_reduce(s, MLXB_RSUM, mlxb_astype(s, match, MLXB_I32), (int[]){1}, 1, false);
    total = total ? mlxb_binary(s, MLXB_ADD, total, cnt) : cnt;
  }
  free(column);
  return total ? total : mlxb_zeros(s, (int64_t[]){b, m}, 2, MLXB_I32);
}

/* Per output index, the sum [B, out] of the float32 values [B, grams] of the n-grams mapped to it:
 * a gather when no two n-grams share an output (a zero column for outputs none maps to), else a
 * 0/1 matrix product. */
static mlxb_array *tfidf_to_outputs(mlxb_scope *s, const tfidf_attrs *a, mlxb_array *vals, const int64_t *out_of,
                                    int64_t grams, int64_t b) {
  int64_t *src = malloc((size_t)a->out_size * sizeof *src);
  if (!src) return NULL;
  for (int64_t i = 0; i < a->out_size; i++) src[i] = grams; /* the zero column */
  bool shared = false;
  for (int64_t j = 0; j < grams; j++) {
    shared = shared || src[out_of[j]] != grams;
    src[out_of[j]] = j;
  }
  mlxb_array *y = NULL;
  if (!shared) {
    mlxb_array *padded = mlxb_concat(s, (const mlxb_array *[]){vals, mlxb_zeros(s, (int64_t[]){b, 1}, 2, MLXB_F32)}, 2, 1);
    y = mlxb_take(s, padded, mlxb_from_data(s, src, (int64_t[]){a->out_size}, 1, MLXB_I64), 1);
  } else {
    float *onehot = calloc((size_t)(grams * a->out_size), sizeof *onehot);
    if (onehot) {
      for (int64_t j = 0; j < grams; j++) onehot[j * a->out_size + out_of[j]] = 1.0f;
      mlxb_array *mtx = mlxb_from_data(s, onehot, (int64_t[]){grams, a->out_size}, 2, MLXB_F32);
      y = mlxb_matmul(s, vals, mtx);
      free(onehot);
    }
  }
  free(src);
  return y;
}

/* What each counted n-gram adds to its output, [B, grams] float32, from its counts: the count (TF,
 * and TFIDF without weights), count times its weight (TFIDF: ORT adds the weight once per
 * occurrence, so the two agree up to float32 rounding), its weight where seen (IDF with weights) or
 * 1 where seen (IDF). The weights are per n-gram of the pool: those counted are consecutive from
 * ordinal first (n-grams of lengths min_n..max_n follow each other in the pool). */
static mlxb_array *tfidf_values(mlxb_scope *s, const tfidf_attrs *a, mlxb_array *counts, int64_t first) {
  mlxb_array *f = mlxb_astype(s, counts, MLXB_F32);
  if (a->mode == TFIDF_TF || !a->n_weights) {
    return a->mode == TFIDF_IDF ? mlxb_astype(s, mlxb_binary(s, MLXB_GREATER, f, mlxb_scalar_f64(s, 0.0, MLXB_F32)), MLXB_F32)
                                : f;
  }
  int64_t grams = mlxb_dim(counts, 1);
  mlxb_array *w = mlxb_from_data(s, a->weights + first, (int64_t[]){grams}, 1, MLXB_F32);
  if (a->mode == TFIDF_TFIDF) return mlxb_binary(s, MLXB_MUL, f, w);
  return mlxb_where(s, mlxb_binary(s, MLXB_GREATER, f, mlxb_scalar_f64(s, 0.0, MLXB_F32)), w,
                    mlxb_scalar_f64(s, 0.0, MLXB_F32));
}

static int lower_tfidf(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  tfidf_attrs a;
  const char *bad = tfidf_parse(op_node(c), &a);
  if (bad) return op_fail(c, "%s", bad);
  int64_t dims[OP_UTIL_MAX_RANK];
  mlxb_array *x;
  int rank = op_util_input_dims(c, 0, &x, dims);
  if (rank < 0) return -1;
  if (rank > 2 || (rank == 2 && dims[0] < 1))
    return op_fail(c, "Input shape must have either [C] or [B,C] dimensions with B > 0.");
  int64_t b = rank == 2 ? dims[0] : 1, cols = rank == 0 ? 1 : dims[rank - 1];
  int64_t out_dims[2] = {b, a.out_size};
  int out_rank = rank == 2 ? 2 : 1;
  const int64_t *ydims = rank == 2 ? out_dims : out_dims + 1;
  x = mlxb_reshape(s, mlxb_astype(s, x, MLXB_I64), (int64_t[]){b, cols}, 2);
  mlxb_array *parts[TFIDF_MAX_LENGTHS];
  int64_t *out_of = malloc((size_t)(a.grams ? a.grams : 1) * sizeof *out_of);
  if (!out_of) return op_fail(c, "out of memory");
  int np = 0;
  int64_t grams = 0, ordinal = 0, first_gram = -1;
  for (int64_t n = 1; n <= (int64_t)a.n_counts && cols > 0; n++) {
    int64_t first, m = tfidf_span(&a, n, &first);
    if (n >= a.min_n && n <= a.max_n && m > 0) { /* at most TFIDF_MAX_LENGTHS lengths (parse) */
      if (first_gram < 0) first_gram = ordinal;
      parts[np++] = tfidf_count(s, &a, x, b, cols, n, first, m);
      for (int64_t j = 0; j < m; j++) out_of[grams++] = a.indexes[ordinal + j];
    }
    ordinal += m;
  }
  if (np == 0) { /* no row or no n-gram to count */
    free(out_of);
    return op_set_output(c, 0, mlxb_zeros(s, ydims, out_rank, MLXB_F32));
  }
  mlxb_array *counts = mlxb_concat(s, (const mlxb_array *const *)parts, np, 1);
  mlxb_array *vals = counts ? tfidf_values(s, &a, counts, first_gram) : NULL;
  mlxb_array *y = vals ? tfidf_to_outputs(s, &a, vals, out_of, grams, b) : NULL;
  free(out_of);
  if (!y) return op_check(c) ? -1 : op_fail(c, "out of memory");
  if (a.mode == TFIDF_IDF && !a.n_weights) /* 1 where any n-gram of the output was seen */
    y = mlxb_astype(s, mlxb_binary(s, MLXB_GREATER, y, mlxb_scalar_f64(s, 0.0, MLXB_F32)), MLXB_F32);
  return op_set_output(c, 0, mlxb_reshape(s, y, ydims, out_rank));
}

/* ---- MurmurHash3 (com.microsoft) -------------------------------------------------------------
 * ORT's feature hashing: MurmurHash3_x86_32 of each element's bytes (4 or 8: one or two 32-bit
 * blocks, little-endian) with the seed attribute, in uint32 arithmetic that wraps as C's does;
 * positive = 0 gives the same bits as int32. String keys stay with ORT. */

static mlxb_array *mm3_u32(mlxb_scope *s, uint32_t v) { return mlxb_scalar_i64(s, v, MLXB_U32); }

static mlxb_array *mm3_rotl(mlxb_scope *s, mlxb_array *x, int r) {
  return mlxb_binary(s, MLXB_BITWISE_OR, mlxb_binary(s, MLXB_LEFT_SHIFT, x, mm3_u32(s, (uint32_t)r)),
                     mlxb_binary(s, MLXB_RIGHT_SHIFT, x, mm3_u32(s, (uint32_t)(32 - r))));
}

static mlxb_array *mm3_mul(mlxb_scope *s, mlxb_array *x, uint32_t c) { return mlxb_binary(s, MLXB_MUL, x, mm3_u32(s, c)); }

static mlxb_array *mm3_xorshift(mlxb_scope *s, mlxb_array *h, int r) {
  return mlxb_binary(s, MLXB_BITWISE_XOR, h, mlxb_binary(s, MLXB_RIGHT_SHIFT, h, mm3_u32(s, (uint32_t)r)));
}

static bool claim_murmur(claim_ctx *c, const op_def *def) {
  int64_t positive = ir_attr_int(c->node, "positive", 1);
  const ir_value *y = claim_output(c, 0);
  int32_t want = positive ? ONNX_UINT32 : ONNX_INT32;
  if (y && y->dtype != ONNX_UNDEFINED && y->dtype != want)
    return claim_decline(c, "output dtype %s where positive=%lld gives %s", ir_dtype_name(y->dtype), (long long)positive,
                         ir_dtype_name(want));
  return true;
}

static int lower_murmur(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  int64_t dims[OP_UTIL_MAX_RANK];
  mlxb_array *x;
  int rank = op_util_input_dims(c, 0, &x, dims);
  if (rank < 0) return -1;
  int64_t count = op_util_numel(dims, rank), bytes = (int64_t)mlxb_dtype_size(mlxb_type(x)), words = bytes / 4;
  mlxb_array *blocks = mlxb_view(s, mlxb_reshape(s, x, (int64_t[]){count, 1}, 2), MLXB_U32); /* [count, words] */
  mlxb_array *h = mlxb_broadcast_to(s, mm3_u32(s, (uint32_t)ir_attr_int(n, "seed", 0)), (int64_t[]){count, 1}, 2);
  for (int64_t w = 0; w < words; w++) {
    mlxb_array *k = mm3_mul(s, mm3_rotl(s, mm3_mul(s, op_util_slice_axis(s, blocks, 1, w, w + 1, 1), 0xcc9e2d51u), 15),
                            0x1b873593u);
    h = mm3_rotl(s, mlxb_binary(s, MLXB_BITWISE_XOR, h, k), 13);
    h = mlxb_binary(s, MLXB_ADD, mm3_mul(s, h, 5), mm3_u32(s, 0xe6546b64u));
  }
  h = mlxb_binary(s, MLXB_BITWISE_XOR, h, mm3_u32(s, (uint32_t)bytes));
  h = mm3_mul(s, mm3_xorshift(s, h, 16), 0x85ebca6bu);
  h = mm3_xorshift(s, mm3_mul(s, mm3_xorshift(s, h, 13), 0xc2b2ae35u), 16);
  h = mlxb_reshape(s, h, dims, rank);
  return op_set_output(c, 0, ir_attr_int(n, "positive", 1) ? h : mlxb_view(s, h, MLXB_I32));
}

/* ---- the table ---------------------------------------------------------------------------- */

static const op_def defs[] = {
    OP_ROW(ML, "Scaler", 1, 1, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_ML_IN, .claim = claim_scaler,
           .lower = lower_scaler,
           .doc = "float/double/int32/int64 X; scale/offset of one value or one per feature (dim 1); float output"),
    OP_ROW(ML, "Normalizer", 1, 1, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_ML_IN, .claim = claim_normalizer,
           .lower = lower_normalizer,
           .doc = "float/double/int32/int64 X of rank 1 or 2; MAX, L1, L2 per row in float32; rows of norm 0 copied"),
    OP_ROW(ML, "Binarizer", 1, 1, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_F32 | DT_F64,
           .lower = lower_binarizer, .doc = "float/double X; x > threshold. NaN gives 0 where ORT fails"),
    OP_ROW(ML, "Imputer", 1, 1, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_F32 | DT(ONNX_INT64),
           .claim = claim_imputer, .lower = lower_imputer,
           .doc = "float X with imputed_value_floats / replaced_value_float (NaN matches NaN), int64 X with "
                  "imputed_value_int64s / replaced_value_int64; one value or one per feature"),
    OP_ROW(ML, "ArrayFeatureExtractor", 1, 1, .inputs = {2, 2}, .outputs = {1, 1}, .dtypes = DT_ML_IN,
           .claim = claim_array_feature_extractor, .lower = lower_array_feature_extractor,
           .doc = "float/double/int32/int64 X, int64 indices along the last axis (rank-1 X gives [1, k]); "
                  "out-of-range indices are clipped (ORT fails). Declined: string X"),
    OP_ROW(ML, "FeatureVectorizer", 1, 1, .inputs = {1, OP_VARIADIC}, .outputs = {1, 1}, .dtypes = DT_ML_IN,
           .claim = claim_feature_vectorizer, .lower = lower_feature_vectorizer,
           .doc = "float/double/int32/int64 inputs with equal row counts; each cut or zero-padded to inputdimensions"),
    OP_ROW(ML, "OneHotEncoder", 1, 1, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_F32 | DT_F64 | DT(ONNX_INT64),
           .claim = claim_one_hot_encoder, .lower = lower_one_hot_encoder,
           .doc = "float/double/int64 X of rank <= 2 (truncated to int64), cats_int64s; unknown categories give "
                  "zeros (ORT fails when zeros=0). Declined: cats_strings"),
    OP_ROW(ML, "LabelEncoder", 2, 4, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_F32 | DT_F64 | DT(ONNX_INT64),
           .claim = claim_label_encoder, .lower = lower_label_encoder, .prepare = prepare_label_encoder,
           .release = label_release,
           .doc = "int64/float/double keys to int64/float/double values from *_int64s/*_floats lists or (opset 4) "
                  "keys_tensor/values_tensor/default_tensor; duplicate keys keep the first value; NaN keys match NaN "
                  "from opset 4. Declined: string keys or values, opset 1"),
    OP_ROW("com.microsoft", "MurmurHash3", 1, 1, .inputs = {1, 1}, .outputs = {1, 1},
           .dtypes = DT(ONNX_INT32) | DT(ONNX_UINT32) | DT(ONNX_INT64) | DT(ONNX_UINT64) | DT_F32 | DT_F64,
           .claim = claim_murmur, .lower = lower_murmur,
           .doc = "MurmurHash3_x86_32 of each element's 4 or 8 bytes, seed, positive (uint32) or int32 output. "
                  "Declined: string keys"),
    OP_ROW("", "TfIdfVectorizer", 9, 9, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT(ONNX_INT32) | DT(ONNX_INT64),
           .claim = claim_tfidf, .lower = lower_tfidf,
           .doc = "int32/int64 X of rank <= 2, pool_int64s; TF, IDF, TFIDF with or without weights (TFIDF as count "
                  "times weight, ORT adds the weight count times); n-grams as ORT's kernel counts them (unigrams "
                  "once, longer ones at every skip distance). Declined: pool_strings, forms ORT refuses, fewer "
                  "ngram_indexes than n-grams (ORT reads past them), IDF weights of n-grams sharing an output"),
};

OPS_FAMILY(ml, defs);
