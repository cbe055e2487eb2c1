/* com.microsoft LinearAttention: the recurrent attention of Gated DeltaNet, RetNet, GLA and
 * (Delta)Net layers. Each KV head carries a state S [d_k, d_v], updated token by token:
 *   linear       S = S + k v^T
 *   gated        S = exp(g) S + k v^T                      (g per head, or per key dimension)
 *   delta        S = S + b k (v - S^T k)^T
 *   gated_delta  S = exp(g) S, then S = S + b k (v - S^T k)^T
 * and each query head reads o = scale q^T S from its KV head's updated state (query heads grouped
 * over KV heads as in GQA). The tokens of a Run are unrolled in order (a decode step is one), in
 * float32 for half inputs, so the result is ORT's recurrence up to float rounding; ORT's chunked
 * prefill is the same sum in another order. Nothing reads an index from the data. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op_util.h"

enum { LA_LINEAR, LA_GATED, LA_DELTA, LA_GATED_DELTA, LA_BAD };

static int la_rule(const ir_node *n) {
  static const char *const names[LA_BAD] = {"linear", "gated", "delta", "gated_delta"};
  const char *r = ir_attr_string(n, "update_rule", "gated_delta");
  for (int i = 0; i < LA_BAD; i++)
    if (!strcmp(r, names[i])) return i;
  return LA_BAD;
}

static bool la_gated(int rule) { return rule == LA_GATED || rule == LA_GATED_DELTA; }
static bool la_delta(int rule) { return rule == LA_DELTA || rule == LA_GATED_DELTA; }

static bool claim_linear_attention(claim_ctx *c, const op_def *def) {
  const ir_node *n = c->node;
  int rule = la_rule(n);
  if (rule == LA_BAD) return claim_decline(c, "update_rule '%s'", ir_attr_string(n, "update_rule", ""));
  if (ir_attr_int(n, "state_window", 0) != 0) return claim_decline(c, "state_window (per-token states)");
  int64_t hq = ir_attr_int(n, "q_num_heads", 0), hkv = ir_attr_int(n, "kv_num_heads", 0);
  if (hq <= 0 || hkv <= 0 || hq % hkv) return claim_decline(c, "q_num_heads must be a positive multiple of kv_num_heads");
  if (la_gated(rule) && !claim_input(c, 4)) return claim_decline(c, "the %s rule needs decay", ir_attr_string(n, "update_rule", ""));
  if (la_delta(rule) && !claim_input(c, 5)) return claim_decline(c, "the delta rules need beta");
  return op_util_claim_same_dtypes(c, (const int[]){1, 2, 4, 5}, 4);
}

typedef struct la_dims {
  int64_t b, t, hq, hkv, dk, dv;
} la_dims;

/* ORT's shape rules; 0, or -1 with the failure recorded. */
static int la_shapes(op_ctx *c, la_dims *d, mlxb_array **in) {
  const ir_node *n = op_node(c);
  int64_t qd[OP_UTIL_MAX_RANK], kd[OP_UTIL_MAX_RANK], vd[OP_UTIL_MAX_RANK], x[OP_UTIL_MAX_RANK];
  if (op_util_input_dims(c, 0, &in[0], qd) != 3 || op_util_input_dims(c, 1, &in[1], kd) != 3 ||
      op_util_input_dims(c, 2, &in[2], vd) != 3)
    return op_check(c) ? -1 : op_fail(c, "query, key and value must be 3-D (B, T, H * D)");
  d->b = qd[0], d->t = qd[1], d->hq = ir_attr_int(n, "q_num_heads", 0), d->hkv = ir_attr_int(n, "kv_num_heads", 0);
  if (qd[2] % d->hq || kd[2] % d->hkv || vd[2] % d->hkv) return op_fail(c, "hidden sizes are not multiples of the heads");
  d->dk = qd[2] / d->hq, d->dv = vd[2] / d->hkv;
  if (kd[0] != d->b || vd[0] != d->b || kd[1] != d->t || vd[1] != d->t || kd[2] / d->hkv != d->dk)
    return op_fail(c, "key and value must be (B, T, kv_num_heads * d) with query's B, T and d_k");
  in[3] = in[4] = in[5] = NULL;
  if (op_has_input(c, 3) && (op_util_input_dims(c, 3, &in[3], x) != 4 || x[0] != d->b || x[1] != d->hkv ||
                             x[2] != d->dk || x[3] != d->dv))
    return op_check(c) ? -1 : op_fail(c, "past_state must be (B, kv_num_heads, d_k, d_v)");
  if (op_has_input(c, 4) && (op_util_input_dims(c, 4, &in[4], x) != 3 || x[0] != d->b || x[1] != d->t ||
                             (x[2] != d->hkv && x[2] != d->hkv * d->dk)))
    return op_check(c) ? -1 : op_fail(c, "decay must be (B, T, kv_num_heads) or (B, T, kv_num_heads * d_k)");
  if (op_has_input(c, 5) && (op_util_input_dims(c, 5, &in[5], x) != 3 || x[0] != d->b || x[1] != d->t ||
                             (x[2] != d->hkv && x[2] != 1)))
    return op_check(c) ? -1 : op_fail(c, "beta must be (B, T, kv_num_heads) or (B, T, 1)");
  int rule = la_rule(n);
  if ((la_gated(rule) && !in[4]) || (la_delta(rule) && !in[5])) return op_fail(c, "decay or beta missing for the update rule");
  return 0;
}

/* Token t of x [B, T, H * D] as [B, H, rows, cols] (a view). */
static mlxb_array *la_token(mlxb_scope *s, mlxb_array *x, int64_t t, int64_t b, int64_t h, int64_t rows, int64_t cols) {
  return mlxb_reshape(s, op_util_slice_axis(s, x, 1, t, t + 1, 1), (int64_t[]){b, h, rows, cols}, 4);
}

static int lower_linear_attention(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  la_dims d = {0};
  mlxb_array *in[6];
  if (la_shapes(c, &d, in)) return -1;
  int rule = la_rule(n);
  mlxb_dtype t = mlxb_type(in[0]), ct = t == MLXB_F64 ? MLXB_F64 : MLXB_F32;
  for (int i = 0; i < 6; i++)
    if (in[i]) in[i] = mlxb_astype(s, in[i], ct);
  float given = ir_attr_float(n, "scale", 0.0f);
  double scale = given != 0.0f ? (double)given : 1.0 / sqrt((double)d.dk);
  int64_t g = d.hq / d.hkv, gate_cols = in[4] && mlxb_dim(in[4], 2) == d.hkv * d.dk ? d.dk : 1;
  mlxb_array *state = in[3] ? in[3] : mlxb_zeros(s, (int64_t[]){d.b, d.hkv, d.dk, d.dv}, 4, ct);
  mlxb_array **outs = malloc((size_t)(d.t ? d.t : 1) * sizeof *outs);
  if (!outs) return op_fail(c, "out of memory");
  int perm[4] = {0, 1, 3, 2};
  for (int64_t i = 0; i < d.t; i++) {
    mlxb_array *k = la_token(s, in[1], i, d.b, d.hkv, 1, d.dk), *v = la_token(s, in[2], i, d.b, d.hkv, 1, d.dv);
    mlxb_array *kcol = mlxb_transpose(s, k, perm, 4); /* [B, Hkv, d_k, 1] */
    if (la_gated(rule)) /* exp(g) per head or per key dimension: [B, Hkv, 1 or d_k, 1] */
      state = op_util_mul(s, state, op_util_exp(s, la_token(s, in[4], i, d.b, d.hkv, gate_cols, 1)));
    mlxb_array *upd = v;
    if (la_delta(rule)) {
      mlxb_array *beta = mlxb_dim(in[5], 2) == 1 ? mlxb_reshape(s, op_util_slice_axis(s, in[5], 1, i, i + 1, 1),
                                                                (int64_t[]){d.b, 1, 1, 1}, 4)
                                                 : la_token(s, in[5], i, d.b, d.hkv, 1, 1);
      upd = op_util_mul(s, beta, op_util_sub(s, v, mlxb_matmul(s, k, state))); /* b (v - S^T k) */
    }
    state = op_util_add(s, state, op_util_mul(s, kcol, upd));
    mlxb_array *q = la_token(s, in[0], i, d.b, d.hkv, g, d.dk); /* query heads grouped by KV head */
    outs[i] = mlxb_reshape(s, op_util_mul(s, mlxb_matmul(s, q, state), op_util_scalar(s, scale, ct)),
                           (int64_t[]){d.b, 1, d.hq * d.dv}, 3);
  }
  mlxb_array *y = d.t ? mlxb_concat(s, (const mlxb_array *const *)outs, (int)d.t, 1)
                      : mlxb_zeros(s, (int64_t[]){d.b, 0, d.hq * d.dv}, 3, ct);
  free(outs);
  int32_t st = op_output_dtype(c, 1);
  mlxb_dtype state_type = st == ONNX_UNDEFINED ? t : (mlxb_dtype)op_mlx_dtype(st);
  if (op_set_output(c, 0, mlxb_astype(s, y, t))) return -1;
  return op_set_output(c, 1, mlxb_astype(s, state, state_type));
}

static const op_def defs[] = {
    OP_ROW("com.microsoft", "LinearAttention", 1, 1, .inputs = {3, 6}, .outputs = {2, 2}, .dtypes = DT_F32 | DT_F16,
           .claim = claim_linear_attention, .lower = lower_linear_attention,
           .doc = "update_rule linear, gated, delta, gated_delta; decay per head or per key dimension, beta per head "
                  "or shared; GQA (q_num_heads a multiple of kv_num_heads); scale (0: 1/sqrt(d_k)); past_state "
                  "(zeros when absent). Tokens unrolled in order, float16 in float32: a decode step is a handful "
                  "of MLX operations, a prompt about ten per token (no chunked form yet). Declined: state_window"),
};

OPS_FAMILY(linear_attention, defs);
