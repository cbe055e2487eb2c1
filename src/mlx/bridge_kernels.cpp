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
 * Metal's metal_kernel (simdgroups for warps); that port is not written.
 *
 * Quantized GEMV: MatMulNBits for a few rows reading the activations in their own dtype and
 * writing the result in it, so the float32 casts around MLX's float32 quantized matmul (which
 * is exact; its float16 form accumulates in float16) leave the graph.
 *
 * KV append: the step's present cache (past rows, the new row, zeros) written by one kernel, the
 * new key rotated on the way. With the query's rotation folded into the attention kernel, a
 * GroupQueryAttention decode step is three kernels instead of the ~100 operations of its
 * composed form (rotary from the caches, the present's selects, the masked softmax). */
#include "mlx/bridge_internal.h"

#include "mlx/fast.h"
#include "mlx/primitives.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

using namespace mlxb_detail;

namespace {

enum { DECODE_WARPS = 8, DECODE_MAX_HEAD = 256 };
/* RMS norm: a warp per row from this many rows, for rows of up to 32 * RMS_ROWS_MAX_PER values */
enum { RMS_ROWS_MIN = 16, RMS_ROWS_MAX_PER = 64 };


const char *decode_attention_source = R"(
  constexpr int EPL = (HEAD + 31) / 32;
  const int bh = blockIdx.x / PARTS, part = blockIdx.x % PARTS;
  const int b = bh / HQ, h = bh % HQ, kvh = h / (HQ / HKV);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float scale = params[0], cap = params[1];
  const int S = k_shape[2];
  const long long raw_len = (long long)lens[b] + LEN_ADD;
  const int len = raw_len < 0 ? 0 : (raw_len > S ? S : (int)raw_len);
  const int start = WINDOW > 0 && len > WINDOW ? len - WINDOW : 0;
  const int chunk = (len - start + PARTS - 1) / PARTS; /* this block's share of [start, len) */
  const int lo = start + part * chunk, hi = lo + chunk < len ? lo + chunk : len;
  const T* qp = q + (size_t)bh * HEAD;
  const T* kp = k + (size_t)(b * HKV + kvh) * S * HEAD;
  const T* vp = v + (size_t)(b * HKV + kvh) * S * HEAD;
  float qv[EPL], acc[EPL];
  const int pos = ROT > 0 ? clamp_position((long long)rope_pos[b] + POS_ADD, cos_shape[0]) : 0;
  for (int i = 0; i < EPL; i++) {
    int d = lane + 32 * i;
    qv[i] = d < HEAD ? static_cast<float>(static_cast<T>(rotated<T, ROT, INTER>(qp, d, cos, sin, pos))) : 0.0f;
  }
  float m, l;
  attend_keys<HEAD, WARPS>(qv, lo, hi, warp, lane, scale, cap,
                           [&](int t, int, int d) { return static_cast<float>(kp[(size_t)t * HEAD + d]); },
                           [&](int t, int, int d) { return static_cast<float>(vp[(size_t)t * HEAD + d]); }, m, l, acc);
  __shared__ float sm[WARPS], sl[WARPS], sacc[WARPS][HEAD];
  if (lane == 0) { sm[warp] = m; sl[warp] = l; }
  for (int i = 0; i < EPL; i++) {
    int d = lane + 32 * i;
    if (d < HEAD) sacc[warp][d] = acc[i];
  }
  __syncthreads();
  float big;
  const float total = merged_sum(sm, sl, WARPS, &big);
  for (int d = threadIdx.x; d < HEAD; d += blockDim.x) {
    const float o = merged_output(sm, &sacc[0][d], WARPS, HEAD, big);
    if (PARTS == 1) out[(size_t)bh * HEAD + d] = static_cast<T>(total > 0.0f ? o / total : 0.0f);
    else part_acc[(size_t)blockIdx.x * HEAD + d] = o;
  }
  if (PARTS > 1 && threadIdx.x == 0) {
    part_max[blockIdx.x] = big;
    part_sum[blockIdx.x] = total;
  }
)";

/* Many query rows (a prompt): a warp per row, WARPS consecutive rows of one head a block. The
 * block walks the union of its rows' visible keys in tiles of KT rows that its threads load into
 * shared memory together (each key and value row read from memory once per block, not once per
 * warp), and each warp takes its own row's keys of the tile four at a time (attend_four: four
 * independent dot products, one rescale of the running state per four). The block per row of the
 * decode kernel spent most of a prompt's attention merging eight warps that had a few keys each
 * (46 us a layer for 128 rows on the H100), and a warp per row reading its keys from memory still
 * took 46 us: a chain of dependent loads. The same bounds, rotation and float32 online softmax. */
const char *rows_attention_source = R"(
  constexpr int EPL = (HEAD + 31) / 32;
  constexpr int KT = HEAD * sizeof(T) <= 256 ? 32 : 16; /* key rows a tile: K and V tiles <= 32 KB */
  const int ROWS = rows[0];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int tiles = (ROWS + WARPS - 1) / WARPS;
  const int h = blockIdx.x % HQ, tile = (blockIdx.x / HQ) % tiles, b = blockIdx.x / (HQ * tiles);
  const int row = tile * WARPS + warp, kvh = h / (HQ / HKV);
  const bool live = row < ROWS; /* a warp past the last row still loads tiles and meets the barriers */
  const size_t bh = ((size_t)b * ROWS + (live ? row : 0)) * HQ + h; /* q's and out's order [B, ROWS, HQ, HEAD] */
  const float scale = params[0], cap = params[1];
  const int S = k_shape[2];
  const long long raw_len = (long long)lens[b] + LEN_ADD;
  const int seq_len = raw_len < 0 ? 0 : (raw_len > S ? S : (int)raw_len);
  const int bound = (FIRST ? 0 : seq_len - ROWS) + row + 1;
  const int row_len = CAUSAL && bound < seq_len ? (bound < 0 ? 0 : bound) : seq_len;
  const int from = WIN_BOUND ? bound : row_len;
  const int row_start = WINDOW > 0 && from > WINDOW ? (from - WINDOW < row_len ? from - WINDOW : row_len) : 0;
  const int len = live ? row_len : 0, start = live ? row_start : 0;
  const T* qp = q + bh * HEAD;
  const T* kp = k + (size_t)(b * HKV + kvh) * S * HEAD;
  const T* vp = v + (size_t)(b * HKV + kvh) * S * HEAD;
  const int pos = ROT > 0 ? clamp_position(row_position(rope_pos, b, live ? row : 0, ROWS, POS_ROWS, POS_ADD), cos_shape[0]) : 0;
  float qv[EPL], acc[EPL];
#pragma unroll
  for (int i = 0; i < EPL; i++) {
    const int d = lane + 32 * i;
    qv[i] = d < HEAD ? static_cast<float>(static_cast<T>(rotated<T, ROT, INTER>(qp, d, cos, sin, pos))) : 0.0f;
    acc[i] = 0.0f;
  }
  /* the block's keys: from the lowest start to the highest end of its rows with keys */
  __shared__ int span_lo[WARPS], span_hi[WARPS];
  if (lane == 0) {
    span_lo[warp] = start < len ? start : 0x7fffffff;
    span_hi[warp] = start < len ? len : 0;
  }
  __syncthreads();
  int lo = 0x7fffffff, hi = 0;
  for (int w = 0; w < WARPS; w++) {
    lo = span_lo[w] < lo ? span_lo[w] : lo;
    hi = span_hi[w] > hi ? span_hi[w] : hi;
  }
  __shared__ __align__(16) T sk[KT][HEAD];
  __shared__ __align__(16) T sv[KT][HEAD];
  float m = -__int_as_float(0x7f800000), l = 0.0f;
  for (int t0 = lo; t0 < hi; t0 += KT) {
    const int n = hi - t0 < KT ? hi - t0 : KT;
    for (int e = threadIdx.x; e < n * HEAD; e += blockDim.x) {
      sk[e / HEAD][e % HEAD] = kp[(size_t)t0 * HEAD + e];
      sv[e / HEAD][e % HEAD] = vp[(size_t)t0 * HEAD + e];
    }
    __syncthreads();
    const int a = start > t0 ? start : t0, z = len < t0 + n ? len : t0 + n; /* this row's keys of the tile */
    for (int t = a; t < z; t += 4)
      attend_four<HEAD>(qv, t, z, lane, scale, cap, [&](int u, int, int d) { return static_cast<float>(sk[u - t0][d]); },
                        [&](int u, int, int d) { return static_cast<float>(sv[u - t0][d]); }, m, l, acc);
    __syncthreads();
  }
  if (!live) return;
#pragma unroll
  for (int i = 0; i < EPL; i++) {
    const int d = lane + 32 * i;
    if (d < HEAD) out[bh * HEAD + d] = static_cast<T>(l > 0.0f ? acc[i] / l : 0.0f);
  }
)";

/* A one-token decode step as one launch: blocks [0, B * HQ) attend as decode_attention_source does
 * (one block of WARPS warps per query row and head) but read the keys and values from the past
 * buffer and the new row (rotated here, rounded as the present holds it) rather than from the
 * present, which the blocks after them write as kv_append_source does (with IN_PLACE, a cache that
 * is past and present at once: the new row written into it as kv_write_source does). Neither part
 * reads what the other writes, so they need no order: the step launches one kernel where it
 * launched two. */
const char *decode_step_source = R"(
  constexpr int EPL = (HEAD + 31) / 32;
  const int B = past_k_shape[0], P = past_k_shape[2], PLEN = dims[0];
  const int att_blocks = B * HQ;
  if ((int)blockIdx.x >= att_blocks) { /* the present */
    const long long idx = (long long)(blockIdx.x - att_blocks) * blockDim.x + threadIdx.x;
    if (IN_PLACE) { /* the cache is past and present: the new row written into it, nothing else */
      if (idx < (long long)B * HKV * HEAD)
        kv_write_element<T, HEAD, ROT, INTER>(idx, HKV, P, lens, LEN_ADD - 1, past_k, past_v, k, v, rope_pos, POS_ADD,
                                              cos, sin, cos_shape[0]);
      return;
    }
    if (idx >= (long long)B * HKV * PLEN * HEAD) return;
    const int b = idx / ((long long)HKV * PLEN * HEAD);
    kv_append_element<T, HEAD, ROT, INTER>(idx, PLEN, P, 1, HKV, (long long)lens[b] + LEN_ADD - 1, past_k, past_v,
                                           k, v, rope_pos, false, POS_ADD, cos, sin, cos_shape[0], out_k, out_v);
    return;
  }
  const int bh = blockIdx.x, b = bh / HQ, h = bh % HQ, kvh = h / (HQ / HKV);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float scale = params[0], cap = params[1];
  const long long raw_len = (long long)lens[b] + LEN_ADD, at = raw_len - 1; /* the new row's place */
  const int len = raw_len < 0 ? 0 : (raw_len > PLEN ? PLEN : (int)raw_len);
  const int start = WINDOW > 0 && len > WINDOW ? len - WINDOW : 0;
  const T* pk = past_k + (size_t)(b * HKV + kvh) * P * HEAD;
  const T* pv = past_v + (size_t)(b * HKV + kvh) * P * HEAD;
  const T* kn = k + (size_t)(b * HKV + kvh) * HEAD;
  const int pos = ROT > 0 ? clamp_position((long long)rope_pos[b] + POS_ADD, cos_shape[0]) : 0;
  float qv[EPL], kr[EPL], vr[EPL], acc[EPL];
  for (int i = 0; i < EPL; i++) {
    const int d = lane + 32 * i;
    qv[i] = d < HEAD ? static_cast<float>(static_cast<T>(rotated<T, ROT, INTER>(q + (size_t)bh * HEAD, d, cos, sin, pos))) : 0.0f;
    kr[i] = d < HEAD ? static_cast<float>(static_cast<T>(rotated<T, ROT, INTER>(kn, d, cos, sin, pos))) : 0.0f;
    vr[i] = d < HEAD ? static_cast<float>(v[(size_t)(b * HKV + kvh) * HEAD + d]) : 0.0f;
  }
  /* row t of the present: the past buffer's below at (zeros past its rows), the new row at at */
  auto key = [&](int t, int i, int d) {
    return t < at ? (t < P ? static_cast<float>(pk[(size_t)t * HEAD + d]) : 0.0f) : (t == at ? kr[i] : 0.0f);
  };
  auto value = [&](int t, int i, int d) {
    return t < at ? (t < P ? static_cast<float>(pv[(size_t)t * HEAD + d]) : 0.0f) : (t == at ? vr[i] : 0.0f);
  };
  float m, l;
  attend_keys<HEAD, WARPS>(qv, start, len, warp, lane, scale, cap, key, value, m, l, acc);
  __shared__ float sm[WARPS], sl[WARPS], sacc[WARPS][HEAD];
  if (lane == 0) { sm[warp] = m; sl[warp] = l; }
  for (int i = 0; i < EPL; i++) {
    const int d = lane + 32 * i;
    if (d < HEAD) sacc[warp][d] = acc[i];
  }
  __syncthreads();
  float big;
  const float total = merged_sum(sm, sl, WARPS, &big);
  for (int d = threadIdx.x; d < HEAD; d += blockDim.x)
    out[(size_t)bh * HEAD + d] = static_cast<T>(total > 0.0f ? merged_output(sm, &sacc[0][d], WARPS, HEAD, big) / total : 0.0f);
)";

/* The partitions of one head's context (decode attention with PARTS > 1: each block's running
 * maximum, sum and unnormalized output over its share) merged as the single pass merges its warps. */
const char *decode_merge_source = R"(
  const int bh = blockIdx.x;
  const float* pm = part_max + (size_t)bh * PARTS;
  float big;
  const float total = merged_sum(pm, part_sum + (size_t)bh * PARTS, PARTS, &big);
  for (int d = threadIdx.x; d < HEAD; d += blockDim.x) {
    const float o = merged_output(pm, part_acc + (size_t)bh * PARTS * HEAD + d, PARTS, HEAD, big);
    out[(size_t)bh * HEAD + d] = static_cast<T>(total > 0.0f ? o / total : 0.0f);
  }
)";

/* The decode kernels' helpers: softmax states merged (below), and rotated(): channel d of row x
 * rotated (float32): pairs (j, j + ROT/2) or, interleaved, (2j, 2j + 1), by the cos/sin cache row
 * pos; channels past ROT (and every channel when ROT is 0) pass through. */
const char *rope_header = R"(
/* n running softmax states (maximum m, sum l, unnormalized output acc with stride between states)
 * merged: the largest maximum (big) and the rescaled sum, then one channel's rescaled output;
 * states that saw no key (m = -inf) add nothing. */
__device__ inline float merged_sum(const float* m, const float* l, int n, float* big) {
  const float neg_inf = -__int_as_float(0x7f800000);
  float b = neg_inf, total = 0.0f;
  for (int i = 0; i < n; i++) b = fmaxf(b, m[i]);
  for (int i = 0; i < n; i++) total += m[i] == neg_inf ? 0.0f : l[i] * expf(m[i] - b);
  *big = b;
  return total;
}
__device__ inline float merged_output(const float* m, const float* acc, int n, int stride, float big) {
  const float neg_inf = -__int_as_float(0x7f800000);
  float o = 0.0f;
  for (int i = 0; i < n; i++) o += m[i] == neg_inf ? 0.0f : acc[(size_t)i * stride] * expf(m[i] - big);
  return o;
}
__device__ inline int clamp_position(long long p, int rows) {
  return p < 0 ? 0 : (p >= rows ? rows - 1 : (int)p);
}
/* row j of sequence b's rotary position: one position per row, or the sequence's plus j */
template <typename P>
__device__ inline long long row_position(const P* pos, int b, int j, int rows, bool per_row, int add) {
  return per_row ? (long long)pos[(size_t)b * rows + j] + add : (long long)pos[b] + add + j;
}
template <typename T, int ROT, bool INTER, typename C>
__device__ inline float rotated(const T* x, int d, const C* cos, const C* sin, int pos) {
  if (ROT == 0 || d >= ROT) return static_cast<float>(x[d]);
  constexpr int HALF = ROT / 2;
  int j = INTER ? d / 2 : (d < HALF ? d : d - HALF);
  float x1 = static_cast<float>(x[INTER ? 2 * j : j]);
  float x2 = static_cast<float>(x[INTER ? 2 * j + 1 : j + HALF]);
  float c = static_cast<float>(cos[(size_t)pos * HALF + j]);
  float s = static_cast<float>(sin[(size_t)pos * HALF + j]);
  bool first = INTER ? (d % 2 == 0) : (d < HALF);
  return first ? x1 * c - x2 * s : x1 * s + x2 * c;
}
/* Element idx of a present cache [B, HKV, PLEN, HEAD]: the past buffer's rows below at (zeros past its
 * P rows), new row j = t - at of ROWS at t (k rotated at its position), zeros after. */
template <typename T, int HEAD, int ROT, bool INTER, typename R, typename C>
__device__ inline void kv_append_element(long long idx, int PLEN, int P, int ROWS, int HKV, long long at,
                                         const T* past_k, const T* past_v, const T* k, const T* v, const R* rope_pos,
                                         bool pos_rows, int pos_add, const C* cos, const C* sin, int cos_rows,
                                         T* out_k, T* out_v) {
  const int d = idx % HEAD;
  const long long row = idx / HEAD;
  const int t = row % PLEN;
  const long long bh = row / PLEN;
  const int b = bh / HKV, h = bh % HKV;
  const long long j = t - at; /* the new row this one takes, when in [0, ROWS) */
  T kv = static_cast<T>(0.0f), vv = static_cast<T>(0.0f);
  if (t < at) {
    if (t < P) {
      kv = past_k[(bh * P + t) * HEAD + d];
      vv = past_v[(bh * P + t) * HEAD + d];
    }
  } else if (j < ROWS) {
    const int pos = ROT > 0 ? clamp_position(row_position(rope_pos, b, (int)j, ROWS, pos_rows, pos_add), cos_rows) : 0;
    const size_t fresh = (((size_t)b * ROWS + j) * HKV + h) * HEAD;
    kv = static_cast<T>(rotated<T, ROT, INTER>(k + fresh, d, cos, sin, pos));
    vv = v[fresh + d];
  }
  out_k[idx] = kv;
  out_v[idx] = vv;
}
/* Element idx of the new rows [B, HKV, HEAD] written into row at_pos[b] + at_add of caches k, v
 * [B, HKV, L, HEAD] that are past and present at once (k rotated on the way); nothing outside the
 * cache. The caches arrive as inputs: MLX has no in-place kernel outputs. */
template <typename T, int HEAD, int ROT, bool INTER, typename A, typename R, typename C>
__device__ inline void kv_write_element(long long idx, int HKV, int L, const A* at_pos, int at_add, const T* cache_k,
                                        const T* cache_v, const T* k, const T* v, const R* rope_pos, int pos_add,
                                        const C* cos, const C* sin, int cos_rows) {
  const int d = idx % HEAD;
  const long long bh = idx / HEAD;
  const int b = bh / HKV;
  const long long at = (long long)at_pos[b] + at_add;
  if (at < 0 || at >= L) return;
  const int pos = ROT > 0 ? clamp_position((long long)rope_pos[b] + pos_add, cos_rows) : 0;
  const_cast<T*>(cache_k)[(bh * L + at) * HEAD + d] = static_cast<T>(rotated<T, ROT, INTER>(k + bh * HEAD, d, cos, sin, pos));
  const_cast<T*>(cache_v)[(bh * L + at) * HEAD + d] = v[bh * HEAD + d];
}
/* Keys t0 .. t0 + 3 (those below hi; t0 is) of one query row into a warp's float32 online softmax
 * (running maximum m, sum l, unnormalized output acc[] of channels lane + 32 i): four independent dot
 * products whose loads are in flight together and whose shuffle reductions interleave, one rescale
 * per four keys. key(t, i, d) and value(t, i, d) give channel d = lane + 32 i of row t. The same
 * arithmetic as one key at a time (a NaN score poisons the state; scores all -inf give NaN), keys
 * past hi adding nothing. */
template <int HEAD, typename K, typename V>
__device__ inline void attend_four(const float* qv, int t0, int hi, int lane, float scale, float cap, K key, V value,
                                   float& m, float& l, float* acc) {
  constexpr int EPL = (HEAD + 31) / 32;
  float s[4];
#pragma unroll
  for (int j = 0; j < 4; j++) {
    float dot = 0.0f;
    if (t0 + j < hi) {
#pragma unroll
      for (int i = 0; i < EPL; i++) {
        const int d = lane + 32 * i;
        if (d < HEAD) dot += qv[i] * key(t0 + j, i, d);
      }
    }
    s[j] = dot;
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1)
#pragma unroll
    for (int j = 0; j < 4; j++) s[j] += __shfl_xor_sync(0xffffffffu, s[j], off);
  float top = -__int_as_float(0x7f800000);
#pragma unroll
  for (int j = 0; j < 4; j++) {
    s[j] *= scale;
    if (cap > 0.0f) s[j] = cap * tanhf(s[j] / cap);
    if (t0 + j < hi) top = fmaxf(top, s[j]);
  }
  const float mn = fmaxf(m, top), corr = expf(m - mn);
  float p[4];
  l *= corr;
#pragma unroll
  for (int j = 0; j < 4; j++) {
    p[j] = t0 + j < hi ? expf(s[j] - mn) : 0.0f;
    l += p[j];
  }
#pragma unroll
  for (int i = 0; i < EPL; i++) {
    const int d = lane + 32 * i;
    if (d >= HEAD) continue;
    float a = acc[i] * corr;
#pragma unroll
    for (int j = 0; j < 4; j++)
      if (t0 + j < hi) a += p[j] * value(t0 + j, i, d);
    acc[i] = a;
  }
  m = mn;
}
/* A warp's share of one query row's keys [lo, hi) in a float32 online softmax (attend_four: m, l and
 * acc[] as there): four consecutive keys from lo + 4 warp, then every 4 WARPS-th on. */
template <int HEAD, int WARPS, typename K, typename V>
__device__ inline void attend_keys(const float* qv, int lo, int hi, int warp, int lane, float scale, float cap, K key,
                                   V value, float& m, float& l, float* acc) {
  constexpr int EPL = (HEAD + 31) / 32;
  m = -__int_as_float(0x7f800000), l = 0.0f;
#pragma unroll
  for (int i = 0; i < EPL; i++) acc[i] = 0.0f;
  for (int t0 = lo + 4 * warp; t0 < hi; t0 += 4 * WARPS)
    attend_four<HEAD>(qv, t0, hi, lane, scale, cap, key, value, m, l, acc);
}
)";

const cuda_kernel_spec decode_attention_kernel = {
    "ort_ep_mlx_decode_attention", {"q", "k", "v", "lens", "params", "rope_pos", "cos", "sin", "order"},
    {"out", "part_max", "part_sum", "part_acc"}, decode_attention_source, rope_header, true};

const cuda_kernel_spec rows_attention_kernel = {
    "ort_ep_mlx_rows_attention", {"q", "k", "v", "lens", "params", "rope_pos", "cos", "sin", "rows"}, {"out"},
    rows_attention_source, rope_header, true};

const cuda_kernel_spec decode_step_kernel = {
    "ort_ep_mlx_decode_step", {"q", "past_k", "past_v", "k", "v", "lens", "params", "rope_pos", "cos", "sin", "dims"},
    {"out", "out_k", "out_v"}, decode_step_source, rope_header, true};

/* the in-place form writes through its cache inputs: they must not be copies (inputs row-major by
 * construction, as kv_write's) */
const cuda_kernel_spec decode_step_inplace_kernel = {
    "ort_ep_mlx_decode_step", {"q", "past_k", "past_v", "k", "v", "lens", "params", "rope_pos", "cos", "sin", "dims"},
    {"out", "out_k", "out_v"}, decode_step_source, rope_header, false};

const cuda_kernel_spec decode_merge_kernel = {
    "ort_ep_mlx_decode_merge", {"part_max", "part_sum", "part_acc"}, {"out"}, decode_merge_source, rope_header, true};

const char *kv_append_source = R"(
  /* P: the past buffer's rows (0 without one: its inputs are then placeholders, never read) */
  const int PLEN = plen[0], P = plen[1], ROWS = plen[2], B = plen[3], HKV = plen[4];
  const long long n = (long long)B * HKV * PLEN * HEAD;
  const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= n) return;
  const int b = idx / ((long long)HKV * PLEN * HEAD);
  const long long at = AT_ZERO ? 0 : (long long)at_pos[b] + AT_ADD;
  kv_append_element<T, HEAD, ROT, INTER>(idx, PLEN, P, ROWS, HKV, at, past_k, past_v, k, v, rope_pos, POS_ROWS, POS_ADD,
                                         cos, sin, cos_shape[0], out_k, out_v);
)";

const cuda_kernel_spec kv_append_kernel = {
    "ort_ep_mlx_kv_append", {"past_k", "past_v", "k", "v", "at_pos", "plen", "rope_pos", "cos", "sin"},
    {"out_k", "out_v"}, kv_append_source, rope_header, true};

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
 * where the float32 GEMM gives the infinity, so a non-finite hi sum stands alone. Blocks of 64 x 64
 * outputs (four warps of 32 x 32), 32 of K per step, the next step's loads in registers while the
 * tensor cores work; the K steps may be split over gridDim.z blocks, each writing float32 partial
 * sums that qgemm_reduce adds in a fixed order. */
const char *qgemm_header = R"(
__device__ __forceinline__ void ort_ep_mlx_mma16816(float* d, const uint32_t* a, const uint32_t* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
)";

const char *qgemm_split_source = R"(
  constexpr int BM = 64, BN = 64, BK = 32, LDS = BK + 8; /* halves per shared row: the pad spreads banks */
  constexpr int VPW = 32 / BITS;
  constexpr unsigned MASK = (1u << BITS) - 1u;
  constexpr int WPR = BK / VPW;          /* packed words of one weight row per step */
  constexpr int WLOADS = BN * WPR / 128; /* of them per thread */
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
  const int steps = K / BK, per = (steps + gridDim.z - 1) / gridDim.z;
  const int s_begin = blockIdx.z * per, s_end = s_begin + per < steps ? s_begin + per : steps;
  __shared__ __align__(16) __half sa[BM][LDS];
  __shared__ __align__(16) __half shi[BN][LDS];
  __shared__ __align__(16) __half slo[BN][LDS];
  const bool x16 = (reinterpret_cast<unsigned long long>(x) & 15ull) == 0;
  uint4 ra[2];
  uint32_t rw[WLOADS];
  float rs[WLOADS], rb[WLOADS];
  /* step s's activations and packed weights into registers (zeros past M and N) */
  auto fetch = [&](int s) {
    const int k0 = s * BK;
#pragma unroll
    for (int i = 0; i < 2; i++) {
      const int idx = tid + i * 128, m = m0 + idx / 4;
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
      const int idx = tid + i * 128, n = n0 + idx / WPR;
      const bool live = n < N;
      rw[i] = live ? w[(size_t)n * WORDS + k0 / VPW + idx % WPR] : 0u;
      rs[i] = live ? scales[(size_t)n * G + k0 / GROUP] : 0.0f;
      rb[i] = live ? biases[(size_t)n * G + k0 / GROUP] : 0.0f;
    }
  };
  /* the registers into shared memory, each weight as its two halves */
  auto stage = [&]() {
#pragma unroll
    for (int i = 0; i < 2; i++) {
      const int idx = tid + i * 128;
      *reinterpret_cast<uint4*>(&sa[idx / 4][(idx % 4) * 8]) = ra[i];
    }
#pragma unroll
    for (int i = 0; i < WLOADS; i++) {
      const int idx = tid + i * 128, r = idx / WPR, kk = (idx % WPR) * VPW;
      alignas(16) __half hi[VPW];
      alignas(16) __half lo[VPW];
#pragma unroll
      for (int j = 0; j < VPW; j++) {
        const float v = static_cast<float>((rw[i] >> (j * BITS)) & MASK) * rs[i] + rb[i];
        hi[j] = __float2half_rn(v);
        lo[j] = __float2half_rn(v - __half2float(hi[j]));
      }
      if constexpr (VPW % 8 == 0) {
#pragma unroll
        for (int j = 0; j < VPW; j += 8) {
          *reinterpret_cast<uint4*>(&shi[r][kk + j]) = *reinterpret_cast<const uint4*>(hi + j);
          *reinterpret_cast<uint4*>(&slo[r][kk + j]) = *reinterpret_cast<const uint4*>(lo + j);
        }
      } else {
#pragma unroll
        for (int j = 0; j < VPW; j++) {
          shi[r][kk + j] = hi[j];
          slo[r][kk + j] = lo[j];
        }
      }
    }
  };
  auto lds = [](const __half* p) { return *reinterpret_cast<const uint32_t*>(p); };
  float acc_hi[2][4][4], acc_lo[2][4][4];
#pragma unroll
  for (int i = 0; i < 2; i++)
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
      for (int r = 0; r < 4; r++) acc_hi[i][j][r] = acc_lo[i][j][r] = 0.0f;
  const int wm = (warp / 2) * 32, wn = (warp % 2) * 32; /* this warp's 32 x 32 of the block's 64 x 64 */
  if (s_begin < s_end) fetch(s_begin);
  for (int s = s_begin; s < s_end; s++) {
    __syncthreads();
    stage();
    __syncthreads();
    if (s + 1 < s_end) fetch(s + 1); /* in flight while the tensor cores work */
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      /* fragments of m16n8k16: A row gid (+8), B column gid, K pairs at 2 * tig (+8) */
      uint32_t a[2][4], bh[4][2], bl[4][2];
#pragma unroll
      for (int i = 0; i < 2; i++) {
        const int r = wm + i * 16 + gid;
        a[i][0] = lds(&sa[r][kk + 2 * tig]);
        a[i][1] = lds(&sa[r + 8][kk + 2 * tig]);
        a[i][2] = lds(&sa[r][kk + 2 * tig + 8]);
        a[i][3] = lds(&sa[r + 8][kk + 2 * tig + 8]);
      }
#pragma unroll
      for (int j = 0; j < 4; j++) {
        const int c = wn + j * 8 + gid;
        bh[j][0] = lds(&shi[c][kk + 2 * tig]);
        bh[j][1] = lds(&shi[c][kk + 2 * tig + 8]);
        bl[j][0] = lds(&slo[c][kk + 2 * tig]);
        bl[j][1] = lds(&slo[c][kk + 2 * tig + 8]);
      }
#pragma unroll
      for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
          ort_ep_mlx_mma16816(acc_hi[i][j], a[i], bh[j]);
          ort_ep_mlx_mma16816(acc_lo[i][j], a[i], bl[j]);
        }
    }
  }
  /* accumulator r of tile (i, j): row gid (+8 from r = 2), column 2 * tig + r % 2 */
#pragma unroll
  for (int i = 0; i < 2; i++)
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
      for (int r = 0; r < 4; r++) {
        const int m = m0 + wm + i * 16 + gid + (r / 2) * 8, n = n0 + wn + j * 8 + 2 * tig + r % 2;
        if (m >= M || n >= N) continue;
        const float h = acc_hi[i][j][r], sum = isfinite(h) ? h + acc_lo[i][j][r] : h;
        if (gridDim.z > 1) {
          partial[((size_t)blockIdx.z * M + m) * NT + col0 + n] = sum;
        } else {
          const float b = HAS_BIAS ? static_cast<float>(bias[n]) : 0.0f;
          const __half y = __float2half_rn(sum + b);
          out[(size_t)m * N + n] = posted ? __float2half_rn(__half2float(y) + __half2float(post[n])) : y;
        }
      }
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

/* KV write: the shared buffer's in-place form of the append. One thread per (sequence, head,
 * channel) of the new rows writes row at_b of the caches, which are the step's past and present
 * at once (onnxruntime-genai's past_present_share_buffer), so the cache is neither copied nor
 * handed back. The caches arrive as inputs (MLX has no in-place kernel outputs): the kernel
 * writes through them, and its one-element output orders the attention kernel after it. A
 * position outside the buffer writes nothing. */
const char *kv_write_source = R"(
  const int B = cache_k_shape[0], HKV = cache_k_shape[1], L = cache_k_shape[2];
  const long long n = (long long)B * HKV * HEAD;
  const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx == 0) done[0] = 1;
  if (idx >= n) return;
  kv_write_element<T, HEAD, ROT, INTER>(idx, HKV, L, at_pos, AT_ADD, cache_k, cache_v, k, v, rope_pos, POS_ADD, cos, sin,
                                        cos_shape[0]);
)";

/* ensure_row_contiguous off: a copy of a cache would take the writes instead of the cache. */
const cuda_kernel_spec kv_write_kernel = {
    "ort_ep_mlx_kv_write", {"cache_k", "cache_v", "k", "v", "at_pos", "rope_pos", "cos", "sin"}, {"done"},
    kv_write_source, rope_header, false};

} // namespace

namespace mlxb_detail {

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

/* Small integer offsets become template arguments; larger ones are a caller's mistake. */
int small_offset(int64_t v, const char *what) {
  if (v < -(1 << 20) || v > (1 << 20)) throw bridge_error(std::string(what) + ": offset out of range");
  return static_cast<int>(v);
}

/* The rope's arrays for a kernel (one-element constants when there is none: the kernels' inputs
 * are fixed) and its template arguments. Positions are read as positions[b] + add, from an integer
 * array of any shape holding one per sequence: no reshape or cast enters the graph for them. */
rope_inputs rope_for(const mlxb_rope *rope, int batch, int rows, int head, mx::Dtype t, mx::StreamOrDevice dev) {
  if (!rope) {
    mx::array one = mx::array({0.0f}, {1, 1}, t);
    return {mx::array({0}, {1}, mx::int64), one, one, 0, 0, false, false};
  }
  const mx::array &c = arr(rope->cos), &sn = arr(rope->sin), &p = arr(rope->positions);
  bool per_row = rows > 1 && p.size() == static_cast<size_t>(batch) * rows;
  if (c.ndim() != 2 || sn.shape() != c.shape() || c.shape(0) < 1 || rope->dims != 2 * c.shape(1) ||
      rope->dims > head || (!per_row && p.size() != static_cast<size_t>(batch)))
    throw bridge_error("rope: caches must be [max_position, dims / 2] with dims <= head size, one position per "
                       "sequence or per row");
  if (sn.dtype() != c.dtype()) throw bridge_error("rope: cos and sin caches of different dtypes");
  mx::array pos = mx::issubdtype(p.dtype(), mx::integer) ? p : mx::astype(p, mx::int64, dev);
  return {pos, c, sn, static_cast<int>(rope->dims), small_offset(rope->position_add, "rope"), rope->interleaved,
          per_row};
}

/* A per-sequence integer array (lengths, positions) as a kernel reads it: element b of any shape. */
mx::array per_sequence(const mx::array &a, int batch, const char *what, mx::StreamOrDevice dev) {
  if (a.size() != static_cast<size_t>(batch)) throw bridge_error(std::string(what) + ": one value per sequence");
  return mx::issubdtype(a.dtype(), mx::integer) ? a : mx::astype(a, mx::int64, dev);
}

/* A step's new rows, [B, H, 1, D] or [B, 1, H * D] (a projection's output as it comes: the same
 * bytes when the step has one token). */
void check_step_rows(const mx::array &x, int b, int heads, int d, const char *what) {
  bool split = x.ndim() == 4 && x.shape(0) == b && x.shape(1) == heads && x.shape(2) == 1 && x.shape(3) == d;
  bool packed = x.ndim() == 3 && x.shape(0) == b && x.shape(1) == 1 && x.shape(2) == heads * d;
  if (!split && !packed) throw bridge_error(std::string(what) + " must be [B, H, 1, D] or [B, 1, H * D]");
}

int check_new_rows(const mx::array &x, int b, int heads, int d, const char *what) {
  bool packed = x.ndim() == 3 && x.shape(0) == b && x.shape(1) >= 1 && x.shape(2) == heads * d;
  if (packed) return x.shape(1);
  check_step_rows(x, b, heads, d, what);
  return 1;
}

attn_span span_of(const mlxb_attn_rows *rows) {
  if (!rows) return {1, false, true, false};
  if (rows->rows < 1 || rows->rows > (1 << 20)) throw bridge_error("attention rows out of range");
  return {static_cast<int>(rows->rows), rows->first, !rows->bidirectional, rows->window_from_row};
}

} // namespace mlxb_detail

bool mlxb_decode_attention_available(const mlxb_scope *s, mlxb_dtype t, int64_t head_size) {
  bool float_type = t == MLXB_F32 || t == MLXB_F16 || t == MLXB_BF16;
  if (!s || !float_type || head_size <= 0 || head_size > DECODE_MAX_HEAD) return false;
  return is_cuda_gpu(s) || (is_cpu_scope(s) && cpu_decode_takes(s, to_mx(t)));
}

/* ORT_EP_MLX_ROWS_ATTENTION: unset or "gpu", MLX's CUDA backend; "all", CPU scopes too; "0", never */
bool mlxb_rows_attention_available(const mlxb_scope *s, mlxb_dtype t, int64_t head_size) {
  static const int mode = [] {
    const char *v = std::getenv("ORT_EP_MLX_ROWS_ATTENTION");
    if (!v || !std::strcmp(v, "gpu")) return 1;
    return !std::strcmp(v, "all") ? 2 : 0;
  }();
  if (!mlxb_decode_attention_available(s, t, head_size)) return false;
  return mode == 2 || (mode == 1 && is_cuda_gpu(s));
}

bool mlxb_decode_kv_write_available(const mlxb_scope *s, mlxb_dtype t, int64_t head_size) {
  return s && is_cuda_gpu(s) && mlxb_decode_attention_available(s, t, head_size);
}

/* Warps a one-token attention block walks its head's keys with (ORT_EP_MLX_DECODE_WARPS: 4, 8, 16 or
 * 32; 8 by default): a step at Qwen2.5-0.5B's shapes is 14 blocks, so more warps are the way to
 * more loads in flight per head without a merge launch. An A/B switch until measured. */
static int decode_warps() {
  static const int warps = [] {
    const char *v = std::getenv("ORT_EP_MLX_DECODE_WARPS");
    int n = v ? std::atoi(v) : DECODE_WARPS;
    return n == 4 || n == 16 || n == 32 ? n : static_cast<int>(DECODE_WARPS);
  }();
  return warps;
}

/* How many blocks share one head's context in decode attention (ORT_EP_MLX_DECODE_PARTS, at most
 * 64; 1, the single pass, by default): a step has one block per head and query, 14 for a batch of
 * one at Qwen2.5-0.5B's shapes on a GPU of 132 multiprocessors, so a long context is walked by few
 * of them in turn. Each partition keeps at least 32 rows of the cache. Off until measured
 * (scripts/gpu_runbook.sh's longctx step). */
static int decode_parts(int cache_rows) {
  static const int wanted = [] {
    const char *v = std::getenv("ORT_EP_MLX_DECODE_PARTS");
    int n = v ? std::atoi(v) : 1;
    return n < 1 ? 1 : (n > 64 ? 64 : n);
  }();
  int fit = cache_rows / 32;
  return std::max(1, std::min(wanted, fit));
}

/* Many query rows on MLX's CUDA backend: rows_attention_source, WARPS rows of one head a block. */
static mx::array rows_attention(const mlxb_scope *s, const mx::array &q, const mx::array &k, const mx::array &v,
                                const mx::array &lens, const mx::array &params, const rope_inputs &r,
                                const attn_span &span, int hq, int hkv, int d, int window, int length_add) {
  int b = k.shape(0);
  int64_t tiles = (span.rows + DECODE_WARPS - 1) / DECODE_WARPS, threads = DECODE_WARPS * 32;
  int64_t blocks = static_cast<int64_t>(b) * hq * tiles;
  if (blocks * threads > std::numeric_limits<int>::max()) throw bridge_error("decode attention: too many rows");
  return run_cuda_kernel(rows_attention_kernel,
      {q, k, v, lens, params, r.pos, r.cos, r.sin, mx::array({span.rows}, {1}, mx::int32)}, {q.shape()}, {q.dtype()},
      {static_cast<int>(blocks * threads), 1, 1}, {static_cast<int>(threads), 1, 1},
      {{"T", q.dtype()}, {"HEAD", d}, {"HQ", hq}, {"HKV", hkv}, {"WARPS", static_cast<int>(DECODE_WARPS)},
       {"WINDOW", window}, {"ROT", r.dims}, {"INTER", r.interleaved}, {"LEN_ADD", length_add}, {"POS_ADD", r.add},
       {"FIRST", span.first}, {"CAUSAL", span.causal}, {"WIN_BOUND", span.window_from_row}, {"POS_ROWS", r.per_row}},
      s).at(0);
}

mlxb_array *mlxb_decode_attention(mlxb_scope *s, const mlxb_array *q, const mlxb_array *k, const mlxb_array *v,
                                  const mlxb_array *lengths, int64_t length_add, const mlxb_attn_rows *rows,
                                  float scale, float softcap, int64_t window, const mlxb_rope *rope,
                                  const mlxb_array *after) {
  return guard(s, "mlxb_decode_attention", [&] {
    const mx::array &qa = arr(q), &ka = arr(k), &va = arr(v), &la = arr(lengths);
    if (ka.ndim() != 4 || va.ndim() != 4 || (qa.ndim() != 4 && qa.ndim() != 3))
      throw bridge_error("decode attention takes q [B, S, Hq * D] or [B, Hq, 1, D] and k, v [B, Hkv, T, D]");
    int b = ka.shape(0), hkv = ka.shape(1), len = ka.shape(2), d = ka.shape(3);
    attn_span span = span_of(rows);
    int hq = qa.ndim() == 4 ? qa.shape(1) : (d > 0 && span.rows > 0 ? qa.shape(2) / d : 0);
    if (check_new_rows(qa, b, hq, d, "decode attention: q") != span.rows)
      throw bridge_error("decode attention: q's rows are not the span's");
    if (va.shape() != ka.shape() || hkv <= 0 || hq <= 0 || hq % hkv || d > DECODE_MAX_HEAD)
      throw bridge_error("decode attention: shapes do not fit");
    if (!mlxb_decode_attention_available(s, from_mx(qa.dtype()), d))
      throw bridge_error("decode attention: not available for this dtype or device");
    mx::Dtype t = qa.dtype();
    auto dev = scope_dev(s);
    mx::array kk = mx::astype(ka, t, dev), vv = mx::astype(va, t, dev);
    int win = static_cast<int>(window > 0 && window < len ? window : 0);
    rope_inputs r = rope_for(rope, b, span.rows, d, t, dev);
    if (is_cpu_scope(s))
      return cpu_decode_attention(s, qa, kk, vv, per_sequence(la, b, "decode attention: lengths", dev),
                                  small_offset(length_add, "decode attention"), span, scale,
                                  softcap > 0 ? softcap : 0.0f, win, r);
    mx::array params = mx::array({scale, softcap > 0 ? softcap : 0.0f}, {2}, mx::float32);
    if (rows) { /* query rows of their own bounds: a warp each; the block per row is a decode step's */
      if (after) throw bridge_error("decode attention: rows take no ordering input");
      return rows_attention(s, qa, kk, vv, per_sequence(la, b, "decode attention: lengths", dev), params, r, span,
                            hq, hkv, d, win, small_offset(length_add, "decode attention"));
    }
    int warps = decode_warps(), threads = warps * 32, parts = decode_parts(len);
    int64_t heads = static_cast<int64_t>(b) * hq;
    if (heads * parts * threads > std::numeric_limits<int>::max()) throw bridge_error("decode attention: too many heads");
    int partials = static_cast<int>(heads * parts);
    auto outs = run_cuda_kernel(decode_attention_kernel,
        {qa, kk, vv, per_sequence(la, b, "decode attention: lengths", dev), params, r.pos, r.cos, r.sin,
         after ? arr(after) : mx::array({0}, {1}, mx::int32)},
        {qa.shape(), {partials}, {partials}, {partials, d}}, {t, mx::float32, mx::float32, mx::float32},
        {partials * threads, 1, 1}, {threads, 1, 1},
        {{"T", t}, {"HEAD", d}, {"HQ", hq}, {"HKV", hkv}, {"WARPS", warps}, {"WINDOW", win},
         {"ROT", r.dims}, {"INTER", r.interleaved}, {"LEN_ADD", small_offset(length_add, "decode attention")},
         {"POS_ADD", r.add}, {"PARTS", parts}},
        s, parts == 1 ? 0xeu : 0x1u); /* the output, or the partitions' running values */
    if (parts == 1) return outs.at(0);
    int merge_threads = (d + 31) / 32 * 32;
    return run_cuda_kernel(decode_merge_kernel, {outs.at(1), outs.at(2), outs.at(3)}, {qa.shape()}, {t},
                           {static_cast<int>(heads) * merge_threads, 1, 1}, {merge_threads, 1, 1},
                           {{"T", t}, {"HEAD", d}, {"PARTS", parts}}, s)
        .at(0);
  });
}

int mlxb_decode_kv_append(mlxb_scope *s, const mlxb_array *past_k, const mlxb_array *past_v, const mlxb_array *k,
                          const mlxb_array *v, const mlxb_array *at_positions, int64_t at_add, int64_t plen,
                          const mlxb_rope *rope, mlxb_array **present_k, mlxb_array **present_v) {
  if (present_k) *present_k = nullptr;
  if (present_v) *present_v = nullptr;
  return guard_status(s, "mlxb_decode_kv_append", [&] {
    if (!present_k || !present_v) throw null_arg{};
    const mx::array &pka = arr(past_k), &pva = arr(past_v), &ka = arr(k), &va = arr(v);
    if (pka.ndim() != 4 || pva.shape() != pka.shape())
      throw bridge_error("kv append takes past k, v [B, Hkv, P, D] (P may be 0) and the new rows");
    int b = pka.shape(0), hkv = pka.shape(1), d = pka.shape(3), past_rows = pka.shape(2);
    bool has_past = past_rows > 0;
    int rows = check_new_rows(ka, b, hkv, d, "kv append: k");
    if (check_new_rows(va, b, hkv, d, "kv append: v") != rows) throw bridge_error("kv append: k and v rows differ");
    if (plen < past_rows || plen < 1 || plen > std::numeric_limits<int>::max() || d > DECODE_MAX_HEAD)
      throw bridge_error("kv append: shapes do not fit");
    if (!mlxb_decode_attention_available(s, from_mx(ka.dtype()), d))
      throw bridge_error("kv append: not available for this dtype or device");
    mx::Dtype t = ka.dtype();
    auto dev = scope_dev(s);
    rope_inputs r = rope_for(rope, b, rows, d, t, dev);
    bool at_zero = at_positions == nullptr;
    mx::array at = at_zero ? mx::array({0}, {1}, mx::int64) : per_sequence(arr(at_positions), b, "kv append: positions", dev);
    /* without past rows the new rows stand in for the past buffers (never read: P is 0): a zeros
     * placeholder was one more operation, and on the H100 a 536 us fill of a fresh buffer */
    mx::array pk = has_past ? mx::astype(pka, t, dev) : ka;
    mx::array pv = has_past ? mx::astype(pva, t, dev) : ka;
    int add = small_offset(at_add, "kv append");
    if (is_cpu_scope(s)) {
      auto [out_k, out_v] = cpu_kv_append(s, pk, pv, past_rows, ka, mx::astype(va, t, dev), rows, at, at_zero, add,
                                          static_cast<int>(plen), kv_dims{b, hkv, d}, r);
      *present_k = scope_keep(s, out_k);
      *present_v = scope_keep(s, out_v);
      return;
    }
    int threads = 256;
    int64_t n = static_cast<int64_t>(b) * hkv * plen * d;
    if (n > std::numeric_limits<int>::max()) throw bridge_error("kv append: cache too large for one launch");
    mx::Shape shape = {b, hkv, static_cast<int>(plen), d};
    auto outs = run_cuda_kernel(kv_append_kernel,
        {pk, pv, ka, mx::astype(va, t, dev), at, mx::array({static_cast<int>(plen), past_rows, rows, b, hkv}, {5}, mx::int32), r.pos,
         r.cos, r.sin},
        {shape, shape}, {t, t}, {static_cast<int>(n), 1, 1}, {threads, 1, 1},
        {{"T", t}, {"HEAD", d}, {"ROT", r.dims}, {"INTER", r.interleaved}, {"AT_ADD", add}, {"POS_ADD", r.add},
         {"AT_ZERO", at_zero}, {"POS_ROWS", r.per_row}},
        s);
    *present_k = scope_keep(s, outs.at(0));
    *present_v = scope_keep(s, outs.at(1));
  });
}

bool mlxb_decode_step_available(const mlxb_scope *s, mlxb_dtype t, int64_t head_size, int64_t plen) {
  static const bool on = env_switch_on("ORT_EP_MLX_DECODE_FUSED");
  return on && s && is_cuda_gpu(s) && mlxb_decode_attention_available(s, t, head_size) && plen > 0 &&
         plen <= std::numeric_limits<int>::max() && decode_parts(static_cast<int>(plen)) == 1;
}

/* The step kernel's launch: the present as new arrays, or with in_place the caches written through. */
static std::vector<mx::array> decode_step_launch(mlxb_scope *s, const mlxb_array *q, const mlxb_array *past_k,
                                                 const mlxb_array *past_v, const mlxb_array *k, const mlxb_array *v,
                                                 const mlxb_array *lengths, int64_t length_add, int64_t plen,
                                                 bool in_place, float scale, float softcap, int64_t window,
                                                 const mlxb_rope *rope) {
  const mx::array &qa = arr(q), &pka = arr(past_k), &pva = arr(past_v), &ka = arr(k), &va = arr(v);
  if (pka.ndim() != 4 || pva.shape() != pka.shape() || (qa.ndim() != 4 && qa.ndim() != 3))
    throw bridge_error("decode step takes q [B, 1, Hq * D], past k, v [B, Hkv, P, D] and the new rows");
  int b = pka.shape(0), hkv = pka.shape(1), d = pka.shape(3), past_rows = pka.shape(2);
  int hq = qa.ndim() == 4 ? qa.shape(1) : (d > 0 ? qa.shape(2) / d : 0);
  check_step_rows(qa, b, hq, d, "decode step: q");
  check_step_rows(ka, b, hkv, d, "decode step: k");
  check_step_rows(va, b, hkv, d, "decode step: v");
  if (hkv <= 0 || hq <= 0 || hq % hkv || d > DECODE_MAX_HEAD || past_rows < 1 || plen < past_rows ||
      (in_place && plen != past_rows))
    throw bridge_error("decode step: shapes do not fit");
  mx::Dtype t = qa.dtype();
  if (in_place && (pka.dtype() != t || pva.dtype() != t || ka.dtype() != t || va.dtype() != t))
    throw bridge_error("decode step: the caches and the new rows must share one dtype (no copy may take the writes)");
  if (!mlxb_decode_step_available(s, from_mx(t), d, plen))
    throw bridge_error("decode step: not available for this dtype, device or context");
  auto dev = scope_dev(s);
  rope_inputs r = rope_for(rope, b, 1, d, t, dev);
  /* the two parts share the block size: the present's blocks take a thread per element */
  int warps = decode_warps(), threads = warps * 32;
  int64_t att = static_cast<int64_t>(b) * hq, n = static_cast<int64_t>(b) * hkv * (in_place ? 1 : plen) * d;
  int64_t blocks = att + (n + threads - 1) / threads;
  if (blocks * threads > std::numeric_limits<int>::max()) throw bridge_error("decode step: cache too large for one launch");
  int win = static_cast<int>(window > 0 && window < plen ? window : 0);
  mx::Shape present = {b, hkv, static_cast<int>(plen), d};
  /* in place nothing may be a copy: the caches as they are, the rest row-major by construction */
  auto input = [&](const mx::array &x) { return in_place ? row_major(x, dev) : x; };
  return run_cuda_kernel(in_place ? decode_step_inplace_kernel : decode_step_kernel,
      {input(qa), in_place ? pka : mx::astype(pka, t, dev), in_place ? pva : mx::astype(pva, t, dev), input(ka),
       input(mx::astype(va, t, dev)), input(per_sequence(arr(lengths), b, "decode step: lengths", dev)),
       mx::array({scale, softcap > 0 ? softcap : 0.0f}, {2}, mx::float32), input(r.pos), input(r.cos), input(r.sin),
       mx::array({static_cast<int>(plen)}, {1}, mx::int32)},
      {qa.shape(), present, present}, {t, t, t}, {static_cast<int>(blocks * threads), 1, 1}, {threads, 1, 1},
      {{"T", t}, {"HEAD", d}, {"HQ", hq}, {"HKV", hkv}, {"WARPS", warps}, {"WINDOW", win},
       {"ROT", r.dims}, {"INTER", r.interleaved}, {"LEN_ADD", small_offset(length_add, "decode step")},
       {"POS_ADD", r.add}, {"IN_PLACE", in_place}},
      s, in_place ? 0x6u : 0u); /* in place: no present arrays */
}

mlxb_array *mlxb_decode_step(mlxb_scope *s, const mlxb_array *q, const mlxb_array *past_k, const mlxb_array *past_v,
                             const mlxb_array *k, const mlxb_array *v, const mlxb_array *lengths, int64_t length_add,
                             int64_t plen, float scale, float softcap, int64_t window, const mlxb_rope *rope,
                             mlxb_array **present_k, mlxb_array **present_v) {
  if (present_k) *present_k = nullptr;
  if (present_v) *present_v = nullptr;
  return guard(s, "mlxb_decode_step", [&] {
    if (!present_k || !present_v) throw null_arg{};
    auto outs = decode_step_launch(s, q, past_k, past_v, k, v, lengths, length_add, plen, false, scale, softcap, window,
                                   rope);
    *present_k = scope_keep(s, outs.at(1));
    *present_v = scope_keep(s, outs.at(2));
    return outs.at(0);
  });
}

mlxb_array *mlxb_decode_step_in_place(mlxb_scope *s, const mlxb_array *q, const mlxb_array *cache_k,
                                      const mlxb_array *cache_v, const mlxb_array *k, const mlxb_array *v,
                                      const mlxb_array *lengths, int64_t length_add, float scale, float softcap,
                                      int64_t window, const mlxb_rope *rope) {
  return guard(s, "mlxb_decode_step_in_place", [&] {
    int64_t rows = cache_k ? arr(cache_k).ndim() == 4 ? arr(cache_k).shape(2) : 0 : 0;
    return decode_step_launch(s, q, cache_k, cache_v, k, v, lengths, length_add, rows, true, scale, softcap, window,
                              rope).at(0);
  });
}

mlxb_array *mlxb_decode_kv_write(mlxb_scope *s, const mlxb_array *cache_k, const mlxb_array *cache_v,
                                  const mlxb_array *k, const mlxb_array *v, const mlxb_array *at_positions,
                                  int64_t at_add, const mlxb_rope *rope) {
  return guard(s, "mlxb_decode_kv_write", [&] {
    const mx::array &ck = arr(cache_k), &cv = arr(cache_v), &ka = arr(k), &va = arr(v), &at = arr(at_positions);
    if (ck.ndim() != 4 || cv.shape() != ck.shape())
      throw bridge_error("kv write takes caches k, v [B, Hkv, L, D] and the new rows");
    int b = ck.shape(0), hkv = ck.shape(1), d = ck.shape(3);
    check_step_rows(ka, b, hkv, d, "kv write: k");
    check_step_rows(va, b, hkv, d, "kv write: v");
    if (ck.dtype() != ka.dtype() || cv.dtype() != ka.dtype() || va.dtype() != ka.dtype())
      throw bridge_error("kv write: the caches and the new rows must share one dtype (no copy may take the writes)");
    if (d > DECODE_MAX_HEAD) throw bridge_error("kv write: shapes do not fit");
    if (!mlxb_decode_kv_write_available(s, from_mx(ka.dtype()), d))
      throw bridge_error("kv write runs on MLX's CUDA backend only");
    mx::Dtype t = ka.dtype();
    auto dev = scope_dev(s);
    rope_inputs r = rope_for(rope, b, 1, d, t, dev);
    int threads = 256;
    int64_t n = static_cast<int64_t>(b) * hkv * d;
    int64_t grid = (n + threads - 1) / threads * threads;
    if (grid > std::numeric_limits<int>::max()) throw bridge_error("kv write: too many rows for one launch");
    auto outs = run_cuda_kernel(kv_write_kernel,
        {ck, cv, row_major(ka, dev), row_major(va, dev), per_sequence(at, b, "kv write: positions", dev), r.pos,
         r.cos, r.sin},
        {{1}}, {mx::int32}, {static_cast<int>(grid), 1, 1}, {threads, 1, 1},
        {{"T", t}, {"HEAD", d}, {"ROT", r.dims}, {"INTER", r.interleaved}, {"AT_ADD", small_offset(at_add, "kv write")},
         {"POS_ADD", r.add}},
        s);
    return outs.at(0);
  });
}

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
  static const bool on = [] {
    const char *v = std::getenv("ORT_EP_MLX_NORM_IN_GEMV");
    return v && !std::strcmp(v, "1");
  }();
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
  enum { TILE = 64, THREADS = 128, STEP = 32, REDUCE_THREADS = 256 };
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
  int64_t tiles_m = (m + TILE - 1) / TILE;
  if (tiles_m > 65535 || tiles_n * THREADS > std::numeric_limits<int>::max())
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
                              {static_cast<int>(tiles_n * THREADS), static_cast<int>(tiles_m), splits}, {THREADS, 1, 1},
                              {{"BITS", bits}, {"GROUP", group_size}, {"HAS_BIAS", bias != nullptr},
                               {"POST", post_mask}, {"SETS", n_sets}},
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
  return on && s && is_cuda_gpu(s);
}

mlxb_array *mlxb_gather_bq(mlxb_scope *s, const mlxb_array *data, const mlxb_array *indices, const mlxb_array *scales,
                           const mlxb_array *zero_points, int bits, int64_t block) {
  return guard(s, "mlxb_gather_bq", [&] {
    const mx::array &da = arr(data), &ia = arr(indices), &sa = arr(scales);
    if (!mlxb_gather_bq_available(s)) throw bridge_error("quantized gather: MLX's CUDA backend only");
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
    const int64_t limit = std::numeric_limits<int>::max();
    if (n > limit || rest > limit || d > limit || rows > limit || total > limit - 256)
      throw bridge_error("quantized gather: too many values for one launch");
    mx::Shape shape = ia.shape();
    for (int k = 1; k < static_cast<int>(da.ndim()); k++) shape.push_back(k + 1 < static_cast<int>(da.ndim()) ? da.shape(k) : static_cast<int>(d));
    auto dev = scope_dev(s);
    if (total == 0) return mx::zeros(shape, sa.dtype(), dev);
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
    return run_cuda_kernel(int_reduce_kernel, {xa}, {{xa.shape(0)}}, {xa.dtype()}, {static_cast<int>(grid), 1, 1},
                           {THREADS, 1, 1}, {{"T", xa.dtype()}, {"MEAN", mean}}, s)
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
          {"LEN_ADD", 1}, {"POS_ADD", 0}, {"PARTS", 1}}},
        {&decode_attention_kernel, attn, {h, f, f, f},
         {{"T", h}, {"HEAD", 64}, {"HQ", 14}, {"HKV", 2}, {"WARPS", 8}, {"WINDOW", 0}, {"ROT", 64}, {"INTER", false},
          {"LEN_ADD", 1}, {"POS_ADD", 0}, {"PARTS", 8}}},
        {&rows_attention_kernel, prompt_attn, {h},
         {{"T", h}, {"HEAD", 64}, {"HQ", 14}, {"HKV", 2}, {"WARPS", 8}, {"WINDOW", 0}, {"ROT", 64}, {"INTER", false},
          {"LEN_ADD", 1}, {"POS_ADD", 0}, {"FIRST", true}, {"CAUSAL", true}, {"WIN_BOUND", false},
          {"POS_ROWS", true}}},
        {&decode_merge_kernel, {z({112}, f), z({112}, f), z({112, 64}, f)}, {h}, {{"T", h}, {"HEAD", 64}, {"PARTS", 8}}},
        {&decode_step_kernel, step, {h, h, h},
         {{"T", h}, {"HEAD", 64}, {"HQ", 14}, {"HKV", 2}, {"WARPS", 8}, {"WINDOW", 0}, {"ROT", 64}, {"INTER", false},
          {"LEN_ADD", 1}, {"POS_ADD", 0}, {"IN_PLACE", false}}},
        {&decode_step_inplace_kernel, step, {h, h, h},
         {{"T", h}, {"HEAD", 64}, {"HQ", 14}, {"HKV", 2}, {"WARPS", 8}, {"WINDOW", 0}, {"ROT", 64}, {"INTER", true},
          {"LEN_ADD", 1}, {"POS_ADD", 0}, {"IN_PLACE", true}}},
        {&kv_append_kernel, past, {h, h},
         {{"T", h}, {"HEAD", 64}, {"ROT", 64}, {"INTER", false}, {"AT_ADD", 0}, {"POS_ADD", 0},
          {"AT_ZERO", false}, {"POS_ROWS", false}}},
        {&kv_append_kernel, prompt, {h, h},
         {{"T", h}, {"HEAD", 64}, {"ROT", 64}, {"INTER", false}, {"AT_ADD", 0}, {"POS_ADD", 0},
          {"AT_ZERO", true}, {"POS_ROWS", true}}},
        {&dequant_f32_kernel, {z({128, 112}, u), z({128, 28}, f), z({128, 28}, f)}, {f}, {{"BITS", 4}, {"GROUP", 32}}},
        {&dequant_f32_kernel, {z({128, 224}, u), z({128, 7}, f), z({128, 7}, f)}, {f}, {{"BITS", 8}, {"GROUP", 128}}},
        {&qgemm_split_kernel, qgemm_one, {h, h, h, f},
         {{"BITS", 4}, {"GROUP", 32}, {"HAS_BIAS", true}, {"POST", 1}, {"SETS", 1}}},
        {&qgemm_split_kernel, qgemm_three, {h, h, h, f},
         {{"BITS", 4}, {"GROUP", 32}, {"HAS_BIAS", false}, {"POST", 7}, {"SETS", 3}}},
        {&qgemm_split_kernel, qgemm_eight, {h, h, h, f},
         {{"BITS", 8}, {"GROUP", 128}, {"HAS_BIAS", false}, {"POST", 0}, {"SETS", 2}}},
        {&qgemm_reduce_kernel, {z({4, 80, 384}, f), z({128}, h), z({128}, h), z({128}, h), z({128}, h), z({3}, mx::int32)},
         {h, h, h}, {{"HAS_BIAS", false}, {"POST", 5}}},
        {&int_reduce_kernel, {z({2, 4096}, i64)}, {i64}, {{"T", i64}, {"MEAN", false}}},
        {&gather_bq_kernel, {z({151936, 448}, mx::uint8), z({1, 1}, i64), z({151936, 28}, h), z({151936, 14}, mx::uint8),
                             z({7}, mx::int32)},
         {h}, {{"S", h}, {"BITS", 4}, {"BLOCK", 32}, {"HAS_ZP", true}}},
        {&int_reduce_kernel, {z({3, 7}, mx::int32)}, {mx::int32}, {{"T", mx::int32}, {"MEAN", true}}},
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
