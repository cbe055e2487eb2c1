/* Mixture-of-experts ops of ORT's com.microsoft domain: MoE (float experts) and QMoE (2/4/8-bit
 * integer experts). Both follow ORT's CPU kernels: routing in float32 (top-k with ties to the
 * higher expert index), each expert's FC1 -> activation -> FC2 in float32 (float16 widened, the
 * output rounded once), and the weighted sum of the routed experts; QMoE reproduces the int8
 * activations of the MLAS kernels ORT uses for block-wise constant 8-bit (and accuracy_level 4,
 * 4-bit) experts. Experts are evaluated densely, or gathered per routed token when fewer. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ops/op_util.h"

#define MLX_MAX_GROUP 128    /* largest group size of MLX's affine quantization */
#define QMOE_MIN_WEIGHT 1e-8 /* QMoE drops routes whose weight is not above this (ORT) */

/* Inputs of MoE and QMoE (the first two are shared). */
enum { IN_X, IN_ROUTER };
enum { MOE_FC1_W = 2, MOE_FC1_B, MOE_FC2_W, MOE_FC2_B, MOE_FC3_W, MOE_FC3_B };
enum {
  Q_FC1_W = 2, Q_FC1_S, Q_FC1_B, Q_FC2_W, Q_FC2_S, Q_FC2_B, Q_FC3_W, Q_FC3_S, Q_FC3_B,
  Q_FC1_ZP, Q_FC2_ZP, Q_FC3_ZP, Q_ROUTER_W, Q_FIRST_FP_INPUT /* global/activation scales of fp modes */
};

typedef enum moe_act { ACT_RELU, ACT_GELU, ACT_SILU, ACT_IDENTITY, ACT_SWIGLU, ACT_UNKNOWN } moe_act;

typedef struct moe_attrs {
  bool quantized;      /* QMoE */
  int64_t k;           /* experts per token */
  moe_act act;
  bool normalize;      /* normalize_routing_weights */
  float alpha, beta;   /* SwiGLU's activation_alpha, activation_beta */
  float limit;         /* swiglu_limit; INFINITY when absent */
  int64_t bits;        /* expert_weight_bits (QMoE) */
  int64_t block;       /* block_size, 0 = one scale per row (QMoE) */
  int64_t acc;         /* accuracy_level (QMoE) */
} moe_attrs;

/* One projection of every expert: y = x @ W^T + b with W [E, n, k]. */
typedef struct moe_fc {
  int w, scales, bias, zp; /* input indices; scales/zp -1 for MoE */
  int64_t n, k;            /* output and input features */
  bool int8_act;           /* ORT's MLAS int8 kernels: activations quantized per block first */
} moe_fc;

typedef struct moe_route {
  mlxb_array *experts; /* int32 [T, k]: chosen experts, best first */
  mlxb_array *weights; /* float32 [T, k] */
  mlxb_array *keep;    /* bool [T, k]: routes ORT evaluates (weight above its threshold) */
} moe_route;

/* ---- helpers ------------------------------------------------------------------------------ */

static mlxb_array *cast_to(mlxb_scope *s, mlxb_array *x, mlxb_dtype t) {
  if (!x || mlxb_type(x) == t) return x;
  return mlxb_astype(s, x, t);
}

static mlxb_array *num(mlxb_scope *s, double v) { return mlxb_scalar_f64(s, v, MLXB_F32); }

static mlxb_array *reshape_n(mlxb_scope *s, mlxb_array *x, int rank, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  int64_t dims[4] = {d0, d1, d2, d3};
  return mlxb_reshape(s, x, dims, rank);
}

/* x[..., lo:hi] on the last axis. */
static mlxb_array *slice_last(mlxb_scope *s, mlxb_array *x, int64_t lo, int64_t hi) {
  int64_t start[OP_UTIL_MAX_RANK] = {0}, stop[OP_UTIL_MAX_RANK], step[OP_UTIL_MAX_RANK];
  int rank = x ? mlxb_ndim(x) : 0;
  if (!x || rank < 1 || rank > OP_UTIL_MAX_RANK) return NULL;
  mlxb_shape(x, stop);
  if (lo == 0 && hi == stop[rank - 1]) return x;
  for (int i = 0; i < rank; i++) step[i] = 1;
  start[rank - 1] = lo;
  stop[rank - 1] = hi;
  return mlxb_slice(s, x, start, stop, step);
}

/* Unpacks uint8 bytes of `bits`-wide values (element 0 in the low bits, as ORT and MLX store
 * them) along the last axis: [..., L] -> [..., L * 8 / bits], still uint8. */
/* Sum of the columns of x [T, k] added left to right (ORT's loop order), as [T, 1]. */
static mlxb_array *sum_columns_in_order(mlxb_scope *s, mlxb_array *x, int64_t k) {
  mlxb_array *acc = slice_last(s, x, 0, 1);
  for (int64_t j = 1; j < k; j++) acc = op_util_add(s, acc, slice_last(s, x, j, j + 1));
  return acc;
}

static moe_act act_from_name(const char *name) {
  static const char *const names[] = {"relu", "gelu", "silu", "identity", "swiglu"};
  _Static_assert(sizeof names / sizeof names[0] == ACT_UNKNOWN, "one name per moe_act value");
  for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++)
    if (!strcmp(name, names[i])) return (moe_act)i;
  return ACT_UNKNOWN;
}

static moe_attrs read_attrs(const ir_node *n, bool quantized) {
  moe_attrs a;
  a.quantized = quantized;
  a.k = ir_attr_int(n, "k", 1);
  a.act = act_from_name(ir_attr_string(n, "activation_type", "relu"));
  a.normalize = ir_attr_int(n, "normalize_routing_weights", 0) == 1;
  a.alpha = ir_attr_float(n, "activation_alpha", 1.0f);
  a.beta = ir_attr_float(n, "activation_beta", 0.0f);
  a.limit = ir_node_attr(n, "swiglu_limit") ? ir_attr_float(n, "swiglu_limit", INFINITY) : INFINITY;
  a.bits = ir_attr_int(n, "expert_weight_bits", 4);
  a.block = ir_attr_int(n, "block_size", 0);
  a.acc = ir_attr_int(n, "accuracy_level", 0);
  return a;
}

static bool input_present(const ir_graph *g, const ir_node *n, int i) { return ir_node_input(g, n, i) != NULL; }

static bool input_const(const ir_graph *g, const ir_node *n, int i) {
  const ir_value *v = ir_node_input(g, n, i);
  return v && v->is_const;
}

/* The two projections with their features: FC1 [E, fuse * I, H] and FC2 [E, H, I]. */
static void describe_fcs(const moe_attrs *a, int64_t hidden, int64_t inter, moe_fc *fc1, moe_fc *fc2) {
  int64_t fuse = a->act == ACT_SWIGLU ? 2 : 1;
  if (a->quantized) {
    *fc1 = (moe_fc){Q_FC1_W, Q_FC1_S, Q_FC1_B, Q_FC1_ZP, fuse * inter, hidden, false};
    *fc2 = (moe_fc){Q_FC2_W, Q_FC2_S, Q_FC2_B, Q_FC2_ZP, hidden, inter, false};
  } else {
    *fc1 = (moe_fc){MOE_FC1_W, -1, MOE_FC1_B, -1, fuse * inter, hidden, false};
    *fc2 = (moe_fc){MOE_FC2_W, -1, MOE_FC2_B, -1, hidden, inter, false};
  }
}

/* Whether ORT runs this QMoE projection on the MLAS QNBit kernels with int8 activations. It
 * prepacks block-wise 4/8-bit experts whose weights, scales and zero points are constant
 * initializers (the shapes were checked at claim); 8-bit has no float kernel there, so its
 * activations are always int8, 4-bit only with accuracy_level 4. */
static bool fc_int8_activations(const ir_graph *g, const ir_node *n, const moe_attrs *a, const moe_fc *fc) {
  if (!a->quantized || a->block <= 0 || (a->bits != 4 && a->bits != 8)) return false;
  if (a->bits == 4 && a->acc != 4) return false;
  if (!input_const(g, n, fc->w) || !input_const(g, n, fc->scales)) return false;
  return !input_present(g, n, fc->zp) || input_const(g, n, fc->zp);
}

/* ---- claiming ----------------------------------------------------------------------------- */

/* Whether v has the given rank and its known dims equal want[] (-1 = any). */
static bool dims_match(const ir_value *v, const int64_t *want, int rank) {
  if (!v || v->rank != rank) return false;
  for (int i = 0; i < rank; i++)
    if (want[i] >= 0 && v->dims[i] >= 0 && v->dims[i] != want[i]) return false;
  return true;
}

static bool static_dims(const ir_value *v, int rank) {
  if (!v || v->rank != rank) return false;
  for (int i = 0; i < rank; i++)
    if (v->dims[i] < 0) return false;
  return true;
}

static bool claim_common_attrs(claim_ctx *c, const moe_attrs *a) {
  const ir_node *n = c->node;
  if (a->act == ACT_UNKNOWN)
    return claim_decline(c, "activation_type '%s' (ORT's CPU kernels take relu, gelu, silu, identity, swiglu)",
                         ir_attr_string(n, "activation_type", ""));
  int64_t fusion = ir_attr_int(n, "swiglu_fusion", 0);
  if (a->act == ACT_SWIGLU && fusion != 1)
    return claim_decline(c, "swiglu_fusion=%lld (ORT's CPU kernels take interleaved SwiGLU only)", (long long)fusion);
  if (a->quantized && a->act != ACT_SWIGLU && fusion != 0)
    return claim_decline(c, "swiglu_fusion=%lld with a non-SwiGLU activation", (long long)fusion);
  if (a->k < 1) return claim_decline(c, "k=%lld", (long long)a->k);
  if (ir_attr_int(n, "use_sparse_mixer", 0) == 1 && a->k != 2)
    return claim_decline(c, "use_sparse_mixer with k != 2 (ORT rejects it)");
  return true;
}

/* Shapes shared by both ops; fills E, H, I. pack: weights per byte (1 for float experts). */
static bool claim_shapes(claim_ctx *c, const moe_attrs *a, int pack, int64_t *e_out, int64_t *h_out, int64_t *i_out) {
  int fc1_w = a->quantized ? Q_FC1_W : MOE_FC1_W, fc2_w = a->quantized ? Q_FC2_W : MOE_FC2_W;
  const ir_value *x = claim_input(c, IN_X), *router = claim_input(c, IN_ROUTER);
  const ir_value *w1 = claim_input(c, fc1_w), *w2 = claim_input(c, fc2_w);
  if (!x || (x->rank != 2 && x->rank != 3)) return claim_decline(c, "input must have rank 2 or 3");
  if (!router || router->rank != 2) return claim_decline(c, "router_probs must have rank 2");
  if (!static_dims(w1, 3) || !static_dims(w2, 3)) return claim_decline(c, "expert weights need static 3-D shapes");
  int64_t e = w2->dims[0], h = w2->dims[1], inter = w2->dims[2] * pack;
  int64_t fuse = a->act == ACT_SWIGLU ? 2 : 1;
  int64_t want1[3] = {e, fuse * inter, h / pack};
  if (h % pack || !dims_match(w1, want1, 3))
    return claim_decline(c, "expert weights are not fc1 [E, %s, H%s], fc2 [E, H, I%s] (legacy layouts declined)",
                         fuse == 2 ? "2*I" : "I", pack > 1 ? "/pack" : "", pack > 1 ? "/pack" : "");
  if (x->dims[x->rank - 1] >= 0 && x->dims[x->rank - 1] != h) return claim_decline(c, "input's last dim != hidden size");
  if (router->dims[1] >= 0 && router->dims[1] != e) return claim_decline(c, "router_probs has %lld experts, weights %lld",
                                                                       (long long)router->dims[1], (long long)e);
  if (e < 1 || h < 1 || inter < 1) return claim_decline(c, "empty expert dimensions");
  if (a->k > e) return claim_decline(c, "k=%lld > %lld experts", (long long)a->k, (long long)e);
  *e_out = e;
  *h_out = h;
  *i_out = inter;
  return true;
}

static bool claim_bias(claim_ctx *c, int i, int64_t e, int64_t n, int32_t t) {
  const ir_value *b = claim_input(c, i);
  if (!b) return true;
  int64_t want[2] = {e, n};
  if (b->dtype != t) return claim_decline(c, "bias input %d dtype differs from the input", i);
  if (!dims_match(b, want, 2)) return claim_decline(c, "bias input %d is not [%lld, %lld]", i, (long long)e, (long long)n);
  return true;
}

static bool claim_moe(claim_ctx *c, const op_def *def) {
  moe_attrs a = read_attrs(c->node, false);
  int32_t t = claim_input_dtype(c, IN_X);
  if (!claim_common_attrs(c, &a)) return false;
  if (claim_input(c, MOE_FC3_W) || claim_input(c, MOE_FC3_B))
    return claim_decline(c, "fc3 inputs (ORT's CPU MoE does not implement FC3)");
  if (t == ONNX_FLOAT16 && !a.normalize)
    return claim_decline(c, "float16 with normalize_routing_weights=0 (ORT's CPU kernel returns inconsistent values)");
  for (int i = IN_ROUTER; i <= MOE_FC2_B; i++) {
    const ir_value *v = claim_input(c, i);
    if (v && v->dtype != t) return claim_decline(c, "input %d dtype differs from the input", i);
  }
  int64_t e, h, inter;
  if (!claim_shapes(c, &a, 1, &e, &h, &inter)) return false;
  int64_t fuse = a.act == ACT_SWIGLU ? 2 : 1;
  return claim_bias(c, MOE_FC1_B, e, fuse * inter, t) && claim_bias(c, MOE_FC2_B, e, h, t);
}

/* Scales and zero points of one QMoE projection [E, n, k]. */
static bool claim_quant_params(claim_ctx *c, const moe_attrs *a, const moe_fc *fc, int64_t e, int32_t t) {
  const ir_value *sc = claim_input(c, fc->scales), *zp = claim_input(c, fc->zp);
  if (!sc) return claim_decline(c, "scales input %d is required", fc->scales);
  if (sc->dtype != t) return claim_decline(c, "scales input %d dtype differs from the input", fc->scales);
  int64_t groups = a->block > 0 ? fc->k / a->block : 1;
  int64_t want_s[3] = {e, fc->n, groups};
  if (!dims_match(sc, want_s, a->block > 0 ? 3 : 2))
    return claim_decline(c, "scales input %d is not [E, N%s]", fc->scales, a->block > 0 ? ", K/block_size" : "");
  if (!zp) return true;
  if (zp->dtype != ONNX_UINT8) return claim_decline(c, "zero points must be uint8");
  int64_t want_z[3] = {e, (fc->n * a->bits + 7) / 8, 0};
  if (a->block > 0) {
    if (groups < 2)
      return claim_decline(c, "zero points with one block per row (ORT reads them in the row-wise layout)");
    want_z[1] = fc->n;
    want_z[2] = (groups * a->bits + 7) / 8;
  }
  if (!dims_match(zp, want_z, a->block > 0 ? 3 : 2)) return claim_decline(c, "zero points input %d has the wrong shape", fc->zp);
  return true;
}

static bool claim_qmoe(claim_ctx *c, const op_def *def) {
  const ir_node *n = c->node;
  moe_attrs a = read_attrs(n, true);
  int32_t t = claim_input_dtype(c, IN_X);
  if (!claim_common_attrs(c, &a)) return false;
  if (strcmp(ir_attr_string(n, "quant_type", "int"), "int"))
    return claim_decline(c, "quant_type '%s' (claimed: int)", ir_attr_string(n, "quant_type", ""));
  if (a.bits != 2 && a.bits != 4 && a.bits != 8)
    return claim_decline(c, "expert_weight_bits=%lld (ORT takes 2, 4, 8)", (long long)a.bits);
  static const char *const per_fc_bits[] = {"fc1_expert_weight_bits", "fc2_expert_weight_bits", "fc3_expert_weight_bits"};
  for (int i = 0; i < 3; i++)
    if (ir_attr_int(n, per_fc_bits[i], a.bits) != a.bits)
      return claim_decline(c, "%s differs from expert_weight_bits (ORT's CPU kernel has no mixed widths)", per_fc_bits[i]);
  if (a.block < 0 || (a.block > 0 && (a.block < 16 || (a.block & (a.block - 1)))))
    return claim_decline(c, "block_size=%lld (ORT takes 0 or a power of two >= 16)", (long long)a.block);
  if (a.bits == 2 && a.block > 0)
    return claim_decline(c, "block-wise 2-bit experts (ORT may take MLAS's LUT GEMM, which depends on the CPU)");
  if (ir_attr_int(n, "weights_prepacked", -1) == 1) return claim_decline(c, "weights_prepacked=1 (EP-specific layout)");
  for (int i = Q_FC3_W; i <= Q_FC3_B; i++)
    if (claim_input(c, i)) return claim_decline(c, "fc3 inputs (ORT's CPU QMoE does not implement FC3)");
  if (claim_input(c, Q_FC3_ZP)) return claim_decline(c, "fc3 inputs (ORT's CPU QMoE does not implement FC3)");
  for (int i = Q_FIRST_FP_INPUT; i < n->n_inputs; i++)
    if (claim_input(c, i)) return claim_decline(c, "input %d (global/activation scales of float quant types)", i);
  if (claim_input_dtype(c, IN_ROUTER) != t) return claim_decline(c, "router_probs dtype differs from the input");
  if (claim_input_dtype(c, Q_FC1_W) != ONNX_UINT8 || claim_input_dtype(c, Q_FC2_W) != ONNX_UINT8)
    return claim_decline(c, "expert weights must be uint8");
  int64_t e, h, inter;
  if (!claim_shapes(c, &a, (int)(8 / a.bits), &e, &h, &inter)) return false;
  moe_fc fc1, fc2;
  describe_fcs(&a, h, inter, &fc1, &fc2);
  if (a.block > 0 && (h % a.block || inter % a.block))
    return claim_decline(c, "hidden and inter sizes must be multiples of block_size (as ORT documents)");
  if (!claim_quant_params(c, &a, &fc1, e, t) || !claim_quant_params(c, &a, &fc2, e, t)) return false;
  if (!claim_bias(c, Q_FC1_B, e, fc1.n, t) || !claim_bias(c, Q_FC2_B, e, h, t)) return false;
  const ir_value *rw = claim_input(c, Q_ROUTER_W);
  if (rw && rw->dtype != t) return claim_decline(c, "router_weights dtype differs from the input");
  if (rw && rw->rank != 2) return claim_decline(c, "router_weights must have rank 2");
  return true;
}

/* ---- routing ------------------------------------------------------------------------------ */

/* The k best experts of each row of key [T, E], best first, ties to the higher index (ORT's
 * partial_sort of (value, index) pairs with std::greater): a stable ascending sort puts equal
 * values in index order, so its last k columns read backwards are that order. */
static mlxb_array *top_k_experts(mlxb_scope *s, mlxb_array *key, int64_t e, int64_t k) {
  mlxb_array *order = mlxb_argsort(s, key, 1);
  mlxb_array *cols = mlxb_arange(s, (double)(e - 1), (double)(e - 1 - k), -1.0, MLXB_I32);
  return cast_to(s, mlxb_take(s, order, cols, 1), MLXB_I32);
}

/* MoE: softmax over all experts, the top-k probabilities, optionally divided by their sum;
 * routes with a zero weight are skipped. */
static moe_route route_moe(mlxb_scope *s, const moe_attrs *a, mlxb_array *logits, int64_t e) {
  moe_route r = {0};
  int axis = 1;
  mlxb_array *mx = mlxb_reduce(s, MLXB_RMAX, logits, &axis, 1, true);
  mlxb_array *ex = mlxb_unary(s, MLXB_EXP, op_util_sub(s, logits, mx));
  mlxb_array *probs = mlxb_binary(s, MLXB_DIV, ex, mlxb_reduce(s, MLXB_RSUM, ex, &axis, 1, true));
  r.experts = top_k_experts(s, probs, e, a->k);
  r.weights = mlxb_take_along_axis(s, probs, r.experts, 1);
  if (a->normalize) r.weights = mlxb_binary(s, MLXB_DIV, r.weights, sum_columns_in_order(s, r.weights, a->k));
  r.keep = mlxb_binary(s, MLXB_GREATER, r.weights, num(s, 0.0));
  return r;
}

/* QMoE: top-k of the raw logits; weights are the softmax of those k logits (normalized either
 * way), or the router_weights at the chosen experts (divided by their sum when normalizing). A
 * zero sum gives zero weights; routes not above 1e-8 are skipped. */
static moe_route route_qmoe(mlxb_scope *s, const moe_attrs *a, mlxb_array *logits, mlxb_array *router_w, int64_t e) {
  moe_route r = {0};
  r.experts = top_k_experts(s, logits, e, a->k);
  mlxb_array *v;
  bool normalize = true;
  if (router_w) {
    v = mlxb_take_along_axis(s, router_w, r.experts, 1);
    normalize = a->normalize;
  } else {
    mlxb_array *top = mlxb_take_along_axis(s, logits, r.experts, 1);
    v = mlxb_unary(s, MLXB_EXP, op_util_sub(s, top, slice_last(s, top, 0, 1)));
  }
  if (normalize) {
    mlxb_array *sum = sum_columns_in_order(s, v, a->k), *zero = num(s, 0.0);
    mlxb_array *inv = mlxb_where(s, mlxb_binary(s, MLXB_EQUAL, sum, zero), zero, mlxb_unary(s, MLXB_RECIPROCAL, sum));
    v = op_util_mul(s, v, inv);
  }
  r.weights = v;
  r.keep = mlxb_binary(s, MLXB_GREATER, v, num(s, QMOE_MIN_WEIGHT));
  return r;
}

/* ---- expert projections -------------------------------------------------------------------- */

/* Input i of the node as float32, restricted to the experts `idx` (all when NULL). */
static mlxb_array *expert_input(op_ctx *c, int i, mlxb_array *idx, mlxb_dtype t) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *v = op_input(c, i);
  if (v && idx) v = mlxb_take(s, v, idx, 0);
  return cast_to(s, v, t);
}

/* Zero points [B, n, groups] as float32: unpacked from uint8, or 2^(bits-1). */
static mlxb_array *fc_zero_points(op_ctx *c, const moe_attrs *a, const moe_fc *fc, mlxb_array *idx, int64_t groups) {
  mlxb_scope *s = op_scope(c);
  if (!op_has_input(c, fc->zp)) return num(s, (double)(1 << (a->bits - 1)));
  mlxb_array *zp = op_util_unpack_bits(s, expert_input(c, fc->zp, idx, MLXB_U8), (int)a->bits);
  if (!zp) return NULL;
  int64_t b = mlxb_dim(zp, 0);
  zp = a->block == 0 ? reshape_n(s, slice_last(s, zp, 0, fc->n), 3, b, fc->n, 1, 0) : slice_last(s, zp, 0, groups);
  return cast_to(s, zp, MLXB_F32);
}

/* MLX's affine group for one scale group of g features (0 when MLX has none): g itself up to
 * 128, or 128 repeated; a whole row (block_size 0) splits into the largest group dividing K. */
static int64_t mlx_group(const moe_attrs *a, int64_t k) {
  if (a->block > 0) return a->block >= 32 ? (a->block < MLX_MAX_GROUP ? a->block : MLX_MAX_GROUP) : 0;
  for (int64_t g = MLX_MAX_GROUP; g >= 32; g /= 2)
    if (k % g == 0) return g;
  return 0;
}

/* x [B or 1, M, k] @ W^T over the experts' quantized weights [B, n, k * bits / 8]: through MLX's
 * quantized matmul on a uint32 view of the packed bytes (MLX's packing is ORT's; the MLX bias is
 * -scale * zp), or ORT's scale * (q - zp) dequantized when MLX has no matching group. */
static mlxb_array *fc_quantized(op_ctx *c, const moe_attrs *a, const moe_fc *fc, mlxb_array *x, mlxb_array *idx) {
  mlxb_scope *s = op_scope(c);
  int64_t groups = a->block > 0 ? fc->k / a->block : 1;
  mlxb_array *packed = expert_input(c, fc->w, idx, MLXB_U8);
  mlxb_array *scales = expert_input(c, fc->scales, idx, MLXB_F32);
  if (!packed || !scales) return NULL;
  int64_t b = mlxb_dim(packed, 0);
  scales = reshape_n(s, scales, 3, b, fc->n, groups, 0);
  mlxb_array *zp = fc_zero_points(c, a, fc, idx, groups);
  int64_t g = mlx_group(a, fc->k);
  if (g > 0) {
    mlxb_array *w = mlxb_view(s, packed, MLXB_U32);
    mlxb_array *biases = mlxb_unary(s, MLXB_NEG, op_util_mul(s, scales, zp));
    int reps = (int)(fc->k / groups / g);
    if (reps > 1) {
      scales = mlxb_repeat(s, scales, reps, 2);
      biases = mlxb_repeat(s, biases, reps, 2);
    }
    return mlxb_quantized_matmul(s, x, w, scales, biases, true, (int)g, (int)a->bits);
  }
  mlxb_array *q = cast_to(s, op_util_unpack_bits(s, packed, (int)a->bits), MLXB_F32);
  int64_t per_group = fc->k / groups;
  q = reshape_n(s, q, 4, b, fc->n, groups, per_group);
  int last = -1;
  mlxb_array *w = op_util_mul(s, mlxb_expand_dims(s, scales, &last, 1), op_util_sub(s, q, mlxb_expand_dims(s, zp, &last, 1)));
  w = reshape_n(s, w, 3, b, fc->n, fc->k, 0);
  return mlxb_matmul(s, x, mlxb_transpose(s, w, (int[]){0, 2, 1}, 3));
}

/* y [B, M, n] = x [B or 1, M, k] @ W[idx]^T + b[idx], in float32. */
static mlxb_array *fc_apply(op_ctx *c, const moe_attrs *a, const moe_fc *fc, mlxb_array *x, mlxb_array *idx) {
  mlxb_scope *s = op_scope(c);
  if (fc->int8_act) x = op_util_quantize_blocks(s, x, a->block);
  mlxb_array *y;
  if (a->quantized) {
    y = fc_quantized(c, a, fc, x, idx);
  } else {
    mlxb_array *w = expert_input(c, fc->w, idx, MLXB_F32);
    y = mlxb_matmul(s, x, mlxb_transpose(s, w, (int[]){0, 2, 1}, 3));
  }
  if (y && op_has_input(c, fc->bias)) {
    mlxb_array *bias = expert_input(c, fc->bias, idx, MLXB_F32);
    y = op_util_add(s, y, bias ? reshape_n(s, bias, 3, mlxb_dim(bias, 0), 1, fc->n, 0) : NULL);
  }
  return y;
}

/* ORT's activations in float32: relu, tanh-approximated gelu, silu, identity, and interleaved
 * SwiGLU (gate = even, linear = odd columns): min(g, limit) * sigmoid(alpha * g) *
 * (clip(l, -limit, limit) + beta). */
static mlxb_array *activate(mlxb_scope *s, const moe_attrs *a, mlxb_array *h) {
  switch (a->act) {
    case ACT_RELU: return mlxb_binary(s, MLXB_MAXIMUM, h, num(s, 0.0));
    case ACT_IDENTITY: return h;
    case ACT_SILU: return op_util_mul(s, h, mlxb_unary(s, MLXB_SIGMOID, h));
    case ACT_GELU: {
      mlxb_array *cube = op_util_mul(s, op_util_mul(s, op_util_mul(s, num(s, 0.044715f), h), h), h);
      mlxb_array *th = mlxb_unary(s, MLXB_TANH, op_util_mul(s, num(s, 0.7978845608f), op_util_add(s, h, cube)));
      return op_util_mul(s, op_util_mul(s, num(s, 0.5), h), op_util_add(s, num(s, 1.0), th));
    }
    case ACT_SWIGLU: {
      int64_t dims[OP_UTIL_MAX_RANK + 1];
      int rank = mlxb_ndim(h);
      if (rank < 1 || rank >= OP_UTIL_MAX_RANK) return NULL;
      mlxb_shape(h, dims);
      int64_t inter = dims[rank - 1] / 2;
      dims[rank - 1] = inter;
      dims[rank] = 2;
      mlxb_array *pairs[2];
      int64_t at = 1;
      if (mlxb_split(s, mlxb_reshape(s, h, dims, rank + 1), &at, 1, rank, pairs)) return NULL;
      mlxb_array *gate = mlxb_reshape(s, pairs[0], dims, rank), *lin = mlxb_reshape(s, pairs[1], dims, rank);
      if (isfinite(a->limit)) {
        mlxb_array *hi = num(s, a->limit), *lo = num(s, -a->limit);
        gate = mlxb_binary(s, MLXB_MINIMUM, gate, hi);
        lin = mlxb_clip(s, lin, lo, hi);
      }
      mlxb_array *sig = mlxb_unary(s, MLXB_SIGMOID, op_util_mul(s, num(s, a->alpha), gate));
      return op_util_mul(s, op_util_mul(s, gate, sig), op_util_add(s, lin, num(s, a->beta)));
    }
    default: return NULL;
  }
}

/* ---- lowering ----------------------------------------------------------------------------- */

/* Every expert on every token: [E, T, H] outputs weighted by a dense [T, E] routing matrix. */
static mlxb_array *experts_dense(op_ctx *c, const moe_attrs *a, const moe_fc *fc1, const moe_fc *fc2, mlxb_array *x,
                                 const moe_route *r, int64_t e, int64_t t) {
  mlxb_scope *s = op_scope(c);
  int zero = 0;
  mlxb_array *h = fc_apply(c, a, fc1, mlxb_expand_dims(s, x, &zero, 1), NULL);
  mlxb_array *y = fc_apply(c, a, fc2, activate(s, a, h), NULL);
  int64_t te[2] = {t, e};
  mlxb_array *w = mlxb_put_along_axis(s, mlxb_zeros(s, te, 2, MLXB_F32), r->experts, r->weights, 1);
  mlxb_array *keep = mlxb_put_along_axis(s, mlxb_zeros(s, te, 2, MLXB_BOOL), r->experts, r->keep, 1);
  int perm[2] = {1, 0};
  w = reshape_n(s, mlxb_transpose(s, w, perm, 2), 3, e, t, 1, 0);
  keep = reshape_n(s, mlxb_transpose(s, keep, perm, 2), 3, e, t, 1, 0);
  mlxb_array *contrib = mlxb_where(s, keep, op_util_mul(s, w, y), num(s, 0.0));
  return mlxb_reduce(s, MLXB_RSUM, contrib, &zero, 1, false);
}

/* Only the routed experts: each of the T * k routes gathers its expert's weights. */
static mlxb_array *experts_gathered(op_ctx *c, const moe_attrs *a, const moe_fc *fc1, const moe_fc *fc2,
                                    mlxb_array *x, const moe_route *r, int64_t t, int64_t h) {
  mlxb_scope *s = op_scope(c);
  int64_t routes = t * a->k, flat = routes;
  mlxb_array *idx = mlxb_reshape(s, r->experts, &flat, 1);
  int64_t tkh[3] = {t, a->k, h};
  mlxb_array *xr = reshape_n(s, mlxb_broadcast_to(s, reshape_n(s, x, 3, t, 1, h, 0), tkh, 3), 3, routes, 1, h, 0);
  mlxb_array *hid = fc_apply(c, a, fc1, xr, idx);
  mlxb_array *y = reshape_n(s, fc_apply(c, a, fc2, activate(s, a, hid), idx), 3, t, a->k, h, 0);
  int last = -1, axis = 1;
  mlxb_array *w = mlxb_expand_dims(s, r->weights, &last, 1), *keep = mlxb_expand_dims(s, r->keep, &last, 1);
  mlxb_array *contrib = mlxb_where(s, keep, op_util_mul(s, w, y), num(s, 0.0));
  return mlxb_reduce(s, MLXB_RSUM, contrib, &axis, 1, false);
}

static int lower_moe_common(op_ctx *c, bool quantized) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  moe_attrs a = read_attrs(n, quantized);
  mlxb_array *x = op_input(c, IN_X), *router = op_input(c, IN_ROUTER);
  int fc2_w = quantized ? Q_FC2_W : MOE_FC2_W;
  mlxb_array *w2 = op_input(c, fc2_w);
  if (!w2) return op_fail(c, "fc2 expert weights are required");
  int rank = mlxb_ndim(x);
  if (rank != 2 && rank != 3) return op_fail(c, "input rank %d (2 or 3 expected)", rank);
  int64_t xdims[3], pack = quantized ? 8 / a.bits : 1;
  mlxb_shape(x, xdims);
  int64_t e = mlxb_dim(w2, 0), h = mlxb_dim(w2, 1), inter = mlxb_dim(w2, 2) * pack;
  int64_t t = (int64_t)mlxb_size(x) / (h > 0 ? h : 1);
  if (xdims[rank - 1] != h) return op_fail(c, "input's last dim %lld != hidden size %lld", (long long)xdims[rank - 1], (long long)h);
  if (mlxb_ndim(router) != 2 || mlxb_dim(router, 0) != t || mlxb_dim(router, 1) != e)
    return op_fail(c, "router_probs must be [%lld, %lld]", (long long)t, (long long)e);
  mlxb_dtype out_t = mlxb_type(x);
  if (t == 0) return op_set_output(c, 0, mlxb_zeros(s, xdims, rank, out_t));

  moe_fc fc1, fc2;
  describe_fcs(&a, h, inter, &fc1, &fc2);
  fc1.int8_act = fc_int8_activations(op_graph(c), n, &a, &fc1);
  fc2.int8_act = fc_int8_activations(op_graph(c), n, &a, &fc2);

  mlxb_array *xf = reshape_n(s, cast_to(s, x, MLXB_F32), 2, t, h, 0, 0);
  mlxb_array *logits = cast_to(s, router, MLXB_F32);
  moe_route r;
  if (quantized) {
    mlxb_array *rw = op_has_input(c, Q_ROUTER_W) ? cast_to(s, op_input(c, Q_ROUTER_W), MLXB_F32) : NULL;
    if (rw && (mlxb_ndim(rw) != 2 || mlxb_dim(rw, 0) != t || mlxb_dim(rw, 1) != e))
      return op_fail(c, "router_weights must be [%lld, %lld]", (long long)t, (long long)e);
    r = route_qmoe(s, &a, logits, rw, e);
  } else {
    r = route_moe(s, &a, logits, e);
  }
  if (op_check(c)) return -1;
  /* Gathering loads t * k experts' weights, the dense form e; take the fewer. */
  mlxb_array *y = t * a.k < e ? experts_gathered(c, &a, &fc1, &fc2, xf, &r, t, h)
                              : experts_dense(c, &a, &fc1, &fc2, xf, &r, e, t);
  return op_set_output(c, 0, cast_to(s, y ? mlxb_reshape(s, y, xdims, rank) : NULL, out_t));
}

static int lower_moe(op_ctx *c, const op_def *def) { return lower_moe_common(c, false); }
static int lower_qmoe(op_ctx *c, const op_def *def) { return lower_moe_common(c, true); }

/* ---- the table ---------------------------------------------------------------------------- */

static const op_def defs[] = {
    OP_ROW("com.microsoft", "MoE", 1, 1, .inputs = {3, 8}, .outputs = {1, 1}, .dtypes = DT_F32 | DT_F16,
           .claim = claim_moe, .lower = lower_moe,
           .doc = "float32/float16 input [T, H] or [B, S, H], router_probs [T, E], fc1 [E, I, H] (SwiGLU: [E, 2I, "
                  "H]), fc2 [E, H, I], optional biases; k >= 1, activation relu/gelu (tanh "
                  "form)/silu/identity/swiglu (interleaved, swiglu_fusion=1, activation_alpha/beta, swiglu_limit), "
                  "normalize_routing_weights, use_sparse_mixer (k=2; ORT's CPU kernel routes as without it). As "
                  "ORT's CPU kernel: softmax over all experts, top-k with ties to the higher expert index, experts "
                  "in float32 (float16 widened, output rounded once), zero-weight routes skipped. Experts run "
                  "densely, or gathered per route when T*k < E. Declined: fc3 inputs (ORT: not implemented), other "
                  "swiglu_fusion values (ORT rejects them), float16 with normalize_routing_weights=0 (ORT's CPU "
                  "kernel returns inconsistent values), legacy [E, H, I] weight layouts, non-static weight shapes, k "
                  "> E, bfloat16 (no ORT CPU kernel)."),
    OP_ROW("com.microsoft", "QMoE", 1, 1, .inputs = {3, 21}, .outputs = {1, 1}, .dtypes = DT_F32 | DT_F16,
           .claim = claim_qmoe, .lower = lower_qmoe,
           .doc = "quant_type int: float32/float16 input, uint8 packed experts with expert_weight_bits 4/8 (row-wise "
                  "or block_size a power of two >= 16 dividing H and I) or 2 (row-wise), scales of the input dtype "
                  "([E, N] or [E, N, K/block]), optional packed uint8 zero points (default 2^(bits-1)), biases, "
                  "router_weights (selection by router_probs, mixing by router_weights), same activations as MoE. As "
                  "ORT's CPU kernel: top-k of the raw logits (ties to the higher index), softmax over the k chosen "
                  "(so always normalized without router_weights), routes with weight <= 1e-8 skipped, dequantized "
                  "scale * (q - zp) in float32; block-wise 8-bit experts (and 4-bit with accuracy_level 4) whose "
                  "weights/scales/zero points are constant initializers take ORT's MLAS int8 path, reproduced by "
                  "quantizing FC1's and FC2's activations to int8 per block (x86/NEON MLAS; an FC1 output within an "
                  "ulp of a rounding tie can round the other way, a rare one-step difference in that activation). "
                  "Weights go through MLX's quantized matmul (group 32-128) or are dequantized (block 16) on every "
                  "run. Declined: quant_type fp4/nvfp4/fp8/wfp4afp8, block-wise 2-bit (ORT's LUT GEMM is "
                  "CPU-dependent), mixed fc*_expert_weight_bits and fc3 inputs (ORT: not implemented), "
                  "weights_prepacked=1, zero points with one block per row (ORT reads them row-wise), other "
                  "swiglu_fusion values, legacy layouts, sizes not multiples of block_size, bfloat16. Assumes "
                  "ORT_QMOE_CPU_QNBIT_GEMM and ORT_USE_MLAS_Q4_GEMM_MOE are unset."),
};

OPS_FAMILY(moe, defs);
