/* Kernels of our own, through MLX's custom-kernel API (compiled by MLX at first use, cached on
 * disk with MLX's other JIT kernels). Today: one-token decode attention on MLX's CUDA backend.
 *
 * Decode attention: one query row per (sequence, head) against a KV cache of S rows of which
 * the first len[b] are visible (the rest padding or rows of later steps), optionally only the
 * last `window` of them, optionally with scores soft-capped. One thread block per (sequence,
 * query head); its warps take keys round-robin, each keeping an online softmax (running max,
 * running sum, weighted value sum) in float32; the warps' partial results are merged at the end.
 * Everything is float32 inside, the result is rounded once to the query's dtype: what the composed
 * lowering computes, in one kernel that reads each cache row once. The same design maps onto
 * Metal's metal_kernel (simdgroups for warps); that port is not written. */
#include "mlx/bridge_internal.h"

#include "mlx/fast.h"

using namespace mlxb_detail;

namespace {

enum { DECODE_WARPS = 8, DECODE_MAX_HEAD = 256 };

const char *decode_attention_source = R"(
  constexpr int EPL = (HEAD + 31) / 32;
  const int bh = blockIdx.x;
  const int b = bh / HQ, h = bh % HQ, kvh = h / (HQ / HKV);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float scale = params[0], cap = params[1];
  const int S = k_shape[2];
  int len = lens[b];
  len = len < 0 ? 0 : (len > S ? S : len);
  const int start = WINDOW > 0 && len > WINDOW ? len - WINDOW : 0;
  const T* qp = q + (size_t)bh * HEAD;
  const T* kp = k + (size_t)(b * HKV + kvh) * S * HEAD;
  const T* vp = v + (size_t)(b * HKV + kvh) * S * HEAD;
  float qv[EPL], acc[EPL];
  for (int i = 0; i < EPL; i++) {
    int d = lane + 32 * i;
    qv[i] = d < HEAD ? static_cast<float>(qp[d]) : 0.0f;
    acc[i] = 0.0f;
  }
  const float neg_inf = -__int_as_float(0x7f800000);
  float m = neg_inf, l = 0.0f;
  for (int t = start + warp; t < len; t += WARPS) {
    float s = 0.0f;
    for (int i = 0; i < EPL; i++) {
      int d = lane + 32 * i;
      if (d < HEAD) s += qv[i] * static_cast<float>(kp[(size_t)t * HEAD + d]);
    }
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    s *= scale;
    if (cap > 0.0f) s = cap * tanhf(s / cap);
    float mn = fmaxf(m, s);
    float corr = expf(m - mn), p = expf(s - mn);
    l = l * corr + p;
    for (int i = 0; i < EPL; i++) {
      int d = lane + 32 * i;
      if (d < HEAD) acc[i] = acc[i] * corr + p * static_cast<float>(vp[(size_t)t * HEAD + d]);
    }
    m = mn;
  }
  __shared__ float sm[WARPS], sl[WARPS], sacc[WARPS][HEAD];
  if (lane == 0) { sm[warp] = m; sl[warp] = l; }
  for (int i = 0; i < EPL; i++) {
    int d = lane + 32 * i;
    if (d < HEAD) sacc[warp][d] = acc[i];
  }
  __syncthreads();
  float big = neg_inf;
  for (int w = 0; w < WARPS; w++) big = fmaxf(big, sm[w]);
  float total = 0.0f;
  for (int w = 0; w < WARPS; w++) total += sm[w] == neg_inf ? 0.0f : sl[w] * expf(sm[w] - big);
  for (int d = threadIdx.x; d < HEAD; d += blockDim.x) {
    float o = 0.0f;
    for (int w = 0; w < WARPS; w++) o += sm[w] == neg_inf ? 0.0f : sacc[w][d] * expf(sm[w] - big);
    out[(size_t)bh * HEAD + d] = static_cast<T>(total > 0.0f ? o / total : 0.0f);
  }
)";

const mx::fast::CustomKernelFunction &decode_attention_kernel() {
  static const mx::fast::CustomKernelFunction kernel = mx::fast::cuda_kernel(
      "ort_ep_mlx_decode_attention", {"q", "k", "v", "lens", "params"}, {"out"}, decode_attention_source, "", true, 0);
  return kernel;
}

bool is_cuda_gpu(const mlxb_scope *s) {
  return !s->force_cpu && s->device == mx::Device(mx::Device::gpu) && !mx::metal::is_available();
}

} // namespace

bool mlxb_decode_attention_available(const mlxb_scope *s, mlxb_dtype t, int64_t head_size) {
  if (!s || !is_cuda_gpu(s)) return false;
  bool float_type = t == MLXB_F32 || t == MLXB_F16 || t == MLXB_BF16;
  return float_type && head_size > 0 && head_size <= DECODE_MAX_HEAD;
}

mlxb_array *mlxb_decode_attention(mlxb_scope *s, const mlxb_array *q, const mlxb_array *k, const mlxb_array *v,
                                  const mlxb_array *lengths, float scale, float softcap, int64_t window) {
  return guard(s, "mlxb_decode_attention", [&] {
    const mx::array &qa = arr(q), &ka = arr(k), &va = arr(v), &la = arr(lengths);
    if (qa.ndim() != 4 || ka.ndim() != 4 || va.ndim() != 4 || qa.shape(2) != 1)
      throw bridge_error("decode attention takes q [B, Hq, 1, D] and k, v [B, Hkv, S, D]");
    int b = qa.shape(0), hq = qa.shape(1), d = qa.shape(3), hkv = ka.shape(1), len = ka.shape(2);
    if (ka.shape(0) != b || va.shape(0) != b || va.shape(1) != hkv || va.shape(2) != len || ka.shape(3) != d ||
        va.shape(3) != d || hkv <= 0 || hq % hkv || d > DECODE_MAX_HEAD || la.size() != static_cast<size_t>(b))
      throw bridge_error("decode attention: shapes do not fit");
    if (!is_cuda_gpu(s)) throw bridge_error("decode attention runs on MLX's CUDA backend only");
    mx::Dtype t = qa.dtype();
    auto dev = scope_dev(s);
    mx::array kk = mx::astype(ka, t, dev), vv = mx::astype(va, t, dev);
    mx::array lens = mx::astype(mx::reshape(la, {b}, dev), mx::int32, dev);
    mx::array params = mx::array({scale, softcap > 0 ? softcap : 0.0f}, {2}, mx::float32);
    int threads = DECODE_WARPS * 32;
    auto outs = decode_attention_kernel()(
        {mx::reshape(qa, {b * hq * d}, dev), kk, vv, lens, params}, {qa.shape()}, {t},
        {b * hq * threads, 1, 1}, {threads, 1, 1},
        {{"T", t}, {"HEAD", d}, {"HQ", hq}, {"HKV", hkv}, {"WARPS", static_cast<int>(DECODE_WARPS)},
         {"WINDOW", static_cast<int>(window > 0 && window < len ? window : 0)}},
        std::nullopt, false, dev);
    return outs.at(0);
  });
}
