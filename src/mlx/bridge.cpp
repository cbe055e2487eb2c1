/* The C ABI over MLX's C++ API (see bridge.h): scopes own arrays in a deque so handles stay
 * stable, every op runs on the scope's device (never a global default, as several threads build
 * graphs at once), and every exception becomes the scope's sticky error. */
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <unordered_set>

#include "mlx/bridge_internal.h"

#include <cstdlib>
#include <mutex>

#include <cstring>
#include <sched.h>
#include <deque>
#include <exception>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "mlx/mlx.h"
#include "mlx/primitives.h"

namespace mx = mlx::core;

using namespace mlxb_detail;

/* Op dispatch and host-copy helpers used by this file only. */
/* a evaluated, as a row-major buffer (copied only when a is a strided view). */
mx::array mlxb_detail::evaluated_row_major(mlxb_scope *s, const mx::array &a) {
  mx::array src = a;
  src.eval();
  if (!src.flags().row_contiguous) {
    src = mx::contiguous(src, false, dtype_dev(s, src.dtype()));
    src.eval();
    if (!src.flags().row_contiguous) throw bridge_error("array is not row-contiguous after contiguous()");
  }
  return src;
}

namespace {

/* Every axis of a, for reductions given no axes. */
std::vector<int> all_axes(const mx::array &a) {
  std::vector<int> axes(a.ndim());
  for (size_t i = 0; i < axes.size(); i++) axes[i] = static_cast<int>(i);
  return axes;
}

std::vector<int> reduce_axes(const mx::array &a, const int *axes, int naxes) {
  if (naxes == 0 && !axes) return all_axes(a);
  return to_ints(axes, naxes);
}


/* A copy of host bytes as an array: typed pointers make MLX copy values, not convert them. */
mx::array array_from_bytes(const void *data, mx::Shape shape, mlxb_dtype t) {
  switch (t) {
  /* Bytes other than 0/1 become true rather than being read as an invalid bool. */
  case MLXB_BOOL: return mx::array(static_cast<const uint8_t *>(data), std::move(shape), mx::bool_);
  case MLXB_U8: return mx::array(static_cast<const uint8_t *>(data), std::move(shape), mx::uint8);
  case MLXB_U16: return mx::array(static_cast<const uint16_t *>(data), std::move(shape), mx::uint16);
  case MLXB_U32: return mx::array(static_cast<const uint32_t *>(data), std::move(shape), mx::uint32);
  case MLXB_U64: return mx::array(static_cast<const uint64_t *>(data), std::move(shape), mx::uint64);
  case MLXB_I8: return mx::array(static_cast<const int8_t *>(data), std::move(shape), mx::int8);
  case MLXB_I16: return mx::array(static_cast<const int16_t *>(data), std::move(shape), mx::int16);
  case MLXB_I32: return mx::array(static_cast<const int32_t *>(data), std::move(shape), mx::int32);
  case MLXB_I64: return mx::array(static_cast<const int64_t *>(data), std::move(shape), mx::int64);
  case MLXB_F16: return mx::array(static_cast<const mx::float16_t *>(data), std::move(shape), mx::float16);
  case MLXB_BF16: return mx::array(static_cast<const mx::bfloat16_t *>(data), std::move(shape), mx::bfloat16);
  case MLXB_F32: return mx::array(static_cast<const float *>(data), std::move(shape), mx::float32);
  case MLXB_F64: return mx::array(static_cast<const double *>(data), std::move(shape), mx::float64);
  case MLXB_C64: return mx::array(static_cast<const mx::complex64_t *>(data), std::move(shape), mx::complex64);
  default: break;
  }
  throw bridge_error("unknown dtype " + std::to_string(static_cast<int>(t)));
}


/* Copies an evaluated array's elements row-major into dst. */
void array_copy_out(mlxb_scope *s, const mx::array &a, void *dst, size_t bytes) {
  size_t want = a.size() * a.itemsize();
  if (bytes != want)
    throw bridge_error("buffer holds " + std::to_string(bytes) + " bytes, array needs " + std::to_string(want));
  if (want == 0) return;
  if (!dst) throw bridge_error("null destination");
  std::memcpy(dst, evaluated_row_major(s, a).data<uint8_t>(), want);
}

/* Splits a row-major shape around `axis`: outer = the product of the dims before it, row = the
 * bytes of one entry of the axis (the dims after it times the item size). */
void split_at_axis(const mx::Shape &shape, int axis, size_t itemsize, size_t *outer, size_t *row) {
  *outer = 1;
  *row = itemsize;
  for (int a = 0; a < axis; a++) *outer *= static_cast<size_t>(shape[a]);
  for (int a = axis + 1; a < static_cast<int>(shape.size()); a++) *row *= static_cast<size_t>(shape[a]);
}

/* An array holding (borrow: wrapping without a copy, where MLX allows) host data of dims. */
mx::array host_array(mlxb_scope *s, const void *data, const int64_t *dims, int rank, mlxb_dtype t, bool borrow) {
  if (borrow && t == MLXB_BOOL) throw bridge_error("bool data cannot be borrowed");
  mx::Shape shape = to_shape(dims, rank);
  size_t n = 1;
  for (int d : shape) n *= static_cast<size_t>(d);
  if (n == 0) return mx::zeros(shape, to_mx(t), dtype_dev(s, to_mx(t)));
  if (!data) throw bridge_error("null data for a non-empty array");
  if (borrow) return mx::array(const_cast<void *>(data), std::move(shape), to_mx(t), [](void *) {});
  return array_from_bytes(data, std::move(shape), t);
}

/* Elements of one axis visited by start, start+step, ... while short of stop. */
int64_t slice_count(int64_t start, int64_t stop, int64_t step) {
  if (step > 0) return stop > start ? (stop - start + step - 1) / step : 0;
  return start > stop ? (start - stop - step - 1) / (-step) : 0;
}

/* A positive-stride form of a full-rank slice, with the axes to flip where the step was negative. */
struct slice_plan {
  mx::Shape start, stop, strides;
  std::vector<int> flip_axes;
};

slice_plan slice_plan_make(const mx::array &x, const int64_t *start, const int64_t *stop, const int64_t *strides) {
  int nd = static_cast<int>(x.ndim());
  if (nd > 0 && (!start || !stop || !strides)) throw bridge_error("null start/stop/strides");
  slice_plan p;
  for (int i = 0; i < nd; i++) {
    int64_t step = strides[i];
    if (step == 0) throw bridge_error("zero stride on axis " + std::to_string(i));
    int64_t n = slice_count(start[i], stop[i], step);
    int64_t dim = x.shape(i);
    if (n == 0) {
      p.start.push_back(0), p.stop.push_back(0), p.strides.push_back(1);
      continue;
    }
    int64_t first = start[i], last = start[i] + (n - 1) * step;
    if (step < 0) std::swap(first, last);
    if (first < 0 || last >= dim)
      throw bridge_error("slice [" + std::to_string(start[i]) + ":" + std::to_string(stop[i]) + ":" +
                         std::to_string(step) + "] out of range for axis " + std::to_string(i) + " of size " +
                         std::to_string(dim));
    int64_t astep = step < 0 ? -step : step;
    p.start.push_back(to_i32(first, "slice start"));
    p.stop.push_back(to_i32(last + 1, "slice stop"));
    p.strides.push_back(to_i32(astep, "slice stride"));
    if (step < 0 && n > 1) p.flip_axes.push_back(i);
  }
  return p;
}

mx::array unary_apply(mlxb_unary_op op, const mx::array &x, mx::StreamOrDevice d) {
  if (cpu_unary_takes(op, x, d)) return cpu_unary(op, x, d);
  switch (op) {
  case MLXB_ABS: return mx::abs(x, d);
  case MLXB_NEG: return mx::negative(x, d);
  case MLXB_SQRT: return mx::sqrt(x, d);
  case MLXB_RSQRT: return mx::rsqrt(x, d);
  case MLXB_RECIPROCAL: return mx::reciprocal(x, d);
  case MLXB_SQUARE: return mx::square(x, d);
  case MLXB_EXP: return mx::exp(x, d);
  case MLXB_EXPM1: return mx::expm1(x, d);
  case MLXB_LOG: return mx::log(x, d);
  case MLXB_LOG1P: return mx::log1p(x, d);
  case MLXB_LOG2: return mx::log2(x, d);
  case MLXB_LOG10: return mx::log10(x, d);
  case MLXB_ERF: return mx::erf(x, d);
  case MLXB_ERFINV: return mx::erfinv(x, d);
  case MLXB_TANH: return mx::tanh(x, d);
  case MLXB_SIGMOID: return mx::sigmoid(x, d);
  case MLXB_SIN: return mx::sin(x, d);
  case MLXB_COS: return mx::cos(x, d);
  case MLXB_TAN: return mx::tan(x, d);
  case MLXB_ASIN: return mx::arcsin(x, d);
  case MLXB_ACOS: return mx::arccos(x, d);
  case MLXB_ATAN: return mx::arctan(x, d);
  case MLXB_SINH: return mx::sinh(x, d);
  case MLXB_COSH: return mx::cosh(x, d);
  case MLXB_ASINH: return mx::arcsinh(x, d);
  case MLXB_ACOSH: return mx::arccosh(x, d);
  case MLXB_ATANH: return mx::arctanh(x, d);
  case MLXB_CEIL: return mx::ceil(x, d);
  case MLXB_FLOOR: return mx::floor(x, d);
  case MLXB_ROUND: return mx::round(x, 0, d);
  case MLXB_SIGN: return mx::sign(x, d);
  case MLXB_LOGICAL_NOT: return mx::logical_not(x, d);
  case MLXB_BITWISE_INVERT: return mx::bitwise_invert(x, d);
  case MLXB_ISNAN: return mx::isnan(x, d);
  case MLXB_ISINF: return mx::isinf(x, d);
  case MLXB_ISPOSINF: return mx::isposinf(x, d);
  case MLXB_ISNEGINF: return mx::isneginf(x, d);
  case MLXB_ISFINITE: return mx::isfinite(x, d);
  case MLXB_STOP_GRADIENT: return mx::stop_gradient(x, d);
  case MLXB_GELU_ERF: {
    const mx::Dtype t = x.dtype();
    const mx::array e = mx::erf(mx::multiply(x, mx::array(0.70710678118654752440, t), d), d);
    return mx::multiply(mx::multiply(mx::array(0.5, t), x, d), mx::add(mx::array(1.0, t), e, d), d);
  }
  default: break;
  }
  throw bridge_error("unknown unary op " + std::to_string(static_cast<int>(op)));
}

/* MLX's int32/int64 floor_divide and remainder kill the process (SIGFPE) on INT_MIN / -1; a
 * divisor of -1 is answered here instead: the wrapped negation, remainder 0. */
mx::array int_divmod_safe(bool rem, const mx::array &a, const mx::array &b, mx::StreamOrDevice d) {
  mx::Dtype t = mx::promote_types(a.dtype(), b.dtype());
  if (t != mx::int32 && t != mx::int64)
    return rem ? mx::remainder(a, b, d) : mx::floor_divide(a, b, d);
  mx::array at = mx::astype(a, t, d), bt = mx::astype(b, t, d);
  mx::array minus_one = mx::equal(bt, mx::array(-1, t), d);
  mx::array b_safe = mx::where(minus_one, mx::array(1, t), bt, d);
  if (rem) return mx::where(minus_one, mx::array(0, t), mx::remainder(at, b_safe, d), d);
  mx::array neg = mx::subtract(mx::array(0, t), at, d);
  return mx::where(minus_one, neg, mx::floor_divide(at, b_safe, d), d);
}

/* ---- bounded indices ------------------------------------------------------------------------
 * MLX reads and writes wherever an index points (no bounds checks in gather, scatter, take or
 * dynamic slices). Every index array a bridge op hands to MLX is first bounded here, inside the
 * graph, so that no value of any input can reach memory outside a tensor, eager or compiled.
 * A valid index is unchanged; an invalid one (which the caller reports through its own checks)
 * lands on some element of the tensor. */

int64_t axis_dim(const mx::array &x, int axis) {
  int r = static_cast<int>(x.ndim());
  if (axis < -r || axis >= r) throw bridge_error("axis " + std::to_string(axis) + " out of range");
  return x.shape(axis < 0 ? axis + r : axis);
}

/* Bounds of an integer dtype, as int64 (uint64's top is clipped to INT64_MAX). */
void dtype_range(mx::Dtype t, int64_t *lo, int64_t *hi) {
  switch (t.val()) {
  case mx::Dtype::Val::int8: *lo = INT8_MIN, *hi = INT8_MAX; return;
  case mx::Dtype::Val::int16: *lo = INT16_MIN, *hi = INT16_MAX; return;
  case mx::Dtype::Val::int32: *lo = INT32_MIN, *hi = INT32_MAX; return;
  case mx::Dtype::Val::int64: *lo = INT64_MIN, *hi = INT64_MAX; return;
  case mx::Dtype::Val::uint8: *lo = 0, *hi = UINT8_MAX; return;
  case mx::Dtype::Val::uint16: *lo = 0, *hi = UINT16_MAX; return;
  case mx::Dtype::Val::uint32: *lo = 0, *hi = UINT32_MAX; return;
  case mx::Dtype::Val::uint64: *lo = 0, *hi = INT64_MAX; return;
  default: break;
  }
  throw bridge_error("indices must have an integer dtype");
}

/* Clips idx so that a window of `win` elements starting at it (after MLX wraps a negative one)
 * stays inside an axis of `dim`: [-dim, dim - 1] for single elements, else [0, dim - win] after
 * wrapping negatives here. Bounds the dtype cannot reach are left out. */
mx::array index_bound(const mx::array &idx, int64_t dim, int64_t win, mx::StreamOrDevice d) {
  if (idx.size() == 0) return idx;
  if (dim <= 0 || win > dim) throw bridge_error("index into an axis of size " + std::to_string(dim));
  int64_t tlo, thi;
  dtype_range(idx.dtype(), &tlo, &thi);
  mx::Dtype t = idx.dtype();
  mx::array x = idx;
  int64_t lo = -dim, hi = dim - 1;
  if (win > 1) {
    if (tlo < 0) x = mx::where(mx::less(x, mx::array(0, t), d), mx::add(x, mx::array(dim > thi ? thi : dim, t), d), x, d);
    lo = 0, hi = dim - win;
  }
  std::optional<mx::array> lo_a, hi_a;
  if (lo > tlo) lo_a = mx::array(lo, t);
  if (hi < thi) hi_a = mx::array(hi, t);
  if (!lo_a && !hi_a) return x;
  return mx::clip(x, lo_a, hi_a, d);
}

/* Dynamic-slice starts (one per listed axis, MLX does not wrap them) clipped into
 * [0, dim - window] per axis. */
mx::array start_bound(const mx::array &x, const mx::array &start, const std::vector<int> &axes,
                      const std::vector<int64_t> &window, mx::StreamOrDevice d) {
  if (start.ndim() != 1 || start.size() != axes.size()) throw bridge_error("one start per axis expected");
  std::vector<int64_t> hi;
  for (size_t k = 0; k < axes.size(); k++) {
    int64_t dim = axis_dim(x, axes[k]);
    if (window[k] > dim) throw bridge_error("slice window larger than its axis");
    hi.push_back(dim - window[k]);
  }
  mx::array st = mx::astype(start, mx::int64, d);
  mx::array top(hi.begin(), mx::Shape{static_cast<int>(hi.size())}, mx::int64);
  return mx::astype(mx::clip(st, mx::array(0, mx::int64), top, d), start.dtype(), d);
}

mx::array binary_apply(mlxb_binary_op op, const mx::array &a, const mx::array &b, mx::StreamOrDevice d) {
  switch (op) {
  case MLXB_ADD: return mx::add(a, b, d);
  case MLXB_SUB: return mx::subtract(a, b, d);
  case MLXB_MUL: return mx::multiply(a, b, d);
  case MLXB_DIV: return mx::divide(a, b, d);
  case MLXB_POW: return mx::power(a, b, d);
  case MLXB_MAXIMUM: return mx::maximum(a, b, d);
  case MLXB_MINIMUM: return mx::minimum(a, b, d);
  case MLXB_REMAINDER: return int_divmod_safe(true, a, b, d);
  case MLXB_FLOOR_DIVIDE: return int_divmod_safe(false, a, b, d);
  case MLXB_EQUAL: return mx::equal(a, b, d);
  case MLXB_NOT_EQUAL: return mx::not_equal(a, b, d);
  case MLXB_LESS: return mx::less(a, b, d);
  case MLXB_LESS_EQUAL: return mx::less_equal(a, b, d);
  case MLXB_GREATER: return mx::greater(a, b, d);
  case MLXB_GREATER_EQUAL: return mx::greater_equal(a, b, d);
  case MLXB_LOGICAL_AND: return mx::logical_and(a, b, d);
  case MLXB_LOGICAL_OR: return mx::logical_or(a, b, d);
  case MLXB_BITWISE_AND: return mx::bitwise_and(a, b, d);
  case MLXB_BITWISE_OR: return mx::bitwise_or(a, b, d);
  case MLXB_BITWISE_XOR: return mx::bitwise_xor(a, b, d);
  case MLXB_LEFT_SHIFT: return mx::left_shift(a, b, d);
  case MLXB_RIGHT_SHIFT: return mx::right_shift(a, b, d);
  case MLXB_ATAN2: return mx::arctan2(a, b, d);
  case MLXB_LOGADDEXP: return mx::logaddexp(a, b, d);
  default: break;
  }
  throw bridge_error("unknown binary op " + std::to_string(static_cast<int>(op)));
}

mx::array reduce_apply(mlxb_reduce_op op, const mx::array &x, const std::vector<int> &axes, bool keep,
                       mx::StreamOrDevice d) {
  switch (op) {
  case MLXB_RSUM: return mx::sum(x, axes, keep, d);
  case MLXB_RPROD: return mx::prod(x, axes, keep, d);
  case MLXB_RMAX: return mx::max(x, axes, keep, d);
  case MLXB_RMIN: return mx::min(x, axes, keep, d);
  case MLXB_RMEAN: return mx::mean(x, axes, keep, d);
  case MLXB_RLOGSUMEXP: return mx::logsumexp(x, axes, keep, d);
  case MLXB_RANY: return mx::any(x, axes, keep, d);
  case MLXB_RALL: return mx::all(x, axes, keep, d);
  default: break;
  }
  throw bridge_error("unknown reduce op " + std::to_string(static_cast<int>(op)));
}

mx::array scatter_apply(mlxb_scatter_mode mode, const mx::array &x, const std::vector<mx::array> &idx,
                        const mx::array &upd, const std::vector<int> &axes, mx::StreamOrDevice d) {
  switch (mode) {
  case MLXB_SCATTER_SET: return mx::scatter(x, idx, upd, axes, d);
  case MLXB_SCATTER_ADD: return mx::scatter_add(x, idx, upd, axes, d);
  case MLXB_SCATTER_PROD: return mx::scatter_prod(x, idx, upd, axes, d);
  case MLXB_SCATTER_MAX: return mx::scatter_max(x, idx, upd, axes, d);
  case MLXB_SCATTER_MIN: return mx::scatter_min(x, idx, upd, axes, d);
  default: break;
  }
  throw bridge_error("unknown scatter mode " + std::to_string(static_cast<int>(mode)));
}

} // namespace

extern "C" {

/* ---- library ---------------------------------------------------------------------------- */

const char *mlxb_version(void) {
  try {
    static const std::string v = mx::version();
    return v.c_str();
  } catch (...) {
    return "unknown";
  }
}

bool mlxb_gpu_available(void) {
  try {
    return mx::is_available(mx::Device(mx::Device::gpu));
  } catch (...) {
    return false;
  }
}

size_t mlxb_dtype_size(mlxb_dtype t) {
  try {
    return to_mx(t).size();
  } catch (...) {
    return 0;
  }
}

int mlxb_init(char *err, size_t err_len) {
  /* MLX reads these on first use. Exactness first: float32 matmuls on CUDA would otherwise use
   * TF32 and miss ORT's float32 results; and a model with many shapes must not make MLX abort on
   * "cache thrashing". A value the user set already wins (overwrite = 0). */
  setenv("MLX_ENABLE_TF32", "0", 0);
  setenv("MLX_ENABLE_CACHE_THRASHING_CHECK", "0", 0);
  /* MLX's CUDA backend otherwise records every ~30 kernels as a CUDA graph, instantiates or
   * updates it and launches it: for the EP's Runs (a few hundred small kernels each) that host
   * work cost more than it saved (H100, 2026-12-06: a decode Run 3.3-3.7 ms without, 3.9-4.4 with) */
  setenv("MLX_USE_CUDA_GRAPHS", "0", 0);
  if (err && err_len) err[0] = '\0';
  return 0;
}

namespace {
/* see mlxb_exclusive_begin; recursive because ORT allocates a Run's device outputs through us
 * (mlxb_device_alloc takes it too) from inside the Run that holds it */
std::recursive_mutex gpu_mutex;

/* ORT_EP_MLX_SHARED_GPU_STREAM (on): every thread's GPU work goes to one stream of the process
 * (MLX's thread-unsafe kind, which any thread may use; the lock above serializes them). MLX 0.32
 * otherwise gives each thread a stream of its own, with its CUDA stream, command encoder and CUDA
 * graph cache, and destroys them when the thread exits: outside any Run, so while another thread
 * captures a CUDA graph in MLX's global capture mode, which such driver calls break (the process
 * aborted with 8 threads on the H200, 2026-12-06). One stream also keeps one graph cache for a
 * server's pool of threads. */
void use_shared_gpu_stream() {
  static const bool on = env_switch_on("ORT_EP_MLX_SHARED_GPU_STREAM");
  thread_local bool done = false;
  if (!on || done) return;
  done = true;
  static const std::optional<mx::Stream> shared = []() -> std::optional<mx::Stream> {
    try {
      return mx::new_thread_unsafe_stream(mx::Device(mx::Device::gpu));
    } catch (...) { /* no GPU: nothing to share */
      return std::nullopt;
    }
  }();
  if (shared) mx::set_default_stream(*shared);
}
} // namespace

void mlxb_exclusive_begin(mlxb_device dev) {
  if (dev != MLXB_DEVICE_GPU) return;
  gpu_mutex.lock();
  try {
    drain_scalar_pool();
    use_shared_gpu_stream();
  } catch (...) { /* the thread keeps MLX's own stream */
  }
}

void mlxb_exclusive_end(mlxb_device dev) {
  if (dev == MLXB_DEVICE_GPU) gpu_mutex.unlock();
}

/* ---- scopes ----------------------------------------------------------------------------- */

mlxb_scope *mlxb_scope_new(mlxb_device dev) {
  try {
    return new mlxb_scope(mx::Device(dev == MLXB_DEVICE_GPU ? mx::Device::gpu : mx::Device::cpu));
  } catch (...) {
    return nullptr;
  }
}

void mlxb_scope_free(mlxb_scope *s) {
  try {
    delete s;
  } catch (...) {
  }
}

bool mlxb_ok(const mlxb_scope *s) { return s && s->error.empty(); }

const char *mlxb_error(const mlxb_scope *s) {
  if (!s) return "null scope";
  return s->error.c_str();
}

void mlxb_set_error(mlxb_scope *s, const char *msg) {
  if (!s || !s->error.empty()) return;
  try {
    s->error = msg && *msg ? msg : "unknown error";
  } catch (...) {
  }
}

void mlxb_clear_error(mlxb_scope *s) {
  if (s) s->error.clear();
}

mlxb_device mlxb_scope_device(const mlxb_scope *s) {
  if (!s) return MLXB_DEVICE_CPU;
  return s->device == mx::Device::gpu ? MLXB_DEVICE_GPU : MLXB_DEVICE_CPU;
}

bool mlxb_scope_force_cpu(mlxb_scope *s, bool force) {
  if (!s) return false;
  bool old = s->force_cpu;
  s->force_cpu = force;
  return old;
}

/* ---- creation and queries ---------------------------------------------------------------- */

mlxb_array *mlxb_from_data(mlxb_scope *s, const void *data, const int64_t *dims, int rank, mlxb_dtype t) {
  return guard(s, "mlxb_from_data", [&] { return host_array(s, data, dims, rank, t, false); });
}

mlxb_array *mlxb_borrow_data(mlxb_scope *s, const void *data, const int64_t *dims, int rank, mlxb_dtype t) {
  return guard(s, "mlxb_borrow_data", [&] { return host_array(s, data, dims, rank, t, true); });
}

mlxb_array *mlxb_from_data_padded(mlxb_scope *s, const void *data, const int64_t *dims, int rank, mlxb_dtype t,
                                  int axis, int64_t pad) {
  return guard(s, "mlxb_from_data_padded", [&] {
    if (t == MLXB_BOOL) throw bridge_error("bool data cannot be padded");
    if (axis < 0 || axis >= rank || pad < 0) throw bridge_error("invalid padding axis");
    mx::Shape shape = to_shape(dims, rank);
    size_t outer, row;
    split_at_axis(shape, axis, to_mx(t).size(), &outer, &row);
    size_t valid = row * static_cast<size_t>(shape[axis]), total = valid + row * static_cast<size_t>(pad);
    shape[axis] = static_cast<int>(dims[axis] + pad);
    if (outer * total == 0) return mx::zeros(shape, to_mx(t), dtype_dev(s, to_mx(t)));
    if (!data && valid) throw bridge_error("null data for a non-empty array");
    char *buf = static_cast<char *>(malloc(outer * total));
    if (!buf) throw std::bad_alloc();
    for (size_t o = 0; o < outer; o++) {
      if (valid) memcpy(buf + o * total, static_cast<const char *>(data) + o * valid, valid);
      memset(buf + o * total + valid, 0, total - valid);
    }
    return mx::array(buf, std::move(shape), to_mx(t), [](void *p) { free(p); });
  });
}

mlxb_array *mlxb_scalar_f64(mlxb_scope *s, double v, mlxb_dtype t) {
  return guard(s, "mlxb_scalar_f64", [&] { return mx::array(v, to_mx(t)); });
}

mlxb_array *mlxb_scalar_i64(mlxb_scope *s, int64_t v, mlxb_dtype t) {
  return guard(s, "mlxb_scalar_i64", [&] {
    /* Through uint64 so unsigned targets wrap exactly rather than via a float. */
    if (t == MLXB_U64) return mx::array(static_cast<uint64_t>(v), mx::uint64);
    return mx::array(v, to_mx(t));
  });
}

mlxb_array *mlxb_full(mlxb_scope *s, const int64_t *dims, int rank, const mlxb_array *value, mlxb_dtype t) {
  return guard(s, "mlxb_full", [&] { return mx::full(to_shape(dims, rank), arr(value), to_mx(t), scope_dev(s)); });
}

mlxb_array *mlxb_zeros(mlxb_scope *s, const int64_t *dims, int rank, mlxb_dtype t) {
  return guard(s, "mlxb_zeros", [&] { return mx::zeros(to_shape(dims, rank), to_mx(t), scope_dev(s)); });
}

/* One array per distinct arange of a scope: a decoder's layers each ask for the same positions
 * (a 24-layer prompt traced 72 int64 aranges, each its own launch on MLX's CUDA backend), and
 * MLX's compile does not merge operations without inputs. Arrays are values, so sharing one is
 * the same graph. */
mlxb_array *mlxb_arange(mlxb_scope *s, double start, double stop, double step, mlxb_dtype t) {
  if (!s) return nullptr;
  mx::Dtype type = to_mx(t);
  bool on_cpu = scope_dev(s) == mx::StreamOrDevice(mx::Device(mx::Device::cpu));
  for (const arange_made &m : s->aranges)
    if (m.start == start && m.stop == stop && m.step == step && m.type == type && m.on_cpu == on_cpu) return m.array;
  mlxb_array *a = guard(s, "mlxb_arange", [&] { return mx::arange(start, stop, step, type, scope_dev(s)); });
  if (a) {
    try {
      s->aranges.push_back({start, stop, step, type, on_cpu, a});
    } catch (...) {
    }
  }
  return a;
}

mlxb_array *mlxb_eye(mlxb_scope *s, int64_t n, int64_t m, int64_t k, mlxb_dtype t) {
  /* Not mx::eye: it writes the diagonal with a scatter, which MLX's GPU refuses for 8-byte
   * dtypes. One comparison of column minus row index against k works for every dtype on every
   * device, with mx::eye's values: ones where j - i == k, all zeros for a k past the matrix (and,
   * where mx::eye refuses, an empty matrix for n or m of 0). */
  return guard(s, "mlxb_eye", [&] {
    int rows = to_i32(n, "eye n"), cols = to_i32(m, "eye m"), diag = to_i32(k, "eye k");
    if (rows < 0 || cols < 0) throw bridge_error("negative eye dimension");
    mx::Dtype type = to_mx(t);
    mx::StreamOrDevice d = dtype_dev(s, type);
    mx::array i = mx::reshape(mx::arange(0.0, static_cast<double>(rows), 1.0, mx::int32, d), {rows, 1}, d);
    mx::array j = mx::reshape(mx::arange(0.0, static_cast<double>(cols), 1.0, mx::int32, d), {1, cols}, d);
    /* j - i lies in [1 - rows, cols - 1]: no overflow for any k */
    return mx::astype(mx::equal(mx::subtract(j, i, d), mx::array(diag, mx::int32), d), type, d);
  });
}

mlxb_array *mlxb_ref(mlxb_scope *s, const mlxb_array *a) {
  return guard(s, "mlxb_ref", [&] { return arr(a); });
}

int mlxb_ndim(const mlxb_array *a) {
  if (!a) return -1;
  return static_cast<int>(reinterpret_cast<const mx::array *>(a)->ndim());
}

int64_t mlxb_dim(const mlxb_array *a, int axis) {
  if (!a) return -1;
  const mx::array &x = *reinterpret_cast<const mx::array *>(a);
  int nd = static_cast<int>(x.ndim());
  if (axis < 0) axis += nd;
  if (axis < 0 || axis >= nd) return -1;
  return x.shape(axis);
}

void mlxb_shape(const mlxb_array *a, int64_t *dims_out) {
  if (!a || !dims_out) return;
  const mx::array &x = *reinterpret_cast<const mx::array *>(a);
  for (size_t i = 0; i < x.ndim(); i++) dims_out[i] = x.shape(static_cast<int>(i));
}

mlxb_dtype mlxb_type(const mlxb_array *a) {
  if (!a) return MLXB_DTYPE_COUNT;
  return from_mx(reinterpret_cast<const mx::array *>(a)->dtype());
}

size_t mlxb_size(const mlxb_array *a) {
  if (!a) return 0;
  return reinterpret_cast<const mx::array *>(a)->size();
}

/* ---- evaluation and host access ---------------------------------------------------------- */

/* What a walk has counted: arrays by id, and chains (a chain's members count once, whichever of
 * its outputs is met). A tally keeps one across walks (mlxb_op_tally). */
struct walk_marks {
  std::unordered_set<std::uintptr_t> seen;
  std::unordered_set<const chain_members *> chains;
};

struct mlxb_op_tally {
  walk_marks marks;
};

static size_t graph_walk(mlxb_array *const *arrays, size_t n, std::map<std::string, size_t> *by_name,
                         walk_marks &marks) {
  std::vector<mx::array> stack;
  for (size_t i = 0; i < n; i++)
    if (arrays[i]) stack.push_back(arr(arrays[i]));
  size_t ops = 0;
  while (!stack.empty()) {
    mx::array a = std::move(stack.back());
    stack.pop_back();
    if (!a.has_primitive() || !marks.seen.insert(a.id()).second) continue;
    ops++;
    if (by_name) {
      /* on a GPU machine, work placed on the CPU stream shows as such: each crossing costs a fence */
      bool on_cpu = a.primitive().stream().device == mx::Device::cpu && mx::default_device() == mx::Device::gpu;
      (*by_name)[std::string(a.primitive().name()) + (on_cpu ? "@cpu" : "")]++;
      auto *chain = dynamic_cast<const chain_members *>(&a.primitive());
      if (chain && marks.chains.insert(chain).second)
        for (const char *member : chain->member_names()) (*by_name)[std::string(member) + (on_cpu ? "@cpu" : "")]++;
    }
    for (const mx::array &in : a.inputs()) stack.push_back(in);
  }
  return ops;
}

size_t mlxb_graph_size(mlxb_array *const *arrays, size_t n) {
  try {
    walk_marks marks;
    return graph_walk(arrays, n, nullptr, marks);
  } catch (...) {
    return 0;
  }
}

/* A walk's histogram as "Primitive=count" pairs, most frequent first, into dst (cut at cap). */
static size_t histogram_text(mlxb_array *const *arrays, size_t n, walk_marks &marks, char *dst, size_t cap) {
  try {
    std::map<std::string, size_t> by_name;
    size_t ops = graph_walk(arrays, n, &by_name, marks);
    std::vector<std::pair<size_t, std::string>> rows;
    for (auto &kv : by_name) rows.emplace_back(kv.second, kv.first);
    std::sort(rows.begin(), rows.end(), [](const auto &a, const auto &b) { return a.first > b.first; });
    std::string text;
    for (auto &r : rows) text += (text.empty() ? "" : " ") + r.second + "=" + std::to_string(r.first);
    if (cap) snprintf(dst, cap, "%s", text.c_str());
    return ops;
  } catch (...) {
    if (cap) dst[0] = 0;
    return 0;
  }
}

size_t mlxb_graph_histogram(mlxb_array *const *arrays, size_t n, char *dst, size_t cap) {
  try {
    walk_marks marks;
    return histogram_text(arrays, n, marks, dst, cap);
  } catch (...) {
    if (cap) dst[0] = 0;
    return 0;
  }
}

mlxb_op_tally *mlxb_op_tally_new(void) {
  try {
    return new mlxb_op_tally();
  } catch (...) {
    return nullptr;
  }
}

size_t mlxb_op_tally_add(mlxb_op_tally *t, mlxb_array *const *arrays, size_t n, char *dst, size_t cap) {
  if (!t) {
    if (cap) dst[0] = 0;
    return 0;
  }
  return histogram_text(arrays, n, t->marks, dst, cap);
}

void mlxb_op_tally_free(mlxb_op_tally *t) { delete t; }

int mlxb_eval(mlxb_scope *s, mlxb_array *const *arrays, size_t n) {
  return guard_status(s, "mlxb_eval", [&] {
    if (n > 0 && !arrays) throw null_arg{};
    /* MLX evaluates a list behind one synchronizing operation on the stream of the list's first
     * pending array, and that operation takes every array of the list as an input; on a GPU stream
     * it refuses float64 inputs ("float64 is not supported on the GPU"). Float64 arrays (always on
     * the CPU stream, dtype_dev) are therefore evaluated apart, and arrays already available (a
     * graph input passed through as an output) not at all. */
    std::vector<mx::array> f64, rest;
    for (size_t i = 0; i < n; i++) {
      const mx::array &a = arr(arrays[i]);
      if (a.is_available()) continue;
      (a.dtype() == mx::float64 ? f64 : rest).push_back(a);
    }
    if (!f64.empty()) mx::eval(f64);
    if (!rest.empty()) mx::eval(rest);
  });
}

int mlxb_eval_spinning(mlxb_scope *s, mlxb_array *const *arrays, size_t n, int64_t spin_us) {
  if (spin_us <= 0 || n == 0 || !s || !is_cpu_scope(s)) return mlxb_eval(s, arrays, n);
  return guard_status(s, "mlxb_eval_spinning", [&] {
    if (!arrays) throw null_arg{};
    std::vector<mx::array> pending;
    for (size_t i = 0; i < n; i++)
      if (!arr(arrays[i]).is_available()) pending.push_back(arr(arrays[i]));
    if (pending.empty()) return;
    mx::async_eval(pending); /* the CPU scope's arrays, float64 included, are on the CPU stream */
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
    auto all_available = [&] {
      for (auto &a : pending)
        if (!a.is_available()) return false;
      return true;
    };
    /* sched_yield between looks: the pool's helpers may need this core */
    while (!all_available() && std::chrono::steady_clock::now() < until) sched_yield();
    mx::eval(pending); /* waits for what is left, and raises what the evaluation raised */
  });
}

int mlxb_read(mlxb_scope *s, const mlxb_array *a, void *dst, size_t bytes) {
  return guard_status(s, "mlxb_read", [&] { array_copy_out(s, arr(a), dst, bytes); });
}

int mlxb_read_prefix(mlxb_scope *s, const mlxb_array *a, int axis, int64_t keep, void *dst, size_t bytes) {
  return guard_status(s, "mlxb_read_prefix", [&] {
    const mx::array &in = arr(a);
    if (axis < 0 || axis >= static_cast<int>(in.ndim()) || keep < 0 || keep > in.shape(axis))
      throw bridge_error("prefix outside the array");
    mx::array src = evaluated_row_major(s, in);
    size_t outer, row;
    split_at_axis(src.shape(), axis, src.itemsize(), &outer, &row);
    size_t have = row * static_cast<size_t>(src.shape(axis)), take = row * static_cast<size_t>(keep);
    if (bytes != outer * take) throw bridge_error("destination size does not match the prefix");
    if (!bytes) return;
    if (!dst) throw bridge_error("null destination");
    const uint8_t *from = src.data<uint8_t>();
    for (size_t o = 0; o < outer; o++) std::memcpy(static_cast<uint8_t *>(dst) + o * take, from + o * have, take);
  });
}

int mlxb_read_i64(mlxb_scope *s, const mlxb_array *a, int64_t *dst, size_t n) {
  return guard_status(s, "mlxb_read_i64", [&] {
    const mx::array &x = arr(a);
    if (mx::issubdtype(x.dtype(), mx::inexact)) throw bridge_error("array is not of an integer or bool type");
    array_copy_out(s, mx::astype(x, mx::int64, scope_dev(s)), dst, n * sizeof(int64_t));
  });
}

int mlxb_read_f64(mlxb_scope *s, const mlxb_array *a, double *dst, size_t n) {
  return guard_status(s, "mlxb_read_f64", [&] {
    array_copy_out(s, mx::astype(arr(a), mx::float64, dtype_dev(s, mx::float64)), dst, n * sizeof(double));
  });
}

/* ---- transposes sunk through elementwise work (CPU scopes) --------------------------------- *
 *
 * A lowering that works channels-last inside (Conv, pooling: MLX's layout) hands back a transposed
 * view, channels first; MLX then runs the next elementwise op (a bias, a Relu) over that view with
 * strided loops into a fresh channels-first array, which the next convolution transposes and copies
 * again. On a CPU scope an elementwise op, a concatenation, a reduction or a transpose of such a view
 * is done on the view's source instead and transposed after (op(T(y)) = T(op(y)), exactly: the same values,
 * element for element), so a chain of convolutions, biases, activations and concatenations stays
 * channels-last, and the transposes between them compose to nothing. The GPU's forms are left as
 * they are (not measured there; ORT_EP_MLX_SINK_TRANSPOSES=gpu sinks on every scope, to measure it).
 * ORT_EP_MLX_SINK_TRANSPOSES=0 turns it off. */

/* x's source and permutation when x is an unevaluated transpose on a CPU scope's stream */
static bool transposed_view(const mlxb_scope *s, const mx::array &x, mx::array *src, std::vector<int> *perm) {
  static const int mode = [] { /* 0 off, 1 CPU scopes, 2 every scope ("gpu": to measure it there) */
    const char *v = std::getenv("ORT_EP_MLX_SINK_TRANSPOSES");
    if (!v) return 1;
    if (!std::strcmp(v, "0") || !std::strcmp(v, "off")) return 0;
    return std::strcmp(v, "gpu") ? 1 : 2;
  }();
  if (mode == 0 || (mode == 1 && !is_cpu_scope(s)) || !x.has_primitive() || x.inputs().size() != 1) return false;
  if (std::strcmp(x.primitive().name(), "Transpose")) return false; /* libmlx exports no typeinfo for it */
  *src = x.inputs()[0];
  *perm = static_cast<const mx::Transpose &>(x.primitive()).state();
  return perm->size() == static_cast<size_t>(x.ndim());
}

/* x transposed where its dtype may live (dtype_dev: float64 on the CPU stream even on a GPU scope) */
static mx::array transposed(const mlxb_scope *s, const mx::array &x, const std::vector<int> &perm) {
  return mx::transpose(x, perm, dtype_dev(s, x.dtype()));
}

static std::vector<int> inverse_perm(const std::vector<int> &p) {
  std::vector<int> q(p.size());
  for (size_t i = 0; i < p.size(); i++) q[p[i]] = static_cast<int>(i);
  return q;
}

/* b as the operand of an op on y = x's source: b's axes put in y's order (b of x's rank or less, so
 * that it broadcasts against x); false where b is large (left in place: permuting it would move
 * the strided reads to b rather than remove them). */
static bool operand_for_source(const mlxb_scope *s, const mx::array &b, const mx::array &x,
                               const std::vector<int> &perm, mx::array *out) {
  if (b.ndim() > x.ndim() || b.size() * 4 > x.size()) return false;
  if (b.ndim() == 0) return *out = b, true;
  mx::Shape shape(x.ndim() - b.ndim(), 1);
  shape.insert(shape.end(), b.shape().begin(), b.shape().end());
  *out = transposed(s, mx::reshape(b, shape, dtype_dev(s, b.dtype())), inverse_perm(perm));
  return true;
}

/* op(a, b) with a transposed view sunk: both views of one permutation, or one view and a small
 * operand; false where neither applies. */
static bool binary_sunk(const mlxb_scope *s, mlxb_binary_op op, const mx::array &a, const mx::array &b,
                        mx::StreamOrDevice d, mx::array *out) {
  mx::array ya = a, yb = b;
  std::vector<int> pa, pb;
  bool ta = transposed_view(s, a, &ya, &pa), tb = transposed_view(s, b, &yb, &pb);
  if (ta && tb && pa == pb && a.ndim() == b.ndim()) {
    *out = transposed(s, binary_apply(op, ya, yb, d), pa);
    return true;
  }
  mx::array other = a;
  if (ta && !tb && operand_for_source(s, b, a, pa, &other)) {
    *out = transposed(s, binary_apply(op, ya, other, d), pa);
    return true;
  }
  if (tb && !ta && operand_for_source(s, a, b, pb, &other)) {
    *out = transposed(s, binary_apply(op, other, yb, d), pb);
    return true;
  }
  return false;
}

/* ---- elementwise ------------------------------------------------------------------------- */

/* Index arithmetic kept out of MLX's fusion on its CUDA backend. There MLX compiles each fused chain
 * of elementwise operations with NVRTC at its first use on a machine, seconds a kernel, one after
 * another (a decoder's first traced step spent 25 s on five such kernels, every one of them integer
 * or bool arithmetic on a few elements: lengths, positions, masks). A small integer or bool result
 * is handed on through two reshapes, views that launch nothing and that MLX does not fuse across,
 * so each such operation runs as one of MLX's precompiled kernels: a launch more per operation,
 * against seconds once per machine. ORT_EP_MLX_FUSE_INDEX_MATH=1 lets MLX fuse them. */
static mx::array unfused_index_math(const mlxb_scope *s, const mx::array &y) {
  static const bool fuse = env_opt_in("ORT_EP_MLX_FUSE_INDEX_MATH");
  enum { SMALL = 4096 };
  if (fuse || !is_cuda_gpu(s) || y.size() > SMALL || (y.dtype() != mx::bool_ && !mx::issubdtype(y.dtype(), mx::integer)))
    return y;
  int n = static_cast<int>(y.size());
  mx::Shape flat = y.ndim() == 2 && y.shape(0) == 1 ? mx::Shape{n} : mx::Shape{1, n};
  auto d = scope_dev(s);
  return mx::reshape(mx::reshape(y, flat, d), y.shape(), d);
}

mlxb_array *mlxb_unary(mlxb_scope *s, mlxb_unary_op op, const mlxb_array *x) {
  return guard(s, "mlxb_unary", [&] {
    mx::array src = arr(x);
    std::vector<int> perm;
    if (transposed_view(s, arr(x), &src, &perm)) return transposed(s, unary_apply(op, src, scope_dev(s)), perm);
    return unfused_index_math(s, unary_apply(op, arr(x), scope_dev(s)));
  });
}

mlxb_array *mlxb_binary(mlxb_scope *s, mlxb_binary_op op, const mlxb_array *a, const mlxb_array *b) {
  return guard(s, "mlxb_binary", [&] {
    mx::array sunk = arr(a);
    if (binary_sunk(s, op, arr(a), arr(b), scope_dev(s), &sunk)) return sunk;
    return unfused_index_math(s, binary_apply(op, arr(a), arr(b), scope_dev(s)));
  });
}

mlxb_array *mlxb_where(mlxb_scope *s, const mlxb_array *cond, const mlxb_array *a, const mlxb_array *b) {
  return guard(s, "mlxb_where",
               [&] { return unfused_index_math(s, mx::where(arr(cond), arr(a), arr(b), scope_dev(s))); });
}

mlxb_array *mlxb_astype(mlxb_scope *s, const mlxb_array *x, mlxb_dtype t) {
  return guard(s, "mlxb_astype", [&] { return unfused_index_math(s, mx::astype(arr(x), to_mx(t), scope_dev(s))); });
}

mlxb_array *mlxb_view(mlxb_scope *s, const mlxb_array *x, mlxb_dtype t) {
  return guard(s, "mlxb_view", [&] { return mx::view(arr(x), to_mx(t), scope_dev(s)); });
}

mlxb_array *mlxb_clip(mlxb_scope *s, const mlxb_array *x, const mlxb_array *lo_or_null, const mlxb_array *hi_or_null) {
  return guard(s, "mlxb_clip", [&] {
    const mx::array &in = arr(x);
    /* MLX's clip refuses two missing bounds; that clip is the identity. */
    if (!lo_or_null && !hi_or_null) return in;
    return mx::clip(in, opt(lo_or_null), opt(hi_or_null), scope_dev(s));
  });
}

/* ---- reductions and scans ---------------------------------------------------------------- */

/* The reduction of a transposed view done on its source, then transposed back: a convolution's
 * channels-last output reduced over its positions (a global average pool) is then MLX's strided
 * reduction, whole rows of channels at a time, not its general loop one output at a time (0.4 ms
 * against tens of microseconds for squeezenet's 13x13x1000). Every element is summed in the same
 * order along the reduced axes. False where it does not apply (the axes are then MLX's to judge). */
static bool reduce_on_source(mlxb_scope *s, mlxb_reduce_op op, const mx::array &in, const std::vector<int> &ax,
                             bool keepdims, mx::array *out) {
  mx::array src = in;
  std::vector<int> perm, view_axes, src_axes;
  if (ax.empty() || !transposed_view(s, in, &src, &perm)) return false;
  const int rank = static_cast<int>(in.ndim());
  std::vector<bool> seen(rank, false);
  for (int a : ax) {
    if (a < -rank || a >= rank) return false;
    if (a < 0) a += rank;
    if (seen[a]) return false;
    seen[a] = true;
    view_axes.push_back(a);
    src_axes.push_back(perm[a]);
  }
  mx::StreamOrDevice d = scope_dev(s);
  mx::array back = transposed(s, reduce_apply(op, src, src_axes, true, d), perm);
  *out = keepdims ? back : mx::squeeze(back, view_axes, d);
  return true;
}

mlxb_array *mlxb_reduce(mlxb_scope *s, mlxb_reduce_op op, const mlxb_array *x, const int *axes, int naxes, bool keepdims) {
  return guard(s, "mlxb_reduce", [&] {
    const mx::array &in = arr(x);
    std::vector<int> ax = reduce_axes(in, axes, naxes);
    mx::array out = in;
    if (reduce_on_source(s, op, in, ax, keepdims, &out)) return out;
    return reduce_apply(op, in, ax, keepdims, scope_dev(s));
  });
}

mlxb_array *mlxb_var(mlxb_scope *s, const mlxb_array *x, const int *axes, int naxes, bool keepdims, int ddof) {
  return guard(s, "mlxb_var", [&] {
    const mx::array &in = arr(x);
    return mx::var(in, reduce_axes(in, axes, naxes), keepdims, ddof, scope_dev(s));
  });
}

mlxb_array *mlxb_argmax(mlxb_scope *s, const mlxb_array *x, int axis, bool keepdims) {
  return guard(s, "mlxb_argmax", [&] { return mx::argmax(arr(x), axis, keepdims, scope_dev(s)); });
}

mlxb_array *mlxb_argmin(mlxb_scope *s, const mlxb_array *x, int axis, bool keepdims) {
  return guard(s, "mlxb_argmin", [&] { return mx::argmin(arr(x), axis, keepdims, scope_dev(s)); });
}

mlxb_array *mlxb_cumulative(mlxb_scope *s, mlxb_reduce_op op, const mlxb_array *x, int axis, bool reverse, bool inclusive) {
  return guard(s, "mlxb_cumulative", [&] {
    const mx::array &in = arr(x);
    mx::StreamOrDevice d = scope_dev(s);
    switch (op) {
    case MLXB_RSUM: return mx::cumsum(in, axis, reverse, inclusive, std::nullopt, d);
    case MLXB_RPROD: return mx::cumprod(in, axis, reverse, inclusive, std::nullopt, d);
    case MLXB_RMAX: return mx::cummax(in, axis, reverse, inclusive, d);
    case MLXB_RMIN: return mx::cummin(in, axis, reverse, inclusive, d);
    default: break;
    }
    throw bridge_error("unsupported cumulative op " + std::to_string(static_cast<int>(op)));
  });
}

mlxb_array *mlxb_softmax(mlxb_scope *s, const mlxb_array *x, const int *axes, int naxes, bool precise) {
  return guard(s, "mlxb_softmax", [&] {
    const mx::array &in = arr(x);
    std::vector<int> ax = reduce_axes(in, axes, naxes);
    if (cpu_softmax_takes(in, ax, scope_dev(s))) return cpu_softmax(in, scope_dev(s));
    return mx::softmax(in, ax, precise, scope_dev(s));
  });
}

mlxb_array *mlxb_sort(mlxb_scope *s, const mlxb_array *x, int axis) {
  return guard(s, "mlxb_sort", [&] { return mx::sort(arr(x), axis, scope_dev(s)); });
}

mlxb_array *mlxb_argsort(mlxb_scope *s, const mlxb_array *x, int axis) {
  return guard(s, "mlxb_argsort", [&] { return mx::argsort(arr(x), axis, scope_dev(s)); });
}

mlxb_array *mlxb_topk(mlxb_scope *s, const mlxb_array *x, int k, int axis) {
  return guard(s, "mlxb_topk", [&] { return mx::topk(arr(x), k, axis, scope_dev(s)); });
}

/* ---- shape and indexing ------------------------------------------------------------------ */

mlxb_array *mlxb_reshape(mlxb_scope *s, const mlxb_array *x, const int64_t *dims, int rank) {
  return guard(s, "mlxb_reshape", [&] { return mx::reshape(arr(x), to_shape(dims, rank), scope_dev(s)); });
}

mlxb_array *mlxb_transpose(mlxb_scope *s, const mlxb_array *x, const int *perm, int n) {
  return guard(s, "mlxb_transpose", [&] {
    const mx::array &in = arr(x);
    if (!perm && n == 0) return mx::transpose(in, dtype_dev(s, in.dtype()));
    std::vector<int> axes = to_ints(perm, n), inner;
    mx::array src = in;
    if (static_cast<size_t>(n) == in.ndim() && transposed_view(s, in, &src, &inner)) { /* a transpose of a transpose: one, or none */
      std::vector<int> composed(axes.size());
      bool identity = true;
      for (size_t i = 0; i < axes.size(); i++) {
        if (axes[i] < 0 || axes[i] >= n) throw bridge_error("transpose: axis out of range");
        composed[i] = inner[axes[i]];
        identity = identity && composed[i] == static_cast<int>(i);
      }
      return identity ? src : mx::transpose(src, composed, dtype_dev(s, in.dtype()));
    }
    return mx::transpose(in, axes, dtype_dev(s, in.dtype()));
  });
}

mlxb_array *mlxb_broadcast_to(mlxb_scope *s, const mlxb_array *x, const int64_t *dims, int rank) {
  return guard(s, "mlxb_broadcast_to", [&] { return mx::broadcast_to(arr(x), to_shape(dims, rank), scope_dev(s)); });
}

mlxb_array *mlxb_expand_dims(mlxb_scope *s, const mlxb_array *x, const int *axes, int n) {
  return guard(s, "mlxb_expand_dims", [&] { return mx::expand_dims(arr(x), to_ints(axes, n), scope_dev(s)); });
}

mlxb_array *mlxb_squeeze(mlxb_scope *s, const mlxb_array *x, const int *axes, int n) {
  return guard(s, "mlxb_squeeze", [&] {
    const mx::array &in = arr(x);
    if (!axes && n == 0) return mx::squeeze(in, scope_dev(s));
    return mx::squeeze(in, to_ints(axes, n), scope_dev(s));
  });
}

mlxb_array *mlxb_concat(mlxb_scope *s, const mlxb_array *const *xs, int n, int axis) {
  return guard(s, "mlxb_concat", [&] {
    std::vector<mx::array> parts = to_arrays(xs, n), sources;
    std::vector<int> perm, other;
    for (const auto &p : parts) { /* every part a view of one permutation: concatenate the sources */
      mx::array src = p;
      if (!transposed_view(s, p, &src, &other) || (!perm.empty() && other != perm)) break;
      perm = other;
      sources.push_back(src);
    }
    int rank = parts.empty() ? 0 : parts[0].ndim();
    if (!parts.empty() && sources.size() == parts.size() && axis >= -rank && axis < rank)
      return transposed(s, cpu_concatenate(s, sources, perm[axis < 0 ? axis + rank : axis]), perm);
    return cpu_concatenate(s, parts, axis);
  });
}

mlxb_array *mlxb_stack(mlxb_scope *s, const mlxb_array *const *xs, int n, int axis) {
  return guard(s, "mlxb_stack", [&] { return mx::stack(to_arrays(xs, n), axis, scope_dev(s)); });
}

int mlxb_split(mlxb_scope *s, const mlxb_array *x, const int64_t *indices, int n_indices, int axis, mlxb_array **outs) {
  if (outs && n_indices >= 0)
    for (int i = 0; i <= n_indices; i++) outs[i] = nullptr;
  return guard_status(s, "mlxb_split", [&] {
    const mx::array &in = arr(x);
    if (!outs) throw bridge_error("null outs");
    if (n_indices < 0) throw bridge_error("negative index count");
    if (n_indices > 0 && !indices) throw bridge_error("null indices");
    mx::Shape idx;
    for (int i = 0; i < n_indices; i++) idx.push_back(to_i32(indices[i], "split index"));
    std::vector<mx::array> parts =
        n_indices == 0 ? std::vector<mx::array>{in} : mx::split(in, idx, axis, scope_dev(s));
    if (parts.size() != static_cast<size_t>(n_indices) + 1)
      throw bridge_error("split gave " + std::to_string(parts.size()) + " parts");
    for (size_t i = 0; i < parts.size(); i++) outs[i] = scope_keep(s, parts[i]);
  });
}

mlxb_array *mlxb_slice(mlxb_scope *s, const mlxb_array *x, const int64_t *start, const int64_t *stop, const int64_t *strides) {
  return guard(s, "mlxb_slice", [&] {
    const mx::array &in = arr(x);
    slice_plan p = slice_plan_make(in, start, stop, strides);
    mx::array src = in;
    std::vector<int> perm;
    if (transposed_view(s, in, &src, &perm)) { /* the source sliced on the matching axes, then transposed */
      slice_plan q = p;
      for (size_t i = 0; i < perm.size(); i++)
        q.start[perm[i]] = p.start[i], q.stop[perm[i]] = p.stop[i], q.strides[perm[i]] = p.strides[i];
      for (auto &axis : q.flip_axes) axis = perm[axis];
      mx::array out = mx::slice(src, q.start, q.stop, q.strides, scope_dev(s));
      if (!q.flip_axes.empty()) out = mx::flip(out, q.flip_axes, scope_dev(s));
      return transposed(s, out, perm);
    }
    mx::array out = mx::slice(in, p.start, p.stop, p.strides, scope_dev(s));
    if (!p.flip_axes.empty()) out = mx::flip(out, p.flip_axes, scope_dev(s));
    return out;
  });
}

mlxb_array *mlxb_slice_dynamic(mlxb_scope *s, const mlxb_array *x, const mlxb_array *start, const int *axes, int n,
                               const int64_t *sizes) {
  return guard(s, "mlxb_slice_dynamic", [&] {
    const mx::array &in = arr(x);
    mx::Shape shape = to_shape(sizes, static_cast<int>(in.ndim()));
    std::vector<int> ax(axes, axes + n);
    std::vector<int64_t> window;
    for (int a : ax) window.push_back(shape.at(static_cast<size_t>(a < 0 ? a + in.ndim() : a)));
    return mx::slice(in, start_bound(in, arr(start), ax, window, scope_dev(s)), ax, shape, scope_dev(s));
  });
}

mlxb_array *mlxb_slice_update_dynamic(mlxb_scope *s, const mlxb_array *dst, const mlxb_array *update,
                                      const mlxb_array *start, const int *axes, int n) {
  return guard(s, "mlxb_slice_update_dynamic", [&] {
    const mx::array &in = arr(dst), &upd = arr(update);
    std::vector<int> ax(axes, axes + n);
    std::vector<int64_t> window;
    for (int a : ax) {
      int k = a < 0 ? a + static_cast<int>(in.ndim()) : a;
      int u = k - static_cast<int>(in.ndim()) + static_cast<int>(upd.ndim()); /* update broadcasts from the right */
      window.push_back(u >= 0 ? upd.shape(u) : 1);
    }
    return mx::slice_update(in, upd, start_bound(in, arr(start), ax, window, scope_dev(s)), ax, scope_dev(s));
  });
}

mlxb_array *mlxb_slice_update(mlxb_scope *s, const mlxb_array *dst, const mlxb_array *update,
                              const int64_t *start, const int64_t *stop, const int64_t *strides) {
  return guard(s, "mlxb_slice_update", [&] {
    const mx::array &in = arr(dst);
    mx::array upd = arr(update);
    slice_plan p = slice_plan_make(in, start, stop, strides);
    /* The positive-stride window visits a negative-step slice backwards: reverse the update. */
    if (!p.flip_axes.empty()) {
      if (upd.ndim() > in.ndim()) throw bridge_error("update has more axes than the destination");
      std::vector<int> axes;
      int lead = static_cast<int>(in.ndim() - upd.ndim());
      for (int a : p.flip_axes)
        if (a >= lead && upd.shape(a - lead) > 1) axes.push_back(a - lead);
      if (!axes.empty()) upd = mx::flip(upd, axes, scope_dev(s));
    }
    return mx::slice_update(in, upd, p.start, p.stop, p.strides, scope_dev(s));
  });
}

mlxb_array *mlxb_take(mlxb_scope *s, const mlxb_array *x, const mlxb_array *indices, int axis) {
  return guard(s, "mlxb_take", [&] {
    const mx::array &in = arr(x);
    return mx::take(in, index_bound(arr(indices), axis_dim(in, axis), 1, scope_dev(s)), axis, scope_dev(s));
  });
}

mlxb_array *mlxb_take_along_axis(mlxb_scope *s, const mlxb_array *x, const mlxb_array *indices, int axis) {
  return guard(s, "mlxb_take_along_axis", [&] {
    const mx::array &in = arr(x);
    return mx::take_along_axis(in, index_bound(arr(indices), axis_dim(in, axis), 1, scope_dev(s)), axis, scope_dev(s));
  });
}

mlxb_array *mlxb_put_along_axis(mlxb_scope *s, const mlxb_array *x, const mlxb_array *indices, const mlxb_array *values, int axis) {
  return guard(s, "mlxb_put_along_axis", [&] {
    const mx::array &in = arr(x);
    mx::array idx = index_bound(arr(indices), axis_dim(in, axis), 1, scope_dev(s));
    return mx::put_along_axis(in, idx, arr(values), axis, scatter_dev(s, in.dtype()));
  });
}

mlxb_array *mlxb_scatter_add_axis(mlxb_scope *s, const mlxb_array *x, const mlxb_array *indices, const mlxb_array *values, int axis) {
  return guard(s, "mlxb_scatter_add_axis", [&] {
    const mx::array &in = arr(x);
    mx::array idx = index_bound(arr(indices), axis_dim(in, axis), 1, scope_dev(s));
    return mx::scatter_add_axis(in, idx, arr(values), axis, scatter_dev(s, in.dtype()));
  });
}

mlxb_array *mlxb_gather(mlxb_scope *s, const mlxb_array *x, const mlxb_array *const *indices, int n,
                        const int *axes, const int64_t *slice_sizes) {
  return guard(s, "mlxb_gather", [&] {
    const mx::array &in = arr(x);
    std::vector<mx::array> idx = to_arrays(indices, n);
    std::vector<int> ax = to_ints(axes, n);
    mx::Shape slice = to_shape(slice_sizes, static_cast<int>(in.ndim()));
    for (int i = 0; i < n; i++) {
      int64_t dim = axis_dim(in, ax[i]);
      idx[i] = index_bound(idx[i], dim, slice[static_cast<size_t>(ax[i] < 0 ? ax[i] + in.ndim() : ax[i])], scope_dev(s));
    }
    return mx::gather(in, idx, ax, slice, scope_dev(s));
  });
}

mlxb_array *mlxb_scatter(mlxb_scope *s, mlxb_scatter_mode mode, const mlxb_array *x, const mlxb_array *const *indices, int n,
                         const mlxb_array *updates, const int *axes) {
  return guard(s, "mlxb_scatter", [&] {
    const mx::array &in = arr(x), &upd = arr(updates);
    std::vector<mx::array> idx = to_arrays(indices, n);
    std::vector<int> ax = to_ints(axes, n);
    for (int i = 0; i < n; i++) {
      /* updates are [indices..., window of x]; the window's extent on an indexed axis bounds it */
      int a = ax[i] < 0 ? ax[i] + static_cast<int>(in.ndim()) : ax[i];
      int w = idx[i].ndim() + a;
      int64_t win = w >= 0 && w < static_cast<int>(upd.ndim()) ? upd.shape(w) : 1;
      idx[i] = index_bound(idx[i], axis_dim(in, ax[i]), win, scope_dev(s));
    }
    return scatter_apply(mode, in, idx, upd, ax, scatter_dev(s, in.dtype()));
  });
}

mlxb_array *mlxb_pad(mlxb_scope *s, const mlxb_array *x, const int64_t *lo, const int64_t *hi,
                     const mlxb_array *pad_value, const char *mode) {
  return guard(s, "mlxb_pad", [&] {
    const mx::array &in = arr(x);
    int nd = static_cast<int>(in.ndim());
    if (nd > 0 && (!lo || !hi)) throw bridge_error("null lo/hi");
    std::vector<int> axes = all_axes(in);
    mx::Shape lo_s, hi_s;
    for (int i = 0; i < nd; i++) {
      lo_s.push_back(to_i32(lo[i], "pad"));
      hi_s.push_back(to_i32(hi[i], "pad"));
    }
    mx::array value = pad_value ? arr(pad_value) : mx::array(0, in.dtype());
    return mx::pad(in, axes, lo_s, hi_s, value, mode ? std::string(mode) : std::string("constant"), scope_dev(s));
  });
}

mlxb_array *mlxb_tile(mlxb_scope *s, const mlxb_array *x, const int64_t *reps, int n) {
  return guard(s, "mlxb_tile", [&] {
    if (n < 0 || (n > 0 && !reps)) throw bridge_error("bad reps");
    std::vector<int> r;
    for (int i = 0; i < n; i++) {
      if (reps[i] < 0) throw bridge_error("negative repeat");
      r.push_back(to_i32(reps[i], "repeat"));
    }
    return mx::tile(arr(x), r, scope_dev(s));
  });
}

mlxb_array *mlxb_repeat(mlxb_scope *s, const mlxb_array *x, int repeats, int axis) {
  return guard(s, "mlxb_repeat", [&] { return mx::repeat(arr(x), repeats, axis, scope_dev(s)); });
}

mlxb_array *mlxb_tril(mlxb_scope *s, const mlxb_array *x, int k) {
  return guard(s, "mlxb_tril", [&] { return mx::tril(arr(x), k, scope_dev(s)); });
}

mlxb_array *mlxb_triu(mlxb_scope *s, const mlxb_array *x, int k) {
  return guard(s, "mlxb_triu", [&] { return mx::triu(arr(x), k, scope_dev(s)); });
}

mlxb_array *mlxb_as_strided(mlxb_scope *s, const mlxb_array *x, const int64_t *dims, const int64_t *strides, int rank, int64_t offset) {
  return guard(s, "mlxb_as_strided", [&] {
    const mx::array &in = arr(x);
    mx::Shape shape = to_shape(dims, rank);
    if (rank > 0 && !strides) throw bridge_error("null strides");
    if (offset < 0) throw bridge_error("negative offset");
    mx::Strides st(strides, strides + rank);
    return mx::as_strided(in, std::move(shape), std::move(st), static_cast<size_t>(offset), scope_dev(s));
  });
}

mlxb_array *mlxb_contiguous(mlxb_scope *s, const mlxb_array *x) {
  return guard(s, "mlxb_contiguous", [&] {
    const mx::array &in = arr(x);
    return row_major(in, dtype_dev(s, in.dtype()));
  });
}

} /* extern "C" */
