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
#include <memory>
#include <mutex>
#include <unordered_map>

namespace mlxb_detail {

namespace {

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
    return x;
  }();
  return a;
}

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
    const launch_api &a = api();
    for (auto &out : outputs) out.set_data(mx::allocator::malloc(out.nbytes()));
    std::vector<void *> addresses;
    addresses.reserve(inputs.size() + outputs.size());
    for (const auto &in : inputs) {
      /* the graph was built with these made row-major (launch_precompiled): a view here is a bug */
      if (row_contiguous_ && !(in.size() <= 1 || in.flags().row_contiguous))
        throw std::runtime_error(name_ + ": an input is not row-major");
      addresses.push_back(in.size() ? cuda_buffer_address(in) : nullptr);
    }
    /* the kernel's output parameters in order: null where this launch has no array (unused_) */
    size_t next = 0;
    for (int i = 0; i < n_outputs_; i++) {
      if ((unused_ >> i) & 1u) {
        addresses.push_back(nullptr);
        continue;
      }
      if (next >= outputs.size()) throw std::runtime_error(name_ + ": fewer outputs than parameters");
      const mx::array &out = outputs[next++];
      addresses.push_back(out.size() ? cuda_buffer_address(out) : nullptr);
    }
    /* the driver copies the argument values when the node is added: pointers into the members do */
    std::vector<void *> args;
    args.reserve(addresses.size() + scalars_.size());
    for (auto &p : addresses) args.push_back(&p);
    for (const int &v : scalars_) args.push_back(const_cast<int *>(&v));
    void *encoder = a.encoder_for(stream());
    for (const auto &in : inputs) a.set_input(encoder, in);
    for (const auto &out : outputs) a.set_output(encoder, out);
    if (!grid_.x || !grid_.y || !grid_.z) return;
    a.add_kernel(encoder, function_->get(), grid_, block_, dim3_abi{1, 1, 1}, 0, args.data());
  }

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
