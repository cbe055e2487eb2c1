/* Late ai.onnx ops: NonMaxSuppression (data-dependent, run on the host with ORT's exact greedy
 * algorithm and tie order), CumProd (MLX's cumulative product) and BitCast (a bit view between
 * dtypes of one width). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op_util.h"

/* ---- NonMaxSuppression -------------------------------------------------------------------- */

static bool claim_nms(claim_ctx *c, const op_def *def) {
  int64_t cpb = ir_attr_int(c->node, "center_point_box", 0);
  if (cpb != 0 && cpb != 1) return claim_decline(c, "center_point_box %lld is not 0 or 1", (long long)cpb);
  if (claim_input_dtype(c, 1) != ONNX_FLOAT) return claim_decline(c, "scores are not float32");
  return true;
}

/* One candidate of a class: its score and box index. */
typedef struct nms_entry {
  float score;
  int64_t index;
} nms_entry;

/* Candidate a ranks below b: a lower score, or an equal score and a later box (ORT 1.31 takes equal
 * scores in box order). */
static bool nms_below(nms_entry a, nms_entry b) {
  return a.score < b.score || (a.score == b.score && a.index > b.index);
}

/* The candidate queue is a binary max-heap (libstdc++'s push and pop steps). NaN scores are
 * unordered: where they land differs from ORT's order, which is not a function of the scores. */
static void nms_heap_sift_up(nms_entry *h, size_t hole, size_t top, nms_entry v) {
  while (hole > top) {
    size_t parent = (hole - 1) / 2;
    if (!nms_below(h[parent], v)) break;
    h[hole] = h[parent];
    hole = parent;
  }
  h[hole] = v;
}

static void nms_heap_push(nms_entry *h, size_t *n, nms_entry v) {
  nms_heap_sift_up(h, (*n)++, 0, v);
}

/* std::pop_heap: the last entry is re-seated from the root's hole (__adjust_heap). */
static nms_entry nms_heap_pop(nms_entry *h, size_t *n) {
  nms_entry top = h[0], v = h[--*n];
  size_t len = *n, hole = 0, child = 0;
  if (len == 0) return top;
  while (child < (len - 1) / 2) {
    child = 2 * (child + 1);
    if (nms_below(h[child], h[child - 1])) child--;
    h[hole] = h[child];
    hole = child;
  }
  if ((len & 1) == 0 && child == (len - 2) / 2) {
    child = 2 * (child + 1);
    h[hole] = h[child - 1];
    hole = child - 1;
  }
  nms_heap_sift_up(h, hole, 0, v);
  return top;
}

static void nms_min_max(float a, float b, float *lo, float *hi) {
  if (a >= b) *lo = b, *hi = a;
  else *lo = a, *hi = b;
}

/* std::max and std::min (NaN and signed zeros as they treat them, unlike fmaxf/fminf). */
static float nms_max(float a, float b) { return a < b ? b : a; }
static float nms_min(float a, float b) { return b < a ? b : a; }

/* A box's extent on one axis: corners (either order) or center and size. */
static void nms_extent(const float *box, int axis, bool center, float *lo, float *hi) {
  if (!center) {
    nms_min_max(box[axis], box[axis + 2], lo, hi); /* [y1, x1, y2, x2] */
    return;
  }
  float half = box[axis + 2] / 2; /* [x_center, y_center, width, height] */
  *lo = box[axis] - half, *hi = box[axis] + half;
}

/* Whether boxes a and b overlap by IoU > threshold, in float32 step by step as ORT computes it. */
static bool nms_suppress(const float *a, const float *b, bool center, float threshold) {
  int xa = center ? 0 : 1, ya = center ? 1 : 0;
  float ax0, ax1, bx0, bx1, ay0, ay1, by0, by1;
  nms_extent(a, xa, center, &ax0, &ax1);
  nms_extent(b, xa, center, &bx0, &bx1);
  float ix0 = nms_max(ax0, bx0), ix1 = nms_min(ax1, bx1);
  if (ix1 <= ix0) return false;
  nms_extent(a, ya, center, &ay0, &ay1);
  nms_extent(b, ya, center, &by0, &by1);
  float iy0 = nms_max(ay0, by0), iy1 = nms_min(ay1, by1);
  if (iy1 <= iy0) return false;
  /* volatile keeps each product rounded to float32 (no contraction into fused multiply-adds). */
  volatile float inter = (ix1 - ix0) * (iy1 - iy0);
  if (inter <= 0.0f) return false;
  volatile float area_a = (ax1 - ax0) * (ay1 - ay0), area_b = (bx1 - bx0) * (by1 - by0);
  volatile float uni = area_a + area_b;
  uni = uni - inter;
  if (area_a <= 0.0f || area_b <= 0.0f || uni <= 0.0f) return false;
  return inter / uni > threshold;
}

/* The parameters of one NonMaxSuppression run, as ORT reads them. */
typedef struct nms_params {
  int64_t batches, classes, boxes;
  int64_t max_per_class; /* 0 selects nothing (the default when the input is absent) */
  float iou;
  float score;
  bool has_score;
  bool center;
} nms_params;

static int nms_read_params(op_ctx *c, nms_params *p) {
  p->max_per_class = 0, p->iou = 0.0f, p->score = 0.0f, p->has_score = false;
  p->center = ir_attr_int(op_node(c), "center_point_box", 0) == 1;
  int64_t v;
  double d;
  if (op_has_input(c, 2)) {
    if (op_util_input_int(c, 2, &v)) return -1;
    p->max_per_class = v > 0 ? v : 0;
  }
  if (op_has_input(c, 3)) {
    if (op_util_input_double(c, 3, &d)) return -1;
    p->iou = (float)d;
    if (!(p->iou >= 0.0f && p->iou <= 1.0f)) return op_fail(c, "iou_threshold must be in range [0, 1]");
  }
  if (op_has_input(c, 4)) {
    if (op_util_input_double(c, 4, &d)) return -1;
    p->score = (float)d, p->has_score = true;
  }
  return 0;
}

/* Reads input i (float32, n elements) into a malloc'd float buffer; NULL with the failure recorded. */
static float *nms_read_floats(op_ctx *c, int i, size_t n) {
  if (n > (size_t)INT32_MAX) return op_fail(c, "input %d has too many elements to read", i), NULL;
  double *d = malloc((n ? n : 1) * sizeof *d);
  float *f = malloc((n ? n : 1) * sizeof *f);
  if (!d || !f) return free(d), free(f), op_fail(c, "out of memory"), NULL;
  if (op_input_doubles(c, i, d, (int)n) != (int)n) {
    free(d), free(f);
    if (!op_check(c)) op_fail(c, "cannot read input %d", i);
    return NULL;
  }
  for (size_t k = 0; k < n; k++) f[k] = (float)d[k];
  free(d);
  return f;
}

/* Greedy selection of one (batch, class): appends (batch, class, box) triples to out. */
static size_t nms_select_class(const nms_params *p, const float *boxes, const float *scores, int64_t b, int64_t cl,
                               nms_entry *heap, int64_t *chosen, int64_t *out) {
  size_t n = 0, picked = 0;
  for (int64_t k = 0; k < p->boxes; k++)
    if (!p->has_score || scores[k] > p->score) nms_heap_push(heap, &n, (nms_entry){scores[k], k});
  while (n > 0) {
    nms_entry e = nms_heap_pop(heap, &n);
    bool keep = true;
    for (size_t j = 0; j < picked && keep; j++)
      keep = !nms_suppress(boxes + 4 * chosen[j], boxes + 4 * e.index, p->center, p->iou);
    if (!keep) continue;
    if ((int64_t)picked >= p->max_per_class) break;
    chosen[picked] = e.index;
    out[3 * picked] = b, out[3 * picked + 1] = cl, out[3 * picked + 2] = e.index;
    picked++;
  }
  return picked;
}

static int lower_nms(op_ctx *c, const op_def *def) {
  mlxb_array *bx = op_input(c, 0), *sc = op_input(c, 1);
  if (!bx || !sc) return op_check(c) ? -1 : op_fail(c, "boxes and scores are required");
  if (mlxb_ndim(bx) != 3 || mlxb_ndim(sc) != 3) return op_fail(c, "boxes and scores must be 3-D");
  nms_params p;
  p.batches = mlxb_dim(bx, 0), p.boxes = mlxb_dim(bx, 1), p.classes = mlxb_dim(sc, 1);
  if (mlxb_dim(sc, 0) != p.batches) return op_fail(c, "boxes and scores should have same num_batches");
  if (mlxb_dim(sc, 2) != p.boxes) return op_fail(c, "boxes and scores should have same spatial_dimension");
  if (mlxb_dim(bx, 2) != 4) return op_fail(c, "the innermost dimension of boxes must be 4");
  if (nms_read_params(c, &p)) return -1;
  int64_t none[2] = {0, 3};
  if (p.max_per_class == 0 || p.batches * p.classes * p.boxes == 0)
    return op_set_output(c, 0, mlxb_from_data(op_scope(c), NULL, none, 2, MLXB_I64));
  float *boxes = nms_read_floats(c, 0, mlxb_size(bx));
  float *scores = boxes ? nms_read_floats(c, 1, mlxb_size(sc)) : NULL;
  size_t nb = (size_t)p.boxes, per_class = p.max_per_class < p.boxes ? (size_t)p.max_per_class : nb;
  size_t cap = (size_t)(p.batches * p.classes) * per_class;
  nms_entry *heap = malloc(nb * sizeof *heap);
  int64_t *chosen = malloc(nb * sizeof *chosen), *out = malloc(3 * cap * sizeof *out);
  int rc = -1;
  if (!boxes || !scores) goto done;
  if (!heap || !chosen || !out) {
    op_fail(c, "out of memory");
    goto done;
  }
  size_t total = 0;
  for (int64_t b = 0; b < p.batches; b++)
    for (int64_t cl = 0; cl < p.classes; cl++)
      total += nms_select_class(&p, boxes + b * p.boxes * 4, scores + (b * p.classes + cl) * p.boxes, b, cl, heap,
                                chosen, out + 3 * total);
  int64_t dims[2] = {(int64_t)total, 3};
  rc = op_set_output(c, 0, mlxb_from_data(op_scope(c), total ? out : NULL, dims, 2, MLXB_I64));
done:
  free(boxes), free(scores), free(heap), free(chosen), free(out);
  return rc;
}

/* ---- CumProd ----------------------------------------------------------------------------- */

/* Products along the axis input, inclusive or exclusive (a leading 1), forward or reversed;
 * float16 multiplies in float32 and rounds once, as ORT's result does. Integers wrap. */
static int lower_cumprod(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  mlxb_array *x = op_input(c, 0);
  if (!x) return op_check(c) ? -1 : op_fail(c, "missing input");
  int64_t raw;
  if (op_input_ints(c, 1, &raw, 1) != 1) return op_check(c) ? -1 : op_fail(c, "axis must be a single integer");
  int axis = op_util_resolve_axis(c, raw, mlxb_ndim(x));
  if (axis < 0) return -1;
  bool exclusive = ir_attr_int(n, "exclusive", 0) != 0, reverse = ir_attr_int(n, "reverse", 0) != 0;
  mlxb_dtype t = mlxb_type(x);
  mlxb_array *y = mlxb_cumulative(s, MLXB_RPROD, op_util_cast(s, x, op_util_compute_type(t)), axis, reverse, !exclusive);
  return op_set_output(c, 0, op_util_cast(s, y, t));
}

/* ---- BitCast ----------------------------------------------------------------------------- */

static bool claim_bitcast(claim_ctx *c, const op_def *def) {
  const ir_attr *to = ir_node_attr(c->node, "to");
  if (!to || to->type != IR_ATTR_INT) return claim_decline(c, "missing attribute 'to'");
  int32_t from = claim_input_dtype(c, 0), dst = (int32_t)to->i;
  if (op_mlx_dtype(dst) < 0 || ir_dtype_emulated_bits(dst)) return claim_decline(c, "target dtype %s", ir_dtype_name(dst));
  if (ir_dtype_size(from) == 0 || ir_dtype_size(from) != ir_dtype_size(dst))
    return claim_decline(c, "%s and %s differ in width", ir_dtype_name(from), ir_dtype_name(dst));
  /* Bytes other than 0 and 1 are not valid bools. */
  if (dst == ONNX_BOOL && from != ONNX_BOOL) return claim_decline(c, "bits of %s viewed as bool", ir_dtype_name(from));
  return true;
}

/* The same bits (little endian on every host MLX runs on) read as the target dtype. */
static int lower_bitcast(op_ctx *c, const op_def *def) {
  mlxb_array *x = op_input(c, 0);
  if (!x) return op_check(c) ? -1 : op_fail(c, "missing input");
  int t = op_mlx_dtype((int32_t)ir_attr_int(op_node(c), "to", ONNX_UNDEFINED));
  if (t < 0) return op_fail(c, "target dtype has no MLX dtype");
  if (t == (int)mlxb_type(x)) return op_set_output(c, 0, x);
  return op_set_output(c, 0, mlxb_view(op_scope(c), x, (mlxb_dtype)t));
}

/* ---- the table ---------------------------------------------------------------------------- */

static const op_def defs[] = {
  {"", "NonMaxSuppression", 10, 28, DT_F32, claim_nms, lower_nms, 0, OP_FLAG_HOST_VALUES,
   "float32 boxes and scores, center_point_box 0 or 1 (corners in either order), all optional inputs; boxes and "
   "scores are read on the host and run through ORT's greedy algorithm with its float32 IoU and its order of "
   "equal scores (lower box index first). The position of NaN scores is unspecified (ORT's is order-dependent). "
   "Declined: center_point_box other than 0/1"},
  {"", "CumProd", 26, 28, DT_F32 | DT_F16 | DT_F64 | DT(ONNX_INT32) | DT(ONNX_INT64) | DT(ONNX_UINT32) | DT(ONNX_UINT64),
   NULL, lower_cumprod, 0, 0,
   "float32/float16/float64/int32/int64/uint32/uint64, axis from a constant or runtime input, exclusive and "
   "reverse; float16 multiplies in float32 (ORT's result); integers wrap. Declined: bfloat16 (untested)"},
  {"", "BitCast", 26, 28, DT_ALL, claim_bitcast, lower_bitcast, 0, 0,
   "between any two MLX dtypes of one width (8/16/32/64-bit integers, float16, bfloat16, float32, float64), "
   "bits kept exactly; bool to bool and 8-bit integers as the spec's byte view (ORT 1.31 has no bool kernel). "
   "Declined: dtypes MLX lacks (sub-byte, float8, complex, string), widths that differ, non-bool bits as bool"},
};

OPS_FAMILY(extra, defs);
