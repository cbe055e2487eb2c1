/* Linear-algebra functions of the bridge (see bridge.h). MLX's factorizations have CPU kernels
 * only, so they run on the CPU whatever the scope's device. */
#include "mlx/bridge_internal.h"

#include "mlx/linalg.h"

using namespace mlxb_detail;

extern "C" {

int mlxb_lu_factor(mlxb_scope *s, const mlxb_array *a, mlxb_array **lu, mlxb_array **pivots) {
  if (lu) *lu = nullptr;
  if (pivots) *pivots = nullptr;
  return guard_status(s, "mlxb_lu_factor", [&] {
    if (!lu || !pivots) throw bridge_error("null output");
    auto r = mx::linalg::lu_factor(arr(a), mx::Device(mx::Device::cpu));
    *lu = scope_keep(s, std::move(r.first));
    *pivots = scope_keep(s, std::move(r.second));
  });
}

} // extern "C"
