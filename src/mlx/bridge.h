/* The C ABI over MLX's C++ API: the only door from the C code of the project into MLX.
 *
 * Arrays are opaque handles owned by a scope (an arena of arrays with a device and a sticky
 * error). Op functions return a new handle, or NULL on failure; a NULL argument where an array is
 * required makes the function return NULL at once, so a lowering can chain calls and test once
 * (`mlxb_ok`). Every C++ exception is caught inside the bridge and becomes the scope's error.
 * A scope is used by one thread at a time; handles of another scope (e.g. a plan's constants,
 * evaluated at Compile) may be read as inputs from any thread. */
#ifndef EP_MLX_BRIDGE_H
#define EP_MLX_BRIDGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mlxb_scope mlxb_scope;
typedef struct mlxb_array mlxb_array;

typedef enum mlxb_dtype {
  MLXB_BOOL, MLXB_U8, MLXB_U16, MLXB_U32, MLXB_U64,
  MLXB_I8, MLXB_I16, MLXB_I32, MLXB_I64,
  MLXB_F16, MLXB_BF16, MLXB_F32, MLXB_F64, MLXB_C64,
  MLXB_DTYPE_COUNT
} mlxb_dtype;

typedef enum mlxb_device { MLXB_DEVICE_CPU, MLXB_DEVICE_GPU } mlxb_device;

/* ---- library ---------------------------------------------------------------------------- */
const char *mlxb_version(void);
bool mlxb_gpu_available(void);
size_t mlxb_dtype_size(mlxb_dtype t);
/* Process-wide MLX settings applied once at load (e.g. cache sizes); 0 on success. */
int mlxb_init(char *err, size_t err_len);
/* The BLAS that MLX's CPU products run on (src/mlx/cpu_blas.c: this library forwards MLX's CBLAS
 * calls to an optimized BLAS when one is installed): a line for reports, decided once per process. */
const char *mlxb_cpu_blas_describe(void);

/* Serializes MLX work on devices whose backend is not safe for concurrent use from several
 * threads: MLX 0.32.4's CUDA backend crashed (SIGSEGV/SIGABRT) when threads built and evaluated
 * graphs at once on the H200, so GPU work takes a process-wide lock; CPU work does not. ORT's calls
 * into the EP's device memory (allocations, data transfer) take the same lock. Re-entrant; every
 * begin is paired with an end on the same thread. */
void mlxb_exclusive_begin(mlxb_device dev);
void mlxb_exclusive_end(mlxb_device dev);

/* ---- device memory (src/mlx/bridge_device.cpp) ------------------------------------------
 * MLX's GPU memory lent to ORT (the EP's allocator and data transfer), so that tensors stay on
 * the GPU between Runs. Available on MLX's CUDA backend; elsewhere the EP keeps host memory.
 * Every such buffer is also readable and writable from the host (unified memory), only slower. */
/* Turns device memory on (once per process; later calls return the first answer): MLX's CUDA
 * unified memory, or with on_host, host memory standing in for it (tests on MLX's CPU backend). */
bool mlxb_device_memory_enable(bool on_host);
bool mlxb_device_memory_available(void); /* whether it was turned on */
void *mlxb_device_alloc(size_t bytes);      /* NULL on failure */
void mlxb_device_free(void *p);             /* accepts NULL and foreign pointers (ignored) */
bool mlxb_device_owns(const void *p, size_t bytes); /* [p, p+bytes) lies in one of our buffers */
/* Advises the evaluated arrays of s (a plan's constants) to live on the GPU and moves them there
 * (CUDA unified memory with device memory on; elsewhere nothing). */
void mlxb_prefer_device_constants(mlxb_scope *s);
/* Copies n blocks (any direction: host or device memory on either side) and waits for them. */
int mlxb_device_copy(void *const *dst, const void *const *src, const size_t *bytes, size_t n, char *err,
                     size_t err_len);

/* ---- scopes ----------------------------------------------------------------------------- */
mlxb_scope *mlxb_scope_new(mlxb_device dev); /* NULL when out of memory */
void mlxb_scope_free(mlxb_scope *s);         /* frees every handle of the scope; accepts NULL */
bool mlxb_ok(const mlxb_scope *s);
const char *mlxb_error(const mlxb_scope *s); /* "" when ok */
void mlxb_set_error(mlxb_scope *s, const char *msg); /* first error sticks */
void mlxb_clear_error(mlxb_scope *s);
mlxb_device mlxb_scope_device(const mlxb_scope *s);
/* Places later ops of this scope on the CPU (float64 work on a GPU scope); returns the old value. */
bool mlxb_scope_force_cpu(mlxb_scope *s, bool force);

/* ---- creation and queries ---------------------------------------------------------------- */
/* Copies `data` (row-major, dims[rank]) into a new array. data may be NULL when the size is 0. */
mlxb_array *mlxb_from_data(mlxb_scope *s, const void *data, const int64_t *dims, int rank, mlxb_dtype t);
/* Wraps caller memory without a copy where MLX allows it (its CPU allocator; other backends
 * copy). The memory must stay valid and unchanged while any array of the scope may read it; MLX
 * never writes into it, as the scope's own reference keeps it from being donated. Not for bool. */
mlxb_array *mlxb_borrow_data(mlxb_scope *s, const void *data, const int64_t *dims, int rank, mlxb_dtype t);
/* Copies `data` (dims[rank]) into a new array whose `axis` is `pad` longer, the extra trailing
 * rows zero. Not for bool. */
mlxb_array *mlxb_from_data_padded(mlxb_scope *s, const void *data, const int64_t *dims, int rank, mlxb_dtype t,
                                  int axis, int64_t pad);
/* Wraps one of our device buffers (mlxb_device_owns) without a copy; the caller keeps it alive
 * and unchanged while the scope may read it. */
mlxb_array *mlxb_borrow_device(mlxb_scope *s, const void *data, const int64_t *dims, int rank, mlxb_dtype t);
/* a padded with `pad` zero rows after its last along axis, in the scope's graph. */
mlxb_array *mlxb_pad_axis(mlxb_scope *s, const mlxb_array *a, int axis, int64_t pad);
/* Pads each arrays[i] whose axes[i] >= 0 with `pad` zero rows along that axis, replacing it in
 * the list: the evaluated device inputs among them as one operation of the Run's own graph where
 * mlxb_copy_into_device_available(s) (no fill and wait before the program), else queued for
 * mlxb_device_prepare (which must come next), the others as mlxb_pad_axis does. 0 ok, -1 error. */
int mlxb_pad_inputs(mlxb_scope *s, mlxb_array **arrays, const int *axes, int n, int64_t pad);
mlxb_array *mlxb_scalar_f64(mlxb_scope *s, double v, mlxb_dtype t);
mlxb_array *mlxb_scalar_i64(mlxb_scope *s, int64_t v, mlxb_dtype t);
mlxb_array *mlxb_full(mlxb_scope *s, const int64_t *dims, int rank, const mlxb_array *value, mlxb_dtype t);
mlxb_array *mlxb_zeros(mlxb_scope *s, const int64_t *dims, int rank, mlxb_dtype t);
mlxb_array *mlxb_arange(mlxb_scope *s, double start, double stop, double step, mlxb_dtype t);
mlxb_array *mlxb_eye(mlxb_scope *s, int64_t n, int64_t m, int64_t k, mlxb_dtype t);
/* A handle of this scope that refers to the same array (to adopt a handle of another scope). */
mlxb_array *mlxb_ref(mlxb_scope *s, const mlxb_array *a);

int mlxb_ndim(const mlxb_array *a);
int64_t mlxb_dim(const mlxb_array *a, int axis); /* negative axis counts from the end */
void mlxb_shape(const mlxb_array *a, int64_t *dims_out); /* ndim entries */
mlxb_dtype mlxb_type(const mlxb_array *a);
size_t mlxb_size(const mlxb_array *a); /* element count */

/* ---- evaluation and host access ---------------------------------------------------------- */
int mlxb_eval(mlxb_scope *s, mlxb_array *const *arrays, size_t n); /* 0 ok, -1 error in scope */
/* mlxb_eval waiting for MLX's CPU stream by looking at the arrays for up to spin_us microseconds
 * before it sleeps: MLX runs a CPU scope's work on its stream's thread, and a program of a few
 * operations finishes sooner than the wake-up of a sleeping waiter takes on a busy host. Other
 * scopes, or spin_us <= 0: mlxb_eval. */
int mlxb_eval_spinning(mlxb_scope *s, mlxb_array *const *arrays, size_t n, int64_t spin_us);
/* The number of operations (arrays still to compute) the arrays depend on: the graph an eval
 * would run. Siblings of a multi-output primitive count once each. 0 on failure. */
size_t mlxb_graph_size(mlxb_array *const *arrays, size_t n);
/* The same count with "Primitive=count" pairs, most frequent first, written into dst (cut at cap
 * bytes): where a graph's operations go. */
size_t mlxb_graph_histogram(mlxb_array *const *arrays, size_t n, char *dst, size_t cap);
/* A running tally over one trace's lowering: each add counts (and lists, as the histogram does) only
 * the operations no earlier add of this tally reached, so the per-node counts of a trace add up to
 * its program's, however a lowering reaches an earlier node's work (e.g. a kept channels-last
 * array rather than the node's NCHW input). new: NULL when out of memory; add with NULL counts 0
 * (writes an empty list). */
typedef struct mlxb_op_tally mlxb_op_tally;
mlxb_op_tally *mlxb_op_tally_new(void);
size_t mlxb_op_tally_add(mlxb_op_tally *t, mlxb_array *const *arrays, size_t n, char *dst, size_t cap);
void mlxb_op_tally_free(mlxb_op_tally *t);
/* Copies an array's elements, row-major, into dst (bytes must equal size*itemsize).
 * Evaluates first when needed. 0 ok, -1 error in scope. */
int mlxb_read(mlxb_scope *s, const mlxb_array *a, void *dst, size_t bytes);
/* Copies the first `keep` entries of `axis` (all of every other axis), row-major, into dst:
 * an output read without the trailing rows a decode bucket added, with no intermediate copy. */
int mlxb_read_prefix(mlxb_scope *s, const mlxb_array *a, int axis, int64_t keep, void *dst, size_t bytes);
/* Device-memory counterparts of mlxb_read / mlxb_read_prefix (axis < 0: the whole array):
 * copies evaluated `a` into one of our device buffers, on the GPU. The copies are queued:
 * mlxb_device_finish waits for them and must run before the scope is freed. */
int mlxb_write_device(mlxb_scope *s, const mlxb_array *a, int axis, int64_t keep, void *dst, size_t bytes);
int mlxb_device_finish(mlxb_scope *s);
/* One copy for mlxb_copy_into_device: arrays[src] (axis < 0: whole; else its first `keep` entries of
 * axis) into dst, bytes long, one of our device buffers. */
typedef struct mlxb_output_copy {
  int src;
  int axis;
  int64_t keep;
  void *dst;
  size_t bytes;
} mlxb_output_copy;
/* Whether s can write a Run's outputs into device buffers from within the program's own eval
 * (ORT_EP_MLX_COPY_IN_PROGRAM; see bridge_device.cpp). */
bool mlxb_copy_into_device_available(const mlxb_scope *s);
/* An array to evaluate with `arrays` (all of a Run's results: it runs after every one of them)
 * whose operation does `copies` from them: no queued copy and no wait after the eval. The
 * sources must be made row-major (mlxb_contiguous). NULL on error. */
mlxb_array *mlxb_copy_into_device(mlxb_scope *s, mlxb_array *const *arrays, int n, const mlxb_output_copy *copies,
                                  int n_copies);
/* Fills the device inputs mlxb_pad_inputs queued on s (one kernel launch on CUDA); must run after the
 * Run's inputs are bound and before anything reads them. 0 ok, -1 error. */
int mlxb_device_prepare(mlxb_scope *s);
/* Reads an integer or bool array as int64 values (n must equal its size). */
int mlxb_read_i64(mlxb_scope *s, const mlxb_array *a, int64_t *dst, size_t n);
int mlxb_read_f64(mlxb_scope *s, const mlxb_array *a, double *dst, size_t n);

/* ---- elementwise ------------------------------------------------------------------------- */
typedef enum mlxb_unary_op {
  MLXB_ABS, MLXB_NEG, MLXB_SQRT, MLXB_RSQRT, MLXB_RECIPROCAL, MLXB_SQUARE,
  MLXB_EXP, MLXB_EXPM1, MLXB_LOG, MLXB_LOG1P, MLXB_LOG2, MLXB_LOG10,
  MLXB_ERF, MLXB_ERFINV, MLXB_TANH, MLXB_SIGMOID,
  MLXB_SIN, MLXB_COS, MLXB_TAN, MLXB_ASIN, MLXB_ACOS, MLXB_ATAN,
  MLXB_SINH, MLXB_COSH, MLXB_ASINH, MLXB_ACOSH, MLXB_ATANH,
  MLXB_CEIL, MLXB_FLOOR, MLXB_ROUND, MLXB_SIGN,
  MLXB_LOGICAL_NOT, MLXB_BITWISE_INVERT,
  MLXB_ISNAN, MLXB_ISINF, MLXB_ISPOSINF, MLXB_ISNEGINF, MLXB_ISFINITE,
  MLXB_STOP_GRADIENT,
  MLXB_GELU_ERF, /* (0.5 * x) * (1 + erf(x * sqrt(1/2))), Gelu's formula: one pass on a CPU scope */
  MLXB_UNARY_COUNT
} mlxb_unary_op;

typedef enum mlxb_binary_op {
  MLXB_ADD, MLXB_SUB, MLXB_MUL, MLXB_DIV, MLXB_POW, MLXB_MAXIMUM, MLXB_MINIMUM,
  MLXB_REMAINDER,   /* sign of divisor (Python %) */
  MLXB_FLOOR_DIVIDE,
  MLXB_EQUAL, MLXB_NOT_EQUAL, MLXB_LESS, MLXB_LESS_EQUAL, MLXB_GREATER, MLXB_GREATER_EQUAL,
  MLXB_LOGICAL_AND, MLXB_LOGICAL_OR,
  MLXB_BITWISE_AND, MLXB_BITWISE_OR, MLXB_BITWISE_XOR, MLXB_LEFT_SHIFT, MLXB_RIGHT_SHIFT,
  MLXB_ATAN2, MLXB_LOGADDEXP, MLXB_BINARY_COUNT
} mlxb_binary_op;

mlxb_array *mlxb_unary(mlxb_scope *s, mlxb_unary_op op, const mlxb_array *x);
/* Broadcasting binary op. MLX type promotion applies; MLXB_DIV of integers gives floats. */
mlxb_array *mlxb_binary(mlxb_scope *s, mlxb_binary_op op, const mlxb_array *a, const mlxb_array *b);
mlxb_array *mlxb_where(mlxb_scope *s, const mlxb_array *cond, const mlxb_array *a, const mlxb_array *b);
mlxb_array *mlxb_astype(mlxb_scope *s, const mlxb_array *x, mlxb_dtype t);
mlxb_array *mlxb_view(mlxb_scope *s, const mlxb_array *x, mlxb_dtype t); /* reinterpret bits */
mlxb_array *mlxb_clip(mlxb_scope *s, const mlxb_array *x, const mlxb_array *lo_or_null, const mlxb_array *hi_or_null);

/* ---- reductions and scans ---------------------------------------------------------------- */
typedef enum mlxb_reduce_op {
  MLXB_RSUM, MLXB_RPROD, MLXB_RMAX, MLXB_RMIN, MLXB_RMEAN, MLXB_RLOGSUMEXP, MLXB_RANY, MLXB_RALL,
  MLXB_REDUCE_COUNT
} mlxb_reduce_op;

/* naxes == 0 with axes == NULL reduces over every axis. */
mlxb_array *mlxb_reduce(mlxb_scope *s, mlxb_reduce_op op, const mlxb_array *x, const int *axes, int naxes, bool keepdims);
mlxb_array *mlxb_var(mlxb_scope *s, const mlxb_array *x, const int *axes, int naxes, bool keepdims, int ddof);
mlxb_array *mlxb_argmax(mlxb_scope *s, const mlxb_array *x, int axis, bool keepdims);
mlxb_array *mlxb_argmin(mlxb_scope *s, const mlxb_array *x, int axis, bool keepdims);
/* op is MLXB_RSUM, MLXB_RPROD, MLXB_RMAX or MLXB_RMIN. */
mlxb_array *mlxb_cumulative(mlxb_scope *s, mlxb_reduce_op op, const mlxb_array *x, int axis, bool reverse, bool inclusive);
mlxb_array *mlxb_softmax(mlxb_scope *s, const mlxb_array *x, const int *axes, int naxes, bool precise);
mlxb_array *mlxb_sort(mlxb_scope *s, const mlxb_array *x, int axis);
mlxb_array *mlxb_argsort(mlxb_scope *s, const mlxb_array *x, int axis); /* stable, ascending, uint32 */
mlxb_array *mlxb_topk(mlxb_scope *s, const mlxb_array *x, int k, int axis);

/* ---- shape and indexing ------------------------------------------------------------------ */
mlxb_array *mlxb_reshape(mlxb_scope *s, const mlxb_array *x, const int64_t *dims, int rank);
mlxb_array *mlxb_transpose(mlxb_scope *s, const mlxb_array *x, const int *perm, int n);
mlxb_array *mlxb_broadcast_to(mlxb_scope *s, const mlxb_array *x, const int64_t *dims, int rank);
mlxb_array *mlxb_expand_dims(mlxb_scope *s, const mlxb_array *x, const int *axes, int n);
mlxb_array *mlxb_squeeze(mlxb_scope *s, const mlxb_array *x, const int *axes, int n);
mlxb_array *mlxb_concat(mlxb_scope *s, const mlxb_array *const *xs, int n, int axis);
mlxb_array *mlxb_stack(mlxb_scope *s, const mlxb_array *const *xs, int n, int axis);
/* Splits at the given indices along axis into n_indices + 1 parts written to outs. 0 ok. */
int mlxb_split(mlxb_scope *s, const mlxb_array *x, const int64_t *indices, int n_indices, int axis, mlxb_array **outs);
/* Full-rank strided slice; strides may be negative (start/stop then follow Python semantics
 * after the caller has clamped them: elements start, start+step, ... while != stop). */
mlxb_array *mlxb_slice(mlxb_scope *s, const mlxb_array *x, const int64_t *start, const int64_t *stop, const int64_t *strides);
/* Slices whose start is data: `start` is an integer array with one entry per listed axis;
 * `sizes` gives the full output shape. Starts must be in range (MLX does not check them). */
mlxb_array *mlxb_slice_dynamic(mlxb_scope *s, const mlxb_array *x, const mlxb_array *start, const int *axes, int n,
                               const int64_t *sizes);
mlxb_array *mlxb_slice_update_dynamic(mlxb_scope *s, const mlxb_array *dst, const mlxb_array *update,
                                      const mlxb_array *start, const int *axes, int n);
mlxb_array *mlxb_slice_update(mlxb_scope *s, const mlxb_array *dst, const mlxb_array *update,
                              const int64_t *start, const int64_t *stop, const int64_t *strides);
mlxb_array *mlxb_take(mlxb_scope *s, const mlxb_array *x, const mlxb_array *indices, int axis);
mlxb_array *mlxb_take_along_axis(mlxb_scope *s, const mlxb_array *x, const mlxb_array *indices, int axis);
mlxb_array *mlxb_put_along_axis(mlxb_scope *s, const mlxb_array *x, const mlxb_array *indices, const mlxb_array *values, int axis);
mlxb_array *mlxb_scatter_add_axis(mlxb_scope *s, const mlxb_array *x, const mlxb_array *indices, const mlxb_array *values, int axis);
/* MLX gather: indices[i] indexes axes[i]; slice_sizes has ndim(x) entries. */
mlxb_array *mlxb_gather(mlxb_scope *s, const mlxb_array *x, const mlxb_array *const *indices, int n,
                        const int *axes, const int64_t *slice_sizes);
typedef enum mlxb_scatter_mode { MLXB_SCATTER_SET, MLXB_SCATTER_ADD, MLXB_SCATTER_PROD, MLXB_SCATTER_MAX, MLXB_SCATTER_MIN } mlxb_scatter_mode;
mlxb_array *mlxb_scatter(mlxb_scope *s, mlxb_scatter_mode mode, const mlxb_array *x, const mlxb_array *const *indices, int n,
                         const mlxb_array *updates, const int *axes);
/* mode: "constant", "edge", "reflect" or "symmetric"; pad_value used by "constant". */
mlxb_array *mlxb_pad(mlxb_scope *s, const mlxb_array *x, const int64_t *lo, const int64_t *hi,
                     const mlxb_array *pad_value, const char *mode);
mlxb_array *mlxb_tile(mlxb_scope *s, const mlxb_array *x, const int64_t *reps, int n);
mlxb_array *mlxb_repeat(mlxb_scope *s, const mlxb_array *x, int repeats, int axis);
mlxb_array *mlxb_tril(mlxb_scope *s, const mlxb_array *x, int k);
mlxb_array *mlxb_triu(mlxb_scope *s, const mlxb_array *x, int k);
mlxb_array *mlxb_as_strided(mlxb_scope *s, const mlxb_array *x, const int64_t *dims, const int64_t *strides, int rank, int64_t offset);
mlxb_array *mlxb_contiguous(mlxb_scope *s, const mlxb_array *x);

/* ---- linear algebra and neural-network ops ------------------------------------------------ */
mlxb_array *mlxb_matmul(mlxb_scope *s, const mlxb_array *a, const mlxb_array *b);
/* alpha * (a @ b) + beta * c */
mlxb_array *mlxb_addmm(mlxb_scope *s, const mlxb_array *c, const mlxb_array *a, const mlxb_array *b, float alpha, float beta);
/* Channels-last convolution: x [N, spatial..., Cin], w [Cout, spatial..., Cin/groups]. */
mlxb_array *mlxb_conv_general(mlxb_scope *s, const mlxb_array *x, const mlxb_array *w, int nspatial,
                              const int *strides, const int *pad_lo, const int *pad_hi,
                              const int *kernel_dilation, const int *input_dilation, int groups, bool flip);
/* Last-axis norms; weight/bias may be NULL. */
mlxb_array *mlxb_layer_norm(mlxb_scope *s, const mlxb_array *x, const mlxb_array *weight, const mlxb_array *bias, float eps);
mlxb_array *mlxb_rms_norm(mlxb_scope *s, const mlxb_array *x, const mlxb_array *weight, float eps);
/* Decode attention in one kernel (src/mlx/bridge_kernels_attention.cpp): S query rows per sequence, q
 * [B, S, Hq * D] (or [B, Hq, 1, D] for one row: the same bytes) against k, v [B, Hkv, T, D]. Sequence
 * b's total length total_b = lengths[b] + length_add is clamped to [0, T] (lengths: one integer per
 * sequence, any shape). Query row s sits at base_b + s, base_b = 0 for a first prompt
 * (rows->first), else total_b - S; causally it sees keys [lo, min(base_b + s + 1, total_b)),
 * bidirectionally [lo, total_b). lo is 0, or with a window, the visible end (or, with
 * rows->window_from_row, base_b + s + 1: ORT's float32 flash kernel) minus the window. Scores are
 * scale * q.k, soft-capped when softcap > 0; float32 inside, the result in q's dtype and shape;
 * a row that sees no key gives zeros. rows NULL: one row, causal (a decode step). Only where
 * mlxb_decode_attention_available says so: MLX's CUDA backend, and CPU scopes through primitives
 * of our own with the same arithmetic (bridge_cpu_decode.cpp). */
typedef struct mlxb_attn_rows {
  int64_t rows;         /* S */
  bool first;           /* the rows start at position 0 (a first prompt) */
  bool bidirectional;   /* every row sees keys up to total_b (GroupQueryAttention's causal = 0) */
  bool window_from_row; /* a window's lower bound counts from the row's own end */
} mlxb_attn_rows;
/* A rotary embedding read from cos/sin caches [max_position, dims / 2] over the first dims
 * channels, pairs (i, i + dims / 2) or, interleaved, (2i, 2i + 1); float32 inside, rounded once to
 * the rotated array's dtype. Row s of sequence b is rotated by cache row positions[b] +
 * position_add + s (positions: one integer per sequence, any shape) or, when positions holds one
 * per row (B * S values), positions[b * S + s] + position_add; clamped into the cache either way. */
typedef struct mlxb_rope {
  const mlxb_array *cos, *sin, *positions;
  int64_t dims, position_add;
  bool interleaved;
} mlxb_rope;
bool mlxb_decode_attention_available(const mlxb_scope *s, mlxb_dtype t, int64_t head_size);
/* Whether S > 1 query rows (a prompt) take the kernels on s: MLX's CUDA backend by default;
 * ORT_EP_MLX_ROWS_ATTENTION=0 never, =all also on CPU scopes (single-threaded per head: tests). */
bool mlxb_rows_attention_available(const mlxb_scope *s, mlxb_dtype t, int64_t head_size);
/* rope (may be NULL) rotates q inside the kernel; after (may be NULL) is an array the kernel runs
 * after (mlxb_decode_kv_write's). */
mlxb_array *mlxb_decode_attention(mlxb_scope *s, const mlxb_array *q, const mlxb_array *k, const mlxb_array *v,
                                  const mlxb_array *lengths, int64_t length_add, const mlxb_attn_rows *rows,
                                  float scale, float softcap, int64_t window, const mlxb_rope *rope,
                                  const mlxb_array *after);
/* A step's KV cache in one kernel: present [B, Hkv, plen, D] holds past rows t < at_b (zeros past
 * the past buffer's length), the S new rows k/v ([B, S, Hkv * D], or [B, Hkv, 1, D] for one) at
 * t = at_b + j (k rotated by rope when rope is not NULL) and zeros after; at_b = at_positions[b] +
 * at_add (one integer per sequence, any shape), 0 when at_positions is NULL. The past buffers
 * [B, Hkv, P, D] may have no rows (P = 0: nothing to copy). Rows outside [0, plen) are never
 * written. Same availability as decode attention. 0 ok, -1 error. */
int mlxb_decode_kv_append(mlxb_scope *s, const mlxb_array *past_k, const mlxb_array *past_v, const mlxb_array *k,
                          const mlxb_array *v, const mlxb_array *at_positions, int64_t at_add, int64_t plen,
                          const mlxb_rope *rope, mlxb_array **present_k, mlxb_array **present_v);
/* A one-token step's append and attention in one launch: the present as mlxb_decode_kv_append
 * makes it (at_b = lengths[b] + length_add - 1) and the attention as mlxb_decode_attention computes
 * it over that present, read from the past buffers and the new rows instead. MLX's CUDA backend
 * only, with the context in one block per head (mlxb_decode_step_available; ORT_EP_MLX_DECODE_FUSED=0:
 * never). Returns the attention's output (q's dtype and shape), the present in *present_k and
 * *present_v; NULL on error. */
bool mlxb_decode_step_available(const mlxb_scope *s, mlxb_dtype t, int64_t head_size, int64_t plen);
mlxb_array *mlxb_decode_step(mlxb_scope *s, const mlxb_array *q, const mlxb_array *past_k, const mlxb_array *past_v,
                             const mlxb_array *k, const mlxb_array *v, const mlxb_array *lengths, int64_t length_add,
                             int64_t plen, float scale, float softcap, int64_t window, const mlxb_rope *rope,
                             mlxb_array **present_k, mlxb_array **present_v);
/* The same where the caches k, v [B, Hkv, L, D] are past and present at once (onnxruntime-genai's
 * shared buffer): the new rows are written into row lengths[b] + length_add - 1 of them (nothing
 * outside) and the attention reads them; one dtype throughout, no copy. Returns the attention's
 * output; the caches are the present. */
mlxb_array *mlxb_decode_step_in_place(mlxb_scope *s, const mlxb_array *q, const mlxb_array *cache_k,
                                      const mlxb_array *cache_v, const mlxb_array *k, const mlxb_array *v,
                                      const mlxb_array *lengths, int64_t length_add, float scale, float softcap,
                                      int64_t window, const mlxb_rope *rope);
/* The in-place form of the append for a buffer that is past and present at once (onnxruntime-genai's
 * shared KV buffer): writes row at_b of caches k, v [B, Hkv, L, D] (one dtype with the new rows;
 * device buffers the caller may have written) with the new rows (k rotated by rope), nothing where
 * at_b is outside [0, L). Returns a one-element array to order readers of the caches after the
 * write (mlxb_decode_attention's `after`); the caches themselves are the present. MLX's CUDA
 * backend only (mlxb_decode_kv_write_available): a CPU scope writes through no input. */
bool mlxb_decode_kv_write_available(const mlxb_scope *s, mlxb_dtype t, int64_t head_size);
mlxb_array *mlxb_decode_kv_write(mlxb_scope *s, const mlxb_array *cache_k, const mlxb_array *cache_v,
                                  const mlxb_array *k, const mlxb_array *v, const mlxb_array *at_positions,
                                  int64_t at_add, const mlxb_rope *rope);
/* RMS normalization of rows in one kernel (SkipSimplifiedLayerNormalization's float32 arithmetic):
 * v = x + skip + bias in float32 (skip [..., H] of R rows or a divisor of R, repeating over the
 * rows, bias [H]; either may be NULL), y = v * rsqrt(mean(v^2) + eps) * gamma rounded once to x's
 * dtype, and *sum = v rounded to it when want_sum, both in x's shape. x [..., H] (R rows: every
 * axis but the last) float32/float16/bfloat16; MLX's CUDA backend and CPU scopes
 * (mlxb_rms_norm_fused_available). 0 ok, -1 error. */
bool mlxb_rms_norm_fused_available(const mlxb_scope *s, mlxb_dtype t);
int mlxb_rms_norm_fused(mlxb_scope *s, const mlxb_array *x, const mlxb_array *skip, const mlxb_array *bias,
                        const mlxb_array *gamma, float eps, bool want_sum, mlxb_array **y, mlxb_array **sum);
/* Whether evaluated `a` is the array of device buffer `data` (one of ours) from its first byte. */
bool mlxb_holds_buffer(const mlxb_array *a, const void *data);
/* q [B, Hq, Tq, D], k/v [B, Hkv, Tk, D]; mask_mode "" or "causal"; mask and sinks may be NULL. */
mlxb_array *mlxb_sdpa(mlxb_scope *s, const mlxb_array *q, const mlxb_array *k, const mlxb_array *v, float scale,
                      const char *mask_mode, const mlxb_array *mask, const mlxb_array *sinks);
/* MatMulNBits for a few rows in one kernel (src/mlx/bridge_kernels_quant.cpp): x [..., K] (M rows)
 * float32/float16/bfloat16 times the packed weights w [N, K * bits / 32] uint32 (MLX's affine layout,
 * values from the low bits up), float32 scales and biases [N, K / group_size]: y [..., N] in x's dtype, each element
 * the float32 sum of x * (scale * q + bias) rounded once. Only where mlxb_qgemv_available says so
 * (MLX's CUDA backend: bits 2, 4, 8, group_size a multiple of 32; a CPU scope on x86-64 with AVX2
 * and FMA: float32, bits 4, through bridge_cpu_qgemv.cpp's sets task). */
bool mlxb_qgemv_available(const mlxb_scope *s, mlxb_dtype t, int bits, int group_size);
mlxb_array *mlxb_qgemv(mlxb_scope *s, const mlxb_array *x, const mlxb_array *w, const mlxb_array *scales,
                       const mlxb_array *biases, int group_size, int bits);
/* MatMulNBits' accuracy_level 4 quantization of A as MLAS does it, per block of `block` elements of
 * x's last axis (a multiple of it): the float32 values q * scale, scale = max|x| / 127 and
 * q = x * (127 / max|x|) rounded half to even (a block of zeros gives zeros, one with NaN gives NaN),
 * what MLX's reduction and elementwise operations give, in one task on a CPU scope (float32 x on
 * x86-64: mlxb_quantize_blocks_available). */
bool mlxb_quantize_blocks_available(const mlxb_scope *s, mlxb_dtype t);
mlxb_array *mlxb_quantize_blocks(mlxb_scope *s, const mlxb_array *x, int64_t block);
/* The same for up to MLXB_QGEMV_MAX_SETS weight sets of one K in one launch (sibling projections of
 * one input): out[i] = x times set i, rounded to x's dtype, then (where add, when given, has a
 * non-NULL add[i] [N_i]) add[i] added and rounded again, as a following Add node would. 0 ok, -1
 * error. */
enum { MLXB_QGEMV_MAX_SETS = 3 };
/* Compiles every CUDA kernel of ours in the form the kernel cache launches (sm_90, NVRTC of MLX's
 * CUDA backend or of a CUDA toolkit), for sample inputs: 0, 1 when no NVRTC or CUDA headers are at
 * hand, -1 with the failure in report. A check for machines without a GPU. */
int mlxb_cuda_kernels_selfcheck(char *report, size_t len);
/* Process-wide counts of our CUDA kernels' variants (bridge_kernel_cache.cpp): compiled by NVRTC in
 * this process, the milliseconds that took, and read from the kernel cache on disk instead. */
void mlxb_kernel_cache_stats(uint64_t *compiled, uint64_t *from_disk, double *compile_ms);
/* An RMS norm computed by the GEMV launch itself, so that the norm node needs no launch of its own
 * (its readers are the launch's weight sets): with one, the x handed to mlxb_qgemv_sets or
 * mlxb_qgemv_swiglu is the norm's input [..., K], and every block normalizes its row as
 * mlxb_rms_norm_fused does (skip, bias NULL or as there; gamma [K]; the sum of squares in another
 * order) before multiplying; with want_sum, sum receives x + skip + bias rounded to x's dtype in
 * x's shape. MLX's CUDA backend, K up to MLXB_QGEMV_NORM_MAX_K, opt-in with ORT_EP_MLX_NORM_IN_GEMV=1
 * (mlxb_qgemv_norm_available; measured slower than the norm's own launch on the H100). */
enum { MLXB_QGEMV_NORM_MAX_K = 8192 };
typedef struct mlxb_qgemv_norm {
  const mlxb_array *skip, *bias, *gamma;
  float eps;
  bool want_sum;
  mlxb_array *sum; /* out */
} mlxb_qgemv_norm;
bool mlxb_qgemv_norm_available(const mlxb_scope *s, mlxb_dtype t, int64_t k);
/* norm: NULL, or the norm the launch computes first (above). */
int mlxb_qgemv_sets(mlxb_scope *s, const mlxb_array *x, int n_sets, const mlxb_array *const *w,
                    const mlxb_array *const *scales, const mlxb_array *const *biases,
                    const mlxb_array *const *add, int group_size, int bits, mlxb_qgemv_norm *norm, mlxb_array **out);
/* A gated MLP's two projections and its activation in one launch: sets 0 (gate) and 1 (up) of one
 * N as above (add as above), and out[0] gate, out[1] up, out[2] Sigmoid(gate), out[3] gate times
 * out[2], out[4] out[3] times up, each rounded to x's dtype as the Sigmoid and Mul nodes would
 * round. product_only: nothing reads out[0..3] but the chain itself, so the launch may write only
 * out[4] (the others are then empty arrays, never to be read). 0 ok, -1 error. */
enum { MLXB_QGEMV_SWIGLU_OUTPUTS = 5 };
int mlxb_qgemv_swiglu(mlxb_scope *s, const mlxb_array *x, const mlxb_array *const *w, const mlxb_array *const *scales,
                      const mlxb_array *const *biases, const mlxb_array *const *add, int group_size, int bits,
                      bool product_only, mlxb_qgemv_norm *norm, mlxb_array **out);
/* x [..., K] float16 times the transpose of packed weights w [N, K * bits / 32] (uint32, MLX's affine
 * layout) with float32 scales and biases [N, K / group_size], plus bias [N] (float16, or NULL) added
 * in float32 before the one rounding: y [..., N] float16; with post [N] (float16, or NULL), y + post
 * rounded again (a following Add node's arithmetic, in the same launch). Every weight v = scale * q + bias enters
 * as its float16 halves hi = float16(v) and lo = float16(v - hi), and every product of a float16
 * activation with a half is exact in float32: the float32 GEMM on the dequantized weights wherever
 * hi + lo == v, which the caller must know (v of at most 22 significant bits: float16 scales,
 * integer zero points, no weight past float16's range). One tensor-core kernel on
 * MLX's CUDA backend (sm_80 and later; a second one adds the partial sums of a long K), where
 * mlxb_qgemm_split_available says so (bits 2, 4, 8; group_size a multiple of 32; not turned off by
 * ORT_EP_MLX_QGEMM=0). */
bool mlxb_qgemm_split_available(const mlxb_scope *s, int bits, int group_size);
mlxb_array *mlxb_qgemm_split(mlxb_scope *s, const mlxb_array *x, const mlxb_array *w, const mlxb_array *scales,
                             const mlxb_array *biases, const mlxb_array *bias, const mlxb_array *post,
                             int group_size, int bits);
/* The same for up to MLXB_QGEMV_MAX_SETS weight sets of one K (sibling projections of one x: Q, K
 * and V; gate and up) in one launch and one reduction: out[i] [..., N_i] float16, each plus post[i]
 * rounded again where post (may be NULL) has one (no bias input). 0 ok, -1 error. */
int mlxb_qgemm_split_sets(mlxb_scope *s, const mlxb_array *x, int n_sets, const mlxb_array *const *w,
                          const mlxb_array *const *scales, const mlxb_array *const *biases,
                          const mlxb_array *const *post, int group_size, int bits, mlxb_array **out);
/* One direction of an RNN, GRU or LSTM as one operation on MLX's CPU stream (src/mlx/bridge_cpu_rnn.cpp):
 * xw [T, B, G*H] float32, the input projection of every step with the biases the lowering folds in
 * (gates in ONNX's order: LSTM i, o, f, c; GRU z, r, h), rw [G*H, H] the recurrence weights R of
 * the direction, h0 (and for LSTM c0) [B, H], peepholes [3H] (LSTM i, o, f; or NULL), lens [B] int32 (or
 * NULL: every sequence has T steps), rbh [H] (GRU with linear_before_reset: Rbh, or NULL). Each step
 * adds h @ rw^T to its projection and applies the gates as ONNX and ORT's CPU EP define them (clip on
 * every gate's input when has_clip; activations act[0..2] with their alpha/beta); backwards walks
 * t from T - 1. With lens, a sequence's state stops at its last step, its y rows past it are zero,
 * and a length of 0 gives zero states. Outputs y [T, B, H] (when want_y), h [B, H], c [B, H]
 * (LSTM). rw_packed (or NULL, or NULL entries): rw's rows packed at Compile by mlxb_gemm_pack(rw,
 * transposed), which spares the Run packing them; for a GRU without linear_before_reset rows
 * [0, 2H) and [2H, 3H) packed apart, [0] and [1]. Zero the struct before filling it (it is compared
 * bytewise). 0 ok, -1 error. */
enum { MLXB_RECUR_RNN, MLXB_RECUR_GRU, MLXB_RECUR_LSTM };
enum {
  MLXB_RACT_SIGMOID, MLXB_RACT_TANH, MLXB_RACT_RELU, MLXB_RACT_AFFINE, MLXB_RACT_LEAKYRELU, MLXB_RACT_THRESHOLDEDRELU,
  MLXB_RACT_SCALEDTANH, MLXB_RACT_HARDSIGMOID, MLXB_RACT_ELU, MLXB_RACT_SOFTSIGN, MLXB_RACT_SOFTPLUS, MLXB_RACT_COUNT
};
typedef struct mlxb_recurrence {
  int kind;     /* MLXB_RECUR_* */
  int act[3];   /* MLXB_RACT_*: f (and g, h) of the ONNX operator */
  float alpha[3], beta[3];
  float clip;
  bool has_clip, input_forget, linear_before_reset, backwards;
} mlxb_recurrence;
bool mlxb_recurrence_available(const mlxb_scope *s);

/* A float32 product with a constant right operand on the CPU (src/mlx/bridge_cpu_gemm.cpp): B
 * packed once (mlxb_gemm_pack: b [K, N], or [N, K] when transposed; keep the result with the plan's
 * constants), then a [..., K] times it: [..., N] (mlxb_gemm_packed, n = N; a not empty), plus bias
 * (float32 [N], or NULL) and then ReLU (max(v, 0), NaN kept) when relu, in the same pass: what an
 * Add and a Relu node after it compute. Only where mlxb_gemm_packed_available says so (a CPU scope
 * on x86-64 with AVX-512F); packing and the product also where mlxb_conv_packed_available does
 * (a Conv's one-tap form is such a product). */
bool mlxb_gemm_packed_available(const mlxb_scope *s);
mlxb_array *mlxb_gemm_pack(mlxb_scope *s, const mlxb_array *b, bool transposed);
mlxb_array *mlxb_gemm_packed(mlxb_scope *s, const mlxb_array *a, const mlxb_array *packed, int64_t n,
                             const mlxb_array *bias, bool relu);
/* A 2-D convolution of one group through the same GEMM: x [N, H, W, C] float32 (channels-last),
 * the weight packed from [M, kh * kw * C] (mlxb_gemm_pack of the channels-last weight [M, kh, kw,
 * C] as a matrix, transposed), zero padding ph/pw before each axis (taps past either end read as
 * zeros), strides, dilations and the output extents oh/ow: [N, oh, ow, M], with the same bias and
 * ReLU. The windows are unfolded into one buffer of N * oh * ow * kh * kw * C floats first. */
typedef struct mlxb_conv2d {
  int64_t m, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow;
} mlxb_conv2d;
/* Where mlxb_conv_packed runs: a CPU scope on x86-64 with AVX-512F, or with AVX2 and FMA. */
bool mlxb_conv_packed_available(const mlxb_scope *s);
mlxb_array *mlxb_conv_packed(mlxb_scope *s, const mlxb_array *x, const mlxb_array *packed, const mlxb_conv2d *g,
                             const mlxb_array *bias, bool relu);
/* MaxPool of a float32 [N, C, H, W] on a CPU scope as one operation (src/mlx/bridge_cpu_maxpool.cpp):
 * windows of kh x kw taps with strides sh, sw, dilations dh, dw and pads ph, pw (>= 0) before each
 * axis, output [N, C, oh, ow]; taps outside the input are skipped, a window with none inside gives
 * -inf, a NaN among the taps gives NaN (MLX's Maximum). Where mlxb_max_pool2d_available says so
 * (ORT_EP_MLX_CPU_POOL=0: never). */
typedef struct mlxb_pool2d {
  int64_t kh, kw, sh, sw, dh, dw, ph, pw, oh, ow;
} mlxb_pool2d;
bool mlxb_max_pool2d_available(const mlxb_scope *s, const mlxb_array *x);
mlxb_array *mlxb_max_pool2d(mlxb_scope *s, const mlxb_array *x, const mlxb_pool2d *g);
int mlxb_recurrence_run(mlxb_scope *s, const mlxb_recurrence *r, const mlxb_array *xw, const mlxb_array *rw,
                        const mlxb_array *const rw_packed[2], const mlxb_array *h0, const mlxb_array *c0,
                        const mlxb_array *peep, const mlxb_array *lens, const mlxb_array *rbh, bool want_y,
                        mlxb_array **y, mlxb_array **h, mlxb_array **c);
/* Each row of x [R, C] (int32 or int64, C >= 1) summed in float64, divided by C when mean, and cast
 * back to x's dtype saturating: y [R], ORT's CPU EP's integer ReduceSum/ReduceMean. One CUDA kernel
 * where mlxb_int_reduce_available says so (MLX's CUDA backend, which has no float64 of its own). */
bool mlxb_int_reduce_available(const mlxb_scope *s, mlxb_dtype t);
/* GatherBlockQuantized in one kernel (MLX's CUDA backend; ORT_EP_MLX_GATHER_BQ_KERNEL=0: never):
 * data uint8 [rows, ..., bytes] of bits-bit values (low bits first), gathered along axis 0 by
 * indices (any integer dtype and shape; negative from the end, outside the table a zero row), each
 * value (q - zp) * scale of its block of `block` along the last axis: scales [rows, ..., blocks]
 * float32/float16, zero points uint8 packed like the data or NULL (2^(bits-1)); float32 arithmetic,
 * the result in the scales' dtype, shaped indices' shape + data's middle axes + [values]. */
bool mlxb_gather_bq_available(const mlxb_scope *s);
mlxb_array *mlxb_gather_bq(mlxb_scope *s, const mlxb_array *data, const mlxb_array *indices, const mlxb_array *scales,
                           const mlxb_array *zero_points, int bits, int64_t block);
mlxb_array *mlxb_int_reduce_rows(mlxb_scope *s, const mlxb_array *x, bool mean);
/* The same packed weights dequantized to float32 [N, K] (scale * q + bias), as mlxb_dequantize
 * gives them: by a kernel of ours on MLX's CUDA backend when ORT_EP_MLX_DEQUANT_KERNEL=1 (bits 2,
 * 4, 8; group_size a multiple of 32), by MLX's dequantization otherwise. */
mlxb_array *mlxb_dequant_f32(mlxb_scope *s, const mlxb_array *w, const mlxb_array *scales, const mlxb_array *biases,
                             int group_size, int bits);
mlxb_array *mlxb_quantized_matmul(mlxb_scope *s, const mlxb_array *x, const mlxb_array *w, const mlxb_array *scales,
                                  const mlxb_array *biases, bool transpose, int group_size, int bits);
mlxb_array *mlxb_dequantize(mlxb_scope *s, const mlxb_array *w, const mlxb_array *scales, const mlxb_array *biases,
                            int group_size, int bits, mlxb_dtype out);
mlxb_array *mlxb_einsum(mlxb_scope *s, const char *subscripts, const mlxb_array *const *xs, int n);


/* ---- compiled programs (MLX compile) ------------------------------------------------------- */
typedef struct mlxb_program mlxb_program;
/* Builds the program's graph from placeholder inputs when MLX traces it (once per input shapes
 * and thread). Returns 0, or -1 after recording a message with mlxb_set_error(s, ...). */
typedef int (*mlxb_trace_fn)(void *user, mlxb_scope *s, mlxb_array *const *inputs, int n_inputs,
                             mlxb_array **outputs, int n_outputs);
/* user must outlive the program. NULL on failure (message in err). Programs for the CPU trace
 * without MLX's kernel fusion (on the CPU it JIT-builds every fused kernel with g++); GPU programs
 * trace without it until called ORT_EP_MLX_GPU_FUSE_AFTER times, then once more with it. */
mlxb_program *mlxb_compile(mlxb_device dev, mlxb_trace_fn trace, void *user, int n_outputs, bool shapeless,
                           char *err, size_t err_len);
/* Calls the program (tracing on first use); outputs are handles of s. 0 ok, -1 error in s. */
int mlxb_program_call(mlxb_scope *s, mlxb_program *p, mlxb_array *const *inputs, int n_inputs,
                      mlxb_array **outputs, int n_outputs);
void mlxb_program_free(mlxb_program *p); /* accepts NULL; drops its traces from every thread's cache */
/* True inside a trace callback when the trace is a hot GPU program's second one, with MLX's fusion
 * (ORT_EP_MLX_GPU_FUSE_AFTER): the same graph again, counted apart from first traces. */
bool mlxb_tracing_fused_again(void);

/* ---- signal, random and linear-algebra ops (bridge_fft.cpp, bridge_random.cpp, bridge_linalg.cpp) ---- */
/* [..., 2] float pairs (real, imaginary) <-> complex64 [...]. */
mlxb_array *mlxb_complex_from_pairs(mlxb_scope *s, const mlxb_array *x);
mlxb_array *mlxb_complex_to_pairs(mlxb_scope *s, const mlxb_array *z); /* float32 [..., 2] */
/* One-dimensional FFTs along axis with n points (the input is cut or zero-padded to n):
 * complex -> complex (forward or inverse, the inverse scaled by 1/n), real -> complex onesided
 * (n/2 + 1 bins) and complex onesided -> real (n points). */
mlxb_array *mlxb_fft(mlxb_scope *s, const mlxb_array *z, int64_t n, int axis, bool inverse);
mlxb_array *mlxb_rfft(mlxb_scope *s, const mlxb_array *x, int64_t n, int axis);
mlxb_array *mlxb_irfft(mlxb_scope *s, const mlxb_array *z, int64_t n, int axis);

/* Random arrays from MLX's counter-based generator. With has_seed the values depend only on seed;
 * without, they come from MLX's per-thread key sequence (seeded from the clock). */
mlxb_array *mlxb_random_uniform(mlxb_scope *s, const int64_t *dims, int rank, mlxb_dtype t, double low, double high,
                                bool has_seed, uint64_t seed);
mlxb_array *mlxb_random_normal(mlxb_scope *s, const int64_t *dims, int rank, mlxb_dtype t, double mean, double scale,
                               bool has_seed, uint64_t seed);
/* num_samples draws per row of logits [batch, classes] (unnormalized log-probabilities): uint32 [batch, num_samples]. */
mlxb_array *mlxb_random_categorical(mlxb_scope *s, const mlxb_array *logits, int num_samples, bool has_seed, uint64_t seed);
/* Whether the calling thread is inside an MLX trace (compile), where a graph is recorded once
 * and replayed: values drawn there would repeat on every call. */
bool mlxb_in_trace(void);

/* LU factorization with partial pivoting of [..., n, n] (float32/float64; always on the CPU):
 * lu holds L (unit diagonal, implied) and U; pivots [..., n] uint32 say row i was swapped with
 * row pivots[i]. 0 ok, -1 error in s. */
int mlxb_lu_factor(mlxb_scope *s, const mlxb_array *a, mlxb_array **lu, mlxb_array **pivots);

/* ---- untrusted data (bridge_safety.cpp) ------------------------------------------------------
 * Index arguments of take, take_along_axis, put_along_axis, scatter_add_axis, gather, scatter and
 * the dynamic slices are bounded inside the graph by the bridge itself (clipped into the axis), so
 * no index value can reach memory outside a tensor; whether an index was valid is the caller's
 * check. */
/* The summary of one validity check as int64 [2]: (1 when some element of `ok` is false, else 0;
 * the broadcast `value` at the first such element, or 0). `ok` is bool of any shape; `value` may be
 * NULL, else it broadcasts with ok. */
mlxb_array *mlxb_violation(mlxb_scope *s, const mlxb_array *ok, const mlxb_array *value);
/* mlxb_violation's summary for ok = (x >= lo when check_lo) and (x < hi when check_hi), x integers
 * whose dtype holds the bounds checked: one CUDA kernel of ours on MLX's CUDA backend (no MLX
 * fusion to compile there), MLX operations elsewhere. */
mlxb_array *mlxb_range_violation(mlxb_scope *s, const mlxb_array *x, int64_t lo, int64_t hi, bool check_lo,
                                 bool check_hi);
/* MLX's memory limit in bytes (process-wide; MLX's default is a share of the machine's memory). */
size_t mlxb_memory_limit(void);
int mlxb_set_memory_limit(size_t bytes); /* 0 ok, -1 error */

#ifdef __cplusplus
}
#endif
#endif
