/* One direction of RNN, GRU or LSTM on MLX's CPU stream as one operation of our own.
 *
 * Why: unrolled into MLX operations, a step is about fifteen of them (the recurrent product, the
 * gate slices, each activation, the state updates), and on the CPU each costs MLX's scheduling of a
 * task (~20 us on this project's x86 machines): a 16-step LSTM of hidden size 256 took 7 ms where
 * ORT's CPU EP takes 0.2, and the graph (and its trace) grows with the sequence. Here the input
 * projection stays one MLX matmul over the whole sequence (the lowering's), and the recurrence is
 * one task: per step the product h @ R^T (dot products for a few rows, src/mlx/cpu_blas.c's BLAS
 * for more) into the step's projection, then the gates in float32, with the arithmetic of the unrolled form (src/ops/rnn.c:
 * clip on every gate's input, activations as ORT defines them, sequence_lens freezing a finished
 * sequence's state and zeroing its outputs, a length of 0 giving zero states). sequence_lens are
 * only compared with the step index: no value read from them reaches an address.
 *
 * The GPU keeps the unrolled form (MLX's compiled GPU programs do not pay a task per operation). */
#include "mlx/bridge_cpu_task.h"
#include "mlx/primitives.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#if defined(__x86_64__) && !defined(__APPLE__)
#include <immintrin.h>
#endif

extern "C" void cblas_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                            const float *b, int ldb, float beta, float *c, int ldc);

using namespace mlxb_detail;

namespace {

enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };

/* The activations as the unrolled form computes them (rnn.c's apply_act), on float32. */
float activate(int kind, float alpha, float beta, float x) {
  switch (kind) {
    case MLXB_RACT_SIGMOID: return 1.0f / (1.0f + std::exp(-x));
    case MLXB_RACT_TANH: return std::tanh(x);
    case MLXB_RACT_RELU: return std::isnan(x) ? x : std::max(x, 0.0f);
    case MLXB_RACT_AFFINE: return x * alpha + beta;
    case MLXB_RACT_LEAKYRELU: return x >= 0.0f ? x : x * alpha;
    case MLXB_RACT_THRESHOLDEDRELU: return x > alpha ? x : 0.0f;
    case MLXB_RACT_SCALEDTANH: return alpha * std::tanh(x * beta);
    case MLXB_RACT_HARDSIGMOID: {
      float y = x * alpha + beta;
      return std::isnan(y) ? y : std::min(std::max(y, 0.0f), 1.0f);
    }
    case MLXB_RACT_ELU: return x >= 0.0f ? x : (std::exp(x) - 1.0f) * alpha;
    case MLXB_RACT_SOFTSIGN: return x / (std::fabs(x) + 1.0f);
    case MLXB_RACT_SOFTPLUS: return std::log(std::exp(x) + 1.0f);
    default: return std::numeric_limits<float>::quiet_NaN(); /* refused before a task is made */
  }
}

/* out[j] = beta * out[j] + dot(a, row j of w), j < n, rows of k. */
void dot_rows_plain(const float *__restrict a, const float *__restrict w, int ldw, int n, int k, float *out,
                    float beta) {
  for (int j = 0; j < n; j++) {
    const float *__restrict wr = w + (int64_t)j * ldw;
    float sum = 0.0f;
    for (int i = 0; i < k; i++) sum += a[i] * wr[i];
    out[j] = beta == 0.0f ? sum : out[j] + sum;
  }
}

/* R's rows [0, n) of length k as the products read them: panels of PANEL rows, each k-major
 * ([k][PANEL], so a step streams one panel front to back), the last padded with zero rows. That is
 * the packed GEMM's layout (bridge_cpu_gemm.cpp: mlxb_gemm_pack of R, transposed), which rnn.c's
 * prepare makes at Compile when R is a constant; otherwise R is packed here once per Run. */
struct packed_rows {
  enum { PANEL = CPU_GEMM_PANEL_COLS };
  int n = 0, k = 0;
  std::vector<float> data;
  const float *panels = nullptr; /* data's, or panels packed elsewhere (a view of them) */

  static int64_t count(int64_t rows) { return (rows + PANEL - 1) / PANEL; }

  void pack(const float *w, int ldw, int rows, int cols) {
    n = rows, k = cols;
    data.assign((size_t)count(n) * k * PANEL, 0.0f);
    panels = data.data();
    for (int j = 0; j < n; j++) {
      float *dst = data.data() + (size_t)(j / PANEL) * k * PANEL + j % PANEL;
      const float *src = w + (int64_t)j * ldw;
      for (int i = 0; i < k; i++) dst[(size_t)i * PANEL] = src[i];
    }
  }
  void view(const float *packed, int rows, int cols) { n = rows, k = cols, panels = packed; }
};

bool packed_product_available() {
#if defined(__x86_64__) && !defined(__APPLE__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2;
#else
  return false;
#endif
}

#if defined(__x86_64__) && !defined(__APPLE__)
/* sums[NP * PANEL] = a times the rows of NP consecutive panels at w: one accumulator per eight (AVX2)
 * or sixteen (AVX-512) outputs, eight in flight, each taking a[i] times the panel's row i for
 * i = 0, 1, ..., so each output is summed in dot_rows_plain's order. Products and sums are rounded
 * apart (no FMA, and this file is built with -ffp-contract=off: fused, a short row's rounding moved
 * far enough from ORT's to show through a GRU's recurrence). */
template <int NP>
__attribute__((target("avx2"))) void panel_sums_avx2(const float *a, const float *w, int k, float *sums) {
  enum { PANEL = packed_rows::PANEL, V = PANEL / 8 };
  __m256 s[NP * V];
  for (auto &v : s) v = _mm256_setzero_ps();
  for (int i = 0; i < k; i++) {
    const __m256 x = _mm256_set1_ps(a[i]);
    for (int q = 0; q < NP; q++) {
      const float *row = w + ((size_t)q * k + i) * PANEL;
      for (int v = 0; v < V; v++)
        s[q * V + v] = _mm256_add_ps(s[q * V + v], _mm256_mul_ps(x, _mm256_loadu_ps(row + 8 * v)));
    }
  }
  for (int v = 0; v < NP * V; v++) _mm256_storeu_ps(sums + 8 * v, s[v]);
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized" /* GCC 12's AVX-512 headers, as in bridge_cpu_gemm.cpp */
template <int NP>
__attribute__((target("avx512f"))) void panel_sums_avx512(const float *a, const float *w, int k, float *sums) {
  enum { PANEL = packed_rows::PANEL, V = PANEL / 16 };
  __m512 s[NP * V];
  for (auto &v : s) v = _mm512_setzero_ps();
  for (int i = 0; i < k; i++) {
    const __m512 x = _mm512_set1_ps(a[i]);
    for (int q = 0; q < NP; q++) {
      const float *row = w + ((size_t)q * k + i) * PANEL;
      for (int v = 0; v < V; v++)
        s[q * V + v] = _mm512_add_ps(s[q * V + v], _mm512_mul_ps(x, _mm512_loadu_ps(row + 16 * v)));
    }
  }
  for (int v = 0; v < NP * V; v++) _mm512_storeu_ps(sums + 16 * v, s[v]);
}
#pragma GCC diagnostic pop

/* NP panels' sums, NP <= the widest group (four with AVX-512, two with AVX2: eight accumulators) */
void panel_sums(bool wide, int np, const float *a, const float *w, int k, float *sums) {
  if (wide) {
    if (np == 4) return panel_sums_avx512<4>(a, w, k, sums);
    if (np == 3) return panel_sums_avx512<3>(a, w, k, sums);
    if (np == 2) return panel_sums_avx512<2>(a, w, k, sums);
    return panel_sums_avx512<1>(a, w, k, sums);
  }
  if (np == 2) return panel_sums_avx2<2>(a, w, k, sums);
  return panel_sums_avx2<1>(a, w, k, sums);
}

/* out[j] = beta * out[j] + dot(a, row j), j < n, from the packed panels, a group of them at a time. */
void packed_product(const float *a, const packed_rows &p, float *out, float beta) {
  enum { PANEL = packed_rows::PANEL };
  const bool wide = cpu_avx512_available();
  const int group = wide ? 4 : 2, panels = (int)packed_rows::count(p.n);
  alignas(64) float sums[4 * PANEL];
  for (int j = 0; j < panels; j += group) {
    const int np = std::min(group, panels - j);
    panel_sums(wide, np, a, p.panels + (size_t)j * p.k * PANEL, p.k, sums);
    const int row0 = j * PANEL, rows = std::min(np * PANEL, p.n - row0);
    for (int r = 0; r < rows; r++) out[row0 + r] = beta == 0.0f ? sums[r] : out[row0 + r] + sums[r];
  }
}
#else
void packed_product(const float *, const packed_rows &, float *, float) {} /* never: packed_product_available */
#endif

/* The packed product with its panels shared out (cpu_parallel_rows, a panel 256 units of the
 * shared range). A step's product of a hidden size of 256 (1024 rows of R) reads 1 MiB; two cores
 * read it in about half the time. */
void packed_product_shared(const float *a, const packed_rows &p, float *out, float beta) {
  enum { MIN_SHARED_ROWS = 256 }; /* fewer rows: too little to share */
  if (p.n < MIN_SHARED_ROWS) return packed_product(a, p, out, beta);
  cpu_parallel_rows<256>(packed_rows::count(p.n), true, [&](int64_t first, int64_t last) {
    packed_rows view; /* the panels [first, last) as a matrix of their rows, sharing nothing to copy */
    const int64_t row0 = first * packed_rows::PANEL;
    view.view(p.panels + static_cast<size_t>(first) * p.k * packed_rows::PANEL,
              static_cast<int>(std::min<int64_t>(p.n, last * packed_rows::PANEL) - row0), p.k);
    packed_product(a, view, out + row0, beta);
  });
}

/* Activation `kind` over v[0, n) in place: eight lanes at a time for sigmoid and tanh where the CPU
 * has AVX2 and FMA (bridge_cpu_vmath.cpp: MLX's sigmoid bit for bit, tanh within 2 ulp), else one
 * value at a time. */
void activate_row(int kind, float alpha, float beta, float *v, int64_t n) {
  const mlxb_unary_op vop = kind == MLXB_RACT_SIGMOID ? MLXB_SIGMOID : kind == MLXB_RACT_TANH ? MLXB_TANH : MLXB_ABS;
  if (vop != MLXB_ABS && cpu_vmath_available()) return cpu_vmath(vop, v, v, (size_t)n);
  for (int64_t i = 0; i < n; i++) v[i] = activate(kind, alpha, beta, v[i]);
}

struct recurrence_task {
  mlxb_recurrence r;
  int64_t steps, batch, hidden;

  /* the gate activation f over v[0, n) in place, after the clip */
  void gate_row(int f, float *v, int64_t n) const {
    if (r.has_clip)
      for (int64_t i = 0; i < n; i++)
        if (!std::isnan(v[i])) v[i] = std::min(std::max(v[i], -r.clip), r.clip);
    activate_row(r.act[f], r.alpha[f], r.beta[f], v, n);
  }

  /* c (rows [batch], row stride ldc) = beta * c + a [batch, k] (row stride lda) times the transpose
   * of w [n, k] (row stride ldw: rows of R, as the model holds them; `packed`, the same rows packed,
   * or null). A few rows take dot products here: a BLAS call for one row costs its thread handoffs. */
  void product(const float *a, int lda, const float *w, int ldw, const packed_rows *packed, int n, int k, float *c,
               int ldc, float beta) const {
    if (uses_blas()) {
      cblas_sgemm(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_TRANS, (int)batch, n, k, 1.0f, a, lda, w, ldw, beta, c, ldc);
      return;
    }
    for (int64_t row = 0; row < batch; row++) {
      if (packed) packed_product_shared(a + row * lda, *packed, c + row * ldc, beta);
      else dot_rows_plain(a + row * lda, w, ldw, n, k, c + row * ldc, beta);
    }
  }
  bool uses_blas() const {
    enum { BLAS_MIN_ROWS = 8 };
    return batch >= BLAS_MIN_ROWS;
  }

  /* One step: the step's projection g [batch, G*H] (overwritten) plus h @ rw^T (rw: R [G*H, H];
   * pw, pw2: its packed rows, the GRU's [2H, 3H) apart in pw2), the gates, and the state h, c into
   * hn, cn. */
  void step(float *g, const float *rw, const packed_rows *pw, const packed_rows *pw2, const float *h, const float *c,
            const float *peep, const float *rbh, float *scratch, float *hn, float *cn) const {
    const int H = (int)hidden, GH = (int)(hidden * (r.kind == MLXB_RECUR_LSTM ? 4 : r.kind == MLXB_RECUR_GRU ? 3 : 1));
    const int64_t B = batch;
    if (r.kind == MLXB_RECUR_RNN) {
      product(h, H, rw, H, pw, GH, H, g, GH, 1.0f);
      gate_row(0, g, B * H);
      std::copy(g, g + B * H, hn);
      return;
    }
    if (r.kind == MLXB_RECUR_LSTM) {
      product(h, H, rw, H, pw, GH, H, g, GH, 1.0f);
      for (int64_t b = 0; b < B; b++) {
        float *gi = g + b * GH, *go = gi + H, *gf = gi + 2 * H, *gc = gi + 3 * H, *act_c = scratch + b * H;
        const float *cs = c + b * H;
        float *c_new = cn + b * H;
        if (peep)
          for (int j = 0; j < H; j++) gi[j] = gi[j] + peep[j] * cs[j];
        gate_row(0, gi, H);
        if (r.input_forget) {
          for (int j = 0; j < H; j++) gf[j] = 1.0f - gi[j];
        } else {
          if (peep)
            for (int j = 0; j < H; j++) gf[j] = gf[j] + peep[2 * H + j] * cs[j];
          gate_row(0, gf, H);
        }
        gate_row(1, gc, H);
        for (int j = 0; j < H; j++) c_new[j] = cs[j] * gf[j] + gi[j] * gc[j];
        if (peep)
          for (int j = 0; j < H; j++) go[j] = go[j] + peep[H + j] * c_new[j];
        gate_row(0, go, H);
        std::copy(c_new, c_new + H, act_c);
        activate_row(r.act[2], r.alpha[2], r.beta[2], act_c, H); /* h's activation: no clip */
        for (int j = 0; j < H; j++) hn[b * H + j] = go[j] * act_c[j];
      }
      return;
    }
    /* GRU: z, r, then the hidden candidate; scratch holds [batch, 3H] (h @ R^T with the linear
     * form) or r * h [batch, H] */
    if (r.linear_before_reset) {
      product(h, H, rw, H, pw, GH, H, scratch, GH, 0.0f);
      for (int64_t b = 0; b < B; b++) {
        float *gz = g + b * GH, *gr = gz + H, *gh = gz + 2 * H;
        const float *az = scratch + b * GH, *ah = az + 2 * H, *hp = h + b * H;
        for (int j = 0; j < 2 * H; j++) gz[j] = gz[j] + az[j]; /* z and r */
        gate_row(0, gz, 2 * H);
        for (int j = 0; j < H; j++) gh[j] = gh[j] + gr[j] * (rbh ? ah[j] + rbh[j] : ah[j]);
        gate_row(1, gh, H);
        for (int j = 0; j < H; j++) hn[b * H + j] = (1.0f - gz[j]) * gh[j] + gz[j] * hp[j];
      }
      return;
    }
    product(h, H, rw, H, pw, 2 * H, H, g, GH, 1.0f); /* z and r */
    for (int64_t b = 0; b < B; b++) {
      float *gz = g + b * GH;
      gate_row(0, gz, 2 * H);
      for (int j = 0; j < H; j++) scratch[b * H + j] = gz[H + j] * h[b * H + j];
    }
    product(scratch, H, rw + 2 * H * H, H, pw2, H, H, g + 2 * H, GH, 1.0f); /* + (r * h) @ Rh^T */
    for (int64_t b = 0; b < B; b++) {
      float *gz = g + b * GH, *gh = gz + 2 * H;
      gate_row(1, gh, H);
      for (int j = 0; j < H; j++) hn[b * H + j] = (1.0f - gz[j]) * gh[j] + gz[j] * h[b * H + j];
    }
  }

  /* xw [T, B, G*H], rw [G*H, H], h0/c0 [B, H]; y [T, B, H] (or null), h/c [B, H] (c null but for
   * LSTM); lens [B] (or null); rw_packed: R's rows packed at Compile (the GRU's [2H, 3H) apart in
   * rw_packed[1]), or nulls. */
  void run(const float *xw, const float *rw, const float *const rw_packed[2], const float *h0, const float *c0,
           const float *peep, const int32_t *lens, const float *rbh, float *y, float *h, float *c) const {
    const int64_t B = batch, H = hidden, BH = B * H;
    const int64_t GH = hidden * (r.kind == MLXB_RECUR_LSTM ? 4 : r.kind == MLXB_RECUR_GRU ? 3 : 1);
    const bool gru_apart = r.kind == MLXB_RECUR_GRU && !r.linear_before_reset; /* rows [2H, 3H) take r * h */
    packed_rows pw, pw2;
    const bool packed = !uses_blas() && packed_product_available();
    if (packed) {
      const int rows = (int)(gru_apart ? 2 * H : GH);
      if (rw_packed[0]) pw.view(rw_packed[0], rows, (int)H);
      else pw.pack(rw, (int)H, rows, (int)H);
      if (gru_apart && rw_packed[1]) pw2.view(rw_packed[1], (int)H, (int)H);
      else if (gru_apart) pw2.pack(rw + 2 * H * H, (int)H, (int)H, (int)H);
    }
    std::vector<float> g(B * GH), scratch(B * GH), hn(BH), cn(c ? BH : 0);
    std::copy(h0, h0 + BH, h);
    if (c) std::copy(c0, c0 + BH, c);
    for (int64_t k = 0; k < steps; k++) {
      const int64_t t = r.backwards ? steps - 1 - k : k;
      std::copy(xw + t * B * GH, xw + (t + 1) * B * GH, g.begin());
      step(g.data(), rw, packed ? &pw : nullptr, packed && gru_apart ? &pw2 : nullptr, h, c, peep, rbh,
           scratch.data(), hn.data(), c ? cn.data() : nullptr);
      for (int64_t b = 0; b < B; b++) {
        const bool valid = !lens || t < lens[b];
        for (int64_t j = b * H; j < (b + 1) * H; j++) {
          if (y) y[t * BH + j] = valid ? hn[j] : 0.0f;
          if (!valid) continue;
          h[j] = hn[j];
          if (c) c[j] = cn[j];
        }
      }
    }
    for (int64_t b = 0; lens && b < B; b++) { /* a sequence of length 0 ends in zeros */
      if (lens[b] > 0) continue;
      std::fill(h + b * H, h + (b + 1) * H, 0.0f);
      if (c) std::fill(c + b * H, c + (b + 1) * H, 0.0f);
    }
  }
};

/* Inputs: xw, rw, h0, c0, peep, lens, rbh, R packed and the GRU's part of it packed apart (a
 * placeholder where absent, flagged by has_*); outputs y (when wanted), h, c (LSTM). */
class ep_cpu_recurrence : public mx::Primitive {
 public:
  ep_cpu_recurrence(mx::Stream stream, const mlxb_recurrence &r, bool has_peep, bool has_lens, bool has_rbh,
                    bool want_y, int packed)
      : mx::Primitive(stream), r_(r), has_peep_(has_peep), has_lens_(has_lens), has_rbh_(has_rbh), want_y_(want_y),
        packed_(packed) {}

  void eval_cpu(const std::vector<mx::array> &inputs, std::vector<mx::array> &outputs) override {
    const mx::array &xw = inputs[0];
    recurrence_task task{r_, xw.shape(0), xw.shape(1), inputs[1].shape(1)};
    cpu_task_arrays held;
    auto &encoder = cpu_task_begin(stream(), inputs, outputs, &held);
    encoder.dispatch([task, held = std::move(held), peep = has_peep_, lens = has_lens_, rbh = has_rbh_,
                      want_y = want_y_, packed = packed_]() mutable {
      auto &ins = held.ins;
      auto &outs = held.outs;
      size_t o = 0;
      float *y = want_y ? outs[o++].data<float>() : nullptr;
      float *h = outs[o++].data<float>();
      float *c = o < outs.size() ? outs[o].data<float>() : nullptr;
      const float *rw_packed[2] = {packed > 0 ? ins[7].data<float>() : nullptr,
                                   packed > 1 ? ins[8].data<float>() : nullptr};
      try {
        task.run(ins[0].data<float>(), ins[1].data<float>(), rw_packed, ins[2].data<float>(),
                 c ? ins[3].data<float>() : nullptr,
                 peep ? ins[4].data<float>() : nullptr, lens ? ins[5].data<int32_t>() : nullptr,
                 rbh ? ins[6].data<float>() : nullptr, y, h, c);
      } catch (...) { /* std::vector's allocations: a task must never let an exception reach MLX's scheduler */
        for (auto &out : outs)
          std::fill(out.data<float>(), out.data<float>() + out.size(), std::numeric_limits<float>::quiet_NaN());
      }
    });
  }

  void eval_gpu(const std::vector<mx::array> &, std::vector<mx::array> &) override {
    throw std::runtime_error("EpCpuRecurrence: a CPU kernel has no GPU form");
  }

  const char *name() const override { return "EpCpuRecurrence"; }

  bool is_equivalent(const mx::Primitive &other) const override {
    auto *o = dynamic_cast<const ep_cpu_recurrence *>(&other);
    return o && !std::memcmp(&o->r_, &r_, sizeof r_) && o->has_peep_ == has_peep_ && o->has_lens_ == has_lens_ &&
           o->has_rbh_ == has_rbh_ && o->want_y_ == want_y_ && o->packed_ == packed_;
  }

 private:
  mlxb_recurrence r_;
  bool has_peep_, has_lens_, has_rbh_, want_y_;
  int packed_; /* how many packed forms of R follow rbh: 0, 1, or 2 (the GRU's part apart) */
};

bool known_activation(int a) { return a >= 0 && a < MLXB_RACT_COUNT; }

} // namespace

extern "C" {

bool mlxb_recurrence_available(const mlxb_scope *s) { return s && is_cpu_scope(s); }

int mlxb_recurrence_run(mlxb_scope *s, const mlxb_recurrence *r, const mlxb_array *xw, const mlxb_array *rw,
                        const mlxb_array *const rw_packed[2], const mlxb_array *h0, const mlxb_array *c0,
                        const mlxb_array *peep, const mlxb_array *lens, const mlxb_array *rbh, bool want_y,
                        mlxb_array **y, mlxb_array **h, mlxb_array **c) {
  if (y) *y = nullptr;
  if (h) *h = nullptr;
  if (c) *c = nullptr;
  return guard_status(s, "mlxb_recurrence_run", [&] {
    if (!r || !xw || !rw || !h0 || !h || (want_y && !y)) throw null_arg{};
    if (!mlxb_recurrence_available(s)) throw bridge_error("recurrence: a CPU operation (the GPU unrolls the steps)");
    bool lstm = r->kind == MLXB_RECUR_LSTM, gru = r->kind == MLXB_RECUR_GRU;
    if ((r->kind != MLXB_RECUR_RNN && !lstm && !gru) || !known_activation(r->act[0]) ||
        (r->kind != MLXB_RECUR_RNN && !known_activation(r->act[1])) || (lstm && !known_activation(r->act[2])))
      throw bridge_error("recurrence: unknown kind or activation");
    if (lstm && (!c0 || !c)) throw null_arg{};
    const mx::array &xa = arr(xw), &ra = arr(rw), &ha = arr(h0);
    int g = lstm ? 4 : gru ? 3 : 1;
    if (xa.ndim() != 3 || ra.ndim() != 2 || ha.ndim() != 2) throw bridge_error("recurrence: xw [T, B, G*H], rw [G*H, H]");
    int64_t steps = xa.shape(0), batch = xa.shape(1), hidden = ra.shape(1);
    bool fits = steps > 0 && batch > 0 && hidden > 0 && xa.shape(2) == g * hidden && ra.shape(0) == g * hidden &&
                ha.shape(0) == batch && ha.shape(1) == hidden && batch * g * hidden <= std::numeric_limits<int>::max();
    if (!fits) throw bridge_error("recurrence: shapes do not fit");
    auto matches = [&](const mlxb_array *v, mx::Shape shape, mx::Dtype t) {
      return !v || (arr(v).shape() == shape && arr(v).dtype() == t);
    };
    mx::Shape bh = {static_cast<int>(batch), static_cast<int>(hidden)};
    if (xa.dtype() != mx::float32 || ra.dtype() != mx::float32 || ha.dtype() != mx::float32 ||
        !matches(c0, bh, mx::float32) || !matches(peep, {static_cast<int>(3 * hidden)}, mx::float32) ||
        !matches(lens, {static_cast<int>(batch)}, mx::int32) || !matches(rbh, {static_cast<int>(hidden)}, mx::float32))
      throw bridge_error("recurrence: float32 xw, rw, states, peepholes [3H] and rbh [H]; int32 lens [B]");
    /* R packed at Compile: its rows in panels (the GRU's [2H, 3H) apart), as mlxb_gemm_pack lays them */
    const bool gru_apart = gru && !r->linear_before_reset;
    const int64_t packed_rows_of[2] = {gru_apart ? 2 * hidden : g * hidden, gru_apart ? hidden : 0};
    int packed = 0;
    for (int i = 0; rw_packed && i < 2 && rw_packed[i]; i++) {
      const mx::array &pa = arr(rw_packed[i]);
      const mx::Shape want = {static_cast<int>(packed_rows::count(packed_rows_of[i])), static_cast<int>(hidden),
                              packed_rows::PANEL};
      if (packed_rows_of[i] == 0 || pa.shape() != want || pa.dtype() != mx::float32)
        throw bridge_error("recurrence: R packed in panels of its rows (mlxb_gemm_pack of R, transposed)");
      packed = i + 1;
    }
    if (gru_apart && packed == 1) throw bridge_error("recurrence: the GRU's R packed in two parts");
    auto dev = scope_dev(s);
    mx::Stream stream = mx::to_stream(dev);
    mx::array none = mx::zeros({1}, mx::float32, dev);
    std::vector<mx::array> ins = {row_major(xa, dev), row_major(ra, dev), row_major(ha, dev),
                                  c0 ? row_major(arr(c0), dev) : none, peep ? row_major(arr(peep), dev) : none,
                                  lens ? row_major(arr(lens), dev) : mx::zeros({1}, mx::int32, dev),
                                  rbh ? row_major(arr(rbh), dev) : none};
    for (int i = 0; i < packed; i++) ins.push_back(row_major(arr(rw_packed[i]), dev));
    std::vector<mx::Shape> shapes;
    if (want_y) shapes.push_back({static_cast<int>(steps), static_cast<int>(batch), static_cast<int>(hidden)});
    shapes.push_back(bh);
    if (lstm) shapes.push_back(bh);
    std::vector<mx::Dtype> dtypes(shapes.size(), mx::float32);
    cpu_pool_start(); /* the step's panels are shared with its threads: they start here, not in the task */
    auto prim = std::make_shared<ep_cpu_recurrence>(stream, *r, peep != nullptr, lens != nullptr, rbh != nullptr,
                                                    want_y, packed);
    std::vector<mx::array> outs = mx::array::make_arrays(std::move(shapes), dtypes, prim, std::move(ins));
    size_t o = 0;
    if (want_y) *y = scope_keep(s, outs[o++]);
    *h = scope_keep(s, outs[o++]);
    if (lstm) *c = scope_keep(s, outs[o]);
  });
}

} // extern "C"
