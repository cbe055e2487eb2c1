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
#include "mlx/bridge_internal.h"

#include "mlx/backend/cpu/encoder.h"
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

#if defined(__x86_64__) && !defined(__APPLE__)
/* The same with AVX2: four rows at a time, each with its own accumulator of eight lanes, so the four
 * chains of adds overlap (one row's chain alone waits on each add: 44 us for a 1024 x 256 step on
 * this project's x86 machines). Products and sums are rounded apart, as in the plain loop (no FMA:
 * fused, a short row's rounding moved far enough from ORT's to show through a GRU's recurrence). */
__attribute__((target("avx2"))) float lanes_sum(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_shuffle_ps(x, x, 1));
  return _mm_cvtss_f32(x);
}

__attribute__((target("avx2"))) void dot_rows_avx2(const float *__restrict a, const float *__restrict w, int ldw,
                                                       int n, int k, float *out, float beta) {
  int j = 0;
  for (; j + 4 <= n; j += 4) {
    const float *w0 = w + (int64_t)j * ldw, *w1 = w0 + ldw, *w2 = w1 + ldw, *w3 = w2 + ldw;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int i = 0;
    for (; i + 8 <= k; i += 8) {
      const __m256 x = _mm256_loadu_ps(a + i);
      s0 = _mm256_add_ps(s0, _mm256_mul_ps(x, _mm256_loadu_ps(w0 + i)));
      s1 = _mm256_add_ps(s1, _mm256_mul_ps(x, _mm256_loadu_ps(w1 + i)));
      s2 = _mm256_add_ps(s2, _mm256_mul_ps(x, _mm256_loadu_ps(w2 + i)));
      s3 = _mm256_add_ps(s3, _mm256_mul_ps(x, _mm256_loadu_ps(w3 + i)));
    }
    float sums[4] = {lanes_sum(s0), lanes_sum(s1), lanes_sum(s2), lanes_sum(s3)};
    const float *rows[4] = {w0, w1, w2, w3};
    for (int r = 0; r < 4; r++) {
      for (int t = i; t < k; t++) sums[r] += a[t] * rows[r][t];
      out[j + r] = beta == 0.0f ? sums[r] : out[j + r] + sums[r];
    }
  }
  if (j < n) dot_rows_plain(a, w + (int64_t)j * ldw, ldw, n - j, k, out + j, beta);
}
#endif

void dot_rows(const float *a, const float *w, int ldw, int n, int k, float *out, float beta) {
#if defined(__x86_64__) && !defined(__APPLE__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) return dot_rows_avx2(a, w, ldw, n, k, out, beta);
#endif
  dot_rows_plain(a, w, ldw, n, k, out, beta);
}

struct recurrence_task {
  mlxb_recurrence r;
  int64_t steps, batch, hidden;

  float clip(float x) const {
    if (!r.has_clip || std::isnan(x)) return x;
    return std::min(std::max(x, -r.clip), r.clip);
  }
  float gate(int f, float x) const { return activate(r.act[f], r.alpha[f], r.beta[f], clip(x)); }

  /* c (rows [batch], row stride ldc) = beta * c + a [batch, k] (row stride lda) times the transpose
   * of w [n, k] (row stride ldw: rows of R, as the model holds them). A few rows take dot products
   * here: a BLAS call for one row costs its thread handoffs. */
  void product(const float *a, int lda, const float *w, int ldw, int n, int k, float *c, int ldc, float beta) const {
    enum { BLAS_MIN_ROWS = 8 };
    if (batch >= BLAS_MIN_ROWS) {
      cblas_sgemm(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_TRANS, (int)batch, n, k, 1.0f, a, lda, w, ldw, beta, c, ldc);
      return;
    }
    for (int64_t row = 0; row < batch; row++) dot_rows(a + row * lda, w, ldw, n, k, c + row * ldc, beta);
  }

  /* One step: the step's projection g [batch, G*H] (overwritten) plus h @ rw^T (rw: R [G*H, H]), the
   * gates, and the state h, c into hn, cn. */
  void step(float *g, const float *rw, const float *h, const float *c, const float *peep, const float *rbh,
            float *scratch, float *hn, float *cn) const {
    const int H = (int)hidden, GH = (int)(hidden * (r.kind == MLXB_RECUR_LSTM ? 4 : r.kind == MLXB_RECUR_GRU ? 3 : 1));
    const int64_t B = batch;
    if (r.kind == MLXB_RECUR_RNN) {
      product(h, H, rw, H, GH, H, g, GH, 1.0f);
      for (int64_t i = 0; i < B * H; i++) hn[i] = gate(0, g[i]);
      return;
    }
    if (r.kind == MLXB_RECUR_LSTM) {
      product(h, H, rw, H, GH, H, g, GH, 1.0f);
      for (int64_t b = 0; b < B; b++) {
        const float *gi = g + b * GH, *go = gi + H, *gf = gi + 2 * H, *gc = gi + 3 * H, *cs = c + b * H;
        for (int j = 0; j < H; j++) {
          float ig = gate(0, peep ? gi[j] + peep[j] * cs[j] : gi[j]);
          float fg = r.input_forget ? 1.0f - ig : gate(0, peep ? gf[j] + peep[2 * H + j] * cs[j] : gf[j]);
          float cg = gate(1, gc[j]);
          float c_new = cs[j] * fg + ig * cg;
          float og = gate(0, peep ? go[j] + peep[H + j] * c_new : go[j]);
          cn[b * H + j] = c_new;
          hn[b * H + j] = og * activate(r.act[2], r.alpha[2], r.beta[2], c_new);
        }
      }
      return;
    }
    /* GRU: z, r, then the hidden candidate; scratch holds [batch, 3H] (h @ R^T with the linear
     * form) or r * h [batch, H] */
    if (r.linear_before_reset) {
      product(h, H, rw, H, GH, H, scratch, GH, 0.0f);
      for (int64_t b = 0; b < B; b++) {
        const float *gz = g + b * GH, *gr = gz + H, *gh = gz + 2 * H, *hp = h + b * H;
        const float *az = scratch + b * GH, *ar = az + H, *ah = az + 2 * H;
        for (int j = 0; j < H; j++) {
          float z = gate(0, gz[j] + az[j]), rg = gate(0, gr[j] + ar[j]);
          float hr = rbh ? ah[j] + rbh[j] : ah[j];
          float hh = gate(1, gh[j] + rg * hr);
          hn[b * H + j] = (1.0f - z) * hh + z * hp[j];
        }
      }
      return;
    }
    product(h, H, rw, H, 2 * H, H, g, GH, 1.0f); /* z and r */
    for (int64_t b = 0; b < B; b++)
      for (int j = 0; j < H; j++) {
        float *gz = g + b * GH;
        gz[j] = gate(0, gz[j]);
        gz[H + j] = gate(0, gz[H + j]);
        scratch[b * H + j] = gz[H + j] * h[b * H + j];
      }
    product(scratch, H, rw + 2 * H * H, H, H, H, g + 2 * H, GH, 1.0f); /* + (r * h) @ Rh^T */
    for (int64_t b = 0; b < B; b++)
      for (int j = 0; j < H; j++) {
        const float *gz = g + b * GH;
        float z = gz[j], hh = gate(1, gz[2 * H + j]);
        hn[b * H + j] = (1.0f - z) * hh + z * h[b * H + j];
      }
  }

  /* xw [T, B, G*H], rw [G*H, H], h0/c0 [B, H]; y [T, B, H] (or null), h/c [B, H] (c null but for
   * LSTM); lens [B] (or null). */
  void run(const float *xw, const float *rw, const float *h0, const float *c0, const float *peep, const int32_t *lens,
           const float *rbh, float *y, float *h, float *c) const {
    const int64_t B = batch, H = hidden, BH = B * H;
    const int64_t GH = hidden * (r.kind == MLXB_RECUR_LSTM ? 4 : r.kind == MLXB_RECUR_GRU ? 3 : 1);
    std::vector<float> g(B * GH), scratch(B * GH), hn(BH), cn(c ? BH : 0);
    std::copy(h0, h0 + BH, h);
    if (c) std::copy(c0, c0 + BH, c);
    for (int64_t k = 0; k < steps; k++) {
      const int64_t t = r.backwards ? steps - 1 - k : k;
      std::copy(xw + t * B * GH, xw + (t + 1) * B * GH, g.begin());
      step(g.data(), rw, h, c, peep, rbh, scratch.data(), hn.data(), c ? cn.data() : nullptr);
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

/* Inputs: xw, rw, h0, c0, peep, lens, rbh (a placeholder where absent, flagged by has_*); outputs
 * y (when wanted), h, c (LSTM). */
class ep_cpu_recurrence : public mx::Primitive {
 public:
  ep_cpu_recurrence(mx::Stream stream, const mlxb_recurrence &r, bool has_peep, bool has_lens, bool has_rbh,
                    bool want_y)
      : mx::Primitive(stream), r_(r), has_peep_(has_peep), has_lens_(has_lens), has_rbh_(has_rbh), want_y_(want_y) {}

  void eval_cpu(const std::vector<mx::array> &inputs, std::vector<mx::array> &outputs) override {
    const mx::array &xw = inputs[0];
    recurrence_task task{r_, xw.shape(0), xw.shape(1), inputs[1].shape(1)};
    for (auto &out : outputs) out.set_data(mx::allocator::malloc(out.nbytes()));
    auto &encoder = mx::cpu::get_command_encoder(stream());
    for (const auto &in : inputs) encoder.set_input_array(in);
    for (auto &out : outputs) encoder.set_output_array(out);
    std::vector<mx::array> ins, outs;
    for (const auto &in : inputs) ins.push_back(mx::array::unsafe_weak_copy(in));
    for (const auto &out : outputs) outs.push_back(mx::array::unsafe_weak_copy(out));
    encoder.dispatch([task, ins = std::move(ins), outs = std::move(outs), peep = has_peep_, lens = has_lens_,
                      rbh = has_rbh_, want_y = want_y_]() mutable {
      size_t o = 0;
      float *y = want_y ? outs[o++].data<float>() : nullptr;
      float *h = outs[o++].data<float>();
      float *c = o < outs.size() ? outs[o].data<float>() : nullptr;
      try {
        task.run(ins[0].data<float>(), ins[1].data<float>(), ins[2].data<float>(), c ? ins[3].data<float>() : nullptr,
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
           o->has_rbh_ == has_rbh_ && o->want_y_ == want_y_;
  }

 private:
  mlxb_recurrence r_;
  bool has_peep_, has_lens_, has_rbh_, want_y_;
};

bool known_activation(int a) { return a >= 0 && a < MLXB_RACT_COUNT; }

} // namespace

extern "C" {

bool mlxb_recurrence_available(const mlxb_scope *s) { return s && is_cpu_scope(s); }

int mlxb_recurrence_run(mlxb_scope *s, const mlxb_recurrence *r, const mlxb_array *xw, const mlxb_array *rw,
                        const mlxb_array *h0, const mlxb_array *c0, const mlxb_array *peep, const mlxb_array *lens,
                        const mlxb_array *rbh, bool want_y, mlxb_array **y, mlxb_array **h, mlxb_array **c) {
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
    auto dev = scope_dev(s);
    mx::Stream stream = mx::to_stream(dev);
    mx::array none = mx::zeros({1}, mx::float32, dev);
    std::vector<mx::array> ins = {row_major(xa, dev), row_major(ra, dev), row_major(ha, dev),
                                  c0 ? row_major(arr(c0), dev) : none, peep ? row_major(arr(peep), dev) : none,
                                  lens ? row_major(arr(lens), dev) : mx::zeros({1}, mx::int32, dev),
                                  rbh ? row_major(arr(rbh), dev) : none};
    std::vector<mx::Shape> shapes;
    if (want_y) shapes.push_back({static_cast<int>(steps), static_cast<int>(batch), static_cast<int>(hidden)});
    shapes.push_back(bh);
    if (lstm) shapes.push_back(bh);
    std::vector<mx::Dtype> dtypes(shapes.size(), mx::float32);
    auto prim = std::make_shared<ep_cpu_recurrence>(stream, *r, peep != nullptr, lens != nullptr, rbh != nullptr, want_y);
    std::vector<mx::array> outs = mx::array::make_arrays(std::move(shapes), dtypes, prim, std::move(ins));
    size_t o = 0;
    if (want_y) *y = scope_keep(s, outs[o++]);
    *h = scope_keep(s, outs[o++]);
    if (lstm) *c = scope_keep(s, outs[o]);
  });
}

} // extern "C"
