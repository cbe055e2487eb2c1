/* Untrusted data: the in-graph summary of a validity check (a tiny int64 pair the runtime
 * evaluates together with a Run's outputs), the range check most of them are, and MLX's memory
 * limit. Index bounding itself lives beside the indexing ops in bridge.cpp. */
#include "mlx/bridge_internal.h"
#include "mlx/bridge_kernel_specs.h"

#include "mlx/memory.h"

using namespace mlxb_detail;

namespace {

/* mlxb_violation's summary: good (bool) broadcast with value (when there is one) */
mx::array violation_of(const mx::array &good, const std::optional<mx::array> &value, mx::StreamOrDevice d) {
  mx::Shape shape = good.shape();
  if (value) shape = mx::broadcast_shapes(shape, value->shape());
  size_t n = 1;
  for (int dim : shape) n *= static_cast<size_t>(dim);
  if (n == 0) return mx::zeros({2}, mx::int64, d);
  int total = static_cast<int>(n);
  mx::array bad = mx::reshape(mx::broadcast_to(mx::logical_not(mx::astype(good, mx::bool_, d), d), shape, d), {total}, d);
  mx::array flag = mx::astype(mx::any(bad, false, d), mx::int64, d);
  mx::array what = mx::array(0, mx::int64);
  if (value) {
    mx::array vals = mx::reshape(mx::broadcast_to(mx::astype(*value, mx::int64, d), shape, d), {total}, d);
    what = mx::take(vals, mx::argmax(mx::astype(bad, mx::uint8, d), d), d);
  }
  return mx::stack({mx::reshape(flag, {}, d), mx::reshape(what, {}, d)}, d);
}

/* The range check as one kernel of ours (MLX's CUDA backend; ORT_EP_MLX_RANGE_KERNEL=0: never):
 * integers up to 2^20 of them, 4096 a thread of its one block at most; more go to MLX's operations,
 * which spread over the whole GPU. */
bool range_kernel_fits(const mlxb_scope *s, const mx::array &x) {
  static const bool on = env_switch_on("ORT_EP_MLX_RANGE_KERNEL");
  return on && is_cuda_gpu(s) && mx::issubdtype(x.dtype(), mx::integer) && x.size() <= (size_t{1} << 20);
}

} // namespace

extern "C" {

mlxb_array *mlxb_violation(mlxb_scope *s, const mlxb_array *ok, const mlxb_array *value) {
  return guard(s, "mlxb_violation", [&] { return violation_of(arr(ok), opt(value), scope_dev(s)); });
}

mlxb_array *mlxb_range_violation(mlxb_scope *s, const mlxb_array *x, int64_t lo, int64_t hi, bool check_lo,
                                 bool check_hi) {
  return guard(s, "mlxb_range_violation", [&] {
    mx::StreamOrDevice d = scope_dev(s);
    const mx::array &xa = arr(x);
    if (xa.size() == 0 || (!check_lo && !check_hi)) return mx::zeros({2}, mx::int64, d);
    if (range_kernel_fits(s, xa)) {
      mx::array flat = mx::reshape(xa, {static_cast<int>(xa.size())}, d);
      return run_cuda_kernel(range_check_kernel, {flat, mx::array({lo, hi}, {2}, mx::int64)}, {{2}}, {mx::int64},
                             {256, 1, 1}, {256, 1, 1},
                             {{"T", xa.dtype()}, {"SIGNED", mx::issubdtype(xa.dtype(), mx::signedinteger)},
                              {"CHECK_LO", check_lo}, {"CHECK_HI", check_hi}},
                             s)
          .at(0);
    }
    /* the bounds in x's own dtype: an unsigned x compares as unsigned (callers pass only bounds the
     * dtype holds) */
    std::optional<mx::array> good;
    if (check_lo) good = mx::greater_equal(xa, mx::astype(mx::array(lo), xa.dtype(), d), d);
    if (check_hi) {
      mx::array below = mx::less(xa, mx::astype(mx::array(hi), xa.dtype(), d), d);
      good = good ? mx::logical_and(*good, below, d) : below;
    }
    return violation_of(*good, xa, d);
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
