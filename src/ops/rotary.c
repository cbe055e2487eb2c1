/* Rotary position embeddings: ai.onnx RotaryEmbedding (opset 23) and com.microsoft
 * RotaryEmbedding. Both rotate pairs of a head's first rotary_embedding_dim channels by the
 * cos/sin rows picked by each token's position, and copy the remaining channels. The rotation
 * itself (rotary_embed) is shared with GroupQueryAttention's do_rotary in attention.c. */
#include <string.h>

#include "ops/op_util.h"
#include "ops/rotary.h"

/* ---- the rotation ------------------------------------------------------------------------- */

/* x[..., start:stop:step] on the last axis. */
static mlxb_array *rotary_slice_last(mlxb_scope *s, mlxb_array *x, int64_t start, int64_t stop, int64_t step) {
  return x ? op_util_slice_axis(s, x, mlxb_ndim(x) - 1, start, stop, step) : NULL;
}

/* Defined here, declared in rotary.h for attention.c. */
mlxb_array *rotary_embed(mlxb_scope *s, mlxb_array *x, mlxb_array *cos, mlxb_array *sin, int64_t rot_dim,
                         bool interleaved) {
  if (!x || !cos || !sin) return NULL;
  mlxb_dtype t = mlxb_type(x);
  mlxb_dtype ct = op_util_compute_type(t);
  int64_t head = mlxb_dim(x, -1), half = rot_dim / 2;
  mlxb_array *xc = op_util_cast(s, x, ct), *c = op_util_cast(s, cos, ct), *sn = op_util_cast(s, sin, ct);
  mlxb_array *x1, *x2;
  if (interleaved) {
    x1 = rotary_slice_last(s, xc, 0, rot_dim, 2);
    x2 = rotary_slice_last(s, xc, 1, rot_dim, 2);
  } else {
    x1 = rotary_slice_last(s, xc, 0, half, 1);
    x2 = rotary_slice_last(s, xc, half, rot_dim, 1);
  }
  mlxb_array *real = mlxb_binary(s, MLXB_SUB, mlxb_binary(s, MLXB_MUL, x1, c), mlxb_binary(s, MLXB_MUL, x2, sn));
  mlxb_array *imag = mlxb_binary(s, MLXB_ADD, mlxb_binary(s, MLXB_MUL, x1, sn), mlxb_binary(s, MLXB_MUL, x2, c));
  mlxb_array *rot;
  if (interleaved) {
    /* [..., half] pairs -> [..., half, 2] -> [..., rot_dim] */
    const mlxb_array *pair[2] = {real, imag};
    rot = mlxb_stack(s, pair, 2, -1);
    if (!rot) return NULL;
    int rank = mlxb_ndim(rot);
    int64_t dims[9];
    mlxb_shape(rot, dims);
    dims[rank - 2] = rot_dim;
    rot = mlxb_reshape(s, rot, dims, rank - 1);
  } else {
    const mlxb_array *parts[2] = {real, imag};
    rot = mlxb_concat(s, parts, 2, -1);
  }
  if (rot_dim < head) {
    const mlxb_array *parts[2] = {rot, rotary_slice_last(s, xc, rot_dim, head, 1)};
    rot = mlxb_concat(s, parts, 2, -1);
  }
  return op_util_cast(s, rot, t);
}

/* ---- shared checks ------------------------------------------------------------------------ */

static bool rotary_claim_common(claim_ctx *c, int cos_input, int pos_input) {
  const ir_value *x = claim_input(c, 0);
  if (x->rank >= 0 && x->rank != 3 && x->rank != 4) return claim_decline(c, "input rank %d is not 3 or 4", x->rank);
  for (int i = cos_input; i <= cos_input + 1; i++)
    if (claim_input_dtype(c, i) != x->dtype) return claim_decline(c, "cos/sin cache dtype differs from the input's");
  if (claim_input(c, pos_input) && claim_input_dtype(c, pos_input) != ONNX_INT64)
    return claim_decline(c, "position_ids is not int64");
  if (ir_attr_int(c->node, "rotary_embedding_dim", 0) < 0) return claim_decline(c, "negative rotary_embedding_dim");
  if (ir_attr_int(c->node, "num_heads", 0) < 0) return claim_decline(c, "negative num_heads");
  return true;
}

/* x as [B, S, N, H] viewed for the rotation: 3-D inputs are reshaped (and reshaped back by the
 * caller); 4-D inputs [B, N, S, H] are left as they are and the caches get a head axis instead. */
typedef struct rotary_layout {
  int rank;         /* of the input: 3 or 4 */
  int64_t dims[4];  /* of the input */
  int64_t b, s, n, h;
} rotary_layout;

static int rotary_layout_of(op_ctx *c, mlxb_array *x, int64_t num_heads, int64_t head_size, rotary_layout *l) {
  l->rank = mlxb_ndim(x);
  if (l->rank != 3 && l->rank != 4) return op_fail(c, "input rank %d is not 3 or 4", l->rank);
  mlxb_shape(x, l->dims);
  l->b = l->dims[0];
  if (l->rank == 4) {
    l->n = l->dims[1];
    l->s = l->dims[2];
    l->h = l->dims[3];
    return 0;
  }
  l->s = l->dims[1];
  if (head_size > 0) {
    if (l->dims[2] % head_size) return op_fail(c, "hidden size %lld is not a multiple of head size %lld",
                                               (long long)l->dims[2], (long long)head_size);
    l->h = head_size;
    l->n = l->dims[2] / head_size;
    if (num_heads > 0 && num_heads != l->n) return op_fail(c, "num_heads does not match the input's hidden size");
    return 0;
  }
  if (num_heads <= 0) return op_fail(c, "num_heads is required for 3-D input");
  if (l->dims[2] % num_heads) return op_fail(c, "hidden size is not a multiple of num_heads");
  l->n = num_heads;
  l->h = l->dims[2] / num_heads;
  return 0;
}

/* Runs the rotation with cos/sin of shape [B or 1, S, rot_dim / 2] and sets output 0. */
static int rotary_finish(op_ctx *c, mlxb_array *x, const rotary_layout *l, mlxb_array *cos, mlxb_array *sin,
                         int64_t rot_dim, bool interleaved) {
  mlxb_scope *s = op_scope(c);
  if (rot_dim <= 0 || rot_dim > l->h || rot_dim % 2)
    return op_fail(c, "rotary dimension %lld does not fit head size %lld", (long long)rot_dim, (long long)l->h);
  int axis = l->rank == 4 ? 1 : 2; /* head axis to insert into the caches */
  cos = mlxb_expand_dims(s, cos, &axis, 1);
  sin = mlxb_expand_dims(s, sin, &axis, 1);
  mlxb_array *xv = x;
  if (l->rank == 3) {
    int64_t d4[4] = {l->b, l->s, l->n, l->h};
    xv = mlxb_reshape(s, x, d4, 4);
  }
  mlxb_array *y = rotary_embed(s, xv, cos, sin, rot_dim, interleaved);
  if (l->rank == 3) y = mlxb_reshape(s, y, l->dims, 3);
  return op_set_output(c, 0, y);
}

/* ---- ai.onnx RotaryEmbedding ------------------------------------------------------------- */

static bool claim_onnx_rotary(claim_ctx *c, const op_def *def) {
  if (!rotary_claim_common(c, 1, 3)) return false;
  const ir_value *x = claim_input(c, 0);
  if (x->rank == 3 && ir_attr_int(c->node, "num_heads", 0) <= 0) return claim_decline(c, "3-D input without num_heads");
  if (x->rank != 4 && ir_attr_int(c->node, "rotary_embedding_dim", 0) > 0 && ir_attr_int(c->node, "num_heads", 0) <= 0)
    return claim_decline(c, "rotary_embedding_dim without num_heads on a non-4-D input (ORT rejects it)");
  const ir_value *cos = claim_input(c, 1);
  bool has_pos = claim_input(c, 3) != NULL;
  if (cos && cos->rank >= 0 && cos->rank != (has_pos ? 2 : 3))
    return claim_decline(c, "cos_cache rank %d with%s position_ids", cos->rank, has_pos ? "" : "out");
  return true;
}

/* Without position_ids the caches are [B, S, rot/2] already; with them, rows are gathered. */
static int lower_onnx_rotary(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  mlxb_array *x = op_input(c, 0), *cos = op_input(c, 1), *sin = op_input(c, 2);
  rotary_layout l;
  if (rotary_layout_of(c, x, ir_attr_int(n, "num_heads", 0), 0, &l)) return -1;
  int64_t rot_dim = ir_attr_int(n, "rotary_embedding_dim", 0);
  if (rot_dim == 0) rot_dim = l.h;
  if (mlxb_dim(cos, -1) != rot_dim / 2 || mlxb_dim(sin, -1) != rot_dim / 2)
    return op_fail(c, "cos/sin cache width is not rotary_embedding_dim / 2");
  if (op_has_input(c, 3)) {
    mlxb_array *pos = op_input(c, 3);
    if (mlxb_ndim(pos) != 2 || mlxb_dim(pos, 0) != l.b || mlxb_dim(pos, 1) != l.s)
      return op_fail(c, "position_ids must be [batch, sequence]");
    if (op_util_require_range(c, pos, 0, mlxb_dim(cos, 0), "position id")) return -1;
    cos = mlxb_take(s, cos, pos, 0);
    sin = mlxb_take(s, sin, pos, 0);
  } else if (mlxb_ndim(cos) != 3 || mlxb_dim(cos, 0) != l.b || mlxb_dim(cos, 1) != l.s) {
    return op_fail(c, "without position_ids, cos/sin caches must be [batch, sequence, rot/2]");
  }
  return rotary_finish(c, x, &l, cos, sin, rot_dim, ir_attr_int(n, "interleaved", 0) == 1);
}

/* ---- com.microsoft RotaryEmbedding ------------------------------------------------------- */

static bool claim_ms_rotary(claim_ctx *c, const op_def *def) {
  if (!rotary_claim_common(c, 2, 1)) return false;
  if (ir_attr_int(c->node, "rotary_embedding_dim", 0) > 0 && ir_attr_int(c->node, "num_heads", 0) <= 0)
    return claim_decline(c, "rotary_embedding_dim without num_heads (ORT rejects it)");
  const ir_value *cos = claim_input(c, 2);
  if (cos && cos->rank >= 0 && cos->rank != 2) return claim_decline(c, "cos_cache is not 2-D");
  return true;
}

/* Positions are position_ids[b, s], or position_ids[0] + s when a single value is given. The
 * head size is cos_cache's width * 2 unless rotary_embedding_dim is set (then hidden/num_heads);
 * the scale attribute is unused by ORT's CPU kernel and ignored here too. */
static int lower_ms_rotary(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  mlxb_array *x = op_input(c, 0), *pos = op_input(c, 1), *cos = op_input(c, 2), *sin = op_input(c, 3);
  int64_t rot_attr = ir_attr_int(n, "rotary_embedding_dim", 0), num_heads = ir_attr_int(n, "num_heads", 0);
  int64_t half = mlxb_dim(cos, 1);
  if (mlxb_ndim(cos) != 2 || mlxb_ndim(sin) != 2 || mlxb_dim(sin, 1) != half || mlxb_dim(sin, 0) != mlxb_dim(cos, 0))
    return op_fail(c, "cos/sin caches must be 2-D and of one shape");
  rotary_layout l;
  int rank = mlxb_ndim(x);
  int64_t head_size = 0;
  if (rot_attr == 0) head_size = half * 2;
  else if (rank == 3 && num_heads > 0) head_size = mlxb_dim(x, 2) / num_heads;
  if (rank == 4 && head_size > 0 && head_size != mlxb_dim(x, 3))
    return op_fail(c, "head size %lld (from the caches) differs from the input's %lld", (long long)head_size,
                   (long long)mlxb_dim(x, 3));
  if (rank == 4 && rot_attr > 0 && num_heads > 0 && num_heads != mlxb_dim(x, 1))
    return op_fail(c, "num_heads differs from the input's head axis");
  if (rotary_layout_of(c, x, num_heads, head_size, &l)) return -1;
  int64_t rot_dim = rot_attr > 0 ? rot_attr : l.h;
  if (half != rot_dim / 2) return op_fail(c, "cos/sin cache width is not rotary_embedding_dim / 2");
  mlxb_array *idx;
  if (mlxb_size(pos) == 1 && mlxb_ndim(pos) <= 1) {
    idx = mlxb_binary(s, MLXB_ADD, op_util_iota(s, 0, l.s, 1, 2, MLXB_I64), mlxb_reshape(s, pos, NULL, 0));
  } else if (mlxb_ndim(pos) == 2 && mlxb_dim(pos, 0) == l.b && mlxb_dim(pos, 1) == l.s) {
    idx = pos;
  } else {
    return op_fail(c, "position_ids must hold one value or be [batch, sequence]");
  }
  if (mlxb_dim(cos, 0) < l.s && !ir_attr_int(n, "is_packed_batching", 0))
    return op_fail(c, "sequence longer than the cos/sin caches (ORT does not update caches)");
  if (op_util_require_range(c, idx, 0, mlxb_dim(cos, 0), "position")) return -1;
  return rotary_finish(c, x, &l, mlxb_take(s, cos, idx, 0), mlxb_take(s, sin, idx, 0), rot_dim,
                       ir_attr_int(n, "interleaved", 0) == 1);
}

/* ---- the table ---------------------------------------------------------------------------- */

static const op_def defs[] = {
    OP_ROW("", "RotaryEmbedding", 23, 23, .inputs = {3, 4}, .outputs = {1, 1}, .dtypes = DT_F32 | DT_F16,
           .claim = claim_onnx_rotary, .lower = lower_onnx_rotary,
           .doc = "float32/float16 (bfloat16 declined: ORT's CPU EP has no kernel); 4-D [B, N, S, H] or 3-D [B, S, "
                  "N*H] with num_heads; interleaved or half-split; partial rotation (rotary_embedding_dim); caches "
                  "gathered by int64 position_ids or, without them, used as [B, S, rot/2]. Half precision is "
                  "computed in float32"),
    OP_ROW("com.microsoft", "RotaryEmbedding", 1, 1, .inputs = {4, 4}, .outputs = {1, 1}, .dtypes = DT_F32 | DT_F16,
           .claim = claim_ms_rotary, .lower = lower_ms_rotary,
           .doc = "float32/float16 (bfloat16 declined: no ORT CPU kernel); 3-D [B, S, hidden] or 4-D [B, N, S, H]; "
                  "position_ids [B, S] or a single start offset; interleaved; rotary_embedding_dim with num_heads; "
                  "is_packed_batching accepted (ORT's CPU kernel only skips a cache-length check); scale ignored as "
                  "on ORT CPU"),
};

OPS_FAMILY(rotary, defs);
