/* A float32 product with a constant right operand on MLX's CPU stream: A [..., K] times B [K, N],
 * B packed once at Compile (EpCpuPackB) into panels of PANEL_COLS columns, each K-major ([K][32]),
 * and the product (EpCpuGemmPacked) a register-tiled AVX-512 kernel over those panels.
 *
 * Why: MLX's CPU matmul is the BLAS's SGEMM, which packs both operands into its own layout on every
 * call. For the weights of a transformer layer that packing was 13-15% of the product's samples
 * (OpenBLAS, BERT's 128 x 768 x 3072), and ORT's CPU EP packs them once per session (MLAS). Here a
 * tile of ROWS rows of A by one panel sits in 24 vector registers while K runs through it in blocks
 * of K_BLOCK; A is read in place, a row-major [M, K], its values broadcast. On the 2-core AMD EPYC
 * (Zen 4) that took 120 x 768 x 3072 from OpenBLAS's 180 to 216 GFLOP/s (best of 50, both threads).
 *
 * Each output is summed over K in order, one fused multiply-add per term (the BLAS's kernels sum in
 * other orders: the same products, rounded apart differently), then, where asked, a bias added and
 * ReLU applied to the panel while it is in the cache (the epilogue). A convolution (EpCpuConvPacked)
 * unfolds its input's windows into the rows of A first. Only on x86-64: with AVX-512F, and for
 * convolutions also with AVX2 and FMA (cpu_gemm_packed_takes; anything else stays on MLX);
 * ORT_EP_MLX_CPU_GEMM=0 turns it off. The
 * panels of one product are shared among the threads of bridge_cpu_pool.cpp. */
#include "mlx/bridge_cpu_task.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#if defined(__x86_64__) && !defined(__APPLE__)
#define EP_CPU_GEMM 1
#include <immintrin.h>
#endif

namespace mlxb_detail {

namespace {

/* K_BLOCK: a panel's block of K (128 bytes a row) and ROWS rows of A stay in the 1 MiB L2 of a
 * Zen 4 core while the rows of A go through it; blocks of 256 and 1024 (fewer passes over C but the
 * panel's block no longer in L1) measured 193 and 210 GFLOP/s there, whole K (up to 4096) 216. */
enum { PANEL_COLS = CPU_GEMM_PANEL_COLS, ROWS = 12, K_BLOCK = 4096 };

int64_t panel_count(int64_t n) { return (n + PANEL_COLS - 1) / PANEL_COLS; }

/* The pool's units: PANEL_UNITS per panel (it shares out ranges of at least 256 units), a panel
 * belonging to the part that holds its first unit. */
enum { PANEL_UNITS = 256 };

int64_t first_panel(int64_t unit) { return (unit + PANEL_UNITS - 1) / PANEL_UNITS; }

/* ---- packing ------------------------------------------------------------------------------- */

struct pack_params {
  int64_t k, n;
  int32_t transposed; /* b is [N, K] (Gemm's transB) rather than [K, N] */
  int32_t pad_;
};

struct pack_args {
  const pack_params *p;
  const float *b;
  float *dst;
};

/* The panels of units [lo, hi): out[j][k][c] = B[k, 32 j + c], zero past N. */
void pack_panels(const void *ctx, int64_t lo, int64_t hi) {
  const auto &a = *static_cast<const pack_args *>(ctx);
  const pack_params &p = *a.p;
  for (int64_t j = first_panel(lo); j < first_panel(hi); j++)
    for (int64_t k = 0; k < p.k; k++) {
      float *row = a.dst + (j * p.k + k) * PANEL_COLS;
      for (int64_t c = 0; c < PANEL_COLS; c++) {
        const int64_t n = j * PANEL_COLS + c;
        row[c] = n >= p.n ? 0.0f : p.transposed ? a.b[n * p.k + k] : a.b[k * p.n + n];
      }
    }
}

/* At Compile; a model's weights shared out among the helpers panel by panel (a BERT layer's took
 * 16 ms alone). */
void pack_task(const pack_params &p, const std::vector<mx::array> &in, std::vector<mx::array> &out) {
  pack_args a{&p, in[0].data<float>(), out[0].data<float>()};
  cpu_parallel_for(panel_count(p.n) * PANEL_UNITS, pack_panels, &a);
}

/* ---- the product ---------------------------------------------------------------------------- */

/* What follows the sums in the same pass (an epilogue): a bias [N] added, then ReLU, as a
 * following Add and Relu node would compute them (max(v, 0) keeps NaN, as MLX's maximum does). */
struct epilogue {
  int32_t has_bias, relu;
};

struct product_params {
  int64_t m, k, n;
  epilogue after;
};

struct conv_params {
  int64_t n, h, w, c, m, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow;
  epilogue after;
};

#if defined(EP_CPU_GEMM)

/* C[R rows, 32] (row stride ldc) = (accumulate ? C : 0) + A[R rows, kc] (row stride lda) times the
 * panel block bp [kc][32]. (GCC 12's AVX-512 headers start some intrinsics from an "undefined"
 * register, which its -Wmaybe-uninitialized reports once inlined.) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
template <int R>
__attribute__((target("avx512f"))) void tile(const float *a, int64_t lda, const float *bp, int64_t kc, float *c,
                                             int64_t ldc, bool accumulate) {
  __m512 lo[R], hi[R];
  for (int r = 0; r < R; r++) {
    lo[r] = accumulate ? _mm512_loadu_ps(c + r * ldc) : _mm512_setzero_ps();
    hi[r] = accumulate ? _mm512_loadu_ps(c + r * ldc + 16) : _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < kc; k++) {
    const __m512 b0 = _mm512_loadu_ps(bp + k * PANEL_COLS), b1 = _mm512_loadu_ps(bp + k * PANEL_COLS + 16);
    for (int r = 0; r < R; r++) {
      const __m512 x = _mm512_set1_ps(a[r * lda + k]);
      lo[r] = _mm512_fmadd_ps(x, b0, lo[r]);
      hi[r] = _mm512_fmadd_ps(x, b1, hi[r]);
    }
  }
  for (int r = 0; r < R; r++) {
    _mm512_storeu_ps(c + r * ldc, lo[r]);
    _mm512_storeu_ps(c + r * ldc + 16, hi[r]);
  }
}
#pragma GCC diagnostic pop

/* The same tile with AVX2 and FMA (16 vector registers of 8 lanes): a panel's two halves of 16
 * columns one after the other, R rows of A in runs of at most RUN_AVX2 (8 sums, two of B, one of A
 * in registers; with runs of 6, 15 registers, GCC 12 stored every sum to the stack each step, half
 * the speed). Each output is the same ordered chain of fused multiply-adds as above, so both forms
 * give the same bits. */
enum { RUN_AVX2 = 4 };

template <int R>
__attribute__((target("avx2,fma"))) void half_tile_avx2(const float *a, int64_t lda, const float *bp, int64_t kc,
                                                        float *c, int64_t ldc, bool accumulate) {
  __m256 lo[R], hi[R];
  for (int r = 0; r < R; r++) {
    lo[r] = accumulate ? _mm256_loadu_ps(c + r * ldc) : _mm256_setzero_ps();
    hi[r] = accumulate ? _mm256_loadu_ps(c + r * ldc + 8) : _mm256_setzero_ps();
  }
  for (int64_t k = 0; k < kc; k++) {
    const __m256 b0 = _mm256_loadu_ps(bp + k * PANEL_COLS), b1 = _mm256_loadu_ps(bp + k * PANEL_COLS + 8);
    for (int r = 0; r < R; r++) {
      const __m256 x = _mm256_set1_ps(a[r * lda + k]);
      lo[r] = _mm256_fmadd_ps(x, b0, lo[r]);
      hi[r] = _mm256_fmadd_ps(x, b1, hi[r]);
    }
  }
  for (int r = 0; r < R; r++) {
    _mm256_storeu_ps(c + r * ldc, lo[r]);
    _mm256_storeu_ps(c + r * ldc + 8, hi[r]);
  }
}

template <int R>
void tile_avx2(const float *a, int64_t lda, const float *bp, int64_t kc, float *c, int64_t ldc, bool accumulate) {
  constexpr int run = R < RUN_AVX2 ? R : RUN_AVX2;
  for (int half = 0; half < 2; half++)
    half_tile_avx2<run>(a, lda, bp + 16 * half, kc, c + 16 * half, ldc, accumulate);
  if constexpr (R > RUN_AVX2) tile_avx2<R - RUN_AVX2>(a + RUN_AVX2 * lda, lda, bp, kc, c + RUN_AVX2 * ldc, ldc, accumulate);
}

using tile_fn = void (*)(const float *, int64_t, const float *, int64_t, float *, int64_t, bool);
template <int... R>
constexpr std::array<tile_fn, sizeof...(R)> tiles_of(std::integer_sequence<int, R...>) {
  return {tile<R + 1>...};
}
template <int... R>
constexpr std::array<tile_fn, sizeof...(R)> tiles_avx2_of(std::integer_sequence<int, R...>) {
  return {tile_avx2<R + 1>...};
}
/* [r - 1]: the tile of r rows, for this CPU (cpu_gemm_packed_takes: AVX-512F, else AVX2 and FMA) */
const tile_fn *tiles() {
  static constexpr auto wide = tiles_of(std::make_integer_sequence<int, ROWS>{});
  static constexpr auto narrow = tiles_avx2_of(std::make_integer_sequence<int, ROWS>{});
  static const tile_fn *chosen = cpu_avx512_available() ? wide.data() : narrow.data();
  return chosen;
}

/* C[m, cols] (row stride ldc) += bias[c] (bias: null, or the panel's first column's), then ReLU. */
void apply_epilogue(float *c, int64_t m, int64_t ldc, int64_t cols, const float *bias, bool relu) {
  for (int64_t i = 0; i < m; i++) {
    float *row = c + i * ldc;
    if (bias)
      for (int64_t j = 0; j < cols; j++) row[j] = row[j] + bias[j];
    if (relu)
      for (int64_t j = 0; j < cols; j++) row[j] = row[j] > 0.0f || row[j] != row[j] ? row[j] : 0.0f;
  }
}

/* C[m, cols] (row stride ldc) = A [m, k] times one packed panel [k][32] (cols <= 32 of its
 * columns): K in blocks of K_BLOCK, ROWS rows of A at a time; with fewer than 32 columns through a
 * scratch [m][32] (scratch: m * 32 floats, or null when cols is 32). Then the epilogue over the
 * panel's columns while they are in the cache (bias: the panel's, or null). */
void panel_product(const float *a, int64_t m, int64_t k, const float *panel, float *c, int64_t ldc, int64_t cols,
                   float *scratch, const float *bias = nullptr, bool relu = false) {
  const bool edge = cols < PANEL_COLS;
  const tile_fn *tile_of = tiles();
  float *out = edge ? scratch : c;
  const int64_t ld = edge ? int64_t{PANEL_COLS} : ldc;
  for (int64_t k0 = 0; k0 < k; k0 += K_BLOCK) {
    const int64_t kc = std::min<int64_t>(K_BLOCK, k - k0);
    for (int64_t i = 0; i < m; i += ROWS) {
      const int64_t rows = std::min<int64_t>(ROWS, m - i);
      tile_of[rows - 1](a + i * k + k0, k, panel + k0 * PANEL_COLS, kc, out + i * ld, ld, k0 > 0);
    }
  }
  for (int64_t i = 0; edge && i < m; i++) std::memcpy(c + i * ldc, scratch + i * PANEL_COLS, sizeof(float) * cols);
  if (bias || relu) apply_epilogue(c, m, ldc, cols, bias, relu);
}

struct product_args {
  const float *a, *packed;
  float *c;
  int64_t m, k, n;
  const float *bias; /* [n] or null */
  bool relu;
};

/* Panels [j0, j1) of C = A B. */
void product_panels(const product_args &p, int64_t j0, int64_t j1) {
  const int64_t last = panel_count(p.n) - 1;
  const bool partial = p.n % PANEL_COLS != 0 && j1 > last;
  std::vector<float> scratch(partial ? static_cast<size_t>(p.m) * PANEL_COLS : 0);
  for (int64_t j = j0; j < j1; j++)
    panel_product(p.a, p.m, p.k, p.packed + j * p.k * PANEL_COLS, p.c + j * PANEL_COLS, p.n,
                  std::min<int64_t>(PANEL_COLS, p.n - j * PANEL_COLS), scratch.data(),
                  p.bias ? p.bias + j * PANEL_COLS : nullptr, p.relu);
}


void product_part(const void *ctx, int64_t lo, int64_t hi) {
  const auto &p = *static_cast<const product_args *>(ctx);
  const int64_t j0 = first_panel(lo), j1 = first_panel(hi);
  if (j0 >= j1) return;
  try {
    product_panels(p, j0, j1);
  } catch (...) { /* the edge's scratch not allocated (a helper thread must not throw): NaN in its columns */
    const int64_t c0 = j0 * PANEL_COLS, c1 = std::min(p.n, j1 * PANEL_COLS);
    for (int64_t i = 0; i < p.m; i++)
      std::fill(p.c + i * p.n + c0, p.c + i * p.n + c1, std::numeric_limits<float>::quiet_NaN());
  }
}


/* Rows of A instead, ROWS at a time (ROW_UNITS units each): where there are few panels (a
 * convolution's output channels) and many rows (its positions), each part takes every panel. */
enum { ROW_UNITS = 64 };

void product_rows_part(const void *ctx, int64_t lo, int64_t hi) {
  const auto &p = *static_cast<const product_args *>(ctx);
  const int64_t r0 = std::min(p.m, (lo + ROW_UNITS - 1) / ROW_UNITS * ROWS);
  const int64_t r1 = std::min(p.m, (hi + ROW_UNITS - 1) / ROW_UNITS * ROWS);
  if (r0 >= r1) return;
  product_args rows{p.a + r0 * p.k, p.packed, p.c + r0 * p.n, r1 - r0, p.k, p.n, p.bias, p.relu};
  product_part(&rows, 0, panel_count(p.n) * PANEL_UNITS);
}

/* C = A B: a small product on the calling thread (handing parts to the helpers costs a few
 * microseconds, the time of about 2^18 multiply-adds: a 10-layer MLP of width 64 took 50% longer
 * shared), else over the pool, by panels where there are enough to share, else by rows. */
void product(const product_args &args) {
  enum { FEW_PANELS = 8 };
  constexpr int64_t SMALL = int64_t(1) << 18;
  const int64_t panels = panel_count(args.n), tiles = (args.m + ROWS - 1) / ROWS;
  if (args.m * args.k <= SMALL / std::max<int64_t>(1, panels * PANEL_COLS)) product_part(&args, 0, panels * PANEL_UNITS);
  else if (panels >= FEW_PANELS || tiles < 4) cpu_parallel_for(panels * PANEL_UNITS, product_part, &args);
  else cpu_parallel_for(tiles * ROW_UNITS, product_rows_part, &args);
}

/* inputs: a [m, k] (any leading shape), packed [panels, k, 32], then bias [n] when it has one;
 * output [m, n] */
void product_task(const product_params &p, const std::vector<mx::array> &in, std::vector<mx::array> &out) {
  product({in[0].data<float>(), in[1].data<float>(), out[0].data<float>(), p.m, p.k, p.n,
           p.after.has_bias ? in[2].data<float>() : nullptr, p.after.relu != 0});
}

/* ---- convolution: the unfolded windows times the packed weight -------------------------------- */

struct unfold_args {
  const conv_params *p;
  const float *x;
  float *cols;
};

/* Rows [lo, hi) of the unfolded input: row (b, y, x) holds the window of output position (y, x),
 * tap by tap ([kh][kw][C], the channels-last weight's order), zeros where a tap falls in the padding. */
void unfold_rows(const void *ctx, int64_t lo, int64_t hi) {
  const auto &u = *static_cast<const unfold_args *>(ctx);
  const conv_params &p = *u.p;
  const int64_t k = p.kh * p.kw * p.c;
  for (int64_t r = lo; r < hi; r++) {
    const int64_t b = r / (p.oh * p.ow), oy = r / p.ow % p.oh, ox = r % p.ow;
    float *dst = u.cols + r * k;
    for (int64_t i = 0; i < p.kh; i++)
      for (int64_t j = 0; j < p.kw; j++, dst += p.c) {
        const int64_t iy = oy * p.sh - p.ph + i * p.dh, ix = ox * p.sw - p.pw + j * p.dw;
        if (iy < 0 || iy >= p.h || ix < 0 || ix >= p.w) std::fill(dst, dst + p.c, 0.0f);
        else std::memcpy(dst, u.x + ((b * p.h + iy) * p.w + ix) * p.c, sizeof(float) * p.c);
      }
  }
}

/* inputs: x [n, h, w, c] (channels-last), packed weight [panels, kh * kw * c, 32], then bias [m]
 * when it has one; output [n, oh, ow, m] */
void conv_task(const conv_params &p, const std::vector<mx::array> &in, std::vector<mx::array> &out) {
  const int64_t rows = p.n * p.oh * p.ow, k = p.kh * p.kw * p.c;
  /* not zero-filled: unfold_rows writes every element. cpu_task turns a failure into NaN out. */
  std::unique_ptr<float[]> cols(new float[static_cast<size_t>(rows * k)]);
  unfold_args u{&p, in[0].data<float>(), cols.get()};
  cpu_parallel_for(rows, unfold_rows, &u);
  product({cols.get(), in[1].data<float>(), out[0].data<float>(), rows, k, p.m,
           p.after.has_bias ? in[2].data<float>() : nullptr, p.after.relu != 0});
}

#else

void conv_task(const conv_params &, const std::vector<mx::array> &, std::vector<mx::array> &out) {
  for (auto &o : out) std::fill(o.data<float>(), o.data<float>() + o.size(), std::numeric_limits<float>::quiet_NaN());
}

void product_task(const product_params &, const std::vector<mx::array> &, std::vector<mx::array> &out) {
  for (auto &o : out) std::fill(o.data<float>(), o.data<float>() + o.size(), std::numeric_limits<float>::quiet_NaN());
}

#endif

/* Products (MatMul, Gemm, an RNN's input projection) take the packed GEMM with AVX-512F only: with
 * AVX2 its tile (4 x 16 sums a step) trailed OpenBLAS's SGEMM (a 2-core AMD EPYC without AVX-512,
 * 128 x 768 x 3072: 70-95 against 97-116 GFLOP/s). A convolution takes it with AVX2 and FMA too:
 * there the unfolded windows, one product and the bias and ReLU in its epilogue beat MLX's
 * convolution with its separate Add and Maximum (squeezenet on that machine: 12.2 against 15.7 ms,
 * the medians of four alternating processes each). */
bool cpu_gemm_packed_takes(const mlxb_scope *s, bool convolution) {
  static const bool on = env_switch_on("ORT_EP_MLX_CPU_GEMM");
#if defined(EP_CPU_GEMM)
  return on && s && is_cpu_scope(s) && (cpu_avx512_available() || (convolution && cpu_vmath_available()));
#else
  (void)on, (void)s, (void)convolution;
  return false; /* the kernels are x86-64's (not macOS's: its BLAS is Accelerate's) */
#endif
}

mx::array cpu_gemm_pack(const mlxb_scope *s, const mx::array &b, bool transposed) {
  if (b.ndim() != 2 || b.dtype() != mx::float32) throw bridge_error("packed GEMM: B must be a float32 matrix");
  pack_params p{};
  p.k = transposed ? b.shape(1) : b.shape(0);
  p.n = transposed ? b.shape(0) : b.shape(1);
  p.transposed = transposed;
  if (p.k < 1 || p.n < 1) throw bridge_error("packed GEMM: B is empty");
  cpu_pool_start();
  const mx::Shape shape = {static_cast<int>(panel_count(p.n)), static_cast<int>(p.k), PANEL_COLS};
  return make_task(s, "EpCpuPackB", p, pack_task, {b}, {shape}, {mx::float32}).at(0);
}

/* The epilogue's parameters, and its bias (float32 [n]) appended to a task's inputs. */
epilogue epilogue_of(const mlxb_array *bias, bool relu, int64_t n, std::vector<mx::array> &inputs) {
  epilogue e{};
  e.relu = relu;
  if (!bias) return e;
  const mx::array &b = arr(bias);
  if (b.dtype() != mx::float32 || b.ndim() != 1 || b.shape(0) != n)
    throw bridge_error("packed GEMM: the bias must be float32 [N]");
  e.has_bias = 1;
  inputs.push_back(b);
  return e;
}

mx::array cpu_gemm_packed(const mlxb_scope *s, const mx::array &a, const mx::array &packed, int64_t n,
                          const mlxb_array *bias, bool relu) {
  if (a.dtype() != mx::float32 || a.ndim() < 1 || packed.ndim() != 3 || packed.shape(2) != PANEL_COLS ||
      packed.dtype() != mx::float32 || n < 1 || panel_count(n) != packed.shape(0) || a.shape(-1) != packed.shape(1))
    throw bridge_error("packed GEMM: A [..., K] float32 and B packed from a [K, N] float32");
  if (a.size() == 0) throw bridge_error("packed GEMM: A is empty");
  product_params p{};
  p.k = a.shape(-1);
  p.m = static_cast<int64_t>(a.size()) / p.k;
  p.n = n;
  mx::Shape shape = a.shape();
  shape.back() = static_cast<int>(n);
  std::vector<mx::array> inputs = {a, packed};
  p.after = epilogue_of(bias, relu, n, inputs);
  cpu_pool_start(); /* its threads start here, where a failure is the scope's error, not in the task */
  return make_task(s, "EpCpuGemmPacked", p, product_task, std::move(inputs), {shape}, {mx::float32}).at(0);
}

mx::array cpu_conv_packed(const mlxb_scope *s, const mx::array &x, const mx::array &packed, const mlxb_conv2d &g,
                          const mlxb_array *bias, bool relu) {
  conv_params p{};
  p.n = x.ndim() == 4 ? x.shape(0) : 0, p.h = x.ndim() == 4 ? x.shape(1) : 0, p.w = x.ndim() == 4 ? x.shape(2) : 0;
  p.c = x.ndim() == 4 ? x.shape(3) : 0, p.m = g.m, p.kh = g.kh, p.kw = g.kw, p.sh = g.sh, p.sw = g.sw, p.ph = g.ph;
  p.pw = g.pw, p.dh = g.dh, p.dw = g.dw, p.oh = g.oh, p.ow = g.ow;
  const bool positive = p.n > 0 && p.h > 0 && p.w > 0 && p.c > 0 && p.m > 0 && p.kh > 0 && p.kw > 0 && p.sh > 0 &&
                        p.sw > 0 && p.dh > 0 && p.dw > 0 && p.oh > 0 && p.ow > 0 && p.ph >= 0 && p.pw >= 0;
  if (x.dtype() != mx::float32 || !positive || packed.ndim() != 3 || packed.shape(2) != PANEL_COLS ||
      packed.shape(0) != panel_count(p.m) || packed.shape(1) != p.kh * p.kw * p.c)
    throw bridge_error("packed convolution: x [N, H, W, C] float32, a weight packed from [M, kh * kw * C]");
  /* taps outside the input read as zeros (unfold_rows): no extent reaches memory outside x */
  if (p.n * p.oh * p.ow > std::numeric_limits<int64_t>::max() / (p.kh * p.kw * p.c))
    throw bridge_error("packed convolution: the unfolded input's size overflows");
  const mx::Shape shape = {static_cast<int>(p.n), static_cast<int>(p.oh), static_cast<int>(p.ow), static_cast<int>(p.m)};
  std::vector<mx::array> inputs = {x, packed};
  p.after = epilogue_of(bias, relu, p.m, inputs);
  cpu_pool_start();
  return make_task(s, "EpCpuConvPacked", p, conv_task, std::move(inputs), {shape}, {mx::float32}).at(0);
}

} // namespace

#if defined(EP_CPU_GEMM)
void cpu_gemm_panel(const float *a, int64_t m, int64_t k, const float *panel, float *c, int64_t ldc, int64_t cols,
                    float *scratch) {
  panel_product(a, m, k, panel, c, ldc, cols, scratch);
}
#else
void cpu_gemm_panel(const float *, int64_t, int64_t, const float *, float *, int64_t, int64_t, float *) {}
#endif

} // namespace mlxb_detail

using namespace mlxb_detail;

extern "C" {

bool mlxb_gemm_packed_available(const mlxb_scope *s) { return cpu_gemm_packed_takes(s, false); }

/* Packing, products and convolutions take the wider rule: which products run packed is decided
 * where a weight is packed (MatMul, Gemm and the RNNs ask mlxb_gemm_packed_available, Conv, whose
 * one-tap form is a product, mlxb_conv_packed_available). */
bool mlxb_conv_packed_available(const mlxb_scope *s) { return cpu_gemm_packed_takes(s, true); }

mlxb_array *mlxb_gemm_pack(mlxb_scope *s, const mlxb_array *b, bool transposed) {
  return guard(s, "mlxb_gemm_pack", [&] {
    if (!b) throw null_arg{};
    if (!cpu_gemm_packed_takes(s, true)) throw bridge_error("packed GEMM: not available on this scope or CPU");
    return cpu_gemm_pack(s, arr(b), transposed);
  });
}

mlxb_array *mlxb_conv_packed(mlxb_scope *s, const mlxb_array *x, const mlxb_array *packed, const mlxb_conv2d *g,
                             const mlxb_array *bias, bool relu) {
  return guard(s, "mlxb_conv_packed", [&] {
    if (!x || !packed || !g) throw null_arg{};
    if (!cpu_gemm_packed_takes(s, true)) throw bridge_error("packed convolution: not available on this scope or CPU");
    return cpu_conv_packed(s, arr(x), arr(packed), *g, bias, relu);
  });
}

mlxb_array *mlxb_gemm_packed(mlxb_scope *s, const mlxb_array *a, const mlxb_array *packed, int64_t n,
                             const mlxb_array *bias, bool relu) {
  return guard(s, "mlxb_gemm_packed", [&] {
    if (!a || !packed) throw null_arg{};
    if (!cpu_gemm_packed_takes(s, true)) throw bridge_error("packed GEMM: not available on this scope or CPU");
    return cpu_gemm_packed(s, arr(a), arr(packed), n, bias, relu);
  });
}

} // extern "C"
