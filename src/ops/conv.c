/* Convolutions: Conv, ConvTranspose, ConvInteger and QLinearConv lowered onto MLX's channels-last
 * conv_general (NCHW is transposed to NHWC and OIHW to OHWI around it); DeformConv as gathers and
 * one matmul per group. Output shapes and pads are computed on the host with ORT's formulas;
 * half-precision inputs are computed in float32 and rounded once (ORT runs them through float32
 * too), integer ones exactly in float64. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"
#include "ops/op_util.h"

#define CONV_MAX_SP 3 /* MLX convolves 1 to 3 spatial axes */
#define CONV_MAX_RANK (CONV_MAX_SP + 2)

/* Geometry of one convolution, all per spatial axis. */
typedef struct conv_geom {
  int nsp;                      /* spatial rank */
  int64_t n, c, m;              /* batch, input channels, output channels */
  int64_t group;
  int64_t in[CONV_MAX_SP];      /* input extent */
  int64_t k[CONV_MAX_SP];       /* kernel extent */
  int64_t stride[CONV_MAX_SP];
  int64_t dil[CONV_MAX_SP];
  int64_t pad_lo[CONV_MAX_SP];
  int64_t pad_hi[CONV_MAX_SP];
  int64_t adj[CONV_MAX_SP];     /* ConvTranspose output_padding */
  int64_t out[CONV_MAX_SP];
} conv_geom;

/* A NULL array means a failure: the bridge's error, or one recorded already with op_fail. */
static int conv_failed(op_ctx *c) {
  op_check(c);
  return -1;
}

/* ---- attributes --------------------------------------------------------------------------- */

/* The geometry's attributes (a model file's) bounded to int32, so that kernel, stride, dilation
 * and pad arithmetic cannot pass int64, whatever the rank (which may be unknown at claim). */
static bool conv_claim_attr_bounds(claim_ctx *c) {
  static const char *const lists[] = {"kernel_shape", "strides", "dilations", "output_padding", "pads", "output_shape"};
  for (size_t i = 0; i < sizeof lists / sizeof *lists; i++) {
    const int64_t *v;
    size_t cnt = ir_attr_ints(c->node, lists[i], &v);
    for (size_t j = 0; j < cnt; j++)
      if (v[j] > INT32_MAX) return claim_decline(c, "%s holds %lld (above int32)", lists[i], (long long)v[j]);
  }
  if (ir_attr_int(c->node, "group", 1) > INT32_MAX) return claim_decline(c, "group is above int32");
  return true;
}

/* Attribute checks shared by every conv row; rank is the input rank when known (else -1),
 * w_input the index of the weight input. */
static bool conv_claim_attrs(claim_ctx *c, int rank, int w_input) {
  const ir_node *n = c->node;
  if (!op_util_claim_auto_pad(c)) return false;
  if (!conv_claim_attr_bounds(c)) return false;
  if (ir_attr_int(n, "group", 1) < 1) return claim_decline(c, "group must be >= 1");
  if (rank >= 0 && (rank < 3 || rank > CONV_MAX_RANK))
    return claim_decline(c, "input rank %d (MLX convolves 1 to 3 spatial axes)", rank);
  const ir_value *w = claim_input(c, w_input);
  if (w && w->rank >= 0 && (w->rank < 3 || w->rank > CONV_MAX_RANK))
    return claim_decline(c, "weight rank %d (MLX convolves 1 to 3 spatial axes)", w->rank);
  if (rank < 0 && w) rank = w->rank;
  if (rank < 0) return true;
  int nsp = rank - 2;
  const char *lists[] = {"kernel_shape", "strides", "dilations", "output_padding"};
  for (size_t i = 0; i < sizeof lists / sizeof *lists; i++) {
    const int64_t *v;
    size_t cnt = ir_attr_ints(n, lists[i], &v);
    if (cnt && cnt != (size_t)nsp) return claim_decline(c, "%s has %zu values for %d spatial axes", lists[i], cnt, nsp);
    for (size_t j = 0; j < cnt; j++)
      if (v[j] < (strcmp(lists[i], "output_padding") ? 1 : 0))
        return claim_decline(c, "%s holds %lld", lists[i], (long long)v[j]);
  }
  const int64_t *p;
  size_t np = ir_attr_ints(n, "pads", &p);
  if (np && np != (size_t)(2 * nsp)) return claim_decline(c, "pads has %zu values for %d spatial axes", np, nsp);
  for (size_t j = 0; j < np; j++)
    if (p[j] < 0) return claim_decline(c, "negative pads");
  return true;
}

/* ---- geometry ----------------------------------------------------------------------------- */

/* Reads shapes and attributes of x [N, C, in...] and w into g (everything but pads and out).
 * transpose: w is [C, M/group, k...] (ConvTranspose) rather than [M, C/group, k...]. */
static int conv_geom_read(op_ctx *c, const mlxb_array *x, const mlxb_array *w, bool transpose, conv_geom *g) {
  const ir_node *n = op_node(c);
  int rank = mlxb_ndim(x);
  if (rank < 3 || rank > CONV_MAX_RANK) return op_fail(c, "input rank %d (MLX convolves 1 to 3 spatial axes)", rank);
  if (mlxb_ndim(w) != rank) return op_fail(c, "weight rank %d differs from input rank %d", mlxb_ndim(w), rank);
  memset(g, 0, sizeof *g);
  g->nsp = rank - 2;
  g->n = mlxb_dim(x, 0);
  g->c = mlxb_dim(x, 1);
  g->group = ir_attr_int(n, "group", 1);
  if (g->group < 1) return op_fail(c, "group must be >= 1");
  for (int i = 0; i < g->nsp; i++) g->in[i] = mlxb_dim(x, i + 2), g->k[i] = mlxb_dim(w, i + 2);
  if (transpose) {
    if (mlxb_dim(w, 0) != g->c) return op_fail(c, "weight has %lld input channels, input %lld", (long long)mlxb_dim(w, 0), (long long)g->c);
    if (g->c % g->group) return op_fail(c, "input channels %lld not divisible by group %lld", (long long)g->c, (long long)g->group);
    g->m = mlxb_dim(w, 1) * g->group;
  } else {
    g->m = mlxb_dim(w, 0);
    if (g->c != mlxb_dim(w, 1) * g->group)
      return op_fail(c, "input channels %lld != weight channels %lld * group %lld", (long long)g->c,
                     (long long)mlxb_dim(w, 1), (long long)g->group);
    if (g->m % g->group) return op_fail(c, "output channels %lld not divisible by group %lld", (long long)g->m, (long long)g->group);
  }
  int64_t ks[CONV_MAX_SP];
  const int64_t *kv;
  if (ir_attr_ints(n, "kernel_shape", &kv)) {
    if (!op_util_attr_ints(n, "kernel_shape", ks, g->nsp, 1)) return op_fail(c, "kernel_shape does not match the weight rank");
    for (int i = 0; i < g->nsp; i++)
      if (ks[i] != g->k[i]) return op_fail(c, "kernel_shape does not match the weight shape");
  }
  if (op_util_spatial_attrs(c, g->nsp, g->stride, g->dil, g->pad_lo, g->pad_hi)) return -1;
  if (!op_util_attr_ints(n, "output_padding", g->adj, g->nsp, 0))
    return op_fail(c, "output_padding does not match the spatial rank %d", g->nsp);
  for (int i = 0; i < g->nsp; i++)
    if (g->stride[i] < 1 || g->dil[i] < 1 || g->k[i] < 1) return op_fail(c, "strides, dilations and kernel must be >= 1");
  for (int i = 0; transpose && i < g->nsp; i++) { /* ORT refuses it, output_shape or not */
    int64_t limit = g->stride[i] > g->dil[i] ? g->stride[i] : g->dil[i];
    if (g->adj[i] >= limit)
      return op_fail(c, "output_padding[%d] (%lld) must be less than max(stride, dilation) (%lld) for spatial dimension %d",
                     i, (long long)g->adj[i], (long long)limit, i);
  }
  return 0;
}

/* Conv pads and output extent (ORT's ComputePadAndOutputShape; explicit pads divide in double, as
 * onnxruntime 1.31's ComputeOutputShape does: in float, 2^31 - 3 over 2^31 - 1 rounded to one
 * window more than ORT gives). */
static int conv_geom_forward(op_ctx *c, conv_geom *g) {
  op_util_pad ap = op_util_auto_pad(op_node(c));
  for (int i = 0; i < g->nsp; i++) {
    int64_t dk = g->dil[i] * (g->k[i] - 1) + 1, in = g->in[i], s = g->stride[i];
    if (ap == OP_UTIL_PAD_NOTSET) {
      g->out[i] = (int64_t)((double)(in + g->pad_lo[i] + g->pad_hi[i] - dk) / (double)s + 1);
    } else if (ap == OP_UTIL_PAD_VALID) {
      g->pad_lo[i] = g->pad_hi[i] = 0;
      g->out[i] = (in - dk) / s + 1;
    } else {
      int64_t target = (in + s - 1) / s;
      int64_t needed = (target - 1) * s + dk - in; /* the dilated kernel, as the spec says (ORT rejects dilation) */
      if (needed < 0) needed = 0;                  /* ORT never crops here */
      g->out[i] = (in + needed - dk) / s + 1;
      g->pad_lo[i] = ap == OP_UTIL_PAD_SAME_LOWER ? (needed + 1) / 2 : needed / 2;
      g->pad_hi[i] = needed - g->pad_lo[i];
    }
    if (g->out[i] <= 0) return op_fail(c, "spatial axis %d: output extent %lld is not positive", i, (long long)g->out[i]);
  }
  return 0;
}

/* ConvTranspose pads and output extent (ORT's ComputeTransposePadAndOutputShape): an explicit
 * output_shape, or SAME_* (target extent input * stride), turns the excess length into pads,
 * the larger half at the tail for SAME_UPPER and at the head otherwise (ORT 1.2x, the spec). */
static int conv_geom_transpose(op_ctx *c, conv_geom *g) {
  const ir_node *n = op_node(c);
  op_util_pad ap = op_util_auto_pad(n);
  const int64_t *os;
  size_t nos = ir_attr_ints(n, "output_shape", &os);
  if (nos && nos != (size_t)g->nsp && nos != (size_t)g->nsp + 2)
    return op_fail(c, "output_shape has %zu values for %d spatial axes", nos, g->nsp);
  for (int i = 0; i < g->nsp; i++) {
    int64_t full = (g->in[i] - 1) * g->stride[i] + g->dil[i] * (g->k[i] - 1) + 1 + g->adj[i];
    int64_t want = -1;
    if (nos) {
      want = nos == (size_t)g->nsp ? os[i] : os[i + 2];
      if (want < 0) return op_fail(c, "negative output_shape");
    } else if (ap == OP_UTIL_PAD_SAME_UPPER || ap == OP_UTIL_PAD_SAME_LOWER) {
      want = g->in[i] * g->stride[i];
    }
    if (want >= 0) {
      int64_t total = full - want > 0 ? full - want : 0;
      if (ap == OP_UTIL_PAD_SAME_UPPER) g->pad_lo[i] = total / 2, g->pad_hi[i] = total - total / 2;
      else g->pad_lo[i] = total - total / 2, g->pad_hi[i] = total / 2;
    }
    g->out[i] = nos ? want : full - g->pad_lo[i] - g->pad_hi[i];
    if (g->out[i] <= 0) return op_fail(c, "spatial axis %d: output extent %lld is not positive", i, (long long)g->out[i]);
  }
  return 0;
}

/* ---- MLX building blocks ------------------------------------------------------------------ */

/* [N, C, s...] -> [N, s..., C] (to_last) or back. */
static mlxb_array *conv_move_channels(mlxb_scope *s, const mlxb_array *x, bool to_last) {
  int rank = mlxb_ndim(x), perm[CONV_MAX_RANK];
  perm[0] = 0;
  for (int i = 1; i < rank; i++) perm[i] = to_last ? (i == rank - 1 ? 1 : i + 1) : (i == 1 ? rank - 1 : i - 1);
  return mlxb_transpose(s, x, perm, rank);
}

static bool conv_fits_int(int64_t v) { return v >= -(1ll << 30) && v <= (1ll << 30); }

/* Slices axis `axis` of x to [start, stop). */
static mlxb_array *conv_slice_axis(mlxb_scope *s, mlxb_array *x, int axis, int64_t start, int64_t stop) {
  int rank = mlxb_ndim(x);
  int64_t lo[CONV_MAX_RANK], hi[CONV_MAX_RANK], st[CONV_MAX_RANK];
  mlxb_shape(x, hi);
  for (int i = 0; i < rank; i++) lo[i] = 0, st[i] = 1;
  lo[axis] = start, hi[axis] = stop;
  return mlxb_slice(s, x, lo, hi, st);
}

/* One convolution, split into groups where MLX cannot group. */
static mlxb_array *conv_call(op_ctx *c, mlxb_array *x, mlxb_array *w, const conv_geom *g, const int *st,
                             const int *pl, const int *ph, const int *kd, const int *id, bool flip) {
  mlxb_scope *s = op_scope(c);
  /* MLX groups only 1-D and 2-D convolutions, and none in float64: one convolution per group. */
  if (g->group == 1 || (g->nsp < 3 && mlxb_type(x) != MLXB_F64))
    return mlxb_conv_general(s, x, w, g->nsp, st, pl, ph, kd, id, (int)g->group, flip);
  int rank = g->nsp + 2;
  int64_t cg = g->c / g->group, mg = g->m / g->group;
  mlxb_array **parts = calloc((size_t)g->group, sizeof *parts);
  if (!parts) {
    op_fail(c, "out of memory");
    return NULL;
  }
  for (int64_t k = 0; k < g->group; k++) {
    mlxb_array *xk = conv_slice_axis(s, x, rank - 1, k * cg, (k + 1) * cg);
    mlxb_array *wk = conv_slice_axis(s, w, 0, k * mg, (k + 1) * mg);
    parts[k] = mlxb_conv_general(s, xk, wk, g->nsp, st, pl, ph, kd, id, 1, flip);
  }
  mlxb_array *y = mlxb_concat(s, (const mlxb_array *const *)parts, (int)g->group, rank - 1);
  free(parts);
  return y;
}

/* A forward convolution's outputs along an axis whose windows lie wholly in a pad read nothing but
 * zeros. Where a pad is past what MLX's 32-bit padding takes (a hostile pads attribute of
 * 2^31 - 1; ORT answers), the convolution covers the outputs between them, with the pads those
 * windows need (a negative head pad crops the input: conv_run), and zeros stand for the rest (the
 * bias is added after). Adjusts *lo and *hi and sets the zero outputs before (*lead) and after
 * (*tail); leaves everything as it is when the pads fit. Returns whether no window reads the
 * input at all (the whole result is zeros). */
static bool conv_zero_ends(const conv_geom *g, int i, int64_t in, int64_t *lo, int64_t *hi, int64_t stride,
                           int64_t dil, int64_t *lead, int64_t *tail) {
  *lead = *tail = 0;
  if ((*hi <= (1ll << 30) && *lo <= (1ll << 30)) || *lo < 0 || *hi < 0) return false;
  int64_t span = (g->k[i] - 1) * dil + 1, out = g->out[i];
  int64_t before = *lo >= span ? (*lo - span) / stride + 1 : 0;  /* windows ending before the input */
  int64_t upto = *lo + in > 0 ? (*lo + in - 1) / stride + 1 : 0; /* windows starting before its end */
  if (before > out) before = out;
  if (upto > out) upto = out;
  if (upto <= before) return true;
  int64_t first = *lo - before * stride; /* the first kept window's start, from the input's */
  int64_t need = (upto - before - 1) * stride + span - (first + in);
  *lo = first, *hi = need > 0 ? need : 0;
  *lead = before, *tail = out - upto;
  return false;
}

/* Channels-last convolution of x [N, s..., C] with pads lo/hi (negative values crop) giving the
 * extents g->out. MLX mishandles negative padding with input dilation, so pads reach it
 * non-negative: a forward convolution crops its input instead, a stride-1 one over a dilated
 * input (ConvTranspose) crops its output. */
static mlxb_array *conv_run(op_ctx *c, mlxb_array *x, mlxb_array *w, const conv_geom *g, const int64_t *lo,
                            const int64_t *hi, const int64_t *stride, const int64_t *in_dil, bool flip) {
  mlxb_scope *s = op_scope(c);
  int st[CONV_MAX_SP], pl[CONV_MAX_SP], ph[CONV_MAX_SP], kd[CONV_MAX_SP], id[CONV_MAX_SP];
  int64_t crop[CONV_MAX_SP] = {0}, lead[CONV_MAX_SP] = {0}, tail[CONV_MAX_SP] = {0}, l_run[CONV_MAX_SP],
          h_run[CONV_MAX_SP];
  bool all_zero = false;
  for (int i = 0; i < g->nsp; i++) {
    l_run[i] = lo[i], h_run[i] = hi[i];
    if (in_dil[i] == 1)
      all_zero |= conv_zero_ends(g, i, mlxb_dim(x, i + 1), &l_run[i], &h_run[i], stride[i],
                                 g->k[i] == 1 ? 1 : g->dil[i], &lead[i], &tail[i]);
  }
  if (all_zero) { /* [N, out..., M]: every window of some axis reads only padding */
    int64_t dims[CONV_MAX_RANK];
    dims[0] = mlxb_dim(x, 0), dims[g->nsp + 1] = mlxb_dim(w, 0);
    for (int i = 0; i < g->nsp; i++) dims[i + 1] = g->out[i];
    return mlxb_zeros(s, dims, g->nsp + 2, mlxb_type(x));
  }
  lo = l_run, hi = h_run;
  for (int i = 0; i < g->nsp; i++) {
    /* A stride past the padded extent leaves one window, at 0, as the extent itself does; a kernel
     * of one tap reads the same with any dilation: those reach MLX as such (ORT takes INT32_MAX). */
    int64_t sv = stride[i], dv = g->k[i] == 1 ? 1 : g->dil[i], ext = mlxb_dim(x, i + 1) + lo[i] + hi[i];
    if (in_dil[i] == 1 && ext >= 1 && sv > ext) sv = ext;
    if (!conv_fits_int(lo[i]) || !conv_fits_int(hi[i]) || !conv_fits_int(sv) || !conv_fits_int(dv) ||
        !conv_fits_int(in_dil[i])) {
      op_fail(c, "pads, strides or dilations exceed 32 bits");
      return NULL;
    }
    int64_t l = lo[i], h = hi[i];
    if (in_dil[i] == 1 && (l < 0 || h < 0)) {
      int64_t start = l < 0 ? -l : 0, stop = mlxb_dim(x, i + 1) + (h < 0 ? h : 0);
      if (stop <= start) {
        op_fail(c, "pads crop spatial axis %d to nothing", i);
        return NULL;
      }
      x = conv_slice_axis(s, x, i + 1, start, stop);
    } else if (l < 0) {
      crop[i] = -l;
    }
    st[i] = (int)sv, pl[i] = l < 0 ? 0 : (int)l, ph[i] = h < 0 ? 0 : (int)h;
    kd[i] = (int)dv, id[i] = (int)in_dil[i];
  }
  mlxb_array *y = conv_call(c, x, w, g, st, pl, ph, kd, id, flip);
  for (int i = 0; i < g->nsp && y; i++) {
    int64_t want = g->out[i] - lead[i] - tail[i];
    if (mlxb_dim(y, i + 1) < crop[i] + want) {
      op_fail(c, "spatial axis %d: convolution gave %lld values, %lld expected", i, (long long)mlxb_dim(y, i + 1),
              (long long)(crop[i] + want));
      return NULL;
    }
    if (crop[i] || mlxb_dim(y, i + 1) != want) y = conv_slice_axis(s, y, i + 1, crop[i], crop[i] + want);
    if ((!lead[i] && !tail[i]) || !y) continue;
    int64_t zdims[CONV_MAX_RANK];
    mlxb_shape(y, zdims);
    mlxb_array *parts[3];
    int n = 0;
    zdims[i + 1] = lead[i];
    if (lead[i]) parts[n++] = mlxb_zeros(s, zdims, mlxb_ndim(y), mlxb_type(y));
    parts[n++] = y;
    zdims[i + 1] = tail[i];
    if (tail[i]) parts[n++] = mlxb_zeros(s, zdims, mlxb_ndim(y), mlxb_type(y));
    y = mlxb_concat(s, (const mlxb_array *const *)parts, n, i + 1);
  }
  return y;
}

static bool conv_is_half(mlxb_dtype t) { return t == MLXB_F16 || t == MLXB_BF16; }

/* Adds a bias [M] to a channels-last result. */
/* The bias [M] in type t: *b NULL without one; -1 with the failure recorded for a bad one. */
static int conv_bias(op_ctx *c, int input, mlxb_dtype t, int64_t m, mlxb_array **b) {
  *b = NULL;
  if (!op_has_input(c, input)) return 0;
  mlxb_array *bias = op_input(c, input);
  if (!bias) return -1;
  if (mlxb_ndim(bias) != 1 || mlxb_dim(bias, 0) != m) return op_fail(c, "bias must have shape [%lld]", (long long)m);
  *b = mlxb_type(bias) != t ? mlxb_astype(op_scope(c), bias, t) : bias;
  return *b ? 0 : -1;
}

static mlxb_array *conv_add_bias(op_ctx *c, mlxb_array *y, int input, mlxb_dtype t, int64_t m) {
  mlxb_array *b;
  if (!y || conv_bias(c, input, t, m, &b)) return NULL;
  return b ? mlxb_binary(op_scope(c), MLXB_ADD, y, b) : y;
}

/* ---- Conv --------------------------------------------------------------------------------- */

static bool claim_conv(claim_ctx *c, const op_def *def) {
  const ir_value *x = claim_input(c, 0);
  if (claim_input_dtype(c, 1) != claim_input_dtype(c, 0)) return claim_decline(c, "weight dtype differs from input dtype");
  return conv_claim_attrs(c, x ? x->rank : -1, 1);
}

/* Conv's result with its bias, channels first, in the type it is computed in (float32 for half
 * inputs); NULL on failure. */
/* A 1x1 convolution without padding or groups on the CPU: one product [N * out..., C] x [C, M] of
 * the channels-last input (every stride-th position: a strided slice first) and the weight. MLX's
 * CPU convolution copies its input twice for any kernel (zero padding, then the unfolded windows)
 * before the same BLAS product; the pointwise convolutions of a CNN (squeezenet's squeeze and expand
 * layers, ResNet's and MobileNet's 1x1s) need neither copy. */
static bool conv_is_pointwise(mlxb_scope *s, const conv_geom *g) {
  if (mlxb_scope_device(s) != MLXB_DEVICE_CPU || g->group != 1) return false;
  for (int i = 0; i < g->nsp; i++)
    if (g->k[i] != 1 || g->pad_lo[i] != 0 || g->pad_hi[i] != 0) return false;
  return true;
}

/* wt: the weight as [C, M] (a prepared one), or NULL: wl [M, 1..., C] transposed here */
static mlxb_array *conv_pointwise(mlxb_scope *s, mlxb_array *xl, mlxb_array *wl, mlxb_array *wt, const conv_geom *g) {
  int rank = g->nsp + 2;
  int64_t start[CONV_MAX_RANK] = {0}, stop[CONV_MAX_RANK], step[CONV_MAX_RANK], dims[CONV_MAX_RANK];
  bool strided = false;
  for (int i = 0; i < rank; i++) stop[i] = mlxb_dim(xl, i), step[i] = 1;
  for (int i = 0; i < g->nsp; i++) {
    step[i + 1] = g->stride[i];
    strided = strided || g->stride[i] != 1;
  }
  if (strided) xl = mlxb_slice(s, xl, start, stop, step);
  int64_t rows = g->n;
  for (int i = 0; i < g->nsp; i++) rows *= g->out[i];
  int64_t x2[2] = {rows, g->c}, w2[2] = {g->m, g->c};
  if (!wt) wt = mlxb_transpose(s, mlxb_reshape(s, wl, w2, 2), (int[]){1, 0}, 2);
  mlxb_array *y = mlxb_matmul(s, mlxb_reshape(s, xl, x2, 2), wt);
  dims[0] = g->n;
  for (int i = 0; i < g->nsp; i++) dims[i + 1] = g->out[i];
  dims[rank - 1] = g->m;
  return mlxb_reshape(s, y, dims, rank);
}

/* A constant weight, channels-last in its compute type, made once at Compile: otherwise each Run
 * transposes it and the convolution copies the transposed view. */
typedef struct conv_prepared {
  mlxb_array *weight;    /* channels-last in its compute type, or NULL where packed is set */
  mlxb_array *pointwise; /* a one-tap weight of one group as [C, M] for conv_pointwise, or NULL */
  mlxb_array *packed;    /* a 1-D or 2-D float32 weight of one group packed for the CPU's GEMM, or NULL */
} conv_prepared;

/* The EP's CPU GEMM takes a constant float32 weight of one group, 1-D or 2-D, packed at Compile
 * (mlxb_gemm_pack of the channels-last [M, kh * kw * C], transposed). */
static mlxb_array *conv_pack_weight(op_ctx *c, mlxb_array *wl, mlxb_dtype ct) {
  mlxb_scope *s = op_scope(c);
  int rank = mlxb_ndim(wl);
  if (!mlxb_conv_packed_available(s) || ct != MLXB_F32 || ir_attr_int(op_node(c), "group", 1) != 1) return NULL;
  if (rank != 3 && rank != 4) return NULL;
  int64_t dims[2] = {mlxb_dim(wl, 0), mlxb_size(wl) / mlxb_dim(wl, 0)};
  return op_prepare_keep(c, mlxb_gemm_pack(s, mlxb_reshape(s, wl, dims, 2), true));
}

static int prepare_conv(op_ctx *c, const op_def *def, void **state) {
  static const int weight_input[] = {1};
  mlxb_array *w = op_input(c, 1);
  if (!w || !op_inputs_const(c, weight_input, 1)) return 0;
  int rank = mlxb_ndim(w);
  if (rank < 3 || rank > CONV_MAX_RANK) return 0; /* the lowering reports it */
  mlxb_scope *s = op_scope(c);
  mlxb_dtype t = mlxb_type(w); /* the claim asks the input's dtype of it */
  conv_prepared *kept = malloc(sizeof *kept);
  if (!kept) return op_fail(c, "out of memory");
  *state = kept;
  mlxb_dtype ct = conv_is_half(t) ? MLXB_F32 : t;
  mlxb_array *wl = mlxb_astype(s, conv_move_channels(s, w, true), ct);
  kept->weight = kept->pointwise = kept->packed = NULL;
  if (mlxb_size(w) > 0 && mlxb_dim(w, 0) > 0) {
    kept->packed = conv_pack_weight(c, wl, ct);
    if (!mlxb_ok(s)) return op_fail(c, "%s", mlxb_error(s));
    /* packed: the channels-last weight is not kept beside it (one copy of the weights fewer); the
     * rare Run the packed form does not take (a crop, an unfolded input past its bound) makes it */
    if (kept->packed) return 0;
  }
  kept->weight = op_prepare_keep(c, wl);
  if (!kept->weight) return -1;
  /* only a CPU scope takes conv_pointwise (a GPU's float64 reshape would also need the CPU stream) */
  bool one_tap = mlxb_scope_device(s) == MLXB_DEVICE_CPU && ir_attr_int(op_node(c), "group", 1) == 1;
  for (int i = 2; i < rank; i++) one_tap = one_tap && mlxb_dim(w, i) == 1;
  if (!one_tap) return 0;
  int64_t mc[2] = {mlxb_dim(w, 0), mlxb_dim(w, 1)};
  kept->pointwise = op_prepare_keep(c, mlxb_transpose(s, mlxb_astype(s, mlxb_reshape(s, w, mc, 2), ct), (int[]){1, 0}, 2));
  return kept->pointwise ? 0 : -1;
}

/* The packed weight's convolution of channels-last xl (1-D or 2-D), plus bias (or NULL) and then
 * ReLU when relu, in the GEMM's epilogue; NULL where it does not apply (crop, an unfolded input past
 * MAX_UNFOLDED floats: MLX's convolution then). */
enum { CONV_MAX_UNFOLDED = 1 << 28 };

static mlxb_array *conv_packed(op_ctx *c, mlxb_array *xl, const mlxb_array *packed, const conv_geom *g,
                               const mlxb_array *bias, bool relu) {
  mlxb_scope *s = op_scope(c);
  if (!packed || g->group != 1 || g->nsp > 2 || mlxb_type(xl) != MLXB_F32 || mlxb_size(xl) == 0) return NULL;
  int64_t taps = 1, rows = g->n;
  bool plain = true; /* one tap, stride 1, no padding: the input itself is the unfolded input */
  for (int i = 0; i < g->nsp; i++) {
    if (g->pad_lo[i] < 0 || g->pad_hi[i] < 0 || g->out[i] < 1 || g->out[i] > CONV_MAX_UNFOLDED / rows) return NULL;
    taps *= g->k[i], rows *= g->out[i];
    plain = plain && g->k[i] == 1 && g->stride[i] == 1 && g->pad_lo[i] == 0 && g->pad_hi[i] == 0;
  }
  if (taps > CONV_MAX_UNFOLDED / g->c || rows > CONV_MAX_UNFOLDED / (taps * g->c)) return NULL;
  if (plain) { /* [N * s..., C] x W: the product alone */
    int64_t x2[2] = {rows, g->c}, dims[CONV_MAX_RANK];
    mlxb_shape(xl, dims);
    dims[g->nsp + 1] = g->m;
    return mlxb_reshape(s, mlxb_gemm_packed(s, mlxb_reshape(s, xl, x2, 2), packed, g->m, bias, relu), dims,
                        g->nsp + 2);
  }
  bool one_d = g->nsp == 1;
  int sp = one_d ? 0 : 1; /* the second spatial axis, or the only one */
  mlxb_conv2d geo = {.m = g->m, .kh = one_d ? 1 : g->k[0], .kw = g->k[sp], .sh = one_d ? 1 : g->stride[0],
                     .sw = g->stride[sp], .ph = one_d ? 0 : g->pad_lo[0], .pw = g->pad_lo[sp],
                     .dh = one_d ? 1 : g->dil[0], .dw = g->dil[sp], .oh = one_d ? 1 : g->out[0], .ow = g->out[sp]};
  if (!one_d) return mlxb_conv_packed(s, xl, packed, &geo, bias, relu);
  int64_t x4[4] = {g->n, 1, g->in[0], g->c}, y3[3] = {g->n, g->out[0], g->m};
  return mlxb_reshape(s, mlxb_conv_packed(s, mlxb_reshape(s, xl, x4, 4), packed, &geo, bias, relu), y3, 3);
}

/* Conv's result with its bias, channels first, in its compute type; with relu, ReLU after it where
 * the packed GEMM's epilogue computes it (*relu_done says so; else the caller applies it). */
static mlxb_array *conv_forward(op_ctx *c, mlxb_dtype *compute_type, bool relu, bool *relu_done) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x = op_input(c, 0), *w = op_input(c, 1);
  conv_geom g;
  if (conv_geom_read(c, x, w, false, &g) < 0 || conv_geom_forward(c, &g) < 0) return NULL;
  mlxb_dtype t = mlxb_type(x), ct = conv_is_half(t) ? MLXB_F32 : t;
  *compute_type = ct;
  mlxb_array *xl = mlxb_astype(s, conv_move_channels(s, x, true), ct);
  const conv_prepared *kept = op_prepared(c);
  mlxb_array *wl = kept && kept->weight ? kept->weight : mlxb_astype(s, conv_move_channels(s, w, true), ct);
  int64_t ones[CONV_MAX_SP] = {1, 1, 1};
  *relu_done = false;
  mlxb_array *bias, *y = NULL;
  if (conv_bias(c, 2, ct, g.m, &bias)) return NULL;
  if (kept) {
    y = conv_packed(c, xl, kept->packed, &g, bias, relu);
    if (!y && !mlxb_ok(s)) return NULL;
    *relu_done = y && relu;
  }
  if (!y) {
    y = conv_is_pointwise(s, &g) ? conv_pointwise(s, xl, wl, kept ? kept->pointwise : NULL, &g)
                                 : conv_run(c, xl, wl, &g, g.pad_lo, g.pad_hi, g.stride, ones, false);
    if (y && bias) y = mlxb_binary(s, MLXB_ADD, y, bias);
  }
  return y ? conv_move_channels(s, y, false) : NULL;
}

/* The Relu node that alone reads this Conv's output (a CNN's usual pair), or NULL: folded into
 * the packed GEMM's epilogue, it costs no pass of its own over the output (op_compute_for). */
static const ir_node *conv_sole_relu(const op_ctx *c) {
  const ir_node *r = op_util_sole_reader(c, op_node(c));
  return r && op_util_is_relu(r) ? r : NULL;
}

static int lower_conv(op_ctx *c, const op_def *def) {
  mlxb_dtype ct, t = mlxb_type(op_input(c, 0));
  const ir_node *relu = conv_sole_relu(c);
  bool relu_done;
  mlxb_array *y = conv_forward(c, &ct, relu != NULL, &relu_done);
  if (!y) return conv_failed(c);
  if (ct != t) y = mlxb_astype(op_scope(c), y, t);
  /* folded: the Relu's output is this one, which nothing else reads (conv_sole_relu) */
  if (relu_done && op_compute_for(c, relu, y)) return -1;
  return op_set_output(c, 0, y);
}

/* ---- FusedConv (com.microsoft) ---------------------------------------------------------------
 * What ORT's optimizer makes of Conv (+ Add) + an activation for its CPU EP, as saved in optimized
 * models: activation(conv + bias + Z), with MLAS's activations and their activation_params. */

/* FusedConv's activations (a subset of op_fused_act's) and their activation_params. */
static int fused_conv_act(const ir_node *n, double *p) {
  static const char *const taken[] = {"Relu", "LeakyRelu", "Tanh", "Sigmoid", "Clip", "HardSigmoid", "HardSwish"};
  const char *name = ir_attr_string(n, "activation", "");
  size_t i = 0;
  while (i < sizeof taken / sizeof *taken && strcmp(name, taken[i])) i++;
  int kind = i < sizeof taken / sizeof *taken ? op_fused_act_find(name) : -1;
  const float *params;
  size_t count = ir_attr_floats(n, "activation_params", &params);
  if (kind < 0 || count < (size_t)op_fused_act_params(kind)) return -1;
  for (int i = 0; i < op_fused_act_params(kind); i++) p[i] = params[i];
  return kind;
}

static bool claim_fused_conv(claim_ctx *c, const op_def *def) {
  double p[3];
  if (fused_conv_act(c->node, p) < 0)
    return claim_decline(c, "activation '%s' or its activation_params (ORT's CPU kernel takes Relu, LeakyRelu, Tanh, "
                         "Sigmoid, Clip, HardSigmoid, HardSwish)", ir_attr_string(c->node, "activation", ""));
  if (!op_util_claim_same_dtypes(c, (const int[]){1, 2, 3}, 3)) return false;
  return claim_conv(c, def);
}

static int lower_fused_conv(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  double params[3];
  int kind = fused_conv_act(op_node(c), params);
  if (kind < 0) return op_fail(c, "unsupported activation");
  mlxb_dtype ct, t = mlxb_type(op_input(c, 0));
  mlxb_array *z = op_input(c, 3);
  bool relu_done, relu = kind == op_fused_act_find("Relu") && !z; /* Z is added before the activation */
  mlxb_array *y = conv_forward(c, &ct, relu, &relu_done);
  if (!y) return conv_failed(c);
  if (z) {
    int64_t yd[CONV_MAX_RANK], zd[CONV_MAX_RANK];
    int r = mlxb_ndim(y);
    mlxb_shape(y, yd);
    if (mlxb_ndim(z) != r) return op_fail(c, "Z must have the output's shape");
    mlxb_shape(z, zd);
    if (memcmp(yd, zd, (size_t)r * sizeof *yd)) return op_fail(c, "Z must have the output's shape");
    y = mlxb_binary(s, MLXB_ADD, y, mlxb_astype(s, z, ct));
  }
  if (!relu_done) y = op_fused_act_apply(s, y, kind, params);
  if (!y) return conv_failed(c);
  return op_set_output(c, 0, ct == t ? y : mlxb_astype(s, y, t));
}

/* ---- ConvTranspose ------------------------------------------------------------------------ */

/* w [C, M/group, k...] -> [M, k..., C/group], the layout of a forward convolution over the
 * stride-dilated input (the kernel flip is conv_general's flag). */
static mlxb_array *conv_transpose_weight(mlxb_scope *s, mlxb_array *w, const conv_geom *g) {
  int rank = g->nsp + 2;
  int64_t d5[CONV_MAX_RANK + 1], d4[CONV_MAX_RANK];
  int perm[CONV_MAX_RANK + 1];
  d5[0] = g->group, d5[1] = g->c / g->group, d5[2] = g->m / g->group;
  for (int i = 0; i < g->nsp; i++) d5[3 + i] = g->k[i];
  /* [g, C/g, M/g, k...] -> [g, M/g, k..., C/g] */
  perm[0] = 0, perm[1] = 2;
  for (int i = 0; i < g->nsp; i++) perm[2 + i] = 3 + i;
  perm[rank] = 1;
  d4[0] = g->m;
  for (int i = 0; i < g->nsp; i++) d4[1 + i] = g->k[i];
  d4[rank - 1] = g->c / g->group;
  mlxb_array *r = mlxb_transpose(s, mlxb_reshape(s, w, d5, rank + 1), perm, rank + 1);
  return mlxb_reshape(s, r, d4, rank);
}

static int lower_conv_transpose(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x = op_input(c, 0), *w = op_input(c, 1);
  conv_geom g;
  if (conv_geom_read(c, x, w, true, &g) < 0 || conv_geom_transpose(c, &g) < 0) return -1;
  /* A forward convolution over the input dilated by the stride, padded by d*(k-1) minus the
   * ONNX pads (negative values crop), with the flipped kernel. The tail also takes what the
   * requested output extent adds beyond the natural one. */
  int64_t lo[CONV_MAX_SP], hi[CONV_MAX_SP], ones[CONV_MAX_SP] = {1, 1, 1};
  for (int i = 0; i < g.nsp; i++) {
    int64_t span = g.dil[i] * (g.k[i] - 1);
    lo[i] = span - g.pad_lo[i];
    hi[i] = g.out[i] - ((g.in[i] - 1) * g.stride[i] + 1 + lo[i] - span);
  }
  mlxb_dtype t = mlxb_type(x), ct = conv_is_half(t) ? MLXB_F32 : t;
  mlxb_array *xl = mlxb_astype(s, conv_move_channels(s, x, true), ct);
  mlxb_array *wl = mlxb_astype(s, conv_transpose_weight(s, w, &g), ct);
  mlxb_array *y = conv_run(c, xl, wl, &g, lo, hi, ones, g.stride, true);
  y = conv_add_bias(c, y, 2, ct, g.m);
  if (!y) return conv_failed(c);
  y = conv_move_channels(s, y, false);
  return op_set_output(c, 0, ct == t ? y : mlxb_astype(s, y, t));
}

/* ---- ConvInteger and QLinearConv ---------------------------------------------------------- */

#define DT_Q8 (DT(ONNX_INT8) | DT(ONNX_UINT8))

/* A zero point or scale input: absent gives `dflt`; else a scalar or (per_channel) a vector of
 * `m`, returned reshaped to broadcast over a channels-last result. */
static mlxb_array *conv_channel_param(op_ctx *c, int input, int64_t m, bool per_channel, double dflt, mlxb_dtype t) {
  mlxb_scope *s = op_scope(c);
  if (!op_has_input(c, input)) return mlxb_scalar_f64(s, dflt, t);
  mlxb_array *v = op_input(c, input);
  if (!v) return NULL;
  size_t n = mlxb_size(v);
  if (n == 1) return mlxb_astype(s, mlxb_reshape(s, v, NULL, 0), t);
  if (!per_channel || (int64_t)n != m || mlxb_ndim(v) != 1) {
    op_fail(c, "input %d must be a scalar%s", input, per_channel ? " or hold one value per output channel" : "");
    return NULL;
  }
  return mlxb_astype(s, v, t);
}

/* Exact integer convolution of (x - xz) and (w - wz) as float64 in a channels-last layout
 * (float64 holds every sum below 2^53; the products of 8-bit values are at most 2^16). */
static mlxb_array *conv_integer_core(op_ctx *c, mlxb_array *x, mlxb_array *xz, mlxb_array *w, mlxb_array *wz,
                                     conv_geom *g) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *xl = mlxb_binary(s, MLXB_SUB, mlxb_astype(s, conv_move_channels(s, x, true), MLXB_F64), xz);
  /* wz is a scalar or one value per output channel: the leading axis of [M, k..., C/g]. */
  mlxb_array *wl = mlxb_astype(s, conv_move_channels(s, w, true), MLXB_F64);
  if (wz && mlxb_ndim(wz) == 1) {
    int64_t d[CONV_MAX_RANK] = {g->m, 1, 1, 1, 1};
    wz = mlxb_reshape(s, wz, d, g->nsp + 2);
  }
  wl = mlxb_binary(s, MLXB_SUB, wl, wz);
  int64_t ones[CONV_MAX_SP] = {1, 1, 1};
  return conv_run(c, xl, wl, g, g->pad_lo, g->pad_hi, g->stride, ones, false);
}

static bool claim_conv_integer(claim_ctx *c, const op_def *def) {
  if (!(DT_Q8 & DT(claim_input_dtype(c, 1)))) return claim_decline(c, "weight must be int8 or uint8");
  const ir_value *x = claim_input(c, 0);
  return conv_claim_attrs(c, x ? x->rank : -1, 1);
}

static int lower_conv_integer(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x = op_input(c, 0), *w = op_input(c, 1);
  conv_geom g;
  if (conv_geom_read(c, x, w, false, &g) < 0 || conv_geom_forward(c, &g) < 0) return -1;
  bool old = mlxb_scope_force_cpu(s, true); /* float64 work */
  mlxb_array *xz = conv_channel_param(c, 2, g.m, false, 0, MLXB_F64);
  mlxb_array *wz = conv_channel_param(c, 3, g.m, true, 0, MLXB_F64);
  mlxb_array *y = xz && wz ? conv_integer_core(c, x, xz, w, wz, &g) : NULL;
  /* int32 accumulation wraps in ORT; int64 then int32 wraps the same way. */
  y = mlxb_astype(s, mlxb_astype(s, y, MLXB_I64), MLXB_I32);
  y = conv_move_channels(s, y, false);
  mlxb_scope_force_cpu(s, old);
  if (!y) return conv_failed(c);
  return op_set_output(c, 0, y);
}

static bool claim_qlinear_conv(claim_ctx *c, const op_def *def) {
  if (!(DT_Q8 & DT(claim_input_dtype(c, 3)))) return claim_decline(c, "weight must be int8 or uint8");
  if (claim_input_dtype(c, 7) != claim_input_dtype(c, 0)) return claim_decline(c, "y_zero_point dtype differs from x");
  if (claim_input_dtype(c, 1) != ONNX_FLOAT || claim_input_dtype(c, 4) != ONNX_FLOAT || claim_input_dtype(c, 6) != ONNX_FLOAT)
    return claim_decline(c, "scales must be float32");
  const ir_value *x = claim_input(c, 0);
  return conv_claim_attrs(c, x ? x->rank : -1, 3);
}

/* QLinearConv as ORT computes it: an exact int32 accumulator (plus the int32 bias), converted
 * to float32, times the float32 scale x_scale * w_scale / y_scale, rounded half to even, plus
 * the output zero point, saturated to the output type. */
static int lower_qlinear_conv(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x = op_input(c, 0), *w = op_input(c, 3);
  conv_geom g;
  if (conv_geom_read(c, x, w, false, &g) < 0 || conv_geom_forward(c, &g) < 0) return -1;
  mlxb_dtype ot = mlxb_type(x);
  bool old = mlxb_scope_force_cpu(s, true); /* float64 work */
  mlxb_array *xz = conv_channel_param(c, 2, g.m, false, 0, MLXB_F64);
  mlxb_array *wz = conv_channel_param(c, 5, g.m, true, 0, MLXB_F64);
  mlxb_array *xs = conv_channel_param(c, 1, g.m, false, 1, MLXB_F32);
  mlxb_array *ws = conv_channel_param(c, 4, g.m, true, 1, MLXB_F32);
  mlxb_array *ys = conv_channel_param(c, 6, g.m, false, 1, MLXB_F32);
  mlxb_array *yz = conv_channel_param(c, 7, g.m, false, 0, MLXB_F32);
  mlxb_array *acc = xz && wz && xs && ws && ys && yz ? conv_integer_core(c, x, xz, w, wz, &g) : NULL;
  acc = mlxb_astype(s, mlxb_astype(s, acc, MLXB_I64), MLXB_I32);
  if (op_has_input(c, 8)) {
    mlxb_array *b = op_input(c, 8);
    if (b && (mlxb_ndim(b) != 1 || mlxb_dim(b, 0) != g.m)) {
      mlxb_scope_force_cpu(s, old);
      return op_fail(c, "bias must have shape [%lld]", (long long)g.m);
    }
    acc = mlxb_binary(s, MLXB_ADD, acc, mlxb_astype(s, b, MLXB_I32));
  }
  mlxb_array *scale = mlxb_binary(s, MLXB_DIV, mlxb_binary(s, MLXB_MUL, xs, ws), ys);
  mlxb_array *v = mlxb_binary(s, MLXB_MUL, mlxb_astype(s, acc, MLXB_F32), scale);
  v = mlxb_binary(s, MLXB_ADD, mlxb_unary(s, MLXB_ROUND, v), yz);
  double lo = ot == MLXB_U8 ? 0 : -128, hi = ot == MLXB_U8 ? 255 : 127;
  v = mlxb_clip(s, v, mlxb_scalar_f64(s, lo, MLXB_F32), mlxb_scalar_f64(s, hi, MLXB_F32));
  mlxb_array *y = conv_move_channels(s, mlxb_astype(s, v, ot), false);
  mlxb_scope_force_cpu(s, old);
  if (!y) return conv_failed(c);
  return op_set_output(c, 0, y);
}

/* ---- DeformConv ----------------------------------------------------------------------------
 * ORT's CPU kernel (float, double; 2-D) samples the input at each kernel tap moved by its offset
 * with bilinear interpolation (a tap outside (-1, H) x (-1, W) reads 0, a corner outside reads 0),
 * scales it by the mask, and multiplies the weights with those columns per group, adding the
 * bias after. Here the four corners are gathers over the flattened image with their indices
 * clamped into it and their weights computed as ORT computes them, in the input's dtype; a NaN
 * position gives NaN weights (ORT's integer conversion of it is undefined). */

typedef struct deform_geom {
  int64_t n, c, h, w, m, kh, kw, group, ogroup;
  int64_t pad_h, pad_w, stride_h, stride_w, dil_h, dil_w, out_h, out_w;
} deform_geom;

static bool claim_deform_conv(claim_ctx *c, const op_def *def) {
  const ir_node *n = c->node;
  for (int i = 0; i < 3; i++) {
    const ir_value *v = claim_input(c, i);
    if (v && v->rank >= 0 && v->rank != 4) return claim_decline(c, "input %d has rank %d (ORT's DeformConv is 2-D)", i, v->rank);
  }
  static const struct { const char *name; size_t count; } lists[] = {
      {"kernel_shape", 2}, {"pads", 4}, {"strides", 2}, {"dilations", 2}};
  for (size_t i = 0; i < sizeof lists / sizeof *lists; i++) {
    const int64_t *v;
    size_t cnt = ir_attr_ints(n, lists[i].name, &v);
    if (cnt && cnt != lists[i].count) return claim_decline(c, "%s has %zu values (ORT takes %zu)", lists[i].name, cnt, lists[i].count);
  }
  if (!conv_claim_attr_bounds(c)) return false;
  return op_util_claim_same_dtypes(c, (const int[]){1, 2, 3, 4}, 4);
}

/* ORT's checks of the shapes and attributes, with its messages; 0, or -1 with the failure recorded. */
static int deform_geometry(op_ctx *c, const int64_t *xd, const int64_t *wd, const int64_t *od, const int64_t *md,
                           const int64_t *bd, int b_rank, deform_geom *g) {
  const ir_node *n = op_node(c);
  int64_t ks[2], pads[4], strides[2], dil[2];
  op_util_attr_ints(n, "kernel_shape", ks, 2, 0);
  op_util_attr_ints(n, "pads", pads, 4, 0);
  op_util_attr_ints(n, "strides", strides, 2, 1);
  op_util_attr_ints(n, "dilations", dil, 2, 1);
  *g = (deform_geom){.n = xd[0], .c = xd[1], .h = xd[2], .w = xd[3], .m = wd[0], .kh = wd[2], .kw = wd[3],
                     .group = ir_attr_int(n, "group", 1), .ogroup = ir_attr_int(n, "offset_group", 1),
                     .pad_h = pads[0], .pad_w = pads[1], .stride_h = strides[0], .stride_w = strides[1],
                     .dil_h = dil[0], .dil_w = dil[1]};
  if (g->c <= 0 || g->m <= 0 || wd[1] <= 0) return op_fail(c, "input channels, output channels and weight in-channels must be positive");
  const int64_t *given;
  if (ir_attr_ints(n, "kernel_shape", &given) && (ks[0] != g->kh || ks[1] != g->kw))
    return op_fail(c, "kernel_shape must match weight spatial dimensions (W_shape[2], W_shape[3])");
  if (pads[0] < 0 || pads[1] < 0 || pads[2] < 0 || pads[3] < 0) return op_fail(c, "Pads must be non-negative");
  if (g->stride_h <= 0 || g->stride_w <= 0 || g->dil_h <= 0 || g->dil_w <= 0)
    return op_fail(c, "strides and dilations must be positive");
  if (g->kh <= 0 || g->kw <= 0 || g->group <= 0 || g->ogroup <= 0)
    return op_fail(c, "kernel shape, group and offset_group must be positive");
  if (g->h < 0 || g->w < 0 || g->w > INT32_MAX / (g->h + 1))
    return op_fail(c, "Input (H+1)*W must not exceed int max");
  /* every term is below 2^31 * 2^31 here: no overflow in int64 */
  g->out_h = (g->h + pads[0] + pads[2] - g->dil_h * (g->kh - 1) - 1) / g->stride_h + 1;
  g->out_w = (g->w + pads[1] + pads[3] - g->dil_w * (g->kw - 1) - 1) / g->stride_w + 1;
  if (g->out_h < 0 || g->out_w < 0) return op_fail(c, "Computed output spatial size must be non-negative");
  int64_t taps = g->kh * g->kw;
  if (od[0] != g->n || od[1] % (2 * taps) || od[1] / (2 * taps) != g->ogroup || od[2] != g->out_h || od[3] != g->out_w)
    return op_fail(c, "offset must have shape [N, offset_group * 2 * kH * kW, oH, oW]");
  if (g->c % g->ogroup) return op_fail(c, "Input channels must be divisible by offset_group");
  if (g->c != wd[1] * g->group) return op_fail(c, "Input channels must match weight in channels * group");
  if (g->m % g->group) return op_fail(c, "Output channels must be divisible by group");
  if (bd && (b_rank != 1 || bd[0] != g->m)) return op_fail(c, "Bias B must have shape [M]");
  if (md && (md[0] != g->n || md[1] % taps || md[1] / taps != g->ogroup || md[2] != g->out_h || md[3] != g->out_w))
    return op_fail(c, "mask must have shape [N, offset_group * kH * kW, oH, oW]");
  return 0;
}

/* The taps' base coordinates along one axis (out * stride - pad + tap * dilation), [taps, out]
 * laid out for the [N, offset_group, taps, oH, oW] positions: axis 3 for rows, 4 for columns. */
static mlxb_array *deform_base(mlxb_scope *s, const deform_geom *g, bool rows, mlxb_dtype t) {
  int64_t taps = g->kh * g->kw, out = rows ? g->out_h : g->out_w;
  int64_t *v = malloc((size_t)(taps * out) * sizeof *v);
  if (!v) return NULL;
  for (int64_t k = 0; k < taps; k++)
    for (int64_t o = 0; o < out; o++)
      v[k * out + o] = rows ? o * g->stride_h - g->pad_h + (k / g->kw) * g->dil_h
                            : o * g->stride_w - g->pad_w + (k % g->kw) * g->dil_w;
  int64_t dims[5] = {1, 1, taps, rows ? out : 1, rows ? 1 : out};
  mlxb_array *a = mlxb_from_data(s, v, dims, 5, MLXB_I64);
  free(v);
  return mlxb_astype(s, a, t);
}

/* One corner's values [N, og, C/og, taps * oH * oW]: the image rows y, columns x (int32 positions,
 * possibly one outside the image), zero where ORT's test for that corner fails. */
static mlxb_array *deform_corner(mlxb_scope *s, const deform_geom *g, mlxb_array *image, mlxb_array *y, mlxb_array *x,
                                 mlxb_array *ok, int64_t cols) {
  mlxb_array *zero = mlxb_scalar_i64(s, 0, MLXB_I32);
  mlxb_array *yc = mlxb_clip(s, y, zero, mlxb_scalar_i64(s, g->h - 1, MLXB_I32));
  mlxb_array *xc = mlxb_clip(s, x, zero, mlxb_scalar_i64(s, g->w - 1, MLXB_I32));
  mlxb_array *at = mlxb_binary(s, MLXB_ADD, mlxb_binary(s, MLXB_MUL, yc, mlxb_scalar_i64(s, g->w, MLXB_I32)), xc);
  int64_t flat[4] = {g->n, g->ogroup, 1, cols};
  mlxb_array *v = mlxb_take_along_axis(s, image, mlxb_reshape(s, at, flat, 4), 3);
  return mlxb_where(s, mlxb_reshape(s, ok, flat, 4), v, mlxb_scalar_f64(s, 0.0, mlxb_type(image)));
}

/* The first corner's integer coordinate along one axis: floor(p) clamped to [-1, len] (its
 * neighbour is one more), 0 for NaN; only ever an index after deform_corner's clamp. */
static mlxb_array *deform_low(mlxb_scope *s, mlxb_array *fl, int64_t len) {
  mlxb_dtype t = mlxb_type(fl);
  mlxb_array *finite = mlxb_where(s, mlxb_unary(s, MLXB_ISNAN, fl), mlxb_scalar_f64(s, 0.0, t), fl);
  mlxb_array *c = mlxb_clip(s, finite, mlxb_scalar_f64(s, -1.0, t), mlxb_scalar_f64(s, (double)len, t));
  return mlxb_astype(s, c, MLXB_I32);
}

/* The sampled columns [N, og, C/og, taps * oH * oW] (ORT's im2col buffer, mask applied). */
static mlxb_array *deform_columns(op_ctx *c, const deform_geom *g, mlxb_array *x, mlxb_array *off, mlxb_array *mask) {
  mlxb_scope *s = op_scope(c);
  mlxb_dtype t = mlxb_type(x);
  int64_t taps = g->kh * g->kw, cols = taps * g->out_h * g->out_w;
  mlxb_array *o = mlxb_reshape(s, off, (int64_t[]){g->n, g->ogroup, taps, 2, g->out_h, g->out_w}, 6);
  int64_t pos[5] = {g->n, g->ogroup, taps, g->out_h, g->out_w};
  mlxb_array *py = mlxb_binary(s, MLXB_ADD, deform_base(s, g, true, t), mlxb_reshape(s, op_util_slice_axis(s, o, 3, 0, 1, 1), pos, 5));
  mlxb_array *px = mlxb_binary(s, MLXB_ADD, deform_base(s, g, false, t), mlxb_reshape(s, op_util_slice_axis(s, o, 3, 1, 2, 1), pos, 5));
  mlxb_array *one = mlxb_scalar_f64(s, 1.0, t), *minus_one = mlxb_scalar_f64(s, -1.0, t);
  mlxb_array *outside = mlxb_binary(s, MLXB_LOGICAL_OR,
      mlxb_binary(s, MLXB_LOGICAL_OR, mlxb_binary(s, MLXB_LESS_EQUAL, py, minus_one),
                  mlxb_binary(s, MLXB_GREATER_EQUAL, py, mlxb_scalar_f64(s, (double)g->h, t))),
      mlxb_binary(s, MLXB_LOGICAL_OR, mlxb_binary(s, MLXB_LESS_EQUAL, px, minus_one),
                  mlxb_binary(s, MLXB_GREATER_EQUAL, px, mlxb_scalar_f64(s, (double)g->w, t))));
  mlxb_array *fy = mlxb_unary(s, MLXB_FLOOR, py), *fx = mlxb_unary(s, MLXB_FLOOR, px);
  mlxb_array *ly = mlxb_binary(s, MLXB_SUB, py, fy), *lx = mlxb_binary(s, MLXB_SUB, px, fx);
  mlxb_array *hy = mlxb_binary(s, MLXB_SUB, one, ly), *hx = mlxb_binary(s, MLXB_SUB, one, lx);
  mlxb_array *y0 = deform_low(s, fy, g->h), *x0 = deform_low(s, fx, g->w);
  mlxb_array *i1 = mlxb_scalar_i64(s, 1, MLXB_I32), *i0 = mlxb_scalar_i64(s, 0, MLXB_I32);
  mlxb_array *y1 = mlxb_binary(s, MLXB_ADD, y0, i1), *x1 = mlxb_binary(s, MLXB_ADD, x0, i1);
  mlxb_array *y0_in = mlxb_binary(s, MLXB_GREATER_EQUAL, y0, i0), *x0_in = mlxb_binary(s, MLXB_GREATER_EQUAL, x0, i0);
  mlxb_array *y1_in = mlxb_binary(s, MLXB_LESS, y1, mlxb_scalar_i64(s, g->h, MLXB_I32));
  mlxb_array *x1_in = mlxb_binary(s, MLXB_LESS, x1, mlxb_scalar_i64(s, g->w, MLXB_I32));
  mlxb_array *image = mlxb_reshape(s, x, (int64_t[]){g->n, g->ogroup, g->c / g->ogroup, g->h * g->w}, 4);
  int64_t flat[4] = {g->n, g->ogroup, 1, cols};
  mlxb_array *corner[4] = {
      deform_corner(s, g, image, y0, x0, mlxb_binary(s, MLXB_LOGICAL_AND, y0_in, x0_in), cols),
      deform_corner(s, g, image, y0, x1, mlxb_binary(s, MLXB_LOGICAL_AND, y0_in, x1_in), cols),
      deform_corner(s, g, image, y1, x0, mlxb_binary(s, MLXB_LOGICAL_AND, y1_in, x0_in), cols),
      deform_corner(s, g, image, y1, x1, mlxb_binary(s, MLXB_LOGICAL_AND, y1_in, x1_in), cols)};
  mlxb_array *weight[4] = {mlxb_binary(s, MLXB_MUL, hy, hx), mlxb_binary(s, MLXB_MUL, hy, lx),
                           mlxb_binary(s, MLXB_MUL, ly, hx), mlxb_binary(s, MLXB_MUL, ly, lx)};
  mlxb_array *val = NULL; /* w1 * v1 + w2 * v2 + w3 * v3 + w4 * v4, in ORT's order */
  for (int i = 0; i < 4; i++) {
    mlxb_array *term = mlxb_binary(s, MLXB_MUL, mlxb_reshape(s, weight[i], flat, 4), corner[i]);
    val = val ? mlxb_binary(s, MLXB_ADD, val, term) : term;
  }
  mlxb_array *zero = mlxb_scalar_f64(s, 0.0, t);
  val = mlxb_where(s, mlxb_reshape(s, outside, flat, 4), zero, val);
  if (!mask) return val;
  mlxb_array *m = mlxb_reshape(s, mask, flat, 4); /* ORT samples only where the mask is not 0, then scales */
  return mlxb_binary(s, MLXB_MUL, mlxb_where(s, mlxb_binary(s, MLXB_NOT_EQUAL, m, zero), val, zero), m);
}

static int lower_deform_conv(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  int64_t xd[OP_UTIL_MAX_RANK], wd[OP_UTIL_MAX_RANK], od[OP_UTIL_MAX_RANK], md[OP_UTIL_MAX_RANK], bd[OP_UTIL_MAX_RANK];
  mlxb_array *x, *w, *off, *b = NULL, *mask = NULL;
  if (op_util_input_dims(c, 0, &x, xd) != 4 || op_util_input_dims(c, 1, &w, wd) != 4 ||
      op_util_input_dims(c, 2, &off, od) != 4)
    return op_check(c) ? -1 : op_fail(c, "X, W and offset must be 4-D");
  int b_rank = op_has_input(c, 3) ? op_util_input_dims(c, 3, &b, bd) : 0;
  if (op_has_input(c, 4) && op_util_input_dims(c, 4, &mask, md) != 4)
    return op_check(c) ? -1 : op_fail(c, "mask must be 4-D");
  if (b_rank < 0) return -1;
  deform_geom g;
  if (deform_geometry(c, xd, wd, od, mask ? md : NULL, b ? bd : NULL, b_rank, &g)) return -1;
  mlxb_dtype t = mlxb_type(x);
  int64_t ydims[4] = {g.n, g.m, g.out_h, g.out_w};
  if (g.n == 0 || g.out_h == 0 || g.out_w == 0) return op_set_output(c, 0, mlxb_zeros(s, ydims, 4, t));
  int64_t taps = g.kh * g.kw, plane = g.out_h * g.out_w, depth = g.c / g.group * taps;
  mlxb_array *cols = mlxb_reshape(s, deform_columns(c, &g, x, off, mask), (int64_t[]){g.n, g.group, depth, plane}, 4);
  mlxb_array *wg = mlxb_reshape(s, w, (int64_t[]){g.group, g.m / g.group, depth}, 3);
  mlxb_array *y = mlxb_reshape(s, mlxb_matmul(s, wg, cols), ydims, 4);
  if (b) y = mlxb_binary(s, MLXB_ADD, y, mlxb_reshape(s, b, (int64_t[]){1, g.m, 1, 1}, 4));
  return op_set_output(c, 0, y);
}

/* ---- CausalConvWithState (com.microsoft) ---------------------------------------------------
 * The depthwise causal convolution of Gated DeltaNet and Mamba layers with its carried state:
 * the past (K - 1) * dilation positions (zeros when absent) go before the input, each channel
 * is convolved with its own taps, the bias added and SiLU applied when asked; the present state
 * is the last (K - 1) * dilation positions of past and input together. Computed as K shifted
 * multiply-adds (float16/bfloat16 in float32, rounded once). */

static bool claim_causal_conv(claim_ctx *c, const op_def *def) {
  const ir_node *n = c->node;
  if (ir_attr_int(n, "ndim", 1) != 1) return claim_decline(c, "ndim %lld (1-D only)", (long long)ir_attr_int(n, "ndim", 1));
  if (ir_attr_int(n, "channels_last", 0) != 0) return claim_decline(c, "channels_last layout");
  if (ir_attr_int(n, "state_window", 0) != 0) return claim_decline(c, "state_window (per-position states)");
  if (ir_attr_int(n, "dilation", 1) < 1) return claim_decline(c, "dilation below 1");
  const char *act = ir_attr_string(n, "activation", "none");
  if (strcmp(act, "none") && strcmp(act, "silu") && strcmp(act, "swish"))
    return claim_decline(c, "activation '%s' (none, silu or swish)", act);
  return op_util_claim_same_dtypes(c, (const int[]){1, 2, 3}, 3);
}

static int lower_causal_conv(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  int64_t xd[OP_UTIL_MAX_RANK], wd[OP_UTIL_MAX_RANK], bd[OP_UTIL_MAX_RANK], pd[OP_UTIL_MAX_RANK];
  mlxb_array *x, *w, *bias = NULL, *past = NULL;
  if (op_util_input_dims(c, 0, &x, xd) != 3 || op_util_input_dims(c, 1, &w, wd) != 3)
    return op_check(c) ? -1 : op_fail(c, "input must be (batch, channels, length) and weight (channels, 1, k)");
  int64_t b = xd[0], ch = xd[1], len = xd[2], k = wd[2], dil = ir_attr_int(n, "dilation", 1);
  if (wd[0] != ch || wd[1] != 1 || k < 1) return op_fail(c, "weight must be (channels, 1, k) with k >= 1");
  if (k - 1 > INT32_MAX / dil) return op_fail(c, "(k - 1) * dilation is too large");
  int64_t state = (k - 1) * dil;
  if (op_has_input(c, 2) && (op_util_input_dims(c, 2, &bias, bd) != 1 || bd[0] != ch))
    return op_check(c) ? -1 : op_fail(c, "bias must be (channels)");
  if (op_has_input(c, 3) && (op_util_input_dims(c, 3, &past, pd) != 3 || pd[0] != b || pd[1] != ch || pd[2] != state))
    return op_check(c) ? -1 : op_fail(c, "past_state must be (batch, channels, (k - 1) * dilation)");
  mlxb_dtype t = mlxb_type(x), ct = conv_is_half(t) ? MLXB_F32 : t;
  mlxb_array *head = past ? mlxb_astype(s, past, ct) : mlxb_zeros(s, (int64_t[]){b, ch, state}, 3, ct);
  mlxb_array *padded = mlxb_concat(s, (const mlxb_array *[]){head, mlxb_astype(s, x, ct)}, 2, 2);
  mlxb_array *taps = mlxb_astype(s, mlxb_reshape(s, w, (int64_t[]){1, ch, k}, 3), ct), *y = NULL;
  for (int64_t j = 0; j < k; j++) {
    mlxb_array *tap = op_util_slice_axis(s, taps, 2, j, j + 1, 1);
    mlxb_array *term = op_util_mul(s, tap, op_util_slice_axis(s, padded, 2, j * dil, j * dil + len, 1));
    y = y ? op_util_add(s, y, term) : term;
  }
  if (bias) y = op_util_add(s, y, mlxb_reshape(s, mlxb_astype(s, bias, ct), (int64_t[]){1, ch, 1}, 3));
  if (strcmp(ir_attr_string(n, "activation", "none"), "none"))
    y = op_util_mul(s, y, mlxb_unary(s, MLXB_SIGMOID, y));
  mlxb_array *present = op_util_slice_axis(s, padded, 2, len, len + state, 1);
  if (op_set_output(c, 0, mlxb_astype(s, y, t))) return -1;
  return op_set_output(c, 1, mlxb_astype(s, present, t));
}

/* ---- the table ---------------------------------------------------------------------------- */

#define DT_CONV (DT_F32 | DT_F16 | DT_BF16 | DT_F64)

static const op_def defs[] = {
    OP_ROW("", "Conv", 1, 22, .inputs = {2, 3}, .outputs = {1, 1}, .dtypes = DT_CONV, .claim = claim_conv,
           .lower = lower_conv, .prepare = prepare_conv, .release = free,
           .doc = "1-D to 3-D; group, dilations, strides, pads, auto_pad NOTSET/VALID/SAME_UPPER/SAME_LOWER, "
                  "optional bias, weight constant or runtime; float16/bfloat16 computed in float32; 4-D+ spatial "
                  "declined (MLX)"),
    OP_ROW("", "ConvTranspose", 1, 22, .inputs = {2, 3}, .outputs = {1, 1}, .dtypes = DT_CONV, .claim = claim_conv,
           .lower = lower_conv_transpose,
           .doc = "1-D to 3-D; group, dilations, strides, pads, output_padding, output_shape, auto_pad (ORT's pad "
                  "split); float16/bfloat16 computed in float32; 4-D+ spatial declined (MLX)"),
    OP_ROW("", "ConvInteger", 10, 10, .inputs = {2, 4}, .outputs = {1, 1}, .dtypes = DT_Q8, .claim = claim_conv_integer,
           .lower = lower_conv_integer,
           .doc = "int8/uint8 x and w, scalar x_zero_point, scalar or per-channel w_zero_point; exact (float64 on "
                  "the CPU), int32 result wraps like ORT"),
    OP_ROW("", "QLinearConv", 10, 10, .inputs = {8, 9}, .outputs = {1, 1}, .dtypes = DT_Q8, .claim = claim_qlinear_conv,
           .lower = lower_qlinear_conv,
           .doc = "int8/uint8; scalar or per-channel w scale/zero point, int32 bias; exact accumulator, requantized "
                  "in float32 like ORT (round half to even, saturate); exact where ORT's AVX2 u8s8 kernel saturates "
                  "int16 pair sums (weights beyond 7 bits)"),
    OP_ROW("com.microsoft", "FusedConv", 1, 1, .inputs = {2, 4}, .outputs = {1, 1}, .dtypes = DT_F32 | DT_F16,
           .claim = claim_fused_conv, .lower = lower_fused_conv, .prepare = prepare_conv, .release = free,
           .doc = "Conv's forms (float32/float16, ORT's CPU kernels) plus the optional Z added before the "
                  "activation: Relu, LeakyRelu, Tanh, Sigmoid, Clip, HardSigmoid, HardSwish with "
                  "activation_params; float16 computed in float32 and rounded once"),
    OP_ROW("com.microsoft", "CausalConvWithState", 1, 1, .inputs = {2, 4}, .outputs = {2, 2}, .dtypes = DT_F32 | DT_F16,
           .claim = claim_causal_conv, .lower = lower_causal_conv,
           .doc = "1-D channels-first, dilation, optional bias and past_state (zeros when absent), activation "
                  "none/silu/swish; float16 in float32. Declined: ndim 2-3, channels_last, state_window"),
    OP_ROW("", "DeformConv", 19, 22, .inputs = {3, 5}, .outputs = {1, 1}, .dtypes = DT_F32 | DT_F64,
           .claim = claim_deform_conv, .lower = lower_deform_conv,
           .doc = "2-D (as ORT), float32/float64 (ORT's CPU kernels); group, offset_group, optional bias and "
                  "mask; bilinear taps gathered with clamped indices as ORT samples them (outside taps and "
                  "corners read 0), then one matmul per group"),
};

OPS_FAMILY(conv, defs);
