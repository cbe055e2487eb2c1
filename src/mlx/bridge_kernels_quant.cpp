/* Quantized products of our own on MLX's CUDA backend (their launch: bridge_kernel_cache.cpp):
 * MatMulNBits for a few rows (the GEMV, its weight sets, the gated MLP, optionally an RMS norm in
 * the launch), for many rows on the tensor cores (the GEMM on each weight's two exact float16
 * halves and its split-K reduction), the float32 dequantization, and GatherBlockQuantized (the
 * quantized embedding). The GEMV reads the activations in their own dtype and writes the result in
 * it, so the float32 casts around MLX's float32 quantized matmul (which is exact; its float16 form
 * accumulates in float16) leave the graph. */
#include "mlx/bridge_kernel_specs.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

using namespace mlxb_detail;

namespace mlxb_detail {

/* LANES lanes per (row m, output n), LANES a power of two up to a warp (chosen from the row length:
 * short rows take fewer lanes, so a lane reads several chunks and loads stay in flight): each lane
 * walks weight row n in 16-byte chunks (four packed words) and the matching activations in 16-byte
 * loads, turns each value into float32 exactly (the bits under an exponent of 2^23), and keeps
 * sum(x * q) and sum(x) per chunk, so a chunk inside one quantization group costs one scale and one
 * bias: scale * sum(x * q) + bias * sum(x), the float32 sum of x * (scale * q + bias) reordered.
 * The lanes' sums meet by shuffles and the result is rounded once to T. A row whose start is not
 * 16-byte aligned (a view) takes the word-at-a-time loop. Up to SETS = 3 weight sets of one K
 * (sibling projections of one input: Q, K and V) share the launch, rows numbered across the sets,
 * each set writing its own output; a set may add a bias [N] to its rounded result (BIASED, one
 * bit per set) and round again: a following bias Add node's arithmetic, in the same launch. With
 * SWIGLU, two sets of one N (gate, up) are computed row by row side by side, and the launch also
 * writes Sigmoid(gate), gate * Sigmoid(gate) and that times up, each rounded to T: a gated MLP's
 * activation nodes, in the same launch. */
const char *qgemv_header = R"(
// 8 consecutive activations as float32, read with 16-byte loads (p 16-byte aligned).
template <typename T>
__device__ __forceinline__ void ort_ep_mlx_load8(const T* p, float* f) {
  constexpr int LOADS = (8 * sizeof(T) + 15) / 16;
  uint4 raw[LOADS];
#pragma unroll
  for (int i = 0; i < LOADS; i++) raw[i] = reinterpret_cast<const uint4*>(p)[i];
  const T* v = reinterpret_cast<const T*>(raw);
#pragma unroll
  for (int j = 0; j < 8; j++) f[j] = static_cast<float>(v[j]);
}
)";

const char *qgemv_source = R"(
  constexpr int VPW = 32 / BITS;
  constexpr unsigned MASK = (1u << BITS) - 1u;
  constexpr int VPC = 4 * VPW;
  constexpr bool CHUNK_IN_GROUP = GROUP % VPC == 0;
  const int N0 = w0_shape[0], WORDS = w0_shape[1], G = scales0_shape[1];
  const int N1 = SETS > 1 ? w1_shape[0] : 0, N2 = SETS > 2 ? w2_shape[0] : 0;
  const int K = WORDS * VPW;
  const int lane = threadIdx.x % LANES;
  const int row = blockIdx.x * (WARPS * 32 / LANES) + threadIdx.x / LANES;
  const int m = blockIdx.y;
  const T* xr = x + (size_t)m * K;
  // NORM: x is an RMS norm's input and every block normalizes row m itself into shared memory, as
  // rms_norm_source computes it (v = x + skip + nbias in float32, v * rsqrt(mean(v^2) + eps) *
  // gamma rounded once to T), so the norm node needs no launch of its own; the blocks of column 0
  // write the residual v rounded to T (WRITE_SUM). NORM_K is K (1 without NORM).
  __shared__ __align__(16) T xn[NORM_K];
  __shared__ float norm_part[32];
  if (NORM) {
    int RS = 1; /* the skip's rows: every axis but its last */
    for (int i = 0; i + 1 < SKIP_RANK; i++) RS *= skip_shape[i];
    const T* sr0 = skip + (size_t)(m % RS) * K;
    auto value = [&](int i) {
      float v = static_cast<float>(xr[i]);
      if (HAS_SKIP) v += static_cast<float>(sr0[i]);
      if (HAS_NBIAS) v += static_cast<float>(nbias[i]);
      return v;
    };
    float ss = 0.0f;
    for (int i = threadIdx.x; i < K; i += blockDim.x) {
      const float v = value(i);
      ss += v * v;
    }
    for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    if (threadIdx.x % 32 == 0) norm_part[threadIdx.x / 32] = ss;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < (int)(blockDim.x / 32); w++) total += norm_part[w];
    const float inv = rsqrtf(total / static_cast<float>(K) + static_cast<float>(eps[0]));
    for (int i = threadIdx.x; i < K; i += blockDim.x) {
      const float v = value(i);
      xn[i] = static_cast<T>(v * inv * static_cast<float>(gamma[i]));
      if (WRITE_SUM && blockIdx.x == 0) nsum[(size_t)m * K + i] = static_cast<T>(v);
    }
    __syncthreads();
    xr = xn;
  }
  // x row m times weight row nn (live rows; the others take part in the shuffles only), summed
  // over the LANES lanes of the row
  auto dot = [&](const uint32_t* w, const float* scales, const float* biases, int nn, bool live) {
    const uint32_t* wr = w + (size_t)nn * WORDS;
    const float* sr = scales + (size_t)nn * G;
    const float* br = biases + (size_t)nn * G;
    float sum = 0.0f;
    const bool aligned = ((reinterpret_cast<unsigned long long>(wr) | reinterpret_cast<unsigned long long>(xr)) & 15ull) == 0;
    const int chunks = live && aligned ? WORDS / 4 : 0;
#pragma unroll 2
    for (int c = lane; c < chunks; c += LANES) {
      const uint4 q4 = reinterpret_cast<const uint4*>(wr)[c];
      const uint32_t words[4] = {q4.x, q4.y, q4.z, q4.w};
      float acc = 0.0f, xs = 0.0f;
      float part = 0.0f;
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const int k0 = (4 * c + i) * VPW;
        float xf[VPW];
        if constexpr (VPW % 8 == 0) {
          for (int j = 0; j < VPW; j += 8) ort_ep_mlx_load8(xr + k0 + j, xf + j);
        } else {
          for (int j = 0; j < VPW; j++) xf[j] = static_cast<float>(xr[k0 + j]);
        }
        float a = 0.0f, s = 0.0f;
#pragma unroll
        for (int j = 0; j < VPW; j++) {
          const float q = __uint_as_float(((words[i] >> (j * BITS)) & MASK) | 0x4B000000u) - 8388608.0f;
          a = fmaf(xf[j], q, a);
          s += xf[j];
        }
        if (CHUNK_IN_GROUP) {
          acc += a; xs += s;
        } else {
          part = fmaf(sr[k0 / GROUP], a, fmaf(br[k0 / GROUP], s, part));
        }
      }
      if (CHUNK_IN_GROUP) {
        const int g = (4 * c * VPW) / GROUP;
        sum += fmaf(sr[g], acc, br[g] * xs) + part;
      } else {
        sum += part;
      }
    }
    if (live) {
      for (int i = 4 * chunks + lane; i < WORDS; i += LANES) {
        const int k0 = i * VPW;
        const float sc = sr[k0 / GROUP], bi = br[k0 / GROUP];
        float part = 0.0f;
#pragma unroll
        for (int j = 0; j < VPW; j++) {
          const float q = static_cast<float>((wr[i] >> (j * BITS)) & MASK);
          part = fmaf(static_cast<float>(xr[k0 + j]), fmaf(sc, q, bi), part);
        }
        sum += part;
      }
    }
#pragma unroll
    for (int off = LANES / 2; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    return sum;
  };
  // the rounded result of set `set`, its bias added and rounded again where BIASED says so
  auto finish = [&](float sum, const T* bias, int set, int nn) {
    T y = static_cast<T>(sum);
    if ((BIASED >> set) & 1) y = static_cast<T>(static_cast<float>(y) + static_cast<float>(bias[nn]));
    return y;
  };
  if (SWIGLU) {
    // gate (set 0) and up (set 1) rows nn side by side: Sigmoid(gate), gate * that, and that * up,
    // each rounded to T as the nodes it stands for would
    const bool live = row < N0;
    const int nn = live ? row : 0;
    const float g = dot(w0, scales0, biases0, nn, live);
    const float u = dot(w1, scales1, biases1, nn, live);
    if (live && lane == 0) {
      const size_t at = (size_t)m * N0 + nn;
      const T gate = finish(g, bias0, 0, nn), up = finish(u, bias1, 1, nn);
      const T sig = static_cast<T>(1.0f / (1.0f + expf(-static_cast<float>(gate))));
      const T silu = static_cast<T>(static_cast<float>(gate) * static_cast<float>(sig));
      if (out0) out0[at] = gate;  // a launch may take no array for a result no node reads
      if (out1) out1[at] = up;
      if (act0) act0[at] = sig;
      if (act1) act1[at] = silu;
      out2[at] = static_cast<T>(static_cast<float>(silu) * static_cast<float>(up));
    }
    return;
  }
  const bool live = row < N0 + N1 + N2;
  const int set = !live || row < N0 ? 0 : row < N0 + N1 ? 1 : 2;
  const int N = set == 0 ? N0 : set == 1 ? N1 : N2;
  const int nn = !live ? 0 : set == 0 ? row : set == 1 ? row - N0 : row - N0 - N1;
  const float sum = dot(set == 0 ? w0 : set == 1 ? w1 : w2, set == 0 ? scales0 : set == 1 ? scales1 : scales2,
                        set == 0 ? biases0 : set == 1 ? biases1 : biases2, nn, live);
  if (live && lane == 0) {
    T* out = set == 0 ? out0 : set == 1 ? out1 : out2;
    if (out) out[(size_t)m * N + nn] = finish(sum, set == 0 ? bias0 : set == 1 ? bias1 : bias2, set, nn);
  }
)";

const cuda_kernel_spec qgemv_kernel = {
    "ort_ep_mlx_qgemv",
    {"x", "w0", "scales0", "biases0", "w1", "scales1", "biases1", "w2", "scales2", "biases2", "bias0", "bias1",
     "bias2", "skip", "nbias", "gamma", "eps"},
    {"out0", "out1", "out2", "act0", "act1", "nsum"},
    qgemv_source,
    qgemv_header,
    true};

/* Float32 dequantization: packed weights w [N, K * BITS / 32] (MLX's affine layout) with float32
 * scales and biases [N, K / GROUP] become float32 [N, K], v = q * scale + bias as MLX's
 * dequantization gives them. One thread per packed word (32 / BITS values of one group), 16-byte
 * stores. */
const char *dequant_f32_source = R"(
  constexpr int VPW = 32 / BITS;
  constexpr unsigned MASK = (1u << BITS) - 1u;
  const int N = w_shape[0], WORDS = w_shape[1], G = scales_shape[1];
  const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= (long long)N * WORDS) return;
  const int n = (int)(idx / WORDS), word_at = (int)(idx % WORDS);
  const int K = WORDS * VPW, k0 = word_at * VPW, g = k0 / GROUP;
  const float scale = scales[(size_t)n * G + g], bias = biases[(size_t)n * G + g];
  const uint32_t word = w[idx];
  alignas(16) float v[VPW];
#pragma unroll
  for (int j = 0; j < VPW; j++) v[j] = static_cast<float>((word >> (j * BITS)) & MASK) * scale + bias;
  float* row = out + (size_t)n * K + k0;
#pragma unroll
  for (int j = 0; j < VPW; j += 4) *reinterpret_cast<float4*>(row + j) = *reinterpret_cast<const float4*>(v + j);
)";

const cuda_kernel_spec dequant_f32_kernel = {
    "ort_ep_mlx_dequant_f32", {"w", "scales", "biases"}, {"out"}, dequant_f32_source, "", true};

/* MatMulNBits for many rows of float16 activations on the tensor cores (sm_80 and later): out
 * [M, N] = x [M, K] times the packed weights' transpose, each weight v = q * scale + bias turned
 * into float16 halves hi = float16(v) and lo = float16(v - hi) on the way into shared memory (no
 * copy of the weights in memory), and every product of an activation with a half exact in the
 * float32 accumulators of mma.sync m16n8k16. Where hi + lo == v (the callers' contract:
 * mlxb_qgemm_split) that is the float32 GEMM on the dequantized weights, summed in another order.
 * The two halves keep separate accumulators: an infinite activation times a zero lo would make NaN
 * where the float32 GEMM gives the infinity, so a non-finite hi sum stands alone. Blocks of BM x 64
 * outputs (BM 64 or 128: four or eight warps of 32 x 32), 32 of K per step, the next step's loads in
 * registers while the tensor cores work; the K steps may be split over gridDim.z blocks, each
 * writing float32 partial sums that qgemm_reduce adds in a fixed order. With BM 128 a 128-token
 * prompt is one row of tiles: each weight tile is dequantized once, not twice, and each barrier
 * covers twice the tensor-core work.
 *
 * AFFINE (ORT_EP_MLX_QGEMM_AFFINE=1) computes a step as MLX's own quantized products do: the sum
 * over its 32 of K of x * (q * scale + bias) is scale * (x . q) + bias * sum(x), with q staged as
 * float16 integers (exact) and x . q on the tensor cores, every product of a float16 activation
 * with q exact in the float32 accumulators; then each column's scale and bias for the step's
 * group (GROUP a multiple of 32: a step lies in one group). One product per weight instead of two
 * and no float16 halves to form, so the shared memory holds two steps: the next one is staged
 * while this one's products run, one barrier a step instead of two. Non-finite activations are
 * zeros in x . q and sum(x); their rows (flagged when staged) add them times the dequantized
 * weights apart, in float32, so infinities and NaN come out as the dequantized GEMM gives them.
 * The callers' contract (weights exact as two halves, so |w| < 65504) keeps scale * (x . q) and
 * bias * sum(x) far from float32's range. */
const char *qgemm_header = R"(
/* f(i, j, r) for accumulator r of each of a warp's 2 x 4 tiles of m16n8 (NVRTC takes no generic
 * lambda in device code: a function template instead) */
template <class F>
__device__ __forceinline__ void ort_ep_mlx_each_acc(F f) {
#pragma unroll
  for (int i = 0; i < 2; i++)
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
      for (int r = 0; r < 4; r++) f(i, j, r);
}
__device__ __forceinline__ void ort_ep_mlx_mma16816(float* d, const uint32_t* a, const uint32_t* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
)";

const char *qgemm_split_source = R"(
  constexpr int BN = 64, BK = 32, LDS = BK + 8; /* halves per shared row: the pad spreads banks */
  constexpr int THREADS = 2 * BM;               /* warps of 32 x 32 outputs, two across the tile */
  constexpr int VPW = 32 / BITS;
  constexpr unsigned MASK = (1u << BITS) - 1u;
  constexpr int WPR = BK / VPW;              /* packed words of one weight row per step */
  constexpr int WLOADS = BN * WPR / THREADS; /* of them per thread */
  static_assert(WLOADS >= 1 && BN * WPR % THREADS == 0, "a whole number of weight words per thread");
  static_assert(BM * BK / 8 == 2 * THREADS, "two 16-byte activation loads per thread");
  const int M = x_shape[0], K = x_shape[1], WORDS = w0_shape[1], G = scales0_shape[1];
  /* up to SETS weight sets of one K side by side: column tiles numbered across them, each tile in
   * one set, the partial sums [splits, M, NT] with the sets' columns one after another */
  const int N0 = w0_shape[0], N1 = SETS > 1 ? w1_shape[0] : 0, N2 = SETS > 2 ? w2_shape[0] : 0, NT = N0 + N1 + N2;
  const int T0 = (N0 + BN - 1) / BN, T1 = (N1 + BN - 1) / BN;
  int tile = blockIdx.x, set = 0;
  if (SETS > 1 && tile >= T0) {
    tile -= T0, set = 1;
    if (SETS > 2 && tile >= T1) tile -= T1, set = 2;
  }
  const uint32_t* w = set == 0 ? w0 : set == 1 ? w1 : w2;
  const float* scales = set == 0 ? scales0 : set == 1 ? scales1 : scales2;
  const float* biases = set == 0 ? biases0 : set == 1 ? biases1 : biases2;
  const __half* post = set == 0 ? post0 : set == 1 ? post1 : post2;
  __half* out = set == 0 ? out0 : set == 1 ? out1 : out2;
  const int N = set == 0 ? N0 : set == 1 ? N1 : N2, col0 = set == 0 ? 0 : set == 1 ? N0 : N0 + N1;
  const bool posted = (POST >> set) & 1;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gid = lane / 4, tig = lane % 4;
  const int n0 = tile * BN, m0 = blockIdx.y * BM;
  const int wm = (warp / 2) * 32, wn = (warp % 2) * 32; /* this warp's 32 x 32 of the block's BM x 64 */
  const int steps = K / BK, per = (steps + gridDim.z - 1) / gridDim.z;
  const int s_begin = blockIdx.z * per, s_end = s_begin + per < steps ? s_begin + per : steps;
  /* the affine form keeps two of each (one staged while the other is read), the halves one */
  constexpr int NBUF = AFFINE ? 2 : 1;
  __shared__ __align__(16) __half sa[NBUF][BM][LDS];
  __shared__ __align__(16) __half shi[NBUF][BN][LDS]; /* hi halves, or the affine form's q */
  __shared__ __align__(16) __half slo[AFFINE ? 1 : BN][LDS];
  __shared__ float sscale[NBUF][AFFINE ? BN : 1], sbias[NBUF][AFFINE ? BN : 1]; /* the step's group */
  __shared__ unsigned char sbad[NBUF][AFFINE ? BM : 1][4]; /* a row's quarter had a non-finite x */
  const bool x16 = (reinterpret_cast<unsigned long long>(x) & 15ull) == 0;
  uint4 ra[2];
  uint32_t rw[WLOADS];
  float rs[WLOADS], rb[WLOADS];
  /* step s's activations and packed weights into registers (zeros past M and N) */
  auto fetch = [&](int s) {
    const int k0 = s * BK;
#pragma unroll
    for (int i = 0; i < 2; i++) {
      const int idx = tid + i * THREADS, m = m0 + idx / 4;
      uint4 v = make_uint4(0u, 0u, 0u, 0u);
      if (m < M) {
        const __half* p = x + (size_t)m * K + k0 + (idx % 4) * 8;
        if (x16) {
          v = *reinterpret_cast<const uint4*>(p);
        } else {
          alignas(16) __half h[8];
#pragma unroll
          for (int j = 0; j < 8; j++) h[j] = p[j];
          v = *reinterpret_cast<const uint4*>(h);
        }
      }
      ra[i] = v;
    }
#pragma unroll
    for (int i = 0; i < WLOADS; i++) {
      const int idx = tid + i * THREADS, n = n0 + idx / WPR;
      const bool live = n < N;
      rw[i] = live ? w[(size_t)n * WORDS + k0 / VPW + idx % WPR] : 0u;
      rs[i] = live ? scales[(size_t)n * G + k0 / GROUP] : 0.0f;
      rb[i] = live ? biases[(size_t)n * G + k0 / GROUP] : 0.0f;
    }
  };
  /* the registers into shared memory: the activations, then each weight as its two halves */
  auto stage_x = [&]() {
#pragma unroll
    for (int i = 0; i < 2; i++) {
      const int idx = tid + i * THREADS;
      *reinterpret_cast<uint4*>(&sa[0][idx / 4][(idx % 4) * 8]) = ra[i];
    }
  };
  /* a weight word's VPW halves into a shared row: 16 bytes at a time where they fill them */
  auto store_halves = [&](__half* to, const __half* v) {
    if constexpr (VPW % 8 == 0) {
#pragma unroll
      for (int j = 0; j < VPW; j += 8) *reinterpret_cast<uint4*>(to + j) = *reinterpret_cast<const uint4*>(v + j);
    } else {
#pragma unroll
      for (int j = 0; j < VPW; j++) to[j] = v[j];
    }
  };
  auto stage = [&]() {
    stage_x();
#pragma unroll
    for (int i = 0; i < WLOADS; i++) {
      const int idx = tid + i * THREADS, r = idx / WPR, kk = (idx % WPR) * VPW;
      alignas(16) __half hi[VPW];
      alignas(16) __half lo[VPW];
#pragma unroll
      for (int j = 0; j < VPW; j++) {
        const float v = static_cast<float>((rw[i] >> (j * BITS)) & MASK) * rs[i] + rb[i];
        hi[j] = __float2half_rn(v);
        lo[j] = __float2half_rn(v - __half2float(hi[j]));
      }
      store_halves(&shi[0][r][kk], hi);
      store_halves(&slo[r][kk], lo);
    }
  };
  /* the affine form's staging into buffer `buf`: the activations with non-finite ones as zeros
   * (their rows' quarters flagged in sbad), each weight's q as a float16 integer (exact), the
   * step's scale and bias per column */
  auto stage_affine = [&](int buf) {
#pragma unroll
    for (int i = 0; i < 2; i++) {
      const int idx = tid + i * THREADS;
      alignas(16) __half h[8];
      *reinterpret_cast<uint4*>(h) = ra[i];
      bool bad = false;
#pragma unroll
      for (int j = 0; j < 8; j++) {
        const bool finite = isfinite(__half2float(h[j]));
        bad |= !finite;
        h[j] = finite ? h[j] : __float2half_rn(0.0f);
      }
      *reinterpret_cast<uint4*>(&sa[buf][idx / 4][(idx % 4) * 8]) = *reinterpret_cast<const uint4*>(h);
      sbad[buf][AFFINE ? idx / 4 : 0][idx % 4] = bad;
    }
#pragma unroll
    for (int i = 0; i < WLOADS; i++) {
      const int idx = tid + i * THREADS, r = idx / WPR, kk = (idx % WPR) * VPW;
      alignas(16) __half q[VPW];
#pragma unroll
      for (int j = 0; j < VPW; j++) q[j] = __float2half_rn(static_cast<float>((rw[i] >> (j * BITS)) & MASK));
      store_halves(&shi[buf][r][kk], q);
      if (AFFINE && idx % WPR == 0) sscale[buf][r] = rs[i], sbias[buf][r] = rb[i];
    }
  };
  auto lds = [](const __half* p) { return *reinterpret_cast<const uint32_t*>(p); };
  auto pair_sum = [](uint32_t w) {
    const __half* h = reinterpret_cast<const __half*>(&w);
    return __half2float(h[0]) + __half2float(h[1]);
  };
  /* fragments of m16n8k16 at kk: A row gid (+8), B column gid, K pairs at 2 * tig (+8) */
  auto load_a = [&](uint32_t (&a)[2][4], const __half (*sx)[LDS], int kk) {
#pragma unroll
    for (int i = 0; i < 2; i++) {
      const int r = wm + i * 16 + gid;
      a[i][0] = lds(&sx[r][kk + 2 * tig]);
      a[i][1] = lds(&sx[r + 8][kk + 2 * tig]);
      a[i][2] = lds(&sx[r][kk + 2 * tig + 8]);
      a[i][3] = lds(&sx[r + 8][kk + 2 * tig + 8]);
    }
  };
  auto load_b = [&](uint32_t (&b)[4][2], const __half (*sb)[LDS], int kk) {
#pragma unroll
    for (int j = 0; j < 4; j++) {
      const int c = wn + j * 8 + gid;
      b[j][0] = lds(&sb[c][kk + 2 * tig]);
      b[j][1] = lds(&sb[c][kk + 2 * tig + 8]);
    }
  };
  /* accumulator r of tile (i, j): row gid (+8 from r = 2) of row tile i, column 2 * tig + r % 2
   * of column tile j */
  float acc_hi[2][4][4], acc_lo[2][4][4];
  ort_ep_mlx_each_acc([&](int i, int j, int r) { acc_hi[i][j][r] = acc_lo[i][j][r] = 0.0f; });
  /* step s of the affine form from buffer buf: the sum over the step of x * (q * scale + bias) is
   * scale * (x . q) + bias * sum(x), the products of x with q exact in the float32 accumulators,
   * then one scale per column. A row whose step had a non-finite activation (zero in x . q) adds
   * those activations times the dequantized weights apart, in float32, as the dequantized GEMM
   * has them (inf * 0 is NaN there too, inf * w an infinity). */
  auto affine_step = [&](int buf, int s) {
    float t[2][4][4], xs[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
    ort_ep_mlx_each_acc([&](int i, int j, int r) { t[i][j][r] = 0.0f; });
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      uint32_t a[2][4], bq[4][2];
      load_a(a, sa[buf], kk);
      load_b(bq, shi[buf], kk);
#pragma unroll
      for (int i = 0; i < 2; i++) {
        xs[i][0] += pair_sum(a[i][0]) + pair_sum(a[i][2]);
        xs[i][1] += pair_sum(a[i][1]) + pair_sum(a[i][3]);
      }
#pragma unroll
      for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) ort_ep_mlx_mma16816(t[i][j], a[i], bq[j]);
    }
    /* a row's sum over the step: the quad's four lanes hold a quarter of its K each */
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        xs[i][h] += __shfl_xor_sync(0xffffffffu, xs[i][h], 1);
        xs[i][h] += __shfl_xor_sync(0xffffffffu, xs[i][h], 2);
      }
    ort_ep_mlx_each_acc([&](int i, int j, int r) {
      const int c = wn + j * 8 + 2 * tig + r % 2;
      acc_hi[i][j][r] += sscale[buf][c] * t[i][j][r] + sbias[buf][c] * xs[i][r / 2];
    });
    for (int i = 0; i < 2; i++)
      for (int h = 0; h < 2; h++) {
        const int rl = wm + i * 16 + gid + 8 * h, m = m0 + rl;
        const unsigned char* flag = sbad[buf][AFFINE ? rl : 0];
        if (m >= M || !(flag[0] | flag[1] | flag[2] | flag[3])) continue;
        for (int kk = 0; kk < BK; kk++) {
          const float xv = __half2float(x[(size_t)m * K + s * BK + kk]);
          if (isfinite(xv)) continue;
          for (int j = 0; j < 4; j++)
            for (int e = 0; e < 2; e++) {
              const int c = wn + j * 8 + 2 * tig + e;
              const float wv = __half2float(shi[buf][c][kk]) * sscale[buf][c] + sbias[buf][c];
              acc_hi[i][j][2 * h + e] += xv * wv;
            }
        }
      }
  };
  if (s_begin < s_end) fetch(s_begin);
  if constexpr (AFFINE) {
    /* two buffers, one barrier a step: step s + 1 is fetched while step s's products run and
     * staged into the other buffer after them; the barrier then says it is whole, and that every
     * warp is done with this buffer, which step s + 2 stages into */
    if (s_begin < s_end) stage_affine(0);
    __syncthreads();
    for (int s = s_begin; s < s_end; s++) {
      const int buf = (s - s_begin) & 1;
      const bool more = s + 1 < s_end;
      if (more) fetch(s + 1);
      affine_step(buf, s);
      if (more) stage_affine(buf ^ 1);
      __syncthreads();
    }
  } else {
    for (int s = s_begin; s < s_end; s++) {
      __syncthreads(); /* every warp done with the step before: shared memory written again */
      stage();
      __syncthreads();
      if (s + 1 < s_end) fetch(s + 1); /* in flight while the tensor cores work */
#pragma unroll
      for (int kk = 0; kk < BK; kk += 16) {
        uint32_t a[2][4], bh[4][2], bl[4][2];
        load_a(a, sa[0], kk);
        load_b(bh, shi[0], kk);
        load_b(bl, slo, kk);
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
          for (int j = 0; j < 4; j++) {
            ort_ep_mlx_mma16816(acc_hi[i][j], a[i], bh[j]);
            ort_ep_mlx_mma16816(acc_lo[i][j], a[i], bl[j]);
          }
      }
    }
  }
  ort_ep_mlx_each_acc([&](int i, int j, int r) {
    const int m = m0 + wm + i * 16 + gid + (r / 2) * 8, n = n0 + wn + j * 8 + 2 * tig + r % 2;
    if (m >= M || n >= N) return;
    const float h = acc_hi[i][j][r], sum = isfinite(h) ? h + acc_lo[i][j][r] : h;
    if (gridDim.z > 1) {
      partial[((size_t)blockIdx.z * M + m) * NT + col0 + n] = sum;
    } else {
      const float b = HAS_BIAS ? static_cast<float>(bias[n]) : 0.0f;
      const __half y = __float2half_rn(sum + b);
      out[(size_t)m * N + n] = posted ? __float2half_rn(__half2float(y) + __half2float(post[n])) : y;
    }
  });
)";

/* The split-K partial sums [S, M, NT] of qgemm_split added in order, the bias added (one set),
 * rounded once; for set i with bit i of POST, a following Add's constant [N_i] added to that and
 * rounded again (the Add's arithmetic). The sets' columns (dims: N0, N1, N2) lie side by side. */
const char *qgemm_reduce_source = R"(
  const int S = partial_shape[0], M = partial_shape[1], NT = partial_shape[2];
  const int N0 = dims[0], N1 = dims[1];
  const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= (long long)M * NT) return;
  const int m = idx / NT, col = idx % NT;
  const int set = col < N0 ? 0 : col < N0 + N1 ? 1 : 2;
  const int col0 = set == 0 ? 0 : set == 1 ? N0 : N0 + N1, N = set == 0 ? N0 : set == 1 ? N1 : NT - N0 - N1;
  const int n = col - col0;
  float sum = 0.0f;
  for (int s = 0; s < S; s++) sum += partial[(size_t)s * M * NT + idx];
  const float b = HAS_BIAS ? static_cast<float>(bias[n]) : 0.0f;
  const __half y = __float2half_rn(sum + b);
  const __half* post = set == 0 ? post0 : set == 1 ? post1 : post2;
  __half* out = set == 0 ? out0 : set == 1 ? out1 : out2;
  out[(size_t)m * N + n] = (POST >> set) & 1 ? __float2half_rn(__half2float(y) + __half2float(post[n])) : y;
)";

const cuda_kernel_spec qgemm_split_kernel = {
    "ort_ep_mlx_qgemm_split",
    {"x", "w0", "scales0", "biases0", "w1", "scales1", "biases1", "w2", "scales2", "biases2", "bias", "post0", "post1",
     "post2"},
    {"out0", "out1", "out2", "partial"}, qgemm_split_source,
    qgemm_header, true};

const cuda_kernel_spec qgemm_reduce_kernel = {
    "ort_ep_mlx_qgemm_reduce", {"partial", "bias", "post0", "post1", "post2", "dims"}, {"out0", "out1", "out2"},
    qgemm_reduce_source, "", true};

/* GatherBlockQuantized (a quantized embedding table) in one launch: out [N, REST, D] element e of
 * row i is (q - zp) * scale of data row indices[i] (negative counts from the end; outside the table
 * a zero row), q the e-th BITS-bit value of the packed row (low bits first), scale and zero point
 * those of its block; float32 arithmetic rounded once to the scales' dtype. dims: N, REST, D, ROWS,
 * packed bytes a row, blocks a row, zero-point bytes a row. */
const char *gather_bq_source = R"(
  const int N = dims[0], REST = dims[1], D = dims[2], ROWS = dims[3], PD = dims[4], NB = dims[5], ZPD = dims[6];
  constexpr int PER = 8 / BITS;
  constexpr unsigned MASK = (1u << BITS) - 1u;
  const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= (long long)N * REST * D) return;
  const int e = idx % D;
  const long long ir = idx / D;
  const int r = ir % REST, i = ir / REST;
  long long row = (long long)indices[i];
  if (row < 0) row += ROWS;
  if (row < 0 || row >= ROWS) {
    out[idx] = static_cast<S>(0.0f);
    return;
  }
  const size_t base = (size_t)row * REST + r;
  const float q = static_cast<float>((data[base * PD + e / PER] >> ((e % PER) * BITS)) & MASK);
  const int blk = e / BLOCK;
  const float zp = HAS_ZP ? static_cast<float>((zero_points[base * ZPD + blk / PER] >> ((blk % PER) * BITS)) & MASK)
                          : static_cast<float>(1 << (BITS - 1));
  out[idx] = static_cast<S>((q - zp) * static_cast<float>(scales[base * NB + blk]));
)";

const cuda_kernel_spec gather_bq_kernel = {
    "ort_ep_mlx_gather_bq", {"data", "indices", "scales", "zero_points", "dims"}, {"out"}, gather_bq_source, "", true};

} // namespace mlxb_detail

bool mlxb_qgemv_available(const mlxb_scope *s, mlxb_dtype t, int bits, int group_size) {
  if (s && is_cpu_scope(s)) return cpu_qgemv_sets_takes(s, to_mx(t), bits, group_size);
  if (!s || !is_cuda_gpu(s)) return false;
  bool float_type = t == MLXB_F32 || t == MLXB_F16 || t == MLXB_BF16;
  bool packing = bits == 2 || bits == 4 || bits == 8;
  return float_type && packing && group_size >= 32 && group_size % 32 == 0;
}

namespace {

/* One GEMV launch over n_sets weight sets (qgemv_source); with swiglu, two sets of one N (gate,
 * up) and five results: gate, up, gate * Sigmoid(gate) * up, Sigmoid(gate), gate * Sigmoid(gate). */
/* The norm a GEMV launch computes first (mlxb_qgemv_norm): its inputs after x (skip, bias, gamma,
 * eps), the template arguments and the residual's shape; placeholders (never read) without one. */
struct qgemv_norm_args {
  std::vector<mx::array> inputs;
  cuda_template_args targs;
  mx::Shape sum_shape{1};
};

qgemv_norm_args qgemv_norm_inputs(mlxb_scope *s, const mx::array &xa, const mlxb_qgemv_norm *norm) {
  int k = xa.shape(-1);
  int64_t rows = static_cast<int64_t>(xa.size()) / k;
  if (!norm) return {{xa, xa, xa, xa}, {{"NORM", false}, {"NORM_K", 1}, {"HAS_SKIP", false}, {"HAS_NBIAS", false},
                                        {"WRITE_SUM", false}, {"SKIP_RANK", 1}}};
  if (!norm->gamma) throw null_arg{};
  if (!mlxb_qgemv_norm_available(s, from_mx(xa.dtype()), k))
    throw bridge_error("quantized GEMV: no norm of this dtype or width in the launch");
  auto dev = scope_dev(s);
  mx::Dtype t = xa.dtype();
  const mx::array &ga = arr(norm->gamma);
  mx::array sk = norm->skip ? arr(norm->skip) : xa, bi = norm->bias ? arr(norm->bias) : ga;
  int64_t skip_rows = sk.size() / k;
  if (ga.ndim() != 1 || ga.shape(0) != k || sk.ndim() < 1 || sk.shape(-1) != k || skip_rows < 1 ||
      rows % skip_rows || bi.ndim() != 1 || bi.shape(0) != k)
    throw bridge_error("quantized GEMV's norm: gamma [K], skip [..., K] of the rows or a divisor of them, bias [K]");
  qgemv_norm_args a;
  a.inputs = {mx::astype(sk, t, dev), mx::astype(bi, t, dev), mx::astype(ga, t, dev),
              mx::array({norm->eps}, {1}, mx::float32)};
  a.targs = {{"NORM", true}, {"NORM_K", k}, {"HAS_SKIP", norm->skip != nullptr}, {"HAS_NBIAS", norm->bias != nullptr},
             {"WRITE_SUM", norm->want_sum}, {"SKIP_RANK", static_cast<int>(sk.ndim())}};
  if (norm->want_sum) a.sum_shape = xa.shape();
  return a;
}

std::vector<mx::array> qgemv_launch(mlxb_scope *s, const mlxb_array *x, int n_sets, const mlxb_array *const *w,
                                    const mlxb_array *const *scales, const mlxb_array *const *biases,
                                    const mlxb_array *const *add, int group_size, int bits, bool swiglu,
                                    bool product_only = false, const mlxb_qgemv_norm *norm = nullptr) {
  if (!x || !w || !scales || !biases) throw null_arg{};
  if (n_sets < 1 || n_sets > MLXB_QGEMV_MAX_SETS) throw bridge_error("quantized GEMV: 1 to 3 weight sets");
  const mx::array &xa = arr(x);
  if (!mlxb_qgemv_available(s, from_mx(xa.dtype()), bits, group_size))
    throw bridge_error("quantized GEMV: not available for this dtype, packing or device");
  if (xa.ndim() < 1) throw bridge_error("quantized GEMV takes x [..., K]");
  int k = xa.shape(-1);
  int64_t m = k > 0 ? static_cast<int64_t>(xa.size()) / k : 0;
  if (m < 1 || m > 65535 || k % group_size) throw bridge_error("quantized GEMV: shapes do not fit");
  std::vector<mx::array> inputs = {xa};
  std::vector<mx::Shape> shapes;
  int64_t rows = 0;
  for (int i = 0; i < MLXB_QGEMV_MAX_SETS; i++) {
    int set = i < n_sets ? i : 0; /* a launch always names three sets; the unused repeat the first */
    if (!w[set] || !scales[set] || !biases[set]) throw null_arg{};
    const mx::array &wa = arr(w[set]), &sa = arr(scales[set]);
    mx::array ba = arr(biases[set]);
    if (ba.dtype() == mx::uint8 && zero_points_fit(ba, sa) && !is_cpu_scope(s))
      ba = affine_biases(sa, ba, scope_dev(s)); /* the CUDA kernel takes MLX's biases */
    bool third_fits = ba.dtype() == mx::uint8 ? zero_points_fit(ba, sa) : ba.dtype() == mx::float32 && ba.shape() == sa.shape();
    if (wa.ndim() != 2 || sa.ndim() != 2 || !third_fits || wa.dtype() != mx::uint32 || sa.dtype() != mx::float32)
      throw bridge_error("quantized GEMV takes uint32 w [N, K * bits / 32], float32 scales and biases (or uint8 zero "
                         "points [N or 1, K / group])");
    int n = wa.shape(0);
    if (static_cast<int64_t>(wa.shape(1)) * 32 != static_cast<int64_t>(k) * bits || sa.shape(0) != n ||
        sa.shape(1) != k / group_size || n < 1)
      throw bridge_error("quantized GEMV: shapes do not fit");
    inputs.insert(inputs.end(), {wa, sa, ba});
    mx::Shape shape = xa.shape(); /* x's leading axes: no reshape on either side of the launch */
    shape.back() = n;
    shapes.push_back(i < n_sets || swiglu ? shape : mx::Shape{1});
    if (i < n_sets) rows += n;
  }
  if (swiglu && (n_sets != 2 || arr(w[0]).shape(0) != arr(w[1]).shape(0)))
    throw bridge_error("quantized GEMV: the gated form takes two sets of one N");
  if (is_cpu_scope(s)) {
    if (norm) throw bridge_error("quantized GEMV: a norm in the launch is MLX's CUDA backend's");
    std::vector<mx::array> sets(inputs.begin() + 1, inputs.begin() + 1 + 3 * n_sets);
    std::vector<std::optional<mx::array>> adding(n_sets);
    for (int i = 0; i < n_sets; i++) {
      if (!add || !add[i]) continue;
      const mx::array &b = arr(add[i]);
      if (b.ndim() != 1 || b.shape(0) != arr(w[i]).shape(0))
        throw bridge_error("quantized GEMV: a bias has one value per output");
      adding[i] = mx::astype(b, xa.dtype(), scope_dev(s));
    }
    return cpu_qgemv_sets(s, xa, sets, adding, group_size, swiglu);
  }
  int biased = 0;
  for (int i = 0; i < MLXB_QGEMV_MAX_SETS; i++) {
    if (i >= n_sets || !add || !add[i]) {
      inputs.push_back(xa); /* not read */
      continue;
    }
    const mx::array &b = arr(add[i]);
    if (b.ndim() != 1 || b.shape(0) != arr(w[i]).shape(0))
      throw bridge_error("quantized GEMV: a bias has one value per output");
    inputs.push_back(mx::astype(b, xa.dtype(), scope_dev(s)));
    biased |= 1 << i;
  }
  shapes.push_back(swiglu ? shapes[0] : mx::Shape{1});
  shapes.push_back(swiglu ? shapes[0] : mx::Shape{1});
  qgemv_norm_args na = qgemv_norm_inputs(s, xa, norm);
  inputs.insert(inputs.end(), na.inputs.begin(), na.inputs.end());
  shapes.push_back(na.sum_shape);
  if (swiglu) rows = arr(w[0]).shape(0); /* a row computes both sets */
  enum { WARPS = 4 }; /* small blocks: a 896-row projection still spreads over every multiprocessor */
  int64_t chunks = static_cast<int64_t>(k) * bits / 128;
  int lanes = chunks >= 96 ? 32 : chunks >= 48 ? 16 : 8;
  int threads = WARPS * 32, rows_per_block = threads / lanes;
  int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
  if (blocks * threads > std::numeric_limits<int>::max()) throw bridge_error("quantized GEMV: too many rows");
  mx::Dtype t = xa.dtype();
  /* the sets past n_sets and, without swiglu, the two activations are never written; a gated MLP
   * whose intermediates nobody else reads needs the product (out2) alone */
  uint32_t unused = swiglu ? (product_only ? 0x1bu : 0u) : (0x7u & ~((1u << n_sets) - 1u)) | (1u << 3) | (1u << 4);
  if (!norm || !norm->want_sum) unused |= 1u << 5; /* the residual sum */
  cuda_template_args targs = {{"T", t}, {"BITS", bits}, {"GROUP", group_size}, {"WARPS", static_cast<int>(WARPS)},
                              {"LANES", lanes}, {"SETS", n_sets}, {"BIASED", biased}, {"SWIGLU", swiglu}};
  targs.insert(targs.end(), na.targs.begin(), na.targs.end());
  return run_cuda_kernel(qgemv_kernel, inputs, shapes, {t, t, t, t, t, t},
                         {static_cast<int>(blocks * threads), static_cast<int>(m), 1}, {threads, 1, 1}, targs, s,
                         unused);
}

} // namespace

/* Opt-in (ORT_EP_MLX_NORM_IN_GEMV=1): on the H100 (2026-12-05, IOBinding decode loop at Qwen2.5-0.5B's
 * shapes, three alternating pairs of processes) a step's eval took 0.10-0.33 ms longer with it
 * (2.44-2.86 against 2.26-2.53 ms) although it launched 151 kernels instead of 199: every block of
 * the normed launches (about 5 us longer each, 48 a step) normalizes its row again, and the step's
 * chain of dependent launches is that much longer. */
bool mlxb_qgemv_norm_available(const mlxb_scope *s, mlxb_dtype t, int64_t k) {
  static const bool on = env_opt_in("ORT_EP_MLX_NORM_IN_GEMV");
  bool float_type = t == MLXB_F32 || t == MLXB_F16 || t == MLXB_BF16;
  return on && s && is_cuda_gpu(s) && float_type && k > 0 && k <= MLXB_QGEMV_NORM_MAX_K;
}

/* The residual sum a launch with a norm gives, where the norm asked for it. */
static void keep_norm_sum(mlxb_scope *s, const std::vector<mx::array> &outs, mlxb_qgemv_norm *norm) {
  if (norm && norm->want_sum) norm->sum = scope_keep(s, outs.at(5));
}

int mlxb_qgemv_sets(mlxb_scope *s, const mlxb_array *x, int n_sets, const mlxb_array *const *w,
                    const mlxb_array *const *scales, const mlxb_array *const *biases,
                    const mlxb_array *const *add, int group_size, int bits, mlxb_qgemv_norm *norm, mlxb_array **out) {
  for (int i = 0; out && i < n_sets && i < MLXB_QGEMV_MAX_SETS; i++) out[i] = nullptr;
  if (norm) norm->sum = nullptr;
  return guard_status(s, "mlxb_qgemv", [&] {
    if (!out) throw null_arg{};
    auto outs = qgemv_launch(s, x, n_sets, w, scales, biases, add, group_size, bits, false, false, norm);
    for (int i = 0; i < n_sets; i++) out[i] = scope_keep(s, outs.at(i));
    keep_norm_sum(s, outs, norm);
  });
}

int mlxb_qgemv_swiglu(mlxb_scope *s, const mlxb_array *x, const mlxb_array *const *w, const mlxb_array *const *scales,
                      const mlxb_array *const *biases, const mlxb_array *const *add, int group_size, int bits,
                      bool product_only, mlxb_qgemv_norm *norm, mlxb_array **out) {
  for (int i = 0; out && i < MLXB_QGEMV_SWIGLU_OUTPUTS; i++) out[i] = nullptr;
  if (norm) norm->sum = nullptr;
  return guard_status(s, "mlxb_qgemv_swiglu", [&] {
    if (!out) throw null_arg{};
    auto outs = qgemv_launch(s, x, 2, w, scales, biases, add, group_size, bits, true, product_only, norm);
    /* the kernel's order: gate, up, product, then the two activations */
    static const int from[MLXB_QGEMV_SWIGLU_OUTPUTS] = {0, 1, 3, 4, 2};
    for (int i = 0; i < MLXB_QGEMV_SWIGLU_OUTPUTS; i++) out[i] = scope_keep(s, outs.at(from[i]));
    keep_norm_sum(s, outs, norm);
  });
}

mlxb_array *mlxb_qgemv(mlxb_scope *s, const mlxb_array *x, const mlxb_array *w, const mlxb_array *scales,
                       const mlxb_array *biases, int group_size, int bits) {
  mlxb_array *out = nullptr;
  mlxb_qgemv_sets(s, x, 1, &w, &scales, &biases, nullptr, group_size, bits, nullptr, &out);
  return out;
}

/* The checks of packed weights with their scales and biases: K (the unpacked width) once the shapes
 * fit. */
static int64_t dequant_width(const mx::array &wa, const mx::array &sa, const mx::array &ba, int group_size, int bits) {
  if (wa.ndim() != 2 || sa.ndim() != 2 || ba.shape() != sa.shape() || wa.dtype() != mx::uint32 ||
      sa.dtype() != mx::float32 || ba.dtype() != mx::float32 || bits <= 0 || 32 % bits || group_size <= 0)
    throw bridge_error("dequantization takes uint32 w [N, K * bits / 32], float32 scales and biases");
  int64_t k = static_cast<int64_t>(wa.shape(1)) * (32 / bits);
  if (sa.shape(0) != wa.shape(0) || k % group_size || sa.shape(1) != k / group_size ||
      k > std::numeric_limits<int>::max())
    throw bridge_error("dequantization: shapes do not fit");
  return k;
}

/* ORT_EP_MLX_QGEMM=0 turns the tensor-core kernel for MatMulNBits' many rows off (the float32
 * dequantization and GEMM then): the switch for an A/B. */
static bool qgemm_enabled() {
  static const bool on = env_switch_on("ORT_EP_MLX_QGEMM");
  return on;
}

bool mlxb_qgemm_split_available(const mlxb_scope *s, int bits, int group_size) {
  return s && is_cuda_gpu(s) && qgemm_enabled() && (bits == 2 || bits == 4 || bits == 8) && group_size >= 32 &&
         group_size % 32 == 0 && gpu_compute_major(s) >= 8; /* mma.sync m16n8k16 */
}

namespace {

/* How many blocks share one output tile's K steps: enough tiles to fill an H200's 132
 * multiprocessors twice over, each block keeping at least four steps, at most 16 partial sums. */
/* The GEMM's row tile for m rows (ORT_EP_MLX_QGEMM_TILE_M: 64, the default, or 128): 128 where the
 * rows fill more than one tile of 64 and a step's weight words fill a block of 256 threads (4- and
 * 8-bit weights). Measured on the H100 (2026-12-05, night session): a 128-token prompt's eval 6.0
 * and 6.7 ms at 128 against 5.5 and 5.5 at 64 (alternating processes), so 64 stays. */
int qgemm_tile_m(int64_t m, int bits) {
  static const int wanted = [] {
    const char *v = std::getenv("ORT_EP_MLX_QGEMM_TILE_M");
    return v && !std::strcmp(v, "128") ? 128 : 64;
  }();
  return wanted == 128 && m > 64 && bits >= 4 ? 128 : 64;
}

/* ORT_EP_MLX_QGEMM_AFFINE=1: the GEMM's affine form (qgemm_split_source, AFFINE): q times x on
 * the tensor cores, then each step's scale and bias per column, half the tensor-core work of the
 * two halves. Written in a session without a GPU (checked by tools/cuda_emu, compiled by
 * tools/check_cuda_kernels.py): opt-in until a lease has timed it. */
bool qgemm_affine() {
  static const bool on = env_opt_in("ORT_EP_MLX_QGEMM_AFFINE");
  return on;
}

int qgemm_splits(int64_t tiles, int64_t steps) {
  enum { TARGET_BLOCKS = 264, MIN_STEPS = 4, MAX_SPLITS = 16 };
  int64_t want = (TARGET_BLOCKS + tiles - 1) / tiles;
  int64_t fit = steps / MIN_STEPS;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({want, fit, MAX_SPLITS})));
}

} // namespace

namespace {

/* Up to three weight sets of one K times x on the tensor cores: one launch (and one reduction of the
 * split-K partial sums) for them all; each set's result [..., N_i] float16. */
std::vector<mx::array> qgemm_sets(mlxb_scope *s, const mlxb_array *x, int n_sets, const mlxb_array *const *w,
                                  const mlxb_array *const *scales, const mlxb_array *const *biases,
                                  const mlxb_array *bias, const mlxb_array *const *post, int group_size, int bits) {
  if (!x || !w || !scales || !biases) throw null_arg{};
  if (n_sets < 1 || n_sets > MLXB_QGEMV_MAX_SETS) throw bridge_error("quantized GEMM: 1 to 3 weight sets");
  if (bias && n_sets > 1) throw bridge_error("quantized GEMM: a bias input goes with one weight set only");
  if (!mlxb_qgemm_split_available(s, bits, group_size))
    throw bridge_error("quantized GEMM: not available for this packing or device");
  const mx::array &xa = arr(x);
  enum { TILE = 64, STEP = 32, REDUCE_THREADS = 256 };
  auto dev = scope_dev(s);
  int64_t k = -1, tiles_n = 0;
  int n[MLXB_QGEMV_MAX_SETS] = {0, 0, 0}, post_mask = 0;
  std::vector<mx::array> weights;
  for (int i = 0; i < MLXB_QGEMV_MAX_SETS; i++) {
    int set = i < n_sets ? i : 0; /* a launch always names three sets; the unused repeat the first */
    if (!w[set] || !scales[set] || !biases[set]) throw null_arg{};
    const mx::array &wa = arr(w[set]), &sa = arr(scales[set]), &ba = arr(biases[set]);
    int64_t ki = dequant_width(wa, sa, ba, group_size, bits);
    if (k >= 0 && ki != k) throw bridge_error("quantized GEMM: the weight sets must share one K");
    k = ki;
    weights.insert(weights.end(), {wa, sa, ba});
    if (i >= n_sets) continue;
    n[i] = wa.shape(0);
    tiles_n += (n[i] + TILE - 1) / TILE;
  }
  if (xa.dtype() != mx::float16 || xa.ndim() < 1 || xa.shape(-1) != k)
    throw bridge_error("quantized GEMM takes float16 x [..., K] with K the weights' unpacked width");
  int64_t m = k > 0 ? static_cast<int64_t>(xa.size()) / k : 0;
  std::vector<mx::Shape> shapes;
  for (int i = 0; i < MLXB_QGEMV_MAX_SETS; i++) {
    mx::Shape shape = xa.shape();
    shape.back() = n[i];
    shapes.push_back(shape);
  }
  if (m == 0 || std::any_of(n, n + n_sets, [](int v) { return v == 0; })) {
    std::vector<mx::array> empty;
    for (int i = 0; i < n_sets; i++) empty.push_back(mx::zeros(shapes[i], mx::float16, dev));
    return empty;
  }
  const int tile_m = qgemm_tile_m(m, bits), threads = 2 * tile_m;
  int64_t tiles_m = (m + tile_m - 1) / tile_m;
  if (tiles_m > 65535 || tiles_n * threads > std::numeric_limits<int>::max())
    throw bridge_error("quantized GEMM: too many rows or columns for one launch");
  if (bias && (arr(bias).ndim() != 1 || arr(bias).shape(0) != n[0]))
    throw bridge_error("quantized GEMM: the bias has one value per output");
  mx::array x2 = mx::reshape(xa, {static_cast<int>(m), static_cast<int>(k)}, dev);
  std::vector<mx::array> inputs = {x2};
  inputs.insert(inputs.end(), weights.begin(), weights.end());
  inputs.push_back(bias ? mx::astype(arr(bias), mx::float16, dev) : x2); /* not read without a bias */
  for (int i = 0; i < MLXB_QGEMV_MAX_SETS; i++) {
    const mlxb_array *p = post && i < n_sets ? post[i] : nullptr;
    if (p && (arr(p).ndim() != 1 || arr(p).shape(0) != n[i]))
      throw bridge_error("quantized GEMM: a following bias has one value per output");
    inputs.push_back(p ? mx::astype(arr(p), mx::float16, dev) : x2);
    post_mask |= p ? 1 << i : 0;
  }
  int nt = n[0] + n[1] + n[2], splits = qgemm_splits(tiles_n * tiles_m, k / STEP);
  std::vector<mx::Shape> out_shapes;
  for (int i = 0; i < MLXB_QGEMV_MAX_SETS; i++)
    out_shapes.push_back(i < n_sets ? mx::Shape{static_cast<int>(m), n[i]} : mx::Shape{1});
  out_shapes.push_back(splits > 1 ? mx::Shape{splits, static_cast<int>(m), nt} : mx::Shape{1});
  uint32_t sets_unused = 0x7u & ~((1u << n_sets) - 1u);
  auto outs = run_cuda_kernel(qgemm_split_kernel, inputs, out_shapes,
                              {mx::float16, mx::float16, mx::float16, mx::float32},
                              {static_cast<int>(tiles_n * threads), static_cast<int>(tiles_m), splits}, {threads, 1, 1},
                              {{"BITS", bits}, {"GROUP", group_size}, {"HAS_BIAS", bias != nullptr},
                               {"POST", post_mask}, {"SETS", n_sets}, {"BM", tile_m}, {"AFFINE", qgemm_affine()}},
                              s, splits > 1 ? 0x7u : sets_unused | 0x8u); /* the partial sums or the outputs */
  if (splits > 1) {
    int64_t total = m * nt, grid = (total + REDUCE_THREADS - 1) / REDUCE_THREADS * REDUCE_THREADS;
    if (grid > std::numeric_limits<int>::max()) throw bridge_error("quantized GEMM: too many outputs");
    std::vector<mx::array> reduce_in = {outs.at(3), inputs[10], inputs[11], inputs[12], inputs[13],
                                        mx::array({n[0], n[1], n[2]}, {3}, mx::int32)};
    outs = run_cuda_kernel(qgemm_reduce_kernel, reduce_in, {out_shapes[0], out_shapes[1], out_shapes[2]},
                           {mx::float16, mx::float16, mx::float16}, {static_cast<int>(grid), 1, 1},
                           {REDUCE_THREADS, 1, 1}, {{"HAS_BIAS", bias != nullptr}, {"POST", post_mask}}, s,
                           sets_unused);
  }
  std::vector<mx::array> ys;
  for (int i = 0; i < n_sets; i++) ys.push_back(mx::reshape(outs.at(i), shapes[i], dev));
  return ys;
}

} // namespace

mlxb_array *mlxb_qgemm_split(mlxb_scope *s, const mlxb_array *x, const mlxb_array *w, const mlxb_array *scales,
                             const mlxb_array *biases, const mlxb_array *bias, const mlxb_array *post,
                             int group_size, int bits) {
  return guard(s, "mlxb_qgemm_split",
               [&] { return qgemm_sets(s, x, 1, &w, &scales, &biases, bias, &post, group_size, bits).at(0); });
}

int mlxb_qgemm_split_sets(mlxb_scope *s, const mlxb_array *x, int n_sets, const mlxb_array *const *w,
                          const mlxb_array *const *scales, const mlxb_array *const *biases,
                          const mlxb_array *const *post, int group_size, int bits, mlxb_array **out) {
  for (int i = 0; out && i < n_sets && i < MLXB_QGEMV_MAX_SETS; i++) out[i] = nullptr;
  return guard_status(s, "mlxb_qgemm_split_sets", [&] {
    if (!out) throw null_arg{};
    auto ys = qgemm_sets(s, x, n_sets, w, scales, biases, nullptr, post, group_size, bits);
    for (int i = 0; i < n_sets; i++) out[i] = scope_keep(s, ys[i]);
  });
}

bool mlxb_gather_bq_available(const mlxb_scope *s) {
  static const bool on = env_switch_on("ORT_EP_MLX_GATHER_BQ_KERNEL");
  return on && s && (is_cuda_gpu(s) || is_cpu_scope(s));
}

mlxb_array *mlxb_gather_bq(mlxb_scope *s, const mlxb_array *data, const mlxb_array *indices, const mlxb_array *scales,
                           const mlxb_array *zero_points, int bits, int64_t block) {
  return guard(s, "mlxb_gather_bq", [&] {
    const mx::array &da = arr(data), &ia = arr(indices), &sa = arr(scales);
    if (!mlxb_gather_bq_available(s)) throw bridge_error("quantized gather: MLX's CUDA backend or a CPU scope only");
    if ((bits != 2 && bits != 4 && bits != 8) || block < 1 || block > (1 << 20))
      throw bridge_error("quantized gather: bits 2, 4 or 8 and a positive block");
    if (da.dtype() != mx::uint8 || da.ndim() < 2 || sa.ndim() != da.ndim() || !mx::issubdtype(ia.dtype(), mx::integer) ||
        (sa.dtype() != mx::float32 && sa.dtype() != mx::float16))
      throw bridge_error("quantized gather takes uint8 data [rows, ..., bytes], integer indices and float scales");
    int64_t rows = da.shape(0), rest = 1, pd = da.shape(-1), d = pd * (8 / bits), nb = (d + block - 1) / block;
    for (int k = 1; k + 1 < static_cast<int>(da.ndim()); k++) rest *= da.shape(k);
    if (sa.shape(0) != rows || sa.shape(-1) != nb || static_cast<int64_t>(sa.size()) != rows * rest * nb)
      throw bridge_error("quantized gather: scales do not fit the data");
    int64_t zpd = 0;
    if (zero_points) {
      const mx::array &za = arr(zero_points);
      zpd = (nb + 8 / bits - 1) / (8 / bits);
      if (za.dtype() != mx::uint8 || za.ndim() != da.ndim() || za.shape(0) != rows || za.shape(-1) < zpd ||
          static_cast<int64_t>(za.size()) != rows * rest * za.shape(-1))
        throw bridge_error("quantized gather: zero points do not fit the data");
      zpd = za.shape(-1);
    }
    int64_t n = static_cast<int64_t>(ia.size()), total = n * rest * d;
    mx::Shape shape = ia.shape();
    for (int k = 1; k < static_cast<int>(da.ndim()); k++) shape.push_back(k + 1 < static_cast<int>(da.ndim()) ? da.shape(k) : static_cast<int>(d));
    auto dev = scope_dev(s);
    if (total == 0) return mx::zeros(shape, sa.dtype(), dev);
    if (is_cpu_scope(s))
      return cpu_gather_bq(s, da, ia, sa, zero_points ? std::optional<mx::array>(arr(zero_points)) : std::nullopt, bits,
                           block, shape, rest, zpd);
    const int64_t limit = std::numeric_limits<int>::max();
    if (n > limit || rest > limit || d > limit || rows > limit || total > limit - 256)
      throw bridge_error("quantized gather: too many values for one launch");
    int threads = 256;
    return run_cuda_kernel(gather_bq_kernel,
        {da, ia, sa, zero_points ? arr(zero_points) : da,
         mx::array({static_cast<int>(n), static_cast<int>(rest), static_cast<int>(d), static_cast<int>(rows),
                    static_cast<int>(pd), static_cast<int>(nb), static_cast<int>(zpd)}, {7}, mx::int32)},
        {shape}, {sa.dtype()}, {static_cast<int>((total + threads - 1) / threads * threads), 1, 1}, {threads, 1, 1},
        {{"S", sa.dtype()}, {"BITS", bits}, {"BLOCK", static_cast<int>(block)}, {"HAS_ZP", zero_points != nullptr}}, s)
        .at(0);
  });
}

/* ORT_EP_MLX_DEQUANT_KERNEL=1: MatMulNBits' float32 dequantization for many rows by our kernel
 * (coalesced 16-byte stores) rather than MLX's. Off until an A/B on the GPU shows it pays: the
 * prompt's profile on the H200 had MLX's at 5.4 ms for 2 GB written, about 0.4 TB/s. */
static bool dequant_kernel_enabled() {
  static const bool on = [] {
    const char *v = std::getenv("ORT_EP_MLX_DEQUANT_KERNEL");
    return v && (!std::strcmp(v, "1") || !std::strcmp(v, "on"));
  }();
  return on;
}

mlxb_array *mlxb_dequant_f32(mlxb_scope *s, const mlxb_array *w, const mlxb_array *scales, const mlxb_array *biases,
                             int group_size, int bits) {
  return guard(s, "mlxb_dequant_f32", [&] {
    const mx::array &wa = arr(w), &sa = arr(scales), &ba = arr(biases);
    bool kernel = is_cuda_gpu(s) && dequant_kernel_enabled() && (bits == 2 || bits == 4 || bits == 8) &&
                  group_size >= 32 && group_size % 32 == 0 && wa.size() > 0;
    if (!kernel) return mx::dequantize(wa, sa, ba, group_size, bits, "affine", std::nullopt, mx::float32, scope_dev(s));
    int64_t k = dequant_width(wa, sa, ba, group_size, bits);
    enum { THREADS = 256 };
    int64_t words = static_cast<int64_t>(wa.size());
    if (words > std::numeric_limits<int>::max() - THREADS) throw bridge_error("dequantization: too many words");
    int grid = static_cast<int>((words + THREADS - 1) / THREADS * THREADS);
    return run_cuda_kernel(dequant_f32_kernel, {wa, sa, ba}, {{wa.shape(0), static_cast<int>(k)}}, {mx::float32},
                           {grid, 1, 1}, {THREADS, 1, 1}, {{"BITS", bits}, {"GROUP", group_size}}, s)
        .at(0);
  });
}
