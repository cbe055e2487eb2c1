/* Untrusted data: the in-graph summary of a validity check (a tiny int64 pair the runtime
 * evaluates together with a Run's outputs) and MLX's memory limit. Index bounding itself lives
 * beside the indexing ops in bridge.cpp. */
#include "mlx/bridge_internal.h"

#include "mlx/memory.h"

using namespace mlxb_detail;

extern "C" {

mlxb_array *mlxb_violation(mlxb_scope *s, const mlxb_array *ok, const mlxb_array *value) {
  return guard(s, "mlxb_violation", [&] {
    mx::StreamOrDevice d = scope_dev(s);
    mx::array good = arr(ok);
    mx::Shape shape = good.shape();
    std::optional<mx::array> v = opt(value);
    if (v) shape = mx::broadcast_shapes(shape, v->shape());
    size_t n = 1;
    for (int dim : shape) n *= static_cast<size_t>(dim);
    if (n == 0) return mx::zeros({2}, mx::int64, d);
    int total = static_cast<int>(n);
    mx::array bad = mx::reshape(mx::broadcast_to(mx::logical_not(mx::astype(good, mx::bool_, d), d), shape, d), {total}, d);
    mx::array flag = mx::astype(mx::any(bad, false, d), mx::int64, d);
    mx::array what = mx::array(0, mx::int64);
    if (v) {
      mx::array vals = mx::reshape(mx::broadcast_to(mx::astype(*v, mx::int64, d), shape, d), {total}, d);
      what = mx::take(vals, mx::argmax(mx::astype(bad, mx::uint8, d), d), d);
    }
    return mx::stack({mx::reshape(flag, {}, d), mx::reshape(what, {}, d)}, d);
  });
}

size_t mlxb_memory_limit(void) {
  try {
    return mx::get_memory_limit();
  } catch (...) {
    return 0;
  }
}

int mlxb_set_memory_limit(size_t bytes) {
  try {
    mx::set_memory_limit(bytes);
    return 0;
  } catch (...) {
    return -1;
  }
}

} // extern "C"
