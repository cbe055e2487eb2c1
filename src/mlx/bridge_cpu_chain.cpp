/* Chains of our CPU tasks: after a CPU program is traced, runs of our CPU primitives
 * (ep_cpu_primitive: the GEMV sets, the norms, the KV append and decode attention, the packed
 * products...) become one MLX operation each, whose one task runs their work in the trace's order.
 *
 * Why: MLX's CPU backend hands every operation to its stream's thread as a task of its own, and a
 * compiled program's replay makes each operation's arrays again on every Run: a few microseconds an
 * operation in MLX's machinery (the replay, the eval's walk, the task handoff, the buffers) on top
 * of its work. A decode step of the mid-acc4 decoder was 138 operations; its 67 tasks of ours now
 * run in 3 chains, and the mid decoder's 64-step loop took 117-129 ms instead of 172-188 (2-core
 * EPYC, 2026-12-06). The grouping is the GPU's kernel chains' (chain_operations,
 * bridge_launch.cpp): buffers the steps pass only among themselves are allocated when the chain
 * runs and released when its task is done. */
#include "mlx/bridge_cpu_task.h"

namespace mlxb_detail {

namespace {

class ep_cpu_chain : public mx::Primitive, public chain_members {
 public:
  ep_cpu_chain(mx::Stream stream, chain_plan &&plan)
      : mx::Primitive(stream), plan_(std::make_shared<const chain_plan>(std::move(plan))) {}

  void eval_cpu(const std::vector<mx::array> &inputs, std::vector<mx::array> &outputs) override {
    /* every buffer first (an allocation failure is this eval's exception), then one task */
    auto internal = std::make_shared<std::vector<mx::array>>();
    internal->reserve(static_cast<size_t>(plan_->n_internal));
    for (const chain_slot &sl : plan_->slots) {
      if (sl.output < 0) internal->push_back(mx::array(mx::allocator::malloc(sl.bytes()), sl.shape, sl.dtype));
    }
    cpu_task_arrays held;
    auto &encoder = cpu_task_begin(stream(), inputs, outputs, &held);
    encoder.dispatch([plan = plan_, held = std::move(held), internal]() mutable { run(*plan, held, *internal); });
  }

  void eval_gpu(const std::vector<mx::array> &, std::vector<mx::array> &) override {
    throw std::runtime_error("a chain of CPU tasks has no GPU form");
  }

  const char *name() const override { return "EpCpuChain"; }

  std::vector<const char *> member_names() const override {
    std::vector<const char *> names;
    for (const chain_step &st : plan_->steps) names.push_back(st.prim->name());
    return names;
  }

 private:
  /* each step's work with its arrays: the chain's inputs, its outputs and the internal buffers in
   * slot order */
  static void run(const chain_plan &plan, const cpu_task_arrays &held, const std::vector<mx::array> &internal) {
    std::vector<const mx::array *> slot_arrays(plan.slots.size());
    size_t next_internal = 0;
    for (size_t i = 0; i < plan.slots.size(); i++) {
      const chain_slot &sl = plan.slots[i];
      slot_arrays[i] = sl.output >= 0 ? &held.outs[static_cast<size_t>(sl.output)] : &internal[next_internal++];
    }
    std::vector<mx::array> ins, outs;
    for (const chain_step &st : plan.steps) {
      ins.clear(), outs.clear();
      for (int i : st.inputs)
        ins.push_back(i >= 0 ? plan.constants.input(held.ins, i) : *slot_arrays[static_cast<size_t>(~i)]);
      for (int o : st.outputs) outs.push_back(*slot_arrays[static_cast<size_t>(o)]);
      static_cast<const ep_cpu_primitive &>(*st.prim).run_task(ins, outs);
    }
  }

  std::shared_ptr<const chain_plan> plan_; /* shared with the tasks in flight */
};

bool is_cpu_task(const mx::Primitive &p) {
  return dynamic_cast<const ep_cpu_primitive *>(&p) != nullptr;
}

std::shared_ptr<mx::Primitive> make_cpu_chain(mx::Stream stream, chain_plan &&plan) {
  return std::make_shared<ep_cpu_chain>(stream, std::move(plan));
}

/* ORT_EP_MLX_CPU_CHAINS (on): chain_cpu_tasks rewrites traced CPU programs. */
bool cpu_chains_enabled() {
  static const bool on = env_switch_on("ORT_EP_MLX_CPU_CHAINS");
  return on;
}

} // namespace

std::vector<mx::array> chain_cpu_tasks(const std::vector<mx::array> &outputs) {
  if (!cpu_chains_enabled()) return outputs;
  try {
    return chain_operations(outputs, is_cpu_task, make_cpu_chain, "CPU task");
  } catch (const std::exception &) { /* the trace as it was: one operation per task */
    return outputs;
  }
}

} // namespace mlxb_detail
