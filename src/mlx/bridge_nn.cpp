/* Matrix products, convolution and the fused neural-network ops of the bridge (see bridge.h). */
#include "mlx/bridge_internal.h"

#include <algorithm>

#include "mlx/fast.h"

using namespace mlxb_detail;

extern "C" {

/* Products with an empty operand are zeros of the product's shape (an empty sum is 0): MLX's
 * CUDA kernels crashed the process on such shapes, so they never reach a kernel. */
static mx::array zeros_if_empty(const mx::array &y, std::initializer_list<const mx::array *> operands,
                                mx::StreamOrDevice d) {
  bool empty = y.size() == 0;
  for (const mx::array *o : operands) empty = empty || o->size() == 0;
  return empty ? mx::zeros(y.shape(), y.dtype(), d) : y;
}

mlxb_array *mlxb_matmul(mlxb_scope *s, const mlxb_array *a, const mlxb_array *b) {
  return guard(s, "mlxb_matmul", [&] {
    const mx::array &x = arr(a), &y = arr(b);
    return zeros_if_empty(mx::matmul(x, y, scope_dev(s)), {&x, &y}, scope_dev(s));
  });
}

mlxb_array *mlxb_addmm(mlxb_scope *s, const mlxb_array *c, const mlxb_array *a, const mlxb_array *b, float alpha, float beta) {
  return guard(s, "mlxb_addmm", [&] {
    const mx::array &x = arr(a), &y = arr(b), &z = arr(c);
    if (x.size() && y.size()) return mx::addmm(z, x, y, alpha, beta, scope_dev(s));
    mx::array prod = zeros_if_empty(mx::matmul(x, y, scope_dev(s)), {&x, &y}, scope_dev(s));
    return mx::add(prod, mx::multiply(z, mx::array(beta, z.dtype()), scope_dev(s)), scope_dev(s));
  });
}

mlxb_array *mlxb_conv_general(mlxb_scope *s, const mlxb_array *x, const mlxb_array *w, int nspatial,
                              const int *strides, const int *pad_lo, const int *pad_hi,
                              const int *kernel_dilation, const int *input_dilation, int groups, bool flip) {
  return guard(s, "mlxb_conv_general", [&] {
    const mx::array &in = arr(x), &wt = arr(w);
    /* A NULL list means the default (stride 1, no padding, no dilation) on every axis. */
    auto list = [&](const int *v, int dflt) {
      if (nspatial < 0) throw bridge_error("negative nspatial");
      return v ? std::vector<int>(v, v + nspatial) : std::vector<int>(nspatial, dflt);
    };
    mx::array y = mx::conv_general(in, wt, list(strides, 1), list(pad_lo, 0), list(pad_hi, 0),
                                   list(kernel_dilation, 1), list(input_dilation, 1), groups, flip, scope_dev(s));
    return zeros_if_empty(y, {&in, &wt}, scope_dev(s));
  });
}

mlxb_array *mlxb_layer_norm(mlxb_scope *s, const mlxb_array *x, const mlxb_array *weight, const mlxb_array *bias, float eps) {
  return guard(s, "mlxb_layer_norm", [&] {
    if (cpu_layer_norm_takes(arr(x), opt(weight), opt(bias), scope_dev(s)))
      return cpu_layer_norm(s, arr(x), opt(weight), opt(bias), eps);
    return mx::fast::layer_norm(arr(x), opt(weight), opt(bias), eps, scope_dev(s));
  });
}

mlxb_array *mlxb_rms_norm(mlxb_scope *s, const mlxb_array *x, const mlxb_array *weight, float eps) {
  return guard(s, "mlxb_rms_norm", [&] { return mx::fast::rms_norm(arr(x), opt(weight), eps, scope_dev(s)); });
}

/* On the CPU MLX's fast attention is its fallback composition: (scale * q) k^T (+ the additive
 * mask), softmax over the last axis, times v, with the query heads grouped over the key heads. The
 * same composition here, with the softmax our CPU primitive (MLX's bits, eight lanes: its scalar
 * exp called libm's fmaf per value, ~6% of a prompt); float32 with an additive float32 mask or
 * none, no sinks, no causal mode (what attention.c hands over); anything else stays with MLX. */
static bool sdpa_composed_takes(const mlxb_scope *s, const mx::array &q, const mx::array &k, const mx::array &v,
                                const std::string &mode, const mlxb_array *mask, const mlxb_array *sinks) {
  if (!is_cpu_scope(s) || sinks || (mode != "" && mode != "array")) return false;
  if (q.dtype() != mx::float32 || k.dtype() != mx::float32 || v.dtype() != mx::float32) return false;
  if (q.ndim() != 4 || k.ndim() != 4 || v.ndim() != 4 || k.shape(1) < 1 || q.shape(1) % k.shape(1)) return false;
  if (mask && (arr(mask).dtype() != mx::float32 || arr(mask).ndim() > 4)) return false;
  return cpu_softmax_on();
}

static mx::array sdpa_composed(const mlxb_scope *s, const mx::array &q, const mx::array &k, const mx::array &v,
                               float scale, const mlxb_array *mask) {
  auto d = scope_dev(s);
  const int hq = q.shape(1), hkv = k.shape(1), repeats = hq / hkv;
  mx::array qs = mx::multiply(mx::array(scale, mx::float32), q, d), kk = k, vv = v;
  if (repeats > 1) {
    qs = mx::unflatten(qs, 1, {hkv, repeats}, d);
    kk = mx::expand_dims(k, 2, d);
    vv = mx::expand_dims(v, 2, d);
  }
  mx::array scores = mx::matmul(qs, mx::swapaxes(kk, -1, -2, d), d);
  if (mask) {
    mx::array m = mx::broadcast_to(arr(mask), {q.shape(0), hq, q.shape(2), k.shape(2)}, d);
    if (repeats > 1) m = mx::unflatten(m, -3, {hkv, repeats}, d);
    scores = mx::add(scores, m, d);
  }
  mx::array out = mx::matmul(cpu_softmax(scores, d), vv, d);
  return repeats > 1 ? mx::flatten(out, 1, 2, d) : out;
}

mlxb_array *mlxb_sdpa(mlxb_scope *s, const mlxb_array *q, const mlxb_array *k, const mlxb_array *v, float scale,
                      const char *mask_mode, const mlxb_array *mask, const mlxb_array *sinks) {
  return guard(s, "mlxb_sdpa", [&] {
    const mx::array &qa = arr(q), &ka = arr(k), &va = arr(v);
    std::string mode = mask_mode ? mask_mode : "";
    if (sdpa_composed_takes(s, qa, ka, va, mode, mask, sinks)) return sdpa_composed(s, qa, ka, va, scale, mask);
    if (mask && mode.empty()) mode = "array";
    return mx::fast::scaled_dot_product_attention(qa, ka, va, scale, mode, opt(mask), opt(sinks), false, scope_dev(s));
  });
}

/* Whether MLX's own quantized matmul should take this product; else its weights are dequantized
 * (scale * q + bias, in x's dtype) and multiplied. Both compute the same float products.
 * - CUDA: only where MLX runs its vector kernel (MLX 0.32: one row of one matrix, N and K up to
 *   16384). On an H200 its other CUDA kernels were compiled at the first Run from CUDA headers the
 *   wheels do not carry ("crt/mma.h": qmm_sm90_*.cu) or had no implementation for the shape (bits
 *   8, group 128); dequantizing is faster there at 128 rows anyway (bench/prefill_matmul.py).
 * - CPU: one row. MLX's CPU kernel walks the weights once per row, so its time grows with the rows
 *   (K 512, N 1408: 0.6 ms a row), while one BLAS GEMM on the dequantized weights takes about a
 *   row's time for 16 rows and 2.2 ms for 128 (OpenBLAS, 2 cores; src/mlx/cpu_blas.c).
 * - Metal: always (MLX's Metal kernels cover every shape). */
static bool quantized_kernel_takes(const mlxb_scope *s, const mx::array &x, const mx::array &w, bool transpose,
                                   int bits) {
  bool cpu = is_cpu_scope(s);
  if (!cpu && !is_cuda_gpu(s)) return true;
  if (x.ndim() < 1 || w.ndim() != 2 || bits <= 0) return false;
  int64_t rows = x.size() / std::max<int64_t>(x.shape(-1), 1);
  if (cpu) return rows <= 1;
  int64_t n = transpose ? w.shape(0) : (int64_t)w.shape(1) * 32 / bits;
  return rows == 1 && n <= 16384 && x.shape(-1) <= 16384;
}

/* Dequantized in slices of output columns on the CPU, so no more than about 64 MiB of dense
 * weights exist at once (a 151936 x 896 vocabulary projection is 544 MB in float32): MLX frees
 * each slice once its product is computed. One slice elsewhere (device memory is the GPU's). */
static int64_t dequantized_slice_rows(const mlxb_scope *s, const mx::array &x, const mx::array &w, bool transpose,
                                      int bits) {
  int64_t n = w.shape(0), k = (int64_t)w.shape(1) * 32 / bits;
  bool cpu = is_cpu_scope(s);
  if (!cpu || !transpose || w.ndim() != 2) return n;
  int64_t per_row = k * (int64_t)x.itemsize();
  return std::max<int64_t>(1, std::min<int64_t>(n, (int64_t(64) << 20) / std::max<int64_t>(per_row, 1)));
}

static mx::array dequantized_matmul(const mlxb_scope *s, const mx::array &x, const mx::array &w, const mx::array &scales,
                                    const std::optional<mx::array> &biases, bool transpose, int group_size, int bits) {
  auto dense_product = [&](const mx::array &wq, const mx::array &sc, const std::optional<mx::array> &bi) {
    mx::array dense = mx::dequantize(wq, sc, bi, group_size, bits, "affine", std::nullopt, x.dtype(), scope_dev(s));
    if (transpose) dense = mx::swapaxes(dense, -1, -2, scope_dev(s));
    return mx::matmul(x, dense, scope_dev(s));
  };
  int64_t n = w.ndim() == 2 ? w.shape(0) : 0, step = dequantized_slice_rows(s, x, w, transpose, bits);
  if (n <= step) return dense_product(w, scales, biases);
  std::vector<mx::array> parts;
  for (int64_t lo = 0; lo < n; lo += step) {
    int hi = (int)std::min(n, lo + step);
    auto rows = [&](const mx::array &a) {
      return mx::slice(a, {(int)lo, 0}, {hi, a.shape(1)}, scope_dev(s));
    };
    parts.push_back(dense_product(rows(w), rows(scales), biases ? std::optional<mx::array>(rows(*biases)) : std::nullopt));
  }
  return mx::concatenate(parts, -1, scope_dev(s));
}

mlxb_array *mlxb_quantized_matmul(mlxb_scope *s, const mlxb_array *x, const mlxb_array *w, const mlxb_array *scales,
                                  const mlxb_array *biases, bool transpose, int group_size, int bits) {
  return guard(s, "mlxb_quantized_matmul", [&] {
    const mx::array &in = arr(x), &packed = arr(w);
    if (cpu_qgemv_takes(s, in, packed, arr(scales), opt(biases), transpose, group_size, bits))
      return cpu_qgemv(s, in, packed, arr(scales), *opt(biases), group_size);
    std::optional<mx::array> bias;
    if (biases) bias = affine_biases(arr(scales), arr(biases), scope_dev(s));
    mx::array y = quantized_kernel_takes(s, in, packed, transpose, bits)
                      ? mx::quantized_matmul(in, packed, arr(scales), bias, transpose, group_size, bits, "affine",
                                             scope_dev(s))
                      : dequantized_matmul(s, in, packed, arr(scales), bias, transpose, group_size, bits);
    return zeros_if_empty(y, {&in}, scope_dev(s));
  });
}

mlxb_array *mlxb_dequantize(mlxb_scope *s, const mlxb_array *w, const mlxb_array *scales, const mlxb_array *biases,
                            int group_size, int bits, mlxb_dtype out) {
  return guard(s, "mlxb_dequantize", [&] {
    return mx::dequantize(arr(w), arr(scales), opt(biases), group_size, bits, "affine", std::nullopt, to_mx(out),
                          scope_dev(s));
  });
}

mlxb_array *mlxb_einsum(mlxb_scope *s, const char *subscripts, const mlxb_array *const *xs, int n) {
  return guard(s, "mlxb_einsum", [&] {
    if (!subscripts) throw bridge_error("null subscripts");
    return mx::einsum(subscripts, to_arrays(xs, n), scope_dev(s));
  });
}

} /* extern "C" */
