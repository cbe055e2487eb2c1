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

/* op over every element, or (softmax) MLX's softmax over rows of the last axis */
class ep_cpu_unary : public mx::Primitive {
 public:
  ep_cpu_unary(mx::Stream stream, mlxb_unary_op op, bool softmax) : mx::Primitive(stream), op_(op), softmax_(softmax) {}

  void eval_cpu(const std::vector<mx::array> &inputs, std::vector<mx::array> &outputs) override {
    cpu_task_arrays held;
    auto &encoder = cpu_task_begin(stream(), inputs, outputs, &held);
    encoder.dispatch([held = std::move(held), op = op_, softmax = softmax_]() mutable {
      const mx::array &in = held.ins[0];
      mx::array &out = held.outs[0];
      if (!softmax) return cpu_vmath(op, in.data<float>(), out.data<float>(), out.size());
      const int64_t m = in.shape(-1);
      cpu_softmax_rows(in.data<float>(), out.data<float>(), static_cast<int64_t>(in.size()) / m, m);
    });
  }

  void eval_gpu(const std::vector<mx::array> &, std::vector<mx::array> &) override {
    throw std::runtime_error(std::string(name()) + ": a CPU kernel has no GPU form");
  }

  const char *name() const override { return softmax_ ? "EpCpuSoftmax" : "EpCpuUnary"; }

  bool is_equivalent(const mx::Primitive &other) const override {
    auto *o = dynamic_cast<const ep_cpu_unary *>(&other);
    return o && o->op_ == op_ && o->softmax_ == softmax_;
  }

 private:
  mlxb_unary_op op_;
  bool softmax_;
};

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
  mx::Stream stream = mx::to_stream(d);
  return mx::array(x.shape(), mx::float32, std::make_shared<ep_cpu_unary>(stream, op, false), {row_major(x, d)});
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
  return mx::array(x.shape(), mx::float32, std::make_shared<ep_cpu_unary>(mx::to_stream(d), MLXB_EXP, true),
                   {row_major(x, d)});
#else
  (void)d;
  return x;
#endif
}

} // namespace mlxb_detail
