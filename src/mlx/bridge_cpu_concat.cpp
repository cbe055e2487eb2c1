/* Concatenation on MLX's CPU stream as one operation of our own (EpCpuConcat).
 *
 * Why: MLX's CPU Concatenate copies each part into a strided slice of the output with its general
 * copy, one element at a time on the stream thread. In a CNN whose convolutions hand over
 * channels-last outputs (squeezenet's fire modules), every Concat joins the channels of each
 * position: the parts' rows are contiguous runs of bytes, so here each output row is the parts'
 * runs one after the other (memcpy), the rows shared with the pool's helpers when the output is
 * large. Bytes are copied as they are, so every dtype gives exactly MLX's result. */
#include "mlx/bridge_cpu_task.h"

#include <cstring>
#include <limits>

namespace mlxb_detail {

namespace {

struct concat_params {
  int64_t outer; /* the product of the dimensions before the axis: rows of every part and the output */
};

/* Below this many output bytes MLX's copy is as quick and the helpers are not woken. */
enum : int64_t { CONCAT_SHARE_BYTES = 1 << 16, CONCAT_MIN_BYTES = 1 << 14 };

void concat_task(const concat_params &p, const std::vector<mx::array> &ins, std::vector<mx::array> &outs) {
  char *y = outs[0].data<char>();
  if (p.outer <= 0 || outs[0].nbytes() == 0) return;
  const size_t row = outs[0].nbytes() / static_cast<size_t>(p.outer);
  std::vector<const char *> src(ins.size());
  std::vector<size_t> run(ins.size());
  for (size_t i = 0; i < ins.size(); i++) {
    run[i] = ins[i].nbytes() / static_cast<size_t>(p.outer);
    src[i] = run[i] ? ins[i].data<char>() : nullptr;
  }
  auto rows = [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; r++) {
      char *out = y + static_cast<size_t>(r) * row;
      for (size_t i = 0; i < ins.size(); i++) {
        if (!run[i]) continue;
        std::memcpy(out, src[i] + static_cast<size_t>(r) * run[i], run[i]);
        out += run[i];
      }
    }
  };
  cpu_parallel_rows(p.outer, static_cast<int64_t>(outs[0].nbytes()) >= CONCAT_SHARE_BYTES, rows);
}

} // namespace

/* The task where it applies (a CPU scope, two or more parts of one dtype and rank whose other
 * dimensions agree, an output of at least CONCAT_MIN_BYTES); else MLX's concatenate, which also
 * answers every malformed case with its own error. */
mx::array cpu_concatenate(const mlxb_scope *s, const std::vector<mx::array> &parts, int axis) {
  static const bool on = env_switch_on("ORT_EP_MLX_CPU_CONCAT");
  auto fallback = [&] { return mx::concatenate(parts, axis, scope_dev(s)); };
  if (!on || !is_cpu_scope(s) || parts.size() < 2) return fallback();
  const int rank = parts[0].ndim();
  if (rank == 0 || axis < -rank || axis >= rank) return fallback();
  if (axis < 0) axis += rank;
  mx::Shape shape = parts[0].shape();
  int64_t along = 0;
  for (const auto &part : parts) {
    if (part.dtype() != parts[0].dtype() || static_cast<int>(part.ndim()) != rank) return fallback();
    for (int d = 0; d < rank; d++)
      if (d != axis && part.shape(d) != shape[d]) return fallback();
    along += part.shape(axis);
  }
  if (along > std::numeric_limits<int>::max()) return fallback();
  shape[axis] = static_cast<int>(along);
  int64_t outer = 1, total = static_cast<int64_t>(parts[0].itemsize()) * along;
  for (int d = 0; d < rank; d++) {
    if (d < axis) outer *= shape[d];
    if (d != axis) total *= shape[d];
  }
  if (total < CONCAT_MIN_BYTES) return fallback();
  concat_params p;
  std::memset(&p, 0, sizeof p);
  p.outer = outer;
  cpu_pool_start();
  return make_task(s, "EpCpuConcat", p, concat_task, parts, {shape}, {parts[0].dtype()}).at(0);
}

} // namespace mlxb_detail
