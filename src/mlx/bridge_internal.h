/* Internals of the bridge shared by its C++ files (bridge*.cpp): the scope's definition and the
 * helpers that turn exceptions into the scope's sticky error. Never included from C. */
#ifndef EP_MLX_BRIDGE_INTERNAL_H
#define EP_MLX_BRIDGE_INTERNAL_H

#include <cstring>
#include <deque>
#include <exception>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "mlx/bridge.h"
#include "mlx/mlx.h"

namespace mx = mlx::core;

struct mlxb_scope {
  std::deque<mx::array> arrays; /* owned arrays; a deque never moves its elements */
  mx::Device device;            /* where ops of this scope run */
  bool force_cpu;               /* run later ops on the CPU whatever the device */
  std::string error;            /* first error; empty when ok */

  explicit mlxb_scope(mx::Device d) : device(d), force_cpu(false) {}
};

namespace mlxb_detail {

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

inline const mx::array &arr(const mlxb_array *a) {
  if (!a) throw null_arg{};
  return *reinterpret_cast<const mx::array *>(a);
}

inline std::optional<mx::array> opt(const mlxb_array *a) {
  if (!a) return std::nullopt;
  return *reinterpret_cast<const mx::array *>(a);
}

inline mlxb_array *scope_keep(mlxb_scope *s, mx::array a) {
  s->arrays.push_back(std::move(a));
  return reinterpret_cast<mlxb_array *>(&s->arrays.back());
}

/* Runs f (returning an mx::array) and keeps its result in s; errors become s's error. */
template <class F>
inline mlxb_array *guard(mlxb_scope *s, const char *fn, F &&f) noexcept {
  if (!s) return nullptr;
  try {
    return scope_keep(s, f());
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

/* Every axis of a, for reductions given no axes. */
inline std::vector<int> all_axes(const mx::array &a) {
  std::vector<int> axes(a.ndim());
  for (size_t i = 0; i < axes.size(); i++) axes[i] = static_cast<int>(i);
  return axes;
}

inline std::vector<int> reduce_axes(const mx::array &a, const int *axes, int naxes) {
  if (naxes == 0 && !axes) return all_axes(a);
  return to_ints(axes, naxes);
}

inline std::vector<mx::array> to_arrays(const mlxb_array *const *xs, int n) {
  if (n < 0) throw bridge_error("negative count");
  if (n > 0 && !xs) throw null_arg{};
  std::vector<mx::array> out;
  out.reserve(n);
  for (int i = 0; i < n; i++) out.push_back(arr(xs[i]));
  return out;
}

/* A copy of host bytes as an array: typed pointers make MLX copy values, not convert them. */
inline mx::array array_from_bytes(const void *data, mx::Shape shape, mlxb_dtype t) {
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
inline void array_copy_out(mlxb_scope *s, const mx::array &a, void *dst, size_t bytes) {
  size_t want = a.size() * a.itemsize();
  if (bytes != want)
    throw bridge_error("buffer holds " + std::to_string(bytes) + " bytes, array needs " + std::to_string(want));
  if (want == 0) return;
  if (!dst) throw bridge_error("null destination");
  mx::array src = a;
  src.eval();
  if (!src.flags().row_contiguous) {
    src = mx::contiguous(src, false, scope_dev(s));
    src.eval();
    if (!src.flags().row_contiguous) throw bridge_error("array is not row-contiguous after contiguous()");
  }
  std::memcpy(dst, src.data<uint8_t>(), want);
}

/* Elements of one axis visited by start, start+step, ... while short of stop. */
inline int64_t slice_count(int64_t start, int64_t stop, int64_t step) {
  if (step > 0) return stop > start ? (stop - start + step - 1) / step : 0;
  return start > stop ? (start - stop - step - 1) / (-step) : 0;
}

/* A positive-stride form of a full-rank slice, with the axes to flip where the step was negative. */
struct slice_plan {
  mx::Shape start, stop, strides;
  std::vector<int> flip_axes;
};

inline slice_plan slice_plan_make(const mx::array &x, const int64_t *start, const int64_t *stop, const int64_t *strides) {
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

inline mx::array unary_apply(mlxb_unary_op op, const mx::array &x, mx::StreamOrDevice d) {
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
  default: break;
  }
  throw bridge_error("unknown unary op " + std::to_string(static_cast<int>(op)));
}

/* MLX's int32/int64 floor_divide and remainder kill the process (SIGFPE) on INT_MIN / -1; a
 * divisor of -1 is answered here instead: the wrapped negation, remainder 0. */
inline mx::array int_divmod_safe(bool rem, const mx::array &a, const mx::array &b, mx::StreamOrDevice d) {
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

inline mx::array binary_apply(mlxb_binary_op op, const mx::array &a, const mx::array &b, mx::StreamOrDevice d) {
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

inline mx::array reduce_apply(mlxb_reduce_op op, const mx::array &x, const std::vector<int> &axes, bool keep,
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

inline mx::array scatter_apply(mlxb_scatter_mode mode, const mx::array &x, const std::vector<mx::array> &idx,
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

} // namespace mlxb_detail

#endif
