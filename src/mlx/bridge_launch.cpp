/* Our precompiled CUDA kernels launched by a primitive of our own, not MLX's CustomKernel.
 *
 * Why: MLX 0.32's CustomKernel::eval_gpu hashes its whole source at every launch to name the
 * module it looks up, and for a precompiled kernel that source is the cubin (10-30 KB). A decode
 * step launches ~290 of our kernels, so the H200 profile of a step (tools/sampler, 2026-12-04)
 * showed 8% of its wall time in std::_Hash_bytes under CustomKernel::eval_gpu, besides the
 * module lookup, a formatted name and a std::function per launch. Here each kernel variant's
 * CUfunction is loaded once, when the graph is built, and a launch is what CustomKernel does
 * after its lookup: outputs allocated, inputs and outputs declared to MLX's command encoder (its
 * dependency tracking), one kernel node with the same arguments (input pointers, output pointers,
 * then the int scalars).
 *
 * The encoder's methods are MLX's exported C++ symbols, found with dlsym, so the same library
 * builds without CUDA headers and loads on CPU-only MLX, where this path stays off. Anything
 * missing (a symbol, the driver, the buffer record layout we read device addresses from) leaves
 * the kernels on MLX's CustomKernel, as before; ORT_EP_MLX_DIRECT_LAUNCH=0 does the same. */
#include "mlx/bridge_internal.h"

#include <dlfcn.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

namespace mlxb_detail {

namespace {

bool log_chains();

/* CUDA's dim3 as the Itanium ABI passes it (three unsigned ints, trivially copyable). */
struct dim3_abi {
  unsigned x, y, z;
};

using encoder_for_fn = void *(*)(mx::Stream);
using declare_array_fn = void (*)(void *, const mx::array &);
using add_kernel_fn = void (*)(void *, void *, dim3_abi, dim3_abi, dim3_abi, unsigned, void **);
using module_load_fn = int (*)(void **, const void *);
using module_function_fn = int (*)(void **, void *, const char *);
using primary_retain_fn = int (*)(void **, int);
using device_get_fn = int (*)(int *, int);
using ctx_push_fn = int (*)(void *);
using ctx_pop_fn = int (*)(void **);
using completed_fn = void (*)(void *, std::function<void()>);
using graph_create_fn = int (*)(void **, unsigned);
using graph_add_kernel_fn = int (*)(void **, void *, void *const *, size_t, const void *);
using graph_instantiate_fn = int (*)(void **, void *, unsigned long long);
using graph_destroy_fn = int (*)(void *);
using graph_set_params_fn = int (*)(void *, void *, const void *);
using graph_launch_fn = int (*)(void *, void *);
using stream_ctx_fn = int (*)(void *, void **);

struct launch_api {
  encoder_for_fn encoder_for = nullptr;
  declare_array_fn set_input = nullptr, set_output = nullptr;
  add_kernel_fn add_kernel = nullptr;
  module_load_fn module_load = nullptr;
  module_function_fn module_function = nullptr;
  primary_retain_fn primary_retain = nullptr;
  device_get_fn device_get = nullptr;
  ctx_push_fn ctx_push = nullptr;
  ctx_pop_fn ctx_pop = nullptr;
  completed_fn add_completed = nullptr; /* kernel chains only (their internal buffers' lifetime) */
  /* a chain launched as one CUDA graph (chain_graph_ready) */
  graph_create_fn graph_create = nullptr;
  graph_add_kernel_fn graph_add_kernel = nullptr;
  graph_instantiate_fn graph_instantiate = nullptr;
  graph_destroy_fn graph_destroy = nullptr, graph_exec_destroy = nullptr;
  graph_set_params_fn graph_set_params = nullptr;
  graph_launch_fn graph_launch = nullptr;
  stream_ctx_fn stream_ctx = nullptr;
  bool graphs = false;
  bool ready = false;
};

template <class F>
bool bind(void *lib, const char *name, F &out) {
  out = reinterpret_cast<F>(dlsym(lib, name));
  return out != nullptr;
}

const launch_api &api() {
  static launch_api a = [] {
    launch_api x;
    if (!env_switch_on("ORT_EP_MLX_DIRECT_LAUNCH") || mx::metal::is_available() || !mx::is_available(mx::Device::gpu)) return x;
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    bool ok = cuda && bind(RTLD_DEFAULT, "_ZN3mlx4core2cu19get_command_encoderENS0_6StreamE", x.encoder_for) &&
              bind(RTLD_DEFAULT, "_ZN3mlx4core2cu14CommandEncoder15set_input_arrayERKNS0_5arrayE", x.set_input) &&
              bind(RTLD_DEFAULT, "_ZN3mlx4core2cu14CommandEncoder16set_output_arrayERKNS0_5arrayE", x.set_output) &&
              bind(RTLD_DEFAULT, "_ZN3mlx4core2cu14CommandEncoder19add_kernel_node_rawEP9CUfunc_st4dim3S5_S5_jPPv",
                   x.add_kernel) &&
              bind(cuda, "cuModuleLoadData", x.module_load) && bind(cuda, "cuModuleGetFunction", x.module_function) &&
              bind(cuda, "cuDevicePrimaryCtxRetain", x.primary_retain) && bind(cuda, "cuDeviceGet", x.device_get) &&
              bind(cuda, "cuCtxPushCurrent_v2", x.ctx_push) && bind(cuda, "cuCtxPopCurrent_v2", x.ctx_pop);
    x.ready = ok && cuda_buffer_layout_matches();
    if (x.ready)
      bind(RTLD_DEFAULT, "_ZN3mlx4core2cu14CommandEncoder21add_completed_handlerESt8functionIFvvEE", x.add_completed);
    x.graphs = x.ready && x.add_completed && bind(cuda, "cuGraphCreate", x.graph_create) &&
               bind(cuda, "cuGraphAddKernelNode_v2", x.graph_add_kernel) &&
               bind(cuda, "cuGraphInstantiateWithFlags", x.graph_instantiate) &&
               bind(cuda, "cuGraphDestroy", x.graph_destroy) && bind(cuda, "cuGraphExecDestroy", x.graph_exec_destroy) &&
               bind(cuda, "cuGraphExecKernelNodeSetParams_v2", x.graph_set_params) &&
               bind(cuda, "cuGraphLaunch", x.graph_launch) && bind(cuda, "cuStreamGetCtx", x.stream_ctx);
    return x;
  }();
  return a;
}

/* Whether a chain may launch as one CUDA graph on the stream of MLX's command encoder
 * (ORT_EP_MLX_CHAIN_GRAPHS, on): the driver's graph functions were found, MLX's own CUDA graphs are
 * off (MLX_USE_CUDA_GRAPHS=0, which the library sets unless the user chose: with them on, MLX's
 * pending graph would launch after ours), and MLX is the version whose encoder layout
 * encoder_stream reads. */
bool chain_graph_ready() {
  static const bool ready = [] {
    const char *graphs = std::getenv("MLX_USE_CUDA_GRAPHS");
    bool ok = api().graphs && env_switch_on("ORT_EP_MLX_CHAIN_GRAPHS") && graphs && !std::strcmp(graphs, "0") &&
              !std::strcmp(mx::version(), "0.32.4");
    if (!ok && log_chains())
      std::fprintf(stderr,
                   "onnxruntime-ep-mlx: chains launch kernel by kernel (driver graph functions %s, "
                   "MLX_USE_CUDA_GRAPHS=%s, MLX %s)\n",
                   api().graphs ? "found" : "missing", graphs ? graphs : "(unset)", mx::version());
    return ok;
  }();
  return ready;
}

/* The CUDA stream of MLX 0.32.4's command encoder: its first member is a reference to its device,
 * its second the stream handle (mlx/backend/cuda/device.h; no virtual functions). */
void *encoder_stream(void *encoder) {
  void *stream = nullptr;
  std::memcpy(&stream, static_cast<char *>(encoder) + sizeof(void *), sizeof stream);
  return stream;
}

/* CUDA_KERNEL_NODE_PARAMS_v2 as the driver API lays it out. */
struct kernel_node_params {
  void *func;
  unsigned grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes;
  void **params;
  void **extra;
  void *kern;
  void *ctx;
};

/* Kernel name -> its function, loaded once per process (modules are never unloaded: a graph
 * built earlier may still launch them). */
struct function_cache {
  std::mutex mu;
  std::unordered_map<std::string, void *> functions;
};

function_cache &functions() {
  static function_cache *c = new function_cache(); /* never destroyed: kernels may run at exit */
  return *c;
}

} // namespace

void *load_cuda_function(const std::string &name, const std::string &cubin, int ordinal) {
  function_cache &c = functions();
  std::lock_guard<std::mutex> lock(c.mu);
  if (auto it = c.functions.find(name); it != c.functions.end()) return it->second;
  const launch_api &a = api();
  int dev = 0;
  void *ctx = nullptr, *module = nullptr, *fn = nullptr, *popped = nullptr;
  if (a.device_get(&dev, ordinal) || a.primary_retain(&ctx, dev) || a.ctx_push(ctx))
    throw bridge_error("kernel " + name + ": no CUDA context for GPU " + std::to_string(ordinal));
  int rc = a.module_load(&module, cubin.data());
  if (!rc) rc = a.module_function(&fn, module, name.c_str());
  a.ctx_pop(&popped);
  if (rc) throw bridge_error("kernel " + name + ": the CUDA driver refused its cubin (error " + std::to_string(rc) + ")");
  c.functions.emplace(name, fn);
  return fn;
}

namespace {

/* A kernel whose cubin may still be compiling when its graph is built (the kernel cache compiles a
 * graph's new variants side by side): loaded at its first launch, which waits for the compile and
 * raises its failure. */
struct lazy_function {
  std::string name;
  std::shared_future<std::string> cubin;
  int ordinal;
  std::once_flag once;
  void *fn = nullptr;

  void *get() {
    std::call_once(once, [this] { fn = load_cuda_function(name, cubin.get(), ordinal); });
    return fn;
  }
};

class ep_cuda_kernel : public mx::Primitive {
 public:
  ep_cuda_kernel(mx::Stream stream, std::string name, std::shared_ptr<lazy_function> function,
                 std::vector<int> scalars, dim3_abi grid, dim3_abi block, bool row_contiguous, int n_outputs,
                 uint32_t unused)
      : mx::Primitive(stream), name_(std::move(name)), function_(std::move(function)), scalars_(std::move(scalars)),
        grid_(grid), block_(block), row_contiguous_(row_contiguous), n_outputs_(n_outputs), unused_(unused) {}

  void eval_cpu(const std::vector<mx::array> &, std::vector<mx::array> &) override {
    throw std::runtime_error(name_ + ": a CUDA kernel has no CPU form");
  }

  void eval_gpu(const std::vector<mx::array> &inputs, std::vector<mx::array> &outputs) override {
    for (auto &out : outputs) out.set_data(mx::allocator::malloc(out.nbytes()));
    std::vector<const mx::array *> ins, outs;
    for (const auto &in : inputs) ins.push_back(&in);
    for (const auto &out : outputs) outs.push_back(&out);
    launch_args args = arguments(ins, outs);
    encode(api().encoder_for(stream()), ins, outs, args);
  }

  /* The launch's argument values, checked before anything is launched: the input pointers, the
   * output pointers (null where this launch has no array), then the int scalars. */
  struct launch_args {
    std::vector<void *> addresses;
    std::vector<void *> pointers; /* what cuLaunchKernel takes: one pointer to each value */
  };

  launch_args arguments(const std::vector<const mx::array *> &inputs,
                        const std::vector<const mx::array *> &outputs) const {
    launch_args l;
    l.addresses.reserve(inputs.size() + static_cast<size_t>(n_outputs_));
    for (const mx::array *in : inputs) {
      /* the graph was built with these made row-major (launch_precompiled): a view here is a bug */
      if (row_contiguous_ && !(in->size() <= 1 || in->flags().row_contiguous))
        throw std::runtime_error(name_ + ": an input is not row-major");
      l.addresses.push_back(in->size() ? cuda_buffer_address(*in) : nullptr);
    }
    size_t next = 0;
    for (int i = 0; i < n_outputs_; i++) {
      if ((unused_ >> i) & 1u) {
        l.addresses.push_back(nullptr);
        continue;
      }
      if (next >= outputs.size()) throw std::runtime_error(name_ + ": fewer outputs than parameters");
      const mx::array *out = outputs[next++];
      l.addresses.push_back(out->size() ? cuda_buffer_address(*out) : nullptr);
    }
    if (grid_.x && grid_.y && grid_.z) (void)function_->get(); /* a failed compile throws before any launch */
    return l;
  }

  /* Declares the arrays to MLX's command encoder (its dependency tracking) and adds the kernel;
   * the driver copies the argument values when the node is added. */
  void encode(void *encoder, const std::vector<const mx::array *> &inputs,
              const std::vector<const mx::array *> &outputs, launch_args &l) const {
    const launch_api &a = api();
    for (const mx::array *in : inputs) a.set_input(encoder, *in);
    for (const mx::array *out : outputs) a.set_output(encoder, *out);
    if (!launches()) return;
    a.add_kernel(encoder, function_->get(), grid_, block_, dim3_abi{1, 1, 1}, 0, argument_pointers(l));
  }

  bool launches() const { return grid_.x && grid_.y && grid_.z; }

  /* The launch as a CUDA graph's kernel node; l's pointers are valid until l changes. */
  kernel_node_params node_params(launch_args &l) const {
    return {function_->get(), grid_.x, grid_.y, grid_.z, block_.x, block_.y, block_.z, 0, argument_pointers(l),
            nullptr, nullptr, nullptr};
  }

 private:
  void **argument_pointers(launch_args &l) const {
    l.pointers.clear();
    l.pointers.reserve(l.addresses.size() + scalars_.size());
    for (auto &p : l.addresses) l.pointers.push_back(&p);
    for (const int &v : scalars_) l.pointers.push_back(const_cast<int *>(&v));
    return l.pointers.data();
  }

 public:

  const char *name() const override { return "EpCudaKernel"; }

 private:
  std::string name_;
  std::shared_ptr<lazy_function> function_;
  std::vector<int> scalars_;
  dim3_abi grid_, block_;
  bool row_contiguous_;
  int n_outputs_;    /* the kernel's output parameters */
  uint32_t unused_;  /* those that get no array: a null pointer */
};

/* A chain: several of our kernels as one MLX operation (ep_cuda_chain, made after a trace by
 * chain_kernels). What MLX spends per operation on the host (the compiled program's replay making
 * each array, the eval's graph walk, per-operation bookkeeping and buffer releases) is paid once a
 * chain; the kernels launch one after the other on the chain's stream, in the trace's order.
 * Buffers the chain's kernels pass only among themselves are no outputs of the operation: they are
 * allocated at its launch and released by MLX's command encoder when the stream has run past it. */
class ep_cuda_chain : public mx::Primitive, public chain_members {
 public:
  struct step {
    std::shared_ptr<ep_cuda_kernel> kernel;
    std::vector<int> inputs;  /* >= 0: the chain's input; < 0: ~slot, an earlier step's output */
    std::vector<int> outputs; /* the slots of the arrays this kernel makes, in its order */
  };
  using slot = chain_slot;

  ep_cuda_chain(mx::Stream stream, chain_plan &&plan)
      : mx::Primitive(stream), slots_(std::move(plan.slots)), n_internal_(plan.n_internal),
        constants_(std::move(plan.constants)) {
    for (auto &st : plan.steps)
      steps_.push_back({std::static_pointer_cast<ep_cuda_kernel>(st.prim), std::move(st.inputs), std::move(st.outputs)});
  }

  void eval_cpu(const std::vector<mx::array> &, std::vector<mx::array> &) override {
    throw std::runtime_error("a chain of CUDA kernels has no CPU form");
  }

  void eval_gpu(const std::vector<mx::array> &inputs, std::vector<mx::array> &outputs) override {
    const launch_api &a = api();
    std::shared_ptr<std::vector<mx::array>> internal = internal_buffers();
    std::vector<const mx::array *> slot_arrays(slots_.size());
    size_t next_internal = 0;
    for (size_t i = 0; i < slots_.size(); i++) {
      const slot &sl = slots_[i];
      if (sl.output >= 0) {
        mx::array &out = outputs.at(static_cast<size_t>(sl.output));
        out.set_data(mx::allocator::malloc(out.nbytes()));
        slot_arrays[i] = &out;
        continue;
      }
      slot_arrays[i] = &internal->at(next_internal++);
    }
    /* every step's arguments first: a check that throws does so before any kernel is launched */
    std::vector<std::vector<const mx::array *>> ins(steps_.size()), outs(steps_.size());
    std::vector<ep_cuda_kernel::launch_args> args(steps_.size());
    for (size_t k = 0; k < steps_.size(); k++) {
      for (int i : steps_[k].inputs)
        ins[k].push_back(i >= 0 ? &constants_.input(inputs, i) : slot_arrays.at(static_cast<size_t>(~i)));
      for (int o : steps_[k].outputs) outs[k].push_back(slot_arrays.at(static_cast<size_t>(o)));
      args[k] = steps_[k].kernel->arguments(ins[k], outs[k]);
    }
    void *encoder = a.encoder_for(stream());
    /* the buffers and constants outlive this launch's kernels (and the chain, should it die first) */
    if (!internal->empty() || !constants_.arrays->empty())
      a.add_completed(encoder, [internal, constants = constants_.arrays] {});
    if (chain_graph_ready() && launch_graph(encoder_stream(encoder), args)) return;
    for (size_t k = 0; k < steps_.size(); k++) steps_[k].kernel->encode(encoder, ins[k], outs[k], args[k]);
  }

  const char *name() const override { return "EpCudaKernelChain"; }

  std::vector<const char *> member_names() const override {
    std::vector<const char *> names;
    for (const step &st : steps_) names.push_back(st.kernel->name());
    return names;
  }

 private:
  /* The chain as one CUDA graph, instantiated at its first launch; later launches update the
   * nodes whose pointers changed (the driver copies the values) and launch it again. A driver
   * refusal leaves the chain on launches one by one from then on. */
  struct graph_state {
    std::mutex mu;
    bool off = false;
    void *graph = nullptr; /* kept while exec lives: its nodes are the handles an update names */
    void *exec = nullptr;
    std::vector<void *> nodes;                  /* per step; null where a step launches nothing */
    std::vector<std::vector<void *>> addresses; /* per step, as the exec holds them */
    graph_state() = default;
    graph_state(const graph_state &) = delete;
    graph_state &operator=(const graph_state &) = delete;
    ~graph_state() {
      if (exec) api().graph_exec_destroy(exec); /* an exec in flight is freed when it completes */
      if (graph) api().graph_destroy(graph);
    }
  };

  bool instantiate(void *stream, std::vector<ep_cuda_kernel::launch_args> &args) {
    const launch_api &a = api();
    void *ctx = nullptr, *graph = nullptr, *popped = nullptr, *prev = nullptr;
    if (!stream) return refused("no stream", 0);
    if (int rc = a.stream_ctx(stream, &ctx); rc || !ctx) return refused("cuStreamGetCtx", rc);
    if (int rc = a.ctx_push(ctx)) return refused("cuCtxPushCurrent", rc);
    int rc = a.graph_create(&graph, 0);
    const char *failed = rc ? "cuGraphCreate" : nullptr;
    graph_.nodes.assign(steps_.size(), nullptr);
    for (size_t k = 0; !rc && k < steps_.size(); k++) {
      if (!steps_[k].kernel->launches()) continue;
      kernel_node_params p = steps_[k].kernel->node_params(args[k]);
      rc = a.graph_add_kernel(&graph_.nodes[k], graph, prev ? &prev : nullptr, prev ? 1 : 0, &p);
      if (rc) failed = "cuGraphAddKernelNode";
      prev = graph_.nodes[k];
    }
    if (!rc && (rc = a.graph_instantiate(&graph_.exec, graph, 0))) failed = "cuGraphInstantiate";
    a.ctx_pop(&popped);
    bool ok = !rc;
    if (!ok) {
      if (graph) a.graph_destroy(graph);
      graph_.exec = nullptr;
      refused(failed, rc);
    } else {
      /* cuGraphExecKernelNodeSetParams names a node of the graph the exec was made from: with that
       * graph destroyed every update failed (CUDA_ERROR_INVALID_VALUE, H100 2026-12-06) and each
       * chain fell back to launches one by one after its first Run */
      graph_.graph = graph;
    }
    graph_.addresses.clear();
    for (const auto &l : args) graph_.addresses.push_back(l.addresses);
    return ok;
  }

  bool update(std::vector<ep_cuda_kernel::launch_args> &args) {
    for (size_t k = 0; k < steps_.size(); k++) {
      if (!graph_.nodes[k] || args[k].addresses == graph_.addresses[k]) continue;
      kernel_node_params p = steps_[k].kernel->node_params(args[k]);
      if (int rc = api().graph_set_params(graph_.exec, graph_.nodes[k], &p))
        return refused("cuGraphExecKernelNodeSetParams", rc);
      graph_.addresses[k] = args[k].addresses;
    }
    return true;
  }

  bool launch_graph(void *stream, std::vector<ep_cuda_kernel::launch_args> &args) {
    std::lock_guard<std::mutex> lock(graph_.mu);
    if (graph_.off) return false;
    bool ok = graph_.exec ? update(args) : instantiate(stream, args);
    if (ok) {
      if (int rc = api().graph_launch(graph_.exec, stream)) ok = refused("cuGraphLaunch", rc);
    }
    graph_.off = !ok;
    return ok;
  }

  /* The buffers the chain's kernels pass only among themselves. Up to ORT_EP_MLX_CHAIN_WORKSPACE
   * bytes (default 4 MiB, well above a decode step's chains; 0: none) they are allocated once and
   * reused by every launch: launches of one chain run in order on its one stream, so a launch's
   * kernels never meet another's in them, and their addresses stay those the chain's CUDA graph
   * holds (no node update, no allocation per launch: a Qwen2.5-0.5B decode step had 247 such
   * buffers; its shared-KV Run 2.62-2.67 ms against 3.04-3.07 on the H100). A larger set (a long
   * prompt's) is allocated at each launch and released when the stream has run past it. */
  std::shared_ptr<std::vector<mx::array>> internal_buffers() {
    std::lock_guard<std::mutex> lock(workspace_mu_);
    if (workspace_) return workspace_;
    auto buffers = std::make_shared<std::vector<mx::array>>();
    buffers->reserve(static_cast<size_t>(n_internal_));
    size_t bytes = 0;
    for (const slot &sl : slots_) {
      if (sl.output >= 0) continue;
      buffers->push_back(mx::array(mx::allocator::malloc(sl.bytes()), sl.shape, sl.dtype));
      bytes += sl.bytes();
    }
    if (bytes <= workspace_limit()) workspace_ = buffers;
    return buffers;
  }

  static size_t workspace_limit() {
    static const size_t limit = [] {
      long long n = env_number("ORT_EP_MLX_CHAIN_WORKSPACE", 4ll << 20);
      return n > 0 ? static_cast<size_t>(n) : size_t{0};
    }();
    return limit;
  }

  /* A driver refusal of the chain's graph (the chain launches kernel by kernel from then on):
   * named on stderr with ORT_EP_MLX_LOG_CHAINS=1. Returns false. */
  bool refused(const char *call, int rc) const {
    if (log_chains())
      std::fprintf(stderr, "onnxruntime-ep-mlx: a chain of %zu kernels launches one by one: %s returned %d\n",
                   steps_.size(), call, rc);
    return false;
  }

  std::vector<step> steps_;
  std::vector<slot> slots_;
  int n_internal_;
  chain_constants constants_;
  std::mutex workspace_mu_;
  std::shared_ptr<std::vector<mx::array>> workspace_; /* internal_buffers' reused set, if any */
  graph_state graph_;
};

/* ORT_EP_MLX_KERNEL_CHAINS (on): chain_kernels rewrites traced GPU programs. */
bool chains_enabled() {
  static const bool on = env_switch_on("ORT_EP_MLX_KERNEL_CHAINS");
  return on;
}

/* ORT_EP_MLX_LOG_CHAINS=1: one line per rewritten trace on stderr (kernels, chains, buffers). */
bool log_chains() {
  static const bool on = env_opt_in("ORT_EP_MLX_LOG_CHAINS");
  return on;
}

/* A chain's outputs, internal buffers included, stay under this many bytes: its buffers are all
 * allocated when it launches, where single operations' buffers come and go one by one. */
constexpr size_t chain_max_bytes = size_t{64} << 20;

/* ... and under this many kernels: cutting a run into chains (split_run) costs the square of its
 * length once per trace. */
constexpr size_t chain_max_kernels = 512;

/* One operation of the trace: the arrays one primitive makes (or one input/constant array). */
struct trace_unit {
  std::vector<mx::array> arrays; /* a primitive's outputs in its order, or the one array */
  mx::Primitive *member = nullptr; /* the primitive, where it may join a chain */
};

const void *unit_key(const mx::array &a) {
  return a.has_primitive() ? static_cast<const void *>(a.primitive_ptr().get())
                           : reinterpret_cast<const void *>(a.id());
}

/* The trace's operations in an order where each comes after its inputs (an iterative depth-first
 * walk from the outputs: programs are thousands of operations deep). */
std::vector<trace_unit> trace_units(const std::vector<mx::array> &outputs,
                                    std::unordered_map<const void *, size_t> &index,
                                    bool (*member)(const mx::Primitive &)) {
  std::vector<trace_unit> units;
  std::unordered_set<const void *> entered;
  std::vector<std::pair<mx::array, size_t>> stack;
  for (const auto &root : outputs) {
    if (entered.count(unit_key(root))) continue;
    entered.insert(unit_key(root));
    stack.emplace_back(root, 0);
    while (!stack.empty()) {
      auto &[a, next] = stack.back();
      if (next < a.inputs().size()) {
        const mx::array &in = a.inputs()[next++];
        if (entered.insert(unit_key(in)).second) stack.emplace_back(in, 0);
        continue;
      }
      trace_unit u;
      if (a.has_primitive()) {
        u.arrays = a.outputs();
        if (member(a.primitive())) u.member = a.primitive_ptr().get();
      } else {
        u.arrays.push_back(a);
      }
      index.emplace(unit_key(a), units.size());
      units.push_back(std::move(u));
      stack.pop_back();
    }
  }
  return units;
}

size_t array_bytes(const mx::array &a) {
  size_t n = a.dtype().size();
  for (int d : a.shape()) n *= static_cast<size_t>(d);
  return n;
}

bool is_cuda_kernel(const mx::Primitive &p) {
  return dynamic_cast<const ep_cuda_kernel *>(&p) != nullptr;
}

std::shared_ptr<mx::Primitive> make_cuda_chain(mx::Stream stream, chain_plan &&plan) {
  return std::make_shared<ep_cuda_chain>(stream, std::move(plan));
}

} // namespace

std::vector<mx::array> chain_kernels(const std::vector<mx::array> &outputs) {
  if (!chains_enabled() || !api().ready || !api().add_completed) return outputs;
  try {
    return chain_operations(outputs, is_cuda_kernel, make_cuda_chain, "kernel");
  } catch (const std::exception &) { /* the trace as it was: one operation per kernel */
    return outputs;
  }
}

namespace {

/* Runs of kernels, in the units' order, each kernel joining the open run when none of its inputs
 * outside the run depends on the run (else the run would need its own result) and the run stays
 * under chain_max_bytes and chain_max_kernels. */
std::vector<std::vector<size_t>> kernel_runs(const std::vector<trace_unit> &units,
                                             const std::unordered_map<const void *, size_t> &index) {
  std::vector<std::vector<size_t>> runs;
  std::vector<char> in_open(units.size(), 0), tainted(units.size(), 0); /* tainted: depends on the open run */
  size_t open_bytes = 0;
  for (size_t u = 0; u < units.size(); u++) {
    const trace_unit &unit = units[u];
    bool depends = false, fits = true;
    for (const auto &in : unit.arrays.front().inputs()) {
      size_t i = index.at(unit_key(in));
      if (in_open[i] || tainted[i]) depends = true;
      if (tainted[i]) fits = false;
    }
    if (!unit.member) {
      tainted[u] = depends;
      continue;
    }
    size_t bytes = 0;
    for (const auto &a : unit.arrays) bytes += array_bytes(a);
    bool same_stream = !runs.empty() && units[runs.back().front()].member->stream() == unit.member->stream();
    if (runs.empty() || !fits || !same_stream || open_bytes + bytes > chain_max_bytes ||
        runs.back().size() >= chain_max_kernels) {
      runs.emplace_back();
      std::fill(in_open.begin(), in_open.end(), 0);
      std::fill(tainted.begin(), tainted.end(), 0);
      open_bytes = 0;
    }
    runs.back().push_back(u);
    in_open[u] = 1;
    open_bytes += bytes;
  }
  return runs;
}

/* Who reads each array: the units whose inputs name it; the trace's outputs are read by all. */
struct readers_map {
  std::unordered_map<std::uintptr_t, std::vector<size_t>> of;
  std::unordered_set<std::uintptr_t> outputs;

  bool read_outside(const mx::array &a, const std::unordered_set<size_t> &inside) const {
    if (outputs.count(a.id())) return true;
    auto it = of.find(a.id());
    if (it == of.end()) return false;
    for (size_t r : it->second)
      if (!inside.count(r)) return true;
    return false;
  }
};

size_t exported_count(const std::vector<trace_unit> &units, const std::vector<size_t> &members, size_t from,
                      size_t to, const readers_map &readers) {
  std::unordered_set<size_t> inside(members.begin() + static_cast<long>(from), members.begin() + static_cast<long>(to));
  size_t n = 0;
  for (size_t m = from; m < to; m++)
    for (const auto &a : units[members[m]].arrays) n += readers.read_outside(a, inside);
  return n;
}

/* A chain makes one MLX array per buffer read outside it, each listing the others as siblings, on
 * every replay: a run with many such buffers (an IOBinding decode step's presents) is cut into
 * chains of at most chain_max_exported. */
constexpr size_t chain_max_exported = 8;

std::vector<std::vector<size_t>> split_run(const std::vector<trace_unit> &units, const std::vector<size_t> &run,
                                           const readers_map &readers) {
  std::vector<std::vector<size_t>> chains;
  size_t from = 0;
  for (size_t to = 1; to <= run.size(); to++) {
    bool last = to == run.size();
    if (!last && exported_count(units, run, from, to + 1, readers) <= chain_max_exported) continue;
    chains.emplace_back(run.begin() + static_cast<long>(from), run.begin() + static_cast<long>(to));
    from = to;
  }
  return chains;
}

} // namespace

namespace {

/* A constant of the trace (an array no operation makes that is not one of the program's inputs,
 * its data already there) that a chain may hold itself instead of taking as an MLX input. */
bool held_constant(const mx::array &a) {
  static const bool on = env_switch_on("ORT_EP_MLX_CHAIN_CONSTANTS"); /* 0: every constant an MLX input */
  return on && !a.has_primitive() && !a.is_tracer() && a.is_available();
}

constexpr int constant_tag = 1 << 28; /* a step input's mark, while a chain is built, for constants */

} // namespace

std::vector<mx::array> chain_operations(const std::vector<mx::array> &outputs, bool (*member)(const mx::Primitive &),
                                        std::shared_ptr<mx::Primitive> (*make)(mx::Stream, chain_plan &&),
                                        const char *what) {
  std::unordered_map<const void *, size_t> index;
  std::vector<trace_unit> units = trace_units(outputs, index, member);
  readers_map readers;
  for (const auto &o : outputs) readers.outputs.insert(o.id());
  for (size_t u = 0; u < units.size(); u++)
    for (const auto &in : units[u].arrays.front().inputs()) readers.of[in.id()].push_back(u);
  std::vector<std::vector<size_t>> chains;
  for (const auto &run : kernel_runs(units, index))
    for (auto &c : split_run(units, run, readers))
      if (c.size() >= 2) chains.push_back(std::move(c));
  std::unordered_map<std::uintptr_t, mx::array> replaced; /* a kernel's array -> its chain's */
  std::vector<char> in_chain(units.size(), 0);
  size_t kernels_chained = 0, internal_total = 0;
  for (const auto &members : chains) {
    std::unordered_set<size_t> inside(members.begin(), members.end());
    chain_plan plan;
    std::vector<mx::array> chain_inputs, exported, constants;
    std::unordered_map<std::uintptr_t, int> input_of, slot_of, constant_of;
    for (size_t u : members) {
      const trace_unit &unit = units[u];
      chain_step st;
      st.prim = unit.arrays.front().primitive_ptr();
      for (const auto &in : unit.arrays.front().inputs()) {
        if (auto it = slot_of.find(in.id()); it != slot_of.end()) {
          st.inputs.push_back(~it->second);
          continue;
        }
        if (held_constant(in)) { /* numbered after the chain's inputs once they are all known */
          auto [it, made] = constant_of.emplace(in.id(), static_cast<int>(constants.size()));
          if (made) constants.push_back(in);
          st.inputs.push_back(constant_tag + it->second);
          continue;
        }
        auto [it, made] = input_of.emplace(in.id(), static_cast<int>(chain_inputs.size()));
        if (made) { /* an earlier chain's output: read from that chain */
          auto r = replaced.find(in.id());
          chain_inputs.push_back(r != replaced.end() ? r->second : in);
        }
        st.inputs.push_back(it->second);
      }
      for (const auto &a : unit.arrays) {
        int out = -1;
        if (readers.read_outside(a, inside)) {
          out = static_cast<int>(exported.size());
          exported.push_back(a);
        } else {
          plan.n_internal++;
        }
        slot_of.emplace(a.id(), static_cast<int>(plan.slots.size()));
        st.outputs.push_back(static_cast<int>(plan.slots.size()));
        plan.slots.push_back({a.shape(), a.dtype(), out});
      }
      plan.steps.push_back(std::move(st));
    }
    if (exported.empty()) throw std::logic_error("a chain nothing reads"); /* every unit leads to an output */
    if (chain_inputs.size() >= static_cast<size_t>(constant_tag)) throw std::logic_error("a chain of too many inputs");
    plan.constants.n_inputs = chain_inputs.size();
    for (chain_step &st : plan.steps)
      for (int &i : st.inputs)
        if (i >= constant_tag) i = static_cast<int>(chain_inputs.size()) + (i - constant_tag);
    plan.constants.arrays = std::make_shared<const std::vector<mx::array>>(std::move(constants));
    mx::Stream stream = units[members.front()].member->stream();
    std::vector<mx::Shape> shapes;
    std::vector<mx::Dtype> dtypes;
    for (const auto &e : exported) shapes.push_back(e.shape()), dtypes.push_back(e.dtype());
    const size_t n_internal = static_cast<size_t>(plan.n_internal);
    std::shared_ptr<mx::Primitive> prim = make(stream, std::move(plan));
    std::vector<mx::array> made = mx::array::make_arrays(std::move(shapes), dtypes, prim, chain_inputs);
    for (size_t i = 0; i < exported.size(); i++) replaced.emplace(exported[i].id(), made[i]);
    for (size_t u : members) in_chain[u] = 1;
    kernels_chained += members.size(), internal_total += n_internal;
  }
  if (log_chains())
    fprintf(stderr, "[mlx ep] %s chains: %zu %ss in %zu chains, %zu internal buffers (%zu operations traced)\n", what,
            kernels_chained, what, chains.size(), internal_total, units.size());
  if (replaced.empty()) return outputs;
  /* the operations outside the chains now read the chains' outputs */
  for (size_t u = 0; u < units.size(); u++) {
    if (in_chain[u]) continue;
    for (auto &a : units[u].arrays)
      for (auto &in : a.inputs())
        if (auto it = replaced.find(in.id()); it != replaced.end()) in = it->second;
  }
  std::vector<mx::array> result;
  result.reserve(outputs.size());
  for (const auto &o : outputs) {
    auto it = replaced.find(o.id());
    result.push_back(it != replaced.end() ? it->second : o);
  }
  return result;
}

namespace {

unsigned blocks(int threads, int per_block) {
  return per_block > 0 && threads > 0 ? static_cast<unsigned>((threads + per_block - 1) / per_block) : 0u;
}

} // namespace

bool direct_launch_ready() { return api().ready; }

void encode_kernel_node(const mx::Stream &stream, void *fn, unsigned grid_x, unsigned grid_y, unsigned block_x,
                        void **args, const std::vector<mx::array> &inputs, const std::vector<mx::array> &outputs) {
  const launch_api &a = api();
  if (!a.ready || !fn) throw bridge_error("a kernel node of ours needs the direct launch path");
  void *encoder = a.encoder_for(stream);
  for (const auto &in : inputs) a.set_input(encoder, in);
  for (const auto &out : outputs) a.set_output(encoder, out);
  if (!grid_x || !grid_y || !block_x) return;
  a.add_kernel(encoder, fn, dim3_abi{grid_x, grid_y, 1}, dim3_abi{block_x, 1, 1}, dim3_abi{1, 1, 1}, 0, args);
}

std::vector<mx::array> launch_precompiled(const std::string &name, const std::shared_future<std::string> &cubin,
                                          const std::vector<mx::array> &inputs,
                                          const std::vector<mx::Shape> &out_shapes,
                                          const std::vector<mx::Dtype> &out_dtypes, const std::vector<int> &scalars,
                                          std::tuple<int, int, int> grid, std::tuple<int, int, int> block,
                                          bool row_contiguous, uint32_t unused, const mlxb_scope *s) {
  auto dev = scope_dev(s);
  mx::Stream stream = mx::to_stream(dev);
  auto fn = std::make_shared<lazy_function>();
  fn->name = name, fn->cubin = cubin, fn->ordinal = stream.device.index;
  /* a cubin at hand is loaded now (a driver refusal is the graph's error, as before) */
  if (cubin.wait_for(std::chrono::seconds(0)) == std::future_status::ready) fn->get();
  std::vector<mx::array> ins;
  ins.reserve(inputs.size());
  for (const auto &x : inputs)
    ins.push_back(row_contiguous ? row_major(x, dev) : x);
  auto [gx, gy, gz] = grid;
  auto [tx, ty, tz] = block;
  /* grid counts threads, as in MLX's custom kernels; a block never exceeds the grid */
  dim3_abi g{blocks(gx, tx), blocks(gy, ty), blocks(gz, tz)};
  dim3_abi b{static_cast<unsigned>(std::min(tx, gx)), static_cast<unsigned>(std::min(ty, gy)),
             static_cast<unsigned>(std::min(tz, gz))};
  int n_outputs = static_cast<int>(out_shapes.size());
  if (n_outputs != static_cast<int>(out_dtypes.size()) || n_outputs > 32)
    throw bridge_error("kernel " + name + ": output shapes and dtypes do not match");
  std::vector<mx::Shape> shapes;
  std::vector<mx::Dtype> dtypes;
  for (int i = 0; i < n_outputs; i++) {
    if ((unused >> i) & 1u) continue;
    shapes.push_back(out_shapes[i]);
    dtypes.push_back(out_dtypes[i]);
  }
  if (shapes.empty()) throw bridge_error("kernel " + name + ": every output unused");
  auto prim = std::make_shared<ep_cuda_kernel>(stream, name, fn, scalars, g, b, row_contiguous, n_outputs, unused);
  std::vector<mx::array> made = mx::array::make_arrays(shapes, dtypes, prim, ins), result;
  result.reserve(out_shapes.size());
  size_t next = 0;
  for (int i = 0; i < n_outputs; i++)
    result.push_back((unused >> i) & 1u ? mx::zeros({0}, out_dtypes[i], dev) : made[next++]);
  return result;
}

} // namespace mlxb_detail
