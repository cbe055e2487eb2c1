/* Compiled programs: a C trace callback wrapped as the function MLX's compile() expects.
 * MLX traces on the first call per input signature and thread (its compile cache is
 * thread-local); later calls replay the simplified graph.
 *
 * Identity: MLX keys its caches by a function id and, when a compiled std::function dies,
 * erases that id from the cache of the thread that compiled it only. An entry another thread
 * traced would stay (holding the plan's constants) and, were the id a reused heap address,
 * be replayed for an unrelated program. So every program gets an id that is never reused, and
 * remembers the cache of every thread that traced it to erase the id there when it is freed.
 *
 * Fusion: on a GPU, MLX fuses elementwise chains into "Compiled" kernels; on the CPU the same
 * fusion JIT-builds C++ with g++ at run time (about a second per kernel), so CPU programs trace
 * with CompileMode::no_fuse (GPU ones too with ORT_EP_MLX_GPU_FUSE=0). On a GPU each fused kernel is
 * NVRTC-compiled at its first use on a machine (seconds each), which a program run a few times never
 * earns back: a GPU program is traced unfused first and traced again with fusion (a second MLX
 * function of its own id) once it has been called ORT_EP_MLX_GPU_FUSE_AFTER times (default 8; 1:
 * fused from its first call). The mode is process-global and MLX reads it in the compiled
 * function right after our trace callback returns, so a trace holds a process-wide trace lock
 * from the moment the callback starts until the compiled call returns to mlxb_program_call,
 * which restores the default mode and releases it. Replays never call the callback and never
 * take the lock. */
#include "mlx/bridge_internal.h"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>

#include "mlx/compile_impl.h"

using namespace mlxb_detail;

namespace {

using array_fn = std::function<std::vector<mx::array>(const std::vector<mx::array> &)>;

} // namespace

struct mlxb_program {
  mlxb_device device;
  mlxb_trace_fn trace;
  void *user;
  int n_outputs;
  bool traced; /* false when MLX compile is disabled: fn then calls the callback on every call */
  bool shapeless;
  std::uintptr_t id;
  array_fn fn;                     /* traced unfused on a GPU until the program is hot */
  std::atomic<std::uint64_t> calls{0};
  std::once_flag fused_once;       /* fused_fn made on the call that finds the program hot */
  std::atomic<bool> fused_ready{false};
  std::uintptr_t fused_id = 0;
  array_fn fused_fn;
  std::mutex caches_mutex;
  std::vector<mx::detail::CompileCacheWeakPtr> caches; /* of the threads that traced it */
};

namespace {

std::mutex trace_mutex;              /* one trace at a time owns MLX's global compile mode */
thread_local bool holds_trace_lock;  /* this thread took trace_mutex in a trace callback */

/* ORT_EP_MLX_GPU_FUSE=0: GPU programs trace without fusion too. MLX JIT-compiles each fused kernel
 * with NVRTC at its first use on a machine (seconds each, ~15 in a decoder's first compiled step on
 * a fresh H200) and keeps it on disk; unfused, the same chains run as MLX's prebuilt kernels, one
 * operation each. Which costs less is the machine's first Run against every later step. */
bool gpu_fusion_enabled() {
  static const bool on = env_switch_on("ORT_EP_MLX_GPU_FUSE");
  return on;
}

/* Calls of a GPU program before it is traced again with fusion (ORT_EP_MLX_GPU_FUSE_AFTER). */
std::uint64_t gpu_fuse_after() {
  static const std::uint64_t n = [] {
    long long x = env_number("ORT_EP_MLX_GPU_FUSE_AFTER", 8);
    return static_cast<std::uint64_t>(x < 1 ? 1 : x);
  }();
  return n;
}

/* ORT_EP_MLX_RETRACE_CPU=1 (for tests): CPU programs take a hot program's second trace as well,
 * still without fusion (the CPU never fuses), so that path runs where there is no GPU (CI). */
bool retrace_on_cpu() {
  static const bool on = env_opt_in("ORT_EP_MLX_RETRACE_CPU");
  return on;
}

thread_local bool tracing_fused_again; /* run_trace is tracing a hot program's fused function */

void trace_lock_acquire(bool fuse) {
  if (holds_trace_lock) return;
  trace_mutex.lock();
  holds_trace_lock = true;
  mx::set_compile_mode(fuse ? mx::CompileMode::enabled : mx::CompileMode::no_fuse);
}

/* Restores MLX's default mode for whoever compiles next, then lets the next trace in. Compile
 * was enabled when the program was made (else nothing traces); a disable_compile() since then
 * is undone here, which MLX, having no getter for its mode, gives us no way to see. */
void trace_lock_release() noexcept {
  if (!holds_trace_lock) return;
  try {
    mx::set_compile_mode(mx::CompileMode::enabled);
  } catch (...) {
  }
  holds_trace_lock = false;
  trace_mutex.unlock();
}

/* Releases the trace lock when a program call ends, also by an exception from the trace. */
struct trace_lock_release_guard {
  trace_lock_release_guard() = default;
  trace_lock_release_guard(const trace_lock_release_guard &) = delete;
  trace_lock_release_guard &operator=(const trace_lock_release_guard &) = delete;
  ~trace_lock_release_guard() { trace_lock_release(); }
};

/* Ids MLX itself uses are code or heap addresses, below 2^63 on every supported platform. */
std::uintptr_t new_program_id() {
  static std::atomic<std::uint64_t> next{0};
  return static_cast<std::uintptr_t>((std::uint64_t{1} << 63) | next.fetch_add(1, std::memory_order_relaxed));
}

void remember_tracing_thread(mlxb_program *p) {
  auto cache = mx::detail::compile_cache();
  std::lock_guard<std::mutex> lock(p->caches_mutex);
  for (const auto &c : p->caches)
    if (!c.owner_before(cache) && !cache.owner_before(c)) return;
  p->caches.push_back(std::move(cache));
}

/* Resets tracing_fused_again when a trace ends, also by an exception. */
struct fused_trace_flag {
  explicit fused_trace_flag(bool on) { tracing_fused_again = on; }
  fused_trace_flag(const fused_trace_flag &) = delete;
  fused_trace_flag &operator=(const fused_trace_flag &) = delete;
  ~fused_trace_flag() { tracing_fused_again = false; }
};

/* fused: the trace of a hot program's second function (fused on a GPU with fusion on; on the CPU,
 * where only ORT_EP_MLX_RETRACE_CPU asks for it, unfused like every CPU trace) */
std::vector<mx::array> run_trace(mlxb_program *p, const std::vector<mx::array> &inputs, bool fused) {
  if (p->traced) {
    bool fuse_now = p->device == MLXB_DEVICE_GPU && gpu_fusion_enabled() && (fused || gpu_fuse_after() <= 1);
    trace_lock_acquire(fuse_now);
    remember_tracing_thread(p);
  }
  fused_trace_flag flag(fused);
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
  /* a GPU program's runs of our kernels as single operations: MLX's host cost is per operation */
  if (p->traced && !p->shapeless && p->device == MLXB_DEVICE_GPU) return chain_kernels(result);
  if (p->traced && !p->shapeless && p->device == MLXB_DEVICE_CPU) return chain_cpu_tasks(result);
  return result;
}

/* The traced function; a named type so that mlxb_compile can tell whether MLX compiled it. */
struct trace_entry {
  mlxb_program *p;
  bool fused;
  std::vector<mx::array> operator()(const std::vector<mx::array> &inputs) const { return run_trace(p, inputs, fused); }
};

/* The function a call runs: the unfused one until a GPU program with fusion on is hot (its
 * ORT_EP_MLX_GPU_FUSE_AFTER-th call), the fused one from then on (CPU programs the same way under
 * ORT_EP_MLX_RETRACE_CPU, for tests). */
const array_fn &function_for_call(mlxb_program *p) {
  bool tiered = p->device == MLXB_DEVICE_GPU ? gpu_fusion_enabled() : retrace_on_cpu();
  if (!p->traced || !tiered || gpu_fuse_after() <= 1) return p->fn;
  if (p->fused_ready.load(std::memory_order_acquire)) return p->fused_fn;
  if (p->calls.fetch_add(1, std::memory_order_relaxed) + 1 < gpu_fuse_after()) return p->fn;
  std::call_once(p->fused_once, [p] {
    p->fused_id = new_program_id();
    p->fused_fn = mx::detail::compile(array_fn(trace_entry{p, true}), p->fused_id, p->shapeless);
    p->fused_ready.store(true, std::memory_order_release);
  });
  return p->fused_fn;
}

/* MLX files a trace under the thread's default stream; on a thread whose stream did not exist yet,
 * the first call's trace was not found by the second call, which traced again (MLX 0.32.4, every
 * new thread). Making the stream before a thread's first program call keeps it to one trace. */
void make_thread_stream() {
  thread_local bool made = false;
  if (made) return;
  (void)mx::default_stream(mx::default_device());
  made = true;
}

} // namespace

extern "C" {

mlxb_program *mlxb_compile(mlxb_device dev, mlxb_trace_fn trace, void *user, int n_outputs, bool shapeless,
                           char *err, size_t err_len) {
  mlxb_program *p = nullptr;
  try {
    p = new mlxb_program{};
    p->device = dev;
    p->trace = trace;
    p->user = user;
    p->n_outputs = n_outputs;
    p->shapeless = shapeless;
    p->id = new_program_id();
    p->fn = mx::detail::compile(array_fn(trace_entry{p, false}), p->id, shapeless);
    /* With compile disabled (MLX_DISABLE_COMPILE, mx::disable_compile) MLX hands our function
     * back: it then runs on every call, nothing is traced and MLX's mode is not ours to set. */
    p->traced = p->fn.target<trace_entry>() == nullptr;
    return p;
  } catch (const std::exception &e) {
    if (err && err_len) snprintf(err, err_len, "mlxb_compile: %s", e.what());
  } catch (...) {
    if (err && err_len) snprintf(err, err_len, "mlxb_compile: unknown exception");
  }
  delete p;
  return nullptr;
}

int mlxb_program_call(mlxb_scope *s, mlxb_program *p, mlxb_array *const *inputs, int n_inputs, mlxb_array **outputs,
                      int n_outputs) {
  return guard_status(s, "mlxb_program_call", [&] {
    if (!p) throw bridge_error("null program");
    if (n_outputs != p->n_outputs) throw bridge_error("program called for a different output count");
    std::vector<mx::array> out;
    {
      trace_lock_release_guard release; /* a trace inside fn took the lock; MLX has used the mode by now */
      make_thread_stream();
      out = function_for_call(p)(to_arrays(const_cast<const mlxb_array *const *>(inputs), n_inputs));
    }
    if (static_cast<int>(out.size()) != n_outputs) throw bridge_error("program returned a different output count");
    for (int i = 0; i < n_outputs; i++) outputs[i] = scope_keep(s, std::move(out[static_cast<size_t>(i)]));
  });
}

bool mlxb_tracing_fused_again(void) { return tracing_fused_again; }

void mlxb_program_free(mlxb_program *p) {
  if (!p) return;
  try {
    for (const auto &cache : p->caches) { /* expired: no-op */
      mx::detail::compile_erase(cache, p->id);
      if (p->fused_ready.load(std::memory_order_acquire)) mx::detail::compile_erase(cache, p->fused_id);
    }
  } catch (...) {
  }
  try {
    delete p;
  } catch (...) {
  }
}

} // extern "C"
