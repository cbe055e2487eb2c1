/* Every float32 through src/mlx/bridge_cpu_vmath.cpp's functions: exp, sigmoid and erf against MLX's
 * own templates run one lane at a time (as bridge_cpu_unary.cpp ran them before: bit for bit
 * expected), tanh against the float64 tanh (at most 2 ulp expected). A tool, not part of the
 * library or the test suite (2^32 values take about a minute on 2 cores); tests/test_cpu_unary.py
 * checks a sample of the same on every run.
 *
 *   make check-vmath
 *
 * Prints the mismatches (the first few) and the largest tanh error; exits 1 on a failure. */
#include "mlx/bridge_internal.h"

#include "mlx/backend/cpu/unary_ops.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

using namespace mlxb_detail;

namespace {

template <typename Op>
__attribute__((target("avx2,fma"), flatten)) float scalar(float x) {
  return Op{}(mx::simd::Simd<float, 1>(x)).value;
}

/* bridge_cpu_unary.cpp's ExpWide, one lane */
__attribute__((target("avx2,fma"), flatten)) float exp_wide(float x) {
  if (!(x > 88.0f || x < -88.0f)) return scalar<mx::detail::Exp>(x);
  float half = scalar<mx::detail::Exp>(0.5f * x);
  return half * half;
}

bool same_bits(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  uint32_t ua, ub;
  std::memcpy(&ua, &a, 4);
  std::memcpy(&ub, &b, 4);
  return ua == ub;
}

/* |got - want| in float32 ulps of want: 2^(e - 24) for want in [2^(e-1), 2^e), at least 2^-149 */
double ulps(float got, double want) {
  if (std::isnan(want)) return std::isnan(got) ? 0.0 : INFINITY;
  int e = 0;
  std::frexp(want, &e);
  double ulp = std::ldexp(1.0, std::max(e - 24, -149));
  return std::fabs((double)got - want) / ulp;
}

struct result {
  uint64_t mismatches[3] = {0, 0, 0};
  double tanh_max_ulp = 0.0;
  float tanh_worst = 0.0f;
  bool tanh_zero_sign_wrong = false;
};

void check_range(uint64_t lo, uint64_t hi, result *r) {
  enum { CHUNK = 1 << 16 };
  std::vector<float> in(CHUNK), out(CHUNK);
  const mlxb_unary_op ops[3] = {MLXB_EXP, MLXB_SIGMOID, MLXB_ERF};
  for (uint64_t base = lo; base < hi; base += CHUNK) {
    for (uint64_t i = 0; i < CHUNK; i++) {
      uint32_t bits = (uint32_t)(base + i);
      std::memcpy(&in[i], &bits, 4);
    }
    for (int k = 0; k < 3; k++) {
      cpu_vmath(ops[k], in.data(), out.data(), CHUNK);
      for (uint64_t i = 0; i < CHUNK; i++) {
        float x = in[i];
        float want = k == 0 ? exp_wide(x) : k == 1 ? scalar<mx::detail::Sigmoid>(x) : scalar<mx::detail::Erf>(x);
        if (same_bits(out[i], want)) continue;
        if (r->mismatches[k]++ < 3)
          std::printf("op %d: x=%a got %a want %a\n", (int)ops[k], (double)x, (double)out[i], (double)want);
      }
    }
    cpu_vmath(MLXB_TANH, in.data(), out.data(), CHUNK);
    for (uint64_t i = 0; i < CHUNK; i++) {
      double e = ulps(out[i], std::tanh((double)in[i]));
      if (in[i] == 0.0f && std::signbit(out[i]) != std::signbit(in[i])) r->tanh_zero_sign_wrong = true;
      if (e > r->tanh_max_ulp) r->tanh_max_ulp = e, r->tanh_worst = in[i];
    }
  }
}

} // namespace

int main() {
  if (!cpu_vmath_available()) {
    std::printf("no AVX2 and FMA here: nothing to check\n");
    return 0;
  }
  unsigned n = std::max(1u, std::thread::hardware_concurrency());
  std::vector<result> results(n);
  std::vector<std::thread> threads;
  const uint64_t total = 1ull << 32, part = total / n;
  for (unsigned t = 0; t < n; t++)
    threads.emplace_back(check_range, t * part, t + 1 == n ? total : (t + 1) * part, &results[t]);
  for (auto &t : threads) t.join();
  result all;
  for (auto &r : results) {
    for (int k = 0; k < 3; k++) all.mismatches[k] += r.mismatches[k];
    if (r.tanh_max_ulp > all.tanh_max_ulp) all.tanh_max_ulp = r.tanh_max_ulp, all.tanh_worst = r.tanh_worst;
    all.tanh_zero_sign_wrong |= r.tanh_zero_sign_wrong;
  }
  std::printf("every float32: exp %llu, sigmoid %llu, erf %llu values differ from MLX's; tanh at most %.3f ulp (x=%a)%s\n",
              (unsigned long long)all.mismatches[0], (unsigned long long)all.mismatches[1],
              (unsigned long long)all.mismatches[2], all.tanh_max_ulp, (double)all.tanh_worst,
              all.tanh_zero_sign_wrong ? "; tanh(-0) lost its sign" : "");
  bool ok = !all.mismatches[0] && !all.mismatches[1] && !all.mismatches[2] && all.tanh_max_ulp <= 2.0 &&
            !all.tanh_zero_sign_wrong;
  return ok ? 0 : 1;
}
