/* A decode step's kernels on MLX's CPU stream, as primitives of our own: decode attention, the KV
 * append and the RMS norm of the CUDA kernels (bridge_kernels_attention.cpp, bridge_kernels.cpp),
 * with their arithmetic (float32 inside, the result rounded once to the arrays' dtype) and their
 * bounds (lengths clamped to the cache, positions clamped to the rotary caches, rows outside the
 * present never written).
 *
 * Why: composed from MLX operations, a GroupQueryAttention decode step is about seventy operations
 * (the rotary embedding from the caches, the present's slices and selects, the masked softmax) and a
 * SkipSimplifiedLayerNormalization about eight, and on the CPU each operation costs MLX's
 * scheduling of a task (several microseconds on this project's x86 machines): a decoder layer's
 * step was ~110 of them. Here each is one task, and the step's cost is its arithmetic.
 *
 * Lengths and positions are data: each is clamped before it reaches an address, as the CUDA
 * kernels do. ORT_EP_MLX_CPU_DECODE=0 keeps the composed forms. */
#include "mlx/bridge_cpu_task.h"
#include "mlx/primitives.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace mlxb_detail {

namespace {

/* element i of an integer array of any integer dtype, as the CUDA kernels read it: (long long) */
int64_t int_at(const mx::array &a, size_t i) {
  switch (a.dtype()) {
    case mx::int8: return a.data<int8_t>()[i];
    case mx::int16: return a.data<int16_t>()[i];
    case mx::int32: return a.data<int32_t>()[i];
    case mx::int64: return a.data<int64_t>()[i];
    case mx::uint8: return a.data<uint8_t>()[i];
    case mx::uint16: return a.data<uint16_t>()[i];
    case mx::uint32: return a.data<uint32_t>()[i];
    case mx::uint64: return static_cast<int64_t>(a.data<uint64_t>()[i]);
    default: return 0; /* never: per_sequence makes every other dtype int64 */
  }
}

int64_t clamp_index(int64_t v, int64_t rows) { return v < 0 ? 0 : (v >= rows ? rows - 1 : v); }

/* a + b saturated at int64's ends: a value read from data plus a small offset never wraps */
int64_t add_sat(int64_t a, int64_t b) {
  int64_t r;
  if (!__builtin_add_overflow(a, b, &r)) return r;
  return b > 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
}

/* The rotary parameters as the tasks read them (cos and sin float32 [rows, dims / 2]). */
struct rope_params {
  int32_t dims, add, interleaved, per_row;
};

rope_params rope_of(const rope_inputs &r) { return {r.dims, r.add, r.interleaved ? 1 : 0, r.per_row ? 1 : 0}; }

/* A task's rotary inputs: positions, then the cos and sin caches (float32 [rows, dims / 2]), from
 * input `first` on; row(b) is sequence b's cache row, its position plus the offset clamped into the
 * cache (0 without a rotary embedding). */
struct rope_tables {
  const rope_params &r;
  const mx::array &positions;
  const float *cos, *sin;
  int64_t rows;

  rope_tables(const rope_params &p, const std::vector<mx::array> &in, size_t first)
      : r(p), positions(in[first]), cos(in[first + 1].data<float>()), sin(in[first + 2].data<float>()),
        rows(in[first + 1].shape(0)) {}
  /* new row j of sequence b (of `rows_per` rows): one position per row, or the sequence's plus j */
  int64_t row(int b, int j, int rows_per) const {
    if (r.dims == 0) return 0;
    int64_t p = r.per_row ? int_at(positions, static_cast<size_t>(b) * rows_per + j) : add_sat(int_at(positions, b), j);
    return clamp_index(add_sat(p, r.add), rows);
  }
};

/* Channel d of row x rotated in float32 by cos/sin row pos: bridge_kernels_attention.cpp's rotated(). */
template <typename T>
float rotated(const T *x, int d, const rope_params &r, const float *cos, const float *sin, int64_t pos) {
  if (r.dims == 0 || d >= r.dims) return static_cast<float>(x[d]);
  const int half = r.dims / 2;
  const int j = r.interleaved ? d / 2 : (d < half ? d : d - half);
  const float x1 = static_cast<float>(x[r.interleaved ? 2 * j : j]);
  const float x2 = static_cast<float>(x[r.interleaved ? 2 * j + 1 : j + half]);
  const float c = cos[pos * half + j], s = sin[pos * half + j];
  const bool first = r.interleaved ? d % 2 == 0 : d < half;
  return first ? x1 * c - x2 * s : x1 * s + x2 * c;
}

template <typename F>
void by_dtype(mx::Dtype t, F &&f) {
  if (t == mx::float32) f(float{});
  else if (t == mx::float16) f(mx::float16_t{});
  else f(mx::bfloat16_t{});
}

/* ---- decode attention ----------------------------------------------------------------------- */

struct attention_params {
  int32_t batch, hq, hkv, rows, head, window, len_add, query_rows;
  int32_t first, causal, window_from_row, pad_;
  float scale, cap;
  rope_params rope;
};

enum { KEY_BLOCK = 256, MAX_HEAD = 256 };

/* q . k over a head of D channels in DOT_LANES interleaved partial sums (lane j takes the channels
 * d = j mod DOT_LANES), which the compiler keeps in vector registers: the sum of the same products
 * as the CUDA kernel's, in another order. */
enum { DOT_LANES = 8 };

template <typename T>
float dot_head(const float *q, const T *k, int D) {
  float part[DOT_LANES] = {0.0f};
  int d = 0;
  for (; d + DOT_LANES <= D; d += DOT_LANES)
    for (int j = 0; j < DOT_LANES; j++) part[j] += q[d + j] * static_cast<float>(k[d + j]);
  float s = 0.0f;
  for (int j = 0; j < DOT_LANES; j++) s += part[j];
  for (; d < D; d++) s += q[d] * static_cast<float>(k[d]);
  return s;
}

/* One (sequence, query head): keys [start, len) in blocks of KEY_BLOCK scores, each block's
 * maximum merged into a running one (the online softmax of the CUDA kernel, a block at a time). */
template <typename T>
void attend_one(const attention_params &p, const T *q, const T *k, const T *v, int64_t len, int64_t start,
                const float *cos, const float *sin, int64_t pos, T *out) {
  const int D = p.head;
  float qv[MAX_HEAD], acc[MAX_HEAD], scores[KEY_BLOCK];
  for (int d = 0; d < D; d++) {
    qv[d] = static_cast<float>(static_cast<T>(rotated(q, d, p.rope, cos, sin, pos)));
    acc[d] = 0.0f;
  }
  float m = -std::numeric_limits<float>::infinity(), l = 0.0f;
  for (int64_t t0 = start; t0 < len; t0 += KEY_BLOCK) {
    const int n = static_cast<int>(std::min<int64_t>(KEY_BLOCK, len - t0));
    float block_max = -std::numeric_limits<float>::infinity();
    for (int i = 0; i < n; i++) {
      float s = dot_head(qv, k + (t0 + i) * D, D) * p.scale;
      if (p.cap > 0.0f) s = p.cap * std::tanh(s / p.cap);
      scores[i] = s;
      block_max = std::max(block_max, s);
    }
    const float mn = std::max(m, block_max);
    if (mn == -std::numeric_limits<float>::infinity()) continue; /* every score -inf so far: nothing to add */
    const float corr = std::exp(m - mn);
    l *= corr;
    for (int d = 0; d < D; d++) acc[d] *= corr;
    for (int i = 0; i < n; i++) {
      const float w = std::exp(scores[i] - mn);
      l += w;
      const T *vr = v + (t0 + i) * D;
      for (int d = 0; d < D; d++) acc[d] += w * static_cast<float>(vr[d]);
    }
    m = mn;
  }
  for (int d = 0; d < D; d++) out[d] = static_cast<T>(l > 0.0f ? acc[d] / l : 0.0f);
}

/* Keys [start, len) that query row `row` of a sequence of total length `total` sees: the CUDA
 * kernel's bounds. */
void row_keys(const attention_params &p, int64_t total, int row, int64_t *start, int64_t *len) {
  const int64_t bound = (p.first ? 0 : total - p.query_rows) + row + 1;
  *len = p.causal && bound < total ? std::max<int64_t>(bound, 0) : total;
  const int64_t from = p.window_from_row ? bound : *len;
  *start = p.window > 0 && from > p.window ? std::min<int64_t>(from - p.window, *len) : 0;
}

/* inputs: q, k, v, lens, rope positions, cos, sin; output: q's shape. Units (sequence, row, head)
 * in q's order; a prompt's shared with the pool's helpers. */
void attention_task(const attention_params &p, const std::vector<mx::array> &in, std::vector<mx::array> &out) {
  const mx::array &lens = in[3];
  const rope_tables rope(p.rope, in, 4);
  by_dtype(in[0].dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T *q = in[0].data<T>(), *k = in[1].data<T>(), *v = in[2].data<T>();
    T *y = out[0].data<T>();
    const int D = p.head, group = p.hq / p.hkv, S = p.query_rows;
    const int64_t units = static_cast<int64_t>(p.batch) * S * p.hq;
    cpu_parallel_rows(units, S > 1, [&](int64_t first, int64_t last) {
      for (int64_t u = first; u < last; u++) {
        const int h = static_cast<int>(u % p.hq), row = static_cast<int>(u / p.hq % S);
        const int b = static_cast<int>(u / (static_cast<int64_t>(p.hq) * S));
        const int64_t total = std::clamp<int64_t>(add_sat(int_at(lens, b), p.len_add), 0, p.rows);
        int64_t start, len;
        row_keys(p, total, row, &start, &len);
        const size_t kvh = static_cast<size_t>(b) * p.hkv + h / group;
        attend_one<T>(p, q + u * D, k + kvh * p.rows * D, v + kvh * p.rows * D, len, start, rope.cos, rope.sin,
                      rope.row(b, row, S), y + u * D);
      }
    });
  });
}

/* ---- KV append --------------------------------------------------------------------------------- */

struct append_params {
  int32_t batch, hkv, past_rows, plen, head, at_add, rows, at_zero;
  rope_params rope;
};

/* inputs: past k, past v, k, v, at positions, rope positions, cos, sin; outputs present k, v */
void append_task(const append_params &p, const std::vector<mx::array> &in, std::vector<mx::array> &out) {
  const mx::array &at_pos = in[4];
  const rope_tables rope(p.rope, in, 5);
  by_dtype(in[2].dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T *pk = in[0].data<T>(), *pv = in[1].data<T>(), *k = in[2].data<T>(), *v = in[3].data<T>();
    T *ok = out[0].data<T>(), *ov = out[1].data<T>();
    const int D = p.head;
    for (int b = 0; b < p.batch; b++) {
      const int64_t at = p.at_zero ? 0 : add_sat(int_at(at_pos, b), p.at_add);
      /* rows [0, min(at, past_rows, plen)) from the past, new row j at `at + j` when inside, zeros elsewhere */
      const int64_t copied = std::clamp<int64_t>(std::min<int64_t>(at, p.past_rows), 0, p.plen);
      for (int h = 0; h < p.hkv; h++) {
        const size_t bh = static_cast<size_t>(b) * p.hkv + h;
        T *dk = ok + bh * p.plen * D, *dv = ov + bh * p.plen * D;
        std::copy(pk + bh * p.past_rows * D, pk + (bh * p.past_rows + copied) * D, dk);
        std::copy(pv + bh * p.past_rows * D, pv + (bh * p.past_rows + copied) * D, dv);
        std::fill(dk + copied * D, dk + static_cast<size_t>(p.plen) * D, static_cast<T>(0.0f));
        std::fill(dv + copied * D, dv + static_cast<size_t>(p.plen) * D, static_cast<T>(0.0f));
        for (int j = 0; j < p.rows; j++) {
          const int64_t t = add_sat(at, j);
          if (t < 0 || t >= p.plen) continue;
          const size_t fresh = ((static_cast<size_t>(b) * p.rows + j) * p.hkv + h) * D;
          const int64_t pos = rope.row(b, j, p.rows);
          for (int d = 0; d < D; d++) {
            dk[t * D + d] = static_cast<T>(rotated(k + fresh, d, p.rope, rope.cos, rope.sin, pos));
            dv[t * D + d] = v[fresh + d];
          }
        }
      }
    }
  });
}

/* ---- RMS norm ------------------------------------------------------------------------------------ */

struct rms_params {
  int64_t rows, skip_rows;
  int32_t hidden, has_skip, has_bias, want_sum;
  float eps;
  int32_t pad_;
};

/* inputs: x, skip, bias, gamma (placeholders where absent); outputs y and, when wanted, sum */
void rms_task(const rms_params &p, const std::vector<mx::array> &in, std::vector<mx::array> &out) {
  by_dtype(in[0].dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T *x = in[0].data<T>(), *skip = in[1].data<T>(), *bias = in[2].data<T>(), *gamma = in[3].data<T>();
    T *y = out[0].data<T>(), *sum = p.want_sum ? out[1].data<T>() : nullptr;
    const int H = p.hidden;
    for (int64_t r = 0; r < p.rows; r++) {
      const T *xr = x + r * H, *sr = skip + (r % p.skip_rows) * H;
      auto value = [&](int i) {
        float v = static_cast<float>(xr[i]);
        if (p.has_skip) v += static_cast<float>(sr[i]);
        if (p.has_bias) v += static_cast<float>(bias[i]);
        return v;
      };
      float ss = 0.0f;
      for (int i = 0; i < H; i++) {
        const float v = value(i);
        ss += v * v;
      }
      const float inv = 1.0f / std::sqrt(ss / static_cast<float>(H) + p.eps);
      for (int i = 0; i < H; i++) {
        const float v = value(i);
        y[r * H + i] = static_cast<T>(v * inv * static_cast<float>(gamma[i]));
        if (sum) sum[r * H + i] = static_cast<T>(v);
      }
    }
  });
}

mx::array float_cache(const mx::array &c, const mlxb_scope *s) { return mx::astype(c, mx::float32, scope_dev(s)); }

} // namespace

bool cpu_decode_takes(const mlxb_scope *s, mx::Dtype t) {
  static const bool on = env_switch_on("ORT_EP_MLX_CPU_DECODE");
  return on && s && is_cpu_scope(s) && (t == mx::float32 || t == mx::float16 || t == mx::bfloat16);
}

mx::array cpu_decode_attention(const mlxb_scope *s, const mx::array &q, const mx::array &k, const mx::array &v,
                               const mx::array &lens, int len_add, const attn_span &span, float scale, float softcap,
                               int window, const rope_inputs &rope) {
  attention_params p;
  std::memset(&p, 0, sizeof p);
  p.batch = k.shape(0), p.hkv = k.shape(1), p.rows = k.shape(2), p.head = k.shape(3);
  p.query_rows = span.rows, p.first = span.first, p.causal = span.causal, p.window_from_row = span.window_from_row;
  p.hq = static_cast<int32_t>(q.size() / (static_cast<size_t>(p.batch) * span.rows * p.head));
  p.window = window, p.len_add = len_add, p.scale = scale, p.cap = softcap, p.rope = rope_of(rope);
  if (p.head > MAX_HEAD) throw bridge_error("decode attention: head size above 256");
  return make_task(s, "EpCpuDecodeAttention", p, attention_task,
                   {q, k, v, lens, rope.pos, float_cache(rope.cos, s), float_cache(rope.sin, s)}, {q.shape()},
                   {q.dtype()})
      .at(0);
}

std::pair<mx::array, mx::array> cpu_kv_append(const mlxb_scope *s, const mx::array &past_k, const mx::array &past_v,
                                              int past_rows, const mx::array &k, const mx::array &v, int rows,
                                              const mx::array &at, bool at_zero, int at_add, int plen,
                                              const kv_dims &dims, const rope_inputs &rope) {
  append_params p;
  std::memset(&p, 0, sizeof p);
  p.batch = dims.batch, p.hkv = dims.heads, p.past_rows = past_rows, p.head = dims.head;
  p.plen = plen, p.at_add = at_add, p.rows = rows, p.at_zero = at_zero, p.rope = rope_of(rope);
  mx::Shape shape = {p.batch, p.hkv, plen, p.head};
  auto outs = make_task(s, "EpCpuKvAppend", p, append_task,
                        {past_k, past_v, k, v, at, rope.pos, float_cache(rope.cos, s), float_cache(rope.sin, s)},
                        {shape, shape}, {k.dtype(), k.dtype()});
  return {outs.at(0), outs.at(1)};
}

std::pair<mx::array, mx::array> cpu_rms_norm(const mlxb_scope *s, const mx::array &x, const std::optional<mx::array> &skip,
                                             const std::optional<mx::array> &bias, const mx::array &gamma, float eps,
                                             bool want_sum) {
  rms_params p;
  std::memset(&p, 0, sizeof p);
  p.hidden = x.shape(-1);
  p.rows = static_cast<int64_t>(x.size()) / p.hidden;
  p.skip_rows = skip ? static_cast<int64_t>(skip->size()) / p.hidden : 1;
  p.has_skip = skip.has_value(), p.has_bias = bias.has_value(), p.want_sum = want_sum, p.eps = eps;
  std::vector<mx::Shape> shapes = {x.shape()};
  if (want_sum) shapes.push_back(x.shape());
  std::vector<mx::Dtype> dtypes(shapes.size(), x.dtype());
  auto outs = make_task(s, "EpCpuRmsNorm", p, rms_task, {x, skip ? *skip : x, bias ? *bias : gamma, gamma},
                        std::move(shapes), std::move(dtypes));
  return {outs.at(0), want_sum ? outs.at(1) : outs.at(0)};
}

} // namespace mlxb_detail
