/* Random functions of the bridge (see bridge.h): MLX's counter-based generator keyed by an ONNX
 * seed, or by MLX's own per-thread key sequence when the model gives no seed. */
#include "mlx/bridge_internal.h"

#include "mlx/random.h"

using namespace mlxb_detail;

namespace {

std::optional<mx::array> random_key(bool has_seed, uint64_t seed) {
  if (!has_seed) return std::nullopt;
  return mx::random::key(seed);
}

/* MLX draws half and single precision itself; other dtypes (float64 included, which MLX's
 * generator lacks) are drawn in float32 and cast. */
mx::Dtype draw_type(mx::Dtype t) {
  if (t == mx::float32 || t == mx::float16 || t == mx::bfloat16) return t;
  return mx::float32;
}

} // namespace

extern "C" {

mlxb_array *mlxb_random_uniform(mlxb_scope *s, const int64_t *dims, int rank, mlxb_dtype t, double low, double high,
                                bool has_seed, uint64_t seed) {
  return guard(s, "mlxb_random_uniform", [&] {
    mx::Dtype out = to_mx(t), dt = draw_type(out);
    auto d = scope_dev(s);
    mx::array u = mx::random::uniform(mx::array(low, dt), mx::array(high, dt), to_shape(dims, rank), dt,
                                      random_key(has_seed, seed), d);
    return dt == out ? u : mx::astype(u, out, d);
  });
}

mlxb_array *mlxb_random_normal(mlxb_scope *s, const int64_t *dims, int rank, mlxb_dtype t, double mean, double scale,
                               bool has_seed, uint64_t seed) {
  return guard(s, "mlxb_random_normal", [&] {
    mx::Dtype out = to_mx(t), dt = draw_type(out);
    auto d = scope_dev(s);
    mx::array n = mx::random::normal(to_shape(dims, rank), dt, mx::array(mean, dt), mx::array(scale, dt),
                                     random_key(has_seed, seed), d);
    return dt == out ? n : mx::astype(n, out, d);
  });
}

mlxb_array *mlxb_random_categorical(mlxb_scope *s, const mlxb_array *logits, int num_samples, bool has_seed,
                                    uint64_t seed) {
  return guard(s, "mlxb_random_categorical", [&] {
    const mx::array &l = arr(logits);
    if (l.ndim() != 2) throw bridge_error("logits must be [batch, classes]");
    if (num_samples < 0) throw bridge_error("negative sample count");
    return mx::random::categorical(l, -1, num_samples, random_key(has_seed, seed), scope_dev(s));
  });
}

bool mlxb_in_trace(void) {
  /* MLX keeps its tracing state private; a tracer-marked array reports itself a tracer only
   * while a transformation (compile, vmap, grad) is tracing. */
  try {
    mx::array probe(0.0f);
    probe.set_tracer(true);
    return probe.is_tracer();
  } catch (...) {
    return false;
  }
}

} // extern "C"
