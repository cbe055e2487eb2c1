/* Image ops: Resize/Upsample, GridSample, AffineGrid, Col2Im, RoiAlign and CenterCropPad.
 * Resize, Col2Im and RoiAlign depend on values known on the host (shapes, scales, rois), so
 * they become gathers through index/weight tables computed here with ORT's float arithmetic;
 * GridSample and AffineGrid take their coordinates from runtime data and compute them in MLX.
 * Every computed index is clamped into range before a gather (MLX does not bounds-check). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"

#define VIS_MAX_RANK 16

/* ---- helpers ------------------------------------------------------------------------------ */

static bool vis_is_half(mlxb_dtype t) { return t == MLXB_F16 || t == MLXB_BF16; }

static bool vis_is_float(mlxb_dtype t) { return vis_is_half(t) || t == MLXB_F32 || t == MLXB_F64; }

/* The dtype float work is done in: float32 for halves (ORT runs them in float32 too). */
static mlxb_dtype vis_compute_type(mlxb_dtype t) { return vis_is_half(t) ? MLXB_F32 : t; }

/* A NULL array means a failure: the bridge's error, or one recorded already with op_fail. */
static int vis_failed(op_ctx *c) {
  op_check(c);
  return -1;
}

/* Host int64 table -> MLX int32 array (indices are small; int32 halves the gather traffic). */
static mlxb_array *vis_index_array(mlxb_scope *s, const int64_t *v, int64_t n) {
  int32_t *tmp = malloc(sizeof *tmp * (size_t)(n ? n : 1));
  if (!tmp) return NULL;
  for (int64_t i = 0; i < n; i++) tmp[i] = (int32_t)v[i];
  mlxb_array *a = mlxb_from_data(s, tmp, &n, 1, MLXB_I32);
  free(tmp);
  return a;
}

/* Host float table -> MLX array of dtype t with the given shape. */
static mlxb_array *vis_float_array(mlxb_scope *s, const float *v, const int64_t *dims, int rank, mlxb_dtype t) {
  mlxb_array *a = mlxb_from_data(s, v, dims, rank, MLXB_F32);
  return t == MLXB_F32 ? a : mlxb_astype(s, a, t);
}

/* Reads a float vector input (any float dtype) as floats; returns the count or -1 (recorded). */
static int vis_input_floats(op_ctx *c, int i, float *out, int max) {
  double tmp[2 * VIS_MAX_RANK];
  if (max > 2 * VIS_MAX_RANK) max = 2 * VIS_MAX_RANK;
  int n = op_input_doubles(c, i, tmp, max);
  if (n < 0) return op_check(c) ? -1 : op_fail(c, "cannot read input %d on the host", i);
  for (int k = 0; k < n; k++) out[k] = (float)tmp[k];
  return n;
}

/* Element count of an optional input: -1 when absent. */
static int64_t vis_input_size(op_ctx *c, int i) {
  if (!op_has_input(c, i)) return -1;
  mlxb_array *a = op_input(c, i);
  return a ? (int64_t)mlxb_size(a) : -1;
}

/* ======================================================================== Resize / Upsample */

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
  int64_t axes[VIS_MAX_RANK];
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
  a->coord = RS_COORD_BAD;
  for (int i = 0; i < RS_COORD_BAD; i++)
    if (!strcmp(ct, coords[i])) a->coord = (rs_coord)i;
  if (a->coord == RS_COORD_BAD) return "unknown coordinate_transformation_mode";
  a->nearest = RS_NN_SIMPLE;
  if (!legacy && a->mode == RS_NEAREST) {
    const char *nm = ir_attr_string(n, "nearest_mode", "round_prefer_floor");
    static const char *const modes[] = {"", "round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
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
    if (nax > VIS_MAX_RANK) return "too many axes";
    memcpy(a->axes, ax, nax * sizeof *ax);
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
  if (x && x->rank > VIS_MAX_RANK) return claim_decline(c, "input rank %d (at most %d)", x->rank, VIS_MAX_RANK);
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
  int64_t dims[VIS_MAX_RANK + 1], n = t->out * t->taps;
  mlxb_shape(x, dims);
  mlxb_array *idx = vis_index_array(s, t->idx, n);
  if (!idx) {
    op_fail(c, "out of memory");
    return NULL;
  }
  mlxb_array *g = mlxb_take(s, x, idx, axis);
  if (!t->w) return g;
  int64_t split[VIS_MAX_RANK + 1], wd[VIS_MAX_RANK + 1];
  for (int i = 0, j = 0; i < rank; i++) {
    if (i == axis) split[j++] = t->out, split[j++] = t->taps;
    else split[j++] = dims[i];
  }
  int wr = 2 + (rank - axis - 1);
  wd[0] = t->out, wd[1] = t->taps;
  for (int i = 2; i < wr; i++) wd[i] = 1;
  mlxb_array *w = vis_float_array(s, t->w, wd, wr, ct);
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
  int axes[VIS_MAX_RANK];
  for (int k = 0; k < naxes; k++) {
    int64_t ax = a->axes[k] < 0 ? a->axes[k] + rank : a->axes[k];
    if (ax < 0 || ax >= rank) return op_fail(c, "axis %lld out of range", (long long)a->axes[k]);
    axes[k] = (int)ax;
  }
  int want = naxes ? naxes : rank;
  /* roi (opset 11+, tf_crop_and_resize only) */
  if (!upsample && opset >= 11 && a->coord == RS_TF_CROP_AND_RESIZE && vis_input_size(c, 1) > 0) {
    float r[2 * VIS_MAX_RANK];
    int nr = vis_input_floats(c, 1, r, 2 * VIS_MAX_RANK);
    if (nr < 0) return -1;
    if (nr != 2 * want) return op_fail(c, "roi has %d values, %d expected", nr, 2 * want);
    for (int k = 0; k < want; k++) {
      int ax = naxes ? axes[k] : k;
      roi[ax] = r[k], roi[rank + ax] = r[want + k];
    }
  }
  float sc[VIS_MAX_RANK];
  int nsc = 0;
  int scales_input = upsample ? (opset >= 9 ? 1 : -1) : (opset >= 11 ? 2 : 1);
  if (scales_input < 0) {
    const float *v;
    size_t cnt = ir_attr_floats(n, "scales", &v);
    if (cnt != (size_t)rank) return op_fail(c, "scales has %zu values for rank %d", cnt, rank);
    memcpy(sc, v, cnt * sizeof *v);
    nsc = (int)cnt;
  } else if (vis_input_size(c, scales_input) > 0) {
    nsc = vis_input_floats(c, scales_input, sc, VIS_MAX_RANK);
    if (nsc < 0) return -1;
  }
  if (nsc > 0) {
    if (nsc != want) return op_fail(c, "scales has %d values, %d expected", nsc, want);
    if (!upsample && opset >= 11 && vis_input_size(c, 3) > 0) return op_fail(c, "only one of scales and sizes may be given");
    for (int k = 0; k < want; k++) scales[naxes ? axes[k] : k] = sc[k];
    for (int i = 0; i < rank; i++) {
      if (!(scales[i] > 0)) return op_fail(c, "scales must be positive");
      if ((upsample || opset < 10) && scales[i] < 1) return op_fail(c, "Upsample scales must be >= 1");
      out[i] = (int64_t)(scales[i] * (float)in[i]);
    }
    return 0;
  }
  if (upsample || opset < 11 || vis_input_size(c, 3) <= 0) return op_fail(c, "neither scales nor sizes is given");
  int64_t sz[VIS_MAX_RANK];
  int nsz = op_input_ints(c, 3, sz, VIS_MAX_RANK);
  if (nsz < 0) return op_check(c) ? -1 : op_fail(c, "cannot read sizes");
  if (nsz != want) return op_fail(c, "sizes has %d values, %d expected", nsz, want);
  for (int k = 0; k < want; k++) out[naxes ? axes[k] : k] = sz[k];
  for (int i = 0; i < rank; i++) {
    if (out[i] < 0) return op_fail(c, "negative size");
    if (in[i] == 0) {
      if (out[i] != 0) return op_fail(c, "cannot resize an empty axis to a non-empty one");
      scales[i] = 1.0f;
    } else {
      scales[i] = (float)out[i] / (float)in[i];
    }
  }
  if (a->policy) {
    bool sel[VIS_MAX_RANK] = {false};
    for (int k = 0; k < naxes; k++) sel[axes[k]] = true;
    float pick = a->policy == 1 ? FLT_MAX : FLT_MIN;
    for (int i = 0; i < rank; i++)
      if (!naxes || sel[i]) pick = a->policy == 1 ? fminf(pick, scales[i]) : fmaxf(pick, scales[i]);
    for (int i = 0; i < rank; i++) {
      if (!naxes || sel[i]) scales[i] = pick, out[i] = (int64_t)roundf(pick * (float)in[i]);
      else scales[i] = 1.0f, out[i] = in[i];
    }
  }
  for (int i = 0; i < rank; i++)
    if (!(scales[i] > 0)) return op_fail(c, "scales must be positive");
  return 0;
}

static int lower_resize(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  rs_attrs a;
  const char *why = rs_parse(op_node(c), &a);
  if (why) return op_fail(c, "%s", why);
  mlxb_array *x = op_input(c, 0);
  if (!x) return op_check(c) ? -1 : op_fail(c, "input is missing");
  int rank = mlxb_ndim(x);
  if (rank < 1 || rank > VIS_MAX_RANK) return op_fail(c, "input rank %d (1 to %d)", rank, VIS_MAX_RANK);
  int64_t in[VIS_MAX_RANK], out[VIS_MAX_RANK];
  float scales[VIS_MAX_RANK], roi[2 * VIS_MAX_RANK];
  mlxb_shape(x, in);
  if (rs_geometry(c, &a, in, rank, scales, out, roi) < 0) return -1;
  bool same = true;
  for (int i = 0; i < rank; i++) same &= out[i] == in[i];
  if (same) return op_set_output(c, 0, x); /* ORT copies the input whatever the scales */
  for (int i = 0; i < rank; i++)
    if (in[i] == 0 && out[i] != 0) return op_fail(c, "cannot resize an empty axis");
  mlxb_dtype t = mlxb_type(x), ct = vis_is_float(t) ? vis_compute_type(t) : t;
  if (a.mode != RS_NEAREST && !vis_is_float(t)) return op_fail(c, "linear/cubic resize needs a float input");
  mlxb_array *y = ct == t ? x : mlxb_astype(s, x, ct);
  mlxb_array *ext = NULL; /* bool mask of extrapolated outputs */
  int rc = 0;
  for (int ax = rank - 1; ax >= 0 && rc == 0; ax--) {
    if (in[ax] == 0 || out[ax] == 0) {
      int64_t st[VIS_MAX_RANK], sp[VIS_MAX_RANK], one[VIS_MAX_RANK], dims[VIS_MAX_RANK];
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
        int64_t md[VIS_MAX_RANK];
        for (int i = 0; i < rank; i++) md[i] = i == ax ? out[ax] : 1;
        mlxb_array *m = mlxb_from_data(s, tab.ext, md, rank, MLXB_BOOL);
        ext = ext ? mlxb_binary(s, MLXB_LOGICAL_OR, ext, m) : m;
      }
      if (!y) rc = vis_failed(c);
    }
    rs_table_free(&tab);
  }
  if (rc < 0) return -1;
  if (ext) y = mlxb_where(s, ext, mlxb_scalar_f64(s, a.extrapolation, ct), y);
  return op_set_output(c, 0, ct == t ? y : mlxb_astype(s, y, t));
}

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
  if (!x || !grid) return op_check(c) ? -1 : op_fail(c, "X and grid are required");
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
  mlxb_dtype t = mlxb_type(x), ct = vis_compute_type(t);
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
  if (!theta) return op_check(c) ? -1 : op_fail(c, "theta is missing");
  int64_t size[5];
  int ns = op_input_ints(c, 1, size, 5);
  if (ns < 0) return op_check(c) ? -1 : op_fail(c, "cannot read size");
  if (ns != 4 && ns != 5) return op_fail(c, "size must hold 4 or 5 values");
  int nsp = ns - 2;
  bool align = ir_attr_int(op_node(c), "align_corners", 0) != 0;
  int64_t N = size[0];
  if (mlxb_ndim(theta) != 3 || mlxb_dim(theta, 0) != N || mlxb_dim(theta, 1) != nsp || mlxb_dim(theta, 2) != nsp + 1)
    return op_fail(c, "theta must be [N, %d, %d]", nsp, nsp + 1);
  for (int i = 2; i < ns; i++)
    if (size[i] < 0) return op_fail(c, "negative size");
  mlxb_dtype t = mlxb_type(theta), ct = vis_compute_type(t);
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
    base[j] = vis_float_array(s, v, bd, nsp + 1, ct);
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

/* Each output pixel gathers the column entries that land on it (a host table padded with a
 * zero entry), then sums them: the adjoint of im2col without a scatter. */
static int lower_col2im(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_node *node = op_node(c);
  mlxb_array *x = op_input(c, 0);
  if (!x) return op_check(c) ? -1 : op_fail(c, "input is missing");
  int64_t img[VIS_MAX_RANK], blk[VIS_MAX_RANK];
  int ni = op_input_ints(c, 1, img, VIS_MAX_RANK), nb = op_input_ints(c, 2, blk, VIS_MAX_RANK);
  if (ni < 0 || nb < 0) return op_check(c) ? -1 : op_fail(c, "cannot read image_shape/block_shape");
  if (ni != nb || ni < 1) return op_fail(c, "image_shape and block_shape must have the same positive length");
  int nsp = ni;
  int64_t dil[VIS_MAX_RANK], str[VIS_MAX_RANK], pads[2 * VIS_MAX_RANK], nblk[VIS_MAX_RANK];
  const int64_t *v;
  size_t cnt;
  for (int i = 0; i < nsp; i++) dil[i] = 1, str[i] = 1, pads[i] = pads[i + nsp] = 0;
  if ((cnt = ir_attr_ints(node, "dilations", &v)) && cnt != (size_t)nsp) return op_fail(c, "dilations length");
  for (size_t i = 0; i < cnt; i++) dil[i] = v[i];
  if ((cnt = ir_attr_ints(node, "strides", &v)) && cnt != (size_t)nsp) return op_fail(c, "strides length");
  for (size_t i = 0; i < cnt; i++) str[i] = v[i];
  if ((cnt = ir_attr_ints(node, "pads", &v)) && cnt != (size_t)(2 * nsp)) return op_fail(c, "pads length");
  for (size_t i = 0; i < cnt; i++) pads[i] = v[i];
  int64_t K = 1, L = 1, P = 1;
  for (int i = 0; i < nsp; i++) {
    if (dil[i] < 1 || str[i] < 1 || blk[i] < 1 || img[i] < 0 || pads[i] < 0 || pads[i + nsp] < 0)
      return op_fail(c, "invalid block, stride, dilation, pad or image value");
    int64_t span = dil[i] * (blk[i] - 1) + 1;
    nblk[i] = (img[i] + pads[i] + pads[i + nsp] - span) / str[i] + 1;
    if (nblk[i] < 0) nblk[i] = 0;
    K *= blk[i], L *= nblk[i], P *= img[i];
  }
  if (mlxb_ndim(x) != 3 || mlxb_dim(x, 2) != L || mlxb_dim(x, 1) % K)
    return op_fail(c, "input must be [N, C*%lld, %lld]", (long long)K, (long long)L);
  int64_t N = mlxb_dim(x, 0), C = mlxb_dim(x, 1) / K;
  /* taps per pixel: product over axes of the (kernel offset, block) pairs hitting it */
  int64_t T = 1;
  for (int i = 0; i < nsp; i++) T *= blk[i];
  int64_t tn = P * T, sentinel = K * L;
  int64_t *table = malloc(sizeof *table * (size_t)(tn ? tn : 1));
  if (!table) return op_fail(c, "out of memory");
  for (int64_t p = 0; p < P; p++) {
    int64_t pi[VIS_MAX_RANK], rem = p;
    for (int i = nsp - 1; i >= 0; i--) pi[i] = rem % img[i], rem /= img[i];
    int64_t n = 0;
    for (int64_t k = 0; k < K; k++) {
      int64_t krem = k, bflat = 0, ok = 1;
      int64_t ki[VIS_MAX_RANK];
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
  mlxb_dtype t = mlxb_type(x), ct = vis_compute_type(t);
  int64_t flat[3] = {N, C, K * L}, zd[3] = {N, C, 1}, gd[4] = {N, C, P, T};
  mlxb_array *xf = mlxb_reshape(s, mlxb_astype(s, x, ct), flat, 3);
  const mlxb_array *parts[2] = {xf, mlxb_zeros(s, zd, 3, ct)};
  xf = mlxb_concat(s, parts, 2, 2);
  mlxb_array *idx = tn <= INT32_MAX ? vis_index_array(s, table, tn) : mlxb_from_data(s, table, &tn, 1, MLXB_I64);
  free(table);
  if (!idx) return op_fail(c, "out of memory");
  mlxb_array *g = mlxb_reshape(s, mlxb_take(s, xf, idx, 2), gd, 4);
  int ax = 3;
  mlxb_array *y = mlxb_reduce(s, MLXB_RSUM, g, &ax, 1, false);
  int64_t od[VIS_MAX_RANK + 2];
  od[0] = N, od[1] = C;
  for (int i = 0; i < nsp; i++) od[2 + i] = img[i];
  y = mlxb_reshape(s, y, od, nsp + 2);
  return op_set_output(c, 0, ct == t ? y : mlxb_astype(s, y, t));
}

/* ======================================================================== RoiAlign */

static bool claim_roi_align(claim_ctx *c, const op_def *def) {
  const char *mode = ir_attr_string(c->node, "mode", "avg");
  if (strcmp(mode, "avg") && strcmp(mode, "max")) return claim_decline(c, "unknown mode '%s'", mode);
  const char *ct = ir_attr_string(c->node, "coordinate_transformation_mode", "half_pixel");
  if (c->node->since_version >= 16 && strcmp(ct, "half_pixel") && strcmp(ct, "output_half_pixel"))
    return claim_decline(c, "unknown coordinate_transformation_mode '%s'", ct);
  const ir_value *x = claim_input(c, 0);
  if (x && x->rank >= 0 && x->rank != 4) return claim_decline(c, "input rank %d (must be 4)", x->rank);
  if (claim_input_dtype(c, 0) == ONNX_DOUBLE) return claim_decline(c, "float64 (sample tables are computed in float32)");
  if (claim_input_dtype(c, 2) != ONNX_INT64) return claim_decline(c, "batch_indices must be int64");
  if (ir_attr_int(c->node, "output_height", 1) < 1 || ir_attr_int(c->node, "output_width", 1) < 1)
    return claim_decline(c, "output_height/output_width must be positive");
  return true;
}

/* The rois are read on the host and every sample point of every bin becomes four (position,
 * weight) pairs with ORT's float arithmetic (PreCalcForBilinearInterpolate); the pairs gather
 * rows of the [N*H*W, C] input. avg sums the weighted corners; max takes ORT's maximum of the
 * weighted corners per sample, then over the samples. */
static int lower_roi_align(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_node *node = op_node(c);
  mlxb_array *x = op_input(c, 0), *r = op_input(c, 1), *bi = op_input(c, 2);
  if (!x || !r || !bi) return op_check(c) ? -1 : op_fail(c, "X, rois and batch_indices are required");
  if (mlxb_ndim(x) != 4 || mlxb_ndim(r) != 2 || mlxb_dim(r, 1) != 4 || mlxb_ndim(bi) != 1 || mlxb_dim(bi, 0) != mlxb_dim(r, 0))
    return op_fail(c, "X must be 4-D, rois [R, 4] and batch_indices [R]");
  int64_t N = mlxb_dim(x, 0), C = mlxb_dim(x, 1), H = mlxb_dim(x, 2), W = mlxb_dim(x, 3), R = mlxb_dim(r, 0);
  int64_t PH = ir_attr_int(node, "output_height", 1), PW = ir_attr_int(node, "output_width", 1);
  int64_t ratio = ir_attr_int(node, "sampling_ratio", 0);
  float scale = ir_attr_float(node, "spatial_scale", 1.0f);
  bool is_max = !strcmp(ir_attr_string(node, "mode", "avg"), "max");
  bool half_pixel = node->since_version >= 16 && !strcmp(ir_attr_string(node, "coordinate_transformation_mode", "half_pixel"), "half_pixel");
  if (PH < 1 || PW < 1) return op_fail(c, "output_height/output_width must be positive");
  if (R > 0 && N * H * W == 0) return op_fail(c, "rois over an empty image");
  double *rv = malloc(sizeof *rv * (size_t)(R * 4 + 1));
  int64_t *bv = malloc(sizeof *bv * (size_t)(R + 1));
  int64_t *grid = malloc(sizeof *grid * (size_t)(2 * R + 1));
  int rc = -1;
  int64_t *pos = NULL;
  float *wt = NULL;
  uint8_t *live = NULL;
  float *count = NULL;
  if (!rv || !bv || !grid) {
    op_fail(c, "out of memory");
    goto done;
  }
  if ((R > 0 && op_input_doubles(c, 1, rv, (int)(R * 4)) != R * 4) || (R > 0 && op_input_ints(c, 2, bv, (int)R) != R)) {
    if (!op_check(c)) op_fail(c, "cannot read rois or batch_indices");
    goto done;
  }
  /* per roi sample grid */
  int64_t smax = 0;
  for (int64_t n = 0; n < R; n++) {
    if (bv[n] < 0 || bv[n] >= N) {
      op_fail(c, "batch index %lld outside [0, %lld)", (long long)bv[n], (long long)N);
      goto done;
    }
    float off = half_pixel ? 0.5f : 0.0f;
    float sw = (float)rv[n * 4 + 0] * scale - off, sh = (float)rv[n * 4 + 1] * scale - off;
    float ew = (float)rv[n * 4 + 2] * scale - off, eh = (float)rv[n * 4 + 3] * scale - off;
    float rw = ew - sw, rh = eh - sh;
    if (!half_pixel) rw = fmaxf(rw, 1.0f), rh = fmaxf(rh, 1.0f);
    int64_t gh = ratio > 0 ? ratio : (int64_t)ceilf(rh / (float)PH), gw = ratio > 0 ? ratio : (int64_t)ceilf(rw / (float)PW);
    if (gh < 0) gh = 0;
    if (gw < 0) gw = 0;
    if (gh > 4096 || gw > 4096) {
      op_fail(c, "roi %lld needs a %lldx%lld sample grid per bin", (long long)n, (long long)gh, (long long)gw);
      goto done;
    }
    grid[2 * n] = gh, grid[2 * n + 1] = gw;
    if (gh * gw > smax) smax = gh * gw;
  }
  if (smax == 0) smax = 1;
  int64_t bins = R * PH * PW, tn = bins * smax * 4;
  pos = malloc(sizeof *pos * (size_t)(tn ? tn : 1));
  wt = malloc(sizeof *wt * (size_t)(tn ? tn : 1));
  live = malloc((size_t)(bins * smax > 0 ? bins * smax : 1));
  count = malloc(sizeof *count * (size_t)(bins ? bins : 1));
  if (!pos || !wt || !live || !count) {
    op_fail(c, "out of memory");
    goto done;
  }
  for (int64_t n = 0; n < R; n++) {
    float off = half_pixel ? 0.5f : 0.0f;
    float sw = (float)rv[n * 4 + 0] * scale - off, sh = (float)rv[n * 4 + 1] * scale - off;
    float ew = (float)rv[n * 4 + 2] * scale - off, eh = (float)rv[n * 4 + 3] * scale - off;
    float rw = ew - sw, rh = eh - sh;
    if (!half_pixel) rw = fmaxf(rw, 1.0f), rh = fmaxf(rh, 1.0f);
    float bh = rh / (float)PH, bw = rw / (float)PW;
    int64_t gh = grid[2 * n], gw = grid[2 * n + 1], base = bv[n] * H * W;
    for (int64_t ph = 0; ph < PH; ph++) {
      for (int64_t pw = 0; pw < PW; pw++) {
        int64_t bin = (n * PH + ph) * PW + pw, k = 0;
        count[bin] = (float)(gh * gw);
        for (int64_t iy = 0; iy < gh; iy++) {
          float yy = sh + (float)ph * bh + (float)(iy + .5f) * bh / (float)gh;
          for (int64_t ix = 0; ix < gw; ix++, k++) {
            float xx = sw + (float)pw * bw + (float)(ix + .5f) * bw / (float)gw;
            float yv = yy, xv = xx;
            int64_t *p4 = pos + (bin * smax + k) * 4;
            float *w4 = wt + (bin * smax + k) * 4;
            live[bin * smax + k] = 1;
            if (yv < -1.0 || yv > H || xv < -1.0 || xv > W || yv != yv || xv != xv) {
              for (int q = 0; q < 4; q++) p4[q] = base, w4[q] = 0;
              continue;
            }
            if (yv <= 0) yv = 0;
            if (xv <= 0) xv = 0;
            int64_t yl = (int64_t)yv, xl = (int64_t)xv, yh, xh;
            if (yl >= H - 1) yh = yl = H - 1, yv = (float)yl;
            else yh = yl + 1;
            if (xl >= W - 1) xh = xl = W - 1, xv = (float)xl;
            else xh = xl + 1;
            float ly = yv - (float)yl, lx = xv - (float)xl, hy = 1.0f - ly, hx = 1.0f - lx;
            p4[0] = base + yl * W + xl, p4[1] = base + yl * W + xh, p4[2] = base + yh * W + xl, p4[3] = base + yh * W + xh;
            w4[0] = hy * hx, w4[1] = hy * lx, w4[2] = ly * hx, w4[3] = ly * lx;
          }
        }
        for (; k < smax; k++) {
          live[bin * smax + k] = 0;
          for (int q = 0; q < 4; q++) pos[(bin * smax + k) * 4 + q] = base, wt[(bin * smax + k) * 4 + q] = 0;
        }
      }
    }
  }
  mlxb_dtype t = mlxb_type(x), ct = vis_compute_type(t);
  int perm[4] = {0, 2, 3, 1}, back[4] = {0, 3, 1, 2};
  int64_t rows[2] = {N * H * W, C};
  mlxb_array *xr = mlxb_reshape(s, mlxb_transpose(s, mlxb_astype(s, x, ct), perm, 4), rows, 2);
  mlxb_array *pi = tn <= INT32_MAX ? vis_index_array(s, pos, tn) : mlxb_from_data(s, pos, &tn, 1, MLXB_I64);
  if (!pi) {
    op_fail(c, "out of memory");
    goto done;
  }
  int64_t gd[6] = {R, PH, PW, smax, 4, C}, wd[6] = {R, PH, PW, smax, 4, 1}, ld[5] = {R, PH, PW, smax, 1};
  int64_t cd[4] = {R, PH, PW, 1};
  mlxb_array *vals = mlxb_reshape(s, mlxb_take(s, xr, pi, 0), gd, 6);
  mlxb_array *prod = mlxb_binary(s, MLXB_MUL, vis_float_array(s, wt, wd, 6, ct), vals);
  mlxb_array *cnt = vis_float_array(s, count, cd, 4, ct);
  mlxb_array *y;
  int ax4 = 4, ax3 = 3;
  if (!is_max) {
    int axes[2] = {3, 4};
    /* ORT leaves bins without samples (a degenerate roi) at 0. */
    mlxb_array *empty = mlxb_binary(s, MLXB_EQUAL, cnt, gs_scalar(s, 0, ct));
    cnt = mlxb_where(s, empty, gs_scalar(s, 1, ct), cnt);
    y = mlxb_binary(s, MLXB_DIV, mlxb_reduce(s, MLXB_RSUM, prod, axes, 2, false), cnt);
  } else {
    mlxb_array *m = mlxb_reduce(s, MLXB_RMAX, prod, &ax4, 1, false);
    mlxb_array *lv = mlxb_from_data(s, live, ld, 5, MLXB_BOOL);
    m = mlxb_where(s, lv, m, gs_scalar(s, -INFINITY, ct));
    y = mlxb_reduce(s, MLXB_RMAX, m, &ax3, 1, false);
    y = mlxb_where(s, mlxb_binary(s, MLXB_EQUAL, cnt, gs_scalar(s, 0, ct)), gs_scalar(s, 0, ct), y);
  }
  y = mlxb_transpose(s, y, back, 4);
  rc = op_set_output(c, 0, ct == t ? y : mlxb_astype(s, y, t));
done:
  free(rv);
  free(bv);
  free(grid);
  free(pos);
  free(wt);
  free(live);
  free(count);
  return rc;
}

/* ======================================================================== CenterCropPad */

static int lower_center_crop_pad(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x = op_input(c, 0);
  if (!x) return op_check(c) ? -1 : op_fail(c, "input is missing");
  int rank = mlxb_ndim(x);
  if (rank > VIS_MAX_RANK) return op_fail(c, "rank %d (at most %d)", rank, VIS_MAX_RANK);
  int64_t dims[VIS_MAX_RANK], shape[VIS_MAX_RANK];
  mlxb_shape(x, dims);
  int ns = op_input_ints(c, 1, shape, VIS_MAX_RANK);
  if (ns < 0) return op_check(c) ? -1 : op_fail(c, "cannot read shape");
  const int64_t *ax;
  size_t nax = ir_attr_ints(op_node(c), "axes", &ax);
  int axes[VIS_MAX_RANK];
  if (nax == 0) {
    if (ns != rank) return op_fail(c, "shape has %d values for rank %d", ns, rank);
    for (int i = 0; i < rank; i++) axes[i] = i;
  } else {
    if ((size_t)ns != nax || nax > VIS_MAX_RANK) return op_fail(c, "shape and axes differ in length");
    for (size_t i = 0; i < nax; i++) {
      int64_t a = ax[i] < 0 ? ax[i] + rank : ax[i];
      if (a < 0 || a >= rank) return op_fail(c, "axis %lld out of range", (long long)ax[i]);
      axes[i] = (int)a;
    }
  }
  int64_t st[VIS_MAX_RANK], sp[VIS_MAX_RANK], one[VIS_MAX_RANK], lo[VIS_MAX_RANK] = {0}, hi[VIS_MAX_RANK] = {0};
  bool crop = false, grow = false;
  for (int i = 0; i < rank; i++) st[i] = 0, sp[i] = dims[i], one[i] = 1;
  for (int k = 0; k < ns; k++) {
    int a = axes[k];
    int64_t want = shape[k], dim = dims[a];
    if (want < 0) return op_fail(c, "negative target size");
    if (want < dim) {
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
    {"", "Resize", 10, 25, DT_NUMERIC, claim_resize, lower_resize, 0, OP_FLAG_HOST_VALUES,
     "scales/sizes/roi read on the host; nearest (all nearest_mode values), n-linear and cubic "
     "(cubic_coeff_a, exclude_outside) on any rank via per-axis gather tables with ORT's float arithmetic; "
     "every coordinate_transformation_mode, tf_crop_and_resize extrapolation, axes, "
     "keep_aspect_ratio_policy, antialias (ORT's filters); integer inputs only in nearest mode; "
     "declined: antialias with tf_crop_and_resize"},
    {"", "Upsample", 7, 9, DT_NUMERIC, claim_resize, lower_resize, 0, OP_FLAG_HOST_VALUES,
     "nearest and linear, scales attribute (7) or input (9, read on the host); asymmetric coordinates"},
    {"", "GridSample", 16, 25, DT_VFLOAT, claim_grid_sample, lower_grid_sample, 0, 0,
     "4-D and 5-D (like ORT); linear/bilinear, nearest (round half to even), cubic/bicubic (2-D); padding "
     "zeros/border/reflection, align_corners; taps are clamped into the image before every gather"},
    {"", "AffineGrid", 20, 25, DT_VFLOAT, claim_affine_grid, lower_affine_grid, 0, OP_FLAG_HOST_VALUES,
     "2-D and 3-D, size read on the host, align_corners; base grid as ORT builds it (Eigen LinSpaced)"},
    {"", "Col2Im", 18, 25, DT_VFLOAT, claim_col2im, lower_col2im, 0, OP_FLAG_HOST_VALUES,
     "any spatial rank; image_shape/block_shape read on the host; dilations, pads, strides; a gather of the "
     "columns landing on each pixel, summed"},
    {"", "RoiAlign", 10, 25, DT_F32 | DT_F16 | DT_BF16, claim_roi_align, lower_roi_align, 0, OP_FLAG_HOST_VALUES,
     "rois and batch_indices read on the host (each Run); avg and max (ORT's maximum of weighted corners), "
     "half_pixel/output_half_pixel, adaptive or fixed sampling_ratio; float64 declined"},
    {"", "CenterCropPad", 18, 25, DT_ALL, NULL, lower_center_crop_pad, 0, OP_FLAG_HOST_VALUES,
     "shape read on the host, optional axes; crops centred (floor) and zero-pads (extra at the end)"},
};

OPS_FAMILY(vision, defs);
