/* Helpers shared by the op families' claim and lower functions: dtype tests, the float32 compute
 * type of half-precision inputs, axis normalization, shapes, iotas and one-axis slices, values
 * read on the host from an attribute or an input, optional outputs, quantization parameters, the
 * spatial attributes of convolutions and poolings and common claim checks. What only one family needs stays in that family's file. */
#ifndef EP_MLX_OP_UTIL_H
#define EP_MLX_OP_UTIL_H

#include "ops/op.h"

/* Dims held in the fixed-size shape buffers of the families (ranks above it are declined or fail). */
#define OP_UTIL_MAX_RANK 32

/* ---- dtypes ------------------------------------------------------------------------------- */
bool op_util_is_float(mlxb_dtype t);     /* float16, bfloat16, float32, float64 */
bool op_util_onnx_is_float(int32_t t);   /* the same for an ONNX dtype */
/* float16/bfloat16 compute in float32 and round once at the end, as ORT's inserted casts do;
 * every other dtype computes in itself. */
mlxb_dtype op_util_compute_type(mlxb_dtype t);
/* x as dtype t: x itself when it already has it (or is NULL). */
mlxb_array *op_util_cast(mlxb_scope *s, mlxb_array *x, mlxb_dtype t);
/* A 0-d array of dtype t holding v (exact for integers). */
mlxb_array *op_util_scalar(mlxb_scope *s, double v, mlxb_dtype t);
/* A 0-d array of x's (float) dtype holding v; NULL when x is NULL. */
mlxb_array *op_util_scalar_like(mlxb_scope *s, double v, const mlxb_array *x);
/* exp(x) at the precision of x's float dtype (MLX's own float64 exp is float32-accurate). */
mlxb_array *op_util_exp(mlxb_scope *s, mlxb_array *x);

/* ---- arithmetic shorthands (mlxb_binary with the op named) --------------------------------- */
mlxb_array *op_util_add(mlxb_scope *s, mlxb_array *a, mlxb_array *b);
mlxb_array *op_util_sub(mlxb_scope *s, mlxb_array *a, mlxb_array *b);
mlxb_array *op_util_mul(mlxb_scope *s, mlxb_array *a, mlxb_array *b);
mlxb_array *op_util_div(mlxb_scope *s, mlxb_array *a, mlxb_array *b);

/* ---- axes and shapes ---------------------------------------------------------------------- */
/* A possibly negative axis in [-rank, rank) as [0, rank); -1 when out of range. */
int op_util_axis(int64_t axis, int rank);
/* The same, recording "axis ... is out of range" and returning -1 when it is. */
int op_util_resolve_axis(op_ctx *c, int64_t axis, int rank);
int64_t op_util_numel(const int64_t *dims, int n); /* product of dims[0..n) */
int64_t op_util_mul_sat(int64_t a, int64_t b);     /* a * b, INT64_MAX past int64 (for sizes >= 0) */
/* Input i and its dims (dims holds OP_UTIL_MAX_RANK); the rank, or -1 with the failure recorded
 * when the input is missing or its rank is too large. */
int op_util_input_dims(op_ctx *c, int i, mlxb_array **x, int64_t *dims);
/* x's dims (dims holds OP_UTIL_MAX_RANK); the rank, or -1 with the failure recorded. */
int op_util_dims(op_ctx *c, const mlxb_array *x, int64_t *dims);
/* Whether p (absent: true) broadcasts one way to a shape of `rank` dims: its rank at most `rank`
 * and each of its dims, right-aligned, 1 or the shape's (ONNX's unidirectional broadcasting; MLX's
 * two-way broadcast would give another shape). */
bool op_util_broadcasts_to(const mlxb_array *p, const int64_t *dims, int rank);
/* start, start + 1, ..., start + n - 1 of dtype t along `axis` of a rank-`rank` shape of ones,
 * so that it broadcasts against arrays holding n entries on that axis (positions, masks). */
mlxb_array *op_util_iota(mlxb_scope *s, int64_t start, int64_t n, int axis, int rank, mlxb_dtype t);
mlxb_array *op_util_reshape2(mlxb_scope *s, mlxb_array *x, int64_t d0, int64_t d1);
/* x[start:stop:step] along one non-negative axis, every other axis whole. */
mlxb_array *op_util_slice_axis(mlxb_scope *s, mlxb_array *x, int axis, int64_t start, int64_t stop, int64_t step);

/* ---- values read on the host -------------------------------------------------------------- */
/* An int list from attribute `attr` before opset `input_since`, from the optional input `input`
 * from then on (schemas moved such lists to inputs). Returns the count, 0 when absent, or -1
 * with the failure recorded. */
int op_util_attr_or_input_ints(op_ctx *c, const char *attr, int input, int input_since, int64_t *out, int max);
/* The same list read from the graph alone (claims, pad rules): the input must be a constant.
 * Returns the count, 0 when absent, or -1 when too long or not constant. */
int op_util_claim_attr_or_input_ints(const claim_ctx *c, const char *attr, int input, int input_since, int64_t *out,
                                     int max);
/* The one value of input i; 0, or -1 with the failure recorded. */
int op_util_input_int(op_ctx *c, int i, int64_t *v);
int op_util_input_double(op_ctx *c, int i, double *v);

/* ---- packed integers -------------------------------------------------------------------- */
/* Unpacks a uint8 array of packed `bits`-wide values (bits 1, 2, 4 or 8; element 0 in the low bits,
 * as ORT and MLX both store them) along its last axis: [..., L] -> [..., L * 8 / bits], still
 * uint8. NULL for a NULL input, or a rank outside [1, OP_UTIL_MAX_RANK]. */
mlxb_array *op_util_unpack_bits(mlxb_scope *s, mlxb_array *packed, int bits);
/* MLAS's int8 quantization of float32 activations per block of `block` elements of the last axis (a
 * multiple of it), what ORT's CPU EP does for accuracy_level 4: scale = max|x| / 127 and
 * q = round_half_even(x * (127 / max|x|)) (0 for an all-zero block; NaN propagates); returns
 * q * scale, whose float products with the weights are MLAS's scaled integer dot products. One task
 * of the bridge's on a CPU scope (mlxb_quantize_blocks), MLX's operations elsewhere. NULL for a
 * NULL input or a rank outside [1, OP_UTIL_MAX_RANK). */
mlxb_array *op_util_quantize_blocks(mlxb_scope *s, mlxb_array *x, int64_t block);

/* ---- host tables ------------------------------------------------------------------------- */
/* A host int64 table as an MLX int32 array of n entries (index tables are small; int32 halves the
 * gather traffic); NULL when out of memory. */
mlxb_array *op_util_index_array(mlxb_scope *s, const int64_t *v, int64_t n);
/* A host float table of the given shape as an MLX array of dtype t. */
mlxb_array *op_util_float_array(mlxb_scope *s, const float *v, const int64_t *dims, int rank, mlxb_dtype t);

/* ---- shape arithmetic on the host ------------------------------------------------------------ */
/* Host-known integers a lowering computes with (Shape's dims and what Gather, Cast, Concat and the
 * reshaping ops make of them) are at most this many values. */
enum { OP_UTIL_HOST_INTS_MAX = 64 };
/* Whether input i is `count` int32/int64 values known when the graph is built, few enough for the
 * host. */
bool op_util_input_host_ints(const op_ctx *c, int i, int64_t count);
/* Those values into vals[OP_UTIL_HOST_INTS_MAX]: exactly `count` of them, or the node fails. */
int op_util_read_host_ints(op_ctx *c, int i, int64_t *vals, int64_t count);

/* ---- untrusted data ----------------------------------------------------------------------- */
/* Requires lo <= x < hi for every element of the integer array x (op_require), with the rule
 * "<what> {} out of range [lo, hi)". A bound the dtype of x cannot cross is not compared. */
int op_util_require_range(op_ctx *c, mlxb_array *x, int64_t lo, int64_t hi, const char *what);
/* The same for a check that several nodes repeat on the same data (op_require_once): `data` names
 * what x is (its graph value and the transformation, e.g. "v12+1-S1"), so that two calls with
 * equal data, bounds and `what` check the same values; the later ones build nothing. */
int op_util_require_range_once(op_ctx *c, const char *data, mlxb_array *x, int64_t lo, int64_t hi, const char *what);

/* ---- outputs ------------------------------------------------------------------------------ */
/* Sets output i only when the node has it (optional outputs are often left out). 0 or -1. */
int op_util_set_optional(op_ctx *c, int i, mlxb_array *a);
/* Sets output i to a copy of host data of ONNX dtype `dtype`. 0 or -1. */
int op_util_set_host_data(op_ctx *c, int i, const void *data, const int64_t *dims, int rank, int32_t dtype);

/* ---- quantization parameters -------------------------------------------------------------- */
/* A scale or zero point p shaped to broadcast against x [dims]: one value (per tensor), a 1-D
 * tensor on `axis` (per axis), or with block > 0 a tensor of x's rank whose `axis` holds
 * ceil(D / block) entries, each repeated block times (blocked); axis < 0 means out of range.
 * NULL for a NULL p, and NULL with the failure recorded when p does not fit. */
mlxb_array *op_util_quant_param(op_ctx *c, mlxb_array *p, const int64_t *dims, int rank, int axis, int64_t block);

/* ---- spatial attributes (convolutions and poolings) --------------------------------------- */
typedef enum op_util_pad {
  OP_UTIL_PAD_NOTSET, /* explicit pads ("NOTSET" or empty) */
  OP_UTIL_PAD_VALID,
  OP_UTIL_PAD_SAME_UPPER,
  OP_UTIL_PAD_SAME_LOWER,
  OP_UTIL_PAD_BAD /* a value the spec does not know (claims decline it) */
} op_util_pad;
op_util_pad op_util_auto_pad(const ir_node *n);
/* Fills out[n] from an ints attribute, or with dflt when it is absent or empty. Returns false when
 * the attribute has a count other than n. */
bool op_util_attr_ints(const ir_node *node, const char *name, int64_t *out, int n, int64_t dflt);
/* strides and dilations (default 1) and pads split into head and tail (default 0) for nsp
 * spatial axes (nsp <= OP_UTIL_MAX_RANK); 0, or -1 with the failure recorded when a count does
 * not match. Values are not range-checked here. */
int op_util_spatial_attrs(op_ctx *c, int nsp, int64_t *strides, int64_t *dilations, int64_t *pad_lo, int64_t *pad_hi);

/* ---- claims ------------------------------------------------------------------------------- */
/* Every present input among inputs[0..n) has input 0's dtype (ORT's kernels read them as T). */
bool op_util_claim_same_dtypes(claim_ctx *c, const int *inputs, int n);
/* Input i's rank leaves room below OP_UTIL_MAX_RANK (a lowering may add an axis); declines it
 * otherwise. */
bool op_util_claim_input_rank(claim_ctx *c, int i);
/* auto_pad is one the spec knows; declines it otherwise. */
bool op_util_claim_auto_pad(claim_ctx *c);

/* ---- computing ahead (op_compute_for) ---------------------------------------------------------- */
/* The node that alone reads n's first output (n: the node being lowered or one after it), or NULL
 * where that output has another reader or is a graph output, or the lowering cannot compute ahead
 * (op_can_compute_for): a following node whose work the lowering of n may do in its own pass. */
const ir_node *op_util_sole_reader(const op_ctx *c, const ir_node *n);
/* Whether n is a plain ai.onnx Relu (one input, one output). */
bool op_util_is_relu(const ir_node *n);

/* The activations ORT's fused contrib ops (FusedConv, FusedGemm) apply to their result, with
 * ORT's formulas (src/ops/activation.c). op_fused_act_find gives a kind or -1; a kind reads
 * op_fused_act_params(kind) values of p, in the order its formula names them (LeakyRelu, Elu,
 * ThresholdedRelu: alpha; Clip: min, max; HardSigmoid, ScaledTanh, ParametricSoftplus: alpha,
 * beta; Selu: alpha, gamma). x is float32 or float64. */
int op_fused_act_find(const char *name);
int op_fused_act_params(int kind);
mlxb_array *op_fused_act_apply(mlxb_scope *s, mlxb_array *x, int kind, const double *p);

#endif
