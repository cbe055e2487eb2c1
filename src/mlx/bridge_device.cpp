/* Device memory: MLX's GPU memory handed to ORT, so that a caller's IOBinding (or ORT between
 * two fused nodes) keeps tensors on the GPU and the EP binds them without a copy.
 *
 * Allocations come from MLX's own allocator, so an ORT buffer *is* an MLX buffer: binding it as
 * an input wraps it (no copy), and MLX may read it from any stream. On CUDA, MLX's allocator hands
 * out unified (managed) memory for such buffers, which its kernels read at device speed once the
 * pages live on the GPU, and which stays valid whatever MLX does with it (reading it on the host
 * never moves it). Copies (ORT's data transfer, results into ORT's output buffers) go through the
 * CUDA runtime that libmlx already loaded, found with dlopen(RTLD_NOLOAD): the library needs no
 * CUDA headers or toolkit to build, and the same binary runs on CPU-only MLX.
 *
 * Where the results live: a GPU kernel's output is device memory (MLX's CudaBuffer with
 * device >= 0). Its address is read from MLX's buffer record without asking MLX for a host
 * pointer, which would migrate it to unified memory (a copy). The layout of that record is
 * MLX 0.32's {data, size, device}; it is checked once at start on a buffer we allocate, and any
 * mismatch turns device memory off (the EP then works in host memory, as before). */
#include <dlfcn.h>

#include <atomic>
#include <map>
#include <mutex>

#include "mlx/bridge_internal.h"

using namespace mlxb_detail;

namespace {

/* MLX 0.32's cu::CudaBuffer, read (never written) to find a buffer's device address. */
struct cuda_buffer_record {
  void *data;
  size_t size;
  int device; /* -1: unified (managed) memory */
};

enum { CUDA_MEMCPY_DEFAULT = 4 }; /* cudaMemcpyDefault: direction from the unified address space */

struct cuda_runtime {
  int (*memcpy_async)(void *, const void *, size_t, int, void *);
  int (*memcpy_2d_async)(void *, size_t, const void *, size_t, size_t, size_t, int, void *);
  int (*stream_synchronize)(void *);
  const char *(*error_string)(int);
};

struct allocation {
  mx::allocator::Buffer buffer;
  size_t bytes;
};

struct device_state {
  std::atomic<bool> ready{false};
  cuda_runtime cuda{};
  std::mutex lock;
  std::map<uintptr_t, allocation> live; /* base address -> allocation */
};

device_state &state() {
  static device_state *s = new device_state(); /* never destroyed: ORT may free after exit starts */
  return *s;
}

bool load_cuda_runtime(cuda_runtime *rt) {
  const char *names[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so"};
  void *lib = nullptr;
  for (const char *n : names)
    if ((lib = dlopen(n, RTLD_NOW | RTLD_NOLOAD))) break;
  if (!lib) return false;
  rt->memcpy_async = reinterpret_cast<decltype(rt->memcpy_async)>(dlsym(lib, "cudaMemcpyAsync"));
  rt->memcpy_2d_async = reinterpret_cast<decltype(rt->memcpy_2d_async)>(dlsym(lib, "cudaMemcpy2DAsync"));
  rt->stream_synchronize = reinterpret_cast<decltype(rt->stream_synchronize)>(dlsym(lib, "cudaStreamSynchronize"));
  rt->error_string = reinterpret_cast<decltype(rt->error_string)>(dlsym(lib, "cudaGetErrorString"));
  return rt->memcpy_async && rt->memcpy_2d_async && rt->stream_synchronize && rt->error_string;
}

/* Whether MLX's buffer records have the layout we read, on a buffer of our own. */
bool record_layout_matches() {
  mx::allocator::Buffer b = mx::allocator::allocator().malloc(64);
  if (!b.ptr()) return false;
  const auto *rec = static_cast<const cuda_buffer_record *>(b.ptr());
  bool ok = rec->size >= 64 && rec->device == -1 && rec->data == b.raw_ptr();
  mx::allocator::allocator().free(b);
  return ok;
}

bool init_device_memory(device_state &s) {
  if (!mx::is_available(mx::Device::gpu) || mx::metal::is_available()) return false;
  if (!load_cuda_runtime(&s.cuda)) return false;
  return record_layout_matches();
}

void cuda_check(const device_state &s, int rc, const char *what) {
  if (rc) throw bridge_error(std::string(what) + ": " + s.cuda.error_string(rc));
}

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

/* The device address of an evaluated array's first element (no migration to the host). */
const char *device_address(const mx::array &a) {
  const auto *rec = static_cast<const cuda_buffer_record *>(a.buffer().ptr());
  if (!rec || !rec->data) throw bridge_error("array has no buffer");
  return static_cast<const char *>(rec->data) + a.offset();
}

mx::array evaluated_row_major_on(mlxb_scope *s, const mx::array &a) {
  mx::array src = a;
  src.eval();
  if (!src.flags().row_contiguous) {
    src = mx::contiguous(src, false, scope_dev(s));
    src.eval();
    if (!src.flags().row_contiguous) throw bridge_error("array is not row-contiguous after contiguous()");
  }
  return src;
}

} // namespace

bool mlxb_device_memory_available(void) {
  device_state &s = state();
  static std::once_flag once;
  try {
    std::call_once(once, [&] { s.ready = init_device_memory(s); });
  } catch (...) {
    return false;
  }
  return s.ready;
}

void *mlxb_device_alloc(size_t bytes) {
  if (!mlxb_device_memory_available()) return nullptr;
  device_state &s = state();
  try {
    size_t want = bytes ? bytes : 1; /* ORT expects distinct non-NULL blocks */
    mx::allocator::Buffer b = mx::allocator::allocator().malloc(want);
    const auto *rec = static_cast<const cuda_buffer_record *>(b.ptr());
    if (!rec || !rec->data) return nullptr;
    std::lock_guard<std::mutex> g(s.lock);
    s.live.emplace(reinterpret_cast<uintptr_t>(rec->data), allocation{b, want});
    return rec->data;
  } catch (...) {
    return nullptr;
  }
}

void mlxb_device_free(void *p) {
  if (!p) return;
  device_state &s = state();
  try {
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
    for (size_t i = 0; i < n; i++)
      if (bytes[i]) cuda_check(s, s.cuda.memcpy_async(dst[i], src[i], bytes[i], CUDA_MEMCPY_DEFAULT, nullptr), "cudaMemcpyAsync");
    /* ORT may hand the destination to anyone next (the host, another stream): finish here. */
    cuda_check(s, s.cuda.stream_synchronize(nullptr), "cudaStreamSynchronize");
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
    if (n == 0) return mx::zeros(shape, type, scope_dev(s));
    size_t bytes = n * type.size(), offset = 0;
    device_state &st = state();
    std::lock_guard<std::mutex> g(st.lock);
    const allocation *a = find_locked(st, data, bytes, &offset);
    if (!a) throw bridge_error("buffer is not device memory of this EP");
    /* MLX never frees it (the deleter does nothing): ORT owns the buffer and frees it through us. */
    mx::allocator::Data view(a->buffer, [](mx::allocator::Buffer) {});
    if (offset == 0 && a->bytes == bytes) return mx::array(std::move(view), std::move(shape), type);
    mx::array whole(std::move(view), mx::Shape{static_cast<int>(a->bytes)}, mx::uint8);
    mx::array part = mx::slice(whole, {static_cast<int>(offset)}, {static_cast<int>(offset + bytes)}, scope_dev(s));
    return mx::reshape(mx::view(part, type, scope_dev(s)), std::move(shape), scope_dev(s));
  });
}

mlxb_array *mlxb_pad_axis(mlxb_scope *s, const mlxb_array *a, int axis, int64_t pad) {
  return guard(s, "mlxb_pad_axis", [&] {
    const mx::array &x = arr(a);
    if (axis < 0 || axis >= static_cast<int>(x.ndim()) || pad < 0) throw bridge_error("invalid padding axis");
    std::vector<std::pair<int, int>> widths(x.ndim(), {0, 0});
    widths[axis].second = to_i32(pad, "padding");
    return mx::pad(x, widths, mx::array(0, x.dtype()), "constant", scope_dev(s));
  });
}

int mlxb_write_device(mlxb_scope *s, const mlxb_array *a, int axis, int64_t keep, void *dst, size_t bytes) {
  return guard_status(s, "mlxb_write_device", [&] {
    device_state &st = state();
    if (!st.ready) throw bridge_error("no device memory");
    const mx::array &in = arr(a);
    size_t want = in.size() * in.itemsize();
    if (want == 0 && bytes == 0) return;
    if (!dst) throw bridge_error("null destination");
    mx::array src = evaluated_row_major_on(s, in);
    const char *from = device_address(src);
    if (axis < 0) {
      if (bytes != want) throw bridge_error("destination size does not match the array");
      cuda_check(st, st.cuda.memcpy_async(dst, from, bytes, CUDA_MEMCPY_DEFAULT, nullptr), "cudaMemcpyAsync");
    } else {
      if (axis >= static_cast<int>(src.ndim()) || keep < 0 || keep > src.shape(axis))
        throw bridge_error("prefix outside the array");
      size_t outer = 1, row = src.itemsize();
      for (int k = 0; k < axis; k++) outer *= static_cast<size_t>(src.shape(k));
      for (int k = axis + 1; k < static_cast<int>(src.ndim()); k++) row *= static_cast<size_t>(src.shape(k));
      size_t have = row * static_cast<size_t>(src.shape(axis)), take = row * static_cast<size_t>(keep);
      if (bytes != outer * take) throw bridge_error("destination size does not match the prefix");
      if (bytes)
        cuda_check(st, st.cuda.memcpy_2d_async(dst, take, from, have, take, outer, CUDA_MEMCPY_DEFAULT, nullptr),
                   "cudaMemcpy2DAsync");
    }
  });
}

int mlxb_device_finish(mlxb_scope *s) {
  return guard_status(s, "mlxb_device_finish", [&] {
    device_state &st = state();
    if (st.ready) cuda_check(st, st.cuda.stream_synchronize(nullptr), "cudaStreamSynchronize");
  });
}
