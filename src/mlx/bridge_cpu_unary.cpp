/* Exp, Erf, Sigmoid and Tanh of float32 on MLX's CPU stream as one operation of our own, eight lanes
 * at a time (bridge_cpu_vmath.cpp).
 *
 * Why: MLX's CPU kernels compute these with its scalar SIMD fallback (one lane on x86), whose
 * fused multiply-adds are calls into libm's fmaf when MLX is built without FMA, and tanh with
 * libm's tanhf: on a BERT layer (seq 128) exp, erf and fmaf were 27% of a Run's time. Exp, Erf
 * and Sigmoid give the result MLX's kernel gives, bit for bit (tests/test_cpu_unary.py), but for Exp
 * past |x| = 88, where MLX's kernel gives infinity above and zero below although float32 holds
 * exp(x) up to x = 88.72 and down to -103.97 (ORT's CPU EP, and MLX's CUDA backend, give those
 * values): there it is MLX's exp(x / 2) squared, which overflows or underflows where exp(x) does.
 * Tanh is within 2 ulp of the true value (libm's, MLX's, within 1). CPUs without AVX2 and FMA and
 * other dtypes keep MLX's kernels; ORT_EP_MLX_CPU_UNARY=0 keeps them everywhere. */
#include "mlx/bridge_cpu_task.h"
#include "mlx/primitives.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

namespace mlxb_detail {

namespace {

#if defined(__x86_64__) && !defined(__APPLE__)

/* op over every element, or (softmax) MLX's softmax over rows of the last axis: the parameters of
 * EpCpuUnary and EpCpuSoftmax (cpu_task) */
struct unary_params {
  int32_t op, softmax;
};

/* A task's values shared with the pool's helpers from SHARED values on: the elements in blocks of
 * BLOCK (a part takes the blocks of its units), softmax's rows whole (cpu_parallel_rows). Every
 * value is computed as one thread would. */
struct unary_job {
  enum { SHARED = 1 << 16, BLOCK = 256 };
  const unary_params *p;
  const float *in;
  float *out;
  int64_t n;

  static void blocks(const void *ctx, int64_t lo, int64_t hi) {
    const auto &j = *static_cast<const unary_job *>(ctx);
    const int64_t from = lo * BLOCK, to = std::min(hi * BLOCK, j.n);
    if (from < to) cpu_vmath(static_cast<mlxb_unary_op>(j.p->op), j.in + from, j.out + from, static_cast<size_t>(to - from));
  }
};

void unary_task(const unary_params &p, const std::vector<mx::array> &in, std::vector<mx::array> &out) {
  const int64_t n = static_cast<int64_t>(out[0].size());
  const float *x = in[0].data<float>();
  float *y = out[0].data<float>();
  if (p.softmax) { /* its input has a last axis (cpu_softmax_takes); a unary op's may be 0-d */
    const int64_t m = in[0].shape(-1);
    cpu_parallel_rows(n / m, n >= unary_job::SHARED,
                      [&](int64_t first, int64_t last) { cpu_softmax_rows(x + first * m, y + first * m, last - first, m); });
    return;
  }
  unary_job job{&p, x, y, n};
  const int64_t blocks = (n + unary_job::BLOCK - 1) / unary_job::BLOCK;
  if (n < unary_job::SHARED) return unary_job::blocks(&job, 0, blocks);
  cpu_parallel_for(blocks, unary_job::blocks, &job);
}

mx::array unary_array(mlxb_unary_op op, bool softmax, const mx::array &x, mx::StreamOrDevice d) {
  unary_params p{static_cast<int32_t>(op), softmax ? 1 : 0};
  cpu_pool_start(); /* large arrays are shared with its threads: they start here, not in the task */
  auto prim = std::make_shared<cpu_task<unary_params>>(mx::to_stream(d), softmax ? "EpCpuSoftmax" : "EpCpuUnary", p,
                                                      unary_task);
  return mx::array(x.shape(), mx::float32, prim, {row_major(x, d)});
}

bool cpu_kernels_on() {
  static const bool on = env_switch_on("ORT_EP_MLX_CPU_UNARY") && cpu_vmath_available();
  return on;
}

/* LayerNormalization over the last axis (EpCpuLayerNorm): per row of `hidden` values the mean, then
 * the mean of the squared deviations (two passes, as MLX's composition computes them, summed in
 * float64: a row far from zero keeps its variance), then (x - mean) / sqrt(var + eps) in float64,
 * rounded once, times the weight plus the bias in float32. The rows are shared with the pool's
 * helpers (cpu_parallel_rows). */
struct layer_norm_params {
  int64_t rows, hidden;
  float eps;
  int32_t has_weight, has_bias;
};

struct layer_norm_job {
  const layer_norm_params *p;
  const float *x, *w, *b;
  float *y;

  /* the sum of f(v[i]) over n values, in eight partial sums of float64 */
  template <typename F>
  static double sum8(const float *v, int64_t n, F f) {
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      for (int l = 0; l < 8; l++) acc[l] += f(v[i + l]);
    double total = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) total += f(v[i]);
    return total;
  }

  void row(int64_t r) const {
    const int64_t H = p->hidden;
    const float *xr = x + r * H;
    float *yr = y + r * H;
    const double mean = sum8(xr, H, [](float v) { return static_cast<double>(v); }) / static_cast<double>(H);
    const double var =
        sum8(xr, H, [mean](float v) { return (v - mean) * (v - mean); }) / static_cast<double>(H);
    const double inv = 1.0 / std::sqrt(var + p->eps);
    for (int64_t i = 0; i < H; i++) {
      float v = static_cast<float>((xr[i] - mean) * inv); /* float64 until here: the mean is not rounded */
      if (p->has_weight) v *= w[i];
      if (p->has_bias) v += b[i];
      yr[i] = v;
    }
  }
};

void layer_norm_task(const layer_norm_params &p, const std::vector<mx::array> &in, std::vector<mx::array> &out) {
  layer_norm_job job{&p, in[0].data<float>(), in[1].data<float>(), in[2].data<float>(), out[0].data<float>()};
  enum { SMALL = 1 << 14 }; /* values: fewer stay on this thread (handing parts out costs more) */
  cpu_parallel_rows(p.rows, p.rows * p.hidden >= SMALL, [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; r++) job.row(r);
  });
}

#endif

} // namespace

bool cpu_unary_takes(mlxb_unary_op op, const mx::array &x, mx::StreamOrDevice d) {
#if defined(__x86_64__) && !defined(__APPLE__)
  if (!cpu_kernels_on() || !cpu_vmath_has(op) || x.dtype() != mx::float32) return false;
  return mx::to_stream(d).device == mx::Device::cpu;
#else
  (void)op, (void)x, (void)d;
  return false;
#endif
}

mx::array cpu_unary(mlxb_unary_op op, const mx::array &x, mx::StreamOrDevice d) {
#if defined(__x86_64__) && !defined(__APPLE__)
  return unary_array(op, false, x, d);
#else
  (void)op, (void)d;
  return x;
#endif
}

bool cpu_softmax_on() {
#if defined(__x86_64__) && !defined(__APPLE__)
  return cpu_kernels_on();
#else
  return false;
#endif
}

bool cpu_softmax_takes(const mx::array &x, const std::vector<int> &axes, mx::StreamOrDevice d) {
#if defined(__x86_64__) && !defined(__APPLE__)
  if (!cpu_kernels_on() || x.dtype() != mx::float32 || x.ndim() < 1 || x.size() == 0 || axes.size() != 1) return false;
  int axis = axes[0] < 0 ? axes[0] + static_cast<int>(x.ndim()) : axes[0];
  return axis == static_cast<int>(x.ndim()) - 1 && mx::to_stream(d).device == mx::Device::cpu;
#else
  (void)x, (void)axes, (void)d;
  return false;
#endif
}

bool cpu_layer_norm_takes(const mx::array &x, const std::optional<mx::array> &w, const std::optional<mx::array> &b,
                          mx::StreamOrDevice d) {
#if defined(__x86_64__) && !defined(__APPLE__)
  if (!cpu_kernels_on() || x.dtype() != mx::float32 || x.ndim() < 1 || x.size() == 0) return false;
  const int hidden = x.shape(-1);
  auto vector_fits = [&](const std::optional<mx::array> &v) {
    return !v || (v->dtype() == mx::float32 && v->ndim() == 1 && v->shape(0) == hidden);
  };
  return vector_fits(w) && vector_fits(b) && mx::to_stream(d).device == mx::Device::cpu;
#else
  (void)x, (void)w, (void)b, (void)d;
  return false;
#endif
}

mx::array cpu_layer_norm(const mlxb_scope *s, const mx::array &x, const std::optional<mx::array> &w,
                         const std::optional<mx::array> &b, float eps) {
#if defined(__x86_64__) && !defined(__APPLE__)
  layer_norm_params p{};
  p.hidden = x.shape(-1);
  p.rows = static_cast<int64_t>(x.size()) / p.hidden;
  p.eps = eps, p.has_weight = w.has_value(), p.has_bias = b.has_value();
  cpu_pool_start();
  return make_task(s, "EpCpuLayerNorm", p, layer_norm_task, {x, w ? *w : x, b ? *b : x}, {x.shape()}, {mx::float32})
      .at(0);
#else
  (void)s, (void)w, (void)b, (void)eps;
  return x;
#endif
}

mx::array cpu_softmax(const mx::array &x, mx::StreamOrDevice d) {
#if defined(__x86_64__) && !defined(__APPLE__)
  return unary_array(MLXB_EXP, true, x, d);
#else
  (void)d;
  return x;
#endif
}

} // namespace mlxb_detail
