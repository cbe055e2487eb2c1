/* Attention kernels of our own on MLX's CUDA backend (their launch: bridge_kernel_cache.cpp).
 *
 * Decode attention: one query row per (sequence, head) against a KV cache of S rows of which
 * the first len[b] are visible (the rest padding or rows of later steps), optionally only the
 * last `window` of them, optionally with scores soft-capped. One thread block per (sequence,
 * query head); its warps take keys four at a time, each keeping an online softmax (running max,
 * running sum, weighted value sum) in float32; the warps' partial results are merged at the end.
 * Everything is float32 inside, the result is rounded once to the query's dtype: what the composed
 * lowering computes, in one kernel that reads each cache row once. The same design maps onto
 * Metal's metal_kernel (simdgroups for warps); that port is not written.
 *
 * KV append: the step's present cache (past rows, the new rows, zeros) written by one kernel, the
 * new keys rotated on the way; KV write, its in-place form for a shared buffer. With the query's
 * rotation folded into the attention kernel, a GroupQueryAttention decode step is one or two
 * kernels instead of the ~100 operations of its composed form (rotary from the caches, the
 * present's selects, the masked softmax); a prompt's rows are a warp each (rows_attention). */
#include "mlx/bridge_kernel_specs.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

using namespace mlxb_detail;

namespace {

/* ROWS_WARPS: query rows a many-row attention block takes (a warp each); ONE_TOKEN_WARPS: the warps a
 * one-token block walks its head's keys with, by default (16: 23 -> 15 us a layer on the H100). */
enum { ROWS_WARPS = 8, ONE_TOKEN_WARPS = 16, DECODE_MAX_HEAD = 256 };

} // namespace

namespace mlxb_detail {

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
  attend_keys<HEAD, WARPS, EARLY>(qv, lo, hi, warp, lane, scale, cap,
                           [&](int t, int, int d) { return static_cast<float>(kp[(size_t)t * HEAD + d]); },
                           [&](int t, int, int d) { return static_cast<float>(vp[(size_t)t * HEAD + d]); }, m, l, acc);
  __shared__ float sm[WARPS], sl[WARPS], sacc[WARPS][HEAD];
  if (lane == 0) { sm[warp] = m; sl[warp] = l; }
  for (int i = 0; i < EPL; i++) {
    int d = lane + 32 * i;
    if (d < HEAD) sacc[warp][d] = acc[i];
  }
  __syncthreads();
  __shared__ float sw[WARPS];
  float big;
  const float total = merged_weights(sm, sl, WARPS, sw, &big);
  for (int d = threadIdx.x; d < HEAD; d += blockDim.x) {
    const float o = weighted_output(sm, sw, &sacc[0][d], WARPS, HEAD);
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
  /* a tile's rows are contiguous in k and v: 16 bytes a thread where the rows fill them */
  constexpr int VEC = 16 / sizeof(T);
  const bool vec = HEAD % VEC == 0 && ((reinterpret_cast<unsigned long long>(kp) |
                                        reinterpret_cast<unsigned long long>(vp)) & 15ull) == 0;
  for (int t0 = lo; t0 < hi; t0 += KT) {
    const int n = hi - t0 < KT ? hi - t0 : KT;
    if (vec) {
      const uint4* kt = reinterpret_cast<const uint4*>(kp + (size_t)t0 * HEAD);
      const uint4* vt = reinterpret_cast<const uint4*>(vp + (size_t)t0 * HEAD);
      for (int e = threadIdx.x; e < n * HEAD / VEC; e += blockDim.x) {
        reinterpret_cast<uint4*>(&sk[0][0])[e] = kt[e];
        reinterpret_cast<uint4*>(&sv[0][0])[e] = vt[e];
      }
    } else {
      for (int e = threadIdx.x; e < n * HEAD; e += blockDim.x) {
        sk[e / HEAD][e % HEAD] = kp[(size_t)t0 * HEAD + e];
        sv[e / HEAD][e % HEAD] = vp[(size_t)t0 * HEAD + e];
      }
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
  attend_keys<HEAD, WARPS, EARLY>(qv, start, len, warp, lane, scale, cap, key, value, m, l, acc);
  __shared__ float sm[WARPS], sl[WARPS], sacc[WARPS][HEAD];
  if (lane == 0) { sm[warp] = m; sl[warp] = l; }
  for (int i = 0; i < EPL; i++) {
    const int d = lane + 32 * i;
    if (d < HEAD) sacc[warp][d] = acc[i];
  }
  __syncthreads();
  __shared__ float sw[WARPS];
  float big;
  const float total = merged_weights(sm, sl, WARPS, sw, &big);
  for (int d = threadIdx.x; d < HEAD; d += blockDim.x)
    out[(size_t)bh * HEAD + d] = static_cast<T>(total > 0.0f ? weighted_output(sm, sw, &sacc[0][d], WARPS, HEAD) / total : 0.0f);
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
/* The same merge by a whole block, for n states in shared memory (n <= blockDim.x): each state's
 * weight exp(m - big) (0 for a state that saw no key) computed once, by thread i for state i, into
 * w; then the rescaled sum, and per channel the weighted outputs. The values and the order of each
 * sum are merged_sum's and merged_output's; the n exponentials run side by side instead of 2 n in a
 * row (a one-token block merges 16 warps). Every thread of the block calls it (a barrier inside). */
__device__ inline float merged_weights(const float* m, const float* l, int n, float* w, float* big) {
  const float neg_inf = -__int_as_float(0x7f800000);
  float b = neg_inf;
  for (int i = 0; i < n; i++) b = fmaxf(b, m[i]);
  if ((int)threadIdx.x < n) w[threadIdx.x] = m[threadIdx.x] == neg_inf ? 0.0f : expf(m[threadIdx.x] - b);
  __syncthreads();
  float total = 0.0f;
  for (int i = 0; i < n; i++) total += m[i] == neg_inf ? 0.0f : l[i] * w[i];
  *big = b;
  return total;
}
__device__ inline float weighted_output(const float* m, const float* w, const float* acc, int n, int stride) {
  const float neg_inf = -__int_as_float(0x7f800000);
  float o = 0.0f;
  for (int i = 0; i < n; i++) o += m[i] == neg_inf ? 0.0f : acc[(size_t)i * stride] * w[i];
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
template <int HEAD, bool EARLY = false, typename K, typename V>
__device__ inline void attend_four(const float* qv, int t0, int hi, int lane, float scale, float cap, K key, V value,
                                   float& m, float& l, float* acc) {
  constexpr int EPL = (HEAD + 31) / 32;
  /* EARLY: the four value rows loaded with the key rows, before the scores they do not depend on,
   * so a group of keys waits on memory once rather than twice (the same arithmetic) */
  float vf[4][EPL]; /* unused (and gone) without EARLY */
  if constexpr (EARLY) {
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
      for (int i = 0; i < EPL; i++) {
        const int d = lane + 32 * i;
        vf[j][i] = t0 + j < hi && d < HEAD ? value(t0 + j, i, d) : 0.0f;
      }
  }
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
      if (t0 + j < hi) a += p[j] * (EARLY ? vf[j][i] : value(t0 + j, i, d));
    acc[i] = a;
  }
  m = mn;
}
/* A warp's share of one query row's keys [lo, hi) in a float32 online softmax (attend_four: m, l and
 * acc[] as there): four consecutive keys from lo + 4 warp, then every 4 WARPS-th on. */
template <int HEAD, int WARPS, bool EARLY = false, typename K, typename V>
__device__ inline void attend_keys(const float* qv, int lo, int hi, int warp, int lane, float scale, float cap, K key,
                                   V value, float& m, float& l, float* acc) {
  constexpr int EPL = (HEAD + 31) / 32;
  m = -__int_as_float(0x7f800000), l = 0.0f;
#pragma unroll
  for (int i = 0; i < EPL; i++) acc[i] = 0.0f;
  for (int t0 = lo + 4 * warp; t0 < hi; t0 += 4 * WARPS)
    attend_four<HEAD, EARLY>(qv, t0, hi, lane, scale, cap, key, value, m, l, acc);
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
 * 32; 16 by default): a step at Qwen2.5-0.5B's shapes is 14 blocks, so more warps are the way to
 * more loads in flight per head without a merge launch. Measured on the H100 (2026-12-05, night
 * session): the fused decode step 23 us a layer at 8 warps, 15.3 at 16, 14.6 at 32. */
static int decode_warps() {
  static const int warps = [] {
    const char *v = std::getenv("ORT_EP_MLX_DECODE_WARPS");
    int n = v ? std::atoi(v) : ONE_TOKEN_WARPS;
    return n == 4 || n == 8 || n == 16 || n == 32 ? n : static_cast<int>(ONE_TOKEN_WARPS);
  }();
  return warps;
}

/* ORT_EP_MLX_DECODE_EARLY_VALUES=1 (opt-in): the one-token attention kernels load each group's
 * value rows with its key rows (attend_four's EARLY: one wait on memory per four keys instead of
 * two; the same arithmetic). Written after the H100 profile of 2026-12-06 (the decode step 14.6 us a
 * launch for ~150 keys of 64 channels, 14 blocks of 16 warps, each warp two or three groups of four
 * keys); on the H100 the same day its attention and device-memory tests passed (304) and decode
 * Runs did not move (IOBinding 2.71, 2.67 ms against 2.68; shared 2.69, 2.76 against 2.67): the
 * step's time is not in that wait. */
static bool early_values() {
  static const bool on = env_opt_in("ORT_EP_MLX_DECODE_EARLY_VALUES");
  return on;
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
  int64_t tiles = (span.rows + ROWS_WARPS - 1) / ROWS_WARPS, threads = ROWS_WARPS * 32;
  int64_t blocks = static_cast<int64_t>(b) * hq * tiles;
  if (blocks * threads > std::numeric_limits<int>::max()) throw bridge_error("decode attention: too many rows");
  return run_cuda_kernel(rows_attention_kernel,
      {q, k, v, lens, params, r.pos, r.cos, r.sin, mx::array({span.rows}, {1}, mx::int32)}, {q.shape()}, {q.dtype()},
      {static_cast<int>(blocks * threads), 1, 1}, {static_cast<int>(threads), 1, 1},
      {{"T", q.dtype()}, {"HEAD", d}, {"HQ", hq}, {"HKV", hkv}, {"WARPS", static_cast<int>(ROWS_WARPS)},
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
         {"POS_ADD", r.add}, {"PARTS", parts}, {"EARLY", early_values()}},
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
       {"POS_ADD", r.add}, {"IN_PLACE", in_place}, {"EARLY", early_values()}},
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
