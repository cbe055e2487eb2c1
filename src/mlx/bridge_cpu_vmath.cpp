/* float32 exp, sigmoid, erf and tanh over arrays, eight lanes at a time (AVX2 and FMA), for our CPU
 * primitives (the unary operations of bridge_cpu_unary.cpp, the gates of bridge_cpu_rnn.cpp).
 *
 * Why: MLX's CPU kernels compute these one lane at a time on x86, with libm's tanhf (about 25 ns a
 * value: a third of an LSTM's time) and fmaf calls. Exp, sigmoid and erf here are MLX's own
 * arithmetic (mlx/backend/cpu/simd/math.h and unary_ops.h: the same operations in the same order,
 * each rounded as there), so each result is the one MLX's kernel gives, bit for bit
 * (tests/test_cpu_unary.py); exp is widened past |x| = 88 as bridge_cpu_unary.cpp says. MLX's tanh
 * is libm's; ours is within 2 ulp of the true value everywhere (tools/check_vmath.cpp checks every
 * float32): an odd polynomial below |x| = 0.5625, 1 - 2 / (exp(2|x|) + 1) above.
 *
 * This file is compiled with -ffp-contract=off (CMakeLists.txt): a product and a sum written apart
 * must stay two roundings, as in MLX's kernels. */
#include "mlx/bridge_internal.h"

#include <cmath>

#if defined(__x86_64__) && !defined(__APPLE__)
#include <immintrin.h>
#endif

namespace mlxb_detail {

#if defined(__x86_64__) && !defined(__APPLE__)

namespace {

#define VMATH_TARGET __attribute__((target("avx2,fma")))

/* MLX's exp for |x| <= 88: 2^round(x log2 e) times a polynomial of the rest. MLX rounds with
 * floor(x + 0.5) in double, where the sum is exact; floor(x) + (x - floor(x) >= 0.5) is the same
 * integer without the double. Its caller picks the values past +-88 and NaN. */
VMATH_TARGET inline __m256 exp_core(__m256 x_init) {
  const __m256 x = _mm256_mul_ps(x_init, _mm256_set1_ps(1.442695f));
  const __m256 fl = _mm256_floor_ps(x);
  const __m256 up = _mm256_and_ps(_mm256_cmp_ps(_mm256_sub_ps(x, fl), _mm256_set1_ps(0.5f), _CMP_GE_OQ),
                                  _mm256_set1_ps(1.0f));
  const __m256 ipart = _mm256_add_ps(fl, up);
  const __m256 fpart = _mm256_sub_ps(x, ipart);
  __m256 p = _mm256_set1_ps(1.535336188319500e-4f);
  p = _mm256_fmadd_ps(p, fpart, _mm256_set1_ps(1.339887440266574e-3f));
  p = _mm256_fmadd_ps(p, fpart, _mm256_set1_ps(9.618437357674640e-3f));
  p = _mm256_fmadd_ps(p, fpart, _mm256_set1_ps(5.550332471162809e-2f));
  p = _mm256_fmadd_ps(p, fpart, _mm256_set1_ps(2.402264791363012e-1f));
  p = _mm256_fmadd_ps(p, fpart, _mm256_set1_ps(6.931472028550421e-1f));
  p = _mm256_fmadd_ps(p, fpart, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(ipart), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(_mm256_castsi256_ps(e), p);
}

/* MLX's simd::exp: NaN stays, past 88 infinity, below -88 zero. */
VMATH_TARGET inline __m256 exp_mlx(__m256 x) {
  __m256 r = _mm256_blendv_ps(exp_core(x), x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  r = _mm256_blendv_ps(r, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, _mm256_set1_ps(88.0f), _CMP_GT_OQ));
  return _mm256_blendv_ps(r, _mm256_setzero_ps(), _mm256_cmp_ps(x, _mm256_set1_ps(-88.0f), _CMP_LT_OQ));
}

VMATH_TARGET inline __m256 abs_ps(__m256 x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x); }

/* bridge_cpu_unary.cpp's ExpWide: MLX's exp, and past |x| = 88 MLX's exp(x / 2) squared. */
VMATH_TARGET inline __m256 exp_wide(__m256 x) {
  const __m256 half = exp_mlx(_mm256_mul_ps(x, _mm256_set1_ps(0.5f)));
  const __m256 wide = _mm256_cmp_ps(abs_ps(x), _mm256_set1_ps(88.0f), _CMP_GT_OQ);
  return _mm256_blendv_ps(exp_mlx(x), _mm256_mul_ps(half, half), wide);
}

/* MLX's detail::Sigmoid: y = 1 / (1 + exp(|x|)); y below zero, 1 - y from zero on. */
VMATH_TARGET inline __m256 sigmoid_mlx(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 y = _mm256_div_ps(one, _mm256_add_ps(one, exp_mlx(abs_ps(x))));
  return _mm256_blendv_ps(_mm256_sub_ps(one, y), y, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ));
}

/* MLX's simd::erf (Abramowitz and Stegun 7.1.26), negated below zero and at zero or NaN. */
VMATH_TARGET inline __m256 erf_mlx(__m256 v) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 t = _mm256_div_ps(one, _mm256_fmadd_ps(_mm256_set1_ps(0.3275911f), abs_ps(v), one));
  __m256 r = _mm256_fmadd_ps(_mm256_set1_ps(1.061405429f), t, _mm256_set1_ps(-1.453152027f));
  r = _mm256_fmadd_ps(r, t, _mm256_set1_ps(1.421413741f));
  r = _mm256_fmadd_ps(r, t, _mm256_set1_ps(-0.284496736f));
  r = _mm256_fmadd_ps(r, t, _mm256_set1_ps(0.254829592f));
  const __m256 neg_v = _mm256_xor_ps(v, _mm256_set1_ps(-0.0f));
  const __m256 e = _mm256_xor_ps(exp_mlx(_mm256_mul_ps(neg_v, v)), _mm256_set1_ps(-0.0f));
  const __m256 result = _mm256_fmadd_ps(_mm256_mul_ps(e, t), r, one);
  return _mm256_blendv_ps(_mm256_xor_ps(result, _mm256_set1_ps(-0.0f)), result,
                          _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GT_OQ));
}

/* tanh within 2 ulp: below |x| = 0.5625, x + x^3 q(x^2) with q fitted to tanh's relative error
 * (1.4e-9 in real arithmetic); above, 1 - 2 / (exp(2|x|) + 1) with MLX's exp, where the result is at
 * least 0.5 and the subtraction adds at most half an ulp; the sign copied back. exp(2|x|) is
 * infinite from |x| = 44, where the quotient is 0 and tanh is 1 in float32 (as from |x| = 9.01). */
VMATH_TARGET inline __m256 tanh_vec(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_and_ps(x, _mm256_set1_ps(-0.0f));
  const __m256 ax = abs_ps(x);
  const __m256 u = _mm256_mul_ps(x, x);
  __m256 q = _mm256_set1_ps(-0.006179806f);
  q = _mm256_fmadd_ps(q, u, _mm256_set1_ps(0.021007456f));
  q = _mm256_fmadd_ps(q, u, _mm256_set1_ps(-0.05383743f));
  q = _mm256_fmadd_ps(q, u, _mm256_set1_ps(0.13332452f));
  q = _mm256_fmadd_ps(q, u, _mm256_set1_ps(-0.33333313f));
  const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(ax, u), q, ax); /* from |x|: tanh(-0) is -0 */
  const __m256 e = exp_mlx(_mm256_add_ps(ax, ax));
  const __m256 large = _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
  const __m256 is_small = _mm256_cmp_ps(ax, _mm256_set1_ps(0.5625f), _CMP_LT_OQ);
  /* NaN: not small, and exp keeps it through the quotient */
  return _mm256_or_ps(_mm256_blendv_ps(large, small, is_small), sign);
}

/* (0.5 * x) * (1 + erf(x * float(sqrt(1/2)))), each product and sum rounded apart: Gelu's composed
 * MLX operations (src/ops/activation.c, contrib_act.c), bit for bit, in one pass. */
VMATH_TARGET inline __m256 gelu_erf_mlx(__m256 x) {
  const __m256 e = erf_mlx(_mm256_mul_ps(x, _mm256_set1_ps(0.70710678118654752440f)));
  return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

template <__m256 (*Op)(__m256)>
VMATH_TARGET void apply(const float *in, float *out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, Op(_mm256_loadu_ps(in + i)));
  if (i == n) return;
  float tail[8] = {0};
  for (size_t j = i; j < n; j++) tail[j - i] = in[j];
  _mm256_storeu_ps(tail, Op(_mm256_loadu_ps(tail)));
  for (size_t j = i; j < n; j++) out[j] = tail[j - i];
}

} // namespace

/* MLX's CPU softmax over rows of m (mlx/backend/cpu/softmax.cpp with one lane, as on x86): the
 * maximum (NaN if any is NaN), e = exp(x - max) with MLX's exp, their sum added in order, then each e
 * times 1 / sum. Only the maximum and the exponentials take eight lanes; the sum keeps MLX's order,
 * so every output is MLX's, bit for bit. The exponentials go to out first. */
VMATH_TARGET void cpu_softmax_rows(const float *in, float *out, int64_t rows, int64_t m) {
  for (int64_t r = 0; r < rows; r++, in += m, out += m) {
    __m256 vmax = _mm256_set1_ps(-INFINITY), vnan = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= m; i += 8) {
      const __m256 x = _mm256_loadu_ps(in + i);
      vnan = _mm256_or_ps(vnan, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
      vmax = _mm256_max_ps(vmax, x);
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, vmax);
    float maximum = -INFINITY;
    bool nan = _mm256_movemask_ps(vnan) != 0;
    for (float v : lanes) maximum = v > maximum ? v : maximum;
    for (; i < m; i++) {
      nan = nan || std::isnan(in[i]);
      maximum = in[i] > maximum ? in[i] : maximum;
    }
    if (nan) maximum = NAN;
    const __m256 vm = _mm256_set1_ps(maximum);
    for (i = 0; i + 8 <= m; i += 8) _mm256_storeu_ps(out + i, exp_mlx(_mm256_sub_ps(_mm256_loadu_ps(in + i), vm)));
    if (i < m) {
      float tail[8] = {0};
      for (int64_t j = i; j < m; j++) tail[j - i] = in[j] - maximum;
      _mm256_storeu_ps(tail, exp_mlx(_mm256_loadu_ps(tail)));
      for (int64_t j = i; j < m; j++) out[j] = tail[j - i];
    }
    float normalizer = 0.0f;
    for (i = 0; i < m; i++) normalizer += out[i];
    normalizer = 1 / normalizer;
    const __m256 vn = _mm256_set1_ps(normalizer);
    for (i = 0; i + 8 <= m; i += 8) _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_loadu_ps(out + i), vn));
    for (; i < m; i++) out[i] *= normalizer;
  }
}

bool cpu_vmath_available() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
}

bool cpu_avx512_available() {
  static const bool ok = __builtin_cpu_supports("avx512f") && env_switch_on("ORT_EP_MLX_CPU_AVX512");
  return ok;
}

void cpu_vmath(mlxb_unary_op op, const float *in, float *out, size_t n) {
  switch (op) {
    case MLXB_EXP: return apply<exp_wide>(in, out, n);
    case MLXB_SIGMOID: return apply<sigmoid_mlx>(in, out, n);
    case MLXB_ERF: return apply<erf_mlx>(in, out, n);
    case MLXB_TANH: return apply<tanh_vec>(in, out, n);
    case MLXB_GELU_ERF: return apply<gelu_erf_mlx>(in, out, n);
    default: /* never asked: cpu_vmath_has */
      for (size_t i = 0; i < n; i++) out[i] = NAN;
  }
}

#else

void cpu_softmax_rows(const float *, float *out, int64_t rows, int64_t m) {
  for (int64_t i = 0; i < rows * m; i++) out[i] = NAN;
}
bool cpu_vmath_available() { return false; }
bool cpu_avx512_available() { return false; }
void cpu_vmath(mlxb_unary_op, const float *, float *out, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = NAN;
}

#endif

bool cpu_vmath_has(mlxb_unary_op op) {
  return op == MLXB_EXP || op == MLXB_SIGMOID || op == MLXB_ERF || op == MLXB_TANH || op == MLXB_GELU_ERF;
}

} // namespace mlxb_detail
