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

#include <cstring>
#include <limits>

namespace mlxb_detail {

namespace {

#if defined(__x86_64__) && !defined(__APPLE__)

/* op over every element, or (softmax) MLX's softmax over rows of the last axis: the parameters of
 * EpCpuUnary and EpCpuSoftmax (cpu_task) */
struct unary_params {
  int32_t op, softmax;
};

void unary_task(const unary_params &p, const std::vector<mx::array> &in, std::vector<mx::array> &out) {
  if (!p.softmax) return cpu_vmath(static_cast<mlxb_unary_op>(p.op), in[0].data<float>(), out[0].data<float>(), out[0].size());
  const int64_t m = in[0].shape(-1);
  cpu_softmax_rows(in[0].data<float>(), out[0].data<float>(), static_cast<int64_t>(in[0].size()) / m, m);
}

mx::array unary_array(mlxb_unary_op op, bool softmax, const mx::array &x, mx::StreamOrDevice d) {
  unary_params p{static_cast<int32_t>(op), softmax ? 1 : 0};
  auto prim = std::make_shared<cpu_task<unary_params>>(mx::to_stream(d), softmax ? "EpCpuSoftmax" : "EpCpuUnary", p,
                                                      unary_task);
  return mx::array(x.shape(), mx::float32, prim, {row_major(x, d)});
}

bool cpu_kernels_on() {
  static const bool on = env_switch_on("ORT_EP_MLX_CPU_UNARY") && cpu_vmath_available();
  return on;
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

mx::array cpu_softmax(const mx::array &x, mx::StreamOrDevice d) {
#if defined(__x86_64__) && !defined(__APPLE__)
  return unary_array(MLXB_EXP, true, x, d);
#else
  (void)d;
  return x;
#endif
}

} // namespace mlxb_detail
