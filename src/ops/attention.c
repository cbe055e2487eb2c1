/* Attention operators: ai.onnx Attention (opsets 23-24) and the com.microsoft MultiHeadAttention,
 * GroupQueryAttention and Attention (fused QKV projection) contrib ops. Every op reshapes its
 * inputs to [batch, heads, sequence, head_size], builds its masks the way ORT's CPU kernel does,
 * and runs one shared core: scores in float32, softcap, additive bias, masking, softmax in
 * float32, then the weighted sum of V. Plain float32 self-attention goes through MLX's fused
 * scaled_dot_product_attention, whose semantics match there. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/op_util.h"
#include "ops/rotary.h"

#define ATTN_F32_LOWEST (-3.4028234663852886e38)
#define ATTN_F16_LOWEST (-65504.0)

/* ---- small helpers ------------------------------------------------------------------------ */

static bool attn_is_half(mlxb_dtype t) { return t == MLXB_F16 || t == MLXB_BF16; }

/* The most negative finite value of t: what ORT writes into masked score positions. */
static double attn_lowest(mlxb_dtype t) { return t == MLXB_F32 ? ATTN_F32_LOWEST : ATTN_F16_LOWEST; }

/* Rounds float32 values to t and back, where ORT stores an intermediate in the input dtype. */
static mlxb_array *attn_round(mlxb_scope *s, mlxb_array *x, mlxb_dtype t) {
  if (!x || !attn_is_half(t)) return x;
  return mlxb_astype(s, mlxb_astype(s, x, t), MLXB_F32);
}

static mlxb_array *attn_f32(mlxb_scope *s, double v) { return mlxb_scalar_f64(s, v, MLXB_F32); }

/* ORT reads its on/off attributes as `value == 1` (some schemas default them to -1). */
static bool attn_flag(const ir_node *n, const char *name, int64_t dflt) { return ir_attr_int(n, name, dflt) == 1; }

static mlxb_array *attn_reshape4(mlxb_scope *s, mlxb_array *x, int64_t a, int64_t b, int64_t c, int64_t d) {
  int64_t dims[4] = {a, b, c, d};
  return mlxb_reshape(s, x, dims, 4);
}

static mlxb_array *attn_transpose0213(mlxb_scope *s, mlxb_array *x) {
  static const int perm[4] = {0, 2, 1, 3};
  return mlxb_transpose(s, x, perm, 4);
}

/* [B, S, N*H] -> [B, N, S, H]; one reshape when S is 1 (a decode step: one operation fewer per
 * tensor in a graph whose cost is its operation count). */
static mlxb_array *attn_to_bnsh(mlxb_scope *s, mlxb_array *x, int64_t heads) {
  if (!x) return NULL;
  int64_t b = mlxb_dim(x, 0), seq = mlxb_dim(x, 1), hidden = mlxb_dim(x, 2);
  if (seq == 1) return attn_reshape4(s, x, b, heads, 1, hidden / heads);
  return attn_transpose0213(s, attn_reshape4(s, x, b, seq, heads, hidden / heads));
}

/* [B, N, S, H] -> [B, S, N*H] */
static mlxb_array *attn_from_bnsh(mlxb_scope *s, mlxb_array *x) {
  if (!x) return NULL;
  int64_t dims[3] = {mlxb_dim(x, 0), mlxb_dim(x, 2), mlxb_dim(x, 1) * mlxb_dim(x, 3)};
  if (dims[1] == 1) return mlxb_reshape(s, x, dims, 3);
  return mlxb_reshape(s, attn_transpose0213(s, x), dims, 3);
}

/* Slice [start, stop) of one axis. */
static mlxb_array *attn_slice_axis(mlxb_scope *s, mlxb_array *x, int axis, int64_t start, int64_t stop) {
  return op_util_slice_axis(s, x, axis, start, stop, 1);
}

static mlxb_array *attn_concat2(mlxb_scope *s, mlxb_array *a, mlxb_array *b, int axis) {
  const mlxb_array *parts[2] = {a, b};
  if (!a || !b) return NULL;
  return mlxb_concat(s, parts, 2, axis);
}

/* x cut, or padded with `fill`, to n entries on one axis (ORT's caches and masks have fixed
 * lengths the inputs may not match). */
static mlxb_array *attn_fit_axis(mlxb_scope *s, mlxb_array *x, int axis, int64_t n, mlxb_array *fill) {
  if (!x) return NULL;
  if (axis < 0 || axis >= OP_UTIL_MAX_RANK) { /* hi[axis] below: a mask of unchecked rank reaches here */
    mlxb_set_error(s, "attention: a mask or bias of rank above the EP's limit");
    return NULL;
  }
  int64_t have = mlxb_dim(x, axis);
  if (have >= n) return have == n ? x : attn_slice_axis(s, x, axis, 0, n);
  int64_t lo[OP_UTIL_MAX_RANK] = {0}, hi[OP_UTIL_MAX_RANK] = {0};
  hi[axis] = n - have;
  return mlxb_pad(s, x, lo, hi, fill, "constant");
}

/* Prepends past_key/past_value [B, N, P, H] to k and v on the sequence axis; returns P (0
 * without a past). */
static int64_t attn_append_past(mlxb_scope *s, mlxb_array *pk, mlxb_array *pv, mlxb_array **k, mlxb_array **v) {
  if (!pk || !pv) return 0;
  *k = attn_concat2(s, pk, *k, 2);
  *v = attn_concat2(s, pv, *v, 2);
  return mlxb_dim(pk, 2);
}

/* The contrib ops' scale attribute; 0 (the default) means 1 / sqrt(head_size). */
static float attn_contrib_scale(const ir_node *n, int64_t head_size) {
  float scale = ir_attr_float(n, "scale", 0.0f);
  return scale != 0.0f ? scale : (float)(1.0 / sqrt((double)head_size));
}

/* Output 0, the optional present key/value outputs 1 and 2, and the optional qk output 3 when
 * qk is given. 0 or -1. */
static int attn_set_outputs(op_ctx *c, mlxb_array *y, mlxb_array *present_k, mlxb_array *present_v, mlxb_array *qk) {
  if (op_set_output(c, 0, y)) return -1;
  if (op_util_set_optional(c, 1, present_k) || op_util_set_optional(c, 2, present_v)) return -1;
  if (qk && op_util_set_optional(c, 3, qk)) return -1;
  return op_check(c);
}

/* keep[.., s, t] = t <= s + offset, with offset a scalar or a [B] int array (-> [B, 1, S, T]). */
static mlxb_array *attn_causal_keep(mlxb_scope *s, int64_t seq, int64_t total, int64_t offset, mlxb_array *offsets) {
  mlxb_array *t = op_util_iota(s, 0, total, 1, 2, MLXB_I64);
  mlxb_array *q = op_util_iota(s, offset, seq, 0, 2, MLXB_I64);
  if (!offsets) return mlxb_binary(s, MLXB_LESS_EQUAL, t, q);
  mlxb_array *off = attn_reshape4(s, op_util_cast(s, offsets, MLXB_I64), mlxb_dim(offsets, 0), 1, 1, 1);
  return mlxb_binary(s, MLXB_LESS_EQUAL, t, mlxb_binary(s, MLXB_ADD, q, off));
}

/* keep[b, 1, 1, t] = t < lengths[b] */
static mlxb_array *attn_length_keep(mlxb_scope *s, mlxb_array *lengths, int64_t total) {
  mlxb_array *t = op_util_iota(s, 0, total, 3, 4, MLXB_I64);
  mlxb_array *len = attn_reshape4(s, op_util_cast(s, lengths, MLXB_I64), mlxb_dim(lengths, 0), 1, 1, 1);
  return mlxb_binary(s, MLXB_LESS, t, len);
}

/* ---- the shared core ---------------------------------------------------------------------- */

enum { ATTN_QK_RAW, ATTN_QK_SOFTCAP, ATTN_QK_MASKED, ATTN_QK_SOFTMAX, ATTN_QK_COUNT };

typedef struct attn_args {
  mlxb_array *q, *k, *v;  /* [B, Hq, S, Dk], [B, Hkv, T, Dk], [B, Hkv, T, Dv]; one float dtype */
  float scale;
  float softcap;          /* > 0: cap * tanh(score / cap) before the bias */
  mlxb_array *bias;       /* float32, broadcastable to [B, Hq, S, T], added after softcap; NULL */
  mlxb_array *keep;       /* bool, broadcastable; false positions become `fill` after the bias; NULL */
  double fill;
  mlxb_array *sink;       /* float32 [Hq]: smooth-softmax sink logit per head; NULL */
  bool smooth;            /* smooth softmax (sink logit 0 unless `sink`) */
  bool round_half;        /* round scores and probabilities to the input dtype where ORT stores them */
  bool zero_masked_rows;  /* rows whose largest score is <= lowest(dtype) give zero probabilities */
  unsigned want_qk;       /* bit ATTN_QK_*: snapshots wanted in qk[] (in the input dtype) */
  mlxb_array *qk[ATTN_QK_COUNT];
} attn_args;

/* MLX's fused kernel computes softmax((q * scale) k^T + mask) v in float32, which is ORT's
 * float32 result up to rounding; it has no softcap, sinks of this kind, snapshots or the zeroed
 * rows, so only the plain form goes there (a keep mask joins the additive mask). */
static bool attn_can_fuse(const attn_args *a) {
  return mlxb_type(a->q) == MLXB_F32 && a->softcap <= 0 && !a->sink && !a->smooth && !a->want_qk &&
         !a->zero_masked_rows;
}

static mlxb_array *attn_fused(mlxb_scope *s, const attn_args *a) {
  mlxb_array *mask = a->bias;
  if (a->keep) mask = mlxb_where(s, a->keep, mask ? mask : attn_f32(s, 0.0), attn_f32(s, a->fill));
  return mlxb_sdpa(s, a->q, a->k, a->v, a->scale, "", mask, NULL);
}

/* Softmax over the last axis with an extra sink logit per head (ORT's smooth softmax):
 * exp(x - m) / (sum exp(x - m) + exp(sink - m)), m = max(max x, sink). */
static mlxb_array *attn_smooth_softmax(mlxb_scope *s, mlxb_array *x, mlxb_array *sink) {
  int last = -1;
  mlxb_array *sk = sink ? attn_reshape4(s, sink, 1, mlxb_dim(sink, 0), 1, 1) : attn_f32(s, 0.0);
  mlxb_array *m = mlxb_binary(s, MLXB_MAXIMUM, mlxb_reduce(s, MLXB_RMAX, x, &last, 1, true), sk);
  mlxb_array *e = mlxb_unary(s, MLXB_EXP, mlxb_binary(s, MLXB_SUB, x, m));
  mlxb_array *sum = mlxb_binary(s, MLXB_ADD, mlxb_reduce(s, MLXB_RSUM, e, &last, 1, true),
                                mlxb_unary(s, MLXB_EXP, mlxb_binary(s, MLXB_SUB, sk, m)));
  return mlxb_binary(s, MLXB_DIV, e, sum);
}

/* Returns [B, Hq, S, Dv] in the input dtype. */
static mlxb_array *attn_compute(mlxb_scope *s, attn_args *a) {
  if (!a->q || !a->k || !a->v) return NULL;
  mlxb_dtype t = mlxb_type(a->q);
  int64_t b = mlxb_dim(a->q, 0), hq = mlxb_dim(a->q, 1), sq = mlxb_dim(a->q, 2), dk = mlxb_dim(a->q, 3);
  int64_t hkv = mlxb_dim(a->k, 1), tk = mlxb_dim(a->k, 2), dv = mlxb_dim(a->v, 3);
  if (hkv <= 0 || hq % hkv) {
    mlxb_set_error(s, "attention: query heads are not a multiple of key/value heads");
    return NULL;
  }
  if (attn_can_fuse(a)) return attn_fused(s, a);

  int64_t g = hq / hkv;
  /* Query heads h use key/value head h / g (ORT and ONNX agree): split Hq into [Hkv, g]. */
  int64_t q5[5] = {b, hkv, g, sq, dk}, k5[5] = {b, hkv, 1, tk, dk}, v5[5] = {b, hkv, 1, tk, dv};
  mlxb_array *q = mlxb_reshape(s, op_util_cast(s, a->q, MLXB_F32), q5, 5);
  mlxb_array *k = mlxb_reshape(s, op_util_cast(s, a->k, MLXB_F32), k5, 5);
  mlxb_array *v = mlxb_reshape(s, op_util_cast(s, a->v, MLXB_F32), v5, 5);
  static const int kt[5] = {0, 1, 2, 4, 3};
  mlxb_array *x = mlxb_matmul(s, q, mlxb_transpose(s, k, kt, 5));
  x = attn_reshape4(s, x, b, hq, sq, tk);
  x = mlxb_binary(s, MLXB_MUL, x, attn_f32(s, a->scale));
  /* ORT folds the bias into the score GEMM (beta = 1, one rounding) unless a softcap or a
   * pre-bias snapshot needs the bare scores */
  unsigned pre_bias = (1u << ATTN_QK_RAW) | (1u << ATTN_QK_SOFTCAP);
  bool folded = a->bias && a->softcap <= 0 && !(a->want_qk & pre_bias);
  if (a->round_half && !folded) x = attn_round(s, x, t);
  if (a->want_qk & (1u << ATTN_QK_RAW)) a->qk[ATTN_QK_RAW] = op_util_cast(s, x, t);
  if (a->softcap > 0) {
    mlxb_array *cap = attn_f32(s, a->softcap);
    x = mlxb_binary(s, MLXB_MUL, mlxb_unary(s, MLXB_TANH, mlxb_binary(s, MLXB_DIV, x, cap)), cap);
    if (a->round_half) x = attn_round(s, x, t);
  }
  if (a->want_qk & (1u << ATTN_QK_SOFTCAP)) a->qk[ATTN_QK_SOFTCAP] = op_util_cast(s, x, t);
  if (a->bias) {
    x = mlxb_binary(s, MLXB_ADD, x, op_util_cast(s, a->bias, MLXB_F32));
    if (a->round_half) x = attn_round(s, x, t);
  }
  if (a->keep) x = mlxb_where(s, a->keep, x, attn_f32(s, a->fill));
  if (a->want_qk & (1u << ATTN_QK_MASKED)) a->qk[ATTN_QK_MASKED] = op_util_cast(s, x, t);

  int last = -1;
  mlxb_array *p = (a->smooth || a->sink) ? attn_smooth_softmax(s, x, a->sink) : mlxb_softmax(s, x, &last, 1, true);
  if (a->zero_masked_rows) {
    mlxb_array *rowmax = mlxb_reduce(s, MLXB_RMAX, x, &last, 1, true);
    mlxb_array *dead = mlxb_binary(s, MLXB_LESS_EQUAL, rowmax, attn_f32(s, attn_lowest(t)));
    p = mlxb_where(s, dead, attn_f32(s, 0.0), p);
  }
  if (a->round_half) p = attn_round(s, p, t);
  if (a->want_qk & (1u << ATTN_QK_SOFTMAX)) a->qk[ATTN_QK_SOFTMAX] = op_util_cast(s, p, t);

  int64_t p5[5] = {b, hkv, g, sq, tk};
  mlxb_array *y = mlxb_matmul(s, mlxb_reshape(s, p, p5, 5), v);
  return op_util_cast(s, attn_reshape4(s, y, b, hq, sq, dv), t);
}

/* ---- claim helpers ------------------------------------------------------------------------ */

/* Inputs listed in `same` (absent ones skipped) must share input 0's dtype, float32 or float16. */
static bool attn_claim_dtypes(claim_ctx *c, const int *same, int n) {
  int32_t t = claim_input_dtype(c, 0);
  if (t != ONNX_FLOAT && t != ONNX_FLOAT16)
    return claim_decline(c, "dtype %s (ORT's CPU EP implements float32 and float16 only)", ir_dtype_name(t));
  return op_util_claim_same_dtypes(c, same, n);
}

static bool attn_claim_rank(claim_ctx *c, int i, int lo, int hi, const char *what) {
  const ir_value *v = claim_input(c, i);
  if (v && v->rank >= 0 && (v->rank < lo || v->rank > hi))
    return claim_decline(c, "%s has rank %d (expected %d..%d)", what, v->rank, lo, hi);
  return true;
}

/* ---- ai.onnx Attention -------------------------------------------------------------------- */

static bool claim_onnx_attention(claim_ctx *c, const op_def *def) {
  static const int same[] = {1, 2, 4, 5};
  if (!attn_claim_dtypes(c, same, 4)) return false;
  const ir_value *q = claim_input(c, 0), *m = claim_input(c, 3);
  if (!attn_claim_rank(c, 0, 3, 4, "Q") || !attn_claim_rank(c, 3, 2, 4, "attn_mask")) return false;
  if (m && m->dtype != ONNX_BOOL && m->dtype != q->dtype) return claim_decline(c, "attn_mask dtype differs from Q's");
  if ((claim_input(c, 4) == NULL) != (claim_input(c, 5) == NULL))
    return claim_decline(c, "past_key and past_value must come together");
  if (claim_input(c, 6) && claim_input(c, 4)) return claim_decline(c, "nonpad_kv_seqlen with past_key (ORT rejects it)");
  if (claim_input(c, 6) && claim_input_dtype(c, 6) != ONNX_INT64)
    return claim_decline(c, "nonpad_kv_seqlen is not int64");
  if (q->rank == 3 && (ir_attr_int(c->node, "q_num_heads", 0) <= 0 || ir_attr_int(c->node, "kv_num_heads", 0) <= 0))
    return claim_decline(c, "3-D inputs without q_num_heads/kv_num_heads");
  int64_t mode = ir_attr_int(c->node, "qk_matmul_output_mode", 0);
  if (mode < 0 || mode > 3) return claim_decline(c, "qk_matmul_output_mode %lld", (long long)mode);
  float scale = ir_attr_float(c->node, "scale", 1.0f);
  if (ir_node_attr(c->node, "scale") && !(scale > 0)) return claim_decline(c, "scale must be > 0 (ORT rejects it)");
  return true;
}

/* The additive mask ORT builds: a bool mask becomes 0 / lowest(T), then causal positions are
 * overwritten with lowest(T). Returns NULL (no error) when there is nothing to add. */
static mlxb_array *onnx_attention_mask(op_ctx *c, mlxb_dtype t, int64_t sq, int64_t total, mlxb_array *causal_keep) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *low = attn_f32(s, attn_lowest(t));
  mlxb_array *m = op_input(c, 3);
  if (m && mlxb_type(m) == MLXB_BOOL) m = mlxb_where(s, m, attn_f32(s, 0.0), low);
  else m = op_util_cast(s, m, MLXB_F32);
  /* The spec pads a short mask with masked (-inf / false) columns; ORT's CPU EP rejects such a
   * mask, so this only widens what runs (a longer mask is rejected by the caller). */
  if (m && mlxb_dim(m, -1) < total) m = attn_fit_axis(s, m, mlxb_ndim(m) - 1, total, low);
  if (causal_keep) m = mlxb_where(s, causal_keep, m ? m : attn_f32(s, 0.0), low);
  return m;
}

static int lower_onnx_attention(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  mlxb_array *q = op_input(c, 0), *k = op_input(c, 1), *v = op_input(c, 2);
  mlxb_array *pk = op_input(c, 4), *pv = op_input(c, 5), *mask = op_input(c, 3), *nonpad = op_input(c, 6);
  int rank = mlxb_ndim(q);
  if (rank != mlxb_ndim(k) || rank != mlxb_ndim(v) || (rank != 3 && rank != 4))
    return op_fail(c, "Q, K and V must all be 3-D or all 4-D");
  mlxb_dtype t = mlxb_type(q);
  if (rank == 3) {
    int64_t hq = ir_attr_int(n, "q_num_heads", 0), hkv = ir_attr_int(n, "kv_num_heads", 0);
    /* the claim saw no rank when Q came without a declared shape */
    if (hq <= 0 || hkv <= 0)
      return op_fail(c, "3-D inputs need positive q_num_heads and kv_num_heads (%lld, %lld)", (long long)hq,
                     (long long)hkv);
    if (mlxb_dim(q, 2) % hq || mlxb_dim(k, 2) % hkv || mlxb_dim(v, 2) % hkv)
      return op_fail(c, "hidden sizes are not multiples of the head counts");
    q = attn_to_bnsh(s, q, hq);
    k = attn_to_bnsh(s, k, hkv);
    v = attn_to_bnsh(s, v, hkv);
  }
  int64_t b = mlxb_dim(q, 0), sq = mlxb_dim(q, 2), dk = mlxb_dim(q, 3);
  if (mlxb_dim(k, 3) != dk || mlxb_dim(k, 2) != mlxb_dim(v, 2) || mlxb_dim(k, 1) != mlxb_dim(v, 1))
    return op_fail(c, "inconsistent K/V shapes");
  if (pk && pv && (mlxb_ndim(pk) != 4 || mlxb_ndim(pv) != 4 || mlxb_dim(pk, 2) != mlxb_dim(pv, 2)))
    return op_fail(c, "past_key/past_value must be 4-D with one sequence length");
  int64_t past = attn_append_past(s, pk, pv, &k, &v);
  int64_t total = mlxb_dim(k, 2);
  if (mask && (mlxb_dim(mask, -1) > total || mlxb_dim(mask, -2) != sq))
    return op_fail(c, "attn_mask must end in [q_sequence_length, <= total_sequence_length]");
  if (nonpad && (mlxb_ndim(nonpad) != 1 || mlxb_dim(nonpad, 0) != b))
    return op_fail(c, "nonpad_kv_seqlen must be [batch]");

  /* ORT skips the causal mask for a single query after a past (decode); with nonpad_kv_seqlen
   * the causal frontier is per batch: key t is visible to query s when t <= s + len - S. */
  mlxb_array *causal = NULL;
  if (attn_flag(n, "is_causal", 0) && !(sq == 1 && past > 0)) {
    if (nonpad) {
      mlxb_array *off = mlxb_binary(s, MLXB_SUB, op_util_cast(s, nonpad, MLXB_I64), mlxb_scalar_i64(s, sq, MLXB_I64));
      causal = attn_causal_keep(s, sq, total, 0, off);
    } else {
      causal = attn_causal_keep(s, sq, total, past, NULL);
    }
  }
  int64_t mode = ir_attr_int(n, "qk_matmul_output_mode", 0);
  bool want_qk = op_has_output(c, 3);
  attn_args a = {.q = q, .k = k, .v = v};
  a.scale = ir_node_attr(n, "scale") ? ir_attr_float(n, "scale", 1.0f) : (float)(1.0 / sqrt((double)dk));
  a.softcap = ir_attr_float(n, "softcap", 0.0f);
  a.bias = onnx_attention_mask(c, t, sq, total, causal);
  if (nonpad) {
    a.keep = attn_length_keep(s, nonpad, total);
    a.fill = attn_lowest(t);
  }
  a.round_half = true;
  /* a causal mask alone never hides a whole row (key 0 is always visible) */
  a.zero_masked_rows = mask || nonpad;
  a.want_qk = want_qk ? 1u << mode : 0;
  mlxb_array *y = attn_compute(s, &a);
  if (rank == 3) y = attn_from_bnsh(s, y);
  return attn_set_outputs(c, y, k, v, a.qk[mode]);
}

/* ---- com.microsoft contrib attention: shared mask -------------------------------------------- */

/* keep[s, t] of ORT's unidirectional mask (AttentionCPUBase::PrepareMask): query s < S - 1 sees
 * keys t <= past + s; the last query sees every key, even when the key count exceeds S. */
static mlxb_array *contrib_causal_keep(mlxb_scope *s, int64_t sq, int64_t total, int64_t past) {
  mlxb_array *keep = attn_causal_keep(s, sq, total, past, NULL);
  mlxb_array *row = op_util_iota(s, 0, sq, 0, 2, MLXB_I64);
  mlxb_array *last = mlxb_binary(s, MLXB_EQUAL, row, mlxb_scalar_i64(s, sq - 1, MLXB_I64));
  return mlxb_binary(s, MLXB_LOGICAL_OR, keep, last);
}

/* The additive [B, 1, S, T] (or broadcastable) mask of ORT's contrib CPU kernels: an int32
 * mask_index as key end positions [B] (or end and start positions [2B]), a raw [B, T] mask or a
 * [B, S, T] mask gives 0 where a key is visible and mask_filter_value where not; the
 * unidirectional mask (S > 1 only) then overwrites future keys with float32's lowest (-inf in a
 * float16 qk output); attention_bias is added. *out is NULL when there is nothing to add.
 * Returns 0 or -1 (failure recorded). */
static int contrib_bias(op_ctx *c, mlxb_array *mask, mlxb_array *attn_bias, int64_t b, int64_t sq, int64_t total,
                        int64_t past, bool unidirectional, mlxb_array **out) {
  mlxb_scope *s = op_scope(c);
  *out = NULL;
  float mfv = ir_attr_float(op_node(c), "mask_filter_value", -10000.0f);
  mlxb_array *zero = attn_f32(s, 0.0), *filt = attn_f32(s, mfv), *m = NULL;
  if (mask) {
    int rank = mlxb_ndim(mask);
    if (rank == 1) {
      /* [B] end positions, or [2B] end then start positions (keys before start are hidden) */
      if (mlxb_dim(mask, 0) != b && mlxb_dim(mask, 0) != 2 * b)
        return op_fail(c, "mask_index must be [batch] or [2 * batch]");
      /* ORT refuses negative end positions; ends past T show every key (as ORT). */
      mlxb_array *ends = attn_slice_axis(s, mask, 0, 0, b);
      mlxb_array *nonneg = mlxb_binary(s, MLXB_GREATER_EQUAL, ends, mlxb_scalar_i64(s, 0, mlxb_type(ends)));
      if (op_require(c, nonneg, ends, "mask_index value {} is negative; end positions must be non-negative")) return -1;
      mlxb_array *keep = attn_length_keep(s, ends, total);
      if (mlxb_dim(mask, 0) == 2 * b) {
        mlxb_array *t_idx = op_util_iota(s, 0, total, 3, 4, MLXB_I64);
        mlxb_array *start = op_util_cast(s, attn_slice_axis(s, mask, 0, b, 2 * b), MLXB_I64);
        start = attn_reshape4(s, start, b, 1, 1, 1);
        keep = mlxb_binary(s, MLXB_LOGICAL_AND, keep, mlxb_binary(s, MLXB_GREATER_EQUAL, t_idx, start));
      }
      m = mlxb_where(s, keep, zero, filt);
    } else if (rank == 2 || rank == 3) {
      if (mlxb_dim(mask, 0) != b || mlxb_dim(mask, -1) != total || (rank == 3 && mlxb_dim(mask, 1) != sq))
        return op_fail(c, "mask must be [batch, total_sequence_length] or [batch, sequence, total_sequence_length]");
      mlxb_array *vis = mlxb_binary(s, MLXB_GREATER, mask, mlxb_scalar_i64(s, 0, mlxb_type(mask)));
      int axis = 1;
      m = mlxb_expand_dims(s, mlxb_where(s, vis, zero, filt), &axis, 1);
      if (rank == 2) m = mlxb_expand_dims(s, m, &axis, 1);
    } else {
      return op_fail(c, "mask of rank %d is not supported by ORT's CPU kernel", rank);
    }
  }
  if (unidirectional && sq > 1)
    m = mlxb_where(s, contrib_causal_keep(s, sq, total, past), m ? m : zero, attn_f32(s, ATTN_F32_LOWEST));
  if (attn_bias) {
    if (mlxb_ndim(attn_bias) != 4 || mlxb_dim(attn_bias, 2) != sq || mlxb_dim(attn_bias, 3) != total)
      return op_fail(c, "attention_bias must be [B or 1, N or 1, S, total_sequence_length]");
    mlxb_array *ab = op_util_cast(s, attn_bias, MLXB_F32);
    m = m ? mlxb_binary(s, MLXB_ADD, ab, m) : ab;
  }
  *out = m;
  return op_check(c);
}

/* ---- com.microsoft MultiHeadAttention ----------------------------------------------------- */

static bool claim_mha(claim_ctx *c, const op_def *def) {
  static const int same[] = {1, 2, 3, 5, 6, 7};
  if (!attn_claim_dtypes(c, same, 6)) return false;
  const ir_value *q = claim_input(c, 0), *k = claim_input(c, 1), *v = claim_input(c, 2);
  if (!k || !v) return claim_decline(c, "packed QKV/KV forms (key or value absent): ORT's CPU kernel rejects them");
  if (q->rank >= 0 && q->rank != 3)
    return claim_decline(c, "query of rank %d (packed QKV is not implemented on ORT CPU)", q->rank);
  if (k->rank >= 0 && k->rank != 3 && k->rank != 4)
    return claim_decline(c, "key of rank %d (packed KV is not implemented on ORT CPU)", k->rank);
  if (k->rank >= 0 && v->rank >= 0 && k->rank != v->rank) return claim_decline(c, "key and value ranks differ");
  if (claim_input(c, 4) && claim_input_dtype(c, 4) != ONNX_INT32)
    return claim_decline(c, "key_padding_mask is not int32");
  if (!attn_claim_rank(c, 4, 1, 3, "key_padding_mask") || !attn_claim_rank(c, 5, 4, 4, "attention_bias")) return false;
  if ((claim_input(c, 6) == NULL) != (claim_input(c, 7) == NULL))
    return claim_decline(c, "past_key and past_value must come together");
  if (claim_input(c, 6) && k->rank == 4) return claim_decline(c, "past_key with BNSH key/value (ORT rejects it)");
  if (claim_input(c, 8) || claim_input(c, 9))
    return claim_decline(c, "past_sequence_length/cache_indirection (shared-buffer decoding) are not supported");
  if (ir_attr_int(c->node, "num_heads", 0) <= 0) return claim_decline(c, "num_heads must be > 0");
  return true;
}

static int lower_mha(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  int64_t heads = ir_attr_int(n, "num_heads", 0);
  mlxb_array *q = op_input(c, 0), *k = op_input(c, 1), *v = op_input(c, 2), *bias = op_input(c, 3);
  mlxb_array *pk = op_input(c, 6), *pv = op_input(c, 7);
  if (!k || !v) return op_fail(c, "key and value are required");
  if (mlxb_ndim(q) != 3) return op_fail(c, "query must be 3-D");
  int64_t b = mlxb_dim(q, 0), sq = mlxb_dim(q, 1), d = mlxb_dim(q, 2);
  if (d % heads) return op_fail(c, "hidden size %lld is not a multiple of num_heads", (long long)d);
  bool bnsh_kv = mlxb_ndim(k) == 4;
  if (bias) {
    /* bias = [q | k | v]; with BNSH key/value only the query part is used, as on ORT */
    int64_t dv = bnsh_kv ? 0 : mlxb_dim(v, 2);
    if (mlxb_ndim(bias) != 1 || mlxb_dim(bias, 0) != 2 * d + (bnsh_kv ? mlxb_dim(v, 1) * mlxb_dim(v, 3) : dv))
      return op_fail(c, "bias must be [2 * hidden + v_hidden]");
    q = mlxb_binary(s, MLXB_ADD, q, attn_slice_axis(s, bias, 0, 0, d));
    if (!bnsh_kv) {
      k = mlxb_binary(s, MLXB_ADD, k, attn_slice_axis(s, bias, 0, d, 2 * d));
      v = mlxb_binary(s, MLXB_ADD, v, attn_slice_axis(s, bias, 0, 2 * d, 2 * d + dv));
    }
  }
  q = attn_to_bnsh(s, q, heads);
  if (!bnsh_kv) {
    if (mlxb_dim(k, 2) != d || mlxb_dim(v, 2) % heads) return op_fail(c, "key/value hidden sizes do not fit num_heads");
    k = attn_to_bnsh(s, k, heads);
    v = attn_to_bnsh(s, v, heads);
  } else if (mlxb_dim(k, 1) != heads || mlxb_dim(k, 3) != d / heads || mlxb_dim(v, 1) != heads ||
             mlxb_dim(v, 2) != mlxb_dim(k, 2)) {
    return op_fail(c, "BNSH key/value must be [batch, num_heads, kv_sequence, head_size]");
  }
  int64_t past = attn_append_past(s, pk, pv, &k, &v);
  int64_t total = mlxb_dim(k, 2);
  mlxb_array *kpm = op_input(c, 4);
  if (kpm && mlxb_ndim(kpm) == 1 && mlxb_dim(kpm, 0) != b) return op_fail(c, "key_padding_mask lengths must be [batch]");
  attn_args a = {.q = q, .k = k, .v = v};
  a.scale = attn_contrib_scale(n, d / heads);
  if (contrib_bias(c, op_input(c, 4), op_input(c, 5), b, sq, total, past, attn_flag(n, "unidirectional", 0),
                   &a.bias))
    return -1;
  /* ORT's float16 contrib kernels score in float32 end to end (only the output is rounded) */
  a.round_half = false;
  a.want_qk = op_has_output(c, 3) ? 1u << ATTN_QK_MASKED : 0;
  mlxb_array *y = attn_from_bnsh(s, attn_compute(s, &a)); /* fills a.qk */
  return attn_set_outputs(c, y, k, v, a.qk[ATTN_QK_MASKED]);
}

/* ---- com.microsoft Attention (fused QKV projection) ---------------------------------------- */

static bool claim_ms_attention(claim_ctx *c, const op_def *def) {
  static const int same[] = {1, 2, 4, 5};
  const ir_node *n = c->node;
  if (!attn_claim_dtypes(c, same, 4)) return false;
  if (!claim_input(c, 2)) return claim_decline(c, "no bias (ORT's CPU kernel crashes without it)");
  const ir_value *mask = claim_input(c, 3);
  if (mask && mask->rank == 4) return claim_decline(c, "4-D mask_index (not implemented by ORT's CPU kernel)");
  if (!attn_claim_rank(c, 0, 3, 3, "input") || !attn_claim_rank(c, 1, 2, 2, "weights") ||
      !attn_claim_rank(c, 3, 1, 3, "mask_index") || !attn_claim_rank(c, 5, 4, 4, "attention_bias"))
    return false;
  if (claim_input(c, 3) && claim_input_dtype(c, 3) != ONNX_INT32) return claim_decline(c, "mask_index is not int32");
  if (claim_input(c, 4) && claim_input(c, 5)) return claim_decline(c, "past with attention_bias (ORT rejects it)");
  if (claim_input(c, 6) || attn_flag(n, "past_present_share_buffer", 0))
    return claim_decline(c, "past_sequence_length/past_present_share_buffer (shared-buffer decoding)");
  if (attn_flag(n, "do_rotary", 0)) return claim_decline(c, "do_rotary");
  int64_t heads = ir_attr_int(n, "num_heads", 0);
  if (heads <= 0) return claim_decline(c, "num_heads must be > 0");
  const int64_t *sizes;
  size_t ns = ir_attr_ints(n, "qkv_hidden_sizes", &sizes);
  if (ns && (ns != 3 || sizes[0] > INT32_MAX || sizes[2] > INT32_MAX)) /* 2 q + v must not pass int64 */
    return claim_decline(c, "qkv_hidden_sizes must be 3 sizes below 2^31");
  if (ns && (sizes[0] != sizes[1] || sizes[0] <= 0 || sizes[2] <= 0 || sizes[0] % heads || sizes[2] % heads))
    return claim_decline(c, "qkv_hidden_sizes must be 3 positive multiples of num_heads with q == k");
  if (ns && claim_input(c, 4) && sizes[2] != sizes[0]) return claim_decline(c, "past with a different value hidden size");
  return true;
}

static int lower_ms_attention(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  int64_t heads = ir_attr_int(n, "num_heads", 0);
  mlxb_array *x = op_input(c, 0), *w = op_input(c, 1), *bias = op_input(c, 2), *past = op_input(c, 4);
  if (!bias) return op_fail(c, "bias is required");
  mlxb_dtype t = mlxb_type(x);
  int64_t b = mlxb_dim(x, 0), sq = mlxb_dim(x, 1), cols = mlxb_dim(w, 1);
  int64_t qh = cols / 3, vh = cols / 3;
  const int64_t *sizes;
  if (ir_attr_ints(n, "qkv_hidden_sizes", &sizes) == 3) {
    qh = sizes[0];
    vh = sizes[2];
  }
  if (mlxb_dim(w, 0) != mlxb_dim(x, 2) || 2 * qh + vh != cols || mlxb_ndim(bias) != 1 || mlxb_dim(bias, 0) != cols)
    return op_fail(c, "weights must be [input_hidden, q + k + v] and bias [q + k + v]");
  if (qh % heads || vh % heads) return op_fail(c, "hidden sizes are not multiples of num_heads");
  /* the projection is computed in float32 and stored in the input dtype, like ORT's GEMM */
  mlxb_array *y = mlxb_binary(s, MLXB_ADD, mlxb_matmul(s, op_util_cast(s, x, MLXB_F32), op_util_cast(s, w, MLXB_F32)),
                              op_util_cast(s, bias, MLXB_F32));
  y = op_util_cast(s, y, t);
  mlxb_array *q = attn_to_bnsh(s, attn_slice_axis(s, y, 2, 0, qh), heads);
  mlxb_array *k = attn_to_bnsh(s, attn_slice_axis(s, y, 2, qh, 2 * qh), heads);
  mlxb_array *v = attn_to_bnsh(s, attn_slice_axis(s, y, 2, 2 * qh, cols), heads);
  int64_t pl = 0;
  if (past) {
    if (mlxb_ndim(past) != 5 || mlxb_dim(past, 0) != 2 || mlxb_dim(past, 1) != b || mlxb_dim(past, 2) != heads ||
        mlxb_dim(past, 4) != qh / heads)
      return op_fail(c, "past must be [2, batch, num_heads, past, head_size]");
    pl = mlxb_dim(past, 3);
    int ax0 = 0;
    k = attn_concat2(s, mlxb_squeeze(s, attn_slice_axis(s, past, 0, 0, 1), &ax0, 1), k, 2);
    v = attn_concat2(s, mlxb_squeeze(s, attn_slice_axis(s, past, 0, 1, 2), &ax0, 1), v, 2);
  }
  attn_args a = {.q = q, .k = k, .v = v};
  a.scale = attn_contrib_scale(n, qh / heads);
  if (contrib_bias(c, op_input(c, 3), op_input(c, 5), b, sq, pl + sq, pl, attn_flag(n, "unidirectional", 0), &a.bias))
    return -1;
  /* ORT's float16 contrib kernels score in float32 end to end (only the output is rounded) */
  a.round_half = false;
  if (op_set_output(c, 0, attn_from_bnsh(s, attn_compute(s, &a)))) return -1;
  if (op_has_output(c, 1)) {
    const mlxb_array *kv[2] = {k, v};
    if (mlxb_dim(k, 3) != mlxb_dim(v, 3)) return op_fail(c, "present needs equal key and value head sizes");
    if (op_set_output(c, 1, mlxb_stack(s, kv, 2, 0))) return -1;
  }
  return op_check(c);
}

/* ---- com.microsoft GroupQueryAttention ---------------------------------------------------- */

static bool attn_output_exists(const op_ctx *c, int i) {
  return i < op_num_outputs(c) && op_node(c)->outputs[i] >= 0;
}

static bool claim_gqa(claim_ctx *c, const op_def *def) {
  static const int same[] = {1, 2, 3, 4, 7, 8, 10, 11};
  const ir_node *n = c->node;
  if (!attn_claim_dtypes(c, same, 8)) return false;
  int64_t heads = ir_attr_int(n, "num_heads", 0), kv_heads = ir_attr_int(n, "kv_num_heads", 0);
  if (heads <= 0 || kv_heads <= 0 || heads % kv_heads)
    return claim_decline(c, "num_heads must be a positive multiple of kv_num_heads");
  if (strcmp(ir_attr_string(n, "k_quant_type", "NONE"), "NONE") ||
      strcmp(ir_attr_string(n, "v_quant_type", "NONE"), "NONE") || ir_attr_int(n, "kv_cache_bit_width", 0) != 0)
    return claim_decline(c, "quantized KV cache");
  if (attn_flag(n, "sliding_window_cache", 0)) return claim_decline(c, "sliding_window_cache (windowed KV buffer)");
  if (claim_input(c, 12) || claim_input(c, 13)) return claim_decline(c, "k_scale/v_scale (quantized KV cache)");
  if (claim_input(c, 14) || claim_input(c, 15))
    return claim_decline(c, "q_norm_weight/k_norm_weight (ORT's CPU kernel rejects them)");
  if ((claim_input(c, 1) == NULL) != (claim_input(c, 2) == NULL))
    return claim_decline(c, "key and value must come together");
  if ((claim_input(c, 3) == NULL) != (claim_input(c, 4) == NULL))
    return claim_decline(c, "past_key and past_value must come together");
  if (claim_input_dtype(c, 5) != ONNX_INT32 || claim_input_dtype(c, 6) != ONNX_INT32)
    return claim_decline(c, "seqlens_k and total_sequence_length must be int32");
  if (claim_input(c, 9) && claim_input_dtype(c, 9) != ONNX_INT64) return claim_decline(c, "position_ids is not int64");
  if (!attn_claim_rank(c, 0, 3, 3, "query") || !attn_claim_rank(c, 10, 4, 4, "attention_bias")) return false;
  int64_t window = ir_attr_int(n, "local_window_size", -1);
  if (window == 0 || window < -1) return claim_decline(c, "local_window_size %lld", (long long)window);
  if (!attn_flag(n, "causal", 1) && window > 0) return claim_decline(c, "non-causal with a local window");
  if (attn_flag(n, "do_rotary", 0) && (!claim_input(c, 7) || !claim_input(c, 8)))
    return claim_decline(c, "do_rotary without cos_cache/sin_cache");
  int64_t qk = ir_attr_int(n, "qk_output", 0);
  if (qk < 0 || qk > 2) return claim_decline(c, "qk_output %lld", (long long)qk);
  return true;
}

/* gqa_present for one sequence and one new row: the past rows below past_b, zeros from there on,
 * then the new row written in place at past_b (one select over the cache instead of two). When
 * past_b lies outside the cache the write puts back the row already there, as the general form
 * writes no new row then. */
static mlxb_array *gqa_present_one(mlxb_scope *s, mlxb_array *past, mlxb_array *fresh, mlxb_array *past_b,
                                   int64_t plen, mlxb_array *r, mlxb_array *zero) {
  static const int axis = 2;
  int64_t one = 1, row_dims[4] = {1, mlxb_dim(fresh, 1), 1, mlxb_dim(fresh, 3)};
  mlxb_array *base = mlxb_where(s, mlxb_binary(s, MLXB_LESS, r, past_b), attn_fit_axis(s, past, 2, plen, zero), zero);
  mlxb_array *lo = mlxb_scalar_i64(s, 0, MLXB_I64), *hi = mlxb_scalar_i64(s, plen - 1, MLXB_I64);
  mlxb_array *at = mlxb_reshape(s, mlxb_clip(s, past_b, lo, hi), &one, 1);
  mlxb_array *inside = mlxb_binary(s, MLXB_LOGICAL_AND, mlxb_binary(s, MLXB_GREATER_EQUAL, past_b, lo),
                                   mlxb_binary(s, MLXB_LESS_EQUAL, past_b, hi));
  mlxb_array *kept = mlxb_slice_dynamic(s, base, at, &axis, 1, row_dims);
  mlxb_array *row = mlxb_where(s, inside, fresh, kept);
  return mlxb_slice_update_dynamic(s, base, row, at, &axis, 1);
}

/* The key/value cache ORT's kernel writes: rows [0, past_b) from the past buffer, the S new rows
 * at [past_b, past_b + S), zeros after; plen rows per head. past_b is a [B, 1, 1, 1] int64 array
 * or NULL for 0 in every batch. */
static mlxb_array *gqa_present(mlxb_scope *s, mlxb_array *past, mlxb_array *fresh, mlxb_array *past_b, int64_t plen) {
  int64_t b = mlxb_dim(fresh, 0), heads = mlxb_dim(fresh, 1), seq = mlxb_dim(fresh, 2), h = mlxb_dim(fresh, 3);
  mlxb_array *zero = mlxb_scalar_f64(s, 0.0, mlxb_type(fresh));
  if (!past_b) return attn_fit_axis(s, fresh, 2, plen, zero);
  mlxb_array *r = op_util_iota(s, 0, plen, 2, 4, MLXB_I64);
  /* On a GPU the selects below fuse into one kernel; the CPU runs each as its own pass */
  if (seq == 1 && past && b == 1 && mlxb_scope_device(s) == MLXB_DEVICE_CPU)
    return gqa_present_one(s, past, fresh, past_b, plen, r, zero);
  if (seq == 1) { /* a decode step: the general form below with its one new row broadcast */
    mlxb_array *y = mlxb_where(s, mlxb_binary(s, MLXB_EQUAL, r, past_b), fresh, zero);
    if (!past) return y;
    return mlxb_where(s, mlxb_binary(s, MLXB_LESS, r, past_b), attn_fit_axis(s, past, 2, plen, zero), y);
  }
  mlxb_array *rel = mlxb_binary(s, MLXB_SUB, r, past_b);
  mlxb_array *idx = mlxb_clip(s, rel, mlxb_scalar_i64(s, 0, MLXB_I64), mlxb_scalar_i64(s, seq - 1, MLXB_I64));
  int64_t full[4] = {b, heads, plen, h};
  mlxb_array *gathered = mlxb_take_along_axis(s, fresh, mlxb_broadcast_to(s, idx, full, 4), 2);
  mlxb_array *in_new = mlxb_binary(s, MLXB_LOGICAL_AND,
                                   mlxb_binary(s, MLXB_GREATER_EQUAL, rel, mlxb_scalar_i64(s, 0, MLXB_I64)),
                                   mlxb_binary(s, MLXB_LESS, rel, mlxb_scalar_i64(s, seq, MLXB_I64)));
  mlxb_array *y = mlxb_where(s, in_new, gathered, zero);
  if (!past) return y;
  return mlxb_where(s, mlxb_binary(s, MLXB_LESS, r, past_b), attn_fit_axis(s, past, 2, plen, zero), y);
}

/* Splits the query (and packed QKV) into BNSH q, k, v. */
/* Separate query, key and value [B, S, N * H] of widths that fit the head counts. */
static int gqa_check_widths(op_ctx *c, int64_t heads, int64_t kv_heads) {
  mlxb_array *query = op_input(c, 0), *key = op_input(c, 1), *value = op_input(c, 2);
  int64_t seq = mlxb_dim(query, 1), hidden = mlxb_dim(query, 2);
  if (!key || !value || mlxb_ndim(key) != 3 || mlxb_ndim(value) != 3)
    return op_fail(c, "key and value must be 3-D when given");
  if (hidden % heads || mlxb_dim(key, 2) != kv_heads * (hidden / heads) || mlxb_dim(value, 2) != mlxb_dim(key, 2))
    return op_fail(c, "query/key/value widths do not fit num_heads/kv_num_heads");
  if (mlxb_dim(key, 1) != seq || mlxb_dim(value, 1) != seq || mlxb_dim(key, 0) != mlxb_dim(query, 0) ||
      mlxb_dim(value, 0) != mlxb_dim(query, 0))
    return op_fail(c, "key/value batch and sequence length must equal the query's (shared KV is not supported)");
  return 0;
}

static int gqa_split(op_ctx *c, int64_t heads, int64_t kv_heads, mlxb_array **q, mlxb_array **k, mlxb_array **v) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *query = op_input(c, 0);
  *q = *k = *v = NULL;
  int64_t b = mlxb_dim(query, 0), seq = mlxb_dim(query, 1), hidden = mlxb_dim(query, 2);
  if (!op_has_input(c, 1)) {
    int64_t all = heads + 2 * kv_heads;
    if (hidden % all) return op_fail(c, "packed QKV width is not a multiple of num_heads + 2 * kv_num_heads");
    mlxb_array *qkv = attn_transpose0213(s, attn_reshape4(s, query, b, seq, all, hidden / all));
    *q = attn_slice_axis(s, qkv, 1, 0, heads);
    *k = attn_slice_axis(s, qkv, 1, heads, heads + kv_heads);
    *v = attn_slice_axis(s, qkv, 1, heads + kv_heads, all);
    return op_check(c);
  }
  if (gqa_check_widths(c, heads, kv_heads)) return -1;
  mlxb_array *key = op_input(c, 1), *value = op_input(c, 2);
  *q = attn_to_bnsh(s, query, heads);
  *k = attn_to_bnsh(s, key, kv_heads);
  *v = attn_to_bnsh(s, value, kv_heads);
  return op_check(c);
}

/* The rotary caches checked, and the positions [B, S] ORT rotates by (position_ids, else
 * past_b + s, or s on the first prompt) range-checked against them; NULL after op_fail. For a
 * one-token step whose kernels read one position per sequence from any shape (per_sequence),
 * past_b itself serves. */
static mlxb_array *gqa_rope_positions(op_ctx *c, int64_t b, int64_t seq, int64_t h, mlxb_array *past_b,
                                      bool per_sequence) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *cos = op_input(c, 7), *sin = op_input(c, 8), *pos = op_input(c, 9);
  if (!cos || !sin || mlxb_ndim(cos) != 2 || mlxb_ndim(sin) != 2 || mlxb_dim(sin, 0) != mlxb_dim(cos, 0) ||
      mlxb_dim(sin, 1) != mlxb_dim(cos, 1) || 2 * mlxb_dim(cos, 1) > h)
    return op_fail(c, "cos_cache/sin_cache must be [max_position, <= head_size / 2]"), NULL;
  if (pos && (mlxb_ndim(pos) != 2 || mlxb_dim(pos, 1) != seq))
    return op_fail(c, "position_ids must be [batch, sequence]"), NULL;
  /* what the positions are, for checking them once per decoder rather than once per layer */
  char data[96];
  const ir_node *n = op_node(c);
  if (pos)
    snprintf(data, sizeof data, "v%d", n->inputs[9]);
  else if (past_b) /* seqlens_k + 1 - S, plus 0..S-1 */
    snprintf(data, sizeof data, "v%d+1-%lld+iota", n->inputs[5], (long long)seq);
  else
    snprintf(data, sizeof data, "iota%lld", (long long)seq);
  if (!pos && past_b && seq == 1) pos = per_sequence ? past_b : mlxb_reshape(s, past_b, (int64_t[]){b, 1}, 2);
  if (!pos) {
    pos = op_util_iota(s, 0, seq, 1, 2, MLXB_I64);
    if (past_b) pos = mlxb_binary(s, MLXB_ADD, pos, mlxb_reshape(s, past_b, (int64_t[]){b, 1}, 2));
  }
  return op_util_require_range_once(c, data, pos, 0, mlxb_dim(cos, 0), "rotary position") ? NULL : pos;
}

static int gqa_rotary(op_ctx *c, mlxb_array **q, mlxb_array **k, mlxb_array *past_b, int64_t seq) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *cos = op_input(c, 7), *sin = op_input(c, 8);
  mlxb_array *pos = gqa_rope_positions(c, mlxb_dim(*q, 0), seq, mlxb_dim(*q, 3), past_b, false);
  if (!pos) return -1;
  int64_t half = mlxb_dim(cos, 1);
  int axis = 1;
  mlxb_array *cg = mlxb_expand_dims(s, mlxb_take(s, cos, pos, 0), &axis, 1);
  mlxb_array *sg = mlxb_expand_dims(s, mlxb_take(s, sin, pos, 0), &axis, 1);
  bool inter = attn_flag(op_node(c), "rotary_interleaved", 0);
  *q = rotary_embed(s, *q, cg, sg, 2 * half, inter);
  *k = rotary_embed(s, *k, cg, sg, 2 * half, inter);
  return op_check(c);
}

/* Which keys each query sees, as ORT decides per batch from seqlens_k: causal keys
 * t < min(past_b + s + 1, total_b); with a local window also t >= bound - window, where ORT's
 * float32 flash kernel uses past_b + s + 1 as the bound and its generic kernel the capped value
 * (they differ only on padding rows past total_b). Non-causal: t < total_b. */
static mlxb_array *gqa_keep(op_ctx *c, mlxb_array *past_b, mlxb_array *total_b, int64_t seq, int64_t plen, bool flash) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  int64_t b = mlxb_dim(total_b, 0), window = ir_attr_int(n, "local_window_size", -1);
  mlxb_array *t = op_util_iota(s, 0, plen, 3, 4, MLXB_I64);
  mlxb_array *tot = attn_reshape4(s, total_b, b, 1, 1, 1);
  if (!attn_flag(n, "causal", 1)) return mlxb_binary(s, MLXB_LESS, t, tot);
  /* One query after a past: its bound past_b + 1 is total_b (past_b = total_b - 1) */
  if (seq == 1 && past_b && window <= 0) return mlxb_binary(s, MLXB_LESS, t, tot);
  mlxb_array *bound = op_util_iota(s, 1, seq, 2, 4, MLXB_I64);
  if (past_b) bound = mlxb_binary(s, MLXB_ADD, bound, past_b);
  mlxb_array *eff = mlxb_binary(s, MLXB_MINIMUM, bound, tot);
  mlxb_array *keep = mlxb_binary(s, MLXB_LESS, t, eff);
  if (window > 0) {
    mlxb_array *lower = mlxb_binary(s, MLXB_SUB, flash ? bound : eff, mlxb_scalar_i64(s, window, MLXB_I64));
    keep = mlxb_binary(s, MLXB_LOGICAL_AND, keep, mlxb_binary(s, MLXB_GREATER_EQUAL, t, lower));
  }
  return keep;
}

/* A one-token step after a past as two kernels where the bridge has them (MLX's CUDA backend;
 * primitives of our own with the same arithmetic on the CPU): the
 * present cache with the new (rotated) key row written in, and decode attention that rotates the
 * query itself. The same rules as the composed form: positions past_b (or position_ids) checked
 * against the caches, present rows [0, past_b) from the past buffer, zeros after the new row. The
 * kernels take q, k and v as the node's inputs ([B, 1, N * H]), read seqlens_k as it comes (past_b
 * = seqlens_k, the total length seqlens_k + 1) and give the output in the query's shape: a decode
 * step's cost is its operation count, and no reshape, cast or add is needed around them. */
static bool gqa_step_fits(op_ctx *c, mlxb_dtype t, int64_t h, int64_t hv, int64_t seq, bool has_past) {
  const ir_node *n = op_node(c);
  if (seq != 1 || !has_past || !op_input(c, 4) || op_has_input(c, 10) || op_has_input(c, 11)) return false;
  if (mlxb_dim(op_input(c, 0), 0) < 1) return false; /* no sequence: nothing for a kernel to launch */
  if (attn_flag(n, "smooth_softmax", 0) || ir_attr_int(n, "qk_output", 0) != 0) return false;
  return hv == h && mlxb_decode_attention_available(op_scope(c), t, h);
}

/* onnxruntime-genai's shared KV buffer: the caller bound one device buffer as past and present of
 * the same length, so the step writes its new rows into it and hands nothing back (as ORT's CUDA
 * EP does). */
static bool gqa_writes_in_place(op_ctx *c, mlxb_array *k, mlxb_array *v, int64_t plen) {
  mlxb_array *pk = op_input(c, 3), *pv = op_input(c, 4);
  if (op_output_alias(c, 1) != 3 || op_output_alias(c, 2) != 4) return false;
  if (!mlxb_decode_kv_write_available(op_scope(c), mlxb_type(k), mlxb_dim(pk, 3))) return false;
  return mlxb_dim(pk, 2) == plen && mlxb_type(pk) == mlxb_type(k) && mlxb_type(pv) == mlxb_type(v);
}

static int gqa_step(op_ctx *c, mlxb_array *q, mlxb_array *k, mlxb_array *v, mlxb_array *seqlens, int64_t h,
                    int64_t plen) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  mlxb_rope rope = {0}, *rot = NULL;
  if (attn_flag(n, "do_rotary", 0)) {
    mlxb_array *pos = gqa_rope_positions(c, mlxb_dim(q, 0), 1, h, seqlens, true);
    if (!pos) return -1;
    mlxb_array *cos = op_input(c, 7), *sin = op_input(c, 8);
    rope = (mlxb_rope){.cos = cos, .sin = sin, .positions = pos, .dims = 2 * mlxb_dim(cos, 1),
                       .interleaved = attn_flag(n, "rotary_interleaved", 0)};
    rot = &rope;
  }
  mlxb_array *present_k = NULL, *present_v = NULL, *written = NULL, *pk = op_input(c, 3), *pv = op_input(c, 4);
  float softcap = ir_attr_float(n, "softcap", 0.0f), scale = attn_contrib_scale(n, h);
  int64_t window = ir_attr_int(n, "local_window_size", -1);
  bool in_place = gqa_writes_in_place(c, k, v, plen);
  if (mlxb_dim(pk, 2) >= 1 && mlxb_decode_step_available(s, mlxb_type(q), h, plen)) {
    /* the new rows and the attention in one launch */
    mlxb_array *y = in_place
                        ? mlxb_decode_step_in_place(s, q, pk, pv, k, v, seqlens, 1, scale, softcap, window, rot)
                        : mlxb_decode_step(s, q, pk, pv, k, v, seqlens, 1, plen, scale, softcap, window, rot, &present_k,
                                           &present_v);
    if (y && in_place) present_k = mlxb_ref(s, pk), present_v = mlxb_ref(s, pv);
    return y ? attn_set_outputs(c, y, present_k, present_v, NULL) : op_check(c);
  }
  if (in_place) {
    written = mlxb_decode_kv_write(s, pk, pv, k, v, seqlens, 0, rot);
    present_k = mlxb_ref(s, pk);
    present_v = mlxb_ref(s, pv);
  } else if (mlxb_decode_kv_append(s, pk, pv, k, v, seqlens, 0, plen, rot, &present_k, &present_v)) {
    return op_check(c);
  }
  mlxb_array *y = mlxb_decode_attention(s, q, present_k, present_v, seqlens, 1, NULL, scale, softcap, window, rot,
                                        written);
  return attn_set_outputs(c, y, present_k, present_v, NULL);
}

/* A prompt (S > 1 new rows) as the step's two kernels, where the bridge takes many rows (MLX's CUDA
 * backend): the present cache with the S new key rows rotated in, and attention whose query row s
 * sees keys up to its own position (ORT's causal bound min(past_b + s + 1, total_b), a window
 * below it), rotating the queries itself. Forms the kernels do not have (packed QKV, an
 * attention bias, head sinks, smooth softmax, qk snapshots) keep the composed lowering. */
static bool gqa_rows_fit(op_ctx *c, mlxb_dtype t, int64_t h, int64_t hv, int64_t seq) {
  const ir_node *n = op_node(c);
  if (seq < 2 || mlxb_dim(op_input(c, 0), 0) < 1 || op_has_input(c, 10) || op_has_input(c, 11)) return false;
  if (attn_flag(n, "smooth_softmax", 0) || ir_attr_int(n, "qk_output", 0) != 0) return false;
  return hv == h && mlxb_rows_attention_available(op_scope(c), t, h);
}

static int gqa_rows(op_ctx *c, mlxb_array *seqlens, int64_t seq, int64_t h, int64_t plen, bool first) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  mlxb_array *q = op_input(c, 0), *k = op_input(c, 1), *v = op_input(c, 2), *pk = op_input(c, 3),
             *pv = op_input(c, 4);
  int64_t b = mlxb_dim(q, 0), kv_heads = ir_attr_int(n, "kv_num_heads", 0);
  mlxb_rope rope = {0}, *rot = NULL;
  if (attn_flag(n, "do_rotary", 0)) {
    mlxb_array *past_b = NULL;
    if (!first) {
      mlxb_array *total_b = mlxb_binary(s, MLXB_ADD, op_util_cast(s, mlxb_reshape(s, seqlens, &b, 1), MLXB_I64),
                                        mlxb_scalar_i64(s, 1, MLXB_I64));
      past_b = mlxb_binary(s, MLXB_SUB, total_b, mlxb_scalar_i64(s, seq, MLXB_I64));
    }
    mlxb_array *pos = gqa_rope_positions(c, b, seq, h, past_b, false);
    if (!pos) return -1;
    int64_t per_row[2] = {b, seq}; /* a first prompt's are [1, S] */
    mlxb_array *cos = op_input(c, 7), *sin = op_input(c, 8);
    rope = (mlxb_rope){.cos = cos, .sin = sin, .positions = mlxb_broadcast_to(s, pos, per_row, 2),
                       .dims = 2 * mlxb_dim(cos, 1),
                       .interleaved = attn_flag(n, "rotary_interleaved", 0)};
    rot = &rope;
  }
  if (!pk) {
    int64_t none[4] = {b, kv_heads, 0, h};
    pk = pv = mlxb_zeros(s, none, 4, mlxb_type(k));
  }
  mlxb_array *present_k = NULL, *present_v = NULL;
  if (mlxb_decode_kv_append(s, pk, pv, k, v, first ? NULL : seqlens, 1 - seq, plen, rot, &present_k, &present_v))
    return op_check(c);
  float softcap = ir_attr_float(n, "softcap", 0.0f);
  /* ORT's float32 flash kernel bounds a window by the row's own end, its generic kernel by the
   * visible end; they differ only on padding rows past total_b */
  bool flash = mlxb_type(q) == MLXB_F32 && softcap == 0.0f && attn_output_exists(c, 1) && attn_output_exists(c, 2);
  mlxb_attn_rows rows = {.rows = seq, .first = first, .bidirectional = !attn_flag(n, "causal", 1),
                         .window_from_row = flash};
  mlxb_array *y = mlxb_decode_attention(s, q, present_k, present_v, seqlens, 1, &rows, attn_contrib_scale(n, h),
                                        softcap, ir_attr_int(n, "local_window_size", -1), rot, NULL);
  return attn_set_outputs(c, y, present_k, present_v, NULL);
}

/* ORT's rules for the lengths of a Run: the past buffer (past rows) either grows by the new rows
 * (total = past + new) or is a fixed buffer that holds them (total <= past); a prompt continuing a
 * past (new rows > 1, total != new rows) takes one sequence. */
static int gqa_lengths_fail(op_ctx *c, int64_t batch, int64_t seq, int64_t past, int64_t total) {
  if (seq > 1 && seq != total && batch != 1)
    return op_fail(c, "batch_size must be 1 when sequence_length > 1 and past context is given");
  if (total != past + seq && total > past)
    return op_fail(c, "total_sequence_length must equal past_sequence_length + kv_sequence_length for a dynamic "
                   "cache, or be no greater than past_sequence_length for a static cache (got %lld, past %lld, new "
                   "%lld)", (long long)total, (long long)past, (long long)seq);
  return 0;
}

static int lower_gqa(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  int64_t heads = ir_attr_int(n, "num_heads", 0), kv_heads = ir_attr_int(n, "kv_num_heads", 0);
  mlxb_array *query = op_input(c, 0), *pk = op_input(c, 3), *pv = op_input(c, 4), *seqlens = op_input(c, 5);
  if (!seqlens || !op_has_input(c, 6)) return op_fail(c, "seqlens_k and total_sequence_length are required");
  if (mlxb_ndim(query) != 3) return op_fail(c, "query must be 3-D");
  int64_t tsl;
  if (op_input_ints(c, 6, &tsl, 1) != 1) return op_fail(c, "total_sequence_length must be one value");
  if (tsl <= 0) return op_fail(c, "total_sequence_length must be positive, got %lld", (long long)tsl);
  mlxb_dtype t = mlxb_type(query);
  int64_t b = mlxb_dim(query, 0), seq = mlxb_dim(query, 1);
  /* older exporters give seqlens_k as [batch, 1]; ORT only needs batch values */
  if ((int64_t)mlxb_size(seqlens) != b || mlxb_ndim(seqlens) > 2) return op_fail(c, "seqlens_k must be [batch]");
  mlxb_array *q = NULL, *k = NULL, *v = NULL;
  /* the kernels take separate q, k, v in the inputs' own shape (packed QKV: the split's views) */
  bool as_given = op_has_input(c, 1);
  if (as_given ? gqa_check_widths(c, heads, kv_heads) : gqa_split(c, heads, kv_heads, &q, &k, &v)) return -1;
  if (as_given) q = query, k = op_input(c, 1), v = op_input(c, 2);
  int64_t h = as_given ? mlxb_dim(query, 2) / heads : mlxb_dim(q, 3);
  int64_t hv = as_given ? mlxb_dim(v, 2) / kv_heads : mlxb_dim(v, 3);
  if (pk && (mlxb_ndim(pk) != 4 || mlxb_dim(pk, 1) != kv_heads || mlxb_dim(pk, 3) != h ||
             mlxb_dim(pv, 2) != mlxb_dim(pk, 2)))
    return op_fail(c, "past_key/past_value must be [batch, kv_num_heads, past, head_size]");
  if (gqa_lengths_fail(c, b, seq, pk ? mlxb_dim(pk, 2) : 0, tsl)) return -1;

  /* ORT: the first prompt is S == total_sequence_length; otherwise batch b's past is
   * seqlens_k[b] + 1 - S rows of the past buffer. */
  bool first = seq == tsl;
  /* each batch's total length seqlens_k + 1 fits the present buffer and holds the new rows */
  int64_t plen = pk && mlxb_dim(pk, 2) > tsl ? mlxb_dim(pk, 2) : tsl;
  char seqlens_data[32];
  snprintf(seqlens_data, sizeof seqlens_data, "v%d", n->inputs[5]);
  if (op_util_require_range_once(c, seqlens_data, seqlens, first ? 0 : seq - 1, plen, "seqlens_k")) return -1;
  if (gqa_step_fits(c, t, h, hv, seq, pk && !first)) return gqa_step(c, q, k, v, seqlens, h, plen);
  if (as_given && gqa_rows_fit(c, t, h, hv, seq)) return gqa_rows(c, seqlens, seq, h, plen, first);
  if (as_given && gqa_split(c, heads, kv_heads, &q, &k, &v)) return -1;
  seqlens = mlxb_reshape(s, seqlens, &b, 1);
  mlxb_array *total_b = mlxb_binary(s, MLXB_ADD, op_util_cast(s, seqlens, MLXB_I64), mlxb_scalar_i64(s, 1, MLXB_I64));
  mlxb_array *after = attn_reshape4(s, mlxb_binary(s, MLXB_SUB, total_b, mlxb_scalar_i64(s, seq, MLXB_I64)), b, 1, 1, 1);
  mlxb_array *past_b = pk && !first ? after : NULL;
  if (attn_flag(n, "do_rotary", 0)) {
    /* positions count from total_b - S even without a past buffer */
    if (gqa_rotary(c, &q, &k, first ? NULL : after, seq)) return -1;
  }
  mlxb_array *present_k = gqa_present(s, pk, k, past_b, plen), *present_v = gqa_present(s, pv, v, past_b, plen);

  int64_t qk_mode = ir_attr_int(n, "qk_output", 0);
  mlxb_array *sink = op_util_cast(s, op_input(c, 11), MLXB_F32);
  attn_args a = {.q = q, .k = present_k, .v = present_v, .sink = sink};
  a.scale = attn_contrib_scale(n, h);
  a.softcap = ir_attr_float(n, "softcap", 0.0f);
  a.smooth = attn_flag(n, "smooth_softmax", 0);
  bool flash = t == MLXB_F32 && tsl > 1 && a.softcap == 0.0f && !a.smooth && !sink && !qk_mode &&
               attn_output_exists(c, 1) && attn_output_exists(c, 2);
  a.keep = gqa_keep(c, past_b, total_b, seq, plen, flash);
  a.fill = -INFINITY;
  a.zero_masked_rows = flash && ir_attr_int(n, "local_window_size", -1) > 0;
  mlxb_array *ab = op_input(c, 10);
  if (ab) {
    if (mlxb_dim(ab, 2) != seq) return op_fail(c, "attention_bias must be [B|1, N|1, S, total]");
    a.bias = attn_fit_axis(s, op_util_cast(s, ab, MLXB_F32), 3, plen, attn_f32(s, 0.0));
  }
  if (qk_mode) a.want_qk = 1u << (qk_mode == 1 ? ATTN_QK_MASKED : ATTN_QK_SOFTMAX);
  mlxb_array *y = attn_from_bnsh(s, attn_compute(s, &a));
  mlxb_array *qk = NULL;
  if (qk_mode && op_has_output(c, 3)) {
    /* ORT's score rows hold 0 (not -inf) outside the visible keys; columns [0, tsl) */
    qk = qk_mode == 1 ? mlxb_where(s, a.keep, a.qk[ATTN_QK_MASKED], mlxb_scalar_f64(s, 0.0, t)) : a.qk[ATTN_QK_SOFTMAX];
    qk = attn_slice_axis(s, op_util_cast(s, qk, t), 3, 0, tsl);
  }
  return attn_set_outputs(c, y, present_k, present_v, qk);
}

/* A decode step with the KV cache padded: past_key/past_value carry zero rows after the valid
 * ones and total_sequence_length counts them. The present length is max(past buffer, total),
 * both grown by pad, and the extra rows come out as zeros; which keys are visible follows from
 * seqlens_k (data), not from the buffer length, so the valid outputs are the unpadded ones. The
 * runtime pads only when the past is non-empty and the total exceeds the query length, so the
 * first-prompt test (S == total_sequence_length) answers the same.
 * A fixed past buffer (onnxruntime-genai's shared KV buffer: past and present one buffer of the
 * maximum length) is not padded; only the total length grows by pad. The present keeps the
 * buffer's length as long as the padded total fits in it, which the rule's bound asks of the
 * runtime; the outputs are then exactly the unpadded ones. */
static bool pad_gqa(const ir_graph *g, const ir_node *n, const pad_fact *in, pad_fact *out,
                     pad_bound *bound) {
  if (n->n_inputs <= 6 || (n->n_inputs > 10 && n->inputs[10] >= 0)) return false;
  if (ir_attr_int(n, "qk_output", 0) != 0 && n->n_outputs > 3 && n->outputs[3] >= 0) return false;
  bool fixed_past = in[3].kind == PAD_NONE && in[4].kind == PAD_NONE && n->inputs[3] >= 0 && n->inputs[4] >= 0;
  for (int k = 0; k < n->n_inputs; k++) {
    pad_kind want = (k == 3 || k == 4) && !fixed_past ? PAD_ROWS : k == 6 ? PAD_LENGTH : PAD_NONE;
    if (in[k].kind != want || (want == PAD_ROWS && in[k].axis != 2) || (want == PAD_LENGTH && in[k].axis != 0))
      return false;
  }
  if (fixed_past) {
    *bound = (pad_bound){.length = 6, .within = 3, .axis = 2};
    return true; /* present.* keep the buffer's length: PAD_NONE */
  }
  for (int k = 1; k <= 2 && k < n->n_outputs; k++) out[k] = (pad_fact){PAD_ROWS, 2};
  return true;
}

/* ---- the table ---------------------------------------------------------------------------- */

static const op_def defs[] = {
    OP_ROW("", "Attention", 23, 24, .inputs = {3, 7}, .outputs = {1, 4}, .dtypes = DT_F32 | DT_F16,
           .claim = claim_onnx_attention, .lower = lower_onnx_attention,
           .doc = "float32/float16 (bfloat16 declined: no ORT CPU kernel); 3-D with q_num_heads/kv_num_heads or 4-D; "
                  "GQA; attn_mask bool or additive, broadcast over batch/heads; is_causal aligned as ORT (offset = "
                  "past length, per batch nonpad_kv_seqlen - S with opset 24's nonpad_kv_seqlen, none for one query "
                  "after a past); past_key/past_value -> present; scale; softcap (before the mask, as ORT and the "
                  "current spec); qk_matmul_output_mode 0-3; fully masked rows give zeros as on ORT; float16 rounds "
                  "scores and probabilities where ORT stores them in float16; softmax_precision accepted (softmax is "
                  "float32 anyway)"),
    OP_ROW("com.microsoft", "MultiHeadAttention", 1, 1, .inputs = {1, 10}, .outputs = {1, 4}, .dtypes = DT_F32 | DT_F16,
           .claim = claim_mha, .lower = lower_mha,
           .doc = "float32/float16; query [B, S, D] with key/value [B, L, D] (+ bias [3D]) or BNSH [B, N, L, H] "
                  "(cross attention; bias then applies to the query only, as on ORT); key_padding_mask int32 as "
                  "lengths [B], [B, T] or [B, S, T] (mask_filter_value); attention_bias [B|1, N|1, S, T]; "
                  "past_key/past_value -> present; unidirectional as ORT (future keys hidden for every query but the "
                  "last); scale; qk output (scores after mask and bias). Declined: packed QKV/KV (ORT CPU rejects "
                  "them), past_sequence_length/cache_indirection, bfloat16"),
    OP_ROW("com.microsoft", "GroupQueryAttention", 1, 1, .inputs = {1, 16}, .outputs = {1, 4},
           .dtypes = DT_F32 | DT_F16, .claim = claim_gqa, .lower = lower_gqa, .pad = pad_gqa,
           .doc = "float32/float16; query/key/value [B, S, hidden] or packed QKV; past_key/past_value BNSH with "
                  "ORT's buffer semantics (present length max(past buffer, total_sequence_length); rows past "
                  "seqlens_k zeroed); first prompt (S == total_sequence_length, right padding via seqlens_k), "
                  "chunked prefill and decode; do_rotary (interleaved or not, partial) with position_ids or ORT's "
                  "default positions; local_window_size; softcap; smooth_softmax; head_sink; attention_bias; scale; "
                  "causal=0; qk_output 1/2. total_sequence_length is read on the host. Rotary positions are checked against "
                  "the cos/sin caches' rows; a total_sequence_length past them is not refused by itself (ORT refuses "
                  "it): decode buckets pad that length. On MLX's CUDA backend a decode step (one new row, separate "
                  "q/k/v) is one kernel launch (the present written or the shared buffer written in place, and the "
                  "attention), and a prompt two (the present, and a warp per query row); the other forms and CPU "
                  "scopes compose MLX operations. Declined: quantized KV cache "
                  "(k/v_quant_type, kv_cache_bit_width, k/v_scale), sliding_window_cache, q/k_norm_weight (ORT CPU "
                  "rejects them), non-causal with a window, bfloat16"),
    OP_ROW("com.microsoft", "Attention", 1, 1, .inputs = {2, 7}, .outputs = {1, 2}, .dtypes = DT_F32 | DT_F16,
           .claim = claim_ms_attention, .lower = lower_ms_attention,
           .doc = "float32/float16; input [B, S, D] projected by weights [D, q + k + v] plus bias (projection in "
                  "float32); qkv_hidden_sizes (q == k); mask_index int32 as end positions [B], end and start "
                  "positions [2B], raw [B, T] or [B, S, T] mask (mask_filter_value); attention_bias [B|1, N|1, S, "
                  "T]; past [2, B, N, P, H] -> present; unidirectional as ORT; scale. Declined: no bias (ORT's CPU "
                  "kernel crashes), 4-D masks (not implemented on ORT CPU), past with attention_bias (ORT rejects "
                  "it), past_sequence_length/past_present_share_buffer, do_rotary, bfloat16"),
};

OPS_FAMILY(attention, defs);
