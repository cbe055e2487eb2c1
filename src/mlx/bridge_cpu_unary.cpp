/* Exp, Erf and Sigmoid of float32 on MLX's CPU stream, bit for bit MLX's own, faster.
 *
 * Why: MLX's CPU kernels compute these with its scalar SIMD fallback (one lane on x86), whose
 * fused multiply-adds are calls into libm's fmaf when MLX is built without FMA: on a BERT layer
 * (seq 128) exp, erf and fmaf were 27% of a Run's time. Here the same templates of MLX's headers
 * (mlx/backend/cpu/unary_ops.h: detail::Exp, detail::Erf, detail::Sigmoid over simd::Simd<float,
 * 1>) run inside a loop compiled for AVX2 and FMA, where each fma is one instruction. A fused
 * multiply-add rounds once either way, so every result is the one MLX gives (tests/test_cpu_unary.py
 * compares them bit for bit), but for Exp past |x| = 88, where MLX's kernel is wrong (ExpWide).
 * CPUs without AVX2 and FMA and other dtypes keep MLX's kernels; ORT_EP_MLX_CPU_UNARY=0 keeps them
 * everywhere. */
#include "mlx/bridge_internal.h"

#include "mlx/backend/cpu/encoder.h"
#include "mlx/backend/cpu/unary_ops.h"
#include "mlx/primitives.h"

#include <cstring>
#include <limits>

namespace mlxb_detail {

namespace {

#if defined(__x86_64__) && !defined(__APPLE__)

/* MLX's exp, except past |x| = 88, where MLX's kernel gives infinity above and zero below although
 * float32 holds exp(x) up to x = 88.72 and down to -103.97 (ORT's CPU EP, and MLX's CUDA backend,
 * give those values): there it is MLX's exp(x / 2) squared, which overflows or underflows where
 * exp(x) does. */
struct ExpWide {
  mx::simd::Simd<float, 1> operator()(mx::simd::Simd<float, 1> x) {
    if (!(x.value > 88.0f || x.value < -88.0f)) return mx::detail::Exp{}(x);
    float half = mx::detail::Exp{}(mx::simd::Simd<float, 1>(0.5f * x.value)).value;
    return mx::simd::Simd<float, 1>(half * half);
  }
};

template <typename Op>
__attribute__((target("avx2,fma"), flatten)) void apply_fma(const float *in, float *out, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = Op{}(mx::simd::Simd<float, 1>(in[i])).value;
}

void apply(mlxb_unary_op op, const float *in, float *out, size_t n) {
  switch (op) {
    case MLXB_EXP: return apply_fma<ExpWide>(in, out, n);
    case MLXB_ERF: return apply_fma<mx::detail::Erf>(in, out, n);
    case MLXB_SIGMOID: return apply_fma<mx::detail::Sigmoid>(in, out, n);
    default: std::fill(out, out + n, std::numeric_limits<float>::quiet_NaN()); /* never built: cpu_unary_takes */
  }
}

class ep_cpu_unary : public mx::Primitive {
 public:
  ep_cpu_unary(mx::Stream stream, mlxb_unary_op op) : mx::Primitive(stream), op_(op) {}

  void eval_cpu(const std::vector<mx::array> &inputs, std::vector<mx::array> &outputs) override {
    mx::array &out = outputs[0];
    out.set_data(mx::allocator::malloc(out.nbytes()));
    auto &encoder = mx::cpu::get_command_encoder(stream());
    encoder.set_input_array(inputs[0]);
    encoder.set_output_array(out);
    encoder.dispatch([in = mx::array::unsafe_weak_copy(inputs[0]), out = mx::array::unsafe_weak_copy(out),
                      op = op_]() mutable { apply(op, in.data<float>(), out.data<float>(), out.size()); });
  }

  void eval_gpu(const std::vector<mx::array> &, std::vector<mx::array> &) override {
    throw std::runtime_error("EpCpuUnary: a CPU kernel has no GPU form");
  }

  const char *name() const override { return "EpCpuUnary"; }

  bool is_equivalent(const mx::Primitive &other) const override {
    auto *o = dynamic_cast<const ep_cpu_unary *>(&other);
    return o && o->op_ == op_;
  }

 private:
  mlxb_unary_op op_;
};

#endif

} // namespace

bool cpu_unary_takes(mlxb_unary_op op, const mx::array &x, mx::StreamOrDevice d) {
#if defined(__x86_64__) && !defined(__APPLE__)
  static const bool on = env_switch_on("ORT_EP_MLX_CPU_UNARY") && __builtin_cpu_supports("avx2") &&
                         __builtin_cpu_supports("fma");
  if (!on || (op != MLXB_EXP && op != MLXB_ERF && op != MLXB_SIGMOID) || x.dtype() != mx::float32) return false;
  return mx::to_stream(d).device == mx::Device::cpu;
#else
  (void)op, (void)x, (void)d;
  return false;
#endif
}

mx::array cpu_unary(mlxb_unary_op op, const mx::array &x, mx::StreamOrDevice d) {
#if defined(__x86_64__) && !defined(__APPLE__)
  mx::Stream stream = mx::to_stream(d);
  return mx::array(x.shape(), mx::float32, std::make_shared<ep_cpu_unary>(stream, op), {row_major(x, d)});
#else
  (void)op, (void)d;
  return x;
#endif
}

} // namespace mlxb_detail
