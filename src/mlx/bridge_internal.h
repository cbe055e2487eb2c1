/* Internals of the bridge shared by its C++ files (bridge*.cpp): the scope's definition and the
 * helpers that turn exceptions into the scope's sticky error. Never included from C. */
#ifndef EP_MLX_BRIDGE_INTERNAL_H
#define EP_MLX_BRIDGE_INTERNAL_H

#include <cstdlib>
#include <cstring>
#include <future>
#include <deque>
#include <exception>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "mlx/bridge.h"
#include "mlx/fast.h"
#include "mlx/mlx.h"
#include "mlx/primitives.h"

namespace mx = mlx::core;

/* An arange a scope already built: its arguments and the scope's array. */
struct arange_made {
  double start, stop, step;
  mx::Dtype type;
  bool on_cpu;
  mlxb_array *array;
};

/* One copy of `height` rows of `width` bytes out of an evaluated array into a device buffer,
 * queued by mlxb_write_device until mlxb_device_finish (the array kept alive until then). */
struct queued_copy {
  mx::array src;
  const void *from;
  void *to;
  size_t width, height, src_pitch, dst_pitch;
  bool zero_tail; /* each destination row's bytes [width, dst_pitch) zeroed (a padded input) */
};

struct mlxb_scope {
  std::deque<mx::array> arrays;     /* owned arrays; a deque never moves its elements */
  std::vector<queued_copy> copies; /* device copies queued for mlxb_device_finish */
  std::vector<queued_copy> pads;   /* padded device inputs queued for mlxb_device_prepare */
  mx::Device device;                /* where ops of this scope run */
  bool force_cpu;                   /* run later ops on the CPU whatever the device */
  std::string error;                /* first error; empty when ok */
  std::vector<arange_made> aranges; /* mlxb_arange's results, handed out again for the same arguments */

  explicit mlxb_scope(mx::Device d) : device(d), force_cpu(false) {}
};

namespace mlxb_detail {

/* The GPU's process-wide lock (mlxb_exclusive_begin), for ORT's calls into the EP's device memory:
 * their driver calls (copies on the legacy stream, its synchronization, allocations and frees) must
 * not fall inside another thread's Run. MLX captures some launches in cudaStreamCaptureModeGlobal,
 * which such a call from any thread invalidates, and checks the capture's end in a destructor: the
 * process terminates (8 threads on the H200, 2026-12-06). */
struct gpu_exclusive {
  gpu_exclusive() { mlxb_exclusive_begin(MLXB_DEVICE_GPU); }
  ~gpu_exclusive() { mlxb_exclusive_end(MLXB_DEVICE_GPU); }
  gpu_exclusive(const gpu_exclusive &) = delete;
  gpu_exclusive &operator=(const gpu_exclusive &) = delete;
};

/* Thrown inside a bridge function when a required array argument is NULL. */
struct null_arg {};

/* Thrown for argument errors the bridge itself detects. */
struct bridge_error : std::exception {
  std::string msg;
  explicit bridge_error(std::string m) : msg(std::move(m)) {}
  const char *what() const noexcept override { return msg.c_str(); }
};

inline void scope_fail(mlxb_scope *s, const char *fn, const char *what) {
  if (!s || !s->error.empty()) return;
  try {
    s->error = std::string(fn) + ": " + (what && *what ? what : "unknown error");
  } catch (...) {
  }
}

inline void scope_fail_null(mlxb_scope *s, const char *fn) {
  if (!s || !s->error.empty()) return;
  try {
    s->error = std::string("null array argument to ") + fn;
  } catch (...) {
  }
}

inline mx::StreamOrDevice scope_dev(const mlxb_scope *s) {
  if (s->force_cpu) return mx::Device(mx::Device::cpu);
  return s->device;
}

/* A scope whose ops run on MLX's CPU (a CPU scope, or a GPU scope forced there). */
inline bool is_cpu_scope(const mlxb_scope *s) { return s->force_cpu || s->device == mx::Device(mx::Device::cpu); }

/* A scope whose ops run on MLX's CUDA backend (a GPU scope where Metal is not MLX's GPU). */
inline bool is_cuda_gpu(const mlxb_scope *s) {
  return !s->force_cpu && s->device == mx::Device(mx::Device::gpu) && !mx::metal::is_available();
}

/* Where work on arrays of dtype t runs: the one place that knows which dtypes MLX's GPU cannot
 * take. MLX has no float64 on any GPU: it refuses, when the op is built, every op on a GPU stream
 * with a float64 input or output ("float64 is not supported on the GPU"). The runtime already
 * lowers nodes that touch float64 on the CPU (force_cpu); this covers the bridge's own work on
 * float64 arrays outside such nodes on a GPU scope: inputs bound, padded or wrapped, outputs made
 * row-major and copied out (and, through scatter_dev, the scatter family). MLX orders work across
 * its CPU and GPU streams within one graph, and on CUDA both use the same unified memory. On a CPU
 * scope this is always the CPU, as before. */
inline mx::StreamOrDevice dtype_dev(const mlxb_scope *s, mx::Dtype t) {
  if (t == mx::float64) return mx::Device(mx::Device::cpu);
  return scope_dev(s);
}

/* Where a scatter-family op (scatter*, put_along_axis, scatter_add_axis) into an array of dtype t
 * runs: MLX's scatter also refuses 8-byte elements on a GPU stream when the op is built ("[scatter]
 * GPU scatter does not yet support int64 for the input or updates"; its test is the item size:
 * int64, uint64, float64, complex64), so those run on the CPU. put_along_axis and scatter_add_axis
 * have no such check in MLX 0.32, but they follow the same rule rather than rely on 8-byte GPU
 * scatter kernels that MLX's own scatter does not use. */
inline mx::StreamOrDevice scatter_dev(const mlxb_scope *s, mx::Dtype t) {
  if (t.size() == 8) return mx::Device(mx::Device::cpu);
  return dtype_dev(s, t);
}

inline const mx::array &arr(const mlxb_array *a) {
  if (!a) throw null_arg{};
  return *reinterpret_cast<const mx::array *>(a);
}

inline std::optional<mx::array> opt(const mlxb_array *a) {
  if (!a) return std::nullopt;
  return *reinterpret_cast<const mx::array *>(a);
}

/* An op result with no elements is kept as an already-materialized empty array: MLX's CUDA
 * kernels were launched with empty grids for such results and killed the process (SIGFPE in
 * the launch arithmetic); an empty result needs no computation on any device. */
inline mx::array materialize_if_empty(mx::array a) {
  if (a.size() != 0 || !a.has_primitive()) return a;
  return mx::array(mx::allocator::malloc(0), a.shape(), a.dtype());
}

inline mlxb_array *scope_keep(mlxb_scope *s, mx::array a) {
  s->arrays.push_back(materialize_if_empty(std::move(a)));
  return reinterpret_cast<mlxb_array *>(&s->arrays.back());
}

/* MLX refuses, as an array is built, any op on a GPU stream with a float64 input or output. */
inline bool is_gpu_float64_refusal(const mlxb_scope *s, const std::invalid_argument &e) {
  return !s->force_cpu && s->device == mx::Device::gpu &&
         std::strstr(e.what(), "float64 is not supported on the GPU") != nullptr;
}

/* Builds f's op on the CPU stream: the same computation, which MLX orders after the GPU work it
 * reads (both streams share memory on CUDA and Metal). */
template <class F>
inline mx::array build_on_cpu(mlxb_scope *s, F &&f) {
  s->force_cpu = true;
  try {
    mx::array a = f();
    s->force_cpu = false;
    return a;
  } catch (...) {
    s->force_cpu = false;
    throw;
  }
}

/* Runs f (returning an mx::array) and keeps its result in s; errors become s's error. An op that
 * touches float64 on a GPU scope (a lowering's float64 intermediate: Pow of mixed types, say) is
 * built again on the CPU stream rather than refused: MLX checks dtypes before any work is queued. */
template <class F>
inline mlxb_array *guard(mlxb_scope *s, const char *fn, F &&f) noexcept {
  if (!s) return nullptr;
  try {
    try {
      return scope_keep(s, f());
    } catch (const std::invalid_argument &e) {
      if (!is_gpu_float64_refusal(s, e)) throw;
    }
    return scope_keep(s, build_on_cpu(s, f));
  } catch (const null_arg &) {
    scope_fail_null(s, fn);
  } catch (const std::exception &e) {
    scope_fail(s, fn, e.what());
  } catch (...) {
    scope_fail(s, fn, "unknown exception");
  }
  return nullptr;
}

/* Runs f (returning void) and maps errors to -1. */
template <class F>
inline int guard_status(mlxb_scope *s, const char *fn, F &&f) noexcept {
  if (!s) return -1;
  try {
    f();
    return 0;
  } catch (const null_arg &) {
    scope_fail_null(s, fn);
  } catch (const std::exception &e) {
    scope_fail(s, fn, e.what());
  } catch (...) {
    scope_fail(s, fn, "unknown exception");
  }
  return -1;
}

inline mx::Dtype to_mx(mlxb_dtype t) {
  switch (t) {
  case MLXB_BOOL: return mx::bool_;
  case MLXB_U8: return mx::uint8;
  case MLXB_U16: return mx::uint16;
  case MLXB_U32: return mx::uint32;
  case MLXB_U64: return mx::uint64;
  case MLXB_I8: return mx::int8;
  case MLXB_I16: return mx::int16;
  case MLXB_I32: return mx::int32;
  case MLXB_I64: return mx::int64;
  case MLXB_F16: return mx::float16;
  case MLXB_BF16: return mx::bfloat16;
  case MLXB_F32: return mx::float32;
  case MLXB_F64: return mx::float64;
  case MLXB_C64: return mx::complex64;
  default: break;
  }
  throw bridge_error("unknown dtype " + std::to_string(static_cast<int>(t)));
}

inline mlxb_dtype from_mx(mx::Dtype t) {
  switch (t.val()) {
  case mx::Dtype::Val::bool_: return MLXB_BOOL;
  case mx::Dtype::Val::uint8: return MLXB_U8;
  case mx::Dtype::Val::uint16: return MLXB_U16;
  case mx::Dtype::Val::uint32: return MLXB_U32;
  case mx::Dtype::Val::uint64: return MLXB_U64;
  case mx::Dtype::Val::int8: return MLXB_I8;
  case mx::Dtype::Val::int16: return MLXB_I16;
  case mx::Dtype::Val::int32: return MLXB_I32;
  case mx::Dtype::Val::int64: return MLXB_I64;
  case mx::Dtype::Val::float16: return MLXB_F16;
  case mx::Dtype::Val::bfloat16: return MLXB_BF16;
  case mx::Dtype::Val::float32: return MLXB_F32;
  case mx::Dtype::Val::float64: return MLXB_F64;
  case mx::Dtype::Val::complex64: return MLXB_C64;
  }
  return MLXB_DTYPE_COUNT;
}

inline int32_t to_i32(int64_t v, const char *what) {
  if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
    throw bridge_error(std::string(what) + " " + std::to_string(v) + " does not fit in int32");
  return static_cast<int32_t>(v);
}

inline mx::Shape to_shape(const int64_t *dims, int rank) {
  if (rank < 0) throw bridge_error("negative rank");
  if (rank > 0 && !dims) throw bridge_error("null dims");
  mx::Shape shape;
  for (int i = 0; i < rank; i++) {
    if (dims[i] < 0) throw bridge_error("negative dimension " + std::to_string(dims[i]));
    shape.push_back(to_i32(dims[i], "dimension"));
  }
  return shape;
}

inline std::vector<int> to_ints(const int *v, int n) {
  if (n < 0) throw bridge_error("negative count");
  if (n > 0 && !v) throw bridge_error("null list");
  return std::vector<int>(v, v + n);
}

inline std::vector<mx::array> to_arrays(const mlxb_array *const *xs, int n) {
  if (n < 0) throw bridge_error("negative count");
  if (n > 0 && !xs) throw null_arg{};
  std::vector<mx::array> out;
  out.reserve(n);
  for (int i = 0; i < n; i++) out.push_back(arr(xs[i]));
  return out;
}

/* a evaluated, as a row-major buffer (copied only when a is a strided view); bridge.cpp. */
mx::array evaluated_row_major(mlxb_scope *s, const mx::array &a);

/* GatherBlockQuantized as one task on MLX's CPU stream (bridge_cpu_qgemv.cpp), with mlxb_gather_bq's
 * arguments checked by it: out `shape` in the scales' dtype, rest the data's middle axes' product,
 * zpd the zero points' bytes a row. */
mx::array cpu_gather_bq(const mlxb_scope *s, const mx::array &data, const mx::array &indices, const mx::array &scales,
                        const std::optional<mx::array> &zero_points, int bits, int64_t block, mx::Shape shape,
                        int64_t rest, int64_t zpd);

/* One of our CUDA kernels (bridge_kernels*.cpp) in MLX's custom-kernel form: the body reads its
 * inputs and writes its outputs by these names, and <input>_shape[] where it needs a shape. */
struct cuda_kernel_spec {
  const char *name; /* base name; a hash of what is compiled is appended */
  std::vector<std::string> inputs, outputs;
  const char *source;
  const char *header;
  bool row_contiguous; /* inputs made row-major before the launch */
};
using cuda_template_args = std::vector<std::pair<std::string, mx::fast::TemplateArg>>;

/* Launches kernel k on s's GPU (bridge_kernel_cache.cpp): compiled once per machine and kept on disk
 * when NVRTC and the CUDA headers are at hand, else through MLX's per-process JIT. grid counts
 * threads, as in MLX's custom kernels. Bit i of `unused` marks output i as one this launch never
 * writes (a kernel's outputs are fixed by its source; a variant may leave some alone): launched
 * by our own primitive, such an output is no array at all (the kernel gets a null pointer and
 * checks it), and the result holds an empty placeholder in its place, which callers never read. */
std::vector<mx::array> run_cuda_kernel(const cuda_kernel_spec &k, const std::vector<mx::array> &inputs,
                                       const std::vector<mx::Shape> &out_shapes,
                                       const std::vector<mx::Dtype> &out_dtypes, std::tuple<int, int, int> grid,
                                       std::tuple<int, int, int> block, const cuda_template_args &targs,
                                       const mlxb_scope *s, uint32_t unused = 0);
/* The compute capability's major number of s's GPU (9 on an H200), 0 when the driver cannot say or
 * s is no GPU scope (bridge_kernel_cache.cpp). */
int gpu_compute_major(const mlxb_scope *s);
/* An environment switch that is on unless set to 0 or off (read by the caller once). */
inline bool env_switch_on(const char *name) {
  const char *v = std::getenv(name);
  return !v || (std::strcmp(v, "0") && std::strcmp(v, "off"));
}
/* An opt-in environment switch: on only when set to 1 (read by the caller once). */
inline bool env_opt_in(const char *name) {
  const char *v = std::getenv(name);
  return v && !std::strcmp(v, "1");
}
/* An environment number (a count or a size in bytes; read by the caller once, which clamps it):
 * fallback when unset, empty or not a whole decimal number. */
inline long long env_number(const char *name, long long fallback) {
  const char *v = std::getenv(name);
  if (!v || !*v) return fallback;
  char *end = nullptr;
  long long n = std::strtoll(v, &end, 10);
  return *end ? fallback : n;
}

/* MLX 0.32's cu::CudaBuffer, what an array's buffer pointer points at on MLX's CUDA backend: read
 * (never written) for device addresses, after cuda_buffer_layout_matches() said it is this. */
struct cuda_buffer_record {
  void *data;
  size_t size;
  int device; /* -1: unified (managed) memory */
};

/* Whether MLX's buffer records have that layout, on a buffer of our own (bridge_device.cpp). */
bool cuda_buffer_layout_matches();

/* Takes every block of MLX's CUDA scalar pool once per process (bridge_device.cpp), so that buffers
 * of at most 8 bytes come from MLX's ordinary unified memory. */
void drain_scalar_pool();

/* The device address of a's first element, from its buffer record. */
inline char *cuda_buffer_address(const mx::array &a) {
  const auto *rec = static_cast<const cuda_buffer_record *>(a.buffer().ptr());
  if (!rec || !rec->data) throw bridge_error("array has no buffer");
  return static_cast<char *>(rec->data) + a.offset();
}

/* Whether x is row-major by construction before it is evaluated: the output of one of our kernels
 * (MLX's CustomKernel, our EpCudaKernel and our CPU primitives, EpCpu*, all allocate their outputs
 * row-major), a reshape, cast, expand or squeeze of such an array on the CPU (MLX's CPU forms keep a
 * row-major input's layout), an evaluated row-contiguous array, or a single element. A Contiguous operation on such an
 * array would copy nothing and still cost an operation per Run. */
inline bool row_major_by_construction(const mx::array &x, int depth = 0) {
  if (x.size() <= 1) return true;
  if (x.has_primitive()) {
    const char *name = x.primitive().name();
    if (!std::strcmp(name, "CustomKernel") || !std::strcmp(name, "EpCudaKernel") || !std::strncmp(name, "EpCpu", 5))
      return true;
    /* the CPU forms of these, as MLX 0.32.4's source writes them; the GPU's are not relied on */
    bool keeps_layout = (!std::strcmp(name, "Reshape") || !std::strcmp(name, "AsType") ||
                         !std::strcmp(name, "ExpandDims") || !std::strcmp(name, "Squeeze")) &&
                        x.primitive().stream().device == mx::Device::cpu;
    return keeps_layout && depth < 4 && x.inputs().size() == 1 && row_major_by_construction(x.inputs()[0], depth + 1);
  }
  return x.is_available() && x.flags().row_contiguous;
}

/* x row-major, without an operation where it is one by construction. */
inline mx::array row_major(const mx::array &x, mx::StreamOrDevice dev) {
  return row_major_by_construction(x) ? x : mx::contiguous(x, false, dev);
}

/* A quantized weight set's third array: MLX's float32 biases [N, groups] (w = scale * q + bias),
 * or, where the EP's CPU kernels read the weights, uint8 zero points z [N or 1, groups] (w =
 * scale * (q - z), ORT's dequantization, a quarter of the biases' bytes or fewer). zero_points_fit
 * says whether z fits scales; affine_biases gives MLX's biases for either (-scale * z, as
 * MatMulNBits' lowering computes them), for MLX's own quantized operations. */
bool zero_points_fit(const mx::array &zero_points, const mx::array &scales);
mx::array affine_biases(const mx::array &scales, const mx::array &third, mx::StreamOrDevice dev);

/* Rows of float32 times 4-bit affine weights [N, K/8] (transposed, float32 scales, biases or zero
 * points, groups of a multiple of 32) on an x86-64 CPU scope with AVX2 and FMA: our own CPU kernel
 * (bridge_cpu_qgemv.cpp) rather than MLX's quantized matmul. takes() says whether it applies. */
bool cpu_qgemv_takes(const mlxb_scope *s, const mx::array &x, const mx::array &w, const mx::array &scales,
                     const std::optional<mx::array> &biases, bool transpose, int group, int bits);
mx::array cpu_qgemv(const mlxb_scope *s, const mx::array &x, const mx::array &w, const mx::array &scales,
                    const mx::array &biases, int group);

/* fn over [0, n) shared out between the calling thread and our CPU helper threads
 * (bridge_cpu_pool.cpp: each part a contiguous range, the caller's the first; under 256 units, or
 * without helpers, the caller alone), returning when every part is done. For tasks on MLX's CPU
 * stream; one such call at a time runs, others wait. cpu_pool_start starts the helpers (where a
 * primitive is built: a failure there is the bridge's error, not a task's). */
using column_fn = void (*)(const void *ctx, int64_t lo, int64_t hi);
void cpu_parallel_for(int64_t n, column_fn fn, const void *ctx);
void cpu_pool_start();

/* rows(first, last) over the rows [0, n) a part holds, the rows shared out by cpu_parallel_for as
 * ROW_UNITS units each (a row belongs to the part holding its first unit, so the parts' rows are
 * disjoint and cover them all; more units a row, fewer rows before the pool shares them); with
 * share false, the calling thread takes them all. */
template <int64_t ROW_UNITS = 64, typename F>
void cpu_parallel_rows(int64_t n, bool share, const F &rows) {
  if (!share) return rows(int64_t{0}, n);
  column_fn part = [](const void *ctx, int64_t lo, int64_t hi) {
    const int64_t first = (lo + ROW_UNITS - 1) / ROW_UNITS, last = (hi + ROW_UNITS - 1) / ROW_UNITS;
    if (first < last) (*static_cast<const F *>(ctx))(first, last);
  };
  cpu_parallel_for(n * ROW_UNITS, part, &rows);
}

/* mx::concatenate(parts, axis) on s's device; on a CPU scope, as one EpCpuConcat task where the
 * parts are joined row by row (bridge_cpu_concat.cpp). */
mx::array cpu_concatenate(const mlxb_scope *s, const std::vector<mx::array> &parts, int axis);

/* Up to three sets of 4-bit weights (w, scales, biases each, in `sets`) times one float32 x [..., K]
 * in one CPU task, each output optionally plus a bias [N] in float32, and with swiglu the gated
 * MLP's activation after two sets (bridge_cpu_qgemv.cpp): mlxb_qgemv_sets' and mlxb_qgemv_swiglu's
 * outputs, in their CUDA kernel's order, on a CPU scope. takes() says whether it applies. */
bool cpu_qgemv_sets_takes(const mlxb_scope *s, mx::Dtype t, int bits, int group);
std::vector<mx::array> cpu_qgemv_sets(const mlxb_scope *s, const mx::array &x, const std::vector<mx::array> &sets,
                                      const std::vector<std::optional<mx::array>> &adds, int group, bool swiglu);

/* The packed GEMM's panel (bridge_cpu_gemm.cpp): B's columns 32 at a time, K-major ([K][32]).
 * cpu_gemm_panel: C[m, cols] (row stride ldc) = A [m, k] (row-major) times one panel, cols <= 32
 * of its columns (scratch: m * 32 floats when cols < 32, else unused). For kernels that make their
 * panels as they go (the 4-bit product of many rows dequantizes into them); only where
 * cpu_avx512_available(). */
enum { CPU_GEMM_PANEL_COLS = 32 };
void cpu_gemm_panel(const float *a, int64_t m, int64_t k, const float *panel, float *c, int64_t ldc, int64_t cols,
                    float *scratch);

/* Exp, Erf and Sigmoid of float32 on the CPU with AVX2 and FMA: MLX's own arithmetic, bit for bit,
 * without its calls into libm's fmaf (bridge_cpu_unary.cpp). takes() says whether it applies. */
bool cpu_unary_takes(mlxb_unary_op op, const mx::array &x, mx::StreamOrDevice d);
mx::array cpu_unary(mlxb_unary_op op, const mx::array &x, mx::StreamOrDevice d);
/* The same for a float32 softmax over the last axis (EpCpuSoftmax): MLX's result, bit for bit. */
bool cpu_softmax_takes(const mx::array &x, const std::vector<int> &axes, mx::StreamOrDevice d);
bool cpu_softmax_on(); /* the primitive exists here (x86-64, AVX2 and FMA, not switched off) */
mx::array cpu_softmax(const mx::array &x, mx::StreamOrDevice d);
/* A float32 LayerNormalization over the last axis, weight and bias float32 [hidden] or absent
 * (EpCpuLayerNorm): MLX's composition of mx::fast::layer_norm in one task, rows shared with the
 * pool's helpers. */
bool cpu_layer_norm_takes(const mx::array &x, const std::optional<mx::array> &w, const std::optional<mx::array> &b,
                          mx::StreamOrDevice d);
mx::array cpu_layer_norm(const mlxb_scope *s, const mx::array &x, const std::optional<mx::array> &w,
                         const std::optional<mx::array> &b, float eps);

/* The decode step's shared helpers (bridge_kernels_attention.cpp), for its CUDA kernels and its CPU
 * primitives (bridge_cpu_decode.cpp) alike: a small offset as a kernel parameter (throws past
 * +-2^20); the rotary embedding as the kernels read it (positions one integer per sequence, cos
 * and sin caches [max_position, dims / 2]; one-element placeholders and dims 0 without one); a
 * per-sequence integer array; a step's new rows [B, H, 1, D] or [B, 1, H * D] checked. */
int small_offset(int64_t v, const char *what);
struct rope_inputs {
  mx::array pos, cos, sin;
  int dims, add;
  bool interleaved, per_row; /* per_row: positions hold one per new row (B * rows), not per sequence */
};
rope_inputs rope_for(const mlxb_rope *rope, int batch, int rows, int head, mx::Dtype t, mx::StreamOrDevice dev);
mx::array per_sequence(const mx::array &a, int batch, const char *what, mx::StreamOrDevice dev);
void check_step_rows(const mx::array &x, int b, int heads, int d, const char *what);
/* A step's S new rows: [B, S, H * D], or [B, H, 1, D] when S is 1; returns S. */
int check_new_rows(const mx::array &x, int b, int heads, int d, const char *what);
/* Which keys query rows see (mlxb_attn_rows, rows NULL: one causal decode row) as the kernels and
 * primitives take it. */
struct attn_span {
  int rows;
  bool first, causal, window_from_row;
};
attn_span span_of(const mlxb_attn_rows *rows);

/* The decode step's kernels as primitives of MLX's CPU stream (bridge_cpu_decode.cpp): the same
 * arithmetic as the CUDA kernels of bridge_kernels_attention.cpp (float32 inside, rounded once to T), for
 * float32, float16 and bfloat16 on a CPU scope (cpu_decode_takes; ORT_EP_MLX_CPU_DECODE=0: never).
 * Inputs are as the CUDA launches take them: caches already in q's dtype, lengths and positions any
 * integer dtype, one per sequence. */
bool cpu_decode_takes(const mlxb_scope *s, mx::Dtype t);
mx::array cpu_decode_attention(const mlxb_scope *s, const mx::array &q, const mx::array &k, const mx::array &v,
                               const mx::array &lens, int len_add, const attn_span &span, float scale, float softcap,
                               int window, const rope_inputs &rope);
/* past_rows: the past buffer's (0: past_k/past_v are placeholders, never read); at_zero: every at_b
 * is 0; dims: the present's batch, heads and head size */
struct kv_dims {
  int batch, heads, head;
};
std::pair<mx::array, mx::array> cpu_kv_append(const mlxb_scope *s, const mx::array &past_k, const mx::array &past_v,
                                              int past_rows, const mx::array &k, const mx::array &v, int rows,
                                              const mx::array &at, bool at_zero, int at_add, int plen,
                                              const kv_dims &dims, const rope_inputs &rope);
std::pair<mx::array, mx::array> cpu_rms_norm(const mlxb_scope *s, const mx::array &x, const std::optional<mx::array> &skip,
                                             const std::optional<mx::array> &bias, const mx::array &gamma, float eps,
                                             bool want_sum);

/* Eight-lane float32 exp, sigmoid, erf (MLX's arithmetic, bit for bit) and tanh (within 2 ulp) over
 * arrays on x86-64 with AVX2 and FMA (bridge_cpu_vmath.cpp). Call cpu_vmath only where
 * cpu_vmath_available() and cpu_vmath_has(op). */
bool cpu_vmath_available();
/* Whether our CPU kernels may take AVX-512's 16 lanes (AVX-512F here, unless
 * ORT_EP_MLX_CPU_AVX512=0): the quantized GEMV's. */
bool cpu_avx512_available();
bool cpu_vmath_has(mlxb_unary_op op);
void cpu_vmath(mlxb_unary_op op, const float *in, float *out, size_t n);
/* MLX's CPU softmax of float32 rows of m, bit for bit, its maximum and exponentials eight lanes at
 * a time (same conditions as cpu_vmath). */
void cpu_softmax_rows(const float *in, float *out, int64_t rows, int64_t m);

/* Our precompiled kernels launched by a primitive of our own (bridge_launch.cpp): ready on MLX's
 * CUDA backend when its encoder's symbols and the driver are found (ORT_EP_MLX_DIRECT_LAUNCH=0:
 * never). The kernel `name` of `cubin` is loaded at once; the launch takes the input pointers,
 * the output pointers (null for the outputs `unused` marks), then `scalars`, on grid/block as
 * MLX's custom kernels count them. */
bool direct_launch_ready();
/* A traced GPU program's outputs with its runs of our kernels (launched by the primitive above)
 * grouped into chains, each one MLX operation that launches its kernels in order
 * (ORT_EP_MLX_KERNEL_CHAINS=0: the outputs as they are; also where nothing is chained or the
 * direct launch path is closed). Called inside the trace, before MLX records it. */
std::vector<mx::array> chain_kernels(const std::vector<mx::array> &outputs);

/* A chain of operations of ours, as chain_operations hands it to the primitive that runs it: the
 * steps in the trace's order, each reading the chain's inputs (0 <= i < n_inputs), the trace's
 * constants the chain holds (n_inputs + c: constants[c]) or earlier steps' arrays (~slot), and
 * every array the steps make (slots): the chain's output `output`, or -1 where only the chain's own
 * steps read it (allocated when the chain runs). */
struct chain_step {
  std::shared_ptr<mx::Primitive> prim;
  std::vector<int> inputs;
  std::vector<int> outputs; /* the slots of the arrays this step makes, in its order */
};
struct chain_slot {
  mx::Shape shape;
  mx::Dtype dtype;
  int output;

  size_t bytes() const {
    size_t n = dtype.size();
    for (int d : shape) n *= static_cast<size_t>(d);
    return n;
  }
};
/* The trace's constants a chain's steps read (weights, scales, a step's scalars: materialized
 * arrays no operation makes), held by the chain rather than given to MLX as its inputs: MLX's
 * replay of a compiled program maps every input of every operation and its eval walks them all,
 * each Run (a Qwen2.5-0.5B decode step's chains read ~740 of them). */
struct chain_constants {
  std::shared_ptr<const std::vector<mx::array>> arrays = std::make_shared<const std::vector<mx::array>>();
  size_t n_inputs = 0; /* the chain's MLX inputs; step inputs from n_inputs on are constants */

  /* A step's input i (>= 0), given the chain's MLX inputs. */
  const mx::array &input(const std::vector<mx::array> &inputs, int i) const {
    size_t k = static_cast<size_t>(i);
    return k < n_inputs ? inputs.at(k) : arrays->at(k - n_inputs);
  }
};
struct chain_plan {
  std::vector<chain_step> steps;
  std::vector<chain_slot> slots;
  int n_internal = 0;
  chain_constants constants;
};
/* What a chain's primitive (GPU or CPU) tells the op histogram: its steps' names, counted beside
 * the chain's own (ORT_EP_MLX_OP_HISTOGRAM; tests read which operations a program computes). */
struct chain_members {
  virtual ~chain_members() = default;
  virtual std::vector<const char *> member_names() const = 0;
};
/* The traced outputs with the runs of operations `member` accepts (consecutive in dependency order,
 * one stream, at most 64 MiB of buffers and 512 operations, at most 8 arrays read outside) each
 * replaced by one operation of `make`'s primitive; `what` names them in ORT_EP_MLX_LOG_CHAINS's
 * line. Throws where the trace cannot be rewritten (the caller keeps it as it was). */
std::vector<mx::array> chain_operations(const std::vector<mx::array> &outputs, bool (*member)(const mx::Primitive &),
                                        std::shared_ptr<mx::Primitive> (*make)(mx::Stream, chain_plan &&),
                                        const char *what);
/* chain_operations for a traced CPU program: runs of our CPU tasks become one task each
 * (bridge_cpu_chain.cpp; ORT_EP_MLX_CPU_CHAINS=0: the outputs as they are). */
std::vector<mx::array> chain_cpu_tasks(const std::vector<mx::array> &outputs);
/* One launch of CUDA function fn (in MLX's context) as a node of `stream`'s command encoder, after
 * the work that writes `inputs` and before whatever reads `outputs` (MLX's dependency tracking;
 * the outputs' buffers already set); args as cuLaunchKernel takes them. Throws where the direct
 * launch path is not ready. */
void encode_kernel_node(const mx::Stream &stream, void *fn, unsigned grid_x, unsigned grid_y, unsigned block_x,
                        void **args, const std::vector<mx::array> &inputs, const std::vector<mx::array> &outputs);
/* The kernel `name` of `cubin`, loaded once in GPU `ordinal`'s primary context (MLX's); throws when
 * the driver refuses it. */
void *load_cuda_function(const std::string &name, const std::string &cubin, int ordinal);
/* A CUDA function of a complete source of our own (an extern "C" __global__ named `base`), compiled
 * through the kernel cache once per machine and loaded in GPU `ordinal`'s primary context; nullptr
 * where that path is closed (no NVRTC or headers, a failure, ORT_EP_MLX_KERNEL_CACHE=0). */
void *cached_cuda_function(const char *base, const std::string &source, int ordinal);
/* A complete source of our own compiled for sm_90 as cached_cuda_function would: 0, 1 when no NVRTC
 * or CUDA headers are at hand, -1 with the compiler's log in error. */
int check_cuda_source(const char *name, const std::string &source, std::string &error);
extern const char *const copy_batch_source; /* bridge_device.cpp's batched copy-out */
std::vector<mx::array> launch_precompiled(const std::string &name, const std::shared_future<std::string> &cubin,
                                          const std::vector<mx::array> &inputs,
                                          const std::vector<mx::Shape> &out_shapes,
                                          const std::vector<mx::Dtype> &out_dtypes, const std::vector<int> &scalars,
                                          std::tuple<int, int, int> grid, std::tuple<int, int, int> block,
                                          bool row_contiguous, uint32_t unused, const mlxb_scope *s);
/* Compiles kernel k's precompiled form for sm_90 with NVRTC (MLX's, else a CUDA toolkit's) for
 * inputs of these dtypes and ranks: 0, 1 when no NVRTC or CUDA headers are at hand, -1 with the
 * compiler's log in error. */
int check_cuda_kernel_source(const cuda_kernel_spec &k, const std::vector<mx::array> &inputs,
                             const std::vector<mx::Dtype> &out_dtypes, const cuda_template_args &targs,
                             std::string &error);
/* base + a hash of the kernel's text: MLX keys its compiled kernels by name alone. */
std::string versioned_kernel_name(const char *base, const char *source, const char *header);

} // namespace mlxb_detail

#endif
