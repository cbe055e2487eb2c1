/* Image ops: GridSample, AffineGrid, Col2Im and CenterCropPad (Resize is resize.c, RoiAlign
 * detection.c). Col2Im depends on shapes known on the host, so it becomes a gather through index
 * tables computed here; GridSample and AffineGrid take their coordinates from runtime data and compute them in MLX.
 * Every computed index is clamped into range before a gather (MLX does not bounds-check). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op_util.h"

/* ======================================================================== GridSample */

typedef enum gs_mode { GS_LINEAR, GS_NEAREST, GS_CUBIC, GS_MODE_BAD } gs_mode;
typedef enum gs_pad { GS_ZEROS, GS_BORDER, GS_REFLECTION, GS_PAD_BAD } gs_pad;

static gs_mode gs_parse_mode(const ir_node *n) {
  const char *m = ir_attr_string(n, "mode", n->since_version < 20 ? "bilinear" : "linear");
  if (!strcmp(m, "bilinear") || !strcmp(m, "linear")) return GS_LINEAR;
  if (!strcmp(m, "nearest")) return GS_NEAREST;
  if (!strcmp(m, "bicubic") || !strcmp(m, "cubic")) return GS_CUBIC;
  return GS_MODE_BAD;
}

static gs_pad gs_parse_pad(const ir_node *n) {
  const char *m = ir_attr_string(n, "padding_mode", "zeros");
  if (!strcmp(m, "zeros")) return GS_ZEROS;
  if (!strcmp(m, "border")) return GS_BORDER;
  if (!strcmp(m, "reflection")) return GS_REFLECTION;
  return GS_PAD_BAD;
}

static bool claim_grid_sample(claim_ctx *c, const op_def *def) {
  gs_mode m = gs_parse_mode(c->node);
  if (m == GS_MODE_BAD) return claim_decline(c, "unknown mode '%s'", ir_attr_string(c->node, "mode", ""));
  if (gs_parse_pad(c->node) == GS_PAD_BAD) return claim_decline(c, "unknown padding_mode");
  const ir_value *x = claim_input(c, 0);
  if (x && x->rank >= 0 && x->rank != 4 && x->rank != 5)
    return claim_decline(c, "input rank %d (4-D and 5-D are supported, like ORT)", x->rank);
  if (x && x->rank == 5 && m == GS_CUBIC) return claim_decline(c, "cubic mode is 2-D only (as in ORT)");
  int32_t gt = claim_input_dtype(c, 1);
  if (gt != ONNX_FLOAT && gt != ONNX_FLOAT16 && gt != ONNX_BFLOAT16 && gt != ONNX_DOUBLE)
    return claim_decline(c, "grid dtype %s", ir_dtype_name(gt));
  return true;
}

static mlxb_array *gs_scalar(mlxb_scope *s, double v, mlxb_dtype t) { return mlxb_scalar_f64(s, v, t); }

/* ORT's GsReflect on float arrays: folds x into [lo, hi] by reflecting at the borders. */
static mlxb_array *gs_reflect(mlxb_scope *s, mlxb_array *x, double lo, double hi, mlxb_dtype t) {
  double range = hi - lo;
  if (range <= 0) return mlxb_full(s, NULL, 0, gs_scalar(s, lo, t), t); /* one pixel: everything maps to it */
  mlxb_array *vlo = gs_scalar(s, lo, t), *vhi = gs_scalar(s, hi, t), *vr = gs_scalar(s, range, t);
  mlxb_array *two = gs_scalar(s, 2, t), *zero = gs_scalar(s, 0, t);
  mlxb_array *res = x;
  for (int side = 0; side < 2; side++) {
    mlxb_array *dx = side == 0 ? mlxb_binary(s, MLXB_SUB, vlo, x) : mlxb_binary(s, MLXB_SUB, x, vhi);
    mlxb_array *n = mlxb_unary(s, MLXB_FLOOR, mlxb_binary(s, MLXB_DIV, dx, vr));
    mlxb_array *r = mlxb_binary(s, MLXB_SUB, dx, mlxb_binary(s, MLXB_MUL, n, vr));
    mlxb_array *half = mlxb_unary(s, MLXB_FLOOR, mlxb_binary(s, MLXB_DIV, n, two));
    mlxb_array *even = mlxb_binary(s, MLXB_EQUAL, mlxb_binary(s, MLXB_SUB, n, mlxb_binary(s, MLXB_MUL, half, two)), zero);
    mlxb_array *from_lo = mlxb_binary(s, MLXB_ADD, vlo, r), *from_hi = mlxb_binary(s, MLXB_SUB, vhi, r);
    mlxb_array *v = side == 0 ? mlxb_where(s, even, from_lo, from_hi) : mlxb_where(s, even, from_hi, from_lo);
    mlxb_array *cond = side == 0 ? mlxb_binary(s, MLXB_LESS, x, vlo) : mlxb_binary(s, MLXB_GREATER, x, vhi);
    res = mlxb_where(s, cond, v, res);
  }
  return res;
}

/* One tap along one axis: the clamped integer index (int32) and, for zeros padding, whether the
 * tap lies inside (NULL otherwise). k holds integral values of dtype t. */
static mlxb_array *gs_tap_index(mlxb_scope *s, mlxb_array *k, int64_t len, gs_pad pad, bool align, mlxb_dtype t,
                                mlxb_array **valid) {
  *valid = NULL;
  mlxb_array *lo = gs_scalar(s, 0, t), *hi = gs_scalar(s, (double)(len - 1), t);
  if (pad == GS_ZEROS)
    *valid = mlxb_binary(s, MLXB_LOGICAL_AND, mlxb_binary(s, MLXB_GREATER_EQUAL, k, lo), mlxb_binary(s, MLXB_LESS_EQUAL, k, hi));
  else if (pad == GS_REFLECTION)
    k = gs_reflect(s, k, align ? 0.0 : -0.5, align ? (double)(len - 1) : (double)len - 0.5, t);
  /* Clamping before the integer conversion keeps NaN and huge values away from it. */
  k = mlxb_clip(s, k, lo, hi);
  mlxb_array *nan = mlxb_unary(s, MLXB_ISNAN, k);
  k = mlxb_where(s, nan, lo, k);
  return mlxb_astype(s, k, MLXB_I32);
}

/* ORT's GsGetCubicCoeffs (alpha -0.75) for offsets t in [0, 1). */
static void gs_cubic_weights(mlxb_scope *s, mlxb_array *t, mlxb_dtype ty, mlxb_array **w) {
  const double a = -0.75;
  mlxb_array *one = gs_scalar(s, 1, ty), *two = gs_scalar(s, 2, ty);
  mlxb_array *x = mlxb_unary(s, MLXB_ABS, t);
  mlxb_array *xs[4] = {mlxb_binary(s, MLXB_ADD, x, one), x, mlxb_binary(s, MLXB_SUB, one, x), mlxb_binary(s, MLXB_SUB, two, x)};
  for (int k = 0; k < 4; k++) {
    mlxb_array *v = xs[k];
    if (k == 0 || k == 3) {
      /* ((a*v - 5a)*v + 8a)*v - 4a */
      mlxb_array *r = mlxb_binary(s, MLXB_SUB, mlxb_binary(s, MLXB_MUL, gs_scalar(s, a, ty), v), gs_scalar(s, 5 * a, ty));
      r = mlxb_binary(s, MLXB_ADD, mlxb_binary(s, MLXB_MUL, r, v), gs_scalar(s, 8 * a, ty));
      w[k] = mlxb_binary(s, MLXB_SUB, mlxb_binary(s, MLXB_MUL, r, v), gs_scalar(s, 4 * a, ty));
    } else {
      /* ((a+2)*v - (a+3))*v*v + 1 */
      mlxb_array *r = mlxb_binary(s, MLXB_SUB, mlxb_binary(s, MLXB_MUL, gs_scalar(s, a + 2, ty), v), gs_scalar(s, a + 3, ty));
      w[k] = mlxb_binary(s, MLXB_ADD, mlxb_binary(s, MLXB_MUL, mlxb_binary(s, MLXB_MUL, r, v), v), one);
    }
  }
}

#define GS_MAX_TAPS 4

static int lower_grid_sample(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_node *node = op_node(c);
  mlxb_array *x = op_input(c, 0), *grid = op_input(c, 1);
  int rank = mlxb_ndim(x), nsp = rank - 2;
  gs_mode mode = gs_parse_mode(node);
  gs_pad pad = gs_parse_pad(node);
  bool align = ir_attr_int(node, "align_corners", 0) != 0;
  if ((rank != 4 && rank != 5) || mlxb_ndim(grid) != rank || mlxb_dim(grid, -1) != nsp)
    return op_fail(c, "X must be 4-D or 5-D and grid [N, out..., %d]", nsp);
  if (mode == GS_CUBIC && nsp != 2) return op_fail(c, "cubic mode is 2-D only");
  int64_t xd[5], gd[5];
  mlxb_shape(x, xd);
  mlxb_shape(grid, gd);
  int64_t N = xd[0], C = xd[1], S = 1, O = 1;
  if (gd[0] != N) return op_fail(c, "grid batch %lld differs from input batch %lld", (long long)gd[0], (long long)N);
  for (int i = 0; i < nsp; i++) S *= xd[2 + i], O *= gd[1 + i];
  if (S == 0 && N * O * C > 0) return op_fail(c, "cannot sample an empty image");
  if (N * S > INT32_MAX) return op_fail(c, "input too large for 32-bit gather indices");
  mlxb_dtype t = mlxb_type(x), ct = op_util_compute_type(t);
  /* x -> [N*S, C] rows; grid -> [N*O, nsp] */
  int perm[5] = {0, 2, 3, 4, 1}, back[5];
  perm[nsp + 1] = 1;
  for (int i = 1; i <= nsp; i++) perm[i] = i + 1;
  int64_t rows[2] = {N * S, C}, gflat[2] = {N * O, nsp};
  mlxb_array *xr = mlxb_reshape(s, mlxb_transpose(s, mlxb_astype(s, x, ct), perm, rank), rows, 2);
  mlxb_array *g = mlxb_reshape(s, mlxb_astype(s, grid, ct), gflat, 2);
  /* per axis (a = 0 is the first spatial axis; grid component nsp-1-a) */
  mlxb_array *taps_i[3][GS_MAX_TAPS], *taps_v[3][GS_MAX_TAPS], *taps_w[3][GS_MAX_TAPS];
  int ntaps = mode == GS_LINEAR ? 2 : mode == GS_NEAREST ? 1 : 4;
  for (int a = 0; a < nsp; a++) {
    int64_t len = xd[2 + a];
    int comp = nsp - 1 - a;
    int64_t st[2] = {0, comp}, sp[2] = {N * O, comp + 1}, one[2] = {1, 1};
    mlxb_array *nv = mlxb_reshape(s, mlxb_slice(s, g, st, sp, one), &gflat[0], 1);
    mlxb_array *u;
    if (align) /* (n + 1) / 2 * (len - 1) */
      u = mlxb_binary(s, MLXB_MUL, mlxb_binary(s, MLXB_DIV, mlxb_binary(s, MLXB_ADD, nv, gs_scalar(s, 1, ct)), gs_scalar(s, 2, ct)),
                      gs_scalar(s, (double)(len - 1), ct));
    else /* ((n + 1) * len - 1) / 2 */
      u = mlxb_binary(s, MLXB_DIV,
                      mlxb_binary(s, MLXB_SUB, mlxb_binary(s, MLXB_MUL, mlxb_binary(s, MLXB_ADD, nv, gs_scalar(s, 1, ct)),
                                                           gs_scalar(s, (double)len, ct)),
                                  gs_scalar(s, 1, ct)),
                      gs_scalar(s, 2, ct));
    if (mode == GS_NEAREST) {
      taps_i[a][0] = gs_tap_index(s, mlxb_unary(s, MLXB_ROUND, u), len, pad, align, ct, &taps_v[a][0]);
      taps_w[a][0] = NULL;
      continue;
    }
    mlxb_array *f = mlxb_unary(s, MLXB_FLOOR, u);
    if (mode == GS_LINEAR) {
      mlxb_array *f1 = mlxb_binary(s, MLXB_ADD, f, gs_scalar(s, 1, ct));
      taps_i[a][0] = gs_tap_index(s, f, len, pad, align, ct, &taps_v[a][0]);
      taps_i[a][1] = gs_tap_index(s, f1, len, pad, align, ct, &taps_v[a][1]);
      taps_w[a][0] = mlxb_binary(s, MLXB_SUB, f1, u); /* x2 - x */
      taps_w[a][1] = mlxb_binary(s, MLXB_SUB, u, f); /* x - x1 */
    } else {
      mlxb_array *w[4];
      gs_cubic_weights(s, mlxb_binary(s, MLXB_SUB, u, f), ct, w);
      for (int k = 0; k < 4; k++) {
        mlxb_array *kk = mlxb_binary(s, MLXB_ADD, f, gs_scalar(s, (double)(k - 1), ct));
        taps_i[a][k] = gs_tap_index(s, kk, len, pad, align, ct, &taps_v[a][k]);
        taps_w[a][k] = w[k];
      }
    }
  }
  /* batch offsets n*S for every output row */
  int64_t bo_d[2] = {N, O};
  mlxb_array *boff = mlxb_reshape(s, mlxb_broadcast_to(s, mlxb_reshape(s, mlxb_binary(s, MLXB_MUL,
                                  mlxb_arange(s, 0, (double)N, 1, MLXB_I32), mlxb_scalar_i64(s, S, MLXB_I32)), (int64_t[]){N, 1}, 2),
                                  bo_d, 2), &gflat[0], 1);
  int64_t col[2] = {N * O, 1};
  mlxb_array *acc = NULL;
  int total = 1;
  for (int a = 0; a < nsp; a++) total *= ntaps;
  for (int combo = 0; combo < total; combo++) {
    mlxb_array *flat = boff, *valid = NULL, *w = NULL;
    int64_t stride = 1;
    int rem = combo;
    for (int a = nsp - 1; a >= 0; a--) {
      int k = rem % ntaps;
      rem /= ntaps;
      flat = mlxb_binary(s, MLXB_ADD, flat, mlxb_binary(s, MLXB_MUL, taps_i[a][k], mlxb_scalar_i64(s, stride, MLXB_I32)));
      stride *= xd[2 + a];
      if (taps_v[a][k]) valid = valid ? mlxb_binary(s, MLXB_LOGICAL_AND, valid, taps_v[a][k]) : taps_v[a][k];
      if (taps_w[a][k]) w = w ? mlxb_binary(s, MLXB_MUL, taps_w[a][k], w) : taps_w[a][k];
    }
    mlxb_array *v = mlxb_take(s, xr, flat, 0);
    if (valid) v = mlxb_where(s, mlxb_reshape(s, valid, col, 2), v, gs_scalar(s, 0, ct));
    if (w) v = mlxb_binary(s, MLXB_MUL, mlxb_reshape(s, w, col, 2), v);
    acc = acc ? mlxb_binary(s, MLXB_ADD, acc, v) : v;
  }
  int64_t od[5];
  od[0] = N;
  for (int i = 0; i < nsp; i++) od[1 + i] = gd[1 + i];
  od[nsp + 1] = C;
  back[0] = 0, back[1] = nsp + 1;
  for (int i = 0; i < nsp; i++) back[2 + i] = 1 + i;
  mlxb_array *y = mlxb_transpose(s, mlxb_reshape(s, acc, od, rank), back, rank);
  return op_set_output(c, 0, ct == t ? y : mlxb_astype(s, y, t));
}

/* ======================================================================== AffineGrid */

static bool claim_affine_grid(claim_ctx *c, const op_def *def) {
  if (claim_input_dtype(c, 1) != ONNX_INT64) return claim_decline(c, "size must be int64");
  return true;
}

/* Eigen's LinSpaced(n, -1, 1) as ORT uses it, scaled by (n-1)/n without align_corners. */
static float *affine_base(int64_t n, bool align) {
  float *v = malloc(sizeof *v * (size_t)(n > 0 ? n : 1));
  if (!v) return NULL;
  float step = n > 1 ? (1.0f - -1.0f) / (float)(n - 1) : 0.0f;
  for (int64_t i = 0; i < n; i++) {
    v[i] = i == n - 1 ? 1.0f : -1.0f + (float)i * step; /* a single point is `high` */
    if (!align) v[i] = v[i] * (float)(n - 1) / (float)n;
  }
  return v;
}

static int lower_affine_grid(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *theta = op_input(c, 0);
  int64_t size[5];
  int ns = op_input_ints(c, 1, size, 5);
  if (ns < 0) return op_fail(c, "cannot read size");
  if (ns != 4 && ns != 5) return op_fail(c, "size must hold 4 or 5 values");
  int nsp = ns - 2;
  bool align = ir_attr_int(op_node(c), "align_corners", 0) != 0;
  int64_t N = size[0];
  if (mlxb_ndim(theta) != 3 || mlxb_dim(theta, 0) != N || mlxb_dim(theta, 1) != nsp || mlxb_dim(theta, 2) != nsp + 1)
    return op_fail(c, "theta must be [N, %d, %d]", nsp, nsp + 1);
  for (int i = 2; i < ns; i++) { /* ORT's rule: every spatial size positive (an empty grid is refused too) */
    if (size[i] <= 0) return op_fail(c, "size[%d] (%lld) must be positive", i, (long long)size[i]);
    if (size[i] > INT32_MAX) return op_fail(c, "size[%d] (%lld) is more than an MLX dimension holds", i, (long long)size[i]);
  }
  size_t bytes = mlxb_dtype_size(op_util_compute_type(mlxb_type(theta))) * (size_t)nsp, limit = mlxb_memory_limit();
  for (int i = 0; i < ns; i++) /* the grid [N, spatial..., nsp], before its base tables are built */
    if (__builtin_mul_overflow(bytes, (size_t)(i == 1 ? 1 : size[i]), &bytes)) bytes = SIZE_MAX;
  if (limit && bytes > limit)
    return op_fail(c, "output 0 needs %zu bytes, more than the memory limit (%zu bytes)", bytes, limit);
  mlxb_dtype t = mlxb_type(theta), ct = op_util_compute_type(t);
  mlxb_array *th = mlxb_astype(s, theta, ct);
  /* base[j]: coordinate j (0 = x over the last axis) shaped to broadcast over [N, spatial...] */
  mlxb_array *base[3];
  for (int j = 0; j < nsp; j++) {
    int axis = nsp - 1 - j; /* spatial axis of component j */
    int64_t len = size[2 + axis];
    float *v = affine_base(len, align);
    if (!v) return op_fail(c, "out of memory");
    int64_t bd[4] = {1, 1, 1, 1};
    bd[1 + axis] = len;
    base[j] = op_util_float_array(s, v, bd, nsp + 1, ct);
    free(v);
  }
  mlxb_array *comps[3];
  for (int k = 0; k < nsp; k++) {
    mlxb_array *acc = NULL;
    for (int j = 0; j <= nsp; j++) {
      int64_t st[3] = {0, k, j}, sp[3] = {N, k + 1, j + 1}, one[3] = {1, 1, 1}, td[4] = {N, 1, 1, 1};
      mlxb_array *coef = mlxb_reshape(s, mlxb_slice(s, th, st, sp, one), td, nsp + 1);
      mlxb_array *term = j < nsp ? mlxb_binary(s, MLXB_MUL, coef, base[j]) : coef;
      acc = acc ? mlxb_binary(s, MLXB_ADD, acc, term) : term;
    }
    int64_t full[4];
    full[0] = N;
    for (int i = 0; i < nsp; i++) full[1 + i] = size[2 + i];
    comps[k] = mlxb_broadcast_to(s, acc, full, nsp + 1);
  }
  mlxb_array *y = mlxb_stack(s, (const mlxb_array *const *)comps, nsp, nsp + 1);
  return op_set_output(c, 0, ct == t ? y : mlxb_astype(s, y, t));
}

/* ======================================================================== Col2Im */

static bool claim_col2im(claim_ctx *c, const op_def *def) {
  if (claim_input_dtype(c, 1) != ONNX_INT64 || claim_input_dtype(c, 2) != ONNX_INT64)
    return claim_decline(c, "image_shape and block_shape must be int64");
  return true;
}

/* The host table of tn entries and the graph's [N * C, tn] gather, against MLX's memory limit (the
 * image shape is data: its pixels times the block's taps can pass any memory). */
static int col2im_table_fails(op_ctx *c, int64_t tn, int64_t nc, size_t esz) {
  size_t limit = mlxb_memory_limit(), table, gather;
  if (__builtin_mul_overflow((size_t)tn, sizeof(int64_t), &table)) table = SIZE_MAX;
  if (__builtin_mul_overflow((size_t)tn, (size_t)nc, &gather) || __builtin_mul_overflow(gather, esz, &gather))
    gather = SIZE_MAX;
  if (tn == INT64_MAX || (limit && (table > limit || gather > limit)))
    return op_fail(c, "image_shape and block_shape need %lld gather entries per channel, more than the memory limit "
                   "(%zu bytes)", (long long)tn, limit);
  return 0;
}

/* Each output pixel gathers the column entries that land on it (a host table padded with a
 * zero entry), then sums them: the adjoint of im2col without a scatter. */
static int lower_col2im(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_node *node = op_node(c);
  mlxb_array *x = op_input(c, 0);
  int64_t img[OP_UTIL_MAX_RANK], blk[OP_UTIL_MAX_RANK];
  int ni = op_input_ints(c, 1, img, OP_UTIL_MAX_RANK), nb = op_input_ints(c, 2, blk, OP_UTIL_MAX_RANK);
  if (ni < 0 || nb < 0) return op_fail(c, "cannot read image_shape/block_shape");
  if (ni != nb || ni < 1) return op_fail(c, "image_shape and block_shape must have the same positive length");
  int nsp = ni;
  int64_t dil[OP_UTIL_MAX_RANK], str[OP_UTIL_MAX_RANK], pads[2 * OP_UTIL_MAX_RANK], nblk[OP_UTIL_MAX_RANK];
  const int64_t *v;
  size_t cnt;
  for (int i = 0; i < nsp; i++) dil[i] = 1, str[i] = 1, pads[i] = pads[i + nsp] = 0;
  if ((cnt = ir_attr_ints(node, "dilations", &v)) && cnt != (size_t)nsp) return op_fail(c, "dilations length");
  for (size_t i = 0; i < cnt; i++) dil[i] = v[i];
  if ((cnt = ir_attr_ints(node, "strides", &v)) && cnt != (size_t)nsp) return op_fail(c, "strides length");
  for (size_t i = 0; i < cnt; i++) str[i] = v[i];
  if ((cnt = ir_attr_ints(node, "pads", &v)) && cnt != (size_t)(2 * nsp)) return op_fail(c, "pads length");
  for (size_t i = 0; i < cnt; i++) pads[i] = v[i];
  int64_t K = 1, L = 1, P = 1; /* saturating products: image and block shapes come from data */
  for (int i = 0; i < nsp; i++) {
    if (dil[i] < 1 || str[i] < 1 || blk[i] < 1 || img[i] < 0 || pads[i] < 0 || pads[i + nsp] < 0)
      return op_fail(c, "invalid block, stride, dilation, pad or image value");
    int64_t span, ext;
    if (__builtin_mul_overflow(dil[i], blk[i] - 1, &span) || __builtin_add_overflow(span, 1, &span) ||
        __builtin_add_overflow(img[i], pads[i], &ext) || __builtin_add_overflow(ext, pads[i + nsp], &ext))
      return op_fail(c, "image_shape %lld and block_shape %lld overflow int64 on axis %d", (long long)img[i],
                     (long long)blk[i], i);
    nblk[i] = (ext - span) / str[i] + 1;
    if (nblk[i] < 0) nblk[i] = 0;
    K = op_util_mul_sat(K, blk[i]);
    L = op_util_mul_sat(L, nblk[i]);
    P = op_util_mul_sat(P, img[i]);
  }
  if (mlxb_ndim(x) != 3 || mlxb_dim(x, 2) != L || mlxb_dim(x, 1) % K)
    return op_fail(c, "input must be [N, C*%lld, %lld]", (long long)K, (long long)L);
  int64_t N = mlxb_dim(x, 0), C = mlxb_dim(x, 1) / K;
  int64_t od[OP_UTIL_MAX_RANK + 2];
  od[0] = N, od[1] = C;
  for (int i = 0; i < nsp; i++) od[2 + i] = img[i];
  if (N == 0 || C == 0 || P == 0) /* an empty image gathers nothing, however large its other sides */
    return op_set_output(c, 0, mlxb_zeros(s, od, nsp + 2, mlxb_type(x)));
  /* taps per pixel: product over axes of the (kernel offset, block) pairs hitting it */
  int64_t T = K;
  int64_t tn = op_util_mul_sat(P, T), sentinel = K * L; /* K * L is x's own size */
  if (col2im_table_fails(c, tn, op_util_mul_sat(N, C), mlxb_dtype_size(op_util_compute_type(mlxb_type(x)))))
    return -1;
  int64_t *table = malloc(sizeof *table * (size_t)tn);
  if (!table) return op_fail(c, "out of memory");
  for (int64_t p = 0; p < P; p++) {
    int64_t pi[OP_UTIL_MAX_RANK], rem = p;
    for (int i = nsp - 1; i >= 0; i--) pi[i] = rem % img[i], rem /= img[i];
    int64_t n = 0;
    for (int64_t k = 0; k < K; k++) {
      int64_t krem = k, bflat = 0, ok = 1;
      int64_t ki[OP_UTIL_MAX_RANK];
      for (int i = nsp - 1; i >= 0; i--) ki[i] = krem % blk[i], krem /= blk[i];
      for (int i = 0; i < nsp && ok; i++) {
        int64_t off = pi[i] + pads[i] - ki[i] * dil[i];
        if (off < 0 || off % str[i]) ok = 0;
        else if (off / str[i] >= nblk[i]) ok = 0;
        else bflat = bflat * nblk[i] + off / str[i];
      }
      if (ok) table[p * T + n++] = k * L + bflat;
    }
    for (; n < T; n++) table[p * T + n] = sentinel;
  }
  mlxb_dtype t = mlxb_type(x), ct = op_util_compute_type(t);
  int64_t flat[3] = {N, C, K * L}, zd[3] = {N, C, 1}, gd[4] = {N, C, P, T};
  mlxb_array *xf = mlxb_reshape(s, mlxb_astype(s, x, ct), flat, 3);
  const mlxb_array *parts[2] = {xf, mlxb_zeros(s, zd, 3, ct)};
  xf = mlxb_concat(s, parts, 2, 2);
  mlxb_array *idx = tn <= INT32_MAX ? op_util_index_array(s, table, tn) : mlxb_from_data(s, table, &tn, 1, MLXB_I64);
  free(table);
  if (!idx) return op_fail(c, "out of memory");
  mlxb_array *g = mlxb_reshape(s, mlxb_take(s, xf, idx, 2), gd, 4);
  int ax = 3;
  mlxb_array *y = mlxb_reduce(s, MLXB_RSUM, g, &ax, 1, false);
  y = mlxb_reshape(s, y, od, nsp + 2);
  return op_set_output(c, 0, ct == t ? y : mlxb_astype(s, y, t));
}

/* ======================================================================== CenterCropPad */

/* ONNX's function body for a negative target size t along an axis of size n, as ORT runs it: no
 * padding (max(t, n) is n), then Slice from start = (n - t) / 2 to start + t, both in wrapping
 * int64 arithmetic and clamped as Slice clamps. An empty crop for most t; INT64_MIN wraps to the
 * whole axis. */
static void ccp_negative_target(int64_t n, int64_t t, int64_t *start, int64_t *stop) {
  int64_t from = (int64_t)((uint64_t)n - (uint64_t)t) / 2;
  int64_t to = (int64_t)((uint64_t)from + (uint64_t)t);
  if (from < 0) from = from < -n ? 0 : from + n;
  if (to < 0) to = to < -n ? 0 : to + n;
  from = from > n ? n : from, to = to > n ? n : to;
  *start = from, *stop = to > from ? to : from;
}

static int lower_center_crop_pad(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x = op_input(c, 0);
  int rank = mlxb_ndim(x);
  if (rank > OP_UTIL_MAX_RANK) return op_fail(c, "rank %d (at most %d)", rank, OP_UTIL_MAX_RANK);
  int64_t dims[OP_UTIL_MAX_RANK], shape[OP_UTIL_MAX_RANK];
  mlxb_shape(x, dims);
  int ns = op_input_ints(c, 1, shape, OP_UTIL_MAX_RANK);
  if (ns < 0) return op_fail(c, "cannot read shape");
  const int64_t *ax;
  size_t nax = ir_attr_ints(op_node(c), "axes", &ax);
  int axes[OP_UTIL_MAX_RANK];
  if (nax == 0) {
    if (ns != rank) return op_fail(c, "shape has %d values for rank %d", ns, rank);
    for (int i = 0; i < rank; i++) axes[i] = i;
  } else {
    if ((size_t)ns != nax || nax > OP_UTIL_MAX_RANK) return op_fail(c, "shape and axes differ in length");
    for (size_t i = 0; i < nax; i++) {
      int64_t a = ax[i] < 0 ? ax[i] + rank : ax[i];
      if (a < 0 || a >= rank) return op_fail(c, "axis %lld out of range", (long long)ax[i]);
      axes[i] = (int)a;
    }
  }
  int64_t st[OP_UTIL_MAX_RANK], sp[OP_UTIL_MAX_RANK], one[OP_UTIL_MAX_RANK], lo[OP_UTIL_MAX_RANK] = {0}, hi[OP_UTIL_MAX_RANK] = {0};
  bool crop = false, grow = false;
  for (int i = 0; i < rank; i++) st[i] = 0, sp[i] = dims[i], one[i] = 1;
  for (int k = 0; k < ns; k++) {
    int a = axes[k];
    int64_t want = shape[k], dim = dims[a];
    if (want < 0) {
      ccp_negative_target(dim, want, &st[a], &sp[a]);
      crop = true;
    } else if (want < dim) {
      st[a] = (dim - want) / 2, sp[a] = st[a] + want, crop = true;
    } else if (want > dim) {
      lo[a] = (want - dim) / 2, hi[a] = want - dim - lo[a], grow = true;
    }
  }
  if (crop) x = mlxb_slice(s, x, st, sp, one);
  if (grow) x = mlxb_pad(s, x, lo, hi, mlxb_scalar_i64(s, 0, mlxb_type(x)), "constant");
  return op_set_output(c, 0, x);
}

/* ---- the table ---------------------------------------------------------------------------- */

#define DT_VFLOAT (DT_F32 | DT_F16 | DT_BF16 | DT_F64)

static const op_def defs[] = {
    OP_ROW("", "GridSample", 16, 25, .inputs = {2, 2}, .outputs = {1, 1}, .dtypes = DT_VFLOAT,
           .claim = claim_grid_sample, .lower = lower_grid_sample,
           .doc = "4-D and 5-D (like ORT); linear/bilinear, nearest (round half to even), cubic/bicubic (2-D); "
                  "padding zeros/border/reflection, align_corners; taps are clamped into the image before every "
                  "gather"),
    OP_ROW("com.microsoft", "GridSample", 1, 1, .inputs = {2, 2}, .outputs = {1, 1}, .dtypes = DT_VFLOAT,
           .claim = claim_grid_sample, .lower = lower_grid_sample,
           .doc = "the contrib form (ai.onnx GridSample 16's modes bilinear/nearest/bicubic, padding and "
                  "align_corners)"),
    OP_ROW("", "AffineGrid", 20, 25, .inputs = {2, 2}, .outputs = {1, 1}, .dtypes = DT_VFLOAT,
           .claim = claim_affine_grid, .lower = lower_affine_grid,
           .doc = "2-D and 3-D, size read on the host, align_corners; base grid as ORT builds it (Eigen LinSpaced)"),
    OP_ROW("", "Col2Im", 18, 25, .inputs = {3, 3}, .outputs = {1, 1}, .dtypes = DT_VFLOAT, .claim = claim_col2im,
           .lower = lower_col2im,
           .doc = "any spatial rank; image_shape/block_shape read on the host; dilations, pads, strides; a gather of "
                  "the columns landing on each pixel, summed"),
    OP_ROW("", "CenterCropPad", 18, 25, .inputs = {2, 2}, .outputs = {1, 1}, .dtypes = DT_ALL,
           .lower = lower_center_crop_pad,
           .doc = "shape read on the host, optional axes; crops centred (floor) and zero-pads (extra at the end); a "
                  "negative target size crops as ONNX's function body does under ORT (empty; INT64_MIN wraps to the "
                  "whole axis)"),
};

OPS_FAMILY(vision, defs);
