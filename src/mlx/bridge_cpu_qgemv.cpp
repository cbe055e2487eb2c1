/* MatMulNBits' products on MLX's CPU stream: a primitive of our own (EpCpuQGemvSets).
 *
 * Why: MLX's CPU quantized matmul walks the packed weights at about 1.1 G values a second on this
 * project's x86 machines (scalar unpacking), once per row, and its CPU dequantization runs at
 * 0.2-0.5 G values a second: a decode step spent most of its time in the first, a prompt in the
 * second. Its two forms compute the same float32 products:
 * - one row: y[n] = sum_g (scale * sum_{k in g} x[k] q[n,k] + bias * sum_{k in g}
 *   x[k]) (the reordering the CUDA GEMV kernel uses), 32 nibbles per AVX2 step, the output columns
 *   spread over a few threads; a row whose sums are not finite is summed term by term as written;
 * - many rows: tiles of about 2 MiB of weights dequantized (scale * q + bias) by the
 *   same threads, each multiplied with every row by one BLAS GEMM (src/mlx/cpu_blas.c's BLAS)
 *   while it is in the cache.
 * One task takes up to three weight sets of one x (sibling projections), their bias Adds and a gated
 * MLP's activation, either form per set (the bridge's mlxb_qgemv_sets on a CPU scope); one set alone
 * is MLX's quantized matmul's place (cpu_qgemv).
 * The threads are bridge_cpu_pool.cpp's.
 *
 * They take float32 x, 4-bit weights in MLX's affine layout (element 8w + j is nibble j of word
 * w), float32 scales and biases, groups of a multiple of 32. Anything else, and any CPU without
 * AVX2 and FMA, stays on MLX (cpu_qgemv_takes). ORT_EP_MLX_CPU_GEMV=0 turns them off.
 *
 * The work is enqueued on MLX's CPU stream like MLX's own CPU ops (its command encoder), holding
 * its input arrays until it has run. */
#include "mlx/bridge_cpu_task.h"
#include "mlx/primitives.h"

#include <algorithm>
#include <cmath>
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

/* acc + x[k] * q[k] over the 32 elements of four words. */
__attribute__((target("avx2,fma"))) inline __m256 dot32(const uint32_t *w, const float *x, __m256 acc) {
  __m256 q[4];
  unpack32(w, q);
  for (int i = 0; i < 4; i++) acc = _mm256_fmadd_ps(q[i], _mm256_loadu_ps(x + 8 * i), acc);
  return acc;
}

__attribute__((target("avx2,fma"))) inline float horizontal_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

struct gemv_args {
  const float *x, *scales, *biases, *group_sums;
  const uint32_t *w;
  float *y;
  int k, group;
};

/* Output columns [lo, hi): per column, the groups' scaled sums kept in one vector (a horizontal
 * sum per column, not per group), then the biases' term sum_g bias[g] * sum(x in g). */
__attribute__((target("avx2,fma"))) void gemv_columns(const gemv_args &a, int64_t lo, int64_t hi) {
  const int groups = a.k / a.group, words_per_row = a.k / 8, chunks = a.group / 32;
  for (int64_t n = lo; n < hi; n++) {
    const uint32_t *row = a.w + n * words_per_row;
    const float *sc = a.scales + n * groups, *bi = a.biases + n * groups;
    __m256 scaled = _mm256_setzero_ps();
    for (int g = 0; g < groups; g++) {
      __m256 acc = _mm256_setzero_ps();
      const uint32_t *wg = row + (int64_t)g * (a.group / 8);
      const float *xg = a.x + (int64_t)g * a.group;
      for (int c = 0; c < chunks; c++) acc = dot32(wg + 4 * c, xg + 32 * c, acc);
      scaled = _mm256_fmadd_ps(_mm256_set1_ps(sc[g]), acc, scaled);
    }
    float biased = 0.0f;
    for (int g = 0; g < groups; g++) biased += bi[g] * a.group_sums[g];
    a.y[n] = horizontal_sum(scaled) + biased;
  }
}

/* The same columns summed as written, x[k] * (scale * q + bias) term by term: for a row whose sums
 * are not finite (an infinity or NaN in x, or a group overflowing), where the reordered form could
 * turn ORT's infinity into NaN (infinity * q with q = 0, where ORT multiplies by the bias). */
void gemv_columns_as_written(const gemv_args &a, int64_t lo, int64_t hi) {
  const int groups = a.k / a.group, words_per_row = a.k / 8;
  for (int64_t n = lo; n < hi; n++) {
    const uint32_t *row = a.w + n * words_per_row;
    float total = 0.0f;
    for (int k = 0; k < a.k; k++) {
      const int g = k / a.group;
      const float q = static_cast<float>((row[k / 8] >> (4 * (k % 8))) & 15u);
      total += a.x[k] * (a.scales[n * groups + g] * q + a.biases[n * groups + g]);
    }
    a.y[n] = total;
  }
}

void gemv_columns_of(const void *ctx, int64_t lo, int64_t hi) {
  gemv_columns(*static_cast<const gemv_args *>(ctx), lo, hi);
}

void gemv_columns_as_written_of(const void *ctx, int64_t lo, int64_t hi) {
  gemv_columns_as_written(*static_cast<const gemv_args *>(ctx), lo, hi);
}

enum { MAX_GROUPS = 8192 }; /* per row: the group sums live on the task's stack (nothing to allocate there) */

void qgemv_4bit(const float *x, const uint32_t *w, const float *scales, const float *biases, float *y, int64_t n, int k,
                int group) {
  float group_sums[MAX_GROUPS];
  bool finite = true;
  for (int g = 0; g < k / group; g++) {
    float sum = 0.0f;
    for (int i = 0; i < group; i++) sum += x[(int64_t)g * group + i];
    group_sums[g] = sum;
    finite = finite && std::isfinite(sum);
  }
  gemv_args a{x, scales, biases, group_sums, w, y, k, group};
  cpu_parallel_for(n, finite ? gemv_columns_of : gemv_columns_as_written_of, &a);
}

/* Weight rows [lo, hi) dequantized, scale * q + bias, into dst (row n at (n - lo) * k). */
__attribute__((target("avx2,fma"))) void dequantize_rows(const uint32_t *w, const float *scales, const float *biases,
                                                         int k, int group, int64_t lo, int64_t hi, float *dst) {
  const int groups = k / group, words_per_row = k / 8, chunks = group / 32;
  for (int64_t n = lo; n < hi; n++) {
    const uint32_t *row = w + n * words_per_row;
    float *out = dst + (n - lo) * k;
    for (int g = 0; g < groups; g++) {
      const __m256 sc = _mm256_set1_ps(scales[n * groups + g]), bi = _mm256_set1_ps(biases[n * groups + g]);
      for (int c = 0; c < chunks; c++) {
        __m256 q[4];
        unpack32(row + (int64_t)g * (group / 8) + 4 * c, q);
        float *o = out + (int64_t)g * group + 32 * c;
        for (int i = 0; i < 4; i++) _mm256_storeu_ps(o + 8 * i, _mm256_fmadd_ps(q[i], sc, bi));
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
  const uint32_t *w;
  const float *scales, *biases;
  float *tile;
  int64_t n0;
  int k, group;
};

void dequantize_tile_of(const void *ctx, int64_t lo, int64_t hi) {
  const auto &a = *static_cast<const dequantize_args *>(ctx);
  dequantize_rows(a.w, a.scales, a.biases, a.k, a.group, a.n0 + lo, a.n0 + hi, a.tile + lo * a.k);
}

void qgemm_4bit(const float *x, const uint32_t *w, const float *scales, const float *biases, float *y, int64_t rows,
                int64_t n, int k, int group, float *tile, int64_t tile_cols) {
  for (int64_t n0 = 0; n0 < n; n0 += tile_cols) {
    const int64_t cols = std::min(tile_cols, n - n0);
    dequantize_args a{w, scales, biases, tile, n0, k, group};
    cpu_parallel_for(cols, dequantize_tile_of, &a);
    cblas_sgemm(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_TRANS, (int)rows, (int)cols, k, 1.0f, x, k, tile, k, 0.0f,
                y + n0, (int)n);
  }
}

/* Up to three weight sets of one x in one task (sibling projections: Q, K and V), each row of x a
 * GEMV per set, each set's output optionally plus a bias [N] (a following Add node, in float32 as
 * that node adds); with swiglu, two sets of one N (gate, up) and the gated MLP's activation after
 * them: Sigmoid(gate) (bridge_cpu_vmath.cpp: MLX's sigmoid, bit for bit, as the Sigmoid node's
 * lowering gives it), gate times that, and that times up. Outputs in the CUDA kernel's order (sets
 * 0-2; swiglu: gate, up, product, sigmoid, gate * sigmoid), in x's leading shape. One set without
 * a bias is MatMulNBits' product alone (cpu_qgemv). */
class ep_cpu_qgemv_sets : public mx::Primitive {
 public:
  ep_cpu_qgemv_sets(mx::Stream stream, int sets, int group, unsigned biased, bool swiglu)
      : mx::Primitive(stream), sets_(sets), group_(group), biased_(biased), swiglu_(swiglu) {}

  void eval_cpu(const std::vector<mx::array> &inputs, std::vector<mx::array> &outputs) override {
    /* more than one row: the sets' products go tile by tile through BLAS (qgemm_4bit), the tile
     * allocated here, where a failure is an exception of this eval (the bridge's to report) */
    const int k = inputs[0].shape(-1);
    const bool many_rows = inputs[0].size() != static_cast<size_t>(k);
    int64_t tile_cols = 0;
    for (int i = 0; many_rows && i < sets_; i++) tile_cols = std::max(tile_cols, tile_columns(inputs[1 + 3 * i].shape(0), k));
    std::shared_ptr<float[]> tile(many_rows ? new float[tile_cols * k] : nullptr);
    cpu_task_arrays held;
    auto &encoder = cpu_task_begin(stream(), inputs, outputs, &held);
    encoder.dispatch([held = std::move(held), sets = sets_, group = group_, biased = biased_, swiglu = swiglu_, tile,
                      tile_cols]() mutable {
      try {
        run(held.ins, held.outs, sets, group, biased, swiglu, tile.get(), tile_cols);
      } catch (...) { /* nothing above throws today; a task must never let one reach MLX's scheduler */
        for (auto &out : held.outs)
          std::fill(out.data<float>(), out.data<float>() + out.size(), std::numeric_limits<float>::quiet_NaN());
      }
    });
  }

  void eval_gpu(const std::vector<mx::array> &, std::vector<mx::array> &) override {
    throw std::runtime_error("EpCpuQGemvSets: a CPU kernel has no GPU form");
  }

  const char *name() const override { return "EpCpuQGemvSets"; }

  bool is_equivalent(const mx::Primitive &other) const override {
    auto *o = dynamic_cast<const ep_cpu_qgemv_sets *>(&other);
    return o && o->sets_ == sets_ && o->group_ == group_ && o->biased_ == biased_ && o->swiglu_ == swiglu_;
  }

 private:
  /* inputs: x, then w, scales, biases of each set, then the sets' adds (x where a set has none) */
  static void run(const std::vector<mx::array> &in, std::vector<mx::array> &out, int sets, int group, unsigned biased,
                  bool swiglu, float *tile, int64_t tile_cols) {
    const mx::array &x = in[0];
    const int k = x.shape(-1);
    const int64_t rows = static_cast<int64_t>(x.size()) / k;
    for (int i = 0; i < sets; i++) {
      const mx::array &w = in[1 + 3 * i];
      const int64_t n = w.shape(0);
      float *y = out[i].data<float>();
      const float *scales = in[2 + 3 * i].data<float>(), *biases = in[3 + 3 * i].data<float>();
      if (tile) qgemm_4bit(x.data<float>(), w.data<uint32_t>(), scales, biases, y, rows, n, k, group, tile, tile_cols);
      else qgemv_4bit(x.data<float>(), w.data<uint32_t>(), scales, biases, y, n, k, group);
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
};

bool cpu_has_avx2_fma() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}

#endif /* EP_CPU_KERNELS */

} // namespace

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
         scales.dtype() == mx::float32 && biases->dtype() == mx::float32 && scales.ndim() == 2 &&
         scales.shape(0) == n && scales.shape(1) == k / group && biases->shape() == scales.shape();
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
  std::vector<mx::array> ins = {row_major(x, dev)};
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
  auto prim = std::make_shared<ep_cpu_qgemv_sets>(mx::to_stream(dev), n_sets, group, biased, swiglu);
  return mx::array::make_arrays(std::move(shapes), dtypes, prim, std::move(ins));
#else
  (void)s, (void)x, (void)sets, (void)adds, (void)group, (void)swiglu;
  throw bridge_error("cpu_qgemv_sets: x86-64 only");
#endif
}

} // namespace mlxb_detail
