/* MatMulNBits' products on MLX's CPU stream: a primitive of our own (EpCpuQGemvSets).
 *
 * Why: MLX's CPU quantized matmul walks the packed weights at about 1.1 G values a second on this
 * project's x86 machines (scalar unpacking), once per row, and its CPU dequantization runs at
 * 0.2-0.5 G values a second: a decode step spent most of its time in the first, a prompt in the
 * second. Its two forms compute the same float32 products:
 * - one row: y[n] = sum_g scale * sum_{k in g} x[k] (q[n,k] - z) with integer zero points, or
 *   sum_g (scale * sum_{k in g} x[k] q[n,k] + bias * sum_{k in g} x[k]) with MLX's biases (the
 *   reordering the CUDA GEMV kernel uses), 32 nibbles per AVX2 or AVX-512 step against x split into
 *   even and odd elements, the output columns of every set spread over a few threads; a row whose
 *   sums are not finite is summed term by term as written;
 * - many rows: tiles of about 2 MiB of weights dequantized (scale * q + bias) by the
 *   same threads, each multiplied with every row by one BLAS GEMM (src/mlx/cpu_blas.c's BLAS)
 *   while it is in the cache.
 * One task takes up to three weight sets of one x (sibling projections), their bias Adds and a gated
 * MLP's activation, either form per set (the bridge's mlxb_qgemv_sets on a CPU scope); one set alone
 * is MLX's quantized matmul's place (cpu_qgemv).
 * The threads are bridge_cpu_pool.cpp's.
 *
 * They take float32 x, 4-bit weights in MLX's affine layout (element 8w + j is nibble j of word
 * w), float32 scales, float32 biases or uint8 zero points, groups of a multiple of 32. Anything else, and any CPU without
 * AVX2 and FMA, stays on MLX (cpu_qgemv_takes). ORT_EP_MLX_CPU_GEMV=0 turns them off.
 *
 * MatMulNBits' accuracy_level 4 (ORT quantizes x to int8 per block, MLAS CompInt8): the block
 * quantization is a task here too (EpCpuQuantizeBlocks, mlxb_quantize_blocks), which a sets task
 * reading it takes over (pending_quantization); one row is then summed in integers where the CPU
 * has AVX-512 VNNI (int8_columns), else as the float32 products of the quantized x.
 *
 * The work is enqueued on MLX's CPU stream like MLX's own CPU ops (its command encoder), holding
 * its input arrays until it has run. */
#include "mlx/bridge_cpu_task.h"
#include "mlx/primitives.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

/* x86-64 with the BLAS of src/mlx/cpu_blas.c (not macOS, where MLX's BLAS is Accelerate's) */
#if defined(__x86_64__) && !defined(__APPLE__)
#define EP_CPU_KERNELS 1
#include <immintrin.h>
#endif

/* MLX's CPU products' BLAS: the definitions in src/mlx/cpu_blas.c, which forward to the BLAS chosen
 * there. CBLAS's enums are ints. */
extern "C" void cblas_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                            const float *b, int ldb, float beta, float *c, int ldc);

namespace mlxb_detail {

namespace {

enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };

/* Quantization of A per block (mlxb_quantize_blocks): the parameters of EpCpuQuantizeBlocks. */
struct quantize_params {
  int64_t block;
};

/* A block's quantization scale and its inverse as MLX's operations give them: amax a
 * NaN-propagating max of |x|, scale = amax / 127, inv = 127 / amax (0 for a zero block).
 * integral: every value finite and inv too, so x * inv rounds to an integer in [-127, 127]. */
struct block_scale {
  float scale, inv;
  bool integral;
};

block_scale measure_block(const float *x, int64_t n) {
  float amax = 0.0f;
  bool nan = false;
  for (int64_t i = 0; i < n; i++) {
    float v = std::fabs(x[i]);
    nan |= std::isnan(v);
    amax = v > amax ? v : amax;
  }
  if (nan) amax = std::numeric_limits<float>::quiet_NaN();
  const float scale = amax / 127.0f, inv = amax != 0.0f ? 127.0f / amax : 0.0f;
  const float most = std::numeric_limits<float>::max();
  return {scale, inv, amax <= most && inv <= most};
}

/* One block as MLX's operations give it: each value's division, multiplication and rounding in
 * float32, in the same order (nothing to fuse). */
void quantize_block(const float *x, float *y, int64_t n) {
  const block_scale b = measure_block(x, n);
  for (int64_t i = 0; i < n; i++) y[i] = std::nearbyint(x[i] * b.inv) * b.scale;
}

void quantize_rows(const float *x, float *y, int64_t n, int64_t block) {
  for (int64_t at = 0; at < n; at += block) quantize_block(x + at, y + at, std::min(block, n - at));
}

void quantize_task(const quantize_params &p, const std::vector<mx::array> &in, std::vector<mx::array> &out) {
  quantize_rows(in[0].data<float>(), out[0].data<float>(), static_cast<int64_t>(out[0].size()), p.block);
}

/* The block of x's quantization when x is the pending result of mlxb_quantize_blocks (its input in
 * *source), else 0: the sets task then quantizes x itself, one operation fewer per group of
 * products (an operation of MLX's CPU stream costs tens of microseconds, a decode step has ~30). */
int64_t pending_quantization(const mx::array &x, mx::array *source) {
  if (!x.has_primitive() || x.status() == mx::array::Status::available) return 0;
  auto *q = dynamic_cast<const cpu_task<quantize_params> *>(&x.primitive());
  if (!q || q->function() != quantize_task || x.inputs().size() != 1) return 0;
  *source = x.inputs()[0];
  return q->params().block;
}

#if defined(EP_CPU_KERNELS)

/* The 32 nibbles of four words as floats, in element order (element 8w + j = nibble j of word w,
 * so byte b holds elements 2b (low nibble) and 2b + 1 (high)). */
__attribute__((target("avx2,fma"))) inline void unpack32(const uint32_t *w, __m256 q[4]) {
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i *>(w));
  const __m128i mask = _mm_set1_epi8(0x0f);
  const __m128i lo = _mm_and_si128(packed, mask), hi = _mm_and_si128(_mm_srli_epi16(packed, 4), mask);
  const __m128i first = _mm_unpacklo_epi8(lo, hi), second = _mm_unpackhi_epi8(lo, hi); /* elements 0-15, 16-31 */
  q[0] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(first));
  q[1] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(first, 8)));
  q[2] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(second));
  q[3] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(second, 8)));
}

__attribute__((target("avx2,fma"))) inline float horizontal_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

/* One weight set: w [n, k / 8] words, scales [n, k / group], and per group either MLX's affine
 * bias (w = scale * q + bias) or, where zero_points is set, an integer zero point z (w = scale *
 * (q - z), ORT's own dequantization), its rows zp_row_stride apart (0: one row for every row). */
struct gemv_args {
  const float *x, *split_x, *scales, *biases, *group_sums;
  const uint8_t *zero_points;
  const uint32_t *w;
  float *y;
  int64_t n, zp_row_stride;
  int k, group;
};

/* x with each 32-element chunk's even elements first, then its odd ones. Byte b of a chunk's four
 * words holds elements 2b (low nibble) and 2b + 1 (high), so with x split this way a byte widened
 * to a lane meets both its x values at that lane of two vectors: no shuffles in the inner loop. */
void split_chunks(const float *x, int k, float *out) {
  for (int c = 0; c < k; c += 32)
    for (int i = 0; i < 16; i++) {
      out[c + i] = x[c + 2 * i];
      out[c + 16 + i] = x[c + 2 * i + 1];
    }
}

/* acc + x[k] * (q[k] - z) over the 32 elements of four words, x split (split_chunks); z = 0 for
 * the affine form. */
__attribute__((target("avx2,fma"))) inline __m256 dot32_split(const uint32_t *w, const float *xs, __m256i z,
                                                               __m256 acc) {
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i *>(w));
  const __m256i low = _mm256_set1_epi32(15);
  const __m256i b0 = _mm256_cvtepu8_epi32(packed), b1 = _mm256_cvtepu8_epi32(_mm_srli_si128(packed, 8));
  const __m256i q[4] = {_mm256_and_si256(b0, low), _mm256_and_si256(b1, low), _mm256_srli_epi32(b0, 4),
                        _mm256_srli_epi32(b1, 4)};
  for (int i = 0; i < 4; i++)
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(q[i], z)), _mm256_loadu_ps(xs + 8 * i), acc);
  return acc;
}

/* R output columns from n0: per column, the groups' scaled sums kept in one vector (a horizontal
 * sum per column, not per group); in the affine form then the biases' term sum_g bias[g] *
 * sum(x in g), in the zero-point form each group's sum is of x * (q - z) already. The R columns
 * share x's loads and interleave R independent chains of sums, each computed exactly as one
 * column alone would be (the same operations in the same order), so R changes no bit. */
template <bool ZP, int R>
__attribute__((target("avx2,fma"))) inline void gemv_rows(const gemv_args &a, int64_t n0) {
  const int groups = a.k / a.group, words_per_row = a.k / 8, chunks = a.group / 32;
  __m256 scaled[R];
  for (int r = 0; r < R; r++) scaled[r] = _mm256_setzero_ps();
  for (int g = 0; g < groups; g++) {
    const float *xg = a.split_x + (int64_t)g * a.group;
    __m256 acc[R];
    __m256i z[R];
    for (int r = 0; r < R; r++) {
      acc[r] = _mm256_setzero_ps();
      z[r] = _mm256_set1_epi32(ZP ? a.zero_points[(n0 + r) * a.zp_row_stride + g] : 0);
    }
    for (int c = 0; c < chunks; c++)
      for (int r = 0; r < R; r++)
        acc[r] = dot32_split(a.w + (n0 + r) * words_per_row + (int64_t)g * (a.group / 8) + 4 * c, xg + 32 * c, z[r],
                             acc[r]);
    for (int r = 0; r < R; r++)
      scaled[r] = _mm256_fmadd_ps(_mm256_set1_ps(a.scales[(n0 + r) * groups + g]), acc[r], scaled[r]);
  }
  for (int r = 0; r < R; r++) {
    float biased = 0.0f;
    for (int g = 0; !ZP && g < groups; g++) biased += a.biases[(n0 + r) * groups + g] * a.group_sums[g];
    a.y[n0 + r] = horizontal_sum(scaled[r]) + biased;
  }
}

/* Columns [lo, hi), four at a time (what hides the FMA latency of each column's chain). */
template <bool ZP>
__attribute__((target("avx2,fma"))) void gemv_columns(const gemv_args &a, int64_t lo, int64_t hi) {
  int64_t n = lo;
  for (; n + 4 <= hi; n += 4) gemv_rows<ZP, 4>(a, n);
  for (; n < hi; n++) gemv_rows<ZP, 1>(a, n);
}

/* The same with 16 lanes: a chunk's 16 bytes widened at once, its low nibbles against the even
 * elements and its high ones against the odd. (GCC 12's AVX-512 headers start some intrinsics
 * from an "undefined" register, which its -Wmaybe-uninitialized reports once inlined.) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
template <bool ZP, int R>
__attribute__((target("avx512f"))) inline void gemv_rows_512(const gemv_args &a, int64_t n0) {
  const int groups = a.k / a.group, words_per_row = a.k / 8, chunks = a.group / 32;
  const __m512i low = _mm512_set1_epi32(15);
  __m512 scaled[R];
  for (int r = 0; r < R; r++) scaled[r] = _mm512_setzero_ps();
  for (int g = 0; g < groups; g++) {
    const float *xg = a.split_x + (int64_t)g * a.group;
    __m512 acc[R];
    __m512i z[R];
    for (int r = 0; r < R; r++) {
      acc[r] = _mm512_setzero_ps();
      z[r] = _mm512_set1_epi32(ZP ? a.zero_points[(n0 + r) * a.zp_row_stride + g] : 0);
    }
    for (int c = 0; c < chunks; c++) {
      const __m512 x_even = _mm512_loadu_ps(xg + 32 * c), x_odd = _mm512_loadu_ps(xg + 32 * c + 16);
      for (int r = 0; r < R; r++) {
        const uint32_t *wc = a.w + (n0 + r) * words_per_row + (int64_t)g * (a.group / 8) + 4 * c;
        const __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(wc)));
        const __m512i even = _mm512_sub_epi32(_mm512_and_si512(bytes, low), z[r]);
        const __m512i odd = _mm512_sub_epi32(_mm512_srli_epi32(bytes, 4), z[r]);
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(even), x_even, acc[r]);
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(odd), x_odd, acc[r]);
      }
    }
    for (int r = 0; r < R; r++)
      scaled[r] = _mm512_fmadd_ps(_mm512_set1_ps(a.scales[(n0 + r) * groups + g]), acc[r], scaled[r]);
  }
  for (int r = 0; r < R; r++) {
    float biased = 0.0f;
    for (int g = 0; !ZP && g < groups; g++) biased += a.biases[(n0 + r) * groups + g] * a.group_sums[g];
    a.y[n0 + r] = _mm512_reduce_add_ps(scaled[r]) + biased;
  }
}

template <bool ZP>
__attribute__((target("avx512f"))) void gemv_columns_512(const gemv_args &a, int64_t lo, int64_t hi) {
  int64_t n = lo;
  for (; n + 4 <= hi; n += 4) gemv_rows_512<ZP, 4>(a, n);
  for (; n < hi; n++) gemv_rows_512<ZP, 1>(a, n);
}
#pragma GCC diagnostic pop

/* Weight k of row n (group g) as the form gives it: scale * q + bias, or (q - z) * scale as ORT
 * dequantizes. */
inline float weight_at(const gemv_args &a, const uint32_t *row, int64_t n, int k) {
  const int groups = a.k / a.group, g = k / a.group;
  const int q = static_cast<int>((row[k / 8] >> (4 * (k % 8))) & 15u);
  const float scale = a.scales[n * groups + g];
  if (a.zero_points) return static_cast<float>(q - a.zero_points[n * a.zp_row_stride + g]) * scale;
  return scale * static_cast<float>(q) + a.biases[n * groups + g];
}

/* The same columns summed as written, x[k] * weight term by term: for a row whose sums are not
 * finite (an infinity or NaN in x, or a group overflowing), where the reordered form could turn
 * ORT's infinity into NaN (infinity * q with q = 0, where ORT multiplies by the bias). */
void gemv_columns_as_written(const gemv_args &a, int64_t lo, int64_t hi) {
  const int words_per_row = a.k / 8;
  for (int64_t n = lo; n < hi; n++) {
    const uint32_t *row = a.w + n * words_per_row;
    float total = 0.0f;
    for (int k = 0; k < a.k; k++) total += a.x[k] * weight_at(a, row, n, k);
    a.y[n] = total;
  }
}

/* One x against every set's rows as one range (set i's rows at [start[i], start[i + 1])), so that
 * a task's sets share one split of the rows among the threads rather than one each. */
struct gemv_job {
  gemv_args set[MLXB_QGEMV_MAX_SETS];
  int64_t start[MLXB_QGEMV_MAX_SETS + 1];
  int sets;
  bool finite; /* x's group sums: else every row is summed as written */
};

void gemv_job_rows(const void *ctx, int64_t lo, int64_t hi) {
  const auto &job = *static_cast<const gemv_job *>(ctx);
  for (int i = 0; i < job.sets; i++) {
    const int64_t from = std::max(lo, job.start[i]) - job.start[i], to = std::min(hi, job.start[i + 1]) - job.start[i];
    if (from >= to) continue;
    const gemv_args &set = job.set[i];
    if (!job.finite) gemv_columns_as_written(set, from, to);
    else if (cpu_avx512_available()) (set.zero_points ? gemv_columns_512<true> : gemv_columns_512<false>)(set, from, to);
    else (set.zero_points ? gemv_columns<true> : gemv_columns<false>)(set, from, to);
  }
}

enum { MAX_GROUPS = 8192 }; /* per row: the group sums live on the task's stack (nothing to allocate there) */

/* y_i = x W_i^T for one row x and each set i, the sets' rows shared among the threads. */
void qgemv_4bit_sets(const float *x, const gemv_args *sets, int n_sets, int k, int group) {
  float group_sums[MAX_GROUPS];
  gemv_job job{};
  job.finite = true;
  for (int g = 0; g < k / group; g++) {
    float sum = 0.0f;
    for (int i = 0; i < group; i++) sum += x[(int64_t)g * group + i];
    group_sums[g] = sum;
    job.finite = job.finite && std::isfinite(sum);
  }
  std::unique_ptr<float[]> split(new float[k]);
  split_chunks(x, k, split.get());
  job.sets = n_sets;
  for (int i = 0; i < n_sets; i++) {
    job.set[i] = sets[i];
    job.set[i].x = x, job.set[i].split_x = split.get(), job.set[i].group_sums = group_sums;
    job.start[i + 1] = job.start[i] + sets[i].n;
  }
  cpu_parallel_for(job.start[n_sets], gemv_job_rows, &job);
}

/* accuracy_level 4's products as integers (ORT's MLAS CompInt8 computes them so): x quantized per
 * block to int8 as quantize_block does (q in [-127, 127], scale amax / 127), each 4-bit weight's
 * product with its q summed exactly in int32 by AVX-512 VNNI, four elements a lane, then per block
 * (q_w - z) scaled by the weight's scale times x's: y = sum_b scale_w scale_x sum_k q_x (q_w - z).
 * The same values as the float32 products of the quantized x up to float32 rounding. For one row,
 * integer zero points, blocks equal to the groups and K a multiple of 128 (a chunk: 16 words, 1 to
 * 4 blocks); anything else, and a row with a non-finite block, takes the float32 products. */
struct int8_row {
  std::vector<int32_t> even, odd;  /* per word: q_x of its elements 0, 2, 4, 6 and 1, 3, 5, 7 as bytes */
  std::vector<float> lane_scale;   /* per word: its block's scale_x */
  std::vector<float> block_sums;   /* per block: scale_x times the sum of its q_x (the zero points' term) */
  bool finite = true;
};

int8_row quantize_int8_row(const float *x, int k, int block) {
  int8_row r;
  const int words = k / 8;
  r.even.resize(words), r.odd.resize(words), r.lane_scale.resize(words), r.block_sums.resize(k / block);
  std::vector<int8_t> q(k);
  for (int b = 0; b < k / block; b++) {
    const block_scale m = measure_block(x + b * block, block);
    r.finite = m.integral; /* else NaN, an infinity, or a max so small that 127 / max overflows */
    if (!r.finite) return r;
    int32_t sum = 0;
    for (int i = 0; i < block; i++) {
      q[b * block + i] = static_cast<int8_t>(std::nearbyint(x[b * block + i] * m.inv));
      sum += q[b * block + i];
    }
    for (int w = b * block / 8; w < (b + 1) * block / 8; w++) r.lane_scale[w] = m.scale;
    r.block_sums[b] = m.scale * static_cast<float>(sum);
  }
  for (int w = 0; w < words; w++) {
    const int8_t *e = q.data() + 8 * w;
    uint32_t ev = 0, od = 0;
    for (int j = 0; j < 4; j++) {
      ev |= static_cast<uint32_t>(static_cast<uint8_t>(e[2 * j])) << (8 * j);
      od |= static_cast<uint32_t>(static_cast<uint8_t>(e[2 * j + 1])) << (8 * j);
    }
    r.even[w] = static_cast<int32_t>(ev), r.odd[w] = static_cast<int32_t>(od);
  }
  return r;
}

bool cpu_has_vnni512() {
  static const bool yes = cpu_avx512_available() && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512dq") &&
                          __builtin_cpu_supports("avx512vnni") && env_switch_on("ORT_EP_MLX_CPU_VNNI");
  return yes;
}

struct int8_job {
  const int8_row *row;
  gemv_args set[MLXB_QGEMV_MAX_SETS];
  int64_t start[MLXB_QGEMV_MAX_SETS + 1];
  int sets;
};

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized" /* GCC 12's AVX-512 headers, see gemv_columns_512 */
#pragma GCC diagnostic ignored "-Wuninitialized"
/* acc less column n's zero points' term, sum over blocks of scale_w z scale_x sum(q_x), 16 blocks a
 * vector (the lanes are summed after). */
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m512 less_zero_point_term(const int8_row &r,
                                                                                         const gemv_args &a, int64_t n,
                                                                                         int groups, __m512 acc) {
  const uint8_t *z = a.zero_points + n * a.zp_row_stride;
  const float *ws = a.scales + n * groups;
  for (int b = 0; b < groups; b += 16) {
    const __mmask16 m = groups - b >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (groups - b)) - 1);
    const __m512 zs = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, z + b))),
                                    _mm512_maskz_loadu_ps(m, ws + b));
    acc = _mm512_fnmadd_ps(zs, _mm512_maskz_loadu_ps(m, r.block_sums.data() + b), acc);
  }
  return acc;
}

/* The lane sums of four vectors, in order: halves added, then pairs, as a transposition would. */
__attribute__((target("avx512f,avx512dq"))) inline __m128 lane_sums4(const __m512 *v) {
  __m256 h[4];
  for (int j = 0; j < 4; j++) h[j] = _mm256_add_ps(_mm512_castps512_ps256(v[j]), _mm512_extractf32x8_ps(v[j], 1));
  const __m256 a = _mm256_hadd_ps(h[0], h[1]), b = _mm256_hadd_ps(h[2], h[3]); /* v0 v0 v1 v1 | ... per 128 */
  const __m256 c = _mm256_hadd_ps(a, b);                                        /* v0 v1 v2 v3 | v0 v1 v2 v3 */
  return _mm_add_ps(_mm256_castps256_ps128(c), _mm256_extractf128_ps(c, 1));
}

/* Columns n0 .. n0 + R - 1 together: x's vectors loaded once for the R, R independent chains. The
 * inner loop takes sum scale_w scale_x q_x q_w per word; the zero points' term, a few blocks' worth
 * of work, comes after it (less_zero_point_term), and four columns' lanes are summed together. */
template <int R>
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni"))) inline void int8_columns_r(
    const int8_row &r, const gemv_args &a, int64_t n0, __m512i lane_index) {
  const int words = a.k / 8, groups = a.k / a.group, words_per_block = a.group / 8, blocks_per_chunk = 16 / words_per_block;
  const __m512i nibbles = _mm512_set1_epi32(0x0f0f0f0f);
  const __mmask16 chunk_blocks = static_cast<__mmask16>((1u << blocks_per_chunk) - 1);
  __m512 acc[R];
  for (int j = 0; j < R; j++) acc[j] = _mm512_setzero_ps();
  for (int c = 0; c < words; c += 16) {
    const int b0 = c / words_per_block;
    const __m512i even = _mm512_loadu_si512(r.even.data() + c), odd = _mm512_loadu_si512(r.odd.data() + c);
    const __m512 x_scale = _mm512_loadu_ps(r.lane_scale.data() + c);
    for (int j = 0; j < R; j++) {
      const int64_t n = n0 + j;
      const __m512i w = _mm512_loadu_si512(a.w + n * words + c);
      __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(w, nibbles), even);
      dot = _mm512_dpbusd_epi32(dot, _mm512_and_si512(_mm512_srli_epi32(w, 4), nibbles), odd);
      const __m512 ws = _mm512_permutexvar_ps(lane_index, _mm512_maskz_loadu_ps(chunk_blocks, a.scales + n * groups + b0));
      acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(ws, x_scale), acc[j]);
    }
  }
  for (int j = 0; j < R; j++) acc[j] = less_zero_point_term(r, a, n0 + j, groups, acc[j]);
  if constexpr (R == 4) {
    _mm_storeu_ps(a.y + n0, lane_sums4(acc));
  } else {
    for (int j = 0; j < R; j++) a.y[n0 + j] = _mm512_reduce_add_ps(acc[j]);
  }
}

__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni"))) void int8_columns(const int8_row &r, const gemv_args &a,
                                                                                  int64_t lo, int64_t hi) {
  alignas(64) int32_t lane_block[16]; /* a chunk's lane -> its block within the chunk */
  for (int l = 0; l < 16; l++) lane_block[l] = l / (a.group / 8);
  const __m512i lane_index = _mm512_load_si512(lane_block);
  int64_t n = lo;
  for (; n + 4 <= hi; n += 4) int8_columns_r<4>(r, a, n, lane_index);
  for (; n < hi; n++) int8_columns_r<1>(r, a, n, lane_index);
}
#pragma GCC diagnostic pop

void int8_job_rows(const void *ctx, int64_t lo, int64_t hi) {
  const auto &job = *static_cast<const int8_job *>(ctx);
  for (int i = 0; i < job.sets; i++) {
    const int64_t from = std::max(lo, job.start[i]) - job.start[i], to = std::min(hi, job.start[i + 1]) - job.start[i];
    if (from < to) int8_columns(*job.row, job.set[i], from, to);
  }
}

/* Whether one row of x against these sets takes the integer products (int8_columns). */
bool int8_products_take(const gemv_args *sets, int n_sets, int k, int group, int64_t quant_block) {
  if (!cpu_has_vnni512() || quant_block != group || k % 128 || group % 32 || group > 128) return false;
  for (int i = 0; i < n_sets; i++)
    if (!sets[i].zero_points) return false;
  return true;
}

/* y_i for one row x quantized per block and each set i, as integer products; false (nothing
 * written) where a block of x is not finite. */
bool qgemv_int8_sets(const float *x, const gemv_args *sets, int n_sets, int k, int group) {
  const int8_row r = quantize_int8_row(x, k, group);
  if (!r.finite) return false;
  int8_job job{};
  job.row = &r, job.sets = n_sets;
  for (int i = 0; i < n_sets; i++) {
    job.set[i] = sets[i];
    job.start[i + 1] = job.start[i] + sets[i].n;
  }
  cpu_parallel_for(job.start[n_sets], int8_job_rows, &job);
  return true;
}

/* The set's weight rows [lo, hi) dequantized as weight_at() gives them into dst (row n at
 * (n - lo) * k). */
__attribute__((target("avx2,fma"))) void dequantize_rows(const gemv_args &a, int64_t lo, int64_t hi, float *dst) {
  const int k = a.k, group = a.group, groups = k / group, words_per_row = k / 8, chunks = group / 32;
  for (int64_t n = lo; n < hi; n++) {
    const uint32_t *row = a.w + n * words_per_row;
    float *out = dst + (n - lo) * k;
    for (int g = 0; g < groups; g++) {
      const __m256 sc = _mm256_set1_ps(a.scales[n * groups + g]);
      const __m256 bi = _mm256_set1_ps(a.zero_points ? 0.0f : a.biases[n * groups + g]);
      const __m256 z = _mm256_set1_ps(a.zero_points ? a.zero_points[n * a.zp_row_stride + g] : 0.0f);
      for (int c = 0; c < chunks; c++) {
        __m256 q[4];
        unpack32(row + (int64_t)g * (group / 8) + 4 * c, q);
        float *o = out + (int64_t)g * group + 32 * c;
        for (int i = 0; i < 4; i++)
          _mm256_storeu_ps(o + 8 * i, a.zero_points ? _mm256_mul_ps(_mm256_sub_ps(q[i], z), sc)
                                                    : _mm256_fmadd_ps(q[i], sc, bi));
      }
    }
  }
}

/* Columns of the output a dequantized tile holds: about 2 MiB of float32 weights (it stays in
 * the cache between its dequantization and the GEMM that reads it), at least 256 columns. */
int64_t tile_columns(int64_t n, int k) {
  int64_t fit = ((int64_t(2) << 20) / (int64_t(4) * k)) & ~int64_t(63);
  return std::min(n, std::max<int64_t>(256, fit));
}

/* Many rows: tile by tile, the weights dequantized by the pool's threads, then one BLAS GEMM of
 * all rows against the tile (the BLAS MLX's CPU products run on, src/mlx/cpu_blas.c). */
struct dequantize_args {
  const gemv_args *set;
  float *tile;
  int64_t n0;
};

void dequantize_tile_of(const void *ctx, int64_t lo, int64_t hi) {
  const auto &a = *static_cast<const dequantize_args *>(ctx);
  dequantize_rows(*a.set, a.n0 + lo, a.n0 + hi, a.tile + lo * a.set->k);
}

/* y = x W^T for many rows x of the set's K (set.x and set.group_sums unused). */
void qgemm_4bit(const float *x, const gemv_args &set, int64_t rows, float *tile, int64_t tile_cols) {
  const int64_t n = set.n;
  const int k = set.k;
  float *y = set.y;
  for (int64_t n0 = 0; n0 < n; n0 += tile_cols) {
    const int64_t cols = std::min(tile_cols, n - n0);
    dequantize_args a{&set, tile, n0};
    cpu_parallel_for(cols, dequantize_tile_of, &a);
    cblas_sgemm(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_TRANS, (int)rows, (int)cols, k, 1.0f, x, k, tile, k, 0.0f,
                y + n0, (int)n);
  }
}

/* Many rows where the CPU has AVX-512: each set's weights dequantized 32 rows at a time straight into
 * a panel of the packed GEMM (bridge_cpu_gemm.cpp) and multiplied with every row of x while the
 * panel is in the core's cache; the sets' panels are one range shared among the threads. No tile
 * of weights in memory and no BLAS packing them again (OpenBLAS's copies were 8% of a prompt). */
struct qgemm_job {
  const float *x;
  gemv_args set[MLXB_QGEMV_MAX_SETS];
  int64_t first_panel[MLXB_QGEMV_MAX_SETS + 1]; /* set i's panels: [first_panel[i], first_panel[i + 1]) */
  int64_t rows;
  int sets;
};

enum { PANEL = CPU_GEMM_PANEL_COLS, PANEL_UNITS = 256 }; /* the pool shares out ranges of at least 256 units */

/* The set's weight rows [n0, n0 + cols) (cols <= 32) dequantized as weight_at() gives them into a
 * panel [k][32], zero past cols: a word of each of the 32 rows gathered at once, so that each of
 * its eight nibbles becomes one row of the panel (two vectors of 16 lanes). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized" /* GCC 12's AVX-512 headers, see gemv_columns_512 */
__attribute__((target("avx512f"))) void dequantize_panel(const gemv_args &a, int64_t n0, int64_t cols, float *panel) {
  const int groups = a.k / a.group, words_per_row = a.k / 8, words_per_group = a.group / 8;
  alignas(64) int32_t first_word[PANEL];
  alignas(64) float sc[PANEL], bi[PANEL];
  alignas(64) int32_t z[PANEL];
  for (int c = 0; c < PANEL; c++) first_word[c] = static_cast<int32_t>(std::min<int64_t>(c, cols - 1) * words_per_row);
  const __mmask16 valid[2] = {static_cast<__mmask16>(cols >= 16 ? 0xffff : (1u << cols) - 1),
                              static_cast<__mmask16>(cols <= 16 ? 0 : cols >= 32 ? 0xffff : (1u << (cols - 16)) - 1)};
  const __m512i nibble = _mm512_set1_epi32(15);
  const uint32_t *w = a.w + n0 * words_per_row;
  for (int g = 0; g < groups; g++) {
    for (int c = 0; c < PANEL; c++) {
      const int64_t n = n0 + std::min<int64_t>(c, cols - 1);
      sc[c] = a.scales[n * groups + g];
      bi[c] = a.zero_points ? 0.0f : a.biases[n * groups + g];
      z[c] = a.zero_points ? a.zero_points[n * a.zp_row_stride + g] : 0;
    }
    for (int half = 0; half < 2; half++) {
      const __m512i index = _mm512_load_si512(first_word + 16 * half), zv = _mm512_load_si512(z + 16 * half);
      const __m512 scale = _mm512_load_ps(sc + 16 * half), bias = _mm512_load_ps(bi + 16 * half);
      for (int word = 0; word < words_per_group; word++) {
        const int64_t at = static_cast<int64_t>(g) * words_per_group + word;
        const __m512i words = _mm512_i32gather_epi32(index, reinterpret_cast<const void *>(w + at), 4);
        for (int j = 0; j < 8; j++) {
          const __m512i q = _mm512_and_si512(_mm512_srli_epi32(words, 4 * j), nibble);
          const __m512 v = a.zero_points ? _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(q, zv)), scale)
                                         : _mm512_fmadd_ps(_mm512_cvtepi32_ps(q), scale, bias);
          _mm512_storeu_ps(panel + (at * 8 + j) * PANEL + 16 * half, _mm512_maskz_mov_ps(valid[half], v));
        }
      }
    }
  }
}
#pragma GCC diagnostic pop

/* The set panel p of the job belongs to, and its first output column in *n0. */
const gemv_args &panel_set(const qgemm_job &job, int64_t p, int64_t *n0) {
  int i = 0;
  while (p >= job.first_panel[i + 1]) i++;
  *n0 = (p - job.first_panel[i]) * PANEL;
  return job.set[i];
}

/* Panel p of the job: its set's output columns [n0, n0 + cols). */
void qgemm_panel(const qgemm_job &job, int64_t p, float *panel, float *scratch) {
  int64_t n0;
  const gemv_args &set = panel_set(job, p, &n0);
  const int64_t cols = std::min<int64_t>(PANEL, set.n - n0);
  dequantize_panel(set, n0, cols, panel);
  cpu_gemm_panel(job.x, job.rows, set.k, panel, set.y + n0, set.n, cols, scratch);
}

void qgemm_job_part(const void *ctx, int64_t lo, int64_t hi) {
  const auto &job = *static_cast<const qgemm_job *>(ctx);
  const int64_t p0 = (lo + PANEL_UNITS - 1) / PANEL_UNITS, p1 = (hi + PANEL_UNITS - 1) / PANEL_UNITS;
  if (p0 >= p1) return;
  const int k = job.set[0].k;
  try {
    std::vector<float> panel(static_cast<size_t>(PANEL) * k), scratch(static_cast<size_t>(job.rows) * PANEL);
    for (int64_t p = p0; p < p1; p++) qgemm_panel(job, p, panel.data(), scratch.data());
  } catch (...) { /* buffers not allocated (a helper thread must not throw): NaN in these panels' columns */
    for (int64_t p = p0; p < p1; p++) {
      int64_t n0;
      const gemv_args &set = panel_set(job, p, &n0);
      const int64_t n1 = std::min<int64_t>(set.n, n0 + PANEL);
      for (int64_t r = 0; r < job.rows; r++)
        std::fill(set.y + r * set.n + n0, set.y + r * set.n + n1, std::numeric_limits<float>::quiet_NaN());
    }
  }
}

void qgemm_4bit_panels(const float *x, const gemv_args *sets, int n_sets, int64_t rows) {
  qgemm_job job{};
  job.x = x, job.rows = rows, job.sets = n_sets;
  for (int i = 0; i < n_sets; i++) {
    job.set[i] = sets[i];
    job.first_panel[i + 1] = job.first_panel[i] + (sets[i].n + PANEL - 1) / PANEL;
  }
  cpu_parallel_for(job.first_panel[n_sets] * PANEL_UNITS, qgemm_job_part, &job);
}

/* Up to three weight sets of one x in one task (sibling projections: Q, K and V), each row of x a
 * GEMV per set, each set's output optionally plus a bias [N] (a following Add node, in float32 as
 * that node adds); with swiglu, two sets of one N (gate, up) and the gated MLP's activation after
 * them: Sigmoid(gate) (bridge_cpu_vmath.cpp: MLX's sigmoid, bit for bit, as the Sigmoid node's
 * lowering gives it), gate times that, and that times up. Outputs in the CUDA kernel's order (sets
 * 0-2; swiglu: gate, up, product, sigmoid, gate * sigmoid), in x's leading shape. One set without
 * a bias is MatMulNBits' product alone (cpu_qgemv). */
class ep_cpu_qgemv_sets : public ep_cpu_primitive {
 public:
  ep_cpu_qgemv_sets(mx::Stream stream, int sets, int group, unsigned biased, bool swiglu, int64_t quant_block)
      : ep_cpu_primitive(stream), sets_(sets), group_(group), biased_(biased), swiglu_(swiglu), quant_block_(quant_block) {}

  /* inside a chain: the tile allocated here, a failure NaN out */
  void run_task(const std::vector<mx::array> &ins, std::vector<mx::array> &outs) const override {
    const tile_plan t = plan_tile(ins);
    try {
      std::unique_ptr<float[]> tile(t.cols ? new float[t.cols * t.k] : nullptr);
      run_or_nan(ins, outs, sets_, group_, biased_, swiglu_, quant_block_, t.many_rows, tile.get(), t.cols);
    } catch (...) {
      fill_nan(outs);
    }
  }

  void eval_cpu(const std::vector<mx::array> &inputs, std::vector<mx::array> &outputs) override {
    /* the tile allocated here, where a failure is an exception of this eval (the bridge's to report) */
    const tile_plan t = plan_tile(inputs);
    std::shared_ptr<float[]> tile(t.cols ? new float[t.cols * t.k] : nullptr);
    cpu_task_arrays held;
    auto &encoder = cpu_task_begin(stream(), inputs, outputs, &held);
    encoder.dispatch([held = std::move(held), sets = sets_, group = group_, biased = biased_, swiglu = swiglu_,
                      quant_block = quant_block_, t, tile]() mutable {
      run_or_nan(held.ins, held.outs, sets, group, biased, swiglu, quant_block, t.many_rows, tile.get(), t.cols);
    });
  }

  void eval_gpu(const std::vector<mx::array> &, std::vector<mx::array> &) override {
    throw std::runtime_error("EpCpuQGemvSets: a CPU kernel has no GPU form");
  }

  const char *name() const override { return "EpCpuQGemvSets"; }

  bool is_equivalent(const mx::Primitive &other) const override {
    auto *o = dynamic_cast<const ep_cpu_qgemv_sets *>(&other);
    return o && o->sets_ == sets_ && o->group_ == group_ && o->biased_ == biased_ && o->swiglu_ == swiglu_ &&
           o->quant_block_ == quant_block_;
  }

 private:
  /* more than one row: without AVX-512 the sets' products go tile by tile through BLAS (qgemm_4bit)
   * in a tile of cols columns (0: no tile; with AVX-512, panels: qgemm_4bit_panels) */
  struct tile_plan {
    int k;
    bool many_rows;
    int64_t cols;
  };

  tile_plan plan_tile(const std::vector<mx::array> &in) const {
    tile_plan t{in[0].shape(-1), false, 0};
    t.many_rows = in[0].size() != static_cast<size_t>(t.k);
    for (int i = 0; t.many_rows && !cpu_avx512_available() && i < sets_; i++)
      t.cols = std::max(t.cols, tile_columns(in[1 + 3 * i].shape(0), t.k));
    return t;
  }

  static void fill_nan(std::vector<mx::array> &out) {
    for (auto &o : out) std::fill(o.data<float>(), o.data<float>() + o.size(), std::numeric_limits<float>::quiet_NaN());
  }

  /* run, where a failure (a split x not allocated) leaves NaN: a task must never let an exception
   * reach MLX's scheduler */
  static void run_or_nan(const std::vector<mx::array> &in, std::vector<mx::array> &out, int sets, int group,
                         unsigned biased, bool swiglu, int64_t quant_block, bool many_rows, float *tile,
                         int64_t tile_cols) {
    try {
      run(in, out, sets, group, biased, swiglu, quant_block, many_rows, tile, tile_cols);
    } catch (...) {
      fill_nan(out);
    }
  }

  /* inputs: x, then w, scales and biases (float32) or zero points (uint8) of each set, then the
   * sets' adds (x where a set has none); quant_block: x quantized per block first (pending_quantization) */
  static void run(const std::vector<mx::array> &in, std::vector<mx::array> &out, int sets, int group, unsigned biased,
                  bool swiglu, int64_t quant_block, bool many_rows, float *tile, int64_t tile_cols) {
    const mx::array &x = in[0];
    const int k = x.shape(-1);
    const int64_t rows = static_cast<int64_t>(x.size()) / k;
    std::vector<float> quantized; /* x quantized as float32 values, where the float32 products take it */
    const float *xs = x.data<float>();
    auto quantize_x = [&] {
      if (!quant_block) return;
      quantized.resize(x.size());
      quantize_rows(x.data<float>(), quantized.data(), static_cast<int64_t>(x.size()), quant_block);
      xs = quantized.data();
    };
    if (many_rows) quantize_x();
    gemv_args set[MLXB_QGEMV_MAX_SETS];
    for (int i = 0; i < sets; i++) {
      const mx::array &w = in[1 + 3 * i], &third = in[3 + 3 * i];
      const bool zp = third.dtype() == mx::uint8;
      set[i] = gemv_args{nullptr, nullptr, in[2 + 3 * i].data<float>(), zp ? nullptr : third.data<float>(), nullptr,
                         zp ? third.data<uint8_t>() : nullptr, w.data<uint32_t>(), out[i].data<float>(), w.shape(0),
                         zp && third.shape(0) > 1 ? third.shape(1) : 0, k, group};
      if (tile) qgemm_4bit(xs, set[i], rows, tile, tile_cols);
    }
    if (many_rows) {
      if (!tile) qgemm_4bit_panels(xs, set, sets, rows);
    } else if (!quant_block || !int8_products_take(set, sets, k, group, quant_block) ||
               !qgemv_int8_sets(x.data<float>(), set, sets, k, group)) {
      quantize_x();
      qgemv_4bit_sets(xs, set, sets, k, group);
    }
    for (int i = 0; i < sets; i++) {
      const int64_t n = set[i].n;
      float *y = set[i].y;
      if (!(biased >> i & 1)) continue;
      const float *add = in[1 + 3 * sets + i].data<float>();
      for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++) y[r * n + j] = y[r * n + j] + add[j];
    }
    for (int64_t r = 0; swiglu && r < rows; r++) {
      const int64_t n = in[1].shape(0);
      const float *gate = out[0].data<float>() + r * n, *up = out[1].data<float>() + r * n;
      float *prod = out[2].data<float>() + r * n, *sig = out[3].data<float>() + r * n;
      float *gated = out[4].data<float>() + r * n;
      cpu_vmath(MLXB_SIGMOID, gate, sig, static_cast<size_t>(n));
      for (int64_t j = 0; j < n; j++) {
        gated[j] = gate[j] * sig[j];
        prod[j] = gated[j] * up[j];
      }
    }
  }

  int sets_, group_;
  unsigned biased_;
  bool swiglu_;
  int64_t quant_block_;
};

bool cpu_has_avx2_fma() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}

#endif /* EP_CPU_KERNELS */

} // namespace

bool zero_points_fit(const mx::array &zero_points, const mx::array &scales) {
  return zero_points.dtype() == mx::uint8 && zero_points.ndim() == 2 && scales.ndim() == 2 &&
         zero_points.shape(1) == scales.shape(1) && (zero_points.shape(0) == 1 || zero_points.shape(0) == scales.shape(0));
}

mx::array affine_biases(const mx::array &scales, const mx::array &third, mx::StreamOrDevice dev) {
  if (third.dtype() != mx::uint8) return third;
  if (!zero_points_fit(third, scales)) throw bridge_error("quantized weights: zero points do not fit the scales");
  return mx::negative(mx::multiply(scales, mx::astype(third, mx::float32, dev), dev), dev);
}

bool cpu_qgemv_takes(const mlxb_scope *s, const mx::array &x, const mx::array &w, const mx::array &scales,
                     const std::optional<mx::array> &biases, bool transpose, int group, int bits) {
#if defined(EP_CPU_KERNELS)
  static const bool on = env_switch_on("ORT_EP_MLX_CPU_GEMV");
  bool cpu = is_cpu_scope(s);
  if (!on || !cpu || !cpu_has_avx2_fma() || !transpose || bits != 4 || group <= 0 || group % 32 || !biases) return false;
  if (x.dtype() != mx::float32 || x.ndim() < 1 || x.size() == 0 || w.ndim() != 2) return false;
  if (x.size() / x.shape(-1) > INT32_MAX) return false; /* the BLAS counts rows in int */
  int64_t k = x.shape(-1), n = w.shape(0);
  return n > 0 && k > 0 && k % group == 0 && k / group <= MAX_GROUPS && w.dtype() == mx::uint32 && w.shape(1) == k / 8 &&
         scales.dtype() == mx::float32 && scales.ndim() == 2 && scales.shape(0) == n && scales.shape(1) == k / group &&
         (biases->dtype() == mx::uint8 ? zero_points_fit(*biases, scales)
                                       : biases->dtype() == mx::float32 && biases->shape() == scales.shape());
#else
  (void)s, (void)x, (void)w, (void)scales, (void)biases, (void)transpose, (void)group, (void)bits;
  return false;
#endif
}

mx::array cpu_qgemv(const mlxb_scope *s, const mx::array &x, const mx::array &w, const mx::array &scales,
                    const mx::array &biases, int group) {
  return cpu_qgemv_sets(s, x, {w, scales, biases}, {std::nullopt}, group, false).at(0);
}

bool cpu_qgemv_sets_takes(const mlxb_scope *s, mx::Dtype t, int bits, int group) {
#if defined(EP_CPU_KERNELS)
  static const bool on = env_switch_on("ORT_EP_MLX_CPU_GEMV");
  return on && s && is_cpu_scope(s) && cpu_has_avx2_fma() && t == mx::float32 && bits == 4 && group >= 32 &&
         group % 32 == 0;
#else
  (void)s, (void)t, (void)bits, (void)group;
  return false;
#endif
}

std::vector<mx::array> cpu_qgemv_sets(const mlxb_scope *s, const mx::array &x, const std::vector<mx::array> &sets,
                                      const std::vector<std::optional<mx::array>> &adds, int group, bool swiglu) {
#if defined(EP_CPU_KERNELS)
  auto dev = scope_dev(s);
  const int n_sets = static_cast<int>(sets.size() / 3);
  const int k = x.shape(-1);
  if (k / group > MAX_GROUPS) throw bridge_error("quantized GEMV: more than 8192 groups in a row");
  cpu_pool_start(); /* its threads start here, where a failure is the scope's error, not in the task */
  mx::array source = x;
  const int64_t quant_block = pending_quantization(x, &source);
  std::vector<mx::array> ins = {row_major(source, dev)};
  for (const auto &a : sets) ins.push_back(row_major(a, dev));
  unsigned biased = 0;
  for (int i = 0; i < n_sets; i++) {
    ins.push_back(adds[i] ? row_major(*adds[i], dev) : ins[0]);
    if (adds[i]) biased |= 1u << i;
  }
  std::vector<mx::Shape> shapes; /* the sets' outputs, and the gated MLP's three after them */
  for (int i = 0; i < (swiglu ? MLXB_QGEMV_SWIGLU_OUTPUTS : n_sets); i++) {
    mx::Shape shape = x.shape();
    shape.back() = sets[3 * std::min(i, n_sets - 1)].shape(0);
    shapes.push_back(shape);
  }
  std::vector<mx::Dtype> dtypes(shapes.size(), mx::float32);
  auto prim = std::make_shared<ep_cpu_qgemv_sets>(mx::to_stream(dev), n_sets, group, biased, swiglu, quant_block);
  return mx::array::make_arrays(std::move(shapes), dtypes, prim, std::move(ins));
#else
  (void)s, (void)x, (void)sets, (void)adds, (void)group, (void)swiglu;
  throw bridge_error("cpu_qgemv_sets: x86-64 only");
#endif
}

/* GatherBlockQuantized on MLX's CPU stream (cpu_gather_bq): the parameters of EpCpuGatherBQ. */
struct gather_bq_params {
  int64_t n, rest, d, rows, pd, nb, zpd, block;
  int32_t bits, has_zp, half; /* half: float16 scales and output, else float32 */
};

template <typename S>
void gather_bq_rows(const gather_bq_params &p, const std::vector<mx::array> &in, S *out) {
  const uint8_t *data = in[0].data<uint8_t>(), *zps = in[3].data<uint8_t>();
  const int64_t *idx = in[1].data<int64_t>();
  const S *scales = in[2].data<S>();
  const int per = 8 / p.bits;
  const unsigned mask = (1u << p.bits) - 1u;
  for (int64_t i = 0; i < p.n; i++) {
    int64_t row = idx[i];
    if (row < 0) row += p.rows;
    S *dst = out + i * p.rest * p.d;
    if (row < 0 || row >= p.rows) { /* outside the table: a zero row, as ORT gives */
      std::fill(dst, dst + p.rest * p.d, static_cast<S>(0.0f));
      continue;
    }
    for (int64_t r = 0; r < p.rest; r++) {
      const int64_t base = row * p.rest + r;
      for (int64_t e = 0; e < p.d; e++) {
        const int64_t blk = e / p.block;
        const float q = static_cast<float>((data[base * p.pd + e / per] >> ((e % per) * p.bits)) & mask);
        const float z = p.has_zp ? static_cast<float>((zps[base * p.zpd + blk / per] >> ((blk % per) * p.bits)) & mask)
                                 : static_cast<float>(1 << (p.bits - 1));
        dst[r * p.d + e] = static_cast<S>((q - z) * static_cast<float>(scales[base * p.nb + blk]));
      }
    }
  }
}

void gather_bq_task(const gather_bq_params &p, const std::vector<mx::array> &in, std::vector<mx::array> &out) {
  if (p.half) return gather_bq_rows(p, in, out[0].data<mx::float16_t>());
  gather_bq_rows(p, in, out[0].data<float>());
}

mx::array cpu_gather_bq(const mlxb_scope *s, const mx::array &data, const mx::array &indices, const mx::array &scales,
                        const std::optional<mx::array> &zero_points, int bits, int64_t block, mx::Shape shape,
                        int64_t rest, int64_t zpd) {
  gather_bq_params p;
  std::memset(&p, 0, sizeof p);
  p.n = static_cast<int64_t>(indices.size()), p.rest = rest, p.rows = data.shape(0), p.pd = data.shape(-1);
  p.d = p.pd * (8 / bits), p.nb = scales.shape(-1), p.zpd = zpd, p.block = block, p.bits = bits;
  p.has_zp = zero_points.has_value(), p.half = scales.dtype() == mx::float16;
  mx::array idx = indices.dtype() == mx::int64 ? indices : mx::astype(indices, mx::int64, scope_dev(s));
  return make_task(s, "EpCpuGatherBQ", p, gather_bq_task, {data, idx, scales, zero_points ? *zero_points : data},
                   {std::move(shape)}, {scales.dtype()})
      .at(0);
}

} // namespace mlxb_detail

using namespace mlxb_detail;

bool mlxb_quantize_blocks_available(const mlxb_scope *s, mlxb_dtype t) {
#if defined(EP_CPU_KERNELS)
  static const bool on = env_switch_on("ORT_EP_MLX_CPU_GEMV");
  return on && s && is_cpu_scope(s) && t == MLXB_F32;
#else
  (void)s, (void)t;
  return false;
#endif
}

mlxb_array *mlxb_quantize_blocks(mlxb_scope *s, const mlxb_array *x, int64_t block) {
  return guard(s, "mlxb_quantize_blocks", [&] {
    const mx::array &xa = arr(x);
    if (!mlxb_quantize_blocks_available(s, from_mx(xa.dtype())))
      throw bridge_error("block quantization: a CPU scope's float32 only");
    if (block < 1 || xa.ndim() < 1 || xa.shape(-1) % block)
      throw bridge_error("block quantization: blocks must tile the last axis");
    quantize_params p;
    std::memset(&p, 0, sizeof p);
    p.block = block;
    return make_task(s, "EpCpuQuantizeBlocks", p, quantize_task, {xa}, {xa.shape()}, {mx::float32}).at(0);
  });
}
