/* FFT functions of the bridge (see bridge.h): one-dimensional MLX FFTs and the conversions
 * between ONNX's [..., 2] (real, imaginary) pairs and MLX's complex64. */
#include "mlx/bridge_internal.h"

#include "mlx/fft.h"

using namespace mlxb_detail;

namespace {

int fft_points(int64_t n) {
  if (n <= 0) throw bridge_error("FFT length " + std::to_string(n) + " must be positive");
  return to_i32(n, "FFT length");
}

} // namespace

extern "C" {

mlxb_array *mlxb_complex_from_pairs(mlxb_scope *s, const mlxb_array *x) {
  return guard(s, "mlxb_complex_from_pairs", [&] {
    const mx::array &a = arr(x);
    if (a.ndim() < 1 || a.shape(-1) != 2) throw bridge_error("the last axis must hold 2 values");
    /* A contiguous float32 [..., 2] has complex64's layout: reinterpret, then drop the axis. */
    auto d = scope_dev(s);
    mx::array f = mx::contiguous(mx::astype(a, mx::float32, d), false, d);
    return mx::squeeze(mx::view(f, mx::complex64, d), -1, d);
  });
}

mlxb_array *mlxb_complex_to_pairs(mlxb_scope *s, const mlxb_array *z) {
  return guard(s, "mlxb_complex_to_pairs", [&] {
    const mx::array &a = arr(z);
    if (a.dtype() != mx::complex64) throw bridge_error("input is not complex64");
    auto d = scope_dev(s);
    mx::array c = mx::contiguous(mx::expand_dims(a, -1, d), false, d);
    return mx::view(c, mx::float32, d);
  });
}

mlxb_array *mlxb_fft(mlxb_scope *s, const mlxb_array *z, int64_t n, int axis, bool inverse) {
  return guard(s, "mlxb_fft", [&] {
    const mx::array &a = arr(z);
    int pts = fft_points(n);
    if (inverse) return mx::fft::ifft(a, pts, axis, mx::fft::FFTNorm::Backward, scope_dev(s));
    return mx::fft::fft(a, pts, axis, mx::fft::FFTNorm::Backward, scope_dev(s));
  });
}

mlxb_array *mlxb_rfft(mlxb_scope *s, const mlxb_array *x, int64_t n, int axis) {
  return guard(s, "mlxb_rfft", [&] {
    return mx::fft::rfft(arr(x), fft_points(n), axis, mx::fft::FFTNorm::Backward, scope_dev(s));
  });
}

mlxb_array *mlxb_irfft(mlxb_scope *s, const mlxb_array *z, int64_t n, int axis) {
  return guard(s, "mlxb_irfft", [&] {
    return mx::fft::irfft(arr(z), fft_points(n), axis, mx::fft::FFTNorm::Backward, scope_dev(s));
  });
}

} // extern "C"
