/* MaxPool of float32 [N, C, H, W] on MLX's CPU stream as one operation of our own (EpCpuMaxPool).
 *
 * Why: MLX has no pooling primitive, so src/ops/pool.c reduces the windows of the padded input one
 * spatial axis after the other, each tap a strided slice and each pair a Maximum: a 3x3 pool is
 * four Maximum passes and six slices over arrays the size of the input, one thread each. Here
 * every output is the maximum of its window's taps that lie inside the input, in one pass, the
 * output rows shared with the pool's helpers. A window with no tap inside gives -inf (what the
 * -inf padding gives there: the lowering then writes ORT's lowest value), and a NaN among the taps
 * gives NaN, as MLX's Maximum. The taps' positions are computed from the geometry alone (no value
 * read from data), and each is bounds-checked against the input before it is read.
 *
 * A convolution hands over its output as a channels-last array seen through a transpose; that
 * source is read channels-last (the channels of a position contiguous) and the result given back
 * the same way, so no copy is made either side. */
#include "mlx/bridge_cpu_task.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace mlxb_detail {

namespace {

struct maxpool_params {
  int64_t n, c, h, w, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw;
  int32_t channels_last, pad_;
};

/* m = max(m, v) as MLX's Maximum of floats: a NaN on either side gives NaN */
inline float max_nan(float m, float v) {
  if (std::isnan(m)) return m;
  return std::isnan(v) || v > m ? v : m;
}

/* out[i] = max_nan(out[i], in[i]) over a position's channels, written without branches so that the
 * compiler vectorizes it: SSE's four lanes by default, eight where the CPU has AVX-512 (GCC's
 * preferred width there; sixteen measured no faster). Inlined into each form below, it is compiled
 * for that form's target. */
__attribute__((always_inline)) inline void max_into_lanes(float *out, const float *in, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    const float m = out[i], v = in[i];
    const float larger = (v > m || v != v) ? v : m;
    out[i] = m != m ? m : larger;
  }
}

void max_into(float *out, const float *in, int64_t n) { max_into_lanes(out, in, n); }

#if defined(__x86_64__)
__attribute__((target("avx512f"))) void max_into_512(float *out, const float *in, int64_t n) {
  max_into_lanes(out, in, n);
}
#endif

struct maxpool_job {
  void (*channels_max)(float *, const float *, int64_t);
  const maxpool_params *p;
  const float *x;
  float *y;

  /* the taps [first, last) of a window starting at `start` (stride applied) along an axis of `size` */
  static void taps(int64_t start, int64_t k, int64_t d, int64_t size, int64_t *first, int64_t *last) {
    *first = start >= 0 ? 0 : (-start + d - 1) / d;
    *last = start >= size ? 0 : std::min<int64_t>(k, (size - start + d - 1) / d);
  }

  /* one output row (n, c, oy) of NCHW, or (n, oy) of NHWC: every channel of it */
  void row(int64_t r) const {
    const maxpool_params &q = *p;
    const float inf = std::numeric_limits<float>::infinity();
    if (q.channels_last) {
      const int64_t b = r / q.oh, oy = r % q.oh;
      int64_t ky0, ky1;
      taps(oy * q.sh - q.ph, q.kh, q.dh, q.h, &ky0, &ky1);
      for (int64_t ox = 0; ox < q.ow; ox++) {
        float *out = y + ((b * q.oh + oy) * q.ow + ox) * q.c;
        for (int64_t ch = 0; ch < q.c; ch++) out[ch] = -inf;
        int64_t kx0, kx1;
        taps(ox * q.sw - q.pw, q.kw, q.dw, q.w, &kx0, &kx1);
        for (int64_t ky = ky0; ky < ky1; ky++) {
          const int64_t iy = oy * q.sh - q.ph + ky * q.dh;
          for (int64_t kx = kx0; kx < kx1; kx++) {
            const int64_t ix = ox * q.sw - q.pw + kx * q.dw;
            const float *in = x + ((b * q.h + iy) * q.w + ix) * q.c;
            channels_max(out, in, q.c);
          }
        }
      }
      return;
    }
    const int64_t plane = r / q.oh, oy = r % q.oh;
    const float *in = x + plane * q.h * q.w;
    float *out = y + (plane * q.oh + oy) * q.ow;
    int64_t ky0, ky1;
    taps(oy * q.sh - q.ph, q.kh, q.dh, q.h, &ky0, &ky1);
    for (int64_t ox = 0; ox < q.ow; ox++) {
      int64_t kx0, kx1;
      taps(ox * q.sw - q.pw, q.kw, q.dw, q.w, &kx0, &kx1);
      float m = -inf;
      for (int64_t ky = ky0; ky < ky1; ky++)
        for (int64_t kx = kx0; kx < kx1; kx++)
          m = max_nan(m, in[(oy * q.sh - q.ph + ky * q.dh) * q.w + ox * q.sw - q.pw + kx * q.dw]);
      out[ox] = m;
    }
  }
};

void maxpool_task(const maxpool_params &p, const std::vector<mx::array> &in, std::vector<mx::array> &out) {
  maxpool_job job{max_into, &p, in[0].data<float>(), out[0].data<float>()};
#if defined(__x86_64__)
  if (cpu_avx512_available()) job.channels_max = max_into_512;
#endif
  const int64_t rows = (p.channels_last ? p.n : p.n * p.c) * p.oh;
  enum { SMALL = 1 << 14 }; /* output values: fewer stay on this thread */
  cpu_parallel_rows(rows, rows * p.ow * (p.channels_last ? p.c : 1) >= SMALL, [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; r++) job.row(r);
  });
}

/* x's channels-last source when x is [N, C, H, W] seen through the transpose (0, 3, 1, 2) of one */
bool channels_last_source(const mx::array &x, mx::array *src) {
  if (!x.has_primitive() || x.inputs().size() != 1 || std::strcmp(x.primitive().name(), "Transpose")) return false;
  const std::vector<int> perm = static_cast<const mx::Transpose &>(x.primitive()).state();
  if (perm != std::vector<int>{0, 3, 1, 2}) return false;
  *src = x.inputs()[0];
  return true;
}

} // namespace

} // namespace mlxb_detail

using namespace mlxb_detail;

extern "C" {

bool mlxb_max_pool2d_available(const mlxb_scope *s, const mlxb_array *x) {
  static const bool on = env_switch_on("ORT_EP_MLX_CPU_POOL"); /* plain C++: every CPU */
  return on && s && x && is_cpu_scope(s) && arr(x).dtype() == mx::float32 && arr(x).ndim() == 4;
}

mlxb_array *mlxb_max_pool2d(mlxb_scope *s, const mlxb_array *x, const mlxb_pool2d *g) {
  return guard(s, "mlxb_max_pool2d", [&] {
    if (!x || !g) throw null_arg{};
    if (!mlxb_max_pool2d_available(s, x)) throw bridge_error("max pool: a float32 [N, C, H, W] on a CPU scope");
    const mx::array &a = arr(x);
    maxpool_params p;
    std::memset(&p, 0, sizeof p);
    p.n = a.shape(0), p.c = a.shape(1), p.h = a.shape(2), p.w = a.shape(3);
    p.oh = g->oh, p.ow = g->ow, p.kh = g->kh, p.kw = g->kw, p.sh = g->sh, p.sw = g->sw;
    p.dh = g->dh, p.dw = g->dw, p.ph = g->ph, p.pw = g->pw;
    const int64_t most = std::numeric_limits<int>::max();
    bool fits = p.oh >= 0 && p.ow >= 0 && p.kh >= 1 && p.kw >= 1 && p.sh >= 1 && p.sw >= 1 && p.dh >= 1 && p.dw >= 1 &&
                p.ph >= 0 && p.pw >= 0 && p.oh <= most && p.ow <= most && p.ph <= most && p.pw <= most &&
                p.kh <= most && p.kw <= most && p.sh <= most && p.sw <= most && p.dh <= most && p.dw <= most;
    if (!fits) throw bridge_error("max pool: the geometry does not fit");
    mx::array src = a;
    p.channels_last = channels_last_source(a, &src);
    cpu_pool_start();
    if (p.channels_last) {
      mx::Shape shape = {static_cast<int>(p.n), static_cast<int>(p.oh), static_cast<int>(p.ow), static_cast<int>(p.c)};
      mx::array y = make_task(s, "EpCpuMaxPool", p, maxpool_task, {src}, {shape}, {mx::float32}).at(0);
      return mx::transpose(y, {0, 3, 1, 2}, scope_dev(s));
    }
    mx::Shape shape = {static_cast<int>(p.n), static_cast<int>(p.c), static_cast<int>(p.oh), static_cast<int>(p.ow)};
    return make_task(s, "EpCpuMaxPool", p, maxpool_task, {a}, {shape}, {mx::float32}).at(0);
  });
}

} // extern "C"
