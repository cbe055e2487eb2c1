/* What every CPU primitive of ours does before it enqueues its task on MLX's CPU stream
 * (bridge_cpu_*.cpp). */
#ifndef EP_MLX_BRIDGE_CPU_TASK_H
#define EP_MLX_BRIDGE_CPU_TASK_H

#include "mlx/bridge_internal.h"

#include "mlx/backend/cpu/encoder.h"

namespace mlxb_detail {

/* The inputs and outputs a task holds: weak copies, as MLX's own CPU ops take them (MLX's eval keeps
 * the buffers until the stream has run the task, and a task must not own, or destroy, the graph). */
struct cpu_task_arrays {
  std::vector<mx::array> ins, outs;
};

/* Allocates the outputs (row-major), registers every array with the stream's command encoder and
 * fills `held`; the caller dispatches its task on the encoder returned. */
inline mx::cpu::CommandEncoder &cpu_task_begin(const mx::Stream &stream, const std::vector<mx::array> &inputs,
                                               std::vector<mx::array> &outputs, cpu_task_arrays *held) {
  for (auto &out : outputs) out.set_data(mx::allocator::malloc(out.nbytes()));
  auto &encoder = mx::cpu::get_command_encoder(stream);
  for (const auto &in : inputs) encoder.set_input_array(in);
  for (auto &out : outputs) encoder.set_output_array(out);
  for (const auto &in : inputs) held->ins.push_back(mx::array::unsafe_weak_copy(in));
  for (const auto &out : outputs) held->outs.push_back(mx::array::unsafe_weak_copy(out));
  return encoder;
}

} // namespace mlxb_detail

#endif
