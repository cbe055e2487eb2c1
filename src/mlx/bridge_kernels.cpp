/* Kernels of our own, written through MLX's custom-kernel API (bridge_internal.h's cuda_kernel_spec;
 * how they reach the GPU: bridge_kernel_cache.cpp). This file: the RMS norm of rows with its residual
 * add, the integer reductions ORT's CPU EP defines, the batched copy of a Run's outputs, and the
 * self-check that compiles every kernel for sample inputs. The attention kernels live in
 * bridge_kernels_attention.cpp, the quantized products in bridge_kernels_quant.cpp. */
#include "mlx/bridge_kernel_specs.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

using namespace mlxb_detail;

namespace {

/* RMS norm: a warp per row from this many rows, for rows of up to 32 * RMS_ROWS_MAX_PER values */
enum { RMS_ROWS_MIN = 16, RMS_ROWS_MAX_PER = 64 };

} // namespace

namespace mlxb_detail {

/* RMS norm of rows with the residual add: one block per row keeps the row's float32 values
 * v = x (+ skip) (+ bias) in a strided loop, sums v * v across the block (shuffles, then one
 * shared-memory slot per warp) and writes y = v * rsqrt(sum / H + eps) * gamma rounded once to
 * T, and the residual v rounded to T when asked. Rows are every axis but the last, whatever the
 * rank, so no reshape surrounds the launch; skip rows repeat every RS rows (a skip broadcast over
 * the batch). What SkipSimplifiedLayerNormalization and
 * SimplifiedLayerNormalization compute in float32, in one kernel instead of five (casts in and
 * out, the add, the norm). */
const char *rms_norm_source = R"(
  const int H = gamma_shape[0];
  int RS = 1; /* the skip's rows: every axis but its last */
  for (int i = 0; i + 1 < SKIP_RANK; i++) RS *= skip_shape[i];
  const int r = blockIdx.x;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const T* xr = x + (size_t)r * H;
  const T* sr = skip + (size_t)(r % RS) * H;
  auto value = [&](int i) {
    float v = static_cast<float>(xr[i]);
    if (HAS_SKIP) v += static_cast<float>(sr[i]);
    if (HAS_BIAS) v += static_cast<float>(bias[i]);
    return v;
  };
  float ss = 0.0f;
  for (int i = threadIdx.x; i < H; i += blockDim.x) {
    const float v = value(i);
    ss += v * v;
  }
  __shared__ float partial[32];
  for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
  if (lane == 0) partial[warp] = ss;
  __syncthreads();
  if (warp == 0) {
    ss = lane < warps ? partial[lane] : 0.0f;
    for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    if (lane == 0) partial[0] = ss;
  }
  __syncthreads();
  const float inv = rsqrtf(partial[0] / static_cast<float>(H) + eps[0]);
  for (int i = threadIdx.x; i < H; i += blockDim.x) {
    const float v = value(i);
    y[(size_t)r * H + i] = static_cast<T>(v * inv * static_cast<float>(gamma[i]));
    if (WRITE_SUM) sum[(size_t)r * H + i] = static_cast<T>(v);
  }
)";

const cuda_kernel_spec rms_norm_kernel = {
    "ort_ep_mlx_rms_norm", {"x", "skip", "bias", "gamma", "eps"}, {"y", "sum"}, rms_norm_source, "", true};

/* The same RMS norm with a warp per row, for many rows (a prompt): each lane keeps its PER values of
 * the row in registers, the sum of squares meets by shuffles, no block-wide barrier. A block per
 * row took 14 us a launch for 128 rows of 896 on the H100 (47 launches a prompt). */
const char *rms_rows_source = R"(
  const int H = gamma_shape[0], R = dims[0];
  int RS = 1; /* the skip's rows: every axis but its last */
  for (int i = 0; i + 1 < SKIP_RANK; i++) RS *= skip_shape[i];
  const int lane = threadIdx.x % 32;
  const long long r = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (r >= R) return;
  const T* xr = x + (size_t)r * H;
  const T* sr = skip + (size_t)(r % RS) * H;
  float vals[PER];
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < PER; j++) {
    const int i = lane + 32 * j;
    float v = 0.0f;
    if (i < H) {
      v = static_cast<float>(xr[i]);
      if (HAS_SKIP) v += static_cast<float>(sr[i]);
      if (HAS_BIAS) v += static_cast<float>(bias[i]);
    }
    vals[j] = v;
    ss += v * v;
  }
  for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
  const float inv = rsqrtf(ss / static_cast<float>(H) + eps[0]);
#pragma unroll
  for (int j = 0; j < PER; j++) {
    const int i = lane + 32 * j;
    if (i >= H) continue;
    y[(size_t)r * H + i] = static_cast<T>(vals[j] * inv * static_cast<float>(gamma[i]));
    if (WRITE_SUM) sum[(size_t)r * H + i] = static_cast<T>(vals[j]);
  }
)";

const cuda_kernel_spec rms_rows_kernel = {
    "ort_ep_mlx_rms_rows", {"x", "skip", "bias", "gamma", "eps", "dims"}, {"y", "sum"}, rms_rows_source, "", true};

/* Integer ReduceSum / ReduceMean as ORT's CPU EP computes them, on the GPU: each row of x [R, C]
 * (int32 or int64) summed in float64 (a warp per row: lanes take every 32nd element, then
 * shuffles), divided by C for the mean, and cast back saturating (overflow gives the type's
 * largest or smallest value, never a wrapped one). MLX has no float64 on the GPU, so without this
 * the float64 work runs on the CPU stream and every Run crosses streams (a decode step's
 * attention-mask ReduceSum did). */
const char *int_reduce_source = R"(
  const int R = x_shape[0], C = x_shape[1];
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= R) return;
  const T* xr = x + (size_t)row * C;
  double sum = 0.0;
  for (int c = lane; c < C; c += 32) sum += static_cast<double>(xr[c]);
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (lane != 0) return;
  if (MEAN) sum /= static_cast<double>(C);
  if (sizeof(T) == 8) {
    const double top = 9223372036854775808.0; /* 2^63 */
    out[row] = sum >= top ? static_cast<T>(0x7fffffffffffffffll) : sum <= -top ? static_cast<T>(-0x7fffffffffffffffll - 1)
                                                                               : static_cast<T>(sum);
  } else {
    out[row] = static_cast<T>(sum >= 2147483647.0 ? 2147483647.0 : sum <= -2147483648.0 ? -2147483648.0 : sum);
  }
)";

const cuda_kernel_spec int_reduce_kernel = {"ort_ep_mlx_int_reduce", {"x"}, {"out"}, int_reduce_source, "", true};

/* A range check on untrusted integers in one launch (bridge_safety.cpp's mlxb_range_violation): x's
 * n elements (row-major, any integer dtype T) against bounds = {lo, hi}: out = {1, the first value
 * outside [lo, hi)} or {0, 0}. One block; each thread finds the first offender of its stride, then
 * the block keeps the smallest index. Signed types compare as int64; unsigned ones as uint64, where
 * a bound below zero rules out nothing (lo) or everything (hi). Composed from MLX operations the
 * check is about eight of them, which MLX fuses into kernels that NVRTC compiles at their first use
 * on a machine (seconds each, one after another); this kernel compiles in a fraction of that. */
const char *range_check_source = R"(
  const long long n = x_shape[0];
  const long long lo = bounds[0], hi = bounds[1];
  long long first = n;
  for (long long i = threadIdx.x; i < n; i += blockDim.x) {
    bool bad;
    if (SIGNED) {
      const long long v = static_cast<long long>(x[i]);
      bad = (CHECK_LO && v < lo) || (CHECK_HI && v >= hi);
    } else {
      const unsigned long long v = static_cast<unsigned long long>(x[i]);
      bad = (CHECK_LO && lo > 0 && v < static_cast<unsigned long long>(lo)) ||
            (CHECK_HI && (hi <= 0 || v >= static_cast<unsigned long long>(hi)));
    }
    if (bad) { first = i; break; }
  }
  for (int off = 16; off > 0; off >>= 1) {
    const long long other = __shfl_xor_sync(0xffffffffu, first, off);
    first = other < first ? other : first;
  }
  __shared__ long long firsts[32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) firsts[warp] = first;
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < (int)(blockDim.x / 32); w++) first = firsts[w] < first ? firsts[w] : first;
  out[0] = first < n ? 1 : 0;
  out[1] = first < n ? static_cast<long long>(x[first]) : 0;
)";

const cuda_kernel_spec range_check_kernel = {"ort_ep_mlx_range_check", {"x", "bounds"}, {"out"}, range_check_source,
                                             "", true};

/* The batched copy-out of bridge_device.cpp (its descriptors' layout is batch_copies_abi there). */
const char *const copy_batch_source = R"(
struct ep_copy {
  const unsigned char* from; unsigned char* to;
  unsigned long long width, height, src_pitch, dst_pitch, zero_tail;
};
struct ep_copies { ep_copy c[64]; int n, pad_; };
extern "C" __global__ void ort_ep_mlx_copy_batch(const ep_copies b) {
  if ((int)blockIdx.y >= b.n) return;
  const ep_copy c = b.c[blockIdx.y];
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  const unsigned long long first = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  /* a row of the destination: the source row's width bytes, then zeros up to its pitch with zero_tail */
  const unsigned long long row_out = c.zero_tail ? c.dst_pitch : c.width;
  const unsigned long long bits = c.width | c.src_pitch | c.dst_pitch | (unsigned long long)c.from | (unsigned long long)c.to;
  if ((bits & 15ull) == 0) {
    const unsigned long long in_row = c.width / 16, per_row = row_out / 16, total = per_row * c.height;
    for (unsigned long long i = first; i < total; i += stride) {
      const unsigned long long r = i / per_row, k = i % per_row;
      reinterpret_cast<uint4*>(c.to + r * c.dst_pitch)[k] =
          k < in_row ? reinterpret_cast<const uint4*>(c.from + r * c.src_pitch)[k] : make_uint4(0u, 0u, 0u, 0u);
    }
    return;
  }
  const unsigned long long total = row_out * c.height;
  for (unsigned long long i = first; i < total; i += stride) {
    const unsigned long long r = i / row_out, k = i % row_out;
    c.to[r * c.dst_pitch + k] = k < c.width ? c.from[r * c.src_pitch + k] : (unsigned char)0;
  }
}
)";

} // namespace mlxb_detail

bool mlxb_rms_norm_fused_available(const mlxb_scope *s, mlxb_dtype t) {
  if (!s || (t != MLXB_F32 && t != MLXB_F16 && t != MLXB_BF16)) return false;
  return is_cuda_gpu(s) || (is_cpu_scope(s) && cpu_decode_takes(s, to_mx(t)));
}

int mlxb_rms_norm_fused(mlxb_scope *s, const mlxb_array *x, const mlxb_array *skip, const mlxb_array *bias,
                        const mlxb_array *gamma, float eps, bool want_sum, mlxb_array **y, mlxb_array **sum) {
  if (y) *y = nullptr;
  if (sum) *sum = nullptr;
  return guard_status(s, "mlxb_rms_norm_fused", [&] {
    if (!y || (want_sum && !sum) || !x || !gamma) throw null_arg{};
    const mx::array &xa = arr(x), &ga = arr(gamma);
    if (!mlxb_rms_norm_fused_available(s, from_mx(xa.dtype())))
      throw bridge_error("fused RMS norm: not available for this dtype or device");
    if (xa.ndim() < 1 || ga.ndim() != 1 || ga.shape(0) != xa.shape(-1) || xa.size() == 0)
      throw bridge_error("fused RMS norm takes x [..., H] and gamma [H]");
    int h = xa.shape(-1);
    int64_t rows = static_cast<int64_t>(xa.size()) / h;
    mx::Dtype t = xa.dtype();
    auto dev = scope_dev(s);
    mx::array sk = skip ? arr(skip) : xa, bi = bias ? arr(bias) : ga;
    int64_t skip_rows = sk.size() / h;
    if (sk.ndim() < 1 || sk.shape(-1) != h || skip_rows < 1 || rows % skip_rows || bi.ndim() != 1 || bi.shape(0) != h)
      throw bridge_error("fused RMS norm: skip [..., H] of R rows or a divisor of R, and bias [H]");
    if (is_cpu_scope(s)) {
      auto [yy, ss] = cpu_rms_norm(s, xa, skip ? std::optional<mx::array>(mx::astype(sk, t, dev)) : std::nullopt,
                                   bias ? std::optional<mx::array>(mx::astype(bi, t, dev)) : std::nullopt,
                                   mx::astype(ga, t, dev), eps, want_sum);
      *y = scope_keep(s, yy);
      if (want_sum) *sum = scope_keep(s, ss);
      return;
    }
    mx::array skip_t = mx::astype(sk, t, dev), bias_t = mx::astype(bi, t, dev), gamma_t = mx::astype(ga, t, dev);
    mx::array eps_a = mx::array({eps}, {1}, mx::float32);
    cuda_template_args targs = {{"T", t}, {"HAS_SKIP", skip != nullptr}, {"HAS_BIAS", bias != nullptr},
                                {"WRITE_SUM", want_sum}, {"SKIP_RANK", static_cast<int>(sk.ndim())}};
    uint32_t unused = want_sum ? 0u : 1u << 1; /* without WRITE_SUM the kernel never writes sum */
    mx::Shape sum_shape = want_sum ? xa.shape() : mx::Shape{1};
    if (rows >= RMS_ROWS_MIN && h <= 32 * RMS_ROWS_MAX_PER) {
      /* a warp per row, two rows a block: a prompt's 128 rows spread over 64 multiprocessors (eight
       * rows a block, 16 of them, took 15 us a launch on the H100) */
      enum { ROWS_PER_BLOCK = 2, THREADS = 32 * ROWS_PER_BLOCK };
      int per = (h + 31) / 32;
      int64_t blocks = (rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
      if (blocks * THREADS > std::numeric_limits<int>::max()) throw bridge_error("fused RMS norm: too many rows");
      targs.emplace_back("PER", per);
      auto outs = run_cuda_kernel(rms_rows_kernel,
          {xa, skip_t, bias_t, gamma_t, eps_a, mx::array({static_cast<int>(rows)}, {1}, mx::int32)},
          {xa.shape(), sum_shape}, {t, t}, {static_cast<int>(blocks * THREADS), 1, 1}, {THREADS, 1, 1}, targs, s,
          unused);
      *y = scope_keep(s, outs.at(0));
      if (want_sum) *sum = scope_keep(s, outs.at(1));
      return;
    }
    /* a thread per element up to a full block: one row (a decode step) is one block, and its loads
     * are all in flight at once rather than a few per thread in turn */
    int threads = std::min(1024, (h + 31) / 32 * 32);
    if (rows > std::numeric_limits<int>::max() / threads) throw bridge_error("fused RMS norm: too many rows");
    auto outs = run_cuda_kernel(rms_norm_kernel, {xa, skip_t, bias_t, gamma_t, eps_a}, {xa.shape(), sum_shape}, {t, t},
                                {static_cast<int>(rows * threads), 1, 1}, {threads, 1, 1}, targs, s, unused);
    *y = scope_keep(s, outs.at(0));
    if (want_sum) *sum = scope_keep(s, outs.at(1));
  });
}

bool mlxb_int_reduce_available(const mlxb_scope *s, mlxb_dtype t) {
  return s && is_cuda_gpu(s) && (t == MLXB_I32 || t == MLXB_I64);
}

mlxb_array *mlxb_int_reduce_rows(mlxb_scope *s, const mlxb_array *x, bool mean) {
  return guard(s, "mlxb_int_reduce_rows", [&] {
    const mx::array &xa = arr(x);
    if (!mlxb_int_reduce_available(s, from_mx(xa.dtype())))
      throw bridge_error("integer reduction kernel: not available for this dtype or device");
    if (xa.ndim() != 2 || xa.shape(1) < 1) throw bridge_error("integer reduction kernel takes x [R, C] with C >= 1");
    enum { THREADS = 256, ROWS_PER_BLOCK = THREADS / 32 };
    int64_t rows = xa.shape(0);
    if (rows == 0) return mx::zeros({0}, xa.dtype(), scope_dev(s));
    int64_t grid = (rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK * THREADS;
    if (grid > std::numeric_limits<int>::max()) throw bridge_error("integer reduction kernel: too many rows");
    /* MLX's CUDA allocator puts buffers of at most 8 bytes in a pool advised read-mostly, so a GPU
     * write there invalidates the host's copy of the page every Run: a decode step's mask
     * reduction (one int64) took 147 us of device time on the H100. Rows the kernel never writes
     * keep the buffer out of the pool; the result is a view of the written ones. */
    int64_t out_rows = std::max<int64_t>(rows, 8 / static_cast<int64_t>(xa.itemsize()) + 1);
    mx::array out = run_cuda_kernel(int_reduce_kernel, {xa}, {{static_cast<int>(out_rows)}}, {xa.dtype()},
                                    {static_cast<int>(grid), 1, 1}, {THREADS, 1, 1},
                                    {{"T", xa.dtype()}, {"MEAN", mean}}, s)
                        .at(0);
    return out_rows == rows ? out : mx::slice(out, {0}, {static_cast<int>(rows)}, scope_dev(s));
  });
}

/* Every kernel's precompiled form, for sample inputs of the dtypes and ranks its callers pass. */
int mlxb_cuda_kernels_selfcheck(char *report, size_t len) {
  if (report && len) report[0] = '\0';
  try {
    auto z = [](mx::Shape shape, mx::Dtype t) { return mx::zeros(shape, t, mx::Device(mx::Device::cpu)); };
    const mx::Dtype h = mx::float16, f = mx::float32, b = mx::bfloat16, u = mx::uint32, i64 = mx::int64;
    struct sample {
      const cuda_kernel_spec *k;
      std::vector<mx::array> inputs;
      std::vector<mx::Dtype> outputs;
      cuda_template_args targs;
    };
    std::vector<mx::array> qkv = {z({1, 1, 896}, h)};
    for (int set = 0; set < MLXB_QGEMV_MAX_SETS; set++)
      qkv.insert(qkv.end(), {z({128, 112}, u), z({128, 28}, f), z({128, 28}, f)});
    qkv.insert(qkv.end(), {z({128}, h), z({1, 896}, h), z({128}, h)});
    std::vector<mx::array> qkv_normed = qkv;
    qkv.insert(qkv.end(), {z({1, 1, 896}, h), z({1, 1, 896}, h), z({1, 1, 896}, h), z({1, 1, 896}, h)});
    qkv_normed.insert(qkv_normed.end(), {z({1, 1, 896}, h), z({896}, h), z({896}, h), z({1}, f)});
    std::vector<mx::array> cache = {z({1, 2, 1024, 64}, b), z({1, 2, 1024, 64}, b), z({1, 2, 1, 64}, b),
                                    z({1, 2, 1, 64}, b), z({1}, i64), z({1}, i64), z({4096, 32}, b), z({4096, 32}, b)};
    std::vector<mx::array> past = {z({1, 2, 255, 64}, h), z({1, 2, 255, 64}, h), z({1, 2, 1, 64}, h),
                                   z({1, 2, 1, 64}, h), z({1}, i64), z({5}, mx::int32), z({1}, i64),
                                   z({4096, 32}, h), z({4096, 32}, h)};
    std::vector<mx::array> prompt = {z({1, 2, 1, 64}, h), z({1, 2, 1, 64}, h), z({1, 128, 128}, h),
                                     z({1, 128, 128}, h), z({1}, i64), z({5}, mx::int32), z({1, 128}, i64),
                                     z({4096, 32}, h), z({4096, 32}, h)};
    std::vector<mx::array> prompt_attn = {z({1, 128, 896}, h), z({1, 2, 128, 64}, h), z({1, 2, 128, 64}, h),
                                          z({1}, i64), z({2}, f), z({1, 128}, i64), z({4096, 32}, h),
                                          z({4096, 32}, h), z({1}, mx::int32)};
    std::vector<mx::array> attn = {z({1, 1, 896}, h), z({1, 2, 256, 64}, h), z({1, 2, 256, 64}, h), z({1}, i64),
                                   z({2}, f), z({1}, i64), z({4096, 32}, h), z({4096, 32}, h), z({1}, mx::int32)};
    std::vector<mx::array> norm = {z({1, 1, 896}, h), z({1, 1, 896}, h), z({896}, h), z({896}, h), z({1}, f)};
    std::vector<mx::array> step = {z({1, 1, 896}, h), z({1, 2, 255, 64}, h), z({1, 2, 255, 64}, h), z({1, 1, 128}, h),
                                   z({1, 1, 128}, h), z({1}, mx::int32), z({2}, f), z({1}, mx::int32), z({4096, 32}, h),
                                   z({4096, 32}, h), z({1}, mx::int32)};
    std::vector<mx::array> qgemm_one = {z({80, 896}, h)}, qgemm_three = {z({80, 896}, h)}, qgemm_eight = {z({80, 896}, h)};
    for (int set = 0; set < MLXB_QGEMV_MAX_SETS; set++) {
      qgemm_one.insert(qgemm_one.end(), {z({128, 112}, u), z({128, 28}, f), z({128, 28}, f)});
      qgemm_three.insert(qgemm_three.end(), {z({128, 112}, u), z({128, 28}, f), z({128, 28}, f)});
      qgemm_eight.insert(qgemm_eight.end(), {z({128, 224}, u), z({128, 7}, f), z({128, 7}, f)});
    }
    for (auto *v : {&qgemm_one, &qgemm_three, &qgemm_eight}) v->insert(v->end(), {z({128}, h), z({128}, h), z({128}, h), z({128}, h)});
    std::vector<mx::array> rms_rows = {z({1, 128, 896}, h), z({1, 128, 896}, h), z({896}, h), z({896}, h), z({1}, f),
                                       z({1}, mx::int32)};
    std::vector<sample> samples = {
        {&qgemv_kernel, qkv, {h, h, h, h, h, h},
         {{"T", h}, {"BITS", 4}, {"GROUP", 32}, {"WARPS", 4}, {"LANES", 8}, {"SETS", 3}, {"BIASED", 5},
          {"SWIGLU", false}, {"NORM", false}, {"NORM_K", 1}, {"HAS_SKIP", false}, {"HAS_NBIAS", false},
          {"WRITE_SUM", false}, {"SKIP_RANK", 1}}},
        {&qgemv_kernel, qkv, {h, h, h, h, h, h},
         {{"T", h}, {"BITS", 4}, {"GROUP", 32}, {"WARPS", 4}, {"LANES", 8}, {"SETS", 2}, {"BIASED", 0},
          {"SWIGLU", true}, {"NORM", false}, {"NORM_K", 1}, {"HAS_SKIP", false}, {"HAS_NBIAS", false},
          {"WRITE_SUM", false}, {"SKIP_RANK", 1}}},
        {&qgemv_kernel, qkv_normed, {h, h, h, h, h, h},
         {{"T", h}, {"BITS", 4}, {"GROUP", 32}, {"WARPS", 4}, {"LANES", 8}, {"SETS", 2}, {"BIASED", 0},
          {"SWIGLU", true}, {"NORM", true}, {"NORM_K", 896}, {"HAS_SKIP", true}, {"HAS_NBIAS", false},
          {"WRITE_SUM", true}, {"SKIP_RANK", 3}}},
        {&rms_norm_kernel, norm, {h, h},
         {{"T", h}, {"HAS_SKIP", true}, {"HAS_BIAS", false}, {"WRITE_SUM", true}, {"SKIP_RANK", 3}}},
        {&rms_rows_kernel, rms_rows, {h, h},
         {{"T", h}, {"HAS_SKIP", true}, {"HAS_BIAS", false}, {"WRITE_SUM", true}, {"SKIP_RANK", 3}, {"PER", 28}}},
        {&decode_attention_kernel, attn, {h, f, f, f},
         {{"T", h}, {"HEAD", 64}, {"HQ", 14}, {"HKV", 2}, {"WARPS", 8}, {"WINDOW", 0}, {"ROT", 64}, {"INTER", false},
          {"LEN_ADD", 1}, {"POS_ADD", 0}, {"PARTS", 1}, {"EARLY", true}}},
        {&decode_attention_kernel, attn, {h, f, f, f},
         {{"T", h}, {"HEAD", 64}, {"HQ", 14}, {"HKV", 2}, {"WARPS", 8}, {"WINDOW", 0}, {"ROT", 64}, {"INTER", false},
          {"LEN_ADD", 1}, {"POS_ADD", 0}, {"PARTS", 8}, {"EARLY", false}}},
        /* the widest block (32 warps) at the largest head: its registers must fit 1024 threads */
        {&decode_attention_kernel, attn, {h, f, f, f},
         {{"T", h}, {"HEAD", 256}, {"HQ", 14}, {"HKV", 2}, {"WARPS", 32}, {"WINDOW", 0}, {"ROT", 64}, {"INTER", false},
          {"LEN_ADD", 1}, {"POS_ADD", 0}, {"PARTS", 1}, {"EARLY", true}}},
        {&rows_attention_kernel, prompt_attn, {h},
         {{"T", h}, {"HEAD", 64}, {"HQ", 14}, {"HKV", 2}, {"WARPS", 8}, {"WINDOW", 0}, {"ROT", 64}, {"INTER", false},
          {"LEN_ADD", 1}, {"POS_ADD", 0}, {"FIRST", true}, {"CAUSAL", true}, {"WIN_BOUND", false},
          {"POS_ROWS", true}}},
        {&decode_merge_kernel, {z({112}, f), z({112}, f), z({112, 64}, f)}, {h}, {{"T", h}, {"HEAD", 64}, {"PARTS", 8}}},
        {&decode_step_kernel, step, {h, h, h},
         {{"T", h}, {"HEAD", 64}, {"HQ", 14}, {"HKV", 2}, {"WARPS", 8}, {"WINDOW", 0}, {"ROT", 64}, {"INTER", false},
          {"LEN_ADD", 1}, {"POS_ADD", 0}, {"IN_PLACE", false}, {"EARLY", true}}},
        {&decode_step_inplace_kernel, step, {h, h, h},
         {{"T", h}, {"HEAD", 64}, {"HQ", 14}, {"HKV", 2}, {"WARPS", 8}, {"WINDOW", 0}, {"ROT", 64}, {"INTER", true},
          {"LEN_ADD", 1}, {"POS_ADD", 0}, {"IN_PLACE", true}, {"EARLY", false}}},
        {&kv_append_kernel, past, {h, h},
         {{"T", h}, {"HEAD", 64}, {"ROT", 64}, {"INTER", false}, {"AT_ADD", 0}, {"POS_ADD", 0},
          {"AT_ZERO", false}, {"POS_ROWS", false}}},
        {&kv_append_kernel, prompt, {h, h},
         {{"T", h}, {"HEAD", 64}, {"ROT", 64}, {"INTER", false}, {"AT_ADD", 0}, {"POS_ADD", 0},
          {"AT_ZERO", true}, {"POS_ROWS", true}}},
        {&dequant_f32_kernel, {z({128, 112}, u), z({128, 28}, f), z({128, 28}, f)}, {f}, {{"BITS", 4}, {"GROUP", 32}}},
        {&dequant_f32_kernel, {z({128, 224}, u), z({128, 7}, f), z({128, 7}, f)}, {f}, {{"BITS", 8}, {"GROUP", 128}}},
        {&qgemm_split_kernel, qgemm_one, {h, h, h, f},
         {{"BITS", 4}, {"GROUP", 32}, {"HAS_BIAS", true}, {"POST", 1}, {"SETS", 1}, {"BM", 64}, {"AFFINE", false}}},
        {&qgemm_split_kernel, qgemm_one, {h, h, h, f},
         {{"BITS", 4}, {"GROUP", 32}, {"HAS_BIAS", true}, {"POST", 1}, {"SETS", 1}, {"BM", 64}, {"AFFINE", true}}},
        {&qgemm_split_kernel, qgemm_three, {h, h, h, f},
         {{"BITS", 4}, {"GROUP", 32}, {"HAS_BIAS", false}, {"POST", 7}, {"SETS", 3}, {"BM", 128}, {"AFFINE", true}}},
        {&qgemm_split_kernel, qgemm_eight, {h, h, h, f},
         {{"BITS", 8}, {"GROUP", 128}, {"HAS_BIAS", false}, {"POST", 0}, {"SETS", 2}, {"BM", 128}, {"AFFINE", false}}},
        {&qgemm_reduce_kernel, {z({4, 80, 384}, f), z({128}, h), z({128}, h), z({128}, h), z({128}, h), z({3}, mx::int32)},
         {h, h, h}, {{"HAS_BIAS", false}, {"POST", 5}}},
        {&int_reduce_kernel, {z({2, 4096}, i64)}, {i64}, {{"T", i64}, {"MEAN", false}}},
        {&gather_bq_kernel, {z({151936, 448}, mx::uint8), z({1, 1}, i64), z({151936, 28}, h), z({151936, 14}, mx::uint8),
                             z({7}, mx::int32)},
         {h}, {{"S", h}, {"BITS", 4}, {"BLOCK", 32}, {"HAS_ZP", true}}},
        {&int_reduce_kernel, {z({3, 7}, mx::int32)}, {mx::int32}, {{"T", mx::int32}, {"MEAN", true}}},
        {&range_check_kernel, {z({128}, i64), z({2}, i64)}, {i64},
         {{"T", i64}, {"SIGNED", true}, {"CHECK_LO", true}, {"CHECK_HI", true}}},
        {&range_check_kernel, {z({7}, mx::uint32), z({2}, i64)}, {i64},
         {{"T", mx::uint32}, {"SIGNED", false}, {"CHECK_LO", false}, {"CHECK_HI", true}}},
        {&kv_write_kernel, cache, {mx::int32},
         {{"T", b}, {"HEAD", 64}, {"ROT", 64}, {"INTER", true}, {"AT_ADD", 0}, {"POS_ADD", 0}}},
    };
    std::string copy_error;
    if (int rc = check_cuda_source("ort_ep_mlx_copy_batch", copy_batch_source, copy_error)) {
      if (report && len) std::snprintf(report, len, "%s", rc > 0 ? "no NVRTC or CUDA headers" : copy_error.c_str());
      return rc;
    }
    for (const sample &x : samples) {
      std::string error;
      int rc = check_cuda_kernel_source(*x.k, x.inputs, x.outputs, x.targs, error);
      if (rc) {
        if (report && len) std::snprintf(report, len, "%s", rc > 0 ? "no NVRTC or CUDA headers" : error.c_str());
        return rc;
      }
    }
    return 0;
  } catch (const std::exception &e) {
    if (report && len) std::snprintf(report, len, "%s", e.what());
    return -1;
  } catch (...) {
    return -1;
  }
}
