/* Pooling: MaxPool (with Indices), AveragePool, LpPool, their Global forms and MaxUnpool. MLX has no pooling primitive: windows of the padded input are reduced one spatial
 * axis at a time (max and sums are separable), as a chain of strided slices (one per kernel
 * offset) or, for long kernels, one reduction of a strided view (an axis of a few windows that are
 * mostly padding: each window over its taps inside the input, unpadded); everything that
 * depends only on shapes (output extents, element counts, index maps) is computed on the host
 * with ORT's formulas. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"
#include "ops/op_util.h"

#define POOL_MAX_SP 8
#define POOL_MAX_RANK (POOL_MAX_SP + 2)

typedef enum pool_kind { POOL_MAX, POOL_AVG, POOL_LP } pool_kind;

/* Geometry of one pooling, per spatial axis. */
typedef struct pool_geom {
  int nsp;                      /* spatial rank */
  int64_t in[POOL_MAX_SP];      /* input extent */
  int64_t k[POOL_MAX_SP];       /* kernel extent */
  int64_t s[POOL_MAX_SP];       /* stride */
  int64_t d[POOL_MAX_SP];       /* dilation */
  int64_t pl[POOL_MAX_SP];      /* pad before */
  int64_t ph[POOL_MAX_SP];      /* pad after */
  int64_t out[POOL_MAX_SP];     /* output extent */
  bool clipped[POOL_MAX_SP];    /* windows reduced over their taps inside the input (pool_clip_axes) */
} pool_geom;

/* ---- helpers ------------------------------------------------------------------------------ */

static bool pool_is_half(mlxb_dtype t) { return t == MLXB_F16 || t == MLXB_BF16; }

static bool pool_is_float(mlxb_dtype t) { return pool_is_half(t) || t == MLXB_F32 || t == MLXB_F64; }

static int64_t pool_numel(const int64_t *d, int n) { return op_util_numel(d, n); }

/* A NULL array means a failure: the bridge's error, or one recorded already with op_fail. */
static int pool_failed(op_ctx *c) {
  op_check(c);
  return -1;
}

/* The input tensor, checked to be [N, C, spatial...] with 1..POOL_MAX_SP spatial axes. */
static mlxb_array *pool_input(op_ctx *c, int64_t *dims, int *rank) {
  mlxb_array *x = op_input(c, 0);
  *rank = mlxb_ndim(x);
  if (*rank < 3 || *rank > POOL_MAX_RANK) {
    op_fail(c, "input rank %d (must be 3 to %d)", *rank, POOL_MAX_RANK);
    return NULL;
  }
  mlxb_shape(x, dims);
  return x;
}

/* One output extent (ORT's PoolAttributes::ComputeOutputSize): truncating division, or a float
 * ceil whose last window must start inside the input or the head pad. */
static int64_t pool_out_extent(int64_t in, int64_t k, int64_t s, int64_t d, int64_t pl, int64_t ph, bool ceil_mode) {
  int64_t num = in + pl + ph - d * (k - 1) - 1;
  if (!ceil_mode) return num / s + 1;
  int64_t out = (int64_t)ceilf((float)num / (float)s) + 1;
  if ((out - 1) * s >= in + pl) out--;
  return out;
}

/* At most this many windows along an axis are reduced one by one over their taps inside the input
 * (pool_clip_axes), and only where padding would add more than POOL_CLIP_MIN_PAD elements and more
 * than four times the input's extent. */
#define POOL_CLIP_MAX_OUT 64
#define POOL_CLIP_MIN_PAD 4096

/* The padding spatial axis i of g needs before (head) and after (tail) its input, with `skip`
 * leading input elements cropped (a negative head pad): every window inside. */
static void pool_axis_pads(const pool_geom *g, int i, int64_t *head, int64_t *tail, int64_t *skip) {
  int64_t need = g->out[i] > 0 ? (g->out[i] - 1) * g->s[i] + (g->k[i] - 1) * g->d[i] + 1 : 0;
  *head = g->pl[i] > 0 ? g->pl[i] : 0;
  *skip = g->pl[i] < 0 ? -g->pl[i] : 0;
  if (*skip > g->in[i]) *skip = g->in[i];
  int64_t t = need - (g->in[i] - *skip) - *head;
  *tail = t > 0 ? t : 0;
}

/* Whether axis i's few windows are mostly padding (a kernel far longer than the input: a hostile
 * kernel_shape of 2^31 - 1 on an input of 2 would pad to 8 GB of float32 and reduce 2^31 taps a
 * window). Such windows are reduced over the taps that land in the input instead, which is what
 * ORT computes (it clips each window to the input), and the padded extent is never made. */
static bool pool_axis_clippable(const pool_geom *g, int i) {
  int64_t head, tail, skip;
  pool_axis_pads(g, i, &head, &tail, &skip);
  int64_t pad = head + tail;
  return g->pl[i] >= 0 && g->out[i] <= POOL_CLIP_MAX_OUT && pad > POOL_CLIP_MIN_PAD && pad / 4 > g->in[i];
}

/* Reads kernel_shape, strides, dilations, pads, auto_pad and ceil_mode into g for input dims;
 * with `clip`, marks the axes whose windows are reduced over their taps in the input
 * (pool_axis_clippable; not for MaxPool's Indices, whose argmax walks the padded windows). */
static int pool_geom_read(op_ctx *c, const int64_t *dims, int rank, pool_geom *g, bool clip) {
  const ir_node *n = op_node(c);
  memset(g, 0, sizeof *g);
  g->nsp = rank - 2;
  if (!op_util_attr_ints(n, "kernel_shape", g->k, g->nsp, 0) || !ir_node_attr(n, "kernel_shape"))
    return op_fail(c, "kernel_shape must have %d values", g->nsp);
  if (op_util_spatial_attrs(c, g->nsp, g->s, g->d, g->pl, g->ph)) return -1;
  for (int i = 0; i < g->nsp; i++) /* ORT's PoolAttributes refuses such a node, whatever auto_pad says */
    if (g->k[i] > 0 && (g->pl[i] >= g->k[i] || g->ph[i] >= g->k[i]))
      return op_fail(c, "pads (%lld, %lld) on spatial axis %d must be smaller than the kernel (%lld), as ORT requires",
                     (long long)g->pl[i], (long long)g->ph[i], i, (long long)g->k[i]);
  op_util_pad ap = op_util_auto_pad(n);
  bool ceil_mode = ir_attr_int(n, "ceil_mode", 0) != 0;
  for (int i = 0; i < g->nsp; i++) {
    g->in[i] = dims[i + 2];
    if (g->k[i] < 1 || g->s[i] < 1 || g->d[i] < 1) return op_fail(c, "kernel, strides and dilations must be >= 1");
    /* model attributes: bounded so that the extent arithmetic below cannot overflow int64 */
    if (g->k[i] > INT32_MAX || g->s[i] > INT32_MAX || g->d[i] > INT32_MAX || g->pl[i] < 0 || g->ph[i] < 0 ||
        g->pl[i] > INT32_MAX || g->ph[i] > INT32_MAX)
      return op_fail(c, "kernel, strides, dilations and pads must lie in [0, 2^31)");
    if (ap == OP_UTIL_PAD_SAME_UPPER || ap == OP_UTIL_PAD_SAME_LOWER) {
      /* ORT pads with the undilated kernel here. */
      int64_t target = (g->in[i] + g->s[i] - 1) / g->s[i];
      int64_t needed = (target - 1) * g->s[i] + g->k[i] - g->in[i];
      g->pl[i] = ap == OP_UTIL_PAD_SAME_LOWER ? (needed + 1) / 2 : needed / 2;
      g->ph[i] = needed - g->pl[i];
    } else if (ap == OP_UTIL_PAD_VALID) {
      g->pl[i] = g->ph[i] = 0;
    }
    g->out[i] = pool_out_extent(g->in[i], g->k[i], g->s[i], g->d[i], g->pl[i], g->ph[i], ceil_mode);
    if (g->out[i] < 0) return op_fail(c, "spatial axis %d: negative output extent", i);
    /* MLX's dimensions are 32-bit: refused here, before host work per output position (window
     * counts) would take seconds on an extent MLX then refuses; a clipped axis is never padded */
    g->clipped[i] = clip && pool_axis_clippable(g, i);
    if (g->out[i] > INT32_MAX || (!g->clipped[i] && g->in[i] + g->pl[i] + g->ph[i] > INT32_MAX))
      return op_fail(c, "spatial axis %d: the padded input (%lld) or the output (%lld) passes 2^31 - 1, the most "
                     "MLX's 32-bit dimensions hold", i, (long long)(g->in[i] + g->pl[i] + g->ph[i]), (long long)g->out[i]);
  }
  return 0;
}

static bool pool_claim_common(claim_ctx *c, bool need_kernel) {
  const ir_node *n = c->node;
  const ir_value *x = claim_input(c, 0);
  if (x && x->rank >= 0 && (x->rank < 3 || x->rank > POOL_MAX_RANK))
    return claim_decline(c, "input rank %d (must be 3 to %d)", x->rank, POOL_MAX_RANK);
  if (!op_util_claim_auto_pad(c)) return false;
  if (!need_kernel) return true;
  const int64_t *k;
  size_t nk = ir_attr_ints(n, "kernel_shape", &k);
  if (nk == 0 || nk > POOL_MAX_SP) return claim_decline(c, "kernel_shape must have 1 to %d values", POOL_MAX_SP);
  if (x && x->rank >= 0 && (size_t)x->rank != nk + 2) return claim_decline(c, "kernel_shape does not match the input rank");
  return true;
}

/* ---- windows ------------------------------------------------------------------------------ */

/* The value padded windows start from: the lowest value for max (an element never wins over a
 * real one), zero for sums. */
static mlxb_array *pool_pad_value(mlxb_scope *s, pool_kind kind, mlxb_dtype t) {
  if (kind != POOL_MAX) return mlxb_scalar_i64(s, 0, t);
  switch (t) {
    case MLXB_U8: case MLXB_U16: case MLXB_U32: case MLXB_U64: return mlxb_scalar_i64(s, 0, t);
    case MLXB_I8: return mlxb_scalar_i64(s, INT8_MIN, t);
    case MLXB_I16: return mlxb_scalar_i64(s, INT16_MIN, t);
    case MLXB_I32: return mlxb_scalar_i64(s, INT32_MIN, t);
    case MLXB_I64: return mlxb_scalar_i64(s, INT64_MIN, t);
    default: return mlxb_scalar_f64(s, -INFINITY, t);
  }
}

/* Pads the spatial axes of x so that every window of g lies inside: pl before, and after as much
 * as the last window needs (ceil_mode windows may pass the tail pad; those positions hold the
 * pad value and are never counted). A negative head pad crops instead (windows then start
 * inside the input, as in ORT's AveragePool). Clipped axes stay as they are. */
static mlxb_array *pool_pad(mlxb_scope *s, mlxb_array *x, const pool_geom *g, const mlxb_array *value) {
  int rank = g->nsp + 2;
  int64_t lo[POOL_MAX_RANK] = {0}, hi[POOL_MAX_RANK] = {0}, start[POOL_MAX_RANK] = {0}, stop[POOL_MAX_RANK],
          step[POOL_MAX_RANK];
  bool any = false, crop = false;
  mlxb_shape(x, stop);
  for (int i = 0; i < rank; i++) step[i] = 1;
  for (int i = 0; i < g->nsp; i++) {
    if (g->clipped[i]) continue;
    int64_t head, tail, skip;
    pool_axis_pads(g, i, &head, &tail, &skip);
    start[i + 2] = skip, crop |= skip > 0;
    lo[i + 2] = head, hi[i + 2] = tail;
    any |= lo[i + 2] || hi[i + 2];
  }
  if (crop) x = mlxb_slice(s, x, start, stop, step);
  if (any) x = mlxb_pad(s, x, lo, hi, value, "constant");
  return x;
}

/* Kernels up to this extent are reduced as a chain of strided slices; longer ones as one
 * reduction over a strided view. */
#define POOL_SLICE_MAX_K 16

/* The windows of spatial axis `ax` reduced as one reduction: a strided view with the window as
 * a trailing axis. MLX reduces such a view element by element (a general strided loop), which
 * only pays off when one reduction replaces many slices. */
static mlxb_array *pool_reduce_axis_view(mlxb_scope *s, mlxb_array *x, const pool_geom *g, int ax, mlxb_reduce_op op) {
  x = mlxb_contiguous(s, x); /* the view's strides assume a row-major buffer */
  int rank = mlxb_ndim(x);
  /* a failed padding (a size past MLX's int32 dims) gives NULL: the scope holds its error */
  if (!x || rank < 3 || rank > POOL_MAX_RANK) return NULL;
  int64_t dims[POOL_MAX_RANK + 1], strides[POOL_MAX_RANK + 1];
  mlxb_shape(x, dims);
  int64_t st = 1;
  for (int i = rank - 1; i >= 0; i--) strides[i] = st, st *= dims[i];
  int a = ax + 2;
  int64_t step = strides[a];
  dims[rank] = g->k[ax], strides[rank] = step * g->d[ax];
  dims[a] = g->out[ax], strides[a] = step * g->s[ax];
  mlxb_array *v = mlxb_as_strided(s, x, dims, strides, rank + 1, 0);
  int last = rank;
  return mlxb_reduce(s, op, v, &last, 1, false);
}

/* The taps j in [*first, *end) of [0, k) of a window starting at `start` with dilation d >= 1 that
 * land on positions start + j * d in [lo, hi): found, not walked, since a hostile kernel_shape may
 * be 2^31 - 1 taps long (attributes are bounded to int32 at claim, so nothing here overflows);
 * *end <= *first when none does. */
static void window_tap_range(int64_t start, int64_t d, int64_t k, int64_t lo, int64_t hi, int64_t *first,
                             int64_t *end) {
  *first = lo <= start ? 0 : (lo - start + d - 1) / d;
  *end = hi <= start ? 0 : (hi - start + d - 1) / d;
  if (*end > k) *end = k;
}

/* How many of those taps there are. */
static int64_t window_taps(int64_t start, int64_t d, int64_t k, int64_t lo, int64_t hi) {
  int64_t first, end;
  window_tap_range(start, d, k, lo, hi, &first, &end);
  return end > first ? end - first : 0;
}

/* The windows of clipped axis `ax` of x (not padded along it), one by one: window o reduces its
 * taps o * s - pl + j * d that land in [0, in) (a strided slice), or is the pad value where none
 * does; the results concatenated along the axis. */
static mlxb_array *pool_reduce_axis_clipped(mlxb_scope *s, mlxb_array *x, const pool_geom *g, int ax, pool_kind kind,
                                            const mlxb_array *value) {
  int rank = mlxb_ndim(x), a = ax + 2;
  int64_t start[POOL_MAX_RANK] = {0}, stop[POOL_MAX_RANK], step[POOL_MAX_RANK], one[POOL_MAX_RANK];
  mlxb_shape(x, one);
  one[a] = 1;
  mlxb_array *parts[POOL_CLIP_MAX_OUT];
  int n = 0;
  if (g->out[ax] == 0) { /* no window: an empty axis */
    mlxb_shape(x, stop);
    for (int i = 0; i < rank; i++) step[i] = 1;
    stop[a] = 0;
    return mlxb_slice(s, x, start, stop, step);
  }
  for (int64_t o = 0; o < g->out[ax] && n < POOL_CLIP_MAX_OUT; o++) {
    int64_t base = o * g->s[ax] - g->pl[ax], d = g->d[ax], first, end;
    window_tap_range(base, d, g->k[ax], 0, g->in[ax], &first, &end);
    if (end <= first) {
      parts[n++] = mlxb_broadcast_to(s, value, one, rank);
      continue;
    }
    mlxb_shape(x, stop);
    for (int i = 0; i < rank; i++) start[i] = 0, step[i] = 1;
    start[a] = base + first * d, stop[a] = base + (end - 1) * d + 1, step[a] = d;
    parts[n++] = mlxb_reduce(s, kind == POOL_MAX ? MLXB_RMAX : MLXB_RSUM, mlxb_slice(s, x, start, stop, step), &a, 1,
                             true);
  }
  return n == 1 ? parts[0] : mlxb_concat(s, (const mlxb_array *const *)parts, n, a);
}

/* Reduces the windows of spatial axis `ax` of the padded x (every window inside). Short kernels:
 * kernel offset j contributes the slice starting at j * dilation with the pooling stride, and
 * the k slices are combined elementwise (maximum, or a sum in kernel order). MLX runs each of
 * those as a vectorised strided loop, 3x to 25x faster than the general strided reduction of
 * pool_reduce_axis_view on CPU for 3x3 windows. Maximum propagates NaN as the reduction does. */
static mlxb_array *pool_reduce_axis(mlxb_scope *s, mlxb_array *x, const pool_geom *g, int ax, pool_kind kind,
                                    const mlxb_array *value) {
  if (!x) return NULL; /* an earlier axis or the padding failed: the scope holds its error */
  if (g->clipped[ax]) return pool_reduce_axis_clipped(s, x, g, ax, kind, value);
  if (g->k[ax] > POOL_SLICE_MAX_K) return pool_reduce_axis_view(s, x, g, ax, kind == POOL_MAX ? MLXB_RMAX : MLXB_RSUM);
  int rank = mlxb_ndim(x), a = ax + 2;
  int64_t start[POOL_MAX_RANK] = {0}, stop[POOL_MAX_RANK], step[POOL_MAX_RANK];
  mlxb_shape(x, stop);
  for (int i = 0; i < rank; i++) step[i] = 1;
  step[a] = g->s[ax];
  mlxb_array *y = NULL;
  for (int64_t j = 0; j < g->k[ax]; j++) {
    start[a] = j * g->d[ax];
    stop[a] = g->out[ax] > 0 ? start[a] + (g->out[ax] - 1) * g->s[ax] + 1 : start[a];
    mlxb_array *part = mlxb_slice(s, x, start, stop, step);
    y = !y ? part : mlxb_binary(s, kind == POOL_MAX ? MLXB_MAXIMUM : MLXB_ADD, y, part);
  }
  return y;
}

/* All windows of x at once: [N, C, out..., K] with K the flattened kernel (row-major). */
static mlxb_array *pool_windows(mlxb_scope *s, mlxb_array *x, const pool_geom *g) {
  int rank = g->nsp + 2;
  int64_t dims[POOL_MAX_RANK], vd[2 * POOL_MAX_RANK], vs[2 * POOL_MAX_RANK], flat[POOL_MAX_RANK + 1];
  x = mlxb_contiguous(s, x); /* the view's strides assume a row-major buffer */
  if (!x || mlxb_ndim(x) != rank) return NULL; /* a failed padding: the scope holds its error */
  mlxb_shape(x, dims);
  int64_t st[POOL_MAX_RANK], acc = 1;
  for (int i = rank - 1; i >= 0; i--) st[i] = acc, acc *= dims[i];
  vd[0] = dims[0], vd[1] = dims[1], vs[0] = st[0], vs[1] = st[1];
  for (int i = 0; i < g->nsp; i++) {
    vd[2 + i] = g->out[i], vs[2 + i] = st[2 + i] * g->s[i];
    vd[rank + i] = g->k[i], vs[rank + i] = st[2 + i] * g->d[i];
  }
  mlxb_array *v = mlxb_as_strided(s, x, vd, vs, rank + g->nsp, 0);
  for (int i = 0; i < rank; i++) flat[i] = vd[i];
  flat[rank] = pool_numel(g->k, g->nsp);
  return mlxb_reshape(s, v, flat, rank + 1);
}

/* Per output position, how many window elements are real input (count_pad false) or lie within
 * the padded input (count_pad true). Separable: per-axis counts multiplied out, as an array
 * [out...] of dtype t broadcastable against [N, C, out...]. */
static mlxb_array *pool_counts(op_ctx *c, const pool_geom *g, bool count_pad, mlxb_dtype t) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *total = NULL;
  for (int i = 0; i < g->nsp; i++) {
    int64_t n = g->out[i];
    float *cnt = malloc(sizeof *cnt * (size_t)(n ? n : 1)); /* small integers: exact, and GPU-safe */
    if (!cnt) {
      op_fail(c, "out of memory");
      return NULL;
    }
    for (int64_t o = 0; o < n; o++) {
      int64_t start = o * g->s[i] - g->pl[i];
      int64_t real = window_taps(start, g->d[i], g->k[i], 0, g->in[i]);
      int64_t inpad = window_taps(start, g->d[i], g->k[i], INT64_MIN / 2, g->in[i] + g->ph[i]);
      cnt[o] = (float)(count_pad ? inpad : real);
    }
    int64_t shape[POOL_MAX_RANK];
    for (int j = 0; j < g->nsp; j++) shape[j] = j == i ? n : 1;
    mlxb_array *a = mlxb_astype(s, mlxb_reshape(s, mlxb_from_data(s, cnt, &n, 1, MLXB_F32), shape, g->nsp), t);
    free(cnt);
    total = total ? mlxb_binary(s, MLXB_MUL, total, a) : a;
  }
  return total;
}

/* Every window of the padded x reduced, one spatial axis after the other (max and sums are
 * separable; padding with `value`, their identity, commutes with them): [N, C, out...]. */
static mlxb_array *pool_reduce_windows(mlxb_scope *s, mlxb_array *xp, const pool_geom *g, pool_kind kind,
                                       const mlxb_array *value) {
  for (int i = 0; i < g->nsp; i++) xp = pool_reduce_axis(s, xp, g, i, kind, value);
  return xp;
}

/* Whether some window holds no real input element (only padding): a host check, so that the
 * common case builds no count arrays. */
static bool pool_any_empty(const pool_geom *g) {
  for (int i = 0; i < g->nsp; i++) {
    for (int64_t o = 0; o < g->out[i]; o++)
      if (!window_taps(o * g->s[i] - g->pl[i], g->d[i], g->k[i], 0, g->in[i])) return true;
  }
  return false;
}

/* Windowed reduction of x [N, C, in...] per g: sum or sum of |x|^p (MaxPool pads itself, to
 * share the padded input with its Indices output). Halves are computed in float32. Returns
 * [N, C, out...] in the compute dtype. */
static mlxb_array *pool_sum(op_ctx *c, mlxb_array *x, const pool_geom *g, pool_kind kind, int64_t p) {
  mlxb_scope *s = op_scope(c);
  mlxb_dtype t = mlxb_type(x);
  if (pool_is_half(t)) x = mlxb_astype(s, x, MLXB_F32), t = MLXB_F32;
  if (kind == POOL_LP) {
    x = mlxb_unary(s, MLXB_ABS, x);
    if (p != 1) x = mlxb_binary(s, MLXB_POW, x, mlxb_scalar_f64(s, (double)p, t));
  }
  mlxb_array *value = pool_pad_value(s, kind, t);
  return pool_reduce_windows(s, pool_pad(s, x, g, value), g, kind, value);
}

/* ---- MaxPool ------------------------------------------------------------------------------ */

static bool claim_maxpool(claim_ctx *c, const op_def *def) {
  if (!pool_claim_common(c, true)) return false;
  int64_t so = ir_attr_int(c->node, "storage_order", 0);
  if (so != 0 && so != 1) return claim_decline(c, "storage_order %lld", (long long)so);
  return true;
}

/* Host map from (output position, kernel offset) to the flattened spatial index of the input
 * element (row-major, or column-major over the spatial axes for storage_order 1): [O*K]. */
static mlxb_array *maxpool_index_map(op_ctx *c, const pool_geom *g, bool col_major) {
  int64_t O = pool_numel(g->out, g->nsp), K = pool_numel(g->k, g->nsp), n = O * K;
  int64_t *map = malloc(sizeof *map * (size_t)(n ? n : 1));
  if (!map) {
    op_fail(c, "out of memory");
    return NULL;
  }
  int64_t stride[POOL_MAX_SP], acc = 1;
  for (int i = col_major ? 0 : g->nsp - 1; col_major ? i < g->nsp : i >= 0; i += col_major ? 1 : -1)
    stride[i] = acc, acc *= g->in[i];
  for (int64_t o = 0; o < O; o++) {
    int64_t oi[POOL_MAX_SP], rem = o;
    for (int i = g->nsp - 1; i >= 0; i--) oi[i] = rem % g->out[i], rem /= g->out[i];
    for (int64_t k = 0; k < K; k++) {
      int64_t krem = k, idx = 0;
      for (int i = g->nsp - 1; i >= 0; i--) {
        int64_t p = oi[i] * g->s[i] - g->pl[i] + (krem % g->k[i]) * g->d[i];
        krem /= g->k[i];
        p = p < 0 ? 0 : p >= g->in[i] ? g->in[i] - 1 : p; /* a padding position: only chosen in degenerate windows */
        idx += p * stride[i];
      }
      map[o * K + k] = idx;
    }
  }
  mlxb_array *a = mlxb_from_data(op_scope(c), map, &n, 1, MLXB_I64);
  free(map);
  return a;
}

/* Indices output: argmax over each full window, mapped through the host index map, plus the
 * offset of the (n, c) plane. */
static mlxb_array *maxpool_indices(op_ctx *c, mlxb_array *xp, const pool_geom *g, const int64_t *dims) {
  mlxb_scope *s = op_scope(c);
  bool col_major = ir_attr_int(op_node(c), "storage_order", 0) == 1;
  int rank = g->nsp + 2;
  int64_t O = pool_numel(g->out, g->nsp), K = pool_numel(g->k, g->nsp), S = pool_numel(g->in, g->nsp);
  int64_t od_full[POOL_MAX_RANK];
  od_full[0] = dims[0], od_full[1] = dims[1];
  for (int i = 0; i < g->nsp; i++) od_full[i + 2] = g->out[i];
  if (dims[0] * dims[1] * O == 0) return mlxb_zeros(s, od_full, rank, MLXB_I64); /* argmax needs elements */
  mlxb_array *win = pool_windows(s, xp, g);
  int64_t d3[3] = {dims[0], dims[1], O};
  mlxb_array *j = mlxb_reshape(s, mlxb_astype(s, mlxb_argmax(s, win, rank, false), MLXB_I64), d3, 3);
  /* position in the map: o * K + j */
  int64_t od[3] = {1, 1, O}, cd[3] = {dims[0], dims[1], 1};
  mlxb_array *o = mlxb_reshape(s, mlxb_arange(s, 0, (double)O, 1, MLXB_I64), od, 3);
  mlxb_array *pos = mlxb_binary(s, MLXB_ADD, mlxb_binary(s, MLXB_MUL, o, mlxb_scalar_i64(s, K, MLXB_I64)), j);
  pos = mlxb_clip(s, pos, mlxb_scalar_i64(s, 0, MLXB_I64), mlxb_scalar_i64(s, O * K > 0 ? O * K - 1 : 0, MLXB_I64));
  mlxb_array *map = maxpool_index_map(c, g, col_major);
  if (!map) return NULL;
  mlxb_array *idx = mlxb_take(s, map, pos, 0);
  mlxb_array *plane = mlxb_reshape(s, mlxb_arange(s, 0, (double)(dims[0] * dims[1]), 1, MLXB_I64), cd, 3);
  idx = mlxb_binary(s, MLXB_ADD, idx, mlxb_binary(s, MLXB_MUL, plane, mlxb_scalar_i64(s, S, MLXB_I64)));
  return mlxb_reshape(s, idx, od_full, rank);
}

static int lower_maxpool(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  int64_t dims[POOL_MAX_RANK];
  int rank;
  mlxb_array *x = pool_input(c, dims, &rank);
  pool_geom g;
  if (!x || pool_geom_read(c, dims, rank, &g, !op_has_output(c, 1)) < 0) return -1;
  /* auto_pad SAME with a stride past the kernel needs negative pads: ORT's MaxPool refuses them
   * (its AveragePool and LpPool crop, as the EP does there) */
  for (int i = 0; i < g.nsp; i++)
    if (g.pl[i] < 0 || g.ph[i] < 0)
      return op_fail(c, "padding values must be non-negative (auto_pad SAME with stride %lld past the kernel on "
                        "spatial axis %d), as ORT's MaxPool requires", (long long)g.s[i], i);
  mlxb_dtype t = mlxb_type(x);
  mlxb_array *xp = NULL, *y;
  if (g.nsp == 2 && !op_has_output(c, 1) && mlxb_max_pool2d_available(s, x)) { /* one pass, on the CPU */
    mlxb_pool2d p2 = {g.k[0], g.k[1], g.s[0], g.s[1], g.d[0], g.d[1], g.pl[0], g.pl[1], g.out[0], g.out[1]};
    y = mlxb_max_pool2d(s, x, &p2);
  } else {
    mlxb_array *value = pool_pad_value(s, POOL_MAX, t);
    xp = pool_pad(s, x, &g, value);
    y = pool_reduce_windows(s, xp, &g, POOL_MAX, value);
  }
  /* A window of padding only gives the lowest finite value in ORT. */
  if (pool_any_empty(&g) && pool_is_float(t)) {
    mlxb_array *cnt = pool_counts(c, &g, false, MLXB_F32);
    if (!cnt) return pool_failed(c);
    double lowest = t == MLXB_F64 ? -DBL_MAX : t == MLXB_F16 ? -65504.0 : t == MLXB_BF16 ? -3.3895313892515355e38 : -FLT_MAX;
    y = mlxb_where(s, mlxb_binary(s, MLXB_EQUAL, cnt, mlxb_scalar_f64(s, 0, MLXB_F32)), mlxb_scalar_f64(s, lowest, t), y);
  }
  if (op_set_output(c, 0, y) < 0) return -1;
  if (!op_has_output(c, 1)) return 0;
  mlxb_array *idx = maxpool_indices(c, xp, &g, dims);
  return idx ? op_set_output(c, 1, idx) : pool_failed(c);
}

/* ---- AveragePool / LpPool ----------------------------------------------------------------- */

static bool claim_avgpool(claim_ctx *c, const op_def *def) { return pool_claim_common(c, true); }

static int lower_avgpool(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  int64_t dims[POOL_MAX_RANK];
  int rank;
  mlxb_array *x = pool_input(c, dims, &rank);
  pool_geom g;
  if (!x || pool_geom_read(c, dims, rank, &g, true) < 0) return -1;
  mlxb_dtype t = mlxb_type(x), ct = pool_is_half(t) ? MLXB_F32 : t;
  bool include_pad = ir_attr_int(op_node(c), "count_include_pad", 0) != 0;
  mlxb_array *sum = pool_sum(c, x, &g, POOL_AVG, 0);
  mlxb_array *cnt = pool_counts(c, &g, include_pad, ct);
  if (!cnt) return pool_failed(c);
  /* Windows without elements keep their zero sum. */
  cnt = mlxb_binary(s, MLXB_MAXIMUM, cnt, mlxb_scalar_f64(s, 1, ct));
  mlxb_array *y = mlxb_binary(s, MLXB_DIV, sum, cnt);
  return op_set_output(c, 0, ct == t ? y : mlxb_astype(s, y, t));
}

static bool claim_lppool(claim_ctx *c, const op_def *def) {
  if (ir_attr_int(c->node, "p", 2) < 1) return claim_decline(c, "p must be >= 1");
  return pool_claim_common(c, true);
}

/* (sum |x|^p)^(1/p), as ORT computes it. */
static mlxb_array *pool_lp_finish(mlxb_scope *s, mlxb_array *sum, int64_t p, mlxb_dtype t) {
  mlxb_dtype ct = mlxb_type(sum);
  mlxb_array *y = p == 1 ? sum : p == 2 ? mlxb_unary(s, MLXB_SQRT, sum)
                                        : mlxb_binary(s, MLXB_POW, sum, mlxb_scalar_f64(s, 1.0 / (double)p, ct));
  return ct == t ? y : mlxb_astype(s, y, t);
}

static int lower_lppool(op_ctx *c, const op_def *def) {
  int64_t dims[POOL_MAX_RANK];
  int rank;
  mlxb_array *x = pool_input(c, dims, &rank);
  pool_geom g;
  if (!x || pool_geom_read(c, dims, rank, &g, true) < 0) return -1;
  int64_t p = ir_attr_int(op_node(c), "p", 2);
  if (p < 1) return op_fail(c, "p must be >= 1");
  mlxb_array *sum = pool_sum(c, x, &g, POOL_LP, p);
  return op_set_output(c, 0, pool_lp_finish(op_scope(c), sum, p, mlxb_type(x)));
}

/* ---- global pooling ----------------------------------------------------------------------- */

static bool claim_global(claim_ctx *c, const op_def *def) {
  const ir_value *x = claim_input(c, 0);
  if (x && x->rank >= 0 && x->rank < 3) return claim_decline(c, "input rank %d (must be >= 3)", x->rank);
  if (def->arg == POOL_LP && ir_attr_int(c->node, "p", 2) < 1) return claim_decline(c, "p must be >= 1");
  return true;
}

static int lower_global(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x = op_input(c, 0);
  int rank = mlxb_ndim(x);
  if (rank < 3 || rank > 64) return op_fail(c, "input rank %d (must be >= 3)", rank);
  int axes[64];
  for (int i = 2; i < rank; i++) axes[i - 2] = i;
  mlxb_dtype t = mlxb_type(x), ct = def->arg != POOL_MAX && pool_is_half(t) ? MLXB_F32 : t;
  x = ct == t ? x : mlxb_astype(s, x, ct);
  if (def->arg == POOL_MAX) return op_set_output(c, 0, mlxb_reduce(s, MLXB_RMAX, x, axes, rank - 2, true));
  if (def->arg == POOL_AVG) {
    mlxb_array *y = mlxb_reduce(s, MLXB_RMEAN, x, axes, rank - 2, true);
    return op_set_output(c, 0, ct == t ? y : mlxb_astype(s, y, t));
  }
  int64_t p = ir_attr_int(op_node(c), "p", 2);
  if (p < 1) return op_fail(c, "p must be >= 1");
  x = mlxb_unary(s, MLXB_ABS, x);
  if (p != 1) x = mlxb_binary(s, MLXB_POW, x, mlxb_scalar_f64(s, (double)p, ct));
  return op_set_output(c, 0, pool_lp_finish(s, mlxb_reduce(s, MLXB_RSUM, x, axes, rank - 2, true), p, t));
}

/* ---- MaxUnpool ---------------------------------------------------------------------------- */

static bool claim_maxunpool(claim_ctx *c, const op_def *def) {
  if (claim_input_dtype(c, 1) != ONNX_INT64) return claim_decline(c, "indices must be int64");
  return pool_claim_common(c, true);
}

/* Scatters x to the flattened positions I of a zero output. Where several elements go to the
 * same position the last one in input order wins, as in ORT's loop. A position outside the output
 * fails the Run, as in ORT; the scatter drops such positions anyway, so none reaches memory. */
static int lower_maxunpool(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  int64_t dims[POOL_MAX_RANK], out[POOL_MAX_RANK];
  int rank;
  mlxb_array *x = pool_input(c, dims, &rank);
  mlxb_array *ind = op_input(c, 1);
  pool_geom g;
  if (!x) return -1;
  if (pool_geom_read(c, dims, rank, &g, false) < 0) return -1;
  if (mlxb_size(ind) != mlxb_size(x)) return op_fail(c, "I must have the shape of X");
  out[0] = dims[0], out[1] = dims[1];
  if (op_has_input(c, 2)) {
    int64_t want[POOL_MAX_RANK];
    int n = op_input_ints(c, 2, want, POOL_MAX_RANK);
    if (n < 0) return op_fail(c, "cannot read output_shape");
    if (n != rank) return op_fail(c, "output_shape has %d values for rank %d", n, rank);
    for (int i = 0; i < rank; i++) out[i] = want[i];
    if (out[0] != dims[0] || out[1] != dims[1]) return op_fail(c, "output_shape must keep N and C");
  } else {
    for (int i = 0; i < g.nsp; i++) out[i + 2] = (g.in[i] - 1) * g.s[i] + g.k[i] - g.pl[i] - g.ph[i];
  }
  for (int i = 0; i < rank; i++)
    if (out[i] < 0) return op_fail(c, "negative output extent");
  int64_t total = pool_numel(out, rank), T = (int64_t)mlxb_size(x);
  if (total >= INT32_MAX) /* the scatter below is one axis of total + 1 slots */
    return op_fail(c, "output of %lld elements: more than one MLX axis holds", (long long)total);
  int64_t flat_t = T, slots = total + 1;
  /* winner[p] = the last input position writing p (-1 for none); slot `total` takes the rest. */
  mlxb_array *idx = mlxb_reshape(s, ind, &flat_t, 1);
  if (op_util_require_range(c, idx, 0, total, "index")) return -1;
  mlxb_array *valid = mlxb_binary(s, MLXB_LOGICAL_AND, mlxb_binary(s, MLXB_GREATER_EQUAL, idx, mlxb_scalar_i64(s, 0, MLXB_I64)),
                                  mlxb_binary(s, MLXB_LESS, idx, mlxb_scalar_i64(s, total, MLXB_I64)));
  idx = mlxb_where(s, valid, idx, mlxb_scalar_i64(s, total, MLXB_I64));
  mlxb_array *src = mlxb_arange(s, 0, (double)T, 1, MLXB_I64);
  mlxb_array *winner = mlxb_full(s, &slots, 1, mlxb_scalar_i64(s, -1, MLXB_I64), MLXB_I64);
  int axis0 = 0;
  const mlxb_array *ix[1] = {idx};
  int64_t upd_dims[2] = {T, 1};
  winner = mlxb_scatter(s, MLXB_SCATTER_MAX, winner, ix, 1, mlxb_reshape(s, src, upd_dims, 2), &axis0);
  int64_t start = 0, stop = total, step = 1;
  winner = mlxb_slice(s, winner, &start, &stop, &step);
  mlxb_array *xf = mlxb_reshape(s, x, &flat_t, 1);
  mlxb_array *pick = mlxb_clip(s, winner, mlxb_scalar_i64(s, 0, MLXB_I64), mlxb_scalar_i64(s, T > 0 ? T - 1 : 0, MLXB_I64));
  mlxb_array *vals = T > 0 ? mlxb_take(s, xf, pick, 0) : mlxb_zeros(s, &total, 1, mlxb_type(x));
  mlxb_array *y = mlxb_where(s, mlxb_binary(s, MLXB_GREATER_EQUAL, winner, mlxb_scalar_i64(s, 0, MLXB_I64)), vals,
                             mlxb_scalar_i64(s, 0, mlxb_type(x)));
  return op_set_output(c, 0, mlxb_reshape(s, y, out, rank));
}

/* ---- the table ---------------------------------------------------------------------------- */

#define DT_POOLF (DT_F32 | DT_F16 | DT_BF16 | DT_F64)
#define DT_MAXPOOL (DT_POOLF | DT(ONNX_INT8) | DT(ONNX_UINT8))

static const op_def defs[] = {
    OP_ROW("", "MaxPool", 1, 22, .inputs = {1, 1}, .outputs = {1, 2}, .dtypes = DT_MAXPOOL, .claim = claim_maxpool,
           .lower = lower_maxpool,
           .doc = "1-D to 8-D; pads, strides, dilations, ceil_mode, auto_pad, storage_order and the Indices output "
                  "(flattened NCHW index, first maximum wins); int8/uint8 too; windows of padding only give the "
                  "lowest finite value like ORT; NaN propagates (MLX max); negative SAME pads (a stride past the "
                  "kernel) and pads as long as the kernel fail the Run as in ORT; a few windows mostly of padding (a "
                  "kernel far past the input) "
                  "reduced over their taps in the input, as ORT clips them"),
    OP_ROW("", "AveragePool", 1, 22, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_POOLF, .claim = claim_avgpool,
           .lower = lower_avgpool,
           .doc = "1-D to 8-D; pads, strides, dilations (19), ceil_mode, auto_pad, count_include_pad (counts the "
                  "positions inside the padded input, as ORT); halves accumulate in float32; pads and windows mostly "
                  "of padding as MaxPool's"),
    OP_ROW("", "LpPool", 2, 22, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_POOLF, .claim = claim_lppool,
           .lower = lower_lppool,
           .doc = "1-D to 8-D; integer p >= 1, pads, strides, dilations and ceil_mode (18), auto_pad; pads and windows "
                  "mostly of padding as MaxPool's; opset 1 (float p) declined"),
    OP_ROW("", "GlobalMaxPool", 1, 22, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_POOLF, .claim = claim_global,
           .lower = lower_global, .arg = POOL_MAX, .doc = "any spatial rank"),
    OP_ROW("", "GlobalAveragePool", 1, 22, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_POOLF,
           .claim = claim_global, .lower = lower_global, .arg = POOL_AVG,
           .doc = "any spatial rank; halves accumulate in float32"),
    OP_ROW("", "GlobalLpPool", 2, 22, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_POOLF, .claim = claim_global,
           .lower = lower_global, .arg = POOL_LP,
           .doc = "any spatial rank, integer p >= 1; opset 1 (float p) declined"),
    OP_ROW("", "MaxUnpool", 9, 22, .inputs = {2, 3}, .outputs = {1, 1}, .dtypes = DT_NUMERIC, .claim = claim_maxunpool,
           .lower = lower_maxunpool,
           .doc = "int64 indices; default output extents or the output_shape input (read on the host); a position "
                  "written twice keeps the later element like ORT; an index outside [0, output size) fails the Run"),
};

OPS_FAMILY(pool, defs);
