/* The EP's CUDA kernels run on the CPU (cuda_emu.h) against references of their own: the many-row
 * attention, the many-row RMS norm, the tensor-core quantized GEMM with weight sets and its split-K
 * reduction, the KV append of several rows, the batched copy with zero tails, and the decode step's
 * kernels (one-token attention whole and split with its merge, the append and attention in one
 * launch, the GEMV's weight sets and gated MLP, with and without the RMS norm in their launch, the
 * RMS norm a block per row). Built and run by tools/cuda_emu/run.py; prints one line per
 * failed check and exits 1 on failure. */
#include "cuda_emu.h"

#include <cstdio>
#include <string>
#include <vector>

#include "kernels.inc"

static int failures = 0, checks = 0;

static void expect_near(const char *what, size_t i, double got, double want, double tol) {
  checks++;
  bool ok = std::isnan(want) ? std::isnan(got) : std::fabs(got - want) <= tol * (1.0 + std::fabs(want));
  if (!ok && failures++ < 20) std::printf("FAIL %s[%zu] = %.7g, want %.7g\n", what, i, got, want);
}

/* ---- many-row attention ------------------------------------------------------------------------ */
constexpr int B = 2, S = 3, HQ = 4, HKV = 2, D = 8, T = 6, ROT = 4, COS = 5;

static float rotated_ref(const float *x, int d, const float *cos, const float *sin, int pos) {
  if (!cos || d >= ROT) return x[d];
  int half = ROT / 2, j = d < half ? d : d - half;
  float x1 = x[j], x2 = x[j + half], c = cos[pos * half + j], sn = sin[pos * half + j];
  return d < half ? x1 * c - x2 * sn : x1 * sn + x2 * c;
}

/* softmax(0.5 q.k) v over keys [lo, hi) of kv head kvh (zeros when there is none), in double */
static void attend_ref(const double *qv, const float *k, const float *v, int kvh, long long lo, long long hi,
                       float *out, int rows = T) {
  std::vector<double> score(rows);
  double m = -INFINITY, l = 0;
  for (long long t = lo; t < hi; t++) {
    double sc = 0;
    for (int d = 0; d < D; d++) sc += qv[d] * k[(kvh * rows + t) * D + d];
    score[t] = sc * 0.5;
    m = std::max(m, score[t]);
  }
  for (long long t = lo; t < hi; t++) l += std::exp(score[t] - m);
  for (int d = 0; d < D; d++) {
    double o = 0;
    for (long long t = lo; t < hi; t++) o += std::exp(score[t] - m) / l * v[(kvh * rows + t) * D + d];
    out[d] = hi > lo ? (float)o : 0.0f;
  }
}

struct rows_case {
  bool first, causal, win_bound, rotary;
  int window;
};

static void rows_ref(const rows_case &rc, const float *q, const float *k, const float *v, const int32_t *lens,
                     const float *cos, const float *sin, const int64_t *pos, float *out, int n_rows = S,
                     int cache_rows = T) {
  for (int b = 0; b < B; b++)
    for (int s = 0; s < n_rows; s++)
      for (int h = 0; h < HQ; h++) {
        int u = (b * n_rows + s) * HQ + h, kvh = b * HKV + h / (HQ / HKV);
        long long total = std::min<long long>(std::max<long long>((long long)lens[b] + 1, 0), cache_rows);
        long long bound = (rc.first ? 0 : total - n_rows) + s + 1;
        long long hi = rc.causal && bound < total ? std::max<long long>(bound, 0) : total;
        long long from = rc.win_bound ? bound : hi;
        long long lo = rc.window > 0 && from > rc.window ? std::min<long long>(from - rc.window, hi) : 0;
        int p = 0;
        if (rc.rotary) p = (int)std::min<long long>(std::max<long long>(pos[b * n_rows + s], 0), COS - 1);
        double qv[D];
        for (int d = 0; d < D; d++) qv[d] = rotated_ref(q + u * D, d, rc.rotary ? cos : nullptr, sin, p);
        attend_ref(qv, k, v, kvh, lo, hi, out + u * D, cache_rows);
      }
}

template <typename F>
static void check_rows(const char *what, const rows_case &rc, F kernel) {
  std::vector<float> q(B * S * HQ * D), k(B * HKV * T * D), v(B * HKV * T * D), cos(COS * ROT / 2),
      sin(COS * ROT / 2), got(q.size()), want(q.size());
  for (size_t i = 0; i < q.size(); i++) q[i] = 0.25f * (float)((i * 7) % 9) - 1.0f;
  for (size_t i = 0; i < k.size(); i++) k[i] = 0.125f * (float)((i * 5) % 13) - 0.75f, v[i] = (float)((i * 3) % 7);
  for (int i = 0; i < COS * ROT / 2; i++) cos[i] = std::cos(0.3f * (float)i), sin[i] = std::sin(0.3f * (float)i);
  int32_t lens[B] = {4, 2147483647}, rows[1] = {S};
  int64_t pos[B * S] = {0, 1, 2, 9, -4, 3};
  float params[2] = {0.5f, 0.0f};
  int k_shape[4] = {B, HKV, T, D}, cos_shape[2] = {COS, ROT / 2};
  rows_ref(rc, q.data(), k.data(), v.data(), lens, cos.data(), sin.data(), pos, want.data());
  const int warps = 8, tiles = (S + warps - 1) / warps;
  emu_launch({(unsigned)(B * HQ * tiles), 1, 1}, {(unsigned)(warps * 32), 1, 1}, [&] {
    kernel(q.data(), k.data(), v.data(), lens, params, pos, cos.data(), sin.data(), rows, got.data(), k_shape,
           cos_shape);
  });
  for (size_t i = 0; i < got.size(); i++) expect_near(what, i, got[i], want[i], 1e-5);
}

/* Many rows over a long cache: blocks of eight rows (the last one partial) walk several key tiles,
 * their rows' spans differing (causal) or sliding (a window). */
template <typename F>
static void check_rows_long(const char *what, const rows_case &rc, F kernel, int32_t len1 = 59) {
  constexpr int NR = 20, LT = 90;
  std::vector<float> q(B * NR * HQ * D), k(B * HKV * LT * D), v(k.size()), cos(COS * ROT / 2), sin(COS * ROT / 2),
      got(q.size()), want(q.size());
  for (size_t i = 0; i < q.size(); i++) q[i] = 0.25f * (float)((i * 7) % 9) - 1.0f;
  for (size_t i = 0; i < k.size(); i++) k[i] = 0.125f * (float)((i * 5) % 13) - 0.75f, v[i] = (float)((i * 3) % 7);
  for (int i = 0; i < COS * ROT / 2; i++) cos[i] = std::cos(0.3f * (float)i), sin[i] = std::sin(0.3f * (float)i);
  int32_t lens[B] = {84, len1}, rows[1] = {NR};
  std::vector<int64_t> pos(B * NR);
  for (int i = 0; i < B * NR; i++) pos[i] = i % 5 == 0 ? INT64_MIN + i : i % 5 == 1 ? INT64_MAX - i : (i * 3) % 7 - 1;
  float params[2] = {0.5f, 0.0f};
  int k_shape[4] = {B, HKV, LT, D}, cos_shape[2] = {COS, ROT / 2};
  rows_ref(rc, q.data(), k.data(), v.data(), lens, cos.data(), sin.data(), pos.data(), want.data(), NR, LT);
  const int warps = 8, tiles = (NR + warps - 1) / warps;
  emu_launch({(unsigned)(B * HQ * tiles), 1, 1}, {(unsigned)(warps * 32), 1, 1}, [&] {
    kernel(q.data(), k.data(), v.data(), lens, params, pos.data(), cos.data(), sin.data(), rows, got.data(), k_shape,
           cos_shape);
  });
  for (size_t i = 0; i < got.size(); i++) expect_near(what, i, got[i], want[i], 1e-5);
}

/* float16: the inputs as the kernel reads them, the rotated query rounded as the kernel rounds it, the
 * output rounded once */
static void check_rows_half() {
  const rows_case rc = {false, true, false, true, 0};
  std::vector<float> q(B * S * HQ * D), k(B * HKV * T * D), v(B * HKV * T * D), cos(COS * ROT / 2), sin(COS * ROT / 2),
      want(q.size());
  for (size_t i = 0; i < q.size(); i++) q[i] = 0.25f * (float)((i * 7) % 9) - 1.0f;
  for (size_t i = 0; i < k.size(); i++) k[i] = 0.125f * (float)((i * 5) % 13) - 0.75f, v[i] = (float)((i * 3) % 7);
  for (int i = 0; i < COS * ROT / 2; i++)
    cos[i] = (float)__half(std::cos(0.3f * (float)i)), sin[i] = (float)__half(std::sin(0.3f * (float)i));
  auto halves = [](const std::vector<float> &f) {
    std::vector<__half> h(f.size());
    for (size_t i = 0; i < f.size(); i++) h[i] = __half(f[i]);
    return h;
  };
  std::vector<__half> qh = halves(q), kh = halves(k), vh = halves(v), ch = halves(cos), sh = halves(sin), got(q.size());
  int32_t lens[B] = {4, 2147483647}, rows[1] = {S};
  int64_t pos[B * S] = {0, 1, 2, 9, -4, 3};
  float params[2] = {0.5f, 0.0f};
  int k_shape[4] = {B, HKV, T, D}, cos_shape[2] = {COS, ROT / 2};
  /* the kernel rounds each rotated query channel to float16 before the dot products */
  std::vector<float> qr(q.size());
  for (int u = 0; u < B * S * HQ; u++) {
    int b = u / (S * HQ), s = u / HQ % S, p = (int)std::min<long long>(std::max<long long>(pos[b * S + s], 0), COS - 1);
    for (int d = 0; d < D; d++) qr[u * D + d] = (float)__half(rotated_ref(&q[u * D], d, cos.data(), sin.data(), p));
  }
  rows_case plain = rc;
  plain.rotary = false;
  rows_ref(plain, qr.data(), k.data(), v.data(), lens, nullptr, nullptr, pos, want.data());
  emu_launch({(unsigned)(B * HQ), 1, 1}, {256, 1, 1}, [&] {
    rows_f16::kernel(qh.data(), kh.data(), vh.data(), lens, params, pos, ch.data(), sh.data(), rows, got.data(), k_shape,
                     cos_shape);
  });
  for (size_t i = 0; i < got.size(); i++)
    expect_near("rows attention float16", i, (float)got[i], (float)__half((float)want[i]), 2e-3);
}

/* ---- many-row RMS norm --------------------------------------------------------------------------- */
/* A float32 RMS norm's results against the reference (x + skip + bias of every row, one skip row,
 * eps 1e-5): y normalized times gamma, and the residual sum. */
static void expect_rms(const char *what, const std::vector<float> &x, const std::vector<float> &skip,
                       const std::vector<float> &bias, const std::vector<float> &gamma, const std::vector<float> &y,
                       const std::vector<float> &sum, int rows, int h) {
  std::string y_what = std::string(what) + " y", sum_what = std::string(what) + " sum";
  std::vector<double> v(h);
  for (int r = 0; r < rows; r++) {
    double ss = 0;
    for (int i = 0; i < h; i++) v[i] = (double)x[r * h + i] + skip[i] + bias[i], ss += v[i] * v[i];
    for (int i = 0; i < h; i++) {
      expect_near(y_what.c_str(), r * h + i, y[r * h + i], v[i] / std::sqrt(ss / h + 1e-5) * gamma[i], 1e-5);
      expect_near(sum_what.c_str(), r * h + i, sum[r * h + i], (float)v[i], 1e-7);
    }
  }
}

static void check_rms_rows() {
  constexpr int R = 20, H = 40;
  std::vector<float> x(R * H), skip(H), bias(H), gamma(H), y(R * H), sum(R * H);
  for (int i = 0; i < R * H; i++) x[i] = 0.25f * (float)((i * 5) % 11) - 1.25f;
  for (int i = 0; i < H; i++) skip[i] = 0.1f * (float)(i % 7), bias[i] = -0.05f * (float)i, gamma[i] = 1.0f + 0.01f * i;
  float eps[1] = {1e-5f};
  int32_t dims[1] = {R};
  int skip_shape[3] = {1, 1, H}, gamma_shape[1] = {H};
  emu_launch({(R + 7) / 8, 1, 1}, {256, 1, 1}, [&] {
    rms_rows_f32::kernel(x.data(), skip.data(), bias.data(), gamma.data(), eps, dims, y.data(), sum.data(), skip_shape,
                         gamma_shape);
  });
  expect_rms("rms rows", x, skip, bias, gamma, y, sum, R, H);
}

/* float16 rows: the same float32 arithmetic on the rounded inputs, each result rounded once */
static void check_rms_rows_half() {
  constexpr int R = 20, H = 40;
  std::vector<__half> x(R * H), skip(R / 2 * H), bias(H), gamma(H), y(R * H), sum(R * H);
  for (int i = 0; i < R * H; i++) x[i] = __half(0.25f * (float)((i * 5) % 11) - 1.25f);
  for (int i = 0; i < R / 2 * H; i++) skip[i] = __half(0.1f * (float)(i % 7));
  for (int i = 0; i < H; i++) gamma[i] = __half(1.0f + 0.01f * i);
  float eps[1] = {1e-5f};
  int32_t dims[1] = {R};
  int skip_shape[2] = {R / 2, H}, gamma_shape[1] = {H}; /* the skip's rows repeat over x's */
  emu_launch({(R + 7) / 8, 1, 1}, {256, 1, 1}, [&] {
    rms_rows_f16::kernel(x.data(), skip.data(), bias.data(), gamma.data(), eps, dims, y.data(), sum.data(), skip_shape,
                         gamma_shape);
  });
  for (int r = 0; r < R; r++) {
    double ss = 0, v[H];
    for (int i = 0; i < H; i++) v[i] = (double)(float)x[r * H + i] + (float)skip[(r % (R / 2)) * H + i], ss += v[i] * v[i];
    for (int i = 0; i < H; i++) {
      expect_near("rms rows f16 y", r * H + i, (float)y[r * H + i], (float)__half((float)(v[i] / std::sqrt(ss / H + 1e-5) * (float)gamma[i])), 1e-3);
      expect_near("rms rows f16 sum", r * H + i, (float)sum[r * H + i], (float)__half((float)v[i]), 0.0);
    }
  }
}

/* ---- quantized GEMM with weight sets --------------------------------------------------------------- */
constexpr int M = 70, K = 128, G = 32;

struct weights {
  int n;
  std::vector<uint32_t> packed;
  std::vector<float> scales, biases, dense;
};

static weights make_weights(int n, int seed, int group = G) {
  weights w{n, std::vector<uint32_t>(n * K / 8, 0u), {}, {}, std::vector<float>(n * K)};
  for (int r = 0; r < n; r++)
    for (int g = 0; g < K / group; g++) {
      float sc = std::ldexp(1.0f + (float)((r + 5 * g + seed) % 1024) / 1024.0f, -((r + g) % 9) - 4);
      w.scales.push_back(sc);
      w.biases.push_back(-(float)((r * 3 + g + seed) % 16) * sc);
    }
  for (int r = 0; r < n; r++)
    for (int j = 0; j < K; j++) {
      uint32_t q = (uint32_t)(r * 7 + j * 13 + seed) % 16u;
      w.packed[r * (K / 8) + j / 8] |= q << (4 * (j % 8));
      w.dense[r * K + j] = (float)q * w.scales[r * (K / group) + j / group] + w.biases[r * (K / group) + j / group];
    }
  return w;
}

/* the quantized GEMM at row tile BM (its kernels' BM): three sets with split K, then one set with
 * its bias */
template <int BM, typename Sets, typename One>
static void check_qgemm(const char *what, Sets sets_kernel, One one_kernel) {
  std::vector<__half> x(M * K);
  for (int i = 0; i < M * K; i++) x[i] = __half((float)((i * 37 % 61) - 30) / 32.0f);
  weights ws[3] = {make_weights(50, 1), make_weights(30, 2), make_weights(20, 3)};
  std::vector<__half> post[3], bias(50);
  for (int s = 0; s < 3; s++)
    for (int n = 0; n < ws[s].n; n++) post[s].push_back(__half((float)((n % 7) - 3) / 4.0f));
  for (int n = 0; n < 50; n++) bias[n] = __half((float)((n % 11) - 5) / 8.0f);
  auto want = [&](int s, int m, int n, bool with_bias, bool with_post) {
    double acc = 0;
    for (int j = 0; j < K; j++) acc += (double)(float)x[m * K + j] * ws[s].dense[n * K + j];
    float y = (float)__half((float)(acc + (with_bias ? (float)bias[n] : 0.0f)));
    return with_post ? (double)(float)__half(y + (float)post[s][n]) : (double)y;
  };
  int x_shape[2] = {M, K}, w_shape[3][2], sc_shape[2] = {0, K / G};
  for (int s = 0; s < 3; s++) w_shape[s][0] = ws[s].n, w_shape[s][1] = K / 8;
  sc_shape[0] = 50;
  const int tiles_n = 1 + 1 + 1, tiles_m = (M + BM - 1) / BM, splits = 2;
  const std::string name(what);
  /* three sets, split K over two blocks: partial sums, then the reduction (set 1 without a post) */
  int nt = 100;
  std::vector<float> partial((size_t)splits * M * nt, NAN);
  std::vector<__half> out[3] = {std::vector<__half>(M * 50), std::vector<__half>(M * 30), std::vector<__half>(M * 20)};
  emu_launch({(unsigned)tiles_n, (unsigned)tiles_m, (unsigned)splits}, {2 * BM, 1, 1}, [&] {
    sets_kernel(x.data(), ws[0].packed.data(), ws[0].scales.data(), ws[0].biases.data(), ws[1].packed.data(),
                        ws[1].scales.data(), ws[1].biases.data(), ws[2].packed.data(), ws[2].scales.data(),
                        ws[2].biases.data(), x.data(), post[0].data(), post[1].data(), post[2].data(), nullptr, nullptr,
                        nullptr, partial.data(), x_shape, w_shape[0], sc_shape, w_shape[1], w_shape[2]);
  });
  int32_t dims[3] = {50, 30, 20};
  int partial_shape[3] = {splits, M, nt};
  emu_launch({(unsigned)((M * nt + 255) / 256), 1, 1}, {256, 1, 1}, [&] {
    qgemm_reduce3::kernel(partial.data(), x.data(), post[0].data(), post[1].data(), post[2].data(), dims,
                          out[0].data(), out[1].data(), out[2].data(), partial_shape);
  });
  for (int s = 0; s < 3; s++)
    for (int m = 0; m < M; m++)
      for (int n = 0; n < ws[s].n; n++)
        expect_near((name + (s == 0 ? " set 0" : s == 1 ? " set 1" : " set 2")).c_str(), m * ws[s].n + n,
                    (float)out[s][m * ws[s].n + n], want(s, m, n, false, s != 1), 2e-3);
  /* one set with a bias input and a post bias, no split: written by the GEMM itself */
  std::vector<__half> one(M * 50);
  emu_launch({1, (unsigned)tiles_m, 1}, {2 * BM, 1, 1}, [&] {
    one_kernel(x.data(), ws[0].packed.data(), ws[0].scales.data(), ws[0].biases.data(), ws[0].packed.data(),
                      ws[0].scales.data(), ws[0].biases.data(), ws[0].packed.data(), ws[0].scales.data(),
                      ws[0].biases.data(), bias.data(), post[0].data(), post[0].data(), post[0].data(), one.data(),
                      nullptr, nullptr, nullptr, x_shape, w_shape[0], sc_shape, w_shape[0], w_shape[0]);
  });
  for (int m = 0; m < M; m++)
    for (int n = 0; n < 50; n++) expect_near((name + " one set").c_str(), m * 50 + n, (float)one[m * 50 + n], want(0, m, n, true, true), 2e-3);
}

/* Quantization groups of 64 (two steps of 32 a group): one set with a bias, no split, at each form */
template <typename Kernel>
static void check_qgemm_group64(const char *what, Kernel kernel) {
  constexpr int G64 = 64;
  std::vector<__half> x(M * K), bias(40), post(40), out(M * 40);
  for (int i = 0; i < M * K; i++) x[i] = __half((float)((i * 29 % 53) - 26) / 32.0f);
  for (int n = 0; n < 40; n++) bias[n] = __half((float)((n % 9) - 4) / 8.0f), post[n] = __half(0.0f);
  weights w = make_weights(40, 5, G64);
  int x_shape[2] = {M, K}, w_shape[2] = {40, K / 8}, sc_shape[2] = {40, K / G64};
  emu_launch({1, (unsigned)((M + 63) / 64), 1}, {128, 1, 1}, [&] {
    kernel(x.data(), w.packed.data(), w.scales.data(), w.biases.data(), w.packed.data(), w.scales.data(),
           w.biases.data(), w.packed.data(), w.scales.data(), w.biases.data(), bias.data(), post.data(), post.data(),
           post.data(), out.data(), nullptr, nullptr, nullptr, x_shape, w_shape, sc_shape, w_shape, w_shape);
  });
  for (int m = 0; m < M; m++)
    for (int n = 0; n < 40; n++) {
      double acc = 0;
      for (int j = 0; j < K; j++) acc += (double)(float)x[m * K + j] * w.dense[n * K + j];
      expect_near(what, m * 40 + n, (float)out[m * 40 + n], (float)__half((float)(acc + (float)bias[n])), 2e-3);
    }
}

/* The affine form against the two-halves form with infinite and NaN activations (which the affine
 * form's products leave out and its rows add apart): non-finite results agree exactly (the same
 * infinities, NaN where the halves give NaN), the other outputs within float16 rounding. */
template <typename Halves, typename Affine>
static void check_qgemm_unusual(const char *what, Halves halves_kernel, Affine affine_kernel) {
  std::vector<__half> x(M * K);
  for (int i = 0; i < M * K; i++) x[i] = __half((float)((i * 37 % 61) - 30) / 32.0f);
  x[3 * K + 5] = __half(INFINITY);    /* row 3, first step */
  x[10 * K + 70] = __half(-INFINITY); /* row 10, third step */
  x[20 * K + 100] = __half(NAN);      /* row 20, fourth step */
  weights w = make_weights(50, 1);
  x[33 * K + 36] = __half(INFINITY);   /* row 33, second step, and again in its fourth */
  x[33 * K + 120] = __half(INFINITY);
  x[66 * K + 31] = __half(-INFINITY);  /* row 66 (the second row tile), last of the first step */
  std::vector<__half> bias(50), post(50), a(M * 50), b(M * 50);
  for (int n = 0; n < 50; n++) bias[n] = __half((float)((n % 11) - 5) / 8.0f), post[n] = __half(0.25f * (float)(n % 3));
  int x_shape[2] = {M, K}, w_shape[2] = {50, K / 8}, sc_shape[2] = {50, K / G};
  auto run = [&](auto kernel, std::vector<__half> &out) {
    emu_launch({1, (unsigned)((M + 63) / 64), 1}, {128, 1, 1}, [&] {
      kernel(x.data(), w.packed.data(), w.scales.data(), w.biases.data(), w.packed.data(), w.scales.data(),
             w.biases.data(), w.packed.data(), w.scales.data(), w.biases.data(), bias.data(), post.data(), post.data(),
             post.data(), out.data(), nullptr, nullptr, nullptr, x_shape, w_shape, sc_shape, w_shape, w_shape);
    });
  };
  run(halves_kernel, a);
  run(affine_kernel, b);
  const std::string name(what);
  int unusual = 0;
  for (int i = 0; i < M * 50; i++) {
    float u = (float)a[i], v = (float)b[i];
    if (!std::isfinite(u)) {
      unusual++;
      bool same = std::isnan(u) ? std::isnan(v) : u == v;
      expect_near((name + " (non-finite)").c_str(), i, same ? 0.0f : 1.0f, 0.0, 0.0);
    } else {
      expect_near(name.c_str(), i, v, u, 2e-3);
    }
  }
  expect_near((name + ": some outputs non-finite").c_str(), 0, unusual > 0 ? 1.0f : 0.0f, 1.0, 0.0);
}

/* ---- KV append of several rows ------------------------------------------------------------------ */
static void check_append() {
  constexpr int P = 4, PLEN = 8, ROWS = 3, HK = 2;
  std::vector<float> pk(B * HK * P * D), nk(B * ROWS * HK * D), cos(COS * ROT / 2), sin(COS * ROT / 2),
      ok(B * HK * PLEN * D, NAN), ov(B * HK * PLEN * D, NAN);
  for (size_t i = 0; i < pk.size(); i++) pk[i] = (float)(i % 17) - 8.0f;
  for (size_t i = 0; i < nk.size(); i++) nk[i] = 0.5f * (float)(i % 5) + 1.0f;
  for (int i = 0; i < COS * ROT / 2; i++) cos[i] = std::cos(0.3f * (float)i), sin[i] = std::sin(0.3f * (float)i);
  int32_t at[B] = {4, 7}, plen[5] = {PLEN, P, ROWS, B, HK}; /* at + AT_ADD (-2): rows 2 and 5 */
  int64_t rpos[B] = {1, 2};
  int cos_shape[2] = {COS, ROT / 2};
  const int n = B * HK * PLEN * D;
  emu_launch({(unsigned)((n + 255) / 256), 1, 1}, {256, 1, 1}, [&] {
    append_rows::kernel(pk.data(), pk.data(), nk.data(), nk.data(), at, plen, rpos, cos.data(), sin.data(), ok.data(),
                        ov.data(), cos_shape);
  });
  for (int b = 0; b < B; b++)
    for (int h = 0; h < HK; h++)
      for (int t = 0; t < PLEN; t++)
        for (int d = 0; d < D; d++) {
          int bh = b * HK + h, o = (bh * PLEN + t) * D + d, a = at[b] - 2, j = t - a;
          int p = std::min<int>((int)rpos[b] + j, COS - 1);
          const float *fresh = &nk[((b * ROWS + j) * HK + h) * D];
          float wk = t < a ? (t < P ? pk[(bh * P + t) * D + d] : 0.0f) : j < ROWS ? rotated_ref(fresh, d, cos.data(), sin.data(), p) : 0.0f;
          float wv = t < a ? (t < P ? pk[(bh * P + t) * D + d] : 0.0f) : j < ROWS ? fresh[d] : 0.0f;
          expect_near("append k", o, ok[o], wk, 1e-6);
          expect_near("append v", o, ov[o], wv, 0.0);
        }
}

/* ---- batched copy with zero tails --------------------------------------------------------------- */
static void check_copy_batch() {
  std::vector<unsigned char> src(4096), dst(8192, 0xee);
  for (size_t i = 0; i < src.size(); i++) src[i] = (unsigned char)(i * 31 + 7);
  copy_batch::ep_copies b{};
  /* aligned: 3 rows of 32 bytes into a pitch of 64, zeroed after; unaligned: 5 rows of 7 bytes, pitch 9 */
  b.c[0] = {src.data(), dst.data(), 32, 3, 48, 64, 1};
  b.c[1] = {src.data() + 1, dst.data() + 1025, 7, 5, 11, 9, 0};
  b.n = 2;
  emu_launch({2, 2, 1}, {64, 1, 1}, [&] { copy_batch::ort_ep_mlx_copy_batch(b); });
  for (int r = 0; r < 3; r++)
    for (int k = 0; k < 64; k++)
      expect_near("copy aligned", r * 64 + k, dst[r * 64 + k], k < 32 ? src[r * 48 + k] : 0, 0.0);
  for (int r = 0; r < 5; r++)
    for (int k = 0; k < 9; k++)
      expect_near("copy unaligned", r * 9 + k, dst[1025 + r * 9 + k], k < 7 ? src[1 + r * 11 + k] : 0xee, 0.0);
}

/* ---- one-token decode attention (a block per head, and split over two blocks with the merge) -------- */
static void decode_ref(const float *q, const float *k, const float *v, const int32_t *lens, int window,
                       const float *cos, const float *sin, const int32_t *pos, float *out, int rows = T) {
  for (int b = 0; b < B; b++)
    for (int h = 0; h < HQ; h++) {
      int u = b * HQ + h, kvh = b * HKV + h / (HQ / HKV);
      long long hi = std::min<long long>(std::max<long long>((long long)lens[b] + 1, 0), rows);
      long long lo = window > 0 && hi > window ? hi - window : 0;
      int p = cos ? std::min(std::max(pos[b], 0), COS - 1) : 0;
      double qv[D];
      for (int d = 0; d < D; d++) qv[d] = rotated_ref(q + u * D, d, cos, sin, p);
      attend_ref(qv, k, v, kvh, lo, hi, out + u * D, rows);
    }
}

static void check_decode() {
  std::vector<float> q(B * HQ * D), k(B * HKV * T * D), v(B * HKV * T * D), cos(COS * ROT / 2), sin(COS * ROT / 2),
      got(q.size()), want(q.size());
  for (size_t i = 0; i < q.size(); i++) q[i] = 0.25f * (float)((i * 7) % 9) - 1.0f;
  for (size_t i = 0; i < k.size(); i++) k[i] = 0.125f * (float)((i * 5) % 13) - 0.75f, v[i] = (float)((i * 3) % 7);
  for (int i = 0; i < COS * ROT / 2; i++) cos[i] = std::cos(0.3f * (float)i), sin[i] = std::sin(0.3f * (float)i);
  int32_t lens[B] = {3, 2147483647}, pos[B] = {1000, -7}, order[1] = {0};
  float params[2] = {0.5f, 0.0f};
  int k_shape[4] = {B, HKV, T, D}, cos_shape[2] = {COS, ROT / 2};
  decode_ref(q.data(), k.data(), v.data(), lens, 2, cos.data(), sin.data(), pos, want.data());
  emu_launch({B * HQ, 1, 1}, {256, 1, 1}, [&] {
    decode_f32::kernel(q.data(), k.data(), v.data(), lens, params, pos, cos.data(), sin.data(), order, got.data(),
                       nullptr, nullptr, nullptr, k_shape, cos_shape);
  });
  for (size_t i = 0; i < got.size(); i++) expect_near("decode attention, window, rotary", i, got[i], want[i], 1e-5);
  /* the context split over two blocks per head, then merged */
  std::vector<float> pm(B * HQ * 2), ps(B * HQ * 2), pa(B * HQ * 2 * D);
  decode_ref(q.data(), k.data(), v.data(), lens, 0, nullptr, nullptr, pos, want.data());
  emu_launch({B * HQ * 2, 1, 1}, {256, 1, 1}, [&] {
    decode_parts::kernel(q.data(), k.data(), v.data(), lens, params, pos, cos.data(), sin.data(), order, nullptr,
                         pm.data(), ps.data(), pa.data(), k_shape, cos_shape);
  });
  emu_launch({B * HQ, 1, 1}, {32, 1, 1}, [&] { decode_merge::kernel(pm.data(), ps.data(), pa.data(), got.data()); });
  for (size_t i = 0; i < got.size(); i++) expect_near("decode attention, two parts", i, got[i], want[i], 1e-5);
  /* a long context: each warp walks several rounds of four keys (the last one partial) */
  constexpr int LONG = 75;
  std::vector<float> kl(B * HKV * LONG * D), vl(kl.size());
  for (size_t i = 0; i < kl.size(); i++) kl[i] = 0.125f * (float)((i * 5) % 13) - 0.75f, vl[i] = (float)((i * 3) % 7);
  int32_t long_lens[B] = {70, 40};
  int long_shape[4] = {B, HKV, LONG, D};
  decode_ref(q.data(), kl.data(), vl.data(), long_lens, 0, cos.data(), sin.data(), pos, want.data(), LONG);
  emu_launch({B * HQ, 1, 1}, {256, 1, 1}, [&] {
    decode_long::kernel(q.data(), kl.data(), vl.data(), long_lens, params, pos, cos.data(), sin.data(), order, got.data(),
                       nullptr, nullptr, nullptr, long_shape, cos_shape);
  });
  for (size_t i = 0; i < got.size(); i++) expect_near("decode attention, long context", i, got[i], want[i], 1e-5);
  std::fill(got.begin(), got.end(), NAN);
  emu_launch({B * HQ, 1, 1}, {512, 1, 1}, [&] {
    decode_long16::kernel(q.data(), kl.data(), vl.data(), long_lens, params, pos, cos.data(), sin.data(), order,
                          got.data(), nullptr, nullptr, nullptr, long_shape, cos_shape);
  });
  for (size_t i = 0; i < got.size(); i++)
    expect_near("decode attention, long context, 16 warps", i, got[i], want[i], 1e-5);
}

/* ---- the decode step in one launch: the present and the attention over it --------------------------- */
static void check_decode_step() {
  constexpr int P = 4, PLEN = T;
  std::vector<float> q(B * HQ * D), pk(B * HKV * P * D), pv(B * HKV * P * D), nk(B * HKV * D), nv(B * HKV * D),
      cos(COS * ROT / 2), sin(COS * ROT / 2), got(q.size()), want(q.size()), ok(B * HKV * PLEN * D, NAN),
      ov(B * HKV * PLEN * D, NAN), present_k(ok.size()), present_v(ov.size());
  for (size_t i = 0; i < q.size(); i++) q[i] = 0.25f * (float)((i * 7) % 9) - 1.0f;
  for (size_t i = 0; i < pk.size(); i++) pk[i] = 0.125f * (float)((i * 5) % 13) - 0.75f, pv[i] = (float)((i * 3) % 7);
  for (size_t i = 0; i < nk.size(); i++) nk[i] = 0.5f * (float)(i % 5) - 1.0f, nv[i] = (float)(i % 3);
  for (int i = 0; i < COS * ROT / 2; i++) cos[i] = std::cos(0.3f * (float)i), sin[i] = std::sin(0.3f * (float)i);
  /* sequence 0: 3 past rows (new row at 3); sequence 1: 5 (past the buffer's 4 rows: row 4 is zeros) */
  int32_t lens[B] = {3, 5};
  int64_t pos[B] = {3, 9};
  float params[2] = {0.5f, 0.0f};
  int32_t dims[1] = {PLEN};
  int past_shape[4] = {B, HKV, P, D}, cos_shape[2] = {COS, ROT / 2};
  /* the reference: the present as the append makes it, then attention over it */
  for (int b = 0; b < B; b++)
    for (int h = 0; h < HKV; h++)
      for (int t = 0; t < PLEN; t++)
        for (int d = 0; d < D; d++) {
          int bh = b * HKV + h, o = (bh * PLEN + t) * D + d, at = lens[b];
          int p = std::min<int>((int)pos[b], COS - 1);
          present_k[o] = t < at ? (t < P ? pk[(bh * P + t) * D + d] : 0.0f)
                         : t == at ? rotated_ref(&nk[bh * D], d, cos.data(), sin.data(), p) : 0.0f;
          present_v[o] = t < at ? (t < P ? pv[(bh * P + t) * D + d] : 0.0f) : t == at ? nv[bh * D + d] : 0.0f;
        }
  int32_t pos32[B] = {(int32_t)pos[0], (int32_t)pos[1]};
  decode_ref(q.data(), present_k.data(), present_v.data(), lens, 3, cos.data(), sin.data(), pos32, want.data());
  const int att = B * HQ, appended = (B * HKV * PLEN * D + 255) / 256;
  emu_launch({(unsigned)(att + appended), 1, 1}, {256, 1, 1}, [&] {
    decode_step::kernel(q.data(), pk.data(), pv.data(), nk.data(), nv.data(), lens, params, pos, cos.data(), sin.data(),
                        dims, got.data(), ok.data(), ov.data(), past_shape, past_shape, cos_shape);
  });
  for (size_t i = 0; i < got.size(); i++) expect_near("decode step attention", i, got[i], want[i], 1e-5);
  for (size_t i = 0; i < ok.size(); i++) {
    expect_near("decode step present k", i, ok[i], present_k[i], 1e-6);
    expect_near("decode step present v", i, ov[i], present_v[i], 0.0);
  }
  /* sixteen warps a block (ORT_EP_MLX_DECODE_WARPS): the present's blocks take 512 elements each */
  std::fill(got.begin(), got.end(), NAN), std::fill(ok.begin(), ok.end(), NAN), std::fill(ov.begin(), ov.end(), NAN);
  const int appended16 = (B * HKV * PLEN * D + 511) / 512;
  emu_launch({(unsigned)(att + appended16), 1, 1}, {512, 1, 1}, [&] {
    decode_step16::kernel(q.data(), pk.data(), pv.data(), nk.data(), nv.data(), lens, params, pos, cos.data(),
                          sin.data(), dims, got.data(), ok.data(), ov.data(), past_shape, past_shape, cos_shape);
  });
  for (size_t i = 0; i < got.size(); i++) expect_near("decode step attention, 16 warps", i, got[i], want[i], 1e-5);
  for (size_t i = 0; i < ok.size(); i++) {
    expect_near("decode step present k, 16 warps", i, ok[i], present_k[i], 1e-6);
    expect_near("decode step present v, 16 warps", i, ov[i], present_v[i], 0.0);
  }
}

/* the same step on a cache that is past and present at once: the new row written into it at its place */
static void check_decode_step_in_place() {
  std::vector<float> q(B * HQ * D), cache_k(B * HKV * T * D), cache_v(B * HKV * T * D), nk(B * HKV * D), nv(B * HKV * D),
      cos(COS * ROT / 2), sin(COS * ROT / 2), got(q.size()), want(q.size());
  for (size_t i = 0; i < q.size(); i++) q[i] = 0.25f * (float)((i * 7) % 9) - 1.0f;
  for (size_t i = 0; i < cache_k.size(); i++)
    cache_k[i] = 0.125f * (float)((i * 5) % 13) - 0.75f, cache_v[i] = (float)((i * 3) % 7);
  for (size_t i = 0; i < nk.size(); i++) nk[i] = 0.5f * (float)(i % 5) - 1.0f, nv[i] = (float)(i % 3) + 10.0f;
  for (int i = 0; i < COS * ROT / 2; i++) cos[i] = std::cos(0.3f * (float)i), sin[i] = std::sin(0.3f * (float)i);
  int32_t lens[B] = {3, 5};
  int64_t pos[B] = {3, 9};
  float params[2] = {0.5f, 0.0f};
  int32_t dims[1] = {T};
  int cache_shape[4] = {B, HKV, T, D}, cos_shape[2] = {COS, ROT / 2};
  std::vector<float> want_k = cache_k, want_v = cache_v;
  for (int b = 0; b < B; b++)
    for (int h = 0; h < HKV; h++)
      for (int d = 0; d < D; d++) {
        int bh = b * HKV + h, o = (bh * T + lens[b]) * D + d, p = std::min<int>((int)pos[b], COS - 1);
        want_k[o] = rotated_ref(&nk[bh * D], d, cos.data(), sin.data(), p);
        want_v[o] = nv[bh * D + d];
      }
  int32_t pos32[B] = {(int32_t)pos[0], (int32_t)pos[1]};
  decode_ref(q.data(), want_k.data(), want_v.data(), lens, 0, cos.data(), sin.data(), pos32, want.data());
  const int att = B * HQ, written = (B * HKV * D + 255) / 256;
  emu_launch({(unsigned)(att + written), 1, 1}, {256, 1, 1}, [&] {
    decode_step_in_place::kernel(q.data(), cache_k.data(), cache_v.data(), nk.data(), nv.data(), lens, params, pos,
                                 cos.data(), sin.data(), dims, got.data(), nullptr, nullptr, cache_shape, cache_shape,
                                 cos_shape);
  });
  for (size_t i = 0; i < got.size(); i++) expect_near("decode step in place attention", i, got[i], want[i], 1e-5);
  for (size_t i = 0; i < cache_k.size(); i++) {
    expect_near("decode step in place cache k", i, cache_k[i], want_k[i], 1e-6);
    expect_near("decode step in place cache v", i, cache_v[i], want_v[i], 0.0);
  }
}

/* ---- the GEMV: three weight sets with bias adds, and the gated MLP --------------------------------- */
static void check_qgemv() {
  constexpr int MR = 2;
  std::vector<float> x(MR * K);
  for (int i = 0; i < MR * K; i++) x[i] = (float)((i * 37 % 61) - 30) / 32.0f;
  weights ws[3] = {make_weights(20, 4), make_weights(12, 5), make_weights(8, 6)};
  std::vector<float> add[3];
  for (int s = 0; s < 3; s++)
    for (int n = 0; n < ws[s].n; n++) add[s].push_back((float)((n % 5) - 2) / 4.0f);
  auto dot = [&](int s, int m, int n) {
    double acc = 0;
    for (int j = 0; j < K; j++) acc += (double)x[m * K + j] * ws[s].dense[n * K + j];
    return (float)acc;
  };
  int w_shape[3][2], sc_shape[2] = {20, K / G};
  for (int s = 0; s < 3; s++) w_shape[s][0] = ws[s].n, w_shape[s][1] = K / 8;
  std::vector<float> out[3] = {std::vector<float>(MR * 20), std::vector<float>(MR * 12), std::vector<float>(MR * 8)};
  const int rows_per_block = 128 / 8;
  emu_launch({(40 + rows_per_block - 1) / rows_per_block, MR, 1}, {128, 1, 1}, [&] {
    qgemv_sets::kernel(x.data(), ws[0].packed.data(), ws[0].scales.data(), ws[0].biases.data(), ws[1].packed.data(),
                       ws[1].scales.data(), ws[1].biases.data(), ws[2].packed.data(), ws[2].scales.data(),
                       ws[2].biases.data(), add[0].data(), add[1].data(), add[2].data(), x.data(), x.data(), x.data(),
                       x.data(), out[0].data(), out[1].data(), out[2].data(), nullptr, nullptr, nullptr, w_shape[0],
                       sc_shape, w_shape[1], w_shape[2], sc_shape);
  });
  for (int s = 0; s < 3; s++)
    for (int m = 0; m < MR; m++)
      for (int n = 0; n < ws[s].n; n++) {
        float y = dot(s, m, n);
        if (s != 1) y = y + add[s][n];
        expect_near("qgemv sets", (size_t)(s * 100 + m * ws[s].n + n), out[s][m * ws[s].n + n], y, 1e-5);
      }
  /* gate and up of one N: the five results of the gated MLP */
  weights gu[2] = {make_weights(16, 7), make_weights(16, 8)};
  int g_shape[2] = {16, K / 8}, gs_shape[2] = {16, K / G};
  std::vector<float> gate(MR * 16), up(MR * 16), prod(MR * 16), sig(MR * 16), silu(MR * 16);
  emu_launch({1, MR, 1}, {128, 1, 1}, [&] {
    qgemv_swiglu::kernel(x.data(), gu[0].packed.data(), gu[0].scales.data(), gu[0].biases.data(), gu[1].packed.data(),
                         gu[1].scales.data(), gu[1].biases.data(), gu[0].packed.data(), gu[0].scales.data(),
                         gu[0].biases.data(), add[0].data(), add[0].data(), add[0].data(), x.data(), x.data(), x.data(),
                         x.data(), gate.data(), up.data(), prod.data(), sig.data(), silu.data(), nullptr, g_shape,
                         gs_shape, g_shape, g_shape, gs_shape);
  });
  for (int m = 0; m < MR; m++)
    for (int n = 0; n < 16; n++) {
      double g = 0, u = 0;
      for (int j = 0; j < K; j++) g += (double)x[m * K + j] * gu[0].dense[n * K + j], u += (double)x[m * K + j] * gu[1].dense[n * K + j];
      float gf = (float)g, uf = (float)u, sg = 1.0f / (1.0f + std::exp(-gf)), sl = gf * sg;
      size_t i = m * 16 + n;
      expect_near("swiglu gate", i, gate[i], gf, 1e-5);
      expect_near("swiglu up", i, up[i], uf, 1e-5);
      expect_near("swiglu sigmoid", i, sig[i], sg, 1e-5);
      expect_near("swiglu silu", i, silu[i], sl, 1e-5);
      expect_near("swiglu product", i, prod[i], sl * uf, 1e-5);
    }
}

/* ---- the GEMV with the RMS norm in its launch ----------------------------------------------------- */
/* Rows v = x (+ skip) (+ nbias) normalized as rms_norm_source does, times gamma, rounded to Tn: what
 * every block of a normed GEMV launch multiplies. */
template <typename Tn>
static std::vector<float> normed_rows_ref(const std::vector<float> &x, const float *skip, const float *nbias,
                                          const std::vector<float> &gamma, float eps, int rows,
                                          std::vector<float> *sums) {
  std::vector<float> out(rows * K);
  for (int m = 0; m < rows; m++) {
    double ss = 0;
    float v[K];
    for (int j = 0; j < K; j++) {
      v[j] = x[m * K + j] + (skip ? skip[m * K + j] : 0.0f) + (nbias ? nbias[j] : 0.0f);
      ss += (double)v[j] * v[j];
    }
    float inv = (float)(1.0 / std::sqrt(ss / K + eps));
    for (int j = 0; j < K; j++) {
      out[m * K + j] = (float)Tn(v[j] * inv * gamma[j]);
      if (sums) sums->push_back((float)Tn(v[j]));
    }
  }
  return out;
}

static void check_qgemv_normed() {
  constexpr int MR = 2;
  std::vector<float> x(MR * K), skip(MR * K), nbias(K), gamma(K);
  for (int i = 0; i < MR * K; i++) x[i] = (float)((i * 37 % 61) - 30) / 16.0f, skip[i] = (float)((i * 11 % 23) - 11) / 8.0f;
  for (int j = 0; j < K; j++) nbias[j] = (float)((j % 9) - 4) / 8.0f, gamma[j] = 0.5f + (float)(j % 7) / 8.0f;
  const float eps = 1e-5f;
  std::vector<float> sums;
  std::vector<float> xn = normed_rows_ref<float>(x, skip.data(), nbias.data(), gamma, eps, MR, &sums);
  weights ws[3] = {make_weights(20, 4), make_weights(12, 5), make_weights(8, 6)};
  std::vector<float> add[3];
  for (int s = 0; s < 3; s++)
    for (int n = 0; n < ws[s].n; n++) add[s].push_back((float)((n % 5) - 2) / 4.0f);
  int w_shape[3][2], sc_shape[2] = {20, K / G}, skip_shape[2] = {MR, K};
  for (int s = 0; s < 3; s++) w_shape[s][0] = ws[s].n, w_shape[s][1] = K / 8;
  std::vector<float> out[3] = {std::vector<float>(MR * 20), std::vector<float>(MR * 12), std::vector<float>(MR * 8)};
  std::vector<float> nsum(MR * K, -1.0f);
  emu_launch({(40 + 15) / 16, MR, 1}, {128, 1, 1}, [&] {
    qgemv_sets_normed::kernel(x.data(), ws[0].packed.data(), ws[0].scales.data(), ws[0].biases.data(),
                              ws[1].packed.data(), ws[1].scales.data(), ws[1].biases.data(), ws[2].packed.data(),
                              ws[2].scales.data(), ws[2].biases.data(), add[0].data(), add[1].data(), add[2].data(),
                              skip.data(), nbias.data(), gamma.data(), &eps, out[0].data(), out[1].data(),
                              out[2].data(), nullptr, nullptr, nsum.data(), w_shape[0], sc_shape, w_shape[1],
                              w_shape[2], skip_shape);
  });
  for (int s = 0; s < 3; s++)
    for (int m = 0; m < MR; m++)
      for (int n = 0; n < ws[s].n; n++) {
        double acc = 0;
        for (int j = 0; j < K; j++) acc += (double)xn[m * K + j] * ws[s].dense[n * K + j];
        float y = (float)acc + (s != 1 ? add[s][n] : 0.0f);
        expect_near("normed qgemv sets", (size_t)(s * 100 + m * ws[s].n + n), out[s][m * ws[s].n + n], y, 1e-5);
      }
  for (int i = 0; i < MR * K; i++) expect_near("normed qgemv residual sum", i, nsum[i], sums[i], 1e-6);
  /* float16, no skip or bias, the gated MLP: the normalized row rounded to float16 before the products */
  std::vector<__half> xh(MR * K), gh(K), prod(MR * 16);
  std::vector<float> xq(MR * K);
  for (int i = 0; i < MR * K; i++) xh[i] = __half(x[i]), xq[i] = (float)xh[i];
  for (int j = 0; j < K; j++) gh[j] = __half(gamma[j]);
  std::vector<float> gq(gh.begin(), gh.end());
  std::vector<float> xnh = normed_rows_ref<__half>(xq, nullptr, nullptr, gq, eps, MR, nullptr);
  weights gu[2] = {make_weights(16, 7), make_weights(16, 8)};
  int g_shape[2] = {16, K / 8}, gs_shape[2] = {16, K / G}, one_shape[1] = {K};
  emu_launch({1, MR, 1}, {128, 1, 1}, [&] {
    qgemv_swiglu_normed::kernel(xh.data(), gu[0].packed.data(), gu[0].scales.data(), gu[0].biases.data(),
                                gu[1].packed.data(), gu[1].scales.data(), gu[1].biases.data(), gu[0].packed.data(),
                                gu[0].scales.data(), gu[0].biases.data(), xh.data(), xh.data(), xh.data(), xh.data(),
                                xh.data(), gh.data(), &eps, nullptr, nullptr, prod.data(), nullptr, nullptr, nullptr,
                                g_shape, gs_shape, g_shape, g_shape, one_shape);
  });
  for (int m = 0; m < MR; m++)
    for (int n = 0; n < 16; n++) {
      double g = 0, u = 0;
      for (int j = 0; j < K; j++) g += (double)xnh[m * K + j] * gu[0].dense[n * K + j], u += (double)xnh[m * K + j] * gu[1].dense[n * K + j];
      float gf = (float)__half((float)g), uf = (float)__half((float)u);
      float sg = (float)__half(1.0f / (1.0f + std::exp(-gf))), sl = (float)__half(gf * sg);
      expect_near("normed swiglu product (float16)", (size_t)(m * 16 + n), (float)prod[m * 16 + n],
                  (float)__half(sl * uf), 2e-3);
    }
}

/* ---- the RMS norm, a block per row --------------------------------------------------------------- */
static void check_rms_block() {
  constexpr int R = 3, H = 40;
  std::vector<float> x(R * H), skip(H), bias(H), gamma(H), y(R * H), sum(R * H);
  for (int i = 0; i < R * H; i++) x[i] = 0.5f * (float)(i % 7) - 1.5f;
  for (int i = 0; i < H; i++) skip[i] = 0.25f * (float)(i % 9), bias[i] = -0.125f * (float)(i % 5), gamma[i] = 1.0f + 0.1f * (float)(i % 4);
  float eps[1] = {1e-5f};
  int skip_shape[2] = {1, H}, gamma_shape[1] = {H};
  emu_launch({R, 1, 1}, {64, 1, 1}, [&] {
    rms_block_f32::kernel(x.data(), skip.data(), bias.data(), gamma.data(), eps, y.data(), sum.data(), skip_shape,
                          gamma_shape);
  });
  expect_rms("rms block", x, skip, bias, gamma, y, sum, R, H);
}

/* ---- the range check of untrusted integers: {1, the first value outside [lo, hi)} or {0, 0} ----------- */
template <typename T, typename F>
static void expect_range(const char *what, std::vector<T> x, int64_t lo, int64_t hi, int threads, int64_t flag,
                         int64_t value, F kernel) {
  int64_t bounds[2] = {lo, hi}, out[2] = {-7, -7};
  int x_shape[1] = {static_cast<int>(x.size())};
  emu_launch({threads, 1, 1}, {threads, 1, 1}, [&] { kernel(x.data(), bounds, out, x_shape); });
  expect_near(what, 0, (double)out[0], (double)flag, 0);
  if (out[1] != value) {
    std::printf("FAIL %s: value %lld, want %lld\n", what, (long long)out[1], (long long)value);
    failures++;
  }
  checks++;
}

static void check_range() {
  std::vector<int64_t> ids(1000);
  for (size_t i = 0; i < ids.size(); i++) ids[i] = (int64_t)((i * 37) % 151);
  expect_range("range, all inside", ids, 0, 151, 256, 0, 0, range_i64::kernel);
  /* the first offender by index: 300 and 556 are both thread 44's (of 256), 700 and 900 other threads' */
  std::vector<int64_t> bad = ids;
  bad[556] = 152, bad[300] = 151, bad[700] = -1, bad[900] = 4000;
  expect_range("range, first offender", bad, 0, 151, 256, 1, 151, range_i64::kernel);
  bad[100] = INT64_MIN;
  expect_range("range, int64 minimum", bad, 0, 151, 256, 1, INT64_MIN, range_i64::kernel);
  bad[5] = INT64_MAX;
  expect_range("range, int64 maximum, one warp", bad, 0, 151, 32, 1, INT64_MAX, range_i64::kernel);
  expect_range("range, empty range", std::vector<int64_t>{3}, 5, 5, 32, 1, 3, range_i64::kernel);
  /* the upper bound only (a type that cannot go below lo): negative values pass */
  expect_range("range, upper bound only", std::vector<int32_t>{-5, INT32_MIN, 9, 10, 4}, 0, 10, 64, 1, 10,
               range_i32_hi::kernel);
  expect_range("range, upper bound only, inside", std::vector<int32_t>{-5, INT32_MIN, 9}, 0, 10, 64, 0, 0,
               range_i32_hi::kernel);
  /* unsigned: values past INT64_MAX are outside, never wrapped to negatives that pass */
  expect_range("range, uint64 past int64", std::vector<uint64_t>{1, 0x8000000000000000ull, 2}, 1, 100, 64, 1,
               INT64_MIN, range_u64::kernel);
  expect_range("range, uint64 past int64, upper bound only", std::vector<uint64_t>{1, 0xfffffffffffffff0ull, 2}, 0,
               100, 64, 1, -16, range_u64_hi::kernel);
  expect_range("range, uint64 below lo", std::vector<uint64_t>{5, 0, 7}, 1, 100, 64, 1, 0, range_u64::kernel);
  expect_range("range, uint64 inside", std::vector<uint64_t>{5, 1, 99}, 1, 100, 64, 0, 0, range_u64::kernel);
}

/* ---- GatherBlockQuantized: rows of a packed table by index, out-of-range ones zero ----------------- */
template <typename S, typename F>
static void check_gather_bq(const char *what, int bits, bool with_zp, F kernel) {
  constexpr int ROWS = 5, REST = 2, D = 40, BLOCK = 16, NB = (D + BLOCK - 1) / BLOCK;
  const int per = 8 / bits, pd = D / per, zpd = (NB + per - 1) / per;
  std::vector<uint8_t> data(ROWS * REST * pd), zps(ROWS * REST * zpd);
  std::vector<S> scales(ROWS * REST * NB);
  for (size_t i = 0; i < data.size(); i++) data[i] = (uint8_t)(i * 73 + 11);
  for (size_t i = 0; i < zps.size(); i++) zps[i] = (uint8_t)(i * 29 + 5);
  for (size_t i = 0; i < scales.size(); i++) scales[i] = S(0.125f * (float)(i % 9) - 0.5f);
  constexpr int N = 5;
  int64_t idx[N] = {2, -1, 5, -6, INT64_MIN}; /* the last three outside [-5, 5): zero rows */
  int32_t dims[7] = {N, REST, D, ROWS, pd, NB, zpd};
  std::vector<S> got(N * REST * D);
  emu_launch({(unsigned)((got.size() + 255) / 256), 1, 1}, {256, 1, 1},
             [&] { kernel(data.data(), idx, scales.data(), zps.data(), dims, got.data()); });
  for (int i = 0; i < N; i++)
    for (int r = 0; r < REST; r++)
      for (int e = 0; e < D; e++) {
        long long row = idx[i] < 0 ? idx[i] + ROWS : idx[i];
        float want = 0.0f;
        if (row >= 0 && row < ROWS) {
          size_t base = (size_t)row * REST + r;
          int q = (data[base * pd + e / per] >> ((e % per) * bits)) & ((1 << bits) - 1), blk = e / BLOCK;
          int zp = with_zp ? (zps[base * zpd + blk / per] >> ((blk % per) * bits)) & ((1 << bits) - 1) : 1 << (bits - 1);
          want = (float)S((float)(q - zp) * (float)scales[base * NB + blk]);
        }
        expect_near(what, (size_t)((i * REST + r) * D + e), (float)got[(i * REST + r) * D + e], want, 0.0);
      }
}

int main() {
  check_rows("rows attention, continuation, rotary per row", {false, true, false, true, 0}, rows_f32::kernel);
  check_rows("rows attention, first prompt, window from the row", {true, true, true, false, 2},
             rows_f32_window::kernel);
  check_rows("rows attention, bidirectional", {false, false, false, false, 0}, rows_f32_bidir::kernel);
  check_rows_half();
  check_rows_long("rows attention, long cache, causal continuation", {false, true, false, true, 0}, rows_f32::kernel);
  check_rows_long("rows attention, long cache, window from the row", {true, true, true, false, 2},
                  rows_f32_window::kernel);
  check_rows_long("rows attention, long cache, bidirectional", {false, false, false, false, 0}, rows_f32_bidir::kernel);
  /* hostile lengths through the tiles: past the cache, negative, at int32's ends */
  for (int32_t len1 : {INT32_MAX, INT32_MIN, -7, 5, 200})
    check_rows_long("rows attention, long cache, hostile length", {false, true, false, true, 0}, rows_f32::kernel, len1);
  check_rms_rows();
  check_rms_rows_half();
  check_qgemm<64>("qgemm", qgemm_sets3::kernel, qgemm_one::kernel);
  check_qgemm<128>("qgemm, row tile 128", qgemm_sets3_bm128::kernel, qgemm_one_bm128::kernel);
  check_qgemm<64>("qgemm, affine", qgemm_sets3_affine::kernel, qgemm_one_affine::kernel);
  check_qgemm<128>("qgemm, affine, row tile 128", qgemm_sets3_affine_bm128::kernel, qgemm_one_affine_bm128::kernel);
  check_qgemm_unusual("qgemm, affine against halves, non-finite activations", qgemm_one::kernel, qgemm_one_affine::kernel);
  check_qgemm_group64("qgemm, groups of 64", qgemm_one_g64::kernel);
  check_qgemm_group64("qgemm, affine, groups of 64", qgemm_one_affine_g64::kernel);
  check_append();
  check_copy_batch();
  check_decode();
  check_decode_step();
  check_decode_step_in_place();
  check_qgemv();
  check_qgemv_normed();
  check_rms_block();
  check_range();
  check_gather_bq<float>("gather block quantized, 4-bit, zero points", 4, true, gather_bq::kernel);
  check_gather_bq<__half>("gather block quantized, 2-bit, float16", 2, false, gather_bq_2bit::kernel);
  std::printf("%d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
