/* com.microsoft PagedAttention: vLLM-style attention over a block-paged KV cache, composed from MLX
 * ops with shapes fixed by the input shapes alone (no host reads, so a cluster holding it stays
 * compilable). New K/V rows are scattered into the cache at their slots; each query then attends
 * to its sequence's context, gathered page by page through the block table. ORT's CPU EP has no
 * kernel for this op; the semantics follow the contrib schema and the CUDA kernel. */
#include <math.h>
#include <string.h>

#include "ops/op_util.h"

/* Defined in rotary.c: rotates the first rot_dim channels of x's last axis. */
mlxb_array *rotary_embed(mlxb_scope *s, mlxb_array *x, mlxb_array *cos, mlxb_array *sin, int64_t rot_dim,
                         bool interleaved);

enum {
  PA_QUERY, PA_KEY, PA_VALUE, PA_KEY_CACHE, PA_VALUE_CACHE, PA_CU_SEQLENS, PA_PAST_SEQLENS, PA_BLOCK_TABLE,
  PA_COS, PA_SIN, PA_SLOT_MAPPING, PA_HEAD_SINK, PA_Q_NORM, PA_K_NORM, PA_K_SCALE, PA_V_SCALE, PA_METADATA
};

/* Sizes read from the input shapes. */
typedef struct pa_dims {
  int64_t tokens;      /* T: packed query tokens */
  int64_t batch;       /* B: sequences */
  int64_t heads;       /* Hq */
  int64_t kv_heads;    /* Hkv */
  int64_t head_size;   /* D */
  int64_t num_blocks;  /* NB */
  int64_t block_size;  /* BS */
  int64_t max_blocks;  /* M: block_table columns */
  int64_t context;     /* L = M * BS: longest context a sequence can address */
} pa_dims;

/* ---- small helpers ------------------------------------------------------------------------ */

static mlxb_array *pa_i32(mlxb_scope *s, int64_t v) { return mlxb_scalar_i64(s, v, MLXB_I32); }

static mlxb_array *pa_reshape(mlxb_scope *s, mlxb_array *x, int rank, int64_t d0, int64_t d1, int64_t d2,
                              int64_t d3) {
  int64_t dims[4] = {d0, d1, d2, d3};
  return mlxb_reshape(s, x, dims, rank);
}

static mlxb_array *pa_slice_axis(mlxb_scope *s, mlxb_array *x, int axis, int64_t start, int64_t stop) {
  int64_t lo[4] = {0, 0, 0, 0}, hi[4], st[4] = {1, 1, 1, 1};
  if (!x || mlxb_ndim(x) > 4) return NULL;
  mlxb_shape(x, hi);
  lo[axis] = start;
  hi[axis] = stop;
  return mlxb_slice(s, x, lo, hi, st);
}

/* clip(x, lo, hi) for int32 index arrays, so that no gather or scatter leaves its array. */
static mlxb_array *pa_clamp(mlxb_scope *s, mlxb_array *x, int64_t lo, int64_t hi) {
  return mlxb_clip(s, x, pa_i32(s, lo), pa_i32(s, hi < lo ? lo : hi));
}

static mlxb_array *pa_bin(mlxb_scope *s, mlxb_binary_op op, mlxb_array *a, mlxb_array *b) {
  return mlxb_binary(s, op, a, b);
}

static mlxb_array *pa_expand(mlxb_scope *s, mlxb_array *x, int axis) { return mlxb_expand_dims(s, x, &axis, 1); }

/* ---- claim -------------------------------------------------------------------------------- */

static bool pa_cache_dtype_ok(const char *name, int32_t dtype) {
  if (!name || !*name) return true;
  return (dtype == ONNX_FLOAT16 && !strcmp(name, "float16")) || (dtype == ONNX_BFLOAT16 && !strcmp(name, "bfloat16"));
}

static bool pa_rank_is(const claim_ctx *c, int i, int rank) {
  const ir_value *v = claim_input(c, i);
  return !v || v->rank < 0 || v->rank == rank;
}

static bool claim_paged_attention(claim_ctx *c, const op_def *def) {
  const ir_node *n = c->node;
  int32_t t = claim_input_dtype(c, PA_QUERY);
  int64_t heads = ir_attr_int(n, "num_heads", 0), kv_heads = ir_attr_int(n, "kv_num_heads", 0);
  if (heads <= 0 || kv_heads <= 0 || heads % kv_heads)
    return claim_decline(c, "num_heads must be a positive multiple of kv_num_heads");
  if (heads > INT32_MAX) return claim_decline(c, "num_heads %lld is above int32", (long long)heads);
  if (strcmp(ir_attr_string(n, "kv_cache_layout", "SEPARATE"), "SEPARATE"))
    return claim_decline(c, "kv_cache_layout LATENT (multi-head latent attention) is not supported");
  if (ir_attr_int(n, "v_head_size", 0) != 0)
    return claim_decline(c, "v_head_size is only valid with the LATENT layout");
  if (ir_attr_int(n, "rotary_offset", 0) != 0) return claim_decline(c, "rotary_offset is not supported");
  if (ir_attr_int(n, "local_window_size", -1) != -1)
    return claim_decline(c, "local_window_size (sliding window) is not supported: its bound is not validated in ORT");
  if (strcmp(ir_attr_string(n, "k_quant_type", "NONE"), "NONE") ||
      strcmp(ir_attr_string(n, "v_quant_type", "NONE"), "NONE") || claim_input(c, PA_K_SCALE) ||
      claim_input(c, PA_V_SCALE))
    return claim_decline(c, "quantized KV caches are not supported");
  if (!claim_input(c, PA_VALUE_CACHE)) return claim_decline(c, "value_cache is absent");
  if (claim_input_dtype(c, PA_KEY_CACHE) != t || claim_input_dtype(c, PA_VALUE_CACHE) != t)
    return claim_decline(c, "cache dtype differs from the query's (quantized caches are not supported)");
  if (!pa_cache_dtype_ok(ir_attr_string(n, "k_cache_dtype", ""), t) ||
      !pa_cache_dtype_ok(ir_attr_string(n, "v_cache_dtype", ""), t))
    return claim_decline(c, "k_cache_dtype/v_cache_dtype name a packed or quantized type");
  if ((claim_input(c, PA_KEY) != NULL) != (claim_input(c, PA_VALUE) != NULL))
    return claim_decline(c, "key and value must both be present or both absent (packed QKV)");
  if ((claim_input(c, PA_Q_NORM) != NULL) != (claim_input(c, PA_K_NORM) != NULL))
    return claim_decline(c, "q_norm_weight and k_norm_weight must be given together");
  if (ir_attr_int(n, "do_rotary", 0) && (!claim_input(c, PA_COS) || !claim_input(c, PA_SIN)))
    return claim_decline(c, "do_rotary without cos_cache and sin_cache");
  for (int i = PA_CU_SEQLENS; i <= PA_SLOT_MAPPING; i++)
    if (i != PA_COS && i != PA_SIN && claim_input(c, i) && claim_input_dtype(c, i) != ONNX_INT32)
      return claim_decline(c, "input %d is not int32", i);
  if (!pa_rank_is(c, PA_QUERY, 2) || !pa_rank_is(c, PA_KEY_CACHE, 4) || !pa_rank_is(c, PA_VALUE_CACHE, 4) ||
      !pa_rank_is(c, PA_CU_SEQLENS, 1) || !pa_rank_is(c, PA_PAST_SEQLENS, 1) || !pa_rank_is(c, PA_BLOCK_TABLE, 2))
    return claim_decline(c, "an input has an unexpected rank");
  return true;
}

/* ---- lowering ----------------------------------------------------------------------------- */

/* Splits query (or packed QKV) into q [T, Hq, D], k and v [T, Hkv, D]; fills the dims read from the
 * query and cache shapes, with the checks ORT's paged_attention_helper makes. */
static int pa_inputs(op_ctx *c, pa_dims *d, mlxb_array **q, mlxb_array **k, mlxb_array **v) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  *q = *k = *v = NULL;
  mlxb_array *query = op_input(c, PA_QUERY), *kc = op_input(c, PA_KEY_CACHE), *vc = op_input(c, PA_VALUE_CACHE);
  mlxb_array *cu = op_input(c, PA_CU_SEQLENS), *past = op_input(c, PA_PAST_SEQLENS), *bt = op_input(c, PA_BLOCK_TABLE);
  if (!kc || !vc || !cu || !past || !bt) return op_fail(c, "a required input is absent");
  d->heads = ir_attr_int(n, "num_heads", 0);
  d->kv_heads = ir_attr_int(n, "kv_num_heads", 0);
  if (mlxb_ndim(query) != 2) return op_fail(c, "query must be 2-D (token_count, hidden)");
  d->tokens = mlxb_dim(query, 0);
  bool packed = !op_has_input(c, PA_KEY);
  int64_t width = mlxb_dim(query, 1);
  d->head_size = width / (packed ? d->heads + 2 * d->kv_heads : d->heads);
  int64_t qh = d->heads * d->head_size, kvh = d->kv_heads * d->head_size;
  if (d->head_size <= 0 || d->head_size % 8) return op_fail(c, "head_size must be a positive multiple of 8");
  if (packed) {
    if (width != qh + 2 * kvh) return op_fail(c, "packed QKV width is not (num_heads + 2 * kv_num_heads) * head_size");
    *q = pa_slice_axis(s, query, 1, 0, qh);
    *k = pa_slice_axis(s, query, 1, qh, qh + kvh);
    *v = pa_slice_axis(s, query, 1, qh + kvh, qh + 2 * kvh);
  } else {
    *q = query;
    *k = op_input(c, PA_KEY);
    *v = op_input(c, PA_VALUE);
    if (width != qh) return op_fail(c, "query width is not a multiple of num_heads");
    for (int i = 0; i < 2; i++) {
      mlxb_array *x = i ? *v : *k;
      if (mlxb_ndim(x) != 2 || mlxb_dim(x, 0) != d->tokens || mlxb_dim(x, 1) != kvh)
        return op_fail(c, "key/value must be (token_count, kv_num_heads * head_size)");
    }
  }
  if (mlxb_ndim(kc) != 4 || mlxb_ndim(vc) != 4) return op_fail(c, "key_cache/value_cache must be 4-D");
  d->num_blocks = mlxb_dim(kc, 0);
  d->block_size = mlxb_dim(kc, 1);
  if (d->block_size < 16 || (d->block_size & (d->block_size - 1)))
    return op_fail(c, "block_size must be a power of two and at least 16");
  for (int i = 0; i < 4; i++) {
    int64_t want = i == 0 ? d->num_blocks : i == 1 ? d->block_size : i == 2 ? d->kv_heads : d->head_size;
    if (mlxb_dim(kc, i) != want || mlxb_dim(vc, i) != want)
      return op_fail(c, "caches must be (num_blocks, block_size, kv_num_heads, head_size) and alike");
  }
  if (mlxb_ndim(cu) != 1 || mlxb_dim(cu, 0) < 2)
    return op_fail(c, "cumulative_sequence_length must be (batch_size + 1)");
  d->batch = mlxb_dim(cu, 0) - 1;
  if (mlxb_ndim(past) != 1 || mlxb_dim(past, 0) != d->batch) return op_fail(c, "past_seqlens must be (batch_size)");
  if (mlxb_ndim(bt) != 2 || mlxb_dim(bt, 0) != d->batch)
    return op_fail(c, "block_table must be (batch_size, max_blocks)");
  d->max_blocks = mlxb_dim(bt, 1);
  d->context = d->max_blocks * d->block_size;
  *q = pa_reshape(s, *q, 3, d->tokens, d->heads, d->head_size, 0);
  *k = pa_reshape(s, *k, 3, d->tokens, d->kv_heads, d->head_size, 0);
  *v = pa_reshape(s, *v, 3, d->tokens, d->kv_heads, d->head_size, 0);
  return op_check(c);
}

/* Per-token sequence index and absolute position: seq[t] counts the sequences that end at or
 * before t; pos[t] = past[seq] + (t - cu[seq]). */
static void pa_token_positions(mlxb_scope *s, const pa_dims *d, mlxb_array *cu, mlxb_array *past, mlxb_array **seq,
                               mlxb_array **pos) {
  mlxb_array *tok = mlxb_arange(s, 0, (double)d->tokens, 1, MLXB_I32);
  mlxb_array *ends = pa_slice_axis(s, cu, 0, 1, d->batch + 1);
  mlxb_array *after = mlxb_binary(s, MLXB_GREATER_EQUAL, pa_expand(s, tok, 1), pa_expand(s, ends, 0));
  int axis = 1;
  mlxb_array *idx = mlxb_reduce(s, MLXB_RSUM, mlxb_astype(s, after, MLXB_I32), &axis, 1, false);
  idx = pa_clamp(s, mlxb_astype(s, idx, MLXB_I32), 0, d->batch - 1);
  mlxb_array *offset = pa_bin(s, MLXB_SUB, tok, mlxb_take(s, cu, idx, 0));
  *seq = idx;
  *pos = pa_bin(s, MLXB_ADD, mlxb_take(s, past, idx, 0), offset);
}

/* RMS-normalizes each head (q_norm_weight/k_norm_weight), then applies the rotary embedding at
 * each token's position; both before K is written to the cache, as the schema orders them. */
static int pa_prepare_qk(op_ctx *c, const pa_dims *d, mlxb_array *pos, mlxb_array **q, mlxb_array **k) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  if (op_has_input(c, PA_Q_NORM)) {
    mlxb_array *qw = op_input(c, PA_Q_NORM), *kw = op_input(c, PA_K_NORM);
    if (mlxb_ndim(qw) != 1 || mlxb_dim(qw, 0) != d->head_size || mlxb_ndim(kw) != 1 || mlxb_dim(kw, 0) != d->head_size)
      return op_fail(c, "q_norm_weight/k_norm_weight must be (head_size)");
    float eps = ir_attr_float(n, "qk_norm_epsilon", 1e-6f);
    if (!(eps > 0.0f) || !isfinite(eps)) return op_fail(c, "qk_norm_epsilon must be a positive finite number");
    *q = mlxb_rms_norm(s, *q, qw, eps);
    *k = mlxb_rms_norm(s, *k, kw, eps);
  }
  if (!ir_attr_int(n, "do_rotary", 0)) return op_check(c);
  mlxb_array *cos = op_input(c, PA_COS), *sin = op_input(c, PA_SIN);
  if (!cos || !sin || mlxb_ndim(cos) != 2 || mlxb_ndim(sin) != 2 || mlxb_dim(cos, 0) != mlxb_dim(sin, 0) ||
      mlxb_dim(cos, 1) != mlxb_dim(sin, 1))
    return op_fail(c, "cos_cache and sin_cache must be 2-D and of one shape");
  int64_t rot_dim = 2 * mlxb_dim(cos, 1);
  if (rot_dim <= 0 || rot_dim > d->head_size) return op_fail(c, "cos/sin cache width exceeds head_size / 2");
  mlxb_array *row = pa_clamp(s, pos, 0, mlxb_dim(cos, 0) - 1);
  mlxb_array *ct = pa_expand(s, mlxb_take(s, cos, row, 0), 1), *st = pa_expand(s, mlxb_take(s, sin, row, 0), 1);
  bool interleaved = ir_attr_int(n, "rotary_interleaved", 0) != 0;
  *q = rotary_embed(s, *q, ct, st, rot_dim, interleaved);
  *k = rotary_embed(s, *k, ct, st, rot_dim, interleaved);
  return op_check(c);
}

/* Writes x [T, Hkv, D] into cache [NB, BS, Hkv, D] at flat slots [T]. Slots outside the cache
 * (slot_mapping's -1 = "do not write") land in one spare row that is dropped afterwards. */
static mlxb_array *pa_write_cache(mlxb_scope *s, const pa_dims *d, mlxb_array *cache, mlxb_array *x,
                                  mlxb_array *slots) {
  int64_t rows = d->num_blocks * d->block_size;
  mlxb_array *flat = pa_reshape(s, cache, 3, rows, d->kv_heads, d->head_size, 0);
  int64_t lo[3] = {0, 0, 0}, hi[3] = {1, 0, 0};
  flat = mlxb_pad(s, flat, lo, hi, NULL, "constant");
  mlxb_array *inside = mlxb_binary(s, MLXB_LOGICAL_AND, mlxb_binary(s, MLXB_GREATER_EQUAL, slots, pa_i32(s, 0)),
                                   mlxb_binary(s, MLXB_LESS, slots, pa_i32(s, rows)));
  slots = mlxb_where(s, inside, slots, pa_i32(s, rows));
  const mlxb_array *idx[1] = {slots};
  int axis = 0;
  mlxb_array *upd = pa_reshape(s, x, 4, d->tokens, 1, d->kv_heads, d->head_size);
  flat = mlxb_scatter(s, MLXB_SCATTER_SET, flat, idx, 1, upd, &axis);
  flat = pa_slice_axis(s, flat, 0, 0, rows);
  return pa_reshape(s, flat, 4, d->num_blocks, d->block_size, d->kv_heads, d->head_size);
}

/* Flat slot of every new token: slot_mapping when given, else derived from the block table. */
static mlxb_array *pa_slots(op_ctx *c, const pa_dims *d, mlxb_array *seq, mlxb_array *pos) {
  mlxb_scope *s = op_scope(c);
  if (op_has_input(c, PA_SLOT_MAPPING)) {
    mlxb_array *sm = op_input(c, PA_SLOT_MAPPING);
    if (mlxb_ndim(sm) != 1 || mlxb_dim(sm, 0) != d->tokens) return NULL;
    return sm;
  }
  mlxb_array *bs = pa_i32(s, d->block_size);
  /* Tokens past cu[batch] belong to no sequence: they write nothing. */
  mlxb_array *tok = mlxb_arange(s, 0, (double)d->tokens, 1, MLXB_I32);
  mlxb_array *end = pa_slice_axis(s, op_input(c, PA_CU_SEQLENS), 0, d->batch, d->batch + 1);
  mlxb_array *owned = mlxb_binary(s, MLXB_LESS, tok, end);
  mlxb_array *col = pa_clamp(s, pa_bin(s, MLXB_FLOOR_DIVIDE, pos, bs), 0, d->max_blocks - 1);
  mlxb_array *flat_bt = pa_reshape(s, op_input(c, PA_BLOCK_TABLE), 1, d->batch * d->max_blocks, 0, 0, 0);
  mlxb_array *entry = pa_bin(s, MLXB_ADD, pa_bin(s, MLXB_MUL, seq, pa_i32(s, d->max_blocks)), col);
  mlxb_array *block = pa_clamp(s, mlxb_take(s, flat_bt, entry, 0), 0, d->num_blocks - 1);
  mlxb_array *slot = pa_bin(s, MLXB_ADD, pa_bin(s, MLXB_MUL, block, bs), pa_bin(s, MLXB_REMAINDER, pos, bs));
  return mlxb_where(s, owned, slot, pa_i32(s, -1));
}

/* How queries are grouped for the attention product: per sequence (G = B groups of R = T rows,
 * row r of group b = token cu[b] + r) or per token (G = T groups of one row). Both are exact; the
 * cheaper one by element count is used (per sequence for prefill, per token for batched decode). */
typedef struct pa_groups {
  int64_t g, r;
  mlxb_array *seq;    /* [G] sequence of each group */
  mlxb_array *token;  /* [G, R] token of each row, clamped into range */
  mlxb_array *qpos;   /* [G, R] absolute position of each row's query */
  mlxb_array *valid;  /* [G, R] row holds a real token of its sequence */
  mlxb_array *out_row;/* [T] row of the [G * R] result that holds token t */
} pa_groups;

static void pa_group(mlxb_scope *s, const pa_dims *d, mlxb_array *cu, mlxb_array *past, mlxb_array *seq,
                     mlxb_array *pos, pa_groups *g) {
  /* Elements of the scores plus the gathered K/V context, per grouping. */
  double kv_row = 2.0 * d->kv_heads * d->head_size;
  double per_seq = (double)d->batch * d->context * ((double)d->tokens * d->heads + kv_row);
  double per_tok = (double)d->tokens * d->context * (d->heads + kv_row);
  mlxb_array *starts = pa_slice_axis(s, cu, 0, 0, d->batch);
  mlxb_array *tok = mlxb_arange(s, 0, (double)d->tokens, 1, MLXB_I32);
  if (d->batch > 1 && per_tok < per_seq) {
    g->g = d->tokens;
    g->r = 1;
    g->seq = seq;
    g->token = pa_expand(s, tok, 1);
    g->qpos = pa_expand(s, pos, 1);
    g->valid = mlxb_binary(s, MLXB_GREATER_EQUAL, g->qpos, pa_i32(s, 0));
    g->out_row = tok;
    return;
  }
  g->g = d->batch;
  g->r = d->tokens;
  g->seq = mlxb_arange(s, 0, (double)d->batch, 1, MLXB_I32);
  mlxb_array *row = pa_expand(s, tok, 0);                                    /* [1, R] */
  mlxb_array *first = pa_expand(s, starts, 1);                                /* [B, 1] */
  mlxb_array *ends = pa_expand(s, pa_slice_axis(s, cu, 0, 1, d->batch + 1), 1);
  mlxb_array *token = pa_bin(s, MLXB_ADD, first, row);                       /* [B, R] */
  g->valid = mlxb_binary(s, MLXB_LESS, token, ends);
  g->token = pa_clamp(s, token, 0, d->tokens - 1);
  g->qpos = pa_bin(s, MLXB_ADD, pa_expand(s, past, 1), row);
  mlxb_array *offset = pa_clamp(s, pa_bin(s, MLXB_SUB, tok, mlxb_take(s, starts, seq, 0)), 0, d->tokens - 1);
  g->out_row = pa_bin(s, MLXB_ADD, pa_bin(s, MLXB_MUL, seq, pa_i32(s, d->tokens)), offset);
}

/* The context of every group, [G, Hkv, L, D]: its sequence's pages in block-table order, with the
 * rows past the sequence's length zeroed (unwritten cache memory may hold NaN, and 0 * NaN would
 * leak through the masked softmax). */
static mlxb_array *pa_context(mlxb_scope *s, const pa_dims *d, mlxb_array *cache, mlxb_array *blocks,
                              mlxb_array *kv_valid, int64_t groups) {
  mlxb_array *pages = mlxb_take(s, cache, blocks, 0); /* [G, M, BS, Hkv, D] */
  mlxb_array *ctx = pa_reshape(s, pages, 4, groups, d->context, d->kv_heads, d->head_size);
  ctx = mlxb_where(s, kv_valid, ctx, mlxb_scalar_f64(s, 0.0, mlxb_type(cache)));
  static const int perm[4] = {0, 2, 1, 3};
  return mlxb_transpose(s, ctx, perm, 4);
}

/* softmax(softcap * tanh(q k^T * scale / softcap)) v in float32, with an optional sink logit per
 * head in the denominator (the composition the fused kernel cannot do). */
static mlxb_array *pa_attend_softcap(mlxb_scope *s, const pa_dims *d, mlxb_array *q, mlxb_array *k, mlxb_array *v,
                                     mlxb_array *mask, mlxb_array *sinks, float scale, float softcap, int64_t groups,
                                     int64_t rows) {
  mlxb_dtype t = mlxb_type(q);
  int64_t rep = d->heads / d->kv_heads;
  mlxb_array *qf = mlxb_astype(s, pa_reshape(s, q, 4, groups, d->kv_heads, rep * rows, d->head_size), MLXB_F32);
  static const int kt[4] = {0, 1, 3, 2};
  mlxb_array *scores = mlxb_matmul(s, qf, mlxb_transpose(s, mlxb_astype(s, k, MLXB_F32), kt, 4));
  scores = pa_reshape(s, scores, 4, groups, d->heads, rows, d->context);
  mlxb_array *cap = mlxb_scalar_f64(s, softcap, MLXB_F32);
  scores = mlxb_binary(s, MLXB_MUL, scores, mlxb_scalar_f64(s, scale / softcap, MLXB_F32));
  scores = mlxb_binary(s, MLXB_MUL, mlxb_unary(s, MLXB_TANH, scores), cap);
  scores = mlxb_where(s, mask, scores, mlxb_scalar_f64(s, -INFINITY, MLXB_F32));
  int last = -1;
  if (sinks) {
    mlxb_array *sink = pa_reshape(s, mlxb_astype(s, sinks, MLXB_F32), 4, 1, d->heads, 1, 1);
    int64_t dims[4] = {groups, d->heads, rows, 1};
    const mlxb_array *parts[2] = {scores, mlxb_broadcast_to(s, sink, dims, 4)};
    scores = mlxb_softmax(s, mlxb_concat(s, parts, 2, 3), &last, 1, true);
    scores = pa_slice_axis(s, scores, 3, 0, d->context);
  } else {
    scores = mlxb_softmax(s, scores, &last, 1, true);
  }
  scores = pa_reshape(s, scores, 4, groups, d->kv_heads, rep * rows, d->context);
  mlxb_array *out = mlxb_matmul(s, scores, mlxb_astype(s, v, MLXB_F32));     /* [G, Hkv, rep*R, D] */
  out = pa_reshape(s, out, 4, groups, d->heads, rows, d->head_size);
  return mlxb_astype(s, out, t);
}

/* The lengths and block numbers a Run reads, held to what the caches and the block table hold:
 * every index below is also clipped, so none can leave its array, but a table or length that does
 * not fit fails the Run rather than attending to other rows. Block-table entries past a sequence's
 * length are padding and are not checked. */
static int pa_check_lengths(op_ctx *c, const pa_dims *d, mlxb_array *cu, mlxb_array *past, mlxb_array *bt) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *qlen = pa_bin(s, MLXB_SUB, pa_slice_axis(s, cu, 0, 1, d->batch + 1), pa_slice_axis(s, cu, 0, 0, d->batch));
  if (op_util_require_range(c, cu, 0, d->tokens + 1, "cumulative_sequence_length") ||
      op_util_require_range(c, qlen, 0, d->tokens + 1, "new tokens of a sequence (cumulative_sequence_length must "
                                                        "not decrease):") ||
      op_util_require_range(c, past, 0, d->context + 1, "past_seqlens"))
    return -1;
  mlxb_array *total = pa_bin(s, MLXB_ADD, past, qlen);
  if (op_util_require_range(c, total, 0, d->context + 1, "past + new tokens of a sequence (the block table's capacity):"))
    return -1;
  mlxb_array *need = pa_bin(s, MLXB_FLOOR_DIVIDE, pa_bin(s, MLXB_ADD, total, pa_i32(s, d->block_size - 1)),
                            pa_i32(s, d->block_size));
  mlxb_array *col = pa_expand(s, mlxb_arange(s, 0, (double)d->max_blocks, 1, MLXB_I32), 0);
  mlxb_array *bt32 = mlxb_astype(s, bt, MLXB_I32);
  mlxb_array *inside = mlxb_binary(s, MLXB_LOGICAL_AND, mlxb_binary(s, MLXB_GREATER_EQUAL, bt32, pa_i32(s, 0)),
                                   mlxb_binary(s, MLXB_LESS, bt32, pa_i32(s, d->num_blocks)));
  mlxb_array *ok = mlxb_binary(s, MLXB_LOGICAL_OR, mlxb_binary(s, MLXB_GREATER_EQUAL, col, pa_expand(s, need, 1)), inside);
  if (op_require(c, ok, bt32, "block_table entry {} out of range [0, %lld)", (long long)d->num_blocks)) return -1;
  if (!op_has_input(c, PA_SLOT_MAPPING)) return 0;
  return op_util_require_range(c, op_input(c, PA_SLOT_MAPPING), -1, d->num_blocks * d->block_size, "slot_mapping");
}

static int lower_paged_attention(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  pa_dims d;
  mlxb_array *q = NULL, *k = NULL, *v = NULL;
  if (pa_inputs(c, &d, &q, &k, &v)) return -1;
  mlxb_array *kc = op_input(c, PA_KEY_CACHE), *vc = op_input(c, PA_VALUE_CACHE);
  if (d.tokens == 0) { /* nothing to write or attend: the caches pass through */
    int64_t dims[2] = {0, d.heads * d.head_size};
    if (op_set_output(c, 0, mlxb_zeros(s, dims, 2, mlxb_type(q)))) return -1;
    return op_set_output(c, 1, kc) || op_set_output(c, 2, vc) ? -1 : 0;
  }
  mlxb_array *cu = op_input(c, PA_CU_SEQLENS), *past = op_input(c, PA_PAST_SEQLENS), *bt = op_input(c, PA_BLOCK_TABLE);
  if (pa_check_lengths(c, &d, cu, past, bt)) return -1;
  mlxb_array *seq, *pos;
  pa_token_positions(s, &d, cu, past, &seq, &pos);
  if (pa_prepare_qk(c, &d, pos, &q, &k)) return -1;

  mlxb_array *slots = pa_slots(c, &d, seq, pos);
  if (!slots) return op_fail(c, "slot_mapping must be (token_count)");
  kc = pa_write_cache(s, &d, kc, k, slots);
  vc = pa_write_cache(s, &d, vc, v, slots);

  pa_groups g;
  pa_group(s, &d, cu, past, seq, pos, &g);
  /* Context length of each group's sequence and which context rows hold keys. */
  mlxb_array *qlen = pa_bin(s, MLXB_SUB, pa_slice_axis(s, cu, 0, 1, d.batch + 1), pa_slice_axis(s, cu, 0, 0, d.batch));
  mlxb_array *total = mlxb_take(s, pa_bin(s, MLXB_ADD, past, qlen), g.seq, 0);              /* [G] */
  mlxb_array *kpos = mlxb_arange(s, 0, (double)d.context, 1, MLXB_I32);                     /* [L] */
  mlxb_array *kv_valid = mlxb_binary(s, MLXB_LESS, pa_expand(s, kpos, 0), pa_expand(s, total, 1)); /* [G, L] */
  mlxb_array *blocks = pa_clamp(s, mlxb_take(s, bt, g.seq, 0), 0, d.num_blocks - 1);       /* [G, M] */
  mlxb_array *kv_valid4 = pa_reshape(s, kv_valid, 4, g.g, d.context, 1, 1);
  mlxb_array *kctx = pa_context(s, &d, kc, blocks, kv_valid4, g.g);
  mlxb_array *vctx = pa_context(s, &d, vc, blocks, kv_valid4, g.g);

  /* Mask [G, 1, R, L]: the sequence's keys, bottom-right causal unless is_causal = 0. Rows that
   * hold no token keep key 0 so that no softmax row is empty (they are never read back). */
  mlxb_array *mask = pa_expand(s, kv_valid, 1);                                                  /* [G, 1, L] */
  if (ir_attr_int(n, "is_causal", 1))
    mask = mlxb_binary(s, MLXB_LOGICAL_AND, mask,
                       mlxb_binary(s, MLXB_LESS_EQUAL, pa_reshape(s, kpos, 3, 1, 1, d.context, 0),
                                   pa_expand(s, g.qpos, 2)));
  mask = mlxb_where(s, pa_expand(s, g.valid, 2), mask,
                    mlxb_binary(s, MLXB_EQUAL, pa_reshape(s, kpos, 3, 1, 1, d.context, 0), pa_i32(s, 0)));
  int64_t mdims[4] = {g.g, 1, g.r, d.context};
  mask = mlxb_broadcast_to(s, pa_expand(s, mask, 1), mdims, 4);

  mlxb_array *qg = mlxb_take(s, q, g.token, 0);                                                 /* [G, R, Hq, D] */
  static const int perm[4] = {0, 2, 1, 3};
  qg = mlxb_transpose(s, qg, perm, 4);                                                          /* [G, Hq, R, D] */
  float scale = ir_attr_float(n, "scale", 0.0f);
  if (scale == 0.0f) scale = 1.0f / sqrtf((float)d.head_size);
  float softcap = ir_attr_float(n, "softcap", 0.0f);
  mlxb_array *sinks = op_input(c, PA_HEAD_SINK);
  if (sinks && (mlxb_ndim(sinks) != 1 || mlxb_dim(sinks, 0) != d.heads))
    return op_fail(c, "head_sink must be (num_heads)");
  mlxb_array *out;
  if (softcap > 0.0f) {
    out = pa_attend_softcap(s, &d, qg, kctx, vctx, mask, sinks, scale, softcap, g.g, g.r);
  } else {
    if (sinks) sinks = mlxb_astype(s, sinks, mlxb_type(qg));
    out = mlxb_sdpa(s, qg, kctx, vctx, scale, "", mask, sinks);
  }
  out = mlxb_transpose(s, out, perm, 4);                                                        /* [G, R, Hq, D] */
  out = pa_reshape(s, out, 2, g.g * g.r, d.heads * d.head_size, 0, 0);
  out = mlxb_take(s, out, g.out_row, 0);
  if (op_set_output(c, 0, out)) return -1;
  if (op_set_output(c, 1, kc)) return -1;
  return op_set_output(c, 2, vc);
}

/* ---- the table ---------------------------------------------------------------------------- */

static const op_def defs[] = {
    OP_ROW("com.microsoft", "PagedAttention", 1, 1, .inputs = {1, 17}, .outputs = {1, 3}, .dtypes = DT_F16 | DT_BF16,
           .claim = claim_paged_attention, .lower = lower_paged_attention,
           .doc = "float16/bfloat16 with caches of the same dtype (SEPARATE layout); separate Q/K/V or packed QKV; "
                  "derived slots or slot_mapping (-1 skips the write); causal (bottom-right) or is_causal=0; "
                  "do_rotary (interleaved or half-split, partial rotary); scale, softcap, head_sink, q/k RMS norm. "
                  "Declined: LATENT layout, quantized caches (int8/fp8/int4, k/v_scale), local_window_size, "
                  "rotary_offset. attention_metadata is ignored (a hint). Shapes depend on input shapes only; the "
                  "caches are returned as updated copies. A block number, length or slot that does not fit the "
                  "caches fails the Run (block-table padding past a sequence's length is not checked)"),
};

OPS_FAMILY(paged_attention, defs);
