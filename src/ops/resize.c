/* Resize and Upsample: scales, sizes and roi are read on the host, so every axis becomes a gather
 * through index/weight tables computed here with ORT's float arithmetic (nearest, n-linear,
 * cubic, antialiased filters). Every computed index is clamped into range before a gather (MLX
 * does not bounds-check). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op_util.h"

/* ---- helpers ------------------------------------------------------------------------------ */

/* A NULL array means a failure: the bridge's error, or one recorded already with op_fail. */
static int rs_failed(op_ctx *c) {
  op_check(c);
  return -1;
}

/* Reads a float vector input (any float dtype) as floats; returns the count or -1 (recorded). */
static int rs_input_floats(op_ctx *c, int i, float *out, int max) {
  double tmp[2 * OP_UTIL_MAX_RANK];
  if (max > 2 * OP_UTIL_MAX_RANK) max = 2 * OP_UTIL_MAX_RANK;
  int n = op_input_doubles(c, i, tmp, max);
  if (n < 0) return op_fail(c, "cannot read input %d on the host", i);
  for (int k = 0; k < n; k++) out[k] = (float)tmp[k];
  return n;
}

/* Element count of an optional input: -1 when absent. */
static int64_t rs_input_size(op_ctx *c, int i) {
  if (!op_has_input(c, i)) return -1;
  mlxb_array *a = op_input(c, i);
  return a ? (int64_t)mlxb_size(a) : -1;
}

typedef enum rs_mode { RS_NEAREST, RS_LINEAR, RS_CUBIC } rs_mode;
typedef enum rs_coord {
  RS_HALF_PIXEL, RS_ASYMMETRIC, RS_PYTORCH_HALF_PIXEL, RS_TF_HALF_PIXEL_FOR_NN, RS_ALIGN_CORNERS,
  RS_TF_CROP_AND_RESIZE, RS_HALF_PIXEL_SYMMETRIC, RS_COORD_BAD
} rs_coord;
typedef enum rs_nearest { RS_NN_SIMPLE, RS_NN_ROUND_PREFER_FLOOR, RS_NN_ROUND_PREFER_CEIL, RS_NN_FLOOR, RS_NN_CEIL, RS_NN_BAD } rs_nearest;

typedef struct rs_attrs {
  rs_mode mode;
  rs_coord coord;
  rs_nearest nearest;
  float cubic_a;
  bool exclude_outside;
  bool antialias;
  float extrapolation;
  int policy;        /* 0 stretch, 1 not_larger, 2 not_smaller */
  int64_t axes[OP_UTIL_MAX_RANK];
  int naxes;
} rs_attrs;

/* Per-axis sampling table: out entries of taps (input index, weight) and an extrapolation flag. */
typedef struct rs_table {
  int64_t out;
  int taps;
  int64_t *idx;   /* out * taps */
  float *w;       /* out * taps; NULL for nearest */
  uint8_t *ext;   /* out; NULL when no entry extrapolates */
} rs_table;

static void rs_table_free(rs_table *t) {
  free(t->idx);
  free(t->w);
  free(t->ext);
  memset(t, 0, sizeof *t);
}

static bool rs_is_upsample(const ir_node *n) { return !strcmp(n->op_type, "Upsample"); }

/* Parses the attributes; returns NULL or the reason they cannot be honoured. */
static const char *rs_parse(const ir_node *n, rs_attrs *a) {
  memset(a, 0, sizeof *a);
  int opset = n->since_version;
  bool legacy = rs_is_upsample(n) || opset < 11;
  const char *mode = ir_attr_string(n, "mode", "nearest");
  if (!strcmp(mode, "nearest")) a->mode = RS_NEAREST;
  else if (!strcmp(mode, "linear") || !strcmp(mode, "bilinear")) a->mode = RS_LINEAR;
  else if (!strcmp(mode, "cubic") && !legacy) a->mode = RS_CUBIC;
  else return "unknown mode";
  const char *ct = legacy ? "asymmetric" : ir_attr_string(n, "coordinate_transformation_mode", "half_pixel");
  static const char *const coords[] = {"half_pixel", "asymmetric", "pytorch_half_pixel", "tf_half_pixel_for_nn",
                                       "align_corners", "tf_crop_and_resize", "half_pixel_symmetric"};
  _Static_assert(sizeof coords / sizeof coords[0] == RS_COORD_BAD, "one name per rs_coord value");
  a->coord = RS_COORD_BAD;
  for (int i = 0; i < RS_COORD_BAD; i++)
    if (!strcmp(ct, coords[i])) a->coord = (rs_coord)i;
  if (a->coord == RS_COORD_BAD) return "unknown coordinate_transformation_mode";
  a->nearest = RS_NN_SIMPLE;
  if (!legacy && a->mode == RS_NEAREST) {
    const char *nm = ir_attr_string(n, "nearest_mode", "round_prefer_floor");
    static const char *const modes[] = {"", "round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
    _Static_assert(sizeof modes / sizeof modes[0] == RS_NN_BAD, "one name per rs_nearest value");
    a->nearest = RS_NN_BAD;
    for (int i = 1; i < RS_NN_BAD; i++)
      if (!strcmp(nm, modes[i])) a->nearest = (rs_nearest)i;
    if (a->nearest == RS_NN_BAD) return "unknown nearest_mode";
  }
  a->cubic_a = ir_attr_float(n, "cubic_coeff_a", -0.75f);
  a->exclude_outside = ir_attr_int(n, "exclude_outside", 0) != 0;
  a->extrapolation = ir_attr_float(n, "extrapolation_value", 0.0f);
  if (opset >= 18 && !rs_is_upsample(n)) {
    a->antialias = ir_attr_int(n, "antialias", 0) != 0;
    const char *pol = ir_attr_string(n, "keep_aspect_ratio_policy", "stretch");
    if (!strcmp(pol, "stretch")) a->policy = 0;
    else if (!strcmp(pol, "not_larger")) a->policy = 1;
    else if (!strcmp(pol, "not_smaller")) a->policy = 2;
    else return "unknown keep_aspect_ratio_policy";
    const int64_t *ax;
    size_t nax = ir_attr_ints(n, "axes", &ax);
    if (nax > OP_UTIL_MAX_RANK) return "too many axes";
    if (nax) memcpy(a->axes, ax, nax * sizeof *ax); /* ax is NULL without the attribute */
    a->naxes = (int)nax;
  }
  if (a->antialias && a->mode == RS_NEAREST) return "antialias needs linear or cubic mode";
  if (a->antialias && a->coord == RS_TF_CROP_AND_RESIZE) return "antialias with tf_crop_and_resize is not supported";
  if (a->exclude_outside && a->mode != RS_CUBIC && !(a->antialias && a->mode == RS_LINEAR))
    return "exclude_outside needs cubic mode (or antialiased linear)";
  return NULL;
}

static bool claim_resize(claim_ctx *c, const op_def *def) {
  rs_attrs a;
  const char *why = rs_parse(c->node, &a);
  if (why) return claim_decline(c, "%s", why);
  const ir_value *x = claim_input(c, 0);
  if (x && x->rank > OP_UTIL_MAX_RANK) return claim_decline(c, "input rank %d (at most %d)", x->rank, OP_UTIL_MAX_RANK);
  int32_t t = claim_input_dtype(c, 0);
  bool is_float = t == ONNX_FLOAT || t == ONNX_FLOAT16 || t == ONNX_BFLOAT16 || t == ONNX_DOUBLE;
  if (!is_float && a.mode != RS_NEAREST)
    return claim_decline(c, "%s mode on %s (ORT's integer rounding paths are not reproduced)",
                         a.mode == RS_LINEAR ? "linear" : "cubic", ir_dtype_name(t));
  if (rs_is_upsample(c->node) && c->node->since_version < 9) {
    const float *sc;
    if (ir_attr_floats(c->node, "scales", &sc) == 0) return claim_decline(c, "scales attribute missing");
  }
  return true;
}

/* ORT's GetOriginalCoordinateFromResizedCoordinate, float for float. */
static float rs_original(rs_coord m, float x, float scale, float len_out, float len_in, float roi_start, float roi_end) {
  switch (m) {
    case RS_ASYMMETRIC: return x / scale;
    case RS_PYTORCH_HALF_PIXEL: return len_out > 1 ? (x + 0.5f) / scale - 0.5f : 0.0f;
    case RS_TF_HALF_PIXEL_FOR_NN: return (x + 0.5f) / scale;
    case RS_ALIGN_CORNERS: return len_out == 1 ? 0 : x * (len_in - 1) / (len_out - 1);
    case RS_TF_CROP_AND_RESIZE: {
      double orig = len_out > 1 ? roi_start * (len_in - 1) + (x * (roi_end - roi_start) * (len_in - 1)) / (len_out - 1)
                                : 0.5 * (roi_start + roi_end) * (len_in - 1);
      return (float)orig;
    }
    case RS_HALF_PIXEL_SYMMETRIC: {
      float output_width = scale * len_in;
      float adjustment = len_out / output_width;
      float center = len_in / 2;
      float offset = center * (1 - adjustment);
      double orig = offset + (x + 0.5) / scale - 0.5;
      return (float)orig;
    }
    default: return ((x + 0.5f) / scale) - 0.5f;
  }
}

/* ORT's GetNearestPixelFromOriginal. */
static int64_t rs_nearest_pixel(rs_nearest m, float x, bool down) {
  switch (m) {
    case RS_NN_SIMPLE: return down ? (int64_t)ceilf(x) : (int64_t)x;
    case RS_NN_ROUND_PREFER_CEIL: return (int64_t)roundf(x);
    case RS_NN_FLOOR: return (int64_t)floorf(x);
    case RS_NN_CEIL: return (int64_t)ceilf(x);
    default:
      if (x == (float)(int64_t)x + 0.5f) return (int64_t)floorf(x);
      return (int64_t)roundf(x);
  }
}

/* Float coordinates can be anything; keep them where int64 conversions are defined. */
static float rs_safe(float v) {
  if (v != v) return 0;
  return v < -1e15f ? -1e15f : v > 1e15f ? 1e15f : v;
}

static int64_t rs_clamp(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* ORT's GetCubicCoeffs. */
static void rs_cubic_coeffs(float s, float a, float c[4]) {
  float x = fabsf(s);
  c[0] = ((a * (x + 1) - 5 * a) * (x + 1) + 8 * a) * (x + 1) - 4 * a;
  c[1] = ((a + 2) * x - (a + 3)) * x * x + 1;
  c[2] = ((a + 2) * (1 - x) - (a + 3)) * (1 - x) * (1 - x) + 1;
  c[3] = ((a * (2 - x) - 5 * a) * (2 - x) + 8 * a) * (2 - x) - 4 * a;
}

/* Antialiasing filters of ORT's upsample_aa (Pillow's). */
static float rs_aa_filter(const rs_attrs *a, float x) {
  if (x < 0.0f) x = -x;
  if (a->mode == RS_LINEAR) return x < 1.0f ? 1.0f - x : 0.0f;
  if (x < 1.0f) return ((a->cubic_a + 2.0f) * x - (a->cubic_a + 3.0f)) * x * x + 1;
  if (x < 2.0f) return (((x - 5.0f) * x + 8.f) * x - 4.f) * a->cubic_a;
  return 0.0f;
}

static int rs_table_alloc(op_ctx *c, rs_table *t, int64_t out, int taps, bool weights) {
  t->out = out, t->taps = taps;
  size_t n = (size_t)(out * taps > 0 ? out * taps : 1);
  t->idx = calloc(n, sizeof *t->idx);
  t->w = weights ? calloc(n, sizeof *t->w) : NULL;
  t->ext = calloc((size_t)(out > 0 ? out : 1), 1);
  if (!t->idx || (weights && !t->w) || !t->ext) return op_fail(c, "out of memory");
  return 0;
}

/* Antialiased table of one axis (ORT's SetupUpsampleFilterAA, float for float). */
static int rs_table_aa(op_ctx *c, const rs_attrs *a, rs_table *t, int64_t in, int64_t out, float rscale, float rs0,
                       float rs1) {
  float support_size = a->mode == RS_LINEAR ? 2.0f : 4.0f;
  float scale = 1.0f / rscale;
  float support = scale >= 1.0f ? (support_size * 0.5f) * scale : support_size * 0.5f;
  if (!(support < 1e6f)) return op_fail(c, "antialias window too large");
  int window = (int)ceilf(support) * 2 + 1;
  float inv_scale = scale >= 1.0f ? 1.0f / scale : 1.0f;
  if (rs_table_alloc(c, t, out, window, true) < 0) return -1;
  float *buf = malloc(sizeof *buf * (size_t)window);
  if (!buf) return op_fail(c, "out of memory");
  for (int64_t i = 0; i < out; i++) {
    float center = 0.5f + (scale == 1.0f ? (float)i : rs_original(a->coord, (float)i, rscale, (float)out, (float)in, rs0, rs1));
    center = rs_safe(center);
    float total = 0.0f;
    /* Window bounds round down (ORT 1.2x floors; older releases truncated toward zero). */
    int64_t xmin_real = (int64_t)floor(center - support + 0.5), xmax_real = (int64_t)floor(center + support + 0.5);
    int64_t xmin_cut = xmin_real > 0 ? xmin_real : 0, xmax_cut = xmax_real < in ? xmax_real : in;
    int64_t xmin = a->exclude_outside ? xmin_cut : xmin_real, xmax = a->exclude_outside ? xmax_cut : xmax_real;
    xmax -= xmin;
    if (xmax > window) xmax = window; /* float rounding cannot widen the window past its size */
    for (int64_t x = 0; x < window; x++) buf[x] = 0;
    for (int64_t x = 0; x < xmax; x++) {
      float w = rs_aa_filter(a, ((float)(x + xmin) - center + 0.5f) * inv_scale);
      buf[x] = w;
      total += w;
    }
    if (!a->exclude_outside) {
      /* Weights of taps outside the input fold into the edge taps. */
      int64_t neg = xmin < 0 ? -xmin : 0;
      if (neg > window - 1) neg = window - 1;
      for (int64_t x = 0; x < neg; x++) buf[neg] += buf[x];
      int64_t bound = xmax + xmin > in ? xmax + xmin - in : 0;
      for (int64_t x = xmax - bound; x < xmax && xmax - bound - 1 >= 0; x++) buf[xmax - bound - 1] += buf[x];
      for (int64_t x = 0; (neg | bound) > 0 && x < xmax_cut - xmin_cut && x + neg < window; x++) buf[x] = buf[x + neg];
    }
    for (int64_t x = 0; x < xmax; x++)
      if (total != 0.0f && total != 1) buf[x] /= total;
    int64_t used = xmax_cut - xmin_cut;
    for (int64_t k = 0; k < window; k++) {
      bool live = k < used;
      t->idx[i * window + k] = live ? rs_clamp(xmin_cut + k, 0, in - 1) : 0;
      t->w[i * window + k] = live ? buf[k] : 0.0f;
    }
  }
  free(buf);
  return 0;
}

/* Table of one axis for nearest, linear or cubic (ORT's setup functions). */
static int rs_table_build(op_ctx *c, const rs_attrs *a, rs_table *t, int64_t in, int64_t out, float scale, float rs0,
                          float rs1) {
  if (a->antialias) return rs_table_aa(c, a, t, in, out, scale, rs0, rs1);
  bool extrap = a->coord == RS_TF_CROP_AND_RESIZE;
  int taps = a->mode == RS_NEAREST ? 1 : a->mode == RS_LINEAR ? 2 : 4;
  if (rs_table_alloc(c, t, out, taps, a->mode != RS_NEAREST) < 0) return -1;
  for (int64_t i = 0; i < out; i++) {
    bool identity = scale == 1.0f;
    float orig = identity ? (float)i : rs_safe(rs_original(a->coord, (float)i, scale, (float)out, (float)in, rs0, rs1));
    t->ext[i] = !identity && extrap && (orig < 0 || orig > (float)(in - 1));
    int64_t *ix = t->idx + i * taps;
    float *w = t->w ? t->w + i * taps : NULL;
    if (a->mode == RS_NEAREST) {
      ix[0] = identity ? i : rs_clamp(rs_nearest_pixel(a->nearest, orig, scale < 1), 0, in - 1);
    } else if (a->mode == RS_LINEAR) {
      float v = fmaxf(0.0f, fminf(orig, (float)(in - 1)));
      int64_t x1 = (int64_t)v < in - 1 ? (int64_t)v : in - 1, x2 = x1 + 1 < in - 1 ? x1 + 1 : in - 1;
      float d1 = fabsf(v - (float)x1), d2 = fabsf(v - (float)x2);
      if (x1 == x2) d1 = d2 = 0.5f;
      ix[0] = x1, ix[1] = x2, w[0] = d2, w[1] = d1;
    } else {
      int64_t xi = (int64_t)floorf(orig);
      float co[4], sum = 1;
      rs_cubic_coeffs(orig - (float)xi, a->cubic_a, co);
      if (a->exclude_outside) {
        sum = 0;
        for (int k = 0; k < 4; k++) {
          int64_t p = xi - 1 + k;
          if (p < 0 || p >= in) co[k] = 0.0f;
          sum += co[k];
        }
      }
      for (int k = 0; k < 4; k++) ix[k] = rs_clamp(xi - 1 + k, 0, in - 1), w[k] = co[k] / sum;
    }
  }
  return 0;
}

/* Applies one axis table: y[..., o, ...] = sum_k w[o, k] * x[..., idx[o, k], ...]. */
static mlxb_array *rs_apply_axis(op_ctx *c, mlxb_array *x, int axis, const rs_table *t, mlxb_dtype ct) {
  mlxb_scope *s = op_scope(c);
  int rank = mlxb_ndim(x);
  int64_t dims[OP_UTIL_MAX_RANK + 1], n = t->out * t->taps;
  mlxb_shape(x, dims);
  mlxb_array *idx = op_util_index_array(s, t->idx, n);
  if (!idx) {
    op_fail(c, "out of memory");
    return NULL;
  }
  mlxb_array *g = mlxb_take(s, x, idx, axis);
  if (!t->w) return g;
  int64_t split[OP_UTIL_MAX_RANK + 1], wd[OP_UTIL_MAX_RANK + 1];
  for (int i = 0, j = 0; i < rank; i++) {
    if (i == axis) split[j++] = t->out, split[j++] = t->taps;
    else split[j++] = dims[i];
  }
  int wr = 2 + (rank - axis - 1);
  wd[0] = t->out, wd[1] = t->taps;
  for (int i = 2; i < wr; i++) wd[i] = 1;
  mlxb_array *w = op_util_float_array(s, t->w, wd, wr, ct);
  mlxb_array *prod = mlxb_binary(s, MLXB_MUL, mlxb_reshape(s, g, split, rank + 1), w);
  int red = axis + 1;
  return mlxb_reduce(s, MLXB_RSUM, prod, &red, 1, false);
}

/* Scales (and output dims) of a Resize/Upsample node for input dims; roi for tf_crop_and_resize. */
static int rs_geometry(op_ctx *c, const rs_attrs *a, const int64_t *in, int rank, float *scales, int64_t *out,
                       float *roi) {
  const ir_node *n = op_node(c);
  int opset = n->since_version;
  bool upsample = rs_is_upsample(n);
  for (int i = 0; i < rank; i++) scales[i] = 1.0f, out[i] = in[i], roi[i] = 0.0f, roi[rank + i] = 1.0f;
  int naxes = a->naxes;
  int axes[OP_UTIL_MAX_RANK];
  for (int k = 0; k < naxes; k++) {
    int64_t ax = a->axes[k] < 0 ? a->axes[k] + rank : a->axes[k];
    if (ax < 0 || ax >= rank) return op_fail(c, "axis %lld out of range", (long long)a->axes[k]);
    axes[k] = (int)ax;
  }
  int want = naxes ? naxes : rank;
  /* roi (opset 11+, tf_crop_and_resize only) */
  if (!upsample && opset >= 11 && a->coord == RS_TF_CROP_AND_RESIZE && rs_input_size(c, 1) > 0) {
    float r[2 * OP_UTIL_MAX_RANK];
    int nr = rs_input_floats(c, 1, r, 2 * OP_UTIL_MAX_RANK);
    if (nr < 0) return -1;
    if (nr != 2 * want) return op_fail(c, "roi has %d values, %d expected", nr, 2 * want);
    for (int k = 0; k < want; k++) {
      int ax = naxes ? axes[k] : k;
      roi[ax] = r[k], roi[rank + ax] = r[want + k];
    }
  }
  float sc[OP_UTIL_MAX_RANK];
  int nsc = 0;
  int scales_input = upsample ? (opset >= 9 ? 1 : -1) : (opset >= 11 ? 2 : 1);
  if (scales_input < 0) {
    const float *v;
    size_t cnt = ir_attr_floats(n, "scales", &v);
    if (cnt != (size_t)rank) return op_fail(c, "scales has %zu values for rank %d", cnt, rank);
    memcpy(sc, v, cnt * sizeof *v);
    nsc = (int)cnt;
  } else if (rs_input_size(c, scales_input) > 0) {
    nsc = rs_input_floats(c, scales_input, sc, OP_UTIL_MAX_RANK);
    if (nsc < 0) return -1;
  }
  if (nsc > 0) {
    if (nsc != want) return op_fail(c, "scales has %d values, %d expected", nsc, want);
    if (!upsample && opset >= 11 && rs_input_size(c, 3) > 0) return op_fail(c, "only one of scales and sizes may be given");
    for (int k = 0; k < want; k++) scales[naxes ? axes[k] : k] = sc[k];
    for (int i = 0; i < rank; i++) {
      /* ORT's ScalesValidation, in its order and words. */
      if (!isfinite(scales[i])) return op_fail(c, "scale value must be finite");
      if (!(scales[i] > 0)) return op_fail(c, "scale value should be greater than 0");
      if ((upsample || opset < 10) && scales[i] < 1) return op_fail(c, "Upsample scales must be >= 1");
      /* ORT's int64_t(scale * in), in float; a product past int64 is refused, never converted. */
      float prod = scales[i] * (float)in[i];
      if (!(prod < 0x1p62f)) return op_fail(c, "output dimension %d (%g) is too large", i, (double)prod);
      out[i] = (int64_t)prod;
    }
    return 0;
  }
  if (upsample || opset < 11 || rs_input_size(c, 3) <= 0) return op_fail(c, "neither scales nor sizes is given");
  int64_t sz[OP_UTIL_MAX_RANK];
  int nsz = op_input_ints(c, 3, sz, OP_UTIL_MAX_RANK);
  if (nsz < 0) return op_fail(c, "cannot read sizes");
  if (nsz != want) return op_fail(c, "sizes has %d values, %d expected", nsz, want);
  for (int k = 0; k < want; k++) out[naxes ? axes[k] : k] = sz[k];
  for (int i = 0; i < rank; i++) {
    if (out[i] < 0) return op_fail(c, "scale value should be greater than 0 (size %lld)", (long long)out[i]);
    if (in[i] == 0) {
      if (out[i] != 0) return op_fail(c, "cannot resize an empty axis to a non-empty one");
      scales[i] = 1.0f;
    } else {
      scales[i] = (float)out[i] / (float)in[i];
    }
  }
  if (a->policy) {
    bool sel[OP_UTIL_MAX_RANK] = {false};
    for (int k = 0; k < naxes; k++) sel[axes[k]] = true;
    float pick = a->policy == 1 ? FLT_MAX : FLT_MIN;
    for (int i = 0; i < rank; i++)
      if (!naxes || sel[i]) pick = a->policy == 1 ? fminf(pick, scales[i]) : fmaxf(pick, scales[i]);
    for (int i = 0; i < rank; i++) {
      if (naxes && !sel[i]) {
        scales[i] = 1.0f, out[i] = in[i];
        continue;
      }
      float v = roundf(pick * (float)in[i]);
      if (!(v < 0x1p62f)) return op_fail(c, "output dimension %d (%g) is too large", i, (double)v);
      scales[i] = pick, out[i] = (int64_t)v;
    }
  }
  for (int i = 0; i < rank; i++)
    if (!(scales[i] > 0)) return op_fail(c, "scale value should be greater than 0");
  return 0;
}

/* The output's bytes against MLX's memory limit, before any host table or array is allocated. */
static int rs_check_size(op_ctx *c, const int64_t *out, int rank, mlxb_dtype t) {
  size_t bytes = mlxb_dtype_size(t), limit = mlxb_memory_limit();
  bool empty = false;
  for (int i = 0; i < rank; i++) {
    empty |= out[i] == 0;
    if (out[i] < 0 || __builtin_mul_overflow(bytes, (size_t)out[i], &bytes)) bytes = SIZE_MAX;
  }
  if (!empty && limit && bytes > limit)
    return op_fail(c, "output 0 needs %zu bytes, more than the memory limit (%zu bytes)", bytes, limit);
  for (int i = 0; i < rank; i++) /* an empty result too: every axis would get a table of out[i] entries */
    if (out[i] > INT32_MAX)
      return op_fail(c, "output dimension %d (%lld) is more than an MLX dimension holds", i, (long long)out[i]);
  return 0;
}

static int lower_resize(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  rs_attrs a;
  const char *why = rs_parse(op_node(c), &a);
  if (why) return op_fail(c, "%s", why);
  mlxb_array *x = op_input(c, 0);
  int rank = mlxb_ndim(x);
  if (rank < 1 || rank > OP_UTIL_MAX_RANK) return op_fail(c, "input rank %d (1 to %d)", rank, OP_UTIL_MAX_RANK);
  int64_t in[OP_UTIL_MAX_RANK], out[OP_UTIL_MAX_RANK];
  float scales[OP_UTIL_MAX_RANK], roi[2 * OP_UTIL_MAX_RANK];
  mlxb_shape(x, in);
  if (rs_geometry(c, &a, in, rank, scales, out, roi) < 0) return -1;
  if (rs_check_size(c, out, rank, mlxb_type(x)) < 0) return -1;
  bool same = true;
  for (int i = 0; i < rank; i++) same &= out[i] == in[i];
  if (same) return op_set_output(c, 0, x); /* ORT copies the input whatever the scales */
  for (int i = 0; i < rank; i++)
    if (in[i] == 0 && out[i] != 0) return op_fail(c, "cannot resize an empty axis");
  if (op_util_numel(out, rank) == 0) /* nothing to compute: no table for the other axes either */
    return op_set_output(c, 0, mlxb_zeros(s, out, rank, mlxb_type(x)));
  mlxb_dtype t = mlxb_type(x), ct = op_util_is_float(t) ? op_util_compute_type(t) : t;
  if (a.mode != RS_NEAREST && !op_util_is_float(t)) return op_fail(c, "linear/cubic resize needs a float input");
  mlxb_array *y = ct == t ? x : mlxb_astype(s, x, ct);
  mlxb_array *ext = NULL; /* bool mask of extrapolated outputs */
  int rc = 0;
  for (int ax = rank - 1; ax >= 0 && rc == 0; ax--) {
    if (in[ax] == 0 || out[ax] == 0) {
      int64_t st[OP_UTIL_MAX_RANK], sp[OP_UTIL_MAX_RANK], one[OP_UTIL_MAX_RANK], dims[OP_UTIL_MAX_RANK];
      if (!y) { /* a failed op upstream (dims would stay unset): the scope holds its error */
        rc = rs_failed(c);
        break;
      }
      mlxb_shape(y, dims);
      for (int i = 0; i < rank; i++) st[i] = 0, sp[i] = dims[i], one[i] = 1;
      sp[ax] = 0;
      y = mlxb_slice(s, y, st, sp, one);
      continue;
    }
    if (scales[ax] == 1.0f && out[ax] == in[ax] && !a.antialias) continue;
    rs_table tab = {0};
    rc = rs_table_build(c, &a, &tab, in[ax], out[ax], scales[ax], roi[ax], roi[rank + ax]);
    if (rc == 0) {
      y = rs_apply_axis(c, y, ax, &tab, ct);
      bool any = false;
      for (int64_t i = 0; i < tab.out; i++) any |= tab.ext[i] != 0;
      if (any) {
        int64_t md[OP_UTIL_MAX_RANK];
        for (int i = 0; i < rank; i++) md[i] = i == ax ? out[ax] : 1;
        mlxb_array *m = mlxb_from_data(s, tab.ext, md, rank, MLXB_BOOL);
        ext = ext ? mlxb_binary(s, MLXB_LOGICAL_OR, ext, m) : m;
      }
      if (!y) rc = rs_failed(c);
    }
    rs_table_free(&tab);
  }
  if (rc < 0) return -1;
  if (ext) y = mlxb_where(s, ext, mlxb_scalar_f64(s, a.extrapolation, ct), y);
  return op_set_output(c, 0, ct == t ? y : mlxb_astype(s, y, t));
}

/* ---- the table ---------------------------------------------------------------------------- */

static const op_def defs[] = {
    OP_ROW("", "Resize", 10, 25, .inputs = {1, 4}, .outputs = {1, 1}, .dtypes = DT_NUMERIC, .claim = claim_resize,
           .lower = lower_resize,
           .doc = "scales/sizes/roi read on the host; nearest (all nearest_mode values), n-linear and cubic "
                  "(cubic_coeff_a, exclude_outside) on any rank via per-axis gather tables with ORT's float "
                  "arithmetic; every coordinate_transformation_mode, tf_crop_and_resize extrapolation, axes, "
                  "keep_aspect_ratio_policy, antialias (ORT's filters); integer inputs only in nearest mode; "
                  "declined: antialias with tf_crop_and_resize"),
    OP_ROW("", "Upsample", 7, 9, .inputs = {1, 2}, .outputs = {1, 1}, .dtypes = DT_NUMERIC, .claim = claim_resize,
           .lower = lower_resize,
           .doc = "nearest and linear, scales attribute (7) or input (9, read on the host); asymmetric coordinates"),
};

OPS_FAMILY(resize, defs);
