/* What every CPU primitive of ours does before it enqueues its task on MLX's CPU stream
 * (bridge_cpu_*.cpp), and cpu_task: a primitive whose work is a plain function of plain
 * parameters. */
#ifndef EP_MLX_BRIDGE_CPU_TASK_H
#define EP_MLX_BRIDGE_CPU_TASK_H

#include "mlx/bridge_internal.h"

#include "mlx/backend/cpu/encoder.h"
#include "mlx/primitives.h"

#include <cstring>
#include <memory>
#include <string>

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

/* A CPU primitive of ours whose work may also run inside another task (a chain's, bridge_cpu_chain.cpp):
 * run_task is what its own task runs, on outputs already allocated, and never throws (a failure
 * leaves NaN, all ones, in the outputs: a task must never let an exception reach MLX's scheduler). */
class ep_cpu_primitive : public mx::Primitive {
 public:
  using mx::Primitive::Primitive;
  virtual void run_task(const std::vector<mx::array> &ins, std::vector<mx::array> &outs) const = 0;
};

inline void fill_failed_outputs(std::vector<mx::array> &outs) {
  for (auto &out : outs) std::memset(out.data<char>(), 0xff, out.nbytes());
}

/* One CPU primitive of ours: outputs allocated, inputs and outputs held by the task, and fn run on
 * MLX's CPU stream. P holds plain parameters, compared byte for byte (is_equivalent: MLX's compile
 * merges equivalent operations), so it is zero-filled before it is set. */
template <typename P>
class cpu_task : public ep_cpu_primitive {
 public:
  using task_fn = void (*)(const P &, const std::vector<mx::array> &, std::vector<mx::array> &);
  cpu_task(mx::Stream stream, const char *name, const P &p, task_fn fn)
      : ep_cpu_primitive(stream), name_(name), p_(p), fn_(fn) {}

  void eval_cpu(const std::vector<mx::array> &inputs, std::vector<mx::array> &outputs) override {
    cpu_task_arrays held;
    auto &encoder = cpu_task_begin(stream(), inputs, outputs, &held);
    encoder.dispatch([p = p_, fn = fn_, held = std::move(held)]() mutable { run(p, fn, held.ins, held.outs); });
  }

  void run_task(const std::vector<mx::array> &ins, std::vector<mx::array> &outs) const override {
    run(p_, fn_, ins, outs);
  }

  void eval_gpu(const std::vector<mx::array> &, std::vector<mx::array> &) override {
    throw std::runtime_error(std::string(name_) + ": a CPU kernel has no GPU form");
  }

  const char *name() const override { return name_; }
  const P &params() const { return p_; }
  task_fn function() const { return fn_; }

 private:
  static void run(const P &p, task_fn fn, const std::vector<mx::array> &ins, std::vector<mx::array> &outs) {
    try {
      fn(p, ins, outs);
    } catch (...) {
      fill_failed_outputs(outs);
    }
  }

 public:
  bool is_equivalent(const mx::Primitive &other) const override {
    auto *o = dynamic_cast<const cpu_task<P> *>(&other);
    return o && o->fn_ == fn_ && !std::strcmp(o->name_, name_) && !std::memcmp(&o->p_, &p_, sizeof p_);
  }

 private:
  const char *name_;
  P p_;
  task_fn fn_;
};

/* The arrays of one cpu_task on s's CPU stream, its inputs made row-major. */
template <typename P>
inline std::vector<mx::array> make_task(const mlxb_scope *s, const char *name, const P &p, typename cpu_task<P>::task_fn fn,
                                 std::vector<mx::array> inputs, std::vector<mx::Shape> shapes,
                                 std::vector<mx::Dtype> dtypes) {
  auto dev = scope_dev(s);
  for (auto &in : inputs) in = row_major(in, dev);
  return mx::array::make_arrays(std::move(shapes), dtypes, std::make_shared<cpu_task<P>>(mx::to_stream(dev), name, p, fn),
                                std::move(inputs));
}

} // namespace mlxb_detail

#endif
