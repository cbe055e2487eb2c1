/* How our CUDA kernels (bridge_kernels*.cpp) reach the GPU. MLX's custom-kernel API compiles a
 * kernel with NVRTC at its first use in every process and, unlike its own kernels, keeps nothing on
 * disk: each new process paid about a second per kernel variant in its first decode step. So each
 * variant is compiled here instead, once per machine: the kernel's full source (the same body MLX
 * would wrap, with its template arguments and input dtypes written in, shapes passed as int
 * arguments) goes through the NVRTC that MLX's CUDA backend already loaded, for the GPU's own
 * architecture, and the cubin is kept in MLX's kernel cache directory under a name carrying a hash
 * of that source; MLX then launches it as a precompiled kernel. Whatever goes wrong on that path (no
 * NVRTC, no CUDA headers, a compile error) sends the kernel to MLX's JIT as before, for the rest of
 * the process. On by default since it ran on the H200 (2026-12-03: a second process's first decode
 * step 22 ms, not ~1 s); ORT_EP_MLX_KERNEL_CACHE=0 sends every kernel to MLX's JIT. */
#include "mlx/bridge_internal.h"

#include "mlx/fast.h"
#include "mlx/version.h"

#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <unordered_map>

namespace fs = std::filesystem;

namespace mlxb_detail {

namespace {

uint64_t fnv1a(const std::string &text, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string hex(uint64_t v, int digits) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%0*llx", digits, static_cast<unsigned long long>(v));
  return buf;
}

/* ---- NVRTC and the CUDA driver, from the libraries MLX's CUDA backend loaded ------------------ */
struct nvrtc_api {
  using program = void *;
  int (*create)(program *, const char *, const char *, int, const char *const *, const char *const *) = nullptr;
  int (*compile)(program, int, const char *const *) = nullptr;
  int (*log_size)(program, size_t *) = nullptr;
  int (*log)(program, char *) = nullptr;
  int (*cubin_size)(program, size_t *) = nullptr;
  int (*cubin)(program, char *) = nullptr;
  int (*destroy)(program *) = nullptr;
};

void *loaded_library(std::initializer_list<const char *> names) {
  for (const char *n : names)
    if (void *h = dlopen(n, RTLD_NOW | RTLD_NOLOAD)) return h;
  return nullptr;
}

template <typename F>
bool bind_symbol(void *lib, const char *symbol, F &out) {
  out = reinterpret_cast<F>(dlsym(lib, symbol));
  return out != nullptr;
}

bool bind_nvrtc(void *lib, nvrtc_api &a) {
  return lib && bind_symbol(lib, "nvrtcCreateProgram", a.create) &&
         bind_symbol(lib, "nvrtcCompileProgram", a.compile) &&
         bind_symbol(lib, "nvrtcGetProgramLogSize", a.log_size) && bind_symbol(lib, "nvrtcGetProgramLog", a.log) &&
         bind_symbol(lib, "nvrtcGetCUBINSize", a.cubin_size) && bind_symbol(lib, "nvrtcGetCUBIN", a.cubin) &&
         bind_symbol(lib, "nvrtcDestroyProgram", a.destroy);
}

/* The NVRTC MLX's CUDA backend loaded (never another one next to it). */
const nvrtc_api *nvrtc() {
  static nvrtc_api a;
  static const bool ok = bind_nvrtc(loaded_library({"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}), a);
  return ok ? &a : nullptr;
}

/* That one, else a CUDA toolkit's: for the self-check on a machine whose MLX has no CUDA backend. */
const nvrtc_api *nvrtc_any() {
  if (const nvrtc_api *loaded = nvrtc()) return loaded;
  static nvrtc_api a;
  static const bool ok = [] {
    void *lib = nullptr;
    for (const char *path : {"libnvrtc.so.13", "libnvrtc.so", "/usr/local/cuda/lib64/libnvrtc.so.13",
                             "/usr/local/cuda/lib64/libnvrtc.so"})
      if (!lib) lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    return bind_nvrtc(lib, a);
  }();
  return ok ? &a : nullptr;
}

/* "sm_90" for the GPU with this ordinal, "" when the driver cannot say. */
std::string gpu_arch(int ordinal) {
  enum { CC_MAJOR = 75, CC_MINOR = 76 }; /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_* */
  void *lib = loaded_library({"libcuda.so.1", "libcuda.so"});
  int (*init)(unsigned) = nullptr;
  int (*get)(int *, int) = nullptr;
  int (*attr)(int *, int, int) = nullptr;
  if (!lib || !bind_symbol(lib, "cuInit", init) || !bind_symbol(lib, "cuDeviceGet", get) ||
      !bind_symbol(lib, "cuDeviceGetAttribute", attr))
    return "";
  int dev = 0, major = 0, minor = 0;
  if (init(0) || get(&dev, ordinal) || attr(&major, CC_MAJOR, dev) || attr(&minor, CC_MINOR, dev) || major <= 0)
    return "";
  return "sm_" + std::to_string(major) + std::to_string(minor);
}

/* Where cuda_fp16.h is: CUDA_HOME, CUDA_PATH, /usr/local/cuda (where MLX's JIT looks too), then the
 * headers of the nvidia-cuda-runtime wheel beside MLX's. "" when none has it. */
std::string cuda_include_dir() {
  std::vector<fs::path> candidates;
  for (const char *env : {"CUDA_HOME", "CUDA_PATH"})
    if (const char *v = std::getenv(env); v && *v) candidates.push_back(fs::path(v) / "include");
  candidates.push_back("/usr/local/cuda/include");
  Dl_info info{};
  if (dladdr(reinterpret_cast<void *>(&mx::version), &info) && info.dli_fname) {
    fs::path site = fs::path(info.dli_fname).parent_path().parent_path().parent_path(); /* .../mlx/lib/libmlx.so */
    for (const char *sub : {"nvidia/cu13/include", "nvidia/cuda_runtime/include", "nvidia/cu12/include"})
      candidates.push_back(site / sub);
  }
  std::error_code ec;
  for (const auto &dir : candidates)
    if (fs::exists(dir / "cuda_fp16.h", ec)) return dir.string();
  return "";
}

/* MLX's kernel cache directory (MLX_PTX_CACHE_DIR, else <temp>/mlx/<version>/ptx); "" if unusable. */
fs::path cache_dir() {
  std::error_code ec;
  fs::path dir;
  if (const char *v = std::getenv("MLX_PTX_CACHE_DIR"); v && *v) {
    dir = v;
  } else {
    dir = fs::temp_directory_path(ec);
    if (ec) return {};
    dir = dir / "mlx" / mx::version() / "ptx";
  }
  fs::create_directories(dir, ec);
  return fs::is_directory(dir, ec) ? dir : fs::path();
}

bool read_file(const fs::path &path, std::string &out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream text;
  text << f.rdbuf();
  out = text.str();
  return !out.empty();
}

/* Written beside its final name and renamed, so a concurrent process never reads half a file. */
void write_file(const fs::path &path, const std::string &data) {
  fs::path tmp = path;
  tmp += ".tmp" + std::to_string(static_cast<long>(getpid()));
  bool written;
  {
    std::ofstream f(tmp, std::ios::binary);
    written = f && f.write(data.data(), static_cast<std::streamsize>(data.size())) && f.flush();
  }
  std::error_code ec;
  if (written) fs::rename(tmp, path, ec);
  if (!written || ec) fs::remove(tmp, ec);
}

std::string nvrtc_compile(const nvrtc_api *api, const std::string &name, const std::string &source,
                          const std::string &arch, const std::string &include_dir) {
  if (!api) throw bridge_error("NVRTC is not loaded");
  nvrtc_api::program prog = nullptr;
  if (api->create(&prog, source.c_str(), (name + ".cu").c_str(), 0, nullptr, nullptr) || !prog)
    throw bridge_error("nvrtcCreateProgram failed");
  std::string arch_opt = "--gpu-architecture=" + arch, include_opt = "--include-path=" + include_dir;
  /* ORT_EP_MLX_PTXAS_REPORT=1: ptxas's registers, spills and shared memory per kernel, on stderr */
  static const bool report = env_opt_in("ORT_EP_MLX_PTXAS_REPORT");
  const char *opts[] = {arch_opt.c_str(), include_opt.c_str(), "--std=c++17", "--ptxas-options=-v"};
  int rc = api->compile(prog, report ? 4 : 3, opts);
  std::string cubin;
  size_t size = 0;
  if (rc == 0 && api->cubin_size(prog, &size) == 0 && size > 0) {
    cubin.resize(size);
    if (api->cubin(prog, cubin.data())) cubin.clear();
  }
  std::string log;
  if ((cubin.empty() || report) && api->log_size(prog, &size) == 0 && size > 1) {
    log.resize(size);
    api->log(prog, log.data());
  }
  api->destroy(&prog);
  if (report && !cubin.empty()) std::fprintf(stderr, "[mlx ep] ptxas %s:\n%s\n", name.c_str(), log.c_str());
  if (cubin.empty()) throw bridge_error("NVRTC could not compile " + name + ": " + log);
  return cubin;
}

/* ---- the generated source --------------------------------------------------------------------- */
const char *cuda_type(mx::Dtype t) {
  switch (t) {
    case mx::bool_: return "bool";
    case mx::uint8: return "uint8_t";
    case mx::uint16: return "uint16_t";
    case mx::uint32: return "uint32_t";
    case mx::uint64: return "uint64_t";
    case mx::int8: return "int8_t";
    case mx::int16: return "int16_t";
    case mx::int32: return "int32_t";
    case mx::int64: return "int64_t";
    case mx::float16: return "__half";
    case mx::bfloat16: return "__nv_bfloat16";
    case mx::float32: return "float";
    case mx::float64: return "double";
    default: throw bridge_error("CUDA kernel: no CUDA type for this dtype");
  }
}

const char *prelude = R"(#include <cuda_fp16.h>
#include <cuda_bf16.h>
#if !defined(__CUDACC_RTC__)
#include <cstdint>
#else
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
#endif
)";

bool reads_shape(const cuda_kernel_spec &k, const std::string &input) {
  return std::strstr(k.source, (input + "_shape").c_str()) != nullptr;
}

/* The kernel under the name `name`: pointers to the inputs, pointers to the outputs, then for each
 * input whose shape the body reads, its dimensions as ints (the order in which MLX passes a
 * precompiled kernel's arguments), gathered back into <input>_shape[] for the body. */
std::string full_source(const cuda_kernel_spec &k, const std::string &name, const std::vector<mx::array> &inputs,
                        const std::vector<mx::Dtype> &out_dtypes, const cuda_template_args &targs,
                        std::vector<mx::fast::ScalarArg> &scalars, int max_threads = 0) {
  std::string params, shapes;
  for (size_t i = 0; i < inputs.size(); i++)
    params += std::string(i ? ", " : "") + "const " + cuda_type(inputs[i].dtype()) + "* " + k.inputs[i];
  for (size_t i = 0; i < out_dtypes.size(); i++)
    params += std::string(", ") + cuda_type(out_dtypes[i]) + "* " + k.outputs[i];
  for (size_t i = 0; i < inputs.size(); i++) {
    if (!reads_shape(k, k.inputs[i]) || inputs[i].ndim() == 0) continue;
    shapes += "  const int " + k.inputs[i] + "_shape[] = {";
    for (int d = 0; d < static_cast<int>(inputs[i].ndim()); d++) {
      std::string dim = k.inputs[i] + "_shape_" + std::to_string(d);
      params += ", int " + dim;
      shapes += (d ? ", " : "") + dim;
      scalars.emplace_back(static_cast<int>(inputs[i].shape(d)));
    }
    shapes += "};\n";
  }
  /* a block of more than 256 threads is declared (its registers then fit: NVRTC otherwise may take
   * up to 255 a thread, and the launch fails where registers times threads pass 65536) */
  std::string bounds = max_threads > 256 ? "__launch_bounds__(" + std::to_string(max_threads) + ") " : "";
  std::string src = std::string(prelude) + k.header + "\nextern \"C\" __global__ void " + bounds + name + "(" + params + ") {\n";
  src += shapes;
  for (const auto &[arg, value] : targs) {
    if (auto *i = std::get_if<int>(&value)) src += "  constexpr int " + arg + " = " + std::to_string(*i) + ";\n";
    else if (auto *b = std::get_if<bool>(&value))
      src += "  constexpr bool " + arg + " = " + (*b ? "true" : "false") + ";\n";
    else src += "  using " + arg + " = " + cuda_type(std::get<mx::Dtype>(value)) + ";\n";
  }
  return src + k.source + "\n}\n";
}

/* ---- the cache -------------------------------------------------------------------------------- */
struct kernel_cache {
  std::mutex mu;
  std::unordered_map<std::string, std::string> cubins;               /* kernel name -> cubin */
  std::unordered_map<std::string, std::shared_future<std::string>> compiling; /* kernel name -> its cubin, or its NVRTC run */
  std::map<const cuda_kernel_spec *, mx::fast::CustomKernelFunction> jit; /* the fallback */
  std::map<int, std::string> arch;                                   /* GPU ordinal -> "sm_90" */
  std::string include_dir;
  fs::path dir;
  bool broken = false; /* a failure: MLX's JIT for the rest of the process */
  bool probed = false;
};

kernel_cache &cache() {
  static kernel_cache *c = new kernel_cache(); /* never destroyed: kernels may run at exit */
  return *c;
}

/* On unless ORT_EP_MLX_KERNEL_CACHE is 0 or off. */
bool precompiling_enabled() {
  static const bool on = env_switch_on("ORT_EP_MLX_KERNEL_CACHE");
  return on;
}

/* "sm_90" for GPU `ordinal` when this path is open, else "". Under c.mu. */
const std::string &arch_for(kernel_cache &c, int ordinal) {
  static const std::string none;
  if (c.broken) return none;
  if (!c.probed) {
    c.probed = true;
    c.include_dir = cuda_include_dir();
    c.dir = cache_dir();
    c.broken = c.include_dir.empty() || !nvrtc();
    if (c.broken) return none;
  }
  auto it = c.arch.find(ordinal);
  if (it == c.arch.end()) it = c.arch.emplace(ordinal, gpu_arch(ordinal)).first;
  return it->second;
}

/* Process-wide: variants compiled by NVRTC here, the time that took, and cubins read from disk. */
std::atomic<uint64_t> compiled_count{0}, compile_us{0}, disk_count{0};

/* The cubin of kernel `name` from memory, disk or NVRTC; nullptr after a failure. Under c.mu. */
/* Where kernel `name`'s cubin is kept on disk ("" without a cache directory). */
fs::path cubin_file(const kernel_cache &c, const std::string &name) {
  return c.dir.empty() ? fs::path() : c.dir / (name + ".cubin");
}

/* A cubin kept on disk into `cubin`; false when there is none (or not an ELF file). */
bool read_kept(const fs::path &file, std::string &cubin) {
  if (file.empty() || !read_file(file, cubin) || cubin.compare(0, 4, "\x7f" "ELF") != 0) return false;
  disk_count++;
  return true;
}

/* NVRTC's cubin of `source`, counted and timed, kept at `file` (when there is one); throws. */
std::string compile_and_keep(const std::string &name, const std::string &source, const std::string &arch,
                             const std::string &include_dir, const fs::path &file) {
  auto start = std::chrono::steady_clock::now();
  std::string cubin = nvrtc_compile(nvrtc(), name, source, arch, include_dir);
  compiled_count++;
  compile_us += static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start).count());
  if (!file.empty()) write_file(file, cubin);
  return cubin;
}

const std::string *cubin_for(kernel_cache &c, const std::string &name, const std::string &source,
                             const std::string &arch) {
  if (auto it = c.cubins.find(name); it != c.cubins.end()) return &it->second;
  std::string cubin;
  fs::path file = cubin_file(c, name);
  if (!read_kept(file, cubin)) {
    try {
      cubin = compile_and_keep(name, source, arch, c.include_dir, file);
    } catch (const std::exception &) {
      c.broken = true;
      return nullptr;
    }
  }
  return &c.cubins.emplace(name, std::move(cubin)).first->second;
}

/* Kernel `name`'s cubin as a future: at once from memory or disk, else compiled by NVRTC on a thread
 * of its own, so that the variants a graph needs compile side by side while the graph is still being
 * built (a fresh machine's first prompt compiled about ten in turn). A failure reaches whoever waits
 * for the cubin, and sends later kernels to MLX's JIT. Under c.mu. */
std::shared_future<std::string> cubin_future(kernel_cache &c, const std::string &name, std::string source,
                                             const std::string &arch) {
  if (auto it = c.compiling.find(name); it != c.compiling.end()) return it->second;
  auto ready = [&](std::string cubin) {
    std::promise<std::string> p;
    p.set_value(std::move(cubin));
    return c.compiling.emplace(name, p.get_future().share()).first->second;
  };
  if (auto it = c.cubins.find(name); it != c.cubins.end()) return ready(it->second);
  std::string kept;
  fs::path file = cubin_file(c, name);
  if (read_kept(file, kept)) {
    c.cubins.emplace(name, kept);
    return ready(std::move(kept));
  }
  std::string include_dir = c.include_dir;
  auto job = std::async(std::launch::async, [&c, name, source = std::move(source), arch, include_dir, file] {
    std::string cubin;
    try {
      cubin = compile_and_keep(name, source, arch, include_dir, file);
    } catch (...) {
      std::lock_guard<std::mutex> lock(c.mu);
      c.broken = true;
      throw;
    }
    std::lock_guard<std::mutex> lock(c.mu);
    c.cubins.emplace(name, cubin);
    return cubin;
  });
  return c.compiling.emplace(name, job.share()).first->second;
}

bool async_compile_enabled() {
  static const bool on = env_switch_on("ORT_EP_MLX_ASYNC_COMPILE");
  return on;
}

} // namespace

int gpu_compute_major(const mlxb_scope *s) {
  if (!s || s->device.type != mx::Device::gpu) return 0;
  kernel_cache &c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.arch.find(s->device.index); /* the map arch_for fills, whether or not NVRTC is at hand */
  if (it == c.arch.end()) it = c.arch.emplace(s->device.index, gpu_arch(s->device.index)).first;
  const std::string &arch = it->second; /* "sm_90" */
  return arch.size() > 4 ? std::atoi(arch.c_str() + 3) / 10 : 0;
}

void *cached_cuda_function(const char *base, const std::string &source, int ordinal) {
  if (!precompiling_enabled() || !direct_launch_ready()) return nullptr;
  kernel_cache &c = cache();
  std::string name, cubin;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    const std::string &arch = arch_for(c, ordinal);
    if (arch.empty()) return nullptr;
    name = std::string(base) + "_" + hex(fnv1a(source), 16) + "_" + arch;
    std::string text = std::string(prelude) + source;
    std::string placed = text;
    for (size_t at = placed.find(base); at != std::string::npos; at = placed.find(base, at + name.size()))
      placed.replace(at, std::strlen(base), name);
    const std::string *kept = cubin_for(c, name, placed, arch);
    if (!kept) return nullptr;
    cubin = *kept;
  }
  return load_cuda_function(name, cubin, ordinal);
}

std::string versioned_kernel_name(const char *base, const char *source, const char *header) {
  uint64_t h = fnv1a(source, fnv1a(header));
  return std::string(base) + "_" + hex(h & 0xffffffffu, 8);
}

std::vector<mx::array> run_cuda_kernel(const cuda_kernel_spec &k, const std::vector<mx::array> &inputs,
                                       const std::vector<mx::Shape> &out_shapes,
                                       const std::vector<mx::Dtype> &out_dtypes, std::tuple<int, int, int> grid,
                                       std::tuple<int, int, int> block, const cuda_template_args &targs,
                                       const mlxb_scope *s, uint32_t unused) {
  auto dev = scope_dev(s);
  kernel_cache &c = cache();
  if (precompiling_enabled() && !s->force_cpu && s->device.type == mx::Device::gpu) {
    std::vector<mx::fast::ScalarArg> scalars;
    std::shared_future<std::string> cubin;
    std::string name;
    bool direct = direct_launch_ready();
    {
      std::lock_guard<std::mutex> lock(c.mu); /* never held while waiting for a compile: its end takes it */
      const std::string &arch = arch_for(c, s->device.index);
      if (!arch.empty()) {
        /* the name carries a hash of the source, written with a placeholder where the name goes */
        static const std::string placeholder = "ORT_EP_MLX_KERNEL_NAME";
        const int threads = std::get<0>(block) * std::get<1>(block) * std::get<2>(block);
        std::string source = full_source(k, placeholder, inputs, out_dtypes, targs, scalars, threads);
        name = std::string(k.name) + "_" + hex(fnv1a(source), 16) + "_" + arch;
        source.replace(source.find(placeholder), placeholder.size(), name);
        if (direct && async_compile_enabled()) {
          cubin = cubin_future(c, name, std::move(source), arch);
        } else if (const std::string *done = cubin_for(c, name, source, arch)) {
          std::promise<std::string> ready;
          ready.set_value(*done);
          cubin = ready.get_future().share();
        }
      }
    }
    if (cubin.valid() && direct) {
      std::vector<int> ints;
      for (const auto &v : scalars) ints.push_back(std::get<int>(v)); /* full_source passes shapes as ints */
      return launch_precompiled(name, cubin, inputs, out_shapes, out_dtypes, ints, grid, block, k.row_contiguous,
                                unused, s);
    }
    if (cubin.valid())
      return mx::fast::precompiled_cuda_kernel(name, cubin.get(), inputs, out_shapes, out_dtypes, scalars, grid, block,
                                               0, std::nullopt, k.row_contiguous, dev);
  }
  mx::fast::CustomKernelFunction *fn = nullptr;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.jit.find(&k);
    if (it == c.jit.end())
      it = c.jit.emplace(&k, mx::fast::cuda_kernel(versioned_kernel_name(k.name, k.source, k.header), k.inputs,
                                                    k.outputs, k.source, k.header, k.row_contiguous, 0))
               .first;
    fn = &it->second;
  }
  return (*fn)(inputs, out_shapes, out_dtypes, grid, block, targs, std::nullopt, false, dev);
}

int check_cuda_source(const char *name, const std::string &source, std::string &error) {
  static const std::string include_dir = cuda_include_dir();
  const nvrtc_api *api = nvrtc_any();
  if (!api || include_dir.empty()) return 1;
  try {
    nvrtc_compile(api, name, std::string(prelude) + source, "sm_90", include_dir);
  } catch (const std::exception &e) {
    error = e.what();
    return -1;
  }
  return 0;
}

int check_cuda_kernel_source(const cuda_kernel_spec &k, const std::vector<mx::array> &inputs,
                             const std::vector<mx::Dtype> &out_dtypes, const cuda_template_args &targs,
                             std::string &error) {
  static const std::string include_dir = cuda_include_dir();
  const nvrtc_api *api = nvrtc_any();
  if (!api || include_dir.empty()) return 1;
  if (inputs.size() != k.inputs.size() || out_dtypes.size() != k.outputs.size()) {
    error = std::string(k.name) + ": the sample does not match the kernel's inputs and outputs";
    return -1;
  }
  std::vector<mx::fast::ScalarArg> scalars;
  std::string name = std::string(k.name) + "_check";
  int threads = 0; /* a kernel with WARPS launches blocks of that many warps: compiled with their bounds */
  for (const auto &[arg, value] : targs)
    if (arg == "WARPS" && std::holds_alternative<int>(value)) threads = 32 * std::get<int>(value);
  try {
    nvrtc_compile(api, name, full_source(k, name, inputs, out_dtypes, targs, scalars, threads), "sm_90", include_dir);
  } catch (const std::exception &e) {
    error = e.what();
    return -1;
  }
  return 0;
}

} // namespace mlxb_detail

void mlxb_kernel_cache_stats(uint64_t *compiled, uint64_t *from_disk, double *compile_ms) {
  if (compiled) *compiled = mlxb_detail::compiled_count.load();
  if (from_disk) *from_disk = mlxb_detail::disk_count.load();
  if (compile_ms) *compile_ms = static_cast<double>(mlxb_detail::compile_us.load()) / 1e3;
}
