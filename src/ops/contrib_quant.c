/* Weight-quantized contrib ops of ORT's com.microsoft domain used by LLM exports: MatMulNBits
 * (blockwise 2/4/8-bit weights) and GatherBlockQuantized (quantized embedding tables). Both follow
 * ORT's CPU kernels: MatMulNBits computes in float32 (float16 activations are widened and the
 * result rounded once), and with accuracy_level 4 quantizes the activations to int8 per block as
 * MLAS does before the integer dot products. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op_util.h"

#define MNB_MAX_BLOCK 256 /* ORT's documented block sizes: powers of two in [16, 256] */
#define MLX_MAX_GROUP 128 /* largest group size of MLX's affine quantization */

enum { MNB_A, MNB_B, MNB_SCALES, MNB_ZP, MNB_GIDX, MNB_BIAS };
enum { GBQ_DATA, GBQ_INDICES, GBQ_SCALES, GBQ_ZP };

/* ---- shared helpers ----------------------------------------------------------------------- */

static bool is_pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

/* x[..., 0:n] on the last axis (x itself when it has n entries there). */
static mlxb_array *slice_last(mlxb_scope *s, mlxb_array *x, int64_t n) {
  if (!x || (mlxb_ndim(x) > 0 && mlxb_dim(x, -1) == n)) return x;
  return op_util_slice_axis(s, x, mlxb_ndim(x) - 1, 0, n, 1);
}

/* Zero-pads the last axis of x up to n elements. */
static mlxb_array *pad_last(mlxb_scope *s, mlxb_array *x, int64_t n) {
  int64_t lo[OP_UTIL_MAX_RANK] = {0}, hi[OP_UTIL_MAX_RANK] = {0};
  int rank = x ? mlxb_ndim(x) : 0;
  if (!x || rank < 1 || rank > OP_UTIL_MAX_RANK) return NULL;
  int64_t have = mlxb_dim(x, -1);
  if (have == n) return x;
  hi[rank - 1] = n - have;
  return mlxb_pad(s, x, lo, hi, mlxb_scalar_f64(s, 0.0, mlxb_type(x)), "constant");
}

/* Unpacks a uint8 array of packed `bits`-wide values (element 0 in the low bits, as ORT and MLX
 * both store them) along its last axis: [..., L] -> [..., L * 8 / bits], still uint8. */
/* ---- MatMulNBits -------------------------------------------------------------------------- */

typedef struct mnb_attrs {
  int64_t k, n, bits, block, acc; /* attributes K, N, bits, block_size, accuracy_level */
  int64_t k_blocks;               /* ceil(K / block_size) */
} mnb_attrs;

static mnb_attrs mnb_read_attrs(const ir_node *node) {
  mnb_attrs a;
  a.k = ir_attr_int(node, "K", 0);
  a.n = ir_attr_int(node, "N", 0);
  a.bits = ir_attr_int(node, "bits", 4);
  a.block = ir_attr_int(node, "block_size", 0);
  a.acc = ir_attr_int(node, "accuracy_level", 0);
  a.k_blocks = a.block > 0 && a.k > 0 ? a.k / a.block + (a.k % a.block != 0) : 0; /* K + block could pass int64 */
  return a;
}

static bool mnb_zp_is_float(int32_t zp_dtype) { return zp_dtype != ONNX_UNDEFINED && zp_dtype != ONNX_UINT8; }

/* ORT's CPU kernel takes its int8 path (activations quantized per block, MLAS CompInt8) when the
 * attribute asks for it and the weights were prepacked: B constant, no g_idx, no float zero
 * points. Everything else runs the float32 path. */
static bool mnb_uses_int8(const mnb_attrs *a, bool b_const, bool has_gidx, int32_t zp_dtype) {
  return a->acc == 4 && b_const && !has_gidx && !mnb_zp_is_float(zp_dtype);
}

static bool claim_matmul_nbits(claim_ctx *c, const op_def *def) {
  const ir_node *node = c->node;
  mnb_attrs a = mnb_read_attrs(node);
  if (a.k <= 0 || a.n <= 0) return claim_decline(c, "K and N must be positive");
  if (a.bits != 2 && a.bits != 4 && a.bits != 8)
    return claim_decline(c, "bits=%lld (ORT takes 2, 4, 8)", (long long)a.bits);
  if (!is_pow2(a.block) || a.block < 16 || a.block > MNB_MAX_BLOCK)
    return claim_decline(c, "block_size=%lld (claimed: powers of two in [16, %d])", (long long)a.block, MNB_MAX_BLOCK);
  if (ir_attr_int(node, "weight_prepacked", 0) != 0) return claim_decline(c, "weight_prepacked=1 (EP-specific layout)");
  int32_t t = claim_input_dtype(c, MNB_A);
  if (claim_input_dtype(c, MNB_B) != ONNX_UINT8) return claim_decline(c, "B must be uint8");
  if (claim_input_dtype(c, MNB_SCALES) != t) return claim_decline(c, "scales dtype differs from A");
  const ir_value *b = claim_input(c, MNB_B);
  if (b->rank >= 0) {
    int64_t want[3] = {a.n, a.k_blocks, a.block * a.bits / 8};
    if (b->rank != 3) return claim_decline(c, "B has rank %d, not 3", b->rank);
    for (int i = 0; i < 3; i++)
      if (b->dims[i] >= 0 && b->dims[i] != want[i])
        return claim_decline(c, "B shape does not match K, N, block_size, bits");
  }
  int32_t zp_t = claim_input_dtype(c, MNB_ZP);
  if (mnb_zp_is_float(zp_t) && zp_t != t) return claim_decline(c, "float zero_points dtype differs from scales");
  if (mnb_zp_is_float(zp_t) && a.bits == 8)
    return claim_decline(c, "8-bit weights with float zero_points (ORT's CPU kernel rejects them)");
  bool has_gidx = claim_input(c, MNB_GIDX) != NULL;
  if (has_gidx) {
    if (claim_input_dtype(c, MNB_GIDX) != ONNX_INT32) return claim_decline(c, "g_idx must be int32");
    if (a.bits != 4)
      return claim_decline(c, "g_idx with %lld-bit weights (ORT's CPU g_idx path reads 4-bit values only)",
                           (long long)a.bits);
    if (zp_t == ONNX_UINT8)
      return claim_decline(c, "g_idx with uint8 zero_points (ORT's CPU kernel ignores those zero points)");
  }
  const ir_value *bias = claim_input(c, MNB_BIAS);
  if (bias && bias->dtype != t) return claim_decline(c, "bias dtype differs from A");
  bool b_const = b->is_const;
  if (mnb_uses_int8(&a, b_const, has_gidx, zp_t)) {
    if (a.bits == 2)
      return claim_decline(
          c, "accuracy_level=4 with 2-bit weights (whether ORT quantizes A depends on the CPU's MLAS kernels)");
    if (!claim_input(c, MNB_SCALES)->is_const || (zp_t != ONNX_UNDEFINED && !claim_input(c, MNB_ZP)->is_const))
      return claim_decline(c, "accuracy_level=4 with non-constant scales or zero_points");
  }
  return true;
}

/* Zero points as float32 [N, k_blocks]: unpacked from uint8, cast from T, or 2^(bits-1). */
static mlxb_array *mnb_zero_points(op_ctx *c, const mnb_attrs *a) {
  mlxb_scope *s = op_scope(c);
  if (!op_has_input(c, MNB_ZP)) return mlxb_scalar_f64(s, (double)(1 << (a->bits - 1)), MLXB_F32);
  mlxb_array *zp = op_input(c, MNB_ZP);
  if (!zp) return NULL;
  if (mlxb_type(zp) != MLXB_U8) return op_util_cast(s, op_util_reshape2(s, zp, a->n, a->k_blocks), MLXB_F32);
  int64_t per_row = (a->k_blocks * a->bits + 7) / 8;
  mlxb_array *u = op_util_unpack_bits(s, op_util_reshape2(s, zp, a->n, per_row), (int)a->bits);
  return op_util_cast(s, slice_last(s, u, a->k_blocks), MLXB_F32);
}

/* Dequantized weights [N, K]: ORT's (q - zp) * scale for uint8 or implicit zero points, and
 * q * scale + (-scale * zp) for float zero points; with g_idx, column k uses block g_idx[k]. */
static mlxb_array *mnb_dequant_weights(op_ctx *c, const mnb_attrs *a, mlxb_array *scales, mlxb_array *zp,
                                       bool zp_float) {
  mlxb_scope *s = op_scope(c);
  int64_t kp = a->k_blocks * a->block;
  mlxb_array *b = op_input(c, MNB_B);
  mlxb_array *packed = op_util_reshape2(s, b, a->n, kp * a->bits / 8);
  mlxb_array *q = op_util_cast(s, op_util_unpack_bits(s, packed, (int)a->bits), MLXB_F32);
  if (!q) return NULL;
  if (op_has_input(c, MNB_GIDX)) {
    mlxb_array *g = slice_last(s, op_input(c, MNB_GIDX), a->k);
    if (op_util_require_range(c, g, 0, a->k_blocks, "g_idx")) return NULL;
    q = slice_last(s, q, a->k);
    mlxb_array *sk = mlxb_take(s, scales, g, 1);
    mlxb_array *zk = mlxb_ndim(zp) == 2 ? mlxb_take(s, zp, g, 1) : zp;
    if (zp_float)
      return mlxb_binary(s, MLXB_ADD, mlxb_binary(s, MLXB_MUL, q, sk),
                         mlxb_unary(s, MLXB_NEG, mlxb_binary(s, MLXB_MUL, sk, zk)));
    return mlxb_binary(s, MLXB_MUL, mlxb_binary(s, MLXB_SUB, q, zk), sk);
  }
  int64_t d3[3] = {a->n, a->k_blocks, a->block};
  int last = -1;
  mlxb_array *q3 = mlxb_reshape(s, q, d3, 3);
  mlxb_array *s3 = mlxb_expand_dims(s, scales, &last, 1);
  mlxb_array *z3 = mlxb_ndim(zp) == 2 ? mlxb_expand_dims(s, zp, &last, 1) : zp;
  mlxb_array *w;
  if (zp_float)
    w = mlxb_binary(s, MLXB_ADD, mlxb_binary(s, MLXB_MUL, q3, s3),
                    mlxb_unary(s, MLXB_NEG, mlxb_binary(s, MLXB_MUL, s3, z3)));
  else
    w = mlxb_binary(s, MLXB_MUL, mlxb_binary(s, MLXB_SUB, q3, z3), s3);
  return op_util_reshape2(s, w, a->n, kp);
}

/* x [..., Kp] @ W^T with W held as MLX affine-quantized weights: B's bytes already are MLX's
 * packing (element 0 in the low bits of each little-endian uint32), so the weights are a view of
 * B; MLX's bias is -scale * zp. Blocks above 128 become several groups sharing one scale. With
 * constant B, scales and zero points (the usual exported model) the three arrays are derived and
 * evaluated once, when the plan is built (prepare_matmul_nbits), not at every Run. */
typedef struct mnb_prepared {
  mlxb_array *w, *scales;
  mlxb_array *biases; /* kept on a CPU scope: the zero points instead (mnb_cpu_takes_zero_points) */
  bool split_exact; /* float16 halves hold every weight exactly (mnb_split_is_exact) */
} mnb_prepared;

static int mnb_group(const mnb_attrs *a) { return (int)(a->block < MLX_MAX_GROUP ? a->block : MLX_MAX_GROUP); }

/* MLX's uint32 weights, scales and biases from B, float32 scales [N, k_blocks] and zero points. */
static mnb_prepared mnb_mlx_weights(mlxb_scope *s, const mnb_attrs *a, mlxb_array *b, mlxb_array *scales,
                                    mlxb_array *zp) {
  int64_t kp = a->k_blocks * a->block;
  mnb_prepared m = {.split_exact = false};
  m.w = mlxb_view(s, op_util_reshape2(s, b, a->n, kp * a->bits / 8), MLXB_U32);
  m.scales = scales;
  m.biases = mlxb_unary(s, MLXB_NEG, mlxb_binary(s, MLXB_MUL, scales, zp));
  int reps = (int)(a->block / mnb_group(a));
  if (reps > 1) {
    m.scales = mlxb_repeat(s, m.scales, reps, 1);
    m.biases = mlxb_repeat(s, m.biases, reps, 1);
  }
  return m;
}

/* The arrays Compile kept (prepare_matmul_nbits), else derived for this Run. */
static mnb_prepared mnb_weights(op_ctx *c, const mnb_attrs *a, mlxb_array *scales, mlxb_array *zp) {
  const mnb_prepared *kept = op_prepared(c);
  return kept ? *kept : mnb_mlx_weights(op_scope(c), a, op_input(c, MNB_B), scales, zp);
}

/* For many rows MLX's float32 quantized matmul is slower on the GPU than dequantizing the weights
 * and one GEMM (H200, 128 rows: K 4864 N 896 0.41 vs 0.10 ms, K 896 N 151936 1.70 vs 0.68 ms,
 * docs/PERFORMANCE_GPU.md); one row stays on the quantized kernel (1.5-3x faster there). Both
 * compute with the same float32 weights, scale * q + bias. Here the dequantization can be the
 * EP's own kernel (mlxb_dequant_f32); the rows between, on MLX's CUDA backend, are dequantized by
 * mlxb_quantized_matmul itself (MLX's kernels past one row do not run there). */
enum { MNB_DEQUANT_MIN_ROWS = 32 };

static bool mnb_prefers_dequantized(mlxb_scope *s, mlxb_array *x) {
  if (mlxb_scope_device(s) != MLXB_DEVICE_GPU) return false;
  return (int64_t)mlxb_size(x) / mlxb_dim(x, -1) >= MNB_DEQUANT_MIN_ROWS;
}

/* x (float32, [rows, Kp]) times the weights m. */
static mlxb_array *mnb_matmul_prepared(mlxb_scope *s, const mnb_attrs *a, mlxb_array *x, const mnb_prepared *m) {
  int group = mnb_group(a);
  if (mnb_prefers_dequantized(s, x)) {
    mlxb_array *dense = mlxb_dequant_f32(s, m->w, m->scales, m->biases, group, (int)a->bits);
    return mlxb_matmul(s, x, mlxb_transpose(s, dense, (int[]){1, 0}, 2));
  }
  return mlxb_quantized_matmul(s, x, m->w, m->scales, m->biases, true, group, (int)a->bits);
}

static mlxb_array *mnb_quantized_matmul(op_ctx *c, const mnb_attrs *a, mlxb_array *x, mlxb_array *scales,
                                        mlxb_array *zp) {
  mnb_prepared m = mnb_weights(c, a, scales, zp);
  return mnb_matmul_prepared(op_scope(c), a, x, &m);
}

/* More rows than the GEMV takes, of float16 activations on MLX's CUDA backend: our tensor-core
 * kernel (mlxb_qgemm_split) turns each weight w = (q - zp) * scale into two float16 halves, hi =
 * float16(w) and lo = float16(w - hi), in shared memory. With float16 scales and integer zero points
 * every weight has at most 8 + 11 significant bits, so hi + lo == w; each product of a float16
 * activation with a half is exact in float32 and the tensor cores accumulate in float32: the
 * float32 GEMM's sum up to order, rounded once to float16, with no float32 copy of the weights
 * (H200, a 128-token prompt at Qwen2.5-0.5B's shapes: MLX's float32 dequantization alone took 5.8
 * ms and the float32 GEMMs 6.3 ms of the prompt's 26 ms of device time, bench/decode_kernels.py
 * --mode prefill). A weight past float16's range would overflow hi: such scales keep the float32
 * path. */
static bool mnb_split_is_exact(op_ctx *c, const mnb_attrs *a, mlxb_array *scales) {
  mlxb_scope *s = op_scope(c);
  if (!mlxb_qgemm_split_available(s, (int)a->bits, mnb_group(a))) return false;
  if (op_input_dtype(c, MNB_SCALES) != ONNX_FLOAT16 || mnb_zp_is_float(op_input_dtype(c, MNB_ZP))) return false;
  double largest = 0.0;
  mlxb_array *peak = mlxb_reduce(s, MLXB_RMAX, mlxb_unary(s, MLXB_ABS, scales), NULL, 0, false);
  if (!peak || mlxb_read_f64(s, peak, &largest, 1)) return false;
  return largest * (double)((1 << a->bits) - 1) <= 65504.0; /* false for NaN */
}

enum { MNB_GEMV_MAX_ROWS = 8, MNB_NORM_MAX_OUTPUTS = 16384 };

static bool mnb_takes_split(op_ctx *c, const mnb_attrs *a, mlxb_array *x, bool int8_path) {
  const mnb_prepared *kept = op_prepared(c);
  if (!kept || !kept->split_exact || int8_path || mlxb_type(x) != MLXB_F16) return false;
  return mlxb_qgemm_split_available(op_scope(c), (int)a->bits, mnb_group(a)) &&
         (int64_t)mlxb_size(x) / mlxb_dim(x, -1) > MNB_GEMV_MAX_ROWS;
}

/* x (float16 [..., Kp]) times the prepared weights' exact halves, plus the bias when there is one,
 * then plus post (a following Add's constant, or NULL) rounded again. */
static mlxb_array *mnb_split_matmul(op_ctx *c, const mnb_attrs *a, mlxb_array *x, mlxb_array *post) {
  const mnb_prepared *m = op_prepared(c);
  mlxb_array *bias = op_has_input(c, MNB_BIAS) ? op_input(c, MNB_BIAS) : NULL;
  return mlxb_qgemm_split(op_scope(c), x, m->w, m->scales, m->biases, bias, post, mnb_group(a), (int)a->bits);
}

/* A few rows on MLX's CUDA backend take our GEMV kernel: the same float32 arithmetic as MLX's
 * float32 quantized matmul, but it reads A in its own dtype and writes the output in it, so the
 * two casts around the matmul leave the decode graph (MLX's float16 kernel would accumulate in
 * float16). Not for the int8 path (A quantized first) or a bias (added in float32 before rounding). */
static bool mnb_takes_gemv(op_ctx *c, const mnb_attrs *a, mlxb_array *x, bool int8_path) {
  int64_t rows = (int64_t)mlxb_size(x) / mlxb_dim(x, -1);
  if (int8_path || a->block < 32 || rows > MNB_GEMV_MAX_ROWS) return false;
  if (op_has_input(c, MNB_BIAS) || op_has_input(c, MNB_GIDX)) return false;
  return mlxb_qgemv_available(op_scope(c), mlxb_type(x), (int)a->bits, mnb_group(a));
}

static mlxb_array *mnb_gemv(op_ctx *c, const mnb_attrs *a, mlxb_array *x, mlxb_array *scales, mlxb_array *zp) {
  mlxb_scope *s = op_scope(c);
  mnb_prepared m = mnb_weights(c, a, scales, zp);
  /* the kernel takes A's leading axes as rows and gives them back: no reshape around it */
  return mlxb_qgemv(s, pad_last(s, x, a->k_blocks * a->block), m.w, m.scales, m.biases, mnb_group(a), (int)a->bits);
}

/* ---- computed ahead: sibling projections together, bias adds folded in -----------------------
 * A decoder layer projects one normalized row three times (Q, K, V) and another twice (gate,
 * up): MatMulNBits nodes reading the same A with the same K, bits and block size. For a few rows
 * the first of them to be lowered computes all of its group (up to MLXB_QGEMV_MAX_SETS siblings
 * in node order) and hands each sibling its result (op_compute_for), and where a sibling's only
 * reader is an Add of a constant bias [N] (Q, K and V of Qwen-like exports), that Add's result
 * too. On MLX's CUDA backend that is one GEMV launch instead of three projections and three adds,
 * and for a prompt's many rows one tensor-core GEMM launch (and one reduction) for the group;
 * elsewhere the same quantized matmuls and adds each node would run. Siblings have kept weights
 * (prepare), no bias input or g_idx, and all take the int8 path (A quantized per block first; a
 * CPU scope's only) or none; each node finds the same siblings from the graph, so they agree. A
 * sibling whose Add was folded gets the biased result as its own output, which nothing else reads. */
static bool mnb_node_int8(const ir_graph *g, const ir_node *n, const mnb_attrs *a) {
  bool has_gidx = n->n_inputs > MNB_GIDX && n->inputs[MNB_GIDX] >= 0;
  int32_t zp_t = n->n_inputs > MNB_ZP && n->inputs[MNB_ZP] >= 0 ? g->values[n->inputs[MNB_ZP]].dtype : ONNX_UNDEFINED;
  return mnb_uses_int8(a, ir_node_input(g, n, MNB_B)->is_const, has_gidx, zp_t);
}

static bool mnb_is_sibling(const op_ctx *c, const ir_node *n, const ir_node *me, const mnb_attrs *a) {
  if (strcmp(n->op_type, "MatMulNBits") || strcmp(n->domain, "com.microsoft") || n->n_inputs <= MNB_SCALES ||
      n->inputs[MNB_A] != me->inputs[MNB_A] || !op_prepared_of(c, n))
    return false;
  mnb_attrs b = mnb_read_attrs(n);
  if (b.k != a->k || b.bits != a->bits || b.block != a->block) return false;
  for (int i = MNB_GIDX; i < n->n_inputs; i++)
    if (n->inputs[i] >= 0) return false; /* g_idx or bias */
  /* siblings quantize A alike or not at all: an int8-path group (a CPU scope's, lower_matmul_nbits)
   * shares A quantized once */
  return mnb_node_int8(op_graph(c), n, &b) == mnb_node_int8(op_graph(c), me, a);
}

/* Node self's group among its siblings (itself included, in node order) into group[]; the count,
 * 1 when it has none; *me receives its place in the group. */
static int mnb_sibling_group(const op_ctx *c, const ir_node *self, const mnb_attrs *a, const ir_node **group,
                             int *me) {
  const ir_graph *g = op_graph(c);
  int count = 0, mine = -1, n = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *node = &g->nodes[i];
    if (node != self && !mnb_is_sibling(c, node, self, a)) continue;
    if (node == self) mine = count;
    count++;
  }
  group[0] = self;
  *me = 0;
  if (mine < 0 || count < 2) return 1;
  int start = mine / MLXB_QGEMV_MAX_SETS * MLXB_QGEMV_MAX_SETS;
  for (int i = 0, k = 0; i < g->n_nodes && n < MLXB_QGEMV_MAX_SETS; i++) {
    const ir_node *node = &g->nodes[i];
    if (node != self && !mnb_is_sibling(c, node, self, a)) continue;
    if (k++ >= start) group[n++] = node;
  }
  *me = mine - start;
  return n;
}

/* The Add that is the only reader of node n's output and adds a constant [N] of its dtype to it,
 * or NULL; the constant in *bias. */
static const ir_node *mnb_bias_add(const op_ctx *c, const ir_node *n, int64_t out_n, mlxb_array **bias) {
  const ir_graph *g = op_graph(c);
  int v = n->n_outputs > 0 ? n->outputs[0] : -1;
  if (v < 0 || g->values[v].n_consumers != 1 || g->values[v].is_graph_output) return NULL;
  for (int i = (int)(n - g->nodes) + 1; i < g->n_nodes; i++) {
    const ir_node *add = &g->nodes[i];
    if (add->n_inputs != 2 || (add->inputs[0] != v && add->inputs[1] != v)) continue;
    int other = add->inputs[0] == v ? add->inputs[1] : add->inputs[0];
    if (strcmp(add->op_type, "Add") || *add->domain || other < 0 || other == v) return NULL;
    const ir_value *b = &g->values[other];
    if (b->dtype != g->values[v].dtype || b->rank != 1 || b->dims[0] != out_n) return NULL;
    *bias = op_const_value(c, other);
    return *bias ? add : NULL;
  }
  return NULL;
}

/* A prompt's product on the tensor cores with the node's bias Add folded into the launch where that
 * Add is its only reader (Q, K and V of Qwen-like exports: 72 launches of a 24-layer prompt): the
 * Add gets the result (op_compute_for), and so does this node, whose own value nothing else reads. */
static mlxb_array *mnb_split_output(op_ctx *c, const mnb_attrs *a, mlxb_array *xp, const int64_t *out_dims,
                                    int rank) {
  mlxb_array *post = NULL;
  const ir_node *add = op_can_compute_for(c) ? mnb_bias_add(c, op_node(c), a->n, &post) : NULL;
  mlxb_array *y = mlxb_reshape(op_scope(c), mnb_split_matmul(c, a, xp, add ? post : NULL), out_dims, rank);
  if (!y) return op_check(c), NULL;
  return add && op_compute_for(c, add, y) ? NULL : y;
}

/* The first single-output node of the default domain after node `from` of type op_type reading
 * exactly a (and b, either order, for a binary op), or NULL. */
static const ir_node *mnb_reader(const ir_graph *g, const ir_node *from, const char *op_type, int a, int b) {
  for (const ir_node *n = from + 1; n < g->nodes + g->n_nodes; n++) {
    if (strcmp(n->op_type, op_type) || *n->domain || n->n_outputs != 1 || n->outputs[0] < 0) continue;
    if (b < 0 ? n->n_inputs == 1 && n->inputs[0] == a
              : n->n_inputs == 2 && ((n->inputs[0] == a && n->inputs[1] == b) || (n->inputs[0] == b && n->inputs[1] == a)))
      return n;
  }
  return NULL;
}

/* A gated MLP after a gate/up pair whose results are values vals[0] and vals[1]: Sigmoid(gate),
 * Mul(gate, that) and Mul(that, up), every operand order. Fills act[] with the three nodes and
 * *gate with the gate's place in the pair; false when the pattern is not there. */
static bool mnb_swiglu_nodes(const op_ctx *c, const int vals[2], const ir_node **act, int *gate) {
  const ir_graph *g = op_graph(c);
  for (int gs = 0; gs < 2; gs++) {
    const ir_node *sig = mnb_reader(g, op_node(c), "Sigmoid", vals[gs], -1);
    const ir_node *silu = sig ? mnb_reader(g, op_node(c), "Mul", vals[gs], sig->outputs[0]) : NULL;
    const ir_node *prod = silu ? mnb_reader(g, op_node(c), "Mul", silu->outputs[0], vals[1 - gs]) : NULL;
    if (!prod) continue;
    act[0] = sig, act[1] = silu, act[2] = prod;
    *gate = gs;
    return true;
  }
  return false;
}

/* Whether value v is read by exactly `readers` node inputs, all inside the gated chain (the caller
 * counts them), and leaves the graph nowhere. */
static bool mnb_read_only_by(const op_ctx *c, int v, int readers) {
  const ir_value *val = &op_graph(c)->values[v];
  return val->n_consumers == readers && !val->is_graph_output;
}

/* Whether only the chain reads the pair and the first two activations (the gate: the Sigmoid and
 * the first Mul; up, the Sigmoid's result and the first Mul's: each the next node of the chain),
 * so that the launch need give the product alone. With a folded bias Add every result is kept. */
static bool mnb_swiglu_product_only(const op_ctx *c, const int vals[2], const ir_node *const *act, int gate,
                                    bool folded_add) {
  return !folded_add && mnb_read_only_by(c, vals[gate], 2) && mnb_read_only_by(c, vals[1 - gate], 1) &&
         mnb_read_only_by(c, act[0]->outputs[0], 1) && mnb_read_only_by(c, act[1]->outputs[0], 1);
}

/* The pair (gate, up) and its activation nodes in one launch: outs[] receives the pair's results
 * in group order; the activation nodes get theirs (op_compute_for). 1 when the pattern is not
 * there (nothing recorded), 0, or -1 on failure. */
static int mnb_swiglu_ahead(op_ctx *c, const mnb_attrs *a, mlxb_array *xp, const ir_node *const *group,
                            const ir_node *const *adds, const mlxb_array *const *w, const mlxb_array *const *sc,
                            const mlxb_array *const *bi, mlxb_array *const *bias, mlxb_qgemv_norm *norm,
                            mlxb_array **outs) {
  int vals[2], gate = 0;
  const ir_node *act[3];
  for (int i = 0; i < 2; i++) vals[i] = adds[i] ? adds[i]->outputs[0] : group[i]->outputs[0];
  if (!mnb_swiglu_nodes(c, vals, act, &gate)) return 1;
  int up = 1 - gate;
  const mlxb_array *ws[2] = {w[gate], w[up]}, *scs[2] = {sc[gate], sc[up]}, *bis[2] = {bi[gate], bi[up]};
  const mlxb_array *adding[2] = {bias[gate], bias[up]};
  mlxb_array *r[MLXB_QGEMV_SWIGLU_OUTPUTS];
  bool product_only = mnb_swiglu_product_only(c, vals, act, gate, adds[0] || adds[1]);
  if (mlxb_qgemv_swiglu(op_scope(c), xp, ws, scs, bis, adding, mnb_group(a), (int)a->bits, product_only, norm, r))
    return op_check(c);
  outs[gate] = r[0], outs[up] = r[1];
  for (int i = 0; i < 3; i++)
    if (op_compute_for(c, act[i], r[2 + i])) return -1;
  return 0;
}

/* Whether a group of siblings takes the tensor-core GEMM together: more rows than the GEMV takes, of
 * float16, and every sibling's weights exact as float16 halves (mnb_split_is_exact). */
static bool mnb_group_takes_split(op_ctx *c, const mnb_attrs *a, mlxb_array *xp, const ir_node *const *group, int n) {
  if (mlxb_type(xp) != MLXB_F16 || (int64_t)mlxb_size(xp) / mlxb_dim(xp, -1) <= MNB_GEMV_MAX_ROWS) return false;
  if (!mlxb_qgemm_split_available(op_scope(c), (int)a->bits, mnb_group(a))) return false;
  for (int i = 0; i < n; i++) {
    const mnb_prepared *m = op_prepared_of(c, group[i]);
    if (!m || !m->split_exact) return false;
  }
  return true;
}

/* A group of siblings as one launch computes them: the nodes in node order, each one's folded bias
 * Add (or NULL) with its constant, the prepared weights, and the results once launched. */
typedef struct mnb_group {
  int n, me, folded;
  const ir_node *nodes[MLXB_QGEMV_MAX_SETS], *adds[MLXB_QGEMV_MAX_SETS];
  const mlxb_array *w[MLXB_QGEMV_MAX_SETS], *sc[MLXB_QGEMV_MAX_SETS], *bi[MLXB_QGEMV_MAX_SETS];
  mlxb_array *bias[MLXB_QGEMV_MAX_SETS], *outs[MLXB_QGEMV_MAX_SETS];
} mnb_siblings;

/* Node self's group (every sibling prepared: mnb_is_sibling) with its bias Adds. */
static void mnb_group_of(const op_ctx *c, const ir_node *self, const mnb_attrs *a, mnb_siblings *p) {
  memset(p, 0, sizeof *p);
  p->n = mnb_sibling_group(c, self, a, p->nodes, &p->me);
  for (int i = 0; i < p->n; i++) {
    const mnb_prepared *m = op_prepared_of(c, p->nodes[i]);
    p->w[i] = m->w, p->sc[i] = m->scales, p->bi[i] = m->biases;
    p->adds[i] = mnb_bias_add(c, p->nodes[i], mlxb_dim(m->w, 0), &p->bias[i]);
    p->folded += p->adds[i] != NULL;
  }
}

/* The group's GEMV launch (the gated MLP's when a pair feeds one; norm: NULL, or the norm the launch
 * computes first, x then being the norm's input): p->outs. 0, or -1 with the failure recorded. */
static int mnb_gemv_group(op_ctx *c, const mnb_attrs *a, mlxb_array *xp, mnb_siblings *p, mlxb_qgemv_norm *norm) {
  int gated = p->n == 2 ? mnb_swiglu_ahead(c, a, xp, p->nodes, p->adds, p->w, p->sc, p->bi, p->bias, norm, p->outs) : 1;
  if (gated < 0) return -1;
  if (gated > 0 && mlxb_qgemv_sets(op_scope(c), xp, p->n, p->w, p->sc, p->bi, (const mlxb_array *const *)p->bias,
                                   mnb_group(a), (int)a->bits, norm, p->outs))
    return op_check(c);
  return 0;
}

/* Hands each node of the group its result in the output's shape (out_dims with the node's N last),
 * and each folded Add its own; the result of node p->me goes to *mine instead when mine is given.
 * 0, or -1 with the failure recorded. */
static int mnb_hand_out(op_ctx *c, mnb_siblings *p, const int64_t *out_dims, int rank, mlxb_array **mine) {
  mlxb_scope *s = op_scope(c);
  int64_t dims[OP_UTIL_MAX_RANK];
  memcpy(dims, out_dims, sizeof *dims * (size_t)rank);
  for (int i = 0; i < p->n; i++) {
    dims[rank - 1] = p->outs[i] ? mlxb_dim(p->outs[i], -1) : 0;
    mlxb_array *yi = p->outs[i] ? mlxb_reshape(s, p->outs[i], dims, rank) : NULL; /* none when already so */
    if (!yi) return op_check(c);
    if (p->adds[i] && op_compute_for(c, p->adds[i], yi)) return -1;
    if (mine && i == p->me) *mine = yi;
    else if (op_compute_for(c, p->nodes[i], yi)) return -1;
  }
  return 0;
}

/* Computes this node's group (and the bias adds folded into it) for a few rows, or many on the
 * tensor cores or a CPU scope: returns this
 * node's output after handing the others theirs, or NULL with nothing recorded when the node
 * computes alone (no sibling, no bias add). xp is A padded to Kp columns, in A's shape. */
static mlxb_array *mnb_output_ahead(op_ctx *c, const mnb_attrs *a, mlxb_array *xp, const int64_t *out_dims,
                                    int rank) {
  if (!op_can_compute_for(c) || !op_prepared(c)) return NULL;
  mnb_siblings p;
  mnb_group_of(c, op_node(c), a, &p);
  if (p.n < 2 && !p.folded) return NULL;
  mlxb_scope *s = op_scope(c);
  mlxb_dtype t = mlxb_type(xp);
  bool split = mnb_group_takes_split(c, a, xp, p.nodes, p.n);
  /* many rows on a GPU scope go together only on the tensor cores (the GEMV is for a few) */
  if (!split && mlxb_scope_device(s) != MLXB_DEVICE_CPU && (int64_t)mlxb_size(xp) / mlxb_dim(xp, -1) > MNB_GEMV_MAX_ROWS)
    return NULL;
  if (split) {
    /* many rows on the tensor cores: the group in one launch, each sibling's bias Add folded in */
    if (mlxb_qgemm_split_sets(s, xp, p.n, p.w, p.sc, p.bi, (const mlxb_array *const *)p.bias, mnb_group(a),
                              (int)a->bits, p.outs))
      return op_check(c), NULL;
  } else if (mlxb_qgemv_available(s, t, (int)a->bits, mnb_group(a))) {
    /* in A's shape and out in the outputs': no reshape around the launch */
    if (mnb_gemv_group(c, a, xp, &p, NULL)) return NULL;
  } else {
    int64_t rows = (int64_t)mlxb_size(xp) / mlxb_dim(xp, -1);
    mlxb_array *xf = op_util_cast(s, op_util_reshape2(s, xp, rows, mlxb_dim(xp, -1)), MLXB_F32);
    for (int i = 0; i < p.n; i++) {
      const mnb_prepared *m = op_prepared_of(c, p.nodes[i]);
      p.outs[i] = op_util_cast(s, mnb_matmul_prepared(s, a, xf, m), t);
      if (p.bias[i]) p.outs[i] = mlxb_binary(s, MLXB_ADD, p.outs[i], p.bias[i]); /* the Add's own lowering */
    }
  }
  mlxb_array *mine = NULL;
  return mnb_hand_out(c, &p, out_dims, rank, &mine) ? NULL : mine;
}

/* A norm's readers, all of them siblings of node n (its group, n first), computed from the norm's
 * input by one GEMV launch with the norm in it (op_lower_normed_fn): a decode step's few rows on
 * MLX's CUDA backend, K unpadded. The norm then costs no launch; 1 where that does not apply. */
static int lower_matmul_nbits_normed(op_ctx *c, const op_def *def, const ir_node *n, int v, op_normed *norm) {
  mlxb_scope *s = op_scope(c);
  mnb_attrs a = mnb_read_attrs(n);
  if (!op_can_compute_for(c) || n->n_inputs <= MNB_A || n->inputs[MNB_A] != v || !mnb_is_sibling(c, n, n, &a) ||
      mnb_node_int8(op_graph(c), n, &a)) /* A is quantized after the norm */
    return 1;
  int64_t k = mlxb_ndim(norm->x) > 0 ? mlxb_dim(norm->x, -1) : 0, rows = k > 0 ? (int64_t)mlxb_size(norm->x) / k : 0;
  mlxb_dtype t = mlxb_type(norm->x);
  if (k != a.k || a.k_blocks * a.block != a.k || rows < 1 || rows > MNB_GEMV_MAX_ROWS ||
      !mlxb_qgemv_available(s, t, (int)a.bits, mnb_group(&a)) || !mlxb_qgemv_norm_available(s, t, k))
    return 1;
  mnb_siblings p;
  mnb_group_of(c, n, &a, &p);
  /* every reader of v is a node of the group, which reads it once (as A) */
  if (p.me != 0 || p.n != op_graph(c)->values[v].n_consumers) return 1;
  /* every block normalizes the row again: not for a vocabulary's projection, whose ~10^4 blocks
   * would read the row's inputs once each for one launch saved */
  int64_t outputs = 0;
  for (int i = 0; i < p.n; i++) outputs += mlxb_dim(p.w[i], 0);
  if (outputs > MNB_NORM_MAX_OUTPUTS) return 1;
  int rank = mlxb_ndim(norm->x);
  if (rank > OP_UTIL_MAX_RANK) return 1;
  int64_t out_dims[OP_UTIL_MAX_RANK];
  mlxb_shape(norm->x, out_dims);
  mlxb_qgemv_norm q = {.skip = norm->skip, .bias = norm->bias, .gamma = norm->gamma, .eps = norm->eps,
                       .want_sum = norm->want_sum};
  if (mnb_gemv_group(c, &a, norm->x, &p, &q)) return -1;
  if (mnb_hand_out(c, &p, out_dims, rank, NULL)) return -1;
  norm->sum = q.sum;
  return 0;
}

/* On a CPU scope the EP's kernels read every product of 4-bit weights in float32 (the sets task:
 * mlxb_qgemv_sets, and mlxb_quantized_matmul) and take integer zero points in place of MLX's
 * float32 biases: a quarter of their bytes (one row of them when the zero point is implicit), on
 * a decode step's every weight row, and ORT's own (q - z) * scale. */
static bool mnb_cpu_takes_zero_points(op_ctx *c, const mnb_attrs *a) {
  mlxb_scope *s = op_scope(c);
  if (mlxb_scope_device(s) != MLXB_DEVICE_CPU || a->bits != 4) return false;
  if (op_has_input(c, MNB_ZP) && op_input_dtype(c, MNB_ZP) != ONNX_UINT8) return false; /* float zero points */
  return mlxb_qgemv_available(s, MLXB_F32, (int)a->bits, mnb_group(a));
}

/* The zero points as uint8 [N, groups] (MLX's groups: a block above 128 repeats its own), or
 * [1, groups] of 2^(bits-1) when implicit. */
static mlxb_array *mnb_integer_zero_points(op_ctx *c, const mnb_attrs *a) {
  mlxb_scope *s = op_scope(c);
  int reps = (int)(a->block / mnb_group(a));
  if (!op_has_input(c, MNB_ZP)) {
    int64_t dims[2] = {1, a->k_blocks * reps};
    return mlxb_full(s, dims, 2, mlxb_scalar_f64(s, (double)(1 << (a->bits - 1)), MLXB_U8), MLXB_U8);
  }
  int64_t per_row = (a->k_blocks * a->bits + 7) / 8;
  mlxb_array *u = op_util_unpack_bits(s, op_util_reshape2(s, op_input(c, MNB_ZP), a->n, per_row), (int)a->bits);
  mlxb_array *zp = slice_last(s, u, a->k_blocks);
  return reps > 1 ? mlxb_repeat(s, zp, reps, 1) : zp;
}

/* Compile: the arrays above, kept with the plan's constants, for the nodes that reach
 * mnb_quantized_matmul (no g_idx, blocks of 32 and more) with constant B, scales and zero points
 * of the sizes the attributes give (other sizes are left to the Run, which reports them). */
static int prepare_matmul_nbits(op_ctx *c, const op_def *def, void **state) {
  mlxb_scope *s = op_scope(c);
  mnb_attrs a = mnb_read_attrs(op_node(c));
  static const int weight_inputs[] = {MNB_B, MNB_SCALES, MNB_ZP};
  if (op_has_input(c, MNB_GIDX) || a.block < 32 || !op_inputs_const(c, weight_inputs, 3)) return 0;
  mlxb_array *b = op_input(c, MNB_B), *sc = op_input(c, MNB_SCALES), *zp = op_input(c, MNB_ZP);
  int64_t zp_size = !zp ? 0 : mlxb_type(zp) == MLXB_U8 ? a.n * ((a.k_blocks * a.bits + 7) / 8) : a.n * a.k_blocks;
  if (!b || !sc || (int64_t)mlxb_size(b) != a.n * a.k_blocks * a.block * a.bits / 8 ||
      (int64_t)mlxb_size(sc) != a.n * a.k_blocks || (zp && (int64_t)mlxb_size(zp) != zp_size))
    return 0;
  mlxb_array *scales = op_util_cast(s, op_util_reshape2(s, sc, a.n, a.k_blocks), MLXB_F32);
  mnb_prepared m = mnb_mlx_weights(s, &a, b, scales, mnb_zero_points(c, &a));
  if (mnb_cpu_takes_zero_points(c, &a)) m.biases = mnb_integer_zero_points(c, &a);
  mnb_prepared *kept = malloc(sizeof *kept);
  if (!kept) return op_fail(c, "out of memory");
  *state = kept;
  kept->w = op_prepare_keep(c, m.w);
  kept->scales = op_prepare_keep(c, m.scales);
  kept->biases = op_prepare_keep(c, m.biases);
  if (!kept->w || !kept->scales || !kept->biases) return -1;
  const ir_value *a_value = ir_node_input(op_graph(c), op_node(c), MNB_A);
  kept->split_exact = a_value && a_value->dtype == ONNX_FLOAT16 && mnb_split_is_exact(c, &a, kept->scales);
  return mlxb_ok(s) ? 0 : op_fail(c, "%s", mlxb_error(s));
}

static int lower_matmul_nbits(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_node *node = op_node(c);
  mnb_attrs a = mnb_read_attrs(node);
  mlxb_array *x = op_input(c, MNB_A);
  if (!x || !op_input(c, MNB_B) || !op_input(c, MNB_SCALES)) return op_fail(c, "A, B and scales are required");
  if (a.k_blocks <= 0 || a.n <= 0) return op_fail(c, "bad K/N/block_size attributes");
  int rank = mlxb_ndim(x);
  if (rank < 1 || rank >= OP_UTIL_MAX_RANK) return op_fail(c, "A rank %d is outside [1, %d)", rank, OP_UTIL_MAX_RANK);
  if (mlxb_dim(x, -1) != a.k)
    return op_fail(c, "A's last dimension %lld != K %lld", (long long)mlxb_dim(x, -1), (long long)a.k);
  mlxb_dtype t = mlxb_type(x);
  bool zp_float = op_has_input(c, MNB_ZP) && op_input_dtype(c, MNB_ZP) != ONNX_UINT8;
  bool has_gidx = op_has_input(c, MNB_GIDX);
  bool b_const = ir_node_input(op_graph(c), node, MNB_B)->is_const;
  int64_t kp = a.k_blocks * a.block;

  int64_t out_dims[OP_UTIL_MAX_RANK];
  mlxb_shape(x, out_dims);
  out_dims[rank - 1] = a.n;
  if (mlxb_size(x) == 0) return op_set_output(c, 0, mlxb_zeros(s, out_dims, rank, t)); /* MLX's qmm divides by M */
  int zero = 0;
  mlxb_array *scales = op_util_cast(s, op_util_reshape2(s, op_input(c, MNB_SCALES), a.n, a.k_blocks), MLXB_F32);
  mlxb_array *zp = mnb_zero_points(c, &a);
  if (op_check(c)) return -1;
  bool int8_path = mnb_uses_int8(&a, b_const, has_gidx, op_input_dtype(c, MNB_ZP));
  int64_t rows = (int64_t)mlxb_size(x) / a.k;
  /* on the CPU the sets task takes any number of rows (more than one: tiles and BLAS), so a prompt's
   * siblings, bias Adds and gated MLP are one task too */
  bool cpu_sets = mlxb_scope_device(s) == MLXB_DEVICE_CPU && mlxb_qgemv_available(s, t, (int)a.bits, mnb_group(&a));
  if (int8_path && cpu_sets) { /* A quantized as MLAS does, then the products of any float32 A */
    x = op_util_quantize_blocks(s, pad_last(s, x, kp), a.block);
    if (!x) return op_check(c) ? -1 : op_fail(c, "A's block quantization failed");
    int8_path = false;
  }
  bool grouped = rows <= MNB_GEMV_MAX_ROWS || cpu_sets || mnb_takes_split(c, &a, x, int8_path);
  if (grouped && !int8_path && !has_gidx && !op_has_input(c, MNB_BIAS)) {
    mlxb_array *y = mnb_output_ahead(c, &a, pad_last(s, x, kp), out_dims, rank);
    if (y) return op_set_output(c, 0, y);
    if (op_check(c)) return -1;
  }
  if (mnb_takes_gemv(c, &a, x, int8_path))
    return op_set_output(c, 0, mlxb_reshape(s, mnb_gemv(c, &a, x, scales, zp), out_dims, rank));
  if (mnb_takes_split(c, &a, x, int8_path)) {
    mlxb_array *y = mnb_split_output(c, &a, pad_last(s, x, kp), out_dims, rank);
    return y ? op_set_output(c, 0, y) : -1;
  }
  mlxb_array *xf = op_util_cast(s, x, MLXB_F32);
  if (rank == 1) xf = mlxb_expand_dims(s, xf, &zero, 1);

  mlxb_array *y;
  if (has_gidx) {
    y = mlxb_matmul(s, xf, mlxb_transpose(s, mnb_dequant_weights(c, &a, scales, zp, zp_float), (int[]){1, 0}, 2));
  } else {
    xf = pad_last(s, xf, kp); /* the padding meets weights of the last block's tail: 0 * w */
    if (int8_path) xf = op_util_quantize_blocks(s, xf, a.block);
    if (a.block >= 32)
      y = mnb_quantized_matmul(c, &a, xf, scales, zp);
    else
      y = mlxb_matmul(s, xf, mlxb_transpose(s, mnb_dequant_weights(c, &a, scales, zp, zp_float), (int[]){1, 0}, 2));
  }
  if (op_has_input(c, MNB_BIAS)) y = mlxb_binary(s, MLXB_ADD, y, op_util_cast(s, op_input(c, MNB_BIAS), MLXB_F32));
  return op_set_output(c, 0, op_util_cast(s, mlxb_reshape(s, y, out_dims, rank), t));
}

/* ---- GatherBlockQuantized ----------------------------------------------------------------- */

static bool claim_gather_block_quantized(claim_ctx *c, const op_def *def) {
  const ir_node *node = c->node;
  int64_t bits = ir_attr_int(node, "bits", 4), block = ir_attr_int(node, "block_size", 128);
  if (bits != 2 && bits != 4 && bits != 8)
    return claim_decline(c, "bits=%lld (uint8 data takes 2, 4, 8)", (long long)bits);
  if (!is_pow2(block) || block < 16)
    return claim_decline(c, "block_size=%lld (a power of two >= 16)", (long long)block);
  const ir_value *data = claim_input(c, GBQ_DATA);
  if (data->rank < 1) return claim_decline(c, "data rank unknown or 0");
  int64_t ga = ir_attr_int(node, "gather_axis", 0), qa = ir_attr_int(node, "quantize_axis", 1);
  if (ga < 0) ga += data->rank;
  if (qa < 0) qa += data->rank;
  if (ga != 0) return claim_decline(c, "gather_axis must be 0 for uint8 data (as ORT)");
  if (qa != data->rank - 1) return claim_decline(c, "quantize_axis must be the last axis for uint8 data (as ORT)");
  if (data->rank < 2) return claim_decline(c, "data rank 1 (gather and quantize axes coincide)");
  int32_t st = claim_input_dtype(c, GBQ_SCALES);
  if (st != ONNX_FLOAT && st != ONNX_FLOAT16)
    return claim_decline(c, "scales dtype %s (ORT's CPU kernel: float, float16)", ir_dtype_name(st));
  if (claim_input(c, GBQ_ZP) && claim_input_dtype(c, GBQ_ZP) != ONNX_UINT8)
    return claim_decline(c, "zero_points must be uint8");
  return true;
}

/* Gathers the packed rows first (data, scales, zero points along axis 0), then dequantizes only
 * those: float(q - zp) * scale in float32, rounded once to the scales' dtype. Out-of-range
 * indices give zero rows, negative ones count from the end, as in ORT. */
static int lower_gather_block_quantized(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_node *node = op_node(c);
  mlxb_array *data = op_input(c, GBQ_DATA), *idx = op_input(c, GBQ_INDICES), *scales = op_input(c, GBQ_SCALES);
  if (!data || !idx || !scales) return op_fail(c, "data, indices and scales are required");
  int bits = (int)ir_attr_int(node, "bits", 4);
  int64_t block = ir_attr_int(node, "block_size", 128);
  int rank = mlxb_ndim(data), irank = mlxb_ndim(idx);
  if (rank < 2 || rank + irank > OP_UTIL_MAX_RANK)
    return op_fail(c, "data rank %d / indices rank %d out of range", rank, irank);
  if (mlxb_ndim(scales) != rank) return op_fail(c, "data and scales must have the same rank");
  int64_t rows = mlxb_dim(data, 0), d = mlxb_dim(data, -1) * (8 / bits), nb = (d + block - 1) / block;
  if (mlxb_dim(scales, -1) != nb)
    return op_fail(c, "scales' last dimension %lld != %lld blocks", (long long)mlxb_dim(scales, -1), (long long)nb);
  if (mlxb_gather_bq_available(s)) /* one kernel on MLX's CUDA backend: the same arithmetic */
    return op_set_output(c, 0, mlxb_gather_bq(s, data, idx, scales, op_input(c, GBQ_ZP), bits, block));

  mlxb_dtype it = mlxb_type(idx);
  mlxb_array *n_rows = mlxb_scalar_i64(s, rows, it), *zero_i = mlxb_scalar_i64(s, 0, it);
  mlxb_array *valid =
      mlxb_binary(s, MLXB_LOGICAL_AND, mlxb_binary(s, MLXB_GREATER_EQUAL, idx, mlxb_unary(s, MLXB_NEG, n_rows)),
                  mlxb_binary(s, MLXB_LESS, idx, n_rows));
  mlxb_array *wrapped =
      mlxb_where(s, mlxb_binary(s, MLXB_LESS, idx, zero_i), mlxb_binary(s, MLXB_ADD, idx, n_rows), idx);
  int64_t n_idx = (int64_t)mlxb_size(idx);
  mlxb_array *flat = mlxb_reshape(s, mlxb_where(s, valid, wrapped, zero_i), &n_idx, 1);

  mlxb_array *q = op_util_cast(s, op_util_unpack_bits(s, mlxb_take(s, data, flat, 0), bits), MLXB_F32);
  mlxb_array *sc = op_util_cast(s, mlxb_take(s, scales, flat, 0), MLXB_F32);
  mlxb_array *zp;
  if (op_has_input(c, GBQ_ZP)) {
    zp = op_util_cast(s, slice_last(s, op_util_unpack_bits(s, mlxb_take(s, op_input(c, GBQ_ZP), flat, 0), bits), nb), MLXB_F32);
    zp = slice_last(s, zp ? mlxb_repeat(s, zp, (int)block, rank - 1) : NULL, d);
  } else {
    zp = mlxb_scalar_f64(s, (double)(1 << (bits - 1)), MLXB_F32);
  }
  sc = slice_last(s, mlxb_repeat(s, sc, (int)block, rank - 1), d);
  mlxb_array *y = mlxb_binary(s, MLXB_MUL, mlxb_binary(s, MLXB_SUB, q, zp), sc);

  /* [n_idx, rest..., D] -> indices' shape + rest + [D], zero rows where the index was invalid */
  int64_t out_dims[OP_UTIL_MAX_RANK], data_dims[OP_UTIL_MAX_RANK];
  mlxb_shape(idx, out_dims);
  mlxb_shape(data, data_dims);
  for (int i = 1; i < rank; i++) out_dims[irank + i - 1] = data_dims[i];
  out_dims[irank + rank - 2] = d;
  int out_rank = irank + rank - 1;
  int64_t vdims[OP_UTIL_MAX_RANK];
  for (int i = 0; i < out_rank; i++) vdims[i] = i < irank ? out_dims[i] : 1;
  y = mlxb_reshape(s, y, out_dims, out_rank);
  y = mlxb_where(s, mlxb_reshape(s, valid, vdims, out_rank), y, mlxb_scalar_f64(s, 0.0, MLXB_F32));
  return op_set_output(c, 0, op_util_cast(s, y, mlxb_type(scales)));
}

/* ---- the table ---------------------------------------------------------------------------- */

static const op_def defs[] = {
    OP_ROW("com.microsoft", "MatMulNBits", 1, 1, .inputs = {3, 6}, .outputs = {1, 1}, .dtypes = DT_F32 | DT_F16,
           .claim = claim_matmul_nbits, .lower = lower_matmul_nbits, .prepare = prepare_matmul_nbits, .release = free,
           .lower_normed = lower_matmul_nbits_normed,
           .doc = "float32/float16 A of any rank >= 1, bits 2/4/8, block_size a power of two in [16, 256] (K need "
                  "not be a multiple of it), scales [N*k_blocks] or [N, k_blocks], zero points packed uint8 (any "
                  "bits) or float (2/4-bit), g_idx (4-bit), bias. Computed in float32 as ORT's CPU kernel (float16 "
                  "widened, rounded once): blocks >= 32 through MLX's quantized matmul on a view of B (bias "
                  "-scale*zp), block 16 and g_idx by dequantizing B. accuracy_level 4 with a constant B reproduces "
                  "MLAS's per-block int8 quantization of A (x86 and NEON MLAS kernels; ORT builds with KleidiAI "
                  "quantize A per row instead). The quantized-matmul path never repacks B (a view); with constant B, "
                  "scales and zero points its MLX weights, scales and biases are built once at Compile (prepare), "
                  "otherwise every Run; the block-16/g_idx path dequantizes B on every Run. Up to 8 rows on MLX's "
                  "CUDA backend take the EP's GEMV kernel (same float32 arithmetic), and projections of one A with "
                  "kept weights (Q/K/V, gate/up) are computed together by the first, with an Add of a constant bias "
                  "that is one's only reader (one launch on CUDA). More rows on CUDA dequantize B to float32 for "
                  "one GEMM (MLX's quantized kernels past one row do not run there), and so do two rows or more on "
                  "the CPU (one BLAS GEMM over slices of about 64 MiB of dequantized weights, against MLX's CPU "
                  "kernel walking the weights once per row); 4-bit weights on an x86-64 CPU with AVX2 take the EP's "
                  "own CPU kernels instead (one row: a GEMV; more: 2 MiB tiles of dequantized weights, each one BLAS "
                  "GEMM). On CUDA (sm_80 and later), more than 8 rows of float16 A with kept weights, float16 "
                  "scales, integer zero points and no weight past float16's range take the EP's tensor-core kernel: "
                  "each weight as two exact float16 halves made in shared memory, every product exact in float32 "
                  "accumulators, the bias added before the one rounding (the float32 GEMM's sum up to order; "
                  "ORT_EP_MLX_QGEMM=0 turns it off); projections of one A share one launch there too, each with "
                  "the bias Add that is its only reader. Where an RMS norm (SimplifiedLayerNormalization, "
                  "SkipSimplifiedLayerNormalization) feeds such projections and nothing else, up to 8 rows on "
                  "CUDA can take the norm into their GEMV launch: each block normalizes its row itself and the "
                  "norm node launches nothing (opt-in, ORT_EP_MLX_NORM_IN_GEMV=1: measured slower on the H100, "
                  "every block normalizing the row again). Declined: other bits/block sizes, "
                  "weight_prepacked, 8-bit with float zero points (ORT rejects them), g_idx with 2/8-bit weights or "
                  "uint8 zero points (ORT reads 4-bit values only and ignores those zero points), accuracy_level 4 "
                  "with 2-bit weights (CPU-dependent in ORT) or with non-constant scales/zero points, bfloat16 (no "
                  "ORT CPU kernel)."),
    OP_ROW("com.microsoft", "GatherBlockQuantized", 1, 1, .inputs = {3, 4}, .outputs = {1, 1}, .dtypes = DT(ONNX_UINT8),
           .claim = claim_gather_block_quantized, .lower = lower_gather_block_quantized,
           .doc = "uint8 data with bits 2/4/8, gather_axis 0, quantize_axis last, block_size a power of two >= 16, "
                  "int32/int64 indices (negative wrap, out of range gives zeros), optional packed uint8 zero_points "
                  "(default 2^(bits-1)), float32/float16 scales. Rows are gathered before dequantizing (on MLX's "
                  "CUDA backend one kernel of the EP's: the same arithmetic). Declined: "
                  "int4/uint4 and float8/float4 data (MLX has no such dtypes), other axes (ORT rejects them for "
                  "uint8 data)."),
};

OPS_FAMILY(contrib_quant, defs);
