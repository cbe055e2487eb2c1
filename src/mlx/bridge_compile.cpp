/* Compiled programs: a C trace callback wrapped as the std::function MLX's compile() expects.
 * MLX traces on the first call per input signature and thread (its compile cache is
 * thread-local); later calls replay the simplified, fused graph. */
#include "mlx/bridge_internal.h"

#include <functional>

using namespace mlxb_detail;

struct mlxb_program {
  mlxb_device device;
  mlxb_trace_fn trace;
  void *user;
  int n_outputs;
  std::function<std::vector<mx::array>(const std::vector<mx::array> &)> fn;
};

namespace {

std::vector<mx::array> run_trace(mlxb_program *p, const std::vector<mx::array> &inputs) {
  mlxb_scope tmp(p->device == MLXB_DEVICE_GPU ? mx::Device(mx::Device::gpu) : mx::Device(mx::Device::cpu));
  std::vector<mlxb_array *> in;
  in.reserve(inputs.size());
  for (const auto &a : inputs) in.push_back(scope_keep(&tmp, a));
  std::vector<mlxb_array *> out(static_cast<size_t>(p->n_outputs), nullptr);
  int rc = p->trace(p->user, &tmp, in.data(), static_cast<int>(in.size()), out.data(), p->n_outputs);
  if (rc || !tmp.error.empty()) throw bridge_error(tmp.error.empty() ? "trace failed" : tmp.error);
  std::vector<mx::array> result;
  result.reserve(out.size());
  for (auto *o : out) {
    if (!o) throw bridge_error("trace produced no array for an output");
    result.push_back(arr(o));
  }
  return result;
}

} // namespace

extern "C" {

mlxb_program *mlxb_compile(mlxb_device dev, mlxb_trace_fn trace, void *user, int n_outputs, bool shapeless,
                           char *err, size_t err_len) {
  try {
    auto *p = new mlxb_program{dev, trace, user, n_outputs, {}};
    p->fn = mx::compile([p](const std::vector<mx::array> &inputs) { return run_trace(p, inputs); }, shapeless);
    return p;
  } catch (const std::exception &e) {
    if (err && err_len) snprintf(err, err_len, "mlxb_compile: %s", e.what());
  } catch (...) {
    if (err && err_len) snprintf(err, err_len, "mlxb_compile: unknown exception");
  }
  return nullptr;
}

int mlxb_program_call(mlxb_scope *s, mlxb_program *p, mlxb_array *const *inputs, int n_inputs, mlxb_array **outputs,
                      int n_outputs) {
  return guard_status(s, "mlxb_program_call", [&] {
    if (!p) throw bridge_error("null program");
    std::vector<mx::array> in = to_arrays(const_cast<const mlxb_array *const *>(inputs), n_inputs);
    std::vector<mx::array> out = p->fn(in);
    if (static_cast<int>(out.size()) != n_outputs) throw bridge_error("program returned a different output count");
    for (int i = 0; i < n_outputs; i++) outputs[i] = scope_keep(s, out[static_cast<size_t>(i)]);
  });
}

void mlxb_program_free(mlxb_program *p) {
  try {
    delete p;
  } catch (...) {
  }
}

} // extern "C"
