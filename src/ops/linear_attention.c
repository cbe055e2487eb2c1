/* com.microsoft LinearAttention: the recurrent attention of Gated DeltaNet, RetNet, GLA and
 * (Delta)Net layers. Each KV head carries a state S [d_k, d_v], updated token by token:
 *   linear       S = S + k v^T
 *   gated        S = exp(g) S + k v^T                      (g per head, or per key dimension)
 *   delta        S = S + b k (v - S^T k)^T
 *   gated_delta  S = exp(g) S, then S = S + b k (v - S^T k)^T
 * and each query head reads o = scale q^T S from its KV head's updated state (query heads grouped
 * over KV heads as in GQA). A decode step and short prompts are unrolled token by token; longer
 * prompts take the chunked form (flash-linear-attention's, and ORT's chunked prefill), which sums the
 * same recurrence in another order with a graph that grows per chunk, not per token. Both compute in
 * float32 for half inputs, so the result is ORT's up to float rounding. Nothing reads an index from
 * the data. */
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

/* ---- token by token: a decode step, and prompts shorter than a chunk ------------------------- */

/* Token t of x [B, T, H * D] as [B, H, rows, cols] (a view). */
static mlxb_array *la_token(mlxb_scope *s, mlxb_array *x, int64_t t, int64_t b, int64_t h, int64_t rows, int64_t cols) {
  return mlxb_reshape(s, op_util_slice_axis(s, x, 1, t, t + 1, 1), (int64_t[]){b, h, rows, cols}, 4);
}

/* The recurrence unrolled in token order, about ten MLX operations a token. *y: [B, T, Hq * d_v];
 * *state: the state after the last token. 0, or -1 when out of memory. */
static int la_unrolled(mlxb_scope *s, const la_dims *d, int rule, mlxb_array *const *in, double scale, mlxb_array **y,
                       mlxb_array **state) {
  mlxb_dtype ct = mlxb_type(in[0]);
  int64_t g = d->hq / d->hkv, gate_cols = in[4] && mlxb_dim(in[4], 2) == d->hkv * d->dk ? d->dk : 1;
  mlxb_array *st = in[3] ? in[3] : mlxb_zeros(s, (int64_t[]){d->b, d->hkv, d->dk, d->dv}, 4, ct);
  mlxb_array **outs = malloc((size_t)(d->t ? d->t : 1) * sizeof *outs);
  if (!outs) return -1;
  int perm[4] = {0, 1, 3, 2};
  for (int64_t i = 0; i < d->t; i++) {
    mlxb_array *k = la_token(s, in[1], i, d->b, d->hkv, 1, d->dk), *v = la_token(s, in[2], i, d->b, d->hkv, 1, d->dv);
    mlxb_array *kcol = mlxb_transpose(s, k, perm, 4); /* [B, Hkv, d_k, 1] */
    if (la_gated(rule)) /* exp(g) per head or per key dimension: [B, Hkv, 1 or d_k, 1] */
      st = op_util_mul(s, st, op_util_exp(s, la_token(s, in[4], i, d->b, d->hkv, gate_cols, 1)));
    mlxb_array *upd = v;
    if (la_delta(rule)) {
      mlxb_array *beta = mlxb_dim(in[5], 2) == 1 ? mlxb_reshape(s, op_util_slice_axis(s, in[5], 1, i, i + 1, 1),
                                                                (int64_t[]){d->b, 1, 1, 1}, 4)
                                                 : la_token(s, in[5], i, d->b, d->hkv, 1, 1);
      upd = op_util_mul(s, beta, op_util_sub(s, v, mlxb_matmul(s, k, st))); /* b (v - S^T k) */
    }
    st = op_util_add(s, st, op_util_mul(s, kcol, upd));
    mlxb_array *q = la_token(s, in[0], i, d->b, d->hkv, g, d->dk); /* query heads grouped by KV head */
    outs[i] = mlxb_reshape(s, op_util_mul(s, mlxb_matmul(s, q, st), op_util_scalar(s, scale, ct)),
                           (int64_t[]){d->b, 1, d->hq * d->dv}, 3);
  }
  *y = d->t ? mlxb_concat(s, (const mlxb_array *const *)outs, (int)d->t, 1)
            : mlxb_zeros(s, (int64_t[]){d->b, 0, d->hq * d->dv}, 3, ct);
  *state = st;
  free(outs);
  return 0;
}

/* ---- chunked: prompts of at least one chunk ------------------------------------------------------
 * Within a chunk, with S0 the state before it and G_i = g_1 + ... + g_i the decay summed up to token
 * i (0 when not gated; per head or per key dimension, elementwise), the state after token i is
 *   S_i = e^{G_i} S0 + sum_{j<=i} e^{G_i - G_j} k_j u_j^T
 * with u_j = v_j for linear and gated, and for the delta rules u_j = b_j (v_j - (e^{g_j} S_{j-1})^T k_j).
 * Written out, the delta rules' u solve a unit lower-triangular system per chunk,
 *   u_i + b_i sum_{j<i} (k_i^T e^{G_i - G_j} k_j) u_j = b_i v_i - b_i (e^{G_i} k_i)^T S0,
 * so u = U' - W S0 with T = (I + L)^-1, L_ij = b_i k_i^T e^{G_i - G_j} k_j (j < i), U' = T diag(b) V and
 * W = T diag(b) e^{G} K (the WY form of DeltaNet; Gated DeltaNet's with the decay). Then
 *   o_i = scale ((e^{G_i} q_i)^T S0 + sum_{j<=i} (q_i^T e^{G_i - G_j} k_j) u_j)
 *   S_C = e^{G_C} S0 + sum_j (e^{G_C - G_j} k_j) u_j^T.
 * All of it but S0 is known for every chunk at once, so the O(C^2) work is batched over the chunks
 * and only the carry of S0 (u and S_C) loops over them: O(C) + O(T / C) MLX operations a prompt.
 * Every decay factor e^{G_i - G_j} is the product of the tokens' own factors e^{g} over the span, as
 * the recurrence applies them: never e^{-G} (which overflows for strong decay) nor the difference of
 * two long sums (which cancels); spans running backwards are set to 1, not exponentiated, before they
 * are zeroed, so strong decay underflows to 0 and no inf or NaN appears. T is padded with zero tokens
 * to whole chunks: a zero token (k = v = q = 0, g = 0, b = 0) leaves the state as it is, and it comes
 * after every real token, so neither a real output nor the final state can see it. */
enum {
  LA_CHUNK = 64, /* tokens per chunk */
  /* ... with decay per key dimension, whose pairwise factors take C d_k values a token: a smaller
   * chunk keeps them (and a prompt's memory) 4 times smaller, for 4 times the chunks to carry */
  LA_CHUNK_PER_DIM = 16,
  /* Runs of fewer tokens are unrolled (a decode step is one): one chunk costs about 40 MLX operations
   * (linear, gated) or 490 (the delta rules: the triangular solve is most of it), an unrolled token
   * about 15 or 26, so from about 20 tokens on the chunked form builds the smaller graph. */
  LA_CHUNKED_MIN = 24,
};

typedef struct la_chunks {
  int64_t n, c;      /* chunks, tokens per chunk (C) */
  bool per_dim;      /* decay per key dimension */
  mlxb_array *q;     /* [B, Hkv, N, g, C, d_k]: query heads grouped by KV head */
  mlxb_array *k, *v; /* [B, Hkv, N, C, d_k or d_v] */
  mlxb_array *beta;  /* [B, Hkv or 1, N, C, 1]; NULL unless a delta rule */
  mlxb_array *gate;  /* [B, Hkv, N, 1 or d_k, C]: log decay; NULL unless gated */
} la_chunks;

typedef struct la_decay { /* products of e^g over spans of a chunk; all NULL when not gated */
  mlxb_array *pair;  /* [B, Hkv, N, 1, C, C]: e^{G_i - G_j} for i >= j, 0 above (decay per head) */
  mlxb_array *keys;  /* [B, Hkv, N, C, C, d_k]: e^{G_i - G_j} k_j in row i (decay per key dimension) */
  mlxb_array *head;  /* [B, Hkv, N, C, 1 or d_k]: e^{G_i} */
  mlxb_array *tail;  /* [B, Hkv, N, C, 1 or d_k]: e^{G_C - G_j} */
  mlxb_array *whole; /* [B, Hkv, N, 1 or d_k, 1]: e^{G_C} */
} la_decay;

/* x [B, T, ...] in whole chunks: T padded with zero tokens to N C, split as [B, N, C, split...] and
 * transposed by perm. */
static mlxb_array *la_chunk(mlxb_scope *s, mlxb_array *x, const la_dims *d, const la_chunks *c, const int64_t *split,
                            int n_split, const int *perm) {
  int64_t dims[6] = {d->b, c->n, c->c};
  for (int i = 0; i < n_split; i++) dims[3 + i] = split[i];
  if (c->n * c->c > d->t) x = mlxb_pad_axis(s, x, 1, c->n * c->c - d->t);
  return mlxb_transpose(s, mlxb_reshape(s, x, dims, 3 + n_split), perm, 3 + n_split);
}

static void la_chunks_init(mlxb_scope *s, const la_dims *d, mlxb_array *const *in, la_chunks *x) {
  int64_t g = d->hq / d->hkv;
  x->per_dim = in[4] && mlxb_dim(in[4], 2) == d->hkv * d->dk && d->dk != 1; /* d_k 1: the same as per head */
  x->c = x->per_dim ? LA_CHUNK_PER_DIM : LA_CHUNK;
  x->n = (d->t + x->c - 1) / x->c;
  const int heads[5] = {0, 3, 1, 2, 4}; /* [B, N, C, H, D] -> [B, H, N, C, D] */
  x->q = la_chunk(s, in[0], d, x, (int64_t[]){d->hkv, g, d->dk}, 3, (const int[]){0, 3, 1, 4, 2, 5});
  x->k = la_chunk(s, in[1], d, x, (int64_t[]){d->hkv, d->dk}, 2, heads);
  x->v = la_chunk(s, in[2], d, x, (int64_t[]){d->hkv, d->dv}, 2, heads);
  x->gate = in[4] ? la_chunk(s, in[4], d, x, (int64_t[]){d->hkv, mlxb_dim(in[4], 2) / d->hkv}, 2,
                             (const int[]){0, 3, 1, 4, 2})
                  : NULL;
  x->beta = in[5] ? la_chunk(s, in[5], d, x, (int64_t[]){mlxb_dim(in[5], 2), 1}, 2, heads) : NULL;
}

/* e^{G_i - G_j} = a_{j+1} ... a_i with a = e^g [.., C]: a_i placed in row i below the diagonal and
 * 1 elsewhere, multiplied down the rows, then the upper triangle (products of nothing) zeroed. */
static mlxb_array *la_pair_decay(mlxb_scope *s, mlxb_array *a) {
  int64_t dims[6];
  if (!a) return NULL; /* a failed op upstream (dims would stay unset): the scope holds its error */
  mlxb_shape(a, dims);
  dims[5] = dims[4];
  mlxb_array *rows = mlxb_broadcast_to(s, mlxb_expand_dims(s, a, (const int[]){5}, 1), dims, 6);
  mlxb_array *below = mlxb_binary(s, MLXB_GREATER, op_util_iota(s, 0, dims[4], 4, 6, MLXB_I32),
                                  op_util_iota(s, 0, dims[4], 5, 6, MLXB_I32));
  mlxb_array *span = mlxb_where(s, below, rows, op_util_scalar(s, 1.0, mlxb_type(a)));
  return mlxb_tril(s, mlxb_cumulative(s, MLXB_RPROD, span, 4, false, true), 0);
}

static void la_decay_init(mlxb_scope *s, const la_chunks *x, la_decay *e) {
  mlxb_array *gate = x->gate;
  *e = (la_decay){0};
  if (!gate) return;
  const int cols[5] = {0, 1, 2, 4, 3}; /* [.., gc, C] -> [.., C, gc] */
  mlxb_array *a = op_util_exp(s, gate); /* the only exp: of each token's own gate */
  e->pair = la_pair_decay(s, a);
  if (x->per_dim) { /* made once: the queries' and the keys' scores read it */
    const int last[6] = {0, 1, 2, 4, 5, 3};   /* [.., d_k, i, j] -> [.., i, j, d_k] */
    e->keys = op_util_mul(s, mlxb_transpose(s, e->pair, last, 6), mlxb_expand_dims(s, x->k, (const int[]){3}, 1));
    e->pair = NULL;
  }
  e->head = mlxb_transpose(s, mlxb_cumulative(s, MLXB_RPROD, a, 4, false, true), cols, 5);
  e->tail = mlxb_transpose(s, mlxb_cumulative(s, MLXB_RPROD, a, 4, true, false), cols, 5);
  e->whole = mlxb_reduce(s, MLXB_RPROD, a, (const int[]){4}, 1, true);
}

/* sum_d x_id k_jd e^{G_id - G_jd} for i >= j, 0 above: x [B, Hkv, N, r, C, d_k] (r query heads, or 1
 * for the keys), k [B, Hkv, N, C, d_k]; [B, Hkv, N, r, C, C]. Decay per key dimension cannot be
 * factored into x and k without e^{-G} (which overflows), so it is applied pairwise: for each i, a
 * [C, d_k] matrix of decayed keys times x_i (C times the memory of the keys). */
static mlxb_array *la_scores(mlxb_scope *s, mlxb_array *x, mlxb_array *k, const la_decay *e) {
  if (e->keys) {
    const int last[6] = {0, 1, 2, 4, 5, 3}, back[6] = {0, 1, 2, 5, 3, 4};
    return mlxb_transpose(s, mlxb_matmul(s, e->keys, mlxb_transpose(s, x, last, 6)), back, 6);
  }
  mlxb_array *k5 = mlxb_expand_dims(s, k, (const int[]){3}, 1); /* [B, Hkv, N, 1, C, d_k] */
  const int kt[6] = {0, 1, 2, 3, 5, 4};
  mlxb_array *qk = mlxb_matmul(s, x, mlxb_transpose(s, k5, kt, 6));
  return e->pair ? op_util_mul(s, qk, e->pair) : mlxb_tril(s, qk, 0);
}

/* (I + L)^-1 for strictly lower-triangular L [..., C, C], by forward substitution over the columns:
 * row j of the inverse is final once the columns before it are eliminated, and then leaves the rows
 * below it. C steps of batched ops whatever T is; no series in powers of L, whose terms can grow
 * without bound. */
static mlxb_array *la_unit_lower_inverse(mlxb_scope *s, mlxb_array *l) {
  int64_t dims[5];
  if (!l) return NULL; /* a failed op upstream (dims[4] bounds the loop): the scope holds its error */
  mlxb_shape(l, dims);
  mlxb_array *t = mlxb_broadcast_to(s, mlxb_eye(s, dims[4], dims[4], 0, mlxb_type(l)), dims, 5);
  for (int64_t j = 0; j + 1 < dims[4]; j++) /* the last column of L is zero */
    t = op_util_sub(s, t, op_util_mul(s, op_util_slice_axis(s, l, 4, j, j + 1, 1),
                                      op_util_slice_axis(s, t, 3, j, j + 1, 1)));
  return t;
}

/* The delta rules' W = T diag(b) e^{G} K and U' = T diag(b) V of every chunk ([B, Hkv, N, C, d]). */
static void la_wy(mlxb_scope *s, const la_chunks *x, const la_decay *e, mlxb_array **w, mlxb_array **u) {
  int64_t dims[6];
  mlxb_array *kk = la_scores(s, mlxb_expand_dims(s, x->k, (const int[]){3}, 1), x->k, e);
  *w = *u = NULL;
  if (!kk) return; /* a failed op upstream (dims would stay unset): the scope holds its error */
  mlxb_shape(kk, dims);
  mlxb_array *l = mlxb_tril(s, op_util_mul(s, x->beta, mlxb_reshape(s, kk, (int64_t[]){dims[0], dims[1], dims[2],
                                                                                       dims[4], dims[5]}, 5)), -1);
  mlxb_array *t = la_unit_lower_inverse(s, l);
  mlxb_array *bk = op_util_mul(s, x->beta, e->head ? op_util_mul(s, x->k, e->head) : x->k);
  *w = mlxb_matmul(s, t, bk);
  *u = mlxb_matmul(s, t, op_util_mul(s, x->beta, x->v));
}

/* Chunk i of x [B, Hkv, N, ...], the chunk axis kept. */
static mlxb_array *la_at(mlxb_scope *s, mlxb_array *x, int64_t i) { return op_util_slice_axis(s, x, 2, i, i + 1, 1); }

typedef struct la_carry {
  mlxb_array *kt;      /* [B, Hkv, N, d_k, C]: (e^{G_C - G_j} k_j)^T */
  mlxb_array *w, *u;   /* the delta rules' W [B, Hkv, N, C, d_k] and U' [B, Hkv, N, C, d_v]; NULL otherwise */
  mlxb_array *v;       /* [B, Hkv, N, C, d_v]: the values, u itself for linear and gated */
  mlxb_array *whole;   /* e^{G_C} or NULL */
} la_carry;

/* The loop over chunks: *before gets the state before each chunk [B, Hkv, N, d_k, d_v], *u each
 * chunk's u [B, Hkv, N, C, d_v], *state the state after the last. A few operations a chunk. 0, or -1
 * when out of memory. */
static int la_carry_state(mlxb_scope *s, const la_carry *a, int64_t n, mlxb_array **state, mlxb_array **before,
                          mlxb_array **u) {
  mlxb_array **sts = malloc((size_t)n * 2 * sizeof *sts), **us = sts + n;
  if (!sts) return -1;
  mlxb_array *kv = a->w ? NULL : mlxb_matmul(s, a->kt, a->v); /* known for every chunk at once */
  mlxb_array *st = *state;
  for (int64_t i = 0; i < n; i++) {
    sts[i] = st;
    us[i] = a->w ? op_util_sub(s, la_at(s, a->u, i), mlxb_matmul(s, la_at(s, a->w, i), st)) : NULL;
    mlxb_array *add = a->w ? mlxb_matmul(s, la_at(s, a->kt, i), us[i]) : la_at(s, kv, i);
    st = op_util_add(s, a->whole ? op_util_mul(s, la_at(s, a->whole, i), st) : st, add);
  }
  *before = mlxb_concat(s, (const mlxb_array *const *)sts, (int)n, 2);
  *u = a->w ? mlxb_concat(s, (const mlxb_array *const *)us, (int)n, 2) : a->v;
  *state = st;
  free(sts);
  return 0;
}

/* o [B, Hkv, N, g, C, d_v] as the output [B, T, Hq * d_v] (the padding tokens dropped). */
static mlxb_array *la_unchunk(mlxb_scope *s, const la_dims *d, const la_chunks *x, mlxb_array *o) {
  o = mlxb_transpose(s, o, (const int[]){0, 2, 4, 1, 3, 5}, 6);
  o = mlxb_reshape(s, o, (int64_t[]){d->b, x->n * x->c, d->hq * d->dv}, 3);
  return op_util_slice_axis(s, o, 1, 0, d->t, 1);
}

/* The chunked form (above); the same results as la_unrolled. 0, or -1 when out of memory. */
static int la_chunked(mlxb_scope *s, const la_dims *d, int rule, mlxb_array *const *in, double scale, mlxb_array **y,
                      mlxb_array **state) {
  la_chunks x;
  la_decay e;
  la_chunks_init(s, d, in, &x);
  la_decay_init(s, &x, &e);
  const int kt[5] = {0, 1, 2, 4, 3};
  la_carry a = {.kt = mlxb_transpose(s, e.tail ? op_util_mul(s, x.k, e.tail) : x.k, kt, 5), .v = x.v,
                .whole = e.whole};
  if (la_delta(rule)) la_wy(s, &x, &e, &a.w, &a.u);
  mlxb_array *st = in[3] ? in[3] : mlxb_zeros(s, (int64_t[]){d->b, d->hkv, d->dk, d->dv}, 4, mlxb_type(in[0]));
  mlxb_array *before, *u;
  *state = mlxb_reshape(s, st, (int64_t[]){d->b, d->hkv, 1, d->dk, d->dv}, 5);
  if (la_carry_state(s, &a, x.n, state, &before, &u)) return -1;
  *state = mlxb_reshape(s, *state, (int64_t[]){d->b, d->hkv, d->dk, d->dv}, 4);
  const int g_axis[1] = {3};
  mlxb_array *qd = e.head ? op_util_mul(s, x.q, mlxb_expand_dims(s, e.head, g_axis, 1)) : x.q;
  mlxb_array *o = op_util_add(s, mlxb_matmul(s, qd, mlxb_expand_dims(s, before, g_axis, 1)),
                              mlxb_matmul(s, la_scores(s, x.q, x.k, &e), mlxb_expand_dims(s, u, g_axis, 1)));
  *y = la_unchunk(s, d, &x, op_util_mul(s, o, op_util_scalar(s, scale, mlxb_type(in[0]))));
  return 0;
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
  mlxb_array *y, *state;
  int rc = d.t >= LA_CHUNKED_MIN ? la_chunked(s, &d, rule, in, scale, &y, &state)
                                 : la_unrolled(s, &d, rule, in, scale, &y, &state);
  if (rc) return op_fail(c, "out of memory");
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
                  "(zeros when absent); float16 computes in float32. A decode step and runs of fewer than 24 tokens "
                  "are unrolled token by token (10 to 26 MLX operations a token); longer prompts take the chunked "
                  "form: chunks of 64 tokens (16 with decay per key dimension, whose pairwise decay takes C d_k "
                  "values a token), the intra-chunk attention and the delta rules' WY form (the triangular "
                  "system solved by forward substitution) batched over all chunks, only the state carried from "
                  "chunk to chunk in a loop, so a prompt builds O(C + T/C) operations. Decay factors are products "
                  "of per-token e^g (strong decay underflows to 0, never inf). Declined: state_window"),
};

OPS_FAMILY(linear_attention, defs);
