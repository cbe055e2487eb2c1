/* Device memory: MLX's GPU memory handed to ORT, so that a caller's IOBinding (or ORT between
 * two fused nodes) keeps tensors on the GPU and the EP binds them without a copy.
 *
 * Allocations come from MLX's own allocator, so an ORT buffer *is* an MLX buffer: binding it as
 * an input wraps it (no copy), and MLX may read it from any stream. On CUDA, MLX's allocator hands
 * out unified (managed) memory for such buffers, which its kernels read at device speed once the
 * pages live on the GPU, and which stays valid whatever MLX does with it (reading it on the host
 * never moves it). Copies (ORT's data transfer, results into ORT's output buffers) go through the
 * CUDA driver that libmlx already loaded, found with dlopen(RTLD_NOLOAD), in MLX's own (primary)
 * context: the library needs no CUDA headers or toolkit to build, and the same binary runs on
 * CPU-only MLX.
 *
 * Where the results live: a GPU kernel's output is device memory (MLX's CudaBuffer with
 * device >= 0). Its address is read from MLX's buffer record without asking MLX for a host
 * pointer, which would migrate it to unified memory (a copy). The layout of that record is
 * MLX 0.32's {data, size, device}; it is checked once at start on a buffer we allocate, and any
 * mismatch turns device memory off (the EP then works in host memory, as before). */
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>

#include "mlx/bridge_cpu_task.h"
#include "mlx/bridge_internal.h"

using namespace mlxb_detail;

namespace {

/* The CUDA driver API, from the libcuda.so.1 that libmlx loaded (MLX links the CUDA runtime
 * statically, so the driver is the one CUDA library we can share with it). */
typedef int cu_result;
typedef unsigned long long cu_deviceptr;
enum { CU_MEMORYTYPE_UNIFIED = 4 };

/* The driver's CUDA_MEMCPY2D (a stable public ABI since CUDA 3.2). */
struct cu_memcpy_2d {
  size_t src_x_bytes, src_y;
  int src_memory_type;
  const void *src_host;
  cu_deviceptr src_device;
  void *src_array;
  size_t src_pitch;
  size_t dst_x_bytes, dst_y;
  int dst_memory_type;
  void *dst_host;
  cu_deviceptr dst_device;
  void *dst_array;
  size_t dst_pitch;
  size_t width_bytes, height;
};

/* The driver's CUmemLocation and the advice values used below. */
struct cu_mem_location {
  int type; /* CU_MEM_LOCATION_TYPE_DEVICE = 1 */
  int id;
};
enum { CU_MEM_LOCATION_TYPE_DEVICE = 1, CU_MEM_ADVISE_SET_PREFERRED_LOCATION = 3, CU_MEM_ADVISE_SET_ACCESSED_BY = 5 };

struct cuda_driver {
  cu_result (*mem_advise)(cu_deviceptr, size_t, int, cu_mem_location);           /* may be NULL */
  cu_result (*mem_prefetch)(cu_deviceptr, size_t, cu_mem_location, unsigned, void *); /* may be NULL */
  cu_result (*init)(unsigned);
  cu_result (*device_get)(int *, int);
  cu_result (*primary_ctx_retain)(void **, int);
  cu_result (*ctx_push)(void *);
  cu_result (*ctx_pop)(void **);
  cu_result (*memcpy_async)(cu_deviceptr, cu_deviceptr, size_t, void *);
  cu_result (*memcpy_2d_async)(const cu_memcpy_2d *, void *);
  cu_result (*stream_synchronize)(void *);
  cu_result (*error_string)(cu_result, const char **);
  cu_result (*launch_kernel)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                             void **, void **); /* may be NULL */
  void *context; /* device 0's primary context: the one MLX's runtime uses */
};

struct allocation {
  mx::allocator::Buffer buffer;
  size_t bytes;
};

/* Where the lent memory lives: MLX's CUDA unified memory, or host memory standing in for it so
 * that the whole path (ORT's allocator and data transfer, IOBinding, borrowing, padded copies)
 * runs in CI on MLX's CPU backend (ORT_EP_MLX_DEVICE_MEMORY=host). */
enum class backend { none, cuda, host };

struct device_state {
  std::atomic<bool> ready{false};
  backend kind = backend::none;
  cuda_driver cuda{};
  std::mutex lock;
  std::map<uintptr_t, allocation> live; /* base address -> allocation */
  std::map<uintptr_t, size_t> advised;  /* buffers already advised to live on the GPU (MLX recycles them) */
};

/* A static object, not a heap one: ORT unloads the library (dlclose runs its destructor) only
 * after releasing every session and allocator, so nothing is live by then. */
device_state &state() {
  static device_state s;
  return s;
}

template <class F>
bool find_symbol(void *lib, const char *name, F *out) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  return *out != nullptr;
}

bool load_cuda_driver(cuda_driver *d) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!lib) return false;
  bool ok = find_symbol(lib, "cuInit", &d->init) && find_symbol(lib, "cuDeviceGet", &d->device_get) &&
            find_symbol(lib, "cuDevicePrimaryCtxRetain", &d->primary_ctx_retain) &&
            find_symbol(lib, "cuCtxPushCurrent_v2", &d->ctx_push) && find_symbol(lib, "cuCtxPopCurrent_v2", &d->ctx_pop) &&
            find_symbol(lib, "cuMemcpyAsync", &d->memcpy_async) &&
            find_symbol(lib, "cuMemcpy2DAsync_v2", &d->memcpy_2d_async) &&
            find_symbol(lib, "cuStreamSynchronize", &d->stream_synchronize) &&
            find_symbol(lib, "cuGetErrorString", &d->error_string);
  find_symbol(lib, "cuLaunchKernel", &d->launch_kernel); /* optional: the batched copy-out */
  /* optional (CUDA >= 12.2): unified memory that prefers the GPU, see mlxb_device_alloc */
  find_symbol(lib, "cuMemAdvise_v2", &d->mem_advise);
  find_symbol(lib, "cuMemPrefetchAsync_v2", &d->mem_prefetch);
  int dev = 0;
  return ok && !d->init(0) && !d->device_get(&dev, 0) && !d->primary_ctx_retain(&d->context, dev);
}


bool init_device_memory(device_state &s, bool on_host) {
  if (on_host) {
    s.kind = backend::host;
    return true;
  }
  if (!mx::is_available(mx::Device::gpu) || mx::metal::is_available()) return false;
  if (!load_cuda_driver(&s.cuda) || !cuda_buffer_layout_matches()) return false;
  s.kind = backend::cuda;
  return true;
}

void cuda_check(const device_state &s, cu_result rc, const char *what) {
  if (!rc) return;
  const char *msg = nullptr;
  s.cuda.error_string(rc, &msg);
  throw bridge_error(std::string(what) + ": " + (msg ? msg : "CUDA error " + std::to_string(rc)));
}

/* Makes MLX's context current on the calling thread for the driver calls of a scope. */
struct context_scope {
  const device_state &s;
  explicit context_scope(const device_state &st) : s(st) { cuda_check(s, s.cuda.ctx_push(s.cuda.context), "cuCtxPushCurrent"); }
  ~context_scope() {
    void *old = nullptr;
    s.cuda.ctx_pop(&old);
  }
};

cu_deviceptr dptr(const void *p) { return static_cast<cu_deviceptr>(reinterpret_cast<uintptr_t>(p)); }

/* The allocation holding [p, p + bytes), or nullptr. Called with the lock held. */
const allocation *find_locked(device_state &s, const void *p, size_t bytes, size_t *offset) {
  auto it = s.live.upper_bound(reinterpret_cast<uintptr_t>(p));
  if (it == s.live.begin()) return nullptr;
  --it;
  uintptr_t base = it->first, at = reinterpret_cast<uintptr_t>(p);
  if (at - base > it->second.bytes || bytes > it->second.bytes - (at - base)) return nullptr;
  *offset = at - base;
  return &it->second;
}

/* The address of an evaluated array's first element: on CUDA read from MLX's buffer record (no
 * migration to the host). */
const char *device_address(const device_state &s, const mx::array &a) {
  if (s.kind == backend::host) return a.data<char>();
  return cuda_buffer_address(a);
}

/* The address ORT gets for a buffer of MLX's allocator. */
void *buffer_address(const device_state &s, mx::allocator::Buffer &b) {
  if (s.kind == backend::host) return b.raw_ptr();
  const auto *rec = static_cast<const cuda_buffer_record *>(b.ptr());
  return rec ? rec->data : nullptr;
}

/* ORT_EP_MLX_LOG_COPIES=1: every copy this file issues on CUDA, one stderr line each (what, bytes):
 * a diagnosis of which copies a Run makes, beside a kernel profile's memcpy rows. */
void log_copy(const char *what, size_t bytes, size_t count = 1) {
  static const bool on = env_opt_in("ORT_EP_MLX_LOG_COPIES");
  if (on) std::fprintf(stderr, "[mlx ep] copy %s: %zu bytes in %zu\n", what, bytes, count);
}

/* Queues one copy (CUDA: on the legacy stream, in MLX's context; host: done at once). */
void copy_bytes(const device_state &s, void *dst, const void *src, size_t bytes) {
  if (!bytes) return;
  if (s.kind == backend::host) {
    std::memcpy(dst, src, bytes);
    return;
  }
  log_copy("data transfer (driver)", bytes);
  cuda_check(s, s.cuda.memcpy_async(dptr(dst), dptr(src), bytes, nullptr), "cuMemcpyAsync");
}

/* Queues height rows of width bytes from src (pitch src_pitch) to dst (pitch dst_pitch). */
void copy_rows(const device_state &s, void *dst, size_t dst_pitch, const void *src, size_t src_pitch, size_t width,
               size_t height) {
  if (!width || !height) return;
  if (s.kind == backend::host) {
    for (size_t r = 0; r < height; r++)
      std::memcpy(static_cast<char *>(dst) + r * dst_pitch, static_cast<const char *>(src) + r * src_pitch, width);
    return;
  }
  log_copy("a Run's output or pad (driver, rows)", width * height);
  cu_memcpy_2d c{};
  c.src_memory_type = c.dst_memory_type = CU_MEMORYTYPE_UNIFIED;
  c.src_device = dptr(src);
  c.src_pitch = src_pitch;
  c.dst_device = dptr(dst);
  c.dst_pitch = dst_pitch;
  c.width_bytes = width;
  c.height = height;
  cuda_check(s, s.cuda.memcpy_2d_async(&c, nullptr), "cuMemcpy2DAsync");
}

/* A Run's copies into ORT's device buffers as one kernel launch rather than a driver call each
 * (a decode step copies out ~50 outputs: the logits and every present key and value). The
 * descriptors travel in the kernel's parameters, COPY_BATCH at a time; each block row (blockIdx.y)
 * copies one, 16 bytes a thread where every address and pitch allows it. Both sides are memory
 * of MLX's allocator (the source an evaluated array, the destination a buffer lent to ORT), which
 * any kernel reads and writes. ORT_EP_MLX_COPY_BATCH=0 keeps a driver copy each. */
enum { COPY_BATCH = 64, COPY_THREADS = 256 };

struct batch_copy_abi {
  const void *from;
  void *to;
  unsigned long long width, height, src_pitch, dst_pitch, zero_tail;
};

struct batch_copies_abi {
  batch_copy_abi c[COPY_BATCH];
  int n, pad_;
};


bool copy_batch_enabled() {
  static const bool on = env_switch_on("ORT_EP_MLX_COPY_BATCH");
  return on;
}

/* The batch kernel in MLX's context, or nullptr (no driver entry, no kernel cache, switched off). */
void *copy_batch_function(const device_state &s) {
  static void *fn = [&]() -> void * {
    if (!copy_batch_enabled() || !s.cuda.launch_kernel) return nullptr;
    try {
      return cached_cuda_function("ort_ep_mlx_copy_batch", mlxb_detail::copy_batch_source, 0);
    } catch (...) {
      return nullptr;
    }
  }();
  return fn;
}

/* Blocks along a copy of `largest` bytes: 16 bytes a thread, at most 1024 blocks. */
unsigned copy_grid_x(unsigned long long largest) {
  unsigned long long chunks = (largest + 16ull * COPY_THREADS - 1) / (16ull * COPY_THREADS);
  return static_cast<unsigned>(std::min<unsigned long long>(std::max(chunks, 1ull), 1024ull));
}

/* Appends a copy's descriptor to b (COPY_BATCH at most) and keeps its largest copy in bytes (the
 * grid's width). */
void batch_add(batch_copies_abi &b, unsigned long long &largest, const void *from, void *to, size_t width,
               size_t height, size_t src_pitch, size_t dst_pitch, bool zero_tail) {
  b.c[b.n++] = {from, to, width, height, src_pitch, dst_pitch, zero_tail ? 1ull : 0ull};
  largest = std::max<unsigned long long>(largest, (zero_tail ? dst_pitch : width) * height);
}

void launch_copies(const device_state &s, void *fn, const queued_copy *c, size_t n) {
  batch_copies_abi b{};
  unsigned long long largest = 0;
  for (size_t i = 0; i < n; i++)
    batch_add(b, largest, c[i].from, c[i].to, c[i].width, c[i].height, c[i].src_pitch, c[i].dst_pitch, c[i].zero_tail);
  log_copy("a Run's outputs or pads (copy kernel; the largest)", static_cast<size_t>(largest), n);
  void *params[] = {&b};
  cuda_check(s,
             s.cuda.launch_kernel(fn, copy_grid_x(largest), static_cast<unsigned>(n), 1, COPY_THREADS, 1, 1, 0, nullptr,
                                  params, nullptr),
             "cuLaunchKernel (copy batch)");
}

/* Queues the scope's pending copies: batched where the kernel is at hand, else one driver call each
 * (never a zero tail: pads are queued only where the kernel is). */
void queue_copies(const device_state &s, std::vector<queued_copy> &copies) {
  bool tails = std::any_of(copies.begin(), copies.end(), [](const queued_copy &c) { return c.zero_tail; });
  void *fn = copies.size() > 1 || tails ? copy_batch_function(s) : nullptr;
  if (tails && !fn) throw bridge_error("padded inputs queued without the copy kernel");
  for (size_t i = 0; i < copies.size();) {
    size_t n = std::min<size_t>(COPY_BATCH, copies.size() - i);
    if (fn) {
      launch_copies(s, fn, copies.data() + i, n);
    } else {
      for (size_t j = i; j < i + n; j++) {
        const queued_copy &c = copies[j];
        copy_rows(s, c.to, c.dst_pitch, c.from, c.src_pitch, c.width, c.height);
      }
    }
    i += n;
  }
}

/* Waits for the queued copies. */
void finish_copies(const device_state &s) {
  if (s.kind == backend::cuda) cuda_check(s, s.cuda.stream_synchronize(nullptr), "cuStreamSynchronize");
}


/* Unified memory lent to ORT is meant for the GPU: its pages are advised to live there and
 * prefetched, so neither a copy into it nor a kernel reading it starts with page faults. Host
 * access stays valid (the driver maps or migrates on demand). Advice is best effort. */
/* The smallest buffer advised (ORT_EP_MLX_PREFETCH_MIN bytes, default 64 KiB; never the 8-byte
 * allocations of MLX's scalar pool, whose pages the host writes). Smaller buffers (a decoder's
 * present KV outputs, 32 KiB a layer at 128 tokens) stay unadvised although the prompt's copies
 * into them took 44 us each on the H200: with a floor of 4096 bytes, A/B on the H200 (2026-12-04,
 * two processes each way, alternating), a 128-token prompt's Run took 22.2 and 18.4 ms against
 * 14.7 and 17.8, a decode step 5.45 and 6.11 ms against 4.51 and 5.54, copying out 1.0-2.1 ms
 * against 0.4-1.4: ORT and the caller read those outputs on the host. */
size_t prefetch_floor() {
  static const size_t floor = [] {
    long long n = env_number("ORT_EP_MLX_PREFETCH_MIN", 65536);
    return n > 8 ? static_cast<size_t>(n) : size_t{9};
  }();
  return floor;
}

void prefer_device(const device_state &s, void *p, size_t bytes) {
  if (s.kind != backend::cuda || !s.cuda.mem_advise || !s.cuda.mem_prefetch || bytes < prefetch_floor()) return;
  try {
    context_scope ctx(s);
    cu_mem_location gpu{CU_MEM_LOCATION_TYPE_DEVICE, 0};
    s.cuda.mem_advise(dptr(p), bytes, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, gpu);
    s.cuda.mem_advise(dptr(p), bytes, CU_MEM_ADVISE_SET_ACCESSED_BY, gpu);
    s.cuda.mem_prefetch(dptr(p), bytes, gpu, 0, nullptr);
  } catch (...) {
  }
}

/* ORT_EP_MLX_PREFETCH_COPIES=1 (opt-in): a host tensor copied into one of our buffers below the
 * prefetch floor (a Run's input_ids, attention mask, positions: never advised) is prefetched to the
 * GPU after the copy. Written when those buffers shared MLX's read-mostly scalar pool (H100,
 * 2026-12-05: the first kernel reading one took 80-95 us without, 10 us with); with the pool
 * drained it costs more than it saves (H100, 2026-12-06, IOBinding decode loop, alternating
 * processes: ORT's bind of the two NumPy inputs 0.43 and 0.42 ms a step with it against 0.32 and
 * 0.31 without, the step 3.61 and 3.48 against 3.35 and 3.37 ms). */
void prefetch_copied_inputs(device_state &s, void *const *dst, const void *const *src, const size_t *bytes, size_t n) {
  static const bool on = env_opt_in("ORT_EP_MLX_PREFETCH_COPIES");
  if (!on || s.kind != backend::cuda || !s.cuda.mem_prefetch) return;
  cu_mem_location gpu{CU_MEM_LOCATION_TYPE_DEVICE, 0};
  for (size_t i = 0; i < n; i++) {
    if (!bytes[i] || bytes[i] >= prefetch_floor()) continue; /* larger ones were advised when allocated */
    size_t offset;
    std::unique_lock<std::mutex> g(s.lock);
    bool to_ours = find_locked(s, dst[i], bytes[i], &offset) != nullptr;
    bool from_ours = find_locked(s, src[i], bytes[i], &offset) != nullptr;
    g.unlock();
    if (to_ours && !from_ours) s.cuda.mem_prefetch(dptr(dst[i]), bytes[i], gpu, 0, nullptr);
  }
}

/* ORT_EP_MLX_PREFETCH_CONSTANTS=1 (opt-in): a GPU plan's constants, copied into unified memory by
 * the host at Compile, advised to live on the GPU and prefetched there once. Written for a decode
 * step's quantized embedding gather (one row of a 68 MB table, 159 us of device time on the H100,
 * 2026-12-06 at a050631), it lost when timed (H100, 2026-12-06 twelfth session, IOBinding decode
 * loop, alternating processes): decode medians 6.92 and 6.28 ms against 4.72 and 5.44, a step's
 * device time 1924 against 1418 us (its attention kernels slower, a 294 us device-to-managed copy
 * each step). The gather's 159 us was gone either way: ORT's buffers for the one-token ids no longer
 * share MLX's read-mostly scalar pages. */
bool prefetch_constants_wanted() {
  static const bool on = env_opt_in("ORT_EP_MLX_PREFETCH_CONSTANTS");
  return on;
}

} // namespace

void mlxb_prefer_device_constants(mlxb_scope *s) {
  if (!s || !prefetch_constants_wanted()) return;
  device_state &st = state();
  if (!st.ready || st.kind != backend::cuda) return;
  try {
    gpu_exclusive one;
    for (const mx::array &a : s->arrays) /* evaluated, not float64 (the CPU stream's); prefer_device skips small ones */
      if (a.status() == mx::array::Status::available && a.dtype() != mx::float64)
        prefer_device(st, cuda_buffer_address(a), a.data_size() * a.itemsize());
  } catch (...) { /* advice only: the constants stay where they are */
  }
}

/* MLX 0.32.4's CUDA allocator serves every buffer of at most 8 bytes (a kernel's scale and epsilon,
 * a step's sequence lengths, positions and cast results) from one 64 KiB pool of unified memory
 * advised read-mostly: the host's writes of one scalar (a new constant, a Run's small inputs) and
 * the GPU's writes of another (a step's lengths) move or invalidate the pages that every kernel
 * reading any of them depends on. On the H100 (2026-12-06, fourteenth session) the decode step
 * kernel's blocks read their scale, lengths and sizes from system memory (Nsight Compute's
 * apertures); with the pool taken it read none, and in the IOBinding decode loop it took 14.4 us a
 * launch instead of 25.1 (median of 1152), the RMS norm 2.6 instead of 3.4, a Run 2.73-2.80 ms
 * instead of 3.01, a prompt 8.1 instead of 8.6. The pool is a fixed list of 8192 blocks: taken once
 * (at the first GPU section) and held for the process, small buffers get MLX's ordinary unified
 * memory of their own (its buffer cache recycles them). ORT_EP_MLX_DRAIN_SCALAR_POOL=0 keeps it. */
void mlxb_detail::drain_scalar_pool() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (!env_switch_on("ORT_EP_MLX_DRAIN_SCALAR_POOL") || std::strcmp(mx::version(), "0.32.4") ||
        mx::metal::is_available() || !mx::is_available(mx::Device::gpu))
      return;
    enum { POOL_BLOCKS = 65536 / 8 }; /* MLX 0.32.4: small_pool_size / small_block_size */
    static auto *held = new std::vector<mx::allocator::Buffer>(); /* never freed */
    try {
      held->reserve(POOL_BLOCKS);
      for (int i = 0; i < POOL_BLOCKS; i++) held->push_back(mx::allocator::allocator().malloc(8));
    } catch (...) { /* what was taken stays taken; never tried again (the pool only costs speed) */
    }
  });
}

bool mlxb_detail::cuda_buffer_layout_matches() {
  mx::allocator::Buffer b = mx::allocator::allocator().malloc(64);
  if (!b.ptr()) return false;
  const auto *rec = static_cast<const cuda_buffer_record *>(b.ptr());
  bool ok = rec->size >= 64 && rec->device == -1 && rec->data == b.raw_ptr();
  mx::allocator::allocator().free(b);
  return ok;
}

bool mlxb_device_memory_enable(bool on_host) {
  device_state &s = state();
  static std::once_flag once;
  try {
    std::call_once(once, [&] { s.ready = init_device_memory(s, on_host); });
  } catch (...) {
    return false;
  }
  return s.ready;
}

bool mlxb_device_memory_available(void) { return state().ready; }

void *mlxb_device_alloc(size_t bytes) {
  if (!mlxb_device_memory_available()) return nullptr;
  device_state &s = state();
  try {
    gpu_exclusive one;
    size_t want = bytes ? bytes : 1; /* ORT expects distinct non-NULL blocks */
    /* Never from MLX's scalar pool (its CUDA allocator's blocks of at most 8 bytes, in read-mostly
     * pages that MLX's own scalars share): a Run's one-token input ids and positions, written there
     * by the host, would invalidate the GPU's copy of those pages every step. */
    mx::allocator::Buffer b = mx::allocator::allocator().malloc(std::max<size_t>(want, 16));
    void *p = b.ptr() ? buffer_address(s, b) : nullptr;
    if (!p) return nullptr;
    std::lock_guard<std::mutex> g(s.lock);
    auto seen = s.advised.find(reinterpret_cast<uintptr_t>(p));
    if (s.kind == backend::cuda && (seen == s.advised.end() || seen->second < want)) {
      prefer_device(s, p, want);
      s.advised[reinterpret_cast<uintptr_t>(p)] = want;
    }
    s.live.emplace(reinterpret_cast<uintptr_t>(p), allocation{b, want});
    return p;
  } catch (...) {
    return nullptr;
  }
}

void mlxb_device_free(void *p) {
  if (!p) return;
  device_state &s = state();
  try {
    gpu_exclusive one;
    std::unique_lock<std::mutex> g(s.lock);
    auto it = s.live.find(reinterpret_cast<uintptr_t>(p));
    if (it == s.live.end()) return;
    mx::allocator::Buffer b = it->second.buffer;
    s.live.erase(it);
    g.unlock();
    mx::allocator::allocator().free(b);
  } catch (...) {
  }
}

bool mlxb_device_owns(const void *p, size_t bytes) {
  if (!p || !state().ready) return false;
  device_state &s = state();
  std::lock_guard<std::mutex> g(s.lock);
  size_t offset;
  return find_locked(s, p, bytes, &offset) != nullptr;
}

int mlxb_device_copy(void *const *dst, const void *const *src, const size_t *bytes, size_t n, char *err,
                     size_t err_len) {
  device_state &s = state();
  try {
    if (!s.ready) throw bridge_error("no device memory");
    gpu_exclusive one;
    std::optional<context_scope> ctx;
    if (s.kind == backend::cuda) ctx.emplace(s);
    for (size_t i = 0; i < n; i++) copy_bytes(s, dst[i], src[i], bytes[i]);
    prefetch_copied_inputs(s, dst, src, bytes, n);
    /* ORT may hand the destination to anyone next (the host, another stream): finish here. */
    finish_copies(s);
    return 0;
  } catch (const std::exception &e) {
    if (err && err_len) snprintf(err, err_len, "%s", e.what());
  } catch (...) {
    if (err && err_len) snprintf(err, err_len, "device copy failed");
  }
  return -1;
}

mlxb_array *mlxb_borrow_device(mlxb_scope *s, const void *data, const int64_t *dims, int rank, mlxb_dtype t) {
  return guard(s, "mlxb_borrow_device", [&] {
    mx::Shape shape = to_shape(dims, rank);
    mx::Dtype type = to_mx(t);
    size_t n = 1;
    for (int d : shape) n *= static_cast<size_t>(d);
    mx::StreamOrDevice d = dtype_dev(s, type); /* a view as float64 runs on the CPU */
    if (n == 0) return mx::zeros(shape, type, d);
    size_t bytes = n * type.size(), offset = 0;
    device_state &st = state();
    std::lock_guard<std::mutex> g(st.lock);
    const allocation *a = find_locked(st, data, bytes, &offset);
    if (!a) throw bridge_error("buffer is not device memory of this EP");
    /* MLX never frees it (the deleter does nothing): ORT owns the buffer and frees it through us. */
    mx::allocator::Data view(a->buffer, [](mx::allocator::Buffer) {});
    if (offset == 0 && a->bytes == bytes) return mx::array(std::move(view), std::move(shape), type);
    mx::array whole(std::move(view), mx::Shape{static_cast<int>(a->bytes)}, mx::uint8);
    mx::array part = mx::slice(whole, {static_cast<int>(offset)}, {static_cast<int>(offset + bytes)}, d);
    return mx::reshape(mx::view(part, type, d), std::move(shape), d);
  });
}

bool mlxb_holds_buffer(const mlxb_array *a, const void *data) {
  try {
    device_state &st = state();
    if (!a || !data || !st.ready) return false;
    const mx::array &x = arr(a);
    return x.is_available() && device_address(st, x) == static_cast<const char *>(data);
  } catch (...) {
    return false;
  }
}

/* A decode bucket's padded device inputs (a decode step's every past key and value) filled by one
 * launch of the copy kernel before the Run's program is evaluated (mlxb_device_prepare), rather than
 * a concatenation each: two MLX copies per input, 96 of the 332 launches (445 us of 1.9 ms of
 * device time) of a Qwen2.5-0.5B IOBinding decode step on the H100 (2026-12-05), where each launch
 * also costs host time in MLX's evaluation. Where the copy kernel is at hand;
 * ORT_EP_MLX_PAD_BATCH=0 concatenates. */
bool pad_batch_wanted(const device_state &st) {
  static const bool on = env_switch_on("ORT_EP_MLX_PAD_BATCH");
  return on && (st.kind == backend::host || copy_batch_function(st));
}

/* x padded with pad zero rows along axis: its shape, and as row copies, `outer` rows of x's `width`
 * bytes each into rows of `pitch` bytes. */
struct padded_layout {
  mx::Shape shape;
  size_t outer, width, pitch;
};

padded_layout pad_layout(const mx::array &x, int axis, int64_t pad) {
  padded_layout l{x.shape(), 1, 0, 0};
  l.shape[axis] = to_i32(static_cast<int64_t>(l.shape[axis]) + pad, "padding");
  size_t inner = x.itemsize();
  for (int k = 0; k < axis; k++) l.outer *= static_cast<size_t>(l.shape[k]);
  for (int k = axis + 1; k < static_cast<int>(l.shape.size()); k++) inner *= static_cast<size_t>(l.shape[k]);
  l.width = inner * static_cast<size_t>(x.shape(axis)), l.pitch = inner * static_cast<size_t>(l.shape[axis]);
  return l;
}

/* x padded with pad zero rows along axis into a buffer of its own, queued on s; nullopt where the
 * batch does not apply (the caller concatenates). */
std::optional<mx::array> queue_pad(mlxb_scope *s, const mx::array &x, int axis, int64_t pad) {
  device_state &st = state();
  if (!st.ready || st.kind == backend::none || !pad_batch_wanted(st) || x.size() == 0 || pad <= 0) return std::nullopt;
  if (x.status() != mx::array::Status::available || !x.flags().row_contiguous || x.dtype() == mx::bool_)
    return std::nullopt;
  padded_layout l = pad_layout(x, axis, pad);
  mx::array out(mx::allocator::malloc(l.pitch * l.outer), l.shape, x.dtype());
  mx::allocator::Buffer b = out.buffer();
  s->pads.push_back({x, device_address(st, x), buffer_address(st, b), l.width, l.outer, l.width, l.pitch, true});
  return out;
}

/* x with pad zero rows after its last along axis, as one copy kernel of the graph: the zero rows are
 * a broadcast view, not a filled buffer. */
mx::array pad_in_graph(mlxb_scope *s, const mx::array &x, int axis, int64_t pad) {
  if (axis < 0 || axis >= static_cast<int>(x.ndim()) || pad < 0) throw bridge_error("invalid padding axis");
  mx::StreamOrDevice d = dtype_dev(s, x.dtype());
  mx::Shape rows = x.shape();
  rows[axis] = to_i32(pad, "padding");
  mx::array zeros = mx::broadcast_to(mx::array(0, x.dtype()), rows, d);
  return mx::concatenate({x, zeros}, axis, d);
}

/* Never queued: a lowering pads after mlxb_device_prepare has filled the Run's queued pads, so a
 * buffer queued here would be read unfilled. */
mlxb_array *mlxb_pad_axis(mlxb_scope *s, const mlxb_array *a, int axis, int64_t pad) {
  return guard(s, "mlxb_pad_axis", [&] { return pad_in_graph(s, arr(a), axis, pad); });
}

int mlxb_write_device(mlxb_scope *s, const mlxb_array *a, int axis, int64_t keep, void *dst, size_t bytes) {
  return guard_status(s, "mlxb_write_device", [&] {
    device_state &st = state();
    if (!st.ready) throw bridge_error("no device memory");
    const mx::array &in = arr(a);
    size_t want = in.size() * in.itemsize();
    if (want == 0 && bytes == 0) return;
    if (!dst) throw bridge_error("null destination");
    mx::array src = evaluated_row_major(s, in);
    const char *from = device_address(st, src);
    size_t width = bytes, height = 1, have = bytes;
    if (axis < 0) {
      if (bytes != want) throw bridge_error("destination size does not match the array");
    } else {
      if (axis >= static_cast<int>(src.ndim()) || keep < 0 || keep > src.shape(axis))
        throw bridge_error("prefix outside the array");
      size_t outer = 1, row = src.itemsize();
      for (int k = 0; k < axis; k++) outer *= static_cast<size_t>(src.shape(k));
      for (int k = axis + 1; k < static_cast<int>(src.ndim()); k++) row *= static_cast<size_t>(src.shape(k));
      have = row * static_cast<size_t>(src.shape(axis)), width = row * static_cast<size_t>(keep), height = outer;
      if (bytes != height * width) throw bridge_error("destination size does not match the prefix");
    }
    if (!width || !height) return;
    if (st.kind == backend::host) return copy_rows(st, dst, width, from, have, width, height);
    /* queued for mlxb_device_finish, which launches the Run's copies together */
    s->copies.push_back({src, from, dst, width, height, have, width, false});
  });
}

namespace {

/* One copy of a program_copies operation: rows of its input `src` into a buffer lent to ORT (`to`),
 * or into its own output `out`, each destination row's tail zeroed with zero_tail. */
struct program_copy {
  int src;
  int out; /* the operation's output written, or -1: `to` */
  void *to;
  size_t width, height, src_pitch, dst_pitch;
  bool zero_tail;
};

/* Row copies as one operation of a Run's MLX graph, so that the Run's eval does them and waits for
 * them with the rest: a Run's outputs into ORT's device buffers (mlxb_copy_into_device: its inputs
 * are all of the Run's results, so it runs after every read of any input buffer that ORT may have
 * handed out again as an output, and its one output is a byte nobody reads), or a decode bucket's
 * padded device inputs (mlxb_pad_inputs: its outputs are the padded arrays). No queue of copies
 * around the eval and no extra wait (mlxb_device_prepare, mlxb_device_finish). On CUDA the copy
 * kernel's launches are nodes of MLX's command encoder; on the host stand-in, a task on MLX's CPU
 * stream. */
class program_copies : public mx::Primitive {
 public:
  program_copies(mx::Stream stream, const char *name, std::vector<program_copy> copies)
      : mx::Primitive(stream), name_(name), copies_(std::move(copies)) {}

  void eval_cpu(const std::vector<mx::array> &inputs, std::vector<mx::array> &outputs) override {
    check_sources(inputs);
    cpu_task_arrays held;
    auto &encoder = cpu_task_begin(stream(), inputs, outputs, &held);
    encoder.dispatch([copies = copies_, held = std::move(held)]() mutable {
      for (const program_copy &c : copies) {
        const char *from = held.ins[c.src].data<char>();
        char *to = c.out >= 0 ? held.outs[c.out].data<char>() : static_cast<char *>(c.to);
        for (size_t r = 0; r < c.height; r++) { /* memmove: an output's buffer may be its own input's */
          std::memmove(to + r * c.dst_pitch, from + r * c.src_pitch, c.width);
          if (c.zero_tail) std::memset(to + r * c.dst_pitch + c.width, 0, c.dst_pitch - c.width);
        }
      }
    });
  }

  void eval_gpu(const std::vector<mx::array> &inputs, std::vector<mx::array> &outputs) override {
    check_sources(inputs);
    for (auto &out : outputs) out.set_data(mx::allocator::malloc(out.nbytes()));
    void *fn = copy_batch_function(state());
    if (!fn) throw std::runtime_error(std::string(name_) + ": the copy kernel is not at hand");
    for (size_t i = 0; i < copies_.size(); i += COPY_BATCH) {
      size_t n = std::min<size_t>(COPY_BATCH, copies_.size() - i);
      batch_copies_abi b{};
      unsigned long long largest = 0;
      for (size_t j = 0; j < n; j++) {
        const program_copy &c = copies_[i + j];
        void *to = c.out >= 0 ? cuda_buffer_address(outputs.at(static_cast<size_t>(c.out))) : c.to;
        batch_add(b, largest, cuda_buffer_address(inputs[c.src]), to, c.width, c.height, c.src_pitch, c.dst_pitch,
                  c.zero_tail);
      }
      log_copy("a Run's outputs or pads (copy kernel in the program; the largest)", static_cast<size_t>(largest), n);
      void *params[] = {&b};
      encode_kernel_node(stream(), fn, copy_grid_x(largest), static_cast<unsigned>(n), COPY_THREADS, params, inputs,
                         outputs);
    }
  }

  const char *name() const override { return name_; }

 private:
  /* the graph was built with every source row-major, of the sizes checked */
  void check_sources(const std::vector<mx::array> &inputs) const {
    for (const program_copy &c : copies_) {
      const mx::array &in = inputs.at(static_cast<size_t>(c.src));
      if (!in.flags().row_contiguous || c.src_pitch * c.height > in.nbytes())
        throw std::runtime_error(std::string(name_) + ": a source is not the row-major array it was built for");
    }
  }

  const char *name_;
  std::vector<program_copy> copies_;
};

/* ORT_EP_MLX_COPY_IN_PROGRAM: on the host stand-in unless "0"; on CUDA only with "1" (written
 * without a GPU at hand: opt-in until a lease has run it). */
bool copy_in_program_wanted(backend kind) {
  static const char *v = std::getenv("ORT_EP_MLX_COPY_IN_PROGRAM");
  if (kind == backend::host) return !v || (std::strcmp(v, "0") && std::strcmp(v, "off"));
  return v && !std::strcmp(v, "1");
}

} // namespace

bool mlxb_copy_into_device_available(const mlxb_scope *s) {
  device_state &st = state();
  if (!s || !st.ready || !copy_in_program_wanted(st.kind)) return false;
  if (st.kind == backend::host) return is_cpu_scope(s);
  return st.kind == backend::cuda && is_cuda_gpu(s) && direct_launch_ready() && copy_batch_function(st);
}

mlxb_array *mlxb_copy_into_device(mlxb_scope *s, mlxb_array *const *arrays, int n, const mlxb_output_copy *copies,
                                  int n_copies) {
  return guard(s, "mlxb_copy_into_device", [&] {
    if (!mlxb_copy_into_device_available(s)) throw bridge_error("not available on this scope");
    if (n_copies < 0 || (n_copies && !copies)) throw bridge_error("invalid copy list");
    std::vector<mx::array> inputs = to_arrays(arrays, n);
    device_state &st = state();
    std::vector<program_copy> planned;
    for (int i = 0; i < n_copies; i++) {
      const mlxb_output_copy &c = copies[i];
      if (c.src < 0 || c.src >= n) throw bridge_error("copy source out of range");
      const mx::array &src = inputs[static_cast<size_t>(c.src)];
      if (src.dtype() == mx::float64 && !is_cpu_scope(s)) throw bridge_error("float64 is copied after the eval");
      size_t outer = 1, width = src.nbytes(), pitch = width; /* the whole array, or a prefix of axis */
      if (c.axis >= 0) {
        if (c.axis >= static_cast<int>(src.ndim()) || c.keep < 0 || c.keep > src.shape(c.axis))
          throw bridge_error("prefix outside the array");
        size_t row = src.itemsize();
        for (int k = 0; k < c.axis; k++) outer *= static_cast<size_t>(src.shape(k));
        for (int k = c.axis + 1; k < static_cast<int>(src.ndim()); k++) row *= static_cast<size_t>(src.shape(k));
        width = row * static_cast<size_t>(c.keep), pitch = row * static_cast<size_t>(src.shape(c.axis));
      }
      if (c.bytes != outer * width) throw bridge_error("destination size does not match the array");
      if (!c.bytes) continue;
      size_t offset;
      {
        std::lock_guard<std::mutex> g(st.lock);
        if (!c.dst || !find_locked(st, c.dst, c.bytes, &offset))
          throw bridge_error("destination is not device memory of this EP");
      }
      planned.push_back({c.src, -1, c.dst, width, outer, pitch, width, false});
    }
    mx::Stream stream = mx::to_stream(scope_dev(s));
    auto prim = std::make_shared<program_copies>(stream, "EpCopyIntoDevice", std::move(planned));
    return mx::array(mx::Shape{1}, mx::uint8, std::move(prim), std::move(inputs));
  });
}

int mlxb_pad_inputs(mlxb_scope *s, mlxb_array **arrays, const int *axes, int n, int64_t pad) {
  return guard_status(s, "mlxb_pad_inputs", [&] {
    if (n < 0 || (n && (!arrays || !axes)) || pad < 0) throw bridge_error("invalid padding list");
    bool in_program = pad > 0 && mlxb_copy_into_device_available(s);
    std::vector<mx::array> ins;
    std::vector<mx::Shape> shapes;
    std::vector<mx::Dtype> dtypes;
    std::vector<program_copy> copies;
    std::vector<int> which;
    for (int i = 0; i < n; i++) {
      if (axes[i] < 0) continue;
      if (!arrays[i]) throw null_arg{};
      const mx::array &x = arr(arrays[i]);
      int axis = axes[i];
      bool takes = in_program && axis < static_cast<int>(x.ndim()) && x.size() > 0 && x.dtype() != mx::bool_ &&
                   (x.dtype() != mx::float64 || is_cpu_scope(s)) && x.status() == mx::array::Status::available &&
                   x.flags().row_contiguous;
      if (!takes) { /* binding time: a queued pad is filled by mlxb_device_prepare, which comes next */
        std::optional<mx::array> queued;
        if (axis < static_cast<int>(x.ndim())) queued = queue_pad(s, x, axis, pad);
        mlxb_array *padded = queued ? scope_keep(s, std::move(*queued)) : mlxb_pad_axis(s, arrays[i], axis, pad);
        if (!padded) throw bridge_error(s->error);
        arrays[i] = padded;
        continue;
      }
      padded_layout l = pad_layout(x, axis, pad);
      int k = static_cast<int>(ins.size());
      copies.push_back({k, k, nullptr, l.width, l.outer, l.width, l.pitch, true});
      ins.push_back(x);
      shapes.push_back(std::move(l.shape));
      dtypes.push_back(x.dtype());
      which.push_back(i);
    }
    if (ins.empty()) return;
    mx::Stream stream = mx::to_stream(scope_dev(s));
    auto prim = std::make_shared<program_copies>(stream, "EpPadInputs", std::move(copies));
    std::vector<mx::array> padded = mx::array::make_arrays(std::move(shapes), dtypes, std::move(prim), std::move(ins));
    for (size_t k = 0; k < which.size(); k++) arrays[which[k]] = scope_keep(s, padded[k]);
  });
}

int mlxb_device_prepare(mlxb_scope *s) {
  return guard_status(s, "mlxb_device_prepare", [&] {
    if (s->pads.empty()) return;
    device_state &st = state();
    std::vector<queued_copy> pads = std::move(s->pads);
    s->pads.clear();
    if (st.kind == backend::host) {
      for (const queued_copy &c : pads)
        for (size_t r = 0; r < c.height; r++) {
          char *to = static_cast<char *>(c.to) + r * c.dst_pitch;
          std::memcpy(to, static_cast<const char *>(c.from) + r * c.src_pitch, c.width);
          std::memset(to + c.width, 0, c.dst_pitch - c.width);
        }
      return;
    }
    context_scope ctx(st);
    try {
      queue_copies(st, pads);
    } catch (...) {
      finish_copies(st);
      throw;
    }
    finish_copies(st); /* MLX's stream reads them next */
  });
}

int mlxb_device_finish(mlxb_scope *s) {
  return guard_status(s, "mlxb_device_finish", [&] {
    device_state &st = state();
    if (st.kind != backend::cuda) return;
    context_scope ctx(st);
    try {
      queue_copies(st, s->copies);
    } catch (...) {
      finish_copies(st); /* whatever was queued ends before the arrays go */
      s->copies.clear();
      throw;
    }
    s->copies.clear();
    finish_copies(st);
  });
}
