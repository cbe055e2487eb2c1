/* Detection ops whose outputs depend on box coordinates read on the host: NonMaxSuppression (run on
 * the host with ORT's exact greedy algorithm and tie order), RoiAlign and MaxRoiPool (rois turned
 * into gather index/weight tables with ORT's float arithmetic; every computed index is clamped into
 * range before a gather, as MLX does not bounds-check). */
#include <float.h>
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

/* ---- RoiAlign ---------------------------------------------------------------------------- */

static bool claim_roi_align(claim_ctx *c, const op_def *def) {
  const char *mode = ir_attr_string(c->node, "mode", "avg");
  if (strcmp(mode, "avg") && strcmp(mode, "max")) return claim_decline(c, "unknown mode '%s'", mode);
  const char *ct = ir_attr_string(c->node, "coordinate_transformation_mode", "half_pixel");
  if (c->node->since_version >= 16 && strcmp(ct, "half_pixel") && strcmp(ct, "output_half_pixel"))
    return claim_decline(c, "unknown coordinate_transformation_mode '%s'", ct);
  const ir_value *x = claim_input(c, 0);
  if (x && x->rank >= 0 && x->rank != 4) return claim_decline(c, "input rank %d (must be 4)", x->rank);
  if (claim_input_dtype(c, 0) == ONNX_DOUBLE) return claim_decline(c, "float64 (sample tables are computed in float32)");
  if (claim_input_dtype(c, 2) != ONNX_INT64) return claim_decline(c, "batch_indices must be int64");
  if (ir_attr_int(c->node, "output_height", 1) < 1 || ir_attr_int(c->node, "output_width", 1) < 1)
    return claim_decline(c, "output_height/output_width must be positive");
  return true;
}

/* ORT's sample count along one side of a roi: the sampling ratio when one is set, else
 * ceil(extent / bins) in float, which is negative for a roi given backwards. Counts are held to
 * +-2^40 before their conversion (such a grid fails the memory check after). *past is set for a
 * count outside int64, whose conversion in ORT is undefined (x86 gives INT64_MIN, and ORT's table
 * size then wraps): refused. */
static int64_t roi_grid(int64_t ratio, float extent, int64_t bins, bool *past) {
  if (ratio > 0) return ratio;
  float g = ceilf(extent / (float)bins);
  if (!(g > -0x1p63f && g < 0x1p63f)) { /* NaN too (inf - inf of a scaled roi): no conversion */
    *past = true;
    return 0;
  }
  if (g > 0x1p40f) return (int64_t)1 << 40;
  if (g < -0x1p40f) return -((int64_t)1 << 40);
  return (int64_t)g;
}

/* The tables and gathers of `samples` sample points (bins times the largest grid) take about
 * this many bytes: (position, weight) quadruples on the host, four gathered rows of C values and
 * their weighted products in the graph. Refused past MLX's memory limit, as ORT would fail to
 * allocate; any grid that fits is computed, however many samples a bin takes. */
static int roi_memory_fails(op_ctx *c, int64_t samples, int64_t C, size_t esz) {
  size_t per = 4 * (sizeof(int64_t) + sizeof(float)) + 1, bytes, graph;
  if (__builtin_mul_overflow((size_t)C, 8 * esz, &graph) || __builtin_add_overflow(per, graph, &per) ||
      __builtin_mul_overflow((size_t)samples, per, &bytes))
    bytes = SIZE_MAX;
  size_t limit = mlxb_memory_limit();
  if (limit && bytes > limit)
    return op_fail(c, "the rois' sample grids need %zu bytes, more than the memory limit (%zu bytes)", bytes, limit);
  return 0;
}

/* The rois are read on the host and every sample point of every bin becomes four (position,
 * weight) pairs with ORT's float arithmetic (PreCalcForBilinearInterpolate); the pairs gather
 * rows of the [N*H*W, C] input. avg sums the weighted corners; max takes ORT's maximum of the
 * weighted corners per sample, then over the samples. */
static int lower_roi_align(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_node *node = op_node(c);
  mlxb_array *x = op_input(c, 0), *r = op_input(c, 1), *bi = op_input(c, 2);
  if (mlxb_ndim(x) != 4 || mlxb_ndim(r) != 2 || mlxb_dim(r, 1) != 4 || mlxb_ndim(bi) != 1 || mlxb_dim(bi, 0) != mlxb_dim(r, 0))
    return op_fail(c, "X must be 4-D, rois [R, 4] and batch_indices [R]");
  int64_t N = mlxb_dim(x, 0), C = mlxb_dim(x, 1), H = mlxb_dim(x, 2), W = mlxb_dim(x, 3), R = mlxb_dim(r, 0);
  int64_t PH = ir_attr_int(node, "output_height", 1), PW = ir_attr_int(node, "output_width", 1);
  int64_t ratio = ir_attr_int(node, "sampling_ratio", 0);
  float scale = ir_attr_float(node, "spatial_scale", 1.0f);
  bool is_max = !strcmp(ir_attr_string(node, "mode", "avg"), "max");
  bool half_pixel = node->since_version >= 16 && !strcmp(ir_attr_string(node, "coordinate_transformation_mode", "half_pixel"), "half_pixel");
  if (PH < 1 || PW < 1) return op_fail(c, "output_height/output_width must be positive");
  if (R > 0 && N * H * W == 0) return op_fail(c, "rois over an empty image");
  double *rv = malloc(sizeof *rv * (size_t)(R * 4 + 1));
  int64_t *bv = malloc(sizeof *bv * (size_t)(R + 1));
  int64_t *grid = malloc(sizeof *grid * (size_t)(2 * R + 1));
  int rc = -1;
  int64_t *pos = NULL;
  float *wt = NULL;
  uint8_t *live = NULL;
  float *count = NULL;
  if (!rv || !bv || !grid) {
    op_fail(c, "out of memory");
    goto done;
  }
  if ((R > 0 && op_input_doubles(c, 1, rv, (int)(R * 4)) != R * 4) || (R > 0 && op_input_ints(c, 2, bv, (int)R) != R)) {
    if (!op_check(c)) op_fail(c, "cannot read rois or batch_indices");
    goto done;
  }
  /* per roi sample grid */
  int64_t smax = 0;
  for (int64_t i = 0; i < R * 4; i++)
    if (!isfinite(rv[i])) {
      op_fail(c, "all rois values must be finite (roi %lld)", (long long)(i / 4));
      goto done;
    }
  for (int64_t n = 0; n < R; n++) {
    if (bv[n] < 0 || bv[n] >= N) {
      op_fail(c, "batch index %lld outside [0, %lld)", (long long)bv[n], (long long)N);
      goto done;
    }
    float off = half_pixel ? 0.5f : 0.0f;
    float sw = (float)rv[n * 4 + 0] * scale - off, sh = (float)rv[n * 4 + 1] * scale - off;
    float ew = (float)rv[n * 4 + 2] * scale - off, eh = (float)rv[n * 4 + 3] * scale - off;
    float rw = ew - sw, rh = eh - sh;
    if (!half_pixel) rw = fmaxf(rw, 1.0f), rh = fmaxf(rh, 1.0f);
    bool past = false;
    int64_t gh = roi_grid(ratio, rh, PH, &past), gw = roi_grid(ratio, rw, PW, &past), cells;
    if (past) {
      op_fail(c, "roi %lld needs a sample grid past int64 (extent %g x %g)", (long long)n, (double)rh, (double)rw);
      goto done;
    }
    /* ORT sizes its tables by gh * gw * bins as a size_t: a negative product fails there */
    if ((gh < 0 && gw > 0) || (gh > 0 && gw < 0)) {
      op_fail(c, "roi %lld has a negative sample grid (%lld x %lld: given backwards along one side)", (long long)n,
              (long long)gh, (long long)gw);
      goto done;
    }
    gh = gh < 0 ? 0 : gh, gw = gw < 0 ? 0 : gw; /* backwards along both sides: no samples, as in ORT */
    if (__builtin_mul_overflow(gh, gw, &cells)) cells = INT64_MAX;
    grid[2 * n] = gh, grid[2 * n + 1] = gw;
    if (cells > smax) smax = cells;
  }
  if (smax == 0) smax = 1;
  int64_t bins = op_util_numel((const int64_t[]){R, PH, PW}, 3), samples; /* PH, PW: model attributes */
  if (__builtin_mul_overflow(bins, smax, &samples)) samples = INT64_MAX;
  if (roi_memory_fails(c, samples, C, mlxb_dtype_size(op_util_compute_type(mlxb_type(x))))) goto done;
  int64_t tn = samples * 4;
  pos = malloc(sizeof *pos * (size_t)(tn ? tn : 1));
  wt = malloc(sizeof *wt * (size_t)(tn ? tn : 1));
  live = malloc((size_t)(bins * smax > 0 ? bins * smax : 1));
  count = malloc(sizeof *count * (size_t)(bins ? bins : 1));
  if (!pos || !wt || !live || !count) {
    op_fail(c, "out of memory");
    goto done;
  }
  for (int64_t n = 0; n < R; n++) {
    float off = half_pixel ? 0.5f : 0.0f;
    float sw = (float)rv[n * 4 + 0] * scale - off, sh = (float)rv[n * 4 + 1] * scale - off;
    float ew = (float)rv[n * 4 + 2] * scale - off, eh = (float)rv[n * 4 + 3] * scale - off;
    float rw = ew - sw, rh = eh - sh;
    if (!half_pixel) rw = fmaxf(rw, 1.0f), rh = fmaxf(rh, 1.0f);
    float bh = rh / (float)PH, bw = rw / (float)PW;
    int64_t gh = grid[2 * n], gw = grid[2 * n + 1], base = bv[n] * H * W;
    for (int64_t ph = 0; ph < PH; ph++) {
      for (int64_t pw = 0; pw < PW; pw++) {
        int64_t bin = (n * PH + ph) * PW + pw, k = 0;
        count[bin] = (float)(gh * gw);
        for (int64_t iy = 0; iy < gh; iy++) {
          float yy = sh + (float)ph * bh + (float)(iy + .5f) * bh / (float)gh;
          for (int64_t ix = 0; ix < gw; ix++, k++) {
            float xx = sw + (float)pw * bw + (float)(ix + .5f) * bw / (float)gw;
            float yv = yy, xv = xx;
            int64_t *p4 = pos + (bin * smax + k) * 4;
            float *w4 = wt + (bin * smax + k) * 4;
            live[bin * smax + k] = 1;
            if (yv < -1.0 || yv > H || xv < -1.0 || xv > W || yv != yv || xv != xv) {
              for (int q = 0; q < 4; q++) p4[q] = base, w4[q] = 0;
              continue;
            }
            if (yv <= 0) yv = 0;
            if (xv <= 0) xv = 0;
            int64_t yl = (int64_t)yv, xl = (int64_t)xv, yh, xh;
            if (yl >= H - 1) yh = yl = H - 1, yv = (float)yl;
            else yh = yl + 1;
            if (xl >= W - 1) xh = xl = W - 1, xv = (float)xl;
            else xh = xl + 1;
            float ly = yv - (float)yl, lx = xv - (float)xl, hy = 1.0f - ly, hx = 1.0f - lx;
            p4[0] = base + yl * W + xl, p4[1] = base + yl * W + xh, p4[2] = base + yh * W + xl, p4[3] = base + yh * W + xh;
            w4[0] = hy * hx, w4[1] = hy * lx, w4[2] = ly * hx, w4[3] = ly * lx;
          }
        }
        for (; k < smax; k++) {
          live[bin * smax + k] = 0;
          for (int q = 0; q < 4; q++) pos[(bin * smax + k) * 4 + q] = base, wt[(bin * smax + k) * 4 + q] = 0;
        }
      }
    }
  }
  mlxb_dtype t = mlxb_type(x), ct = op_util_compute_type(t);
  int perm[4] = {0, 2, 3, 1}, back[4] = {0, 3, 1, 2};
  int64_t rows[2] = {N * H * W, C};
  mlxb_array *xr = mlxb_reshape(s, mlxb_transpose(s, mlxb_astype(s, x, ct), perm, 4), rows, 2);
  mlxb_array *pi = tn <= INT32_MAX ? op_util_index_array(s, pos, tn) : mlxb_from_data(s, pos, &tn, 1, MLXB_I64);
  if (!pi) {
    op_fail(c, "out of memory");
    goto done;
  }
  int64_t gd[6] = {R, PH, PW, smax, 4, C}, wd[6] = {R, PH, PW, smax, 4, 1}, ld[5] = {R, PH, PW, smax, 1};
  int64_t cd[4] = {R, PH, PW, 1};
  mlxb_array *vals = mlxb_reshape(s, mlxb_take(s, xr, pi, 0), gd, 6);
  mlxb_array *prod = mlxb_binary(s, MLXB_MUL, op_util_float_array(s, wt, wd, 6, ct), vals);
  mlxb_array *cnt = op_util_float_array(s, count, cd, 4, ct);
  mlxb_array *y;
  int ax4 = 4, ax3 = 3;
  if (!is_max) {
    int axes[2] = {3, 4};
    /* ORT leaves bins without samples (a degenerate roi) at 0. */
    mlxb_array *empty = mlxb_binary(s, MLXB_EQUAL, cnt, mlxb_scalar_f64(s, 0, ct));
    cnt = mlxb_where(s, empty, mlxb_scalar_f64(s, 1, ct), cnt);
    y = mlxb_binary(s, MLXB_DIV, mlxb_reduce(s, MLXB_RSUM, prod, axes, 2, false), cnt);
  } else {
    mlxb_array *m = mlxb_reduce(s, MLXB_RMAX, prod, &ax4, 1, false);
    mlxb_array *lv = mlxb_from_data(s, live, ld, 5, MLXB_BOOL);
    m = mlxb_where(s, lv, m, mlxb_scalar_f64(s, -INFINITY, ct));
    y = mlxb_reduce(s, MLXB_RMAX, m, &ax3, 1, false);
    y = mlxb_where(s, mlxb_binary(s, MLXB_EQUAL, cnt, mlxb_scalar_f64(s, 0, ct)), mlxb_scalar_f64(s, 0, ct), y);
  }
  y = mlxb_transpose(s, y, back, 4);
  rc = op_set_output(c, 0, ct == t ? y : mlxb_astype(s, y, t));
done:
  free(rv);
  free(bv);
  free(grid);
  free(pos);
  free(wt);
  free(live);
  free(count);
  return rc;
}

/* ---- MaxRoiPool --------------------------------------------------------------------------- */

static bool claim_max_roi_pool(claim_ctx *c, const op_def *def) {
  const ir_value *x = claim_input(c, 0);
  if (x && x->rank >= 0 && x->rank != 4) return claim_decline(c, "input rank %d (must be 4)", x->rank);
  const int64_t *ps;
  if (ir_attr_ints(c->node, "pooled_shape", &ps) != 2 || ps[0] < 1 || ps[1] < 1)
    return claim_decline(c, "pooled_shape must hold two positive values");
  return true;
}

/* round(v) as an int, with values no image reaches clamped first (the cast is undefined there). */
static int roi_coord(float v) {
  if (v != v) return 0;
  v = roundf(v);
  return v < -1e9f ? -1000000000 : v > 1e9f ? 1000000000 : (int)v;
}

/* ROI windows are data-dependent: the rois are read on the host, each bin's window (ORT's float
 * arithmetic) becomes a row of a gather table over the [N*H*W, C] input whose unused entries
 * point at a row of -inf, and the gathered rows are max-reduced. Empty bins give 0. */
static int lower_max_roi_pool(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x = op_input(c, 0), *r = op_input(c, 1);
  if (mlxb_ndim(x) != 4 || mlxb_ndim(r) != 2 || mlxb_dim(r, 1) != 5) return op_fail(c, "X must be 4-D and rois [R, 5]");
  const int64_t *ps;
  if (ir_attr_ints(op_node(c), "pooled_shape", &ps) != 2) return op_fail(c, "pooled_shape must hold two values");
  int64_t PH = ps[0], PW = ps[1], N = mlxb_dim(x, 0), C = mlxb_dim(x, 1), H = mlxb_dim(x, 2), W = mlxb_dim(x, 3);
  int64_t R = mlxb_dim(r, 0), bins = op_util_numel((const int64_t[]){R, PH, PW}, 3);
  if (PH < 1 || PW < 1 || bins > INT32_MAX) /* pooled_shape is a model attribute: its bins are one MLX axis */
    return op_fail(c, "pooled_shape %lld x %lld gives %lld bins", (long long)PH, (long long)PW, (long long)bins);
  if (R > 0 && N * H * W == 0) return op_fail(c, "rois over an empty image");
  float scale = ir_attr_float(op_node(c), "spatial_scale", 1.0f);
  double *rv = malloc(sizeof *rv * (size_t)(R * 5 + 1));
  int64_t *win = malloc(sizeof *win * (size_t)(bins * 4 + 1));
  int rc = -1;
  int64_t *table = NULL;
  uint8_t *empty = NULL;
  if (!rv || !win) {
    op_fail(c, "out of memory");
    goto done;
  }
  if (op_input_doubles(c, 1, rv, (int)(R * 5)) != R * 5) {
    if (!op_check(c)) op_fail(c, "cannot read rois");
    goto done;
  }
  int64_t maxwin = 1;
  for (int64_t n = 0; n < R; n++) {
    const double *q = rv + n * 5;
    double bq = q[0];
    int64_t b = bq > -1 && bq < (double)N ? (int64_t)(float)bq : -1;
    if (b < 0 || b >= N) {
      op_fail(c, "roi %lld has batch index %g outside [0, %lld)", (long long)n, bq, (long long)N);
      goto done;
    }
    int64_t sw = roi_coord((float)q[1] * scale), sh = roi_coord((float)q[2] * scale);
    int64_t ew = roi_coord((float)q[3] * scale), eh = roi_coord((float)q[4] * scale);
    int64_t rh = eh - sh + 1 > 1 ? eh - sh + 1 : 1, rw = ew - sw + 1 > 1 ? ew - sw + 1 : 1;
    float bh = (float)rh / (float)PH, bw = (float)rw / (float)PW;
    for (int64_t i = 0; i < PH; i++) {
      for (int64_t j = 0; j < PW; j++) {
        int64_t hs = (int64_t)floorf((float)i * bh) + sh, he = (int64_t)ceilf((float)(i + 1) * bh) + sh;
        int64_t ws = (int64_t)floorf((float)j * bw) + sw, we = (int64_t)ceilf((float)(j + 1) * bw) + sw;
        hs = hs < 0 ? 0 : hs > H ? H : hs, he = he < 0 ? 0 : he > H ? H : he;
        ws = ws < 0 ? 0 : ws > W ? W : ws, we = we < 0 ? 0 : we > W ? W : we;
        int64_t *w4 = win + ((n * PH + i) * PW + j) * 4;
        w4[0] = hs, w4[1] = he, w4[2] = ws, w4[3] = we;
        int64_t area = (he > hs && we > ws) ? (he - hs) * (we - ws) : 0;
        if (area > maxwin) maxwin = area;
      }
    }
  }
  int64_t tn = op_util_mul_sat(bins, maxwin), sentinel = N * H * W;
  /* windows read from rois: the table, and the graph's gather of C values per entry, past memory
   * fail here rather than in an allocation the host may overcommit */
  if (roi_memory_fails(c, tn, C, mlxb_dtype_size(op_util_compute_type(mlxb_type(x))))) goto done;
  table = malloc(sizeof *table * (size_t)(tn ? tn : 1));
  empty = malloc((size_t)(bins ? bins : 1));
  if (!table || !empty) {
    op_fail(c, "out of memory");
    goto done;
  }
  for (int64_t bin = 0; bin < bins; bin++) {
    const int64_t *w4 = win + bin * 4;
    int64_t b = (int64_t)(float)rv[(bin / (PH * PW)) * 5], k = 0;
    for (int64_t h = w4[0]; h < w4[1]; h++)
      for (int64_t w = w4[2]; w < w4[3]; w++) table[bin * maxwin + k++] = (b * H + h) * W + w;
    empty[bin] = k == 0;
    for (; k < maxwin; k++) table[bin * maxwin + k] = sentinel;
  }
  mlxb_dtype t = mlxb_type(x);
  int perm[4] = {0, 2, 3, 1}, back[4] = {0, 3, 1, 2};
  int64_t rows[2] = {N * H * W, C}, one_row[2] = {1, C};
  mlxb_array *xt = mlxb_reshape(s, mlxb_transpose(s, x, perm, 4), rows, 2);
  const mlxb_array *parts[2] = {xt, mlxb_full(s, one_row, 2, mlxb_scalar_f64(s, -INFINITY, t), t)};
  xt = mlxb_concat(s, parts, 2, 0);
  mlxb_array *ti = mlxb_from_data(s, table, &tn, 1, MLXB_I64);
  int64_t gd[5] = {R, PH, PW, maxwin, C}, ed[4] = {R, PH, PW, 1};
  mlxb_array *g = mlxb_reshape(s, mlxb_take(s, xt, ti, 0), gd, 5);
  int ax = 3;
  mlxb_array *y = mlxb_reduce(s, MLXB_RMAX, g, &ax, 1, false);
  mlxb_array *em = mlxb_from_data(s, empty, ed, 4, MLXB_BOOL);
  y = mlxb_where(s, em, mlxb_scalar_f64(s, 0, t), y);
  rc = op_set_output(c, 0, mlxb_transpose(s, y, back, 4));
done:
  free(rv);
  free(win);
  free(table);
  free(empty);
  return rc;
}

/* ---- CropAndResize (com.microsoft) ---------------------------------------------------------
 * TensorFlow's crop_and_resize as ORT's CPU kernel computes it: each roi [y1, x1, y2, x2] (in
 * [0, 1] of the image) is sampled on a crop_height x crop_width grid, corners aligned, with ORT's
 * float arithmetic for the sample positions (the first and last rows and columns exactly at the
 * roi's edges); a sample outside the image gives extrapolation_value, one inside the bilinear
 * mix of its four neighbours (or the nearest one). rois, batch_indices and crop_size are read on
 * the host; positions become gathers of rows of the [N*H*W, C] input, all inside the image. */

static bool claim_crop_and_resize(claim_ctx *c, const op_def *def) {
  const char *mode = ir_attr_string(c->node, "mode", "bilinear");
  if (strcmp(mode, "bilinear") && strcmp(mode, "nearest")) return claim_decline(c, "unknown mode '%s'", mode);
  const ir_value *x = claim_input(c, 0);
  if (x && x->rank >= 0 && x->rank != 4) return claim_decline(c, "input rank %d (must be 4)", x->rank);
  if (claim_input_dtype(c, 1) != ONNX_FLOAT) return claim_decline(c, "rois must be float32");
  if (claim_input_dtype(c, 2) != ONNX_INT32 || claim_input_dtype(c, 3) != ONNX_INT32)
    return claim_decline(c, "batch_indices and crop_size must be int32");
  return true;
}

/* One axis of the sample grid of roi [lo, hi] in an image of `len` positions, `n` samples, as
 * ORT computes it: the position in float (the 0.5 * (lo + hi) case in double, as ORT's literal
 * makes it), whether it lies inside, and the lower index and lerp. */
typedef struct crop_axis {
  float pos, lerp;
  int64_t low, high, nearest; /* (float)(len - 1) can round up to 2^31 on a long axis */
  bool inside;
} crop_axis;

static crop_axis crop_sample(float lo, float hi, int64_t len, int64_t n, int64_t i) {
  crop_axis a;
  float scale = n > 1 ? (hi - lo) * (float)(len - 1) / (float)(n - 1) : 0.0f;
  if (n > 1)
    a.pos = i == 0 ? lo * (float)(len - 1) : i == n - 1 ? hi * (float)(len - 1) : lo * (float)(len - 1) + (float)i * scale;
  else
    a.pos = (float)(0.5 * ((double)lo + (double)hi) * (double)(len - 1));
  a.inside = !(a.pos < 0 || a.pos > (float)(len - 1)); /* NaN lies inside here as in ORT */
  /* a position outside (masked later) or NaN is clamped before any integer conversion */
  float p = isnan(a.pos) ? 0.0f : fminf(fmaxf(a.pos, 0.0f), (float)(len - 1));
  a.low = (int64_t)floorf(p), a.high = (int64_t)ceilf(p), a.nearest = (int64_t)roundf(p);
  a.lerp = a.pos - (float)a.low;
  /* keep every index in the image */
  a.low = a.low < 0 ? 0 : (a.low >= len ? len - 1 : a.low);
  a.high = a.high < 0 ? 0 : (a.high >= len ? len - 1 : a.high);
  a.nearest = a.nearest < 0 ? 0 : (a.nearest >= len ? len - 1 : a.nearest);
  return a;
}

typedef struct crop_tables {
  int64_t *at[4]; /* rows of [N*H*W, C]: top-left, top-right, bottom-left, bottom-right (or nearest in [0]) */
  float *xl, *yl;
  uint8_t *inside;
} crop_tables;

static void crop_tables_free(crop_tables *t) {
  for (int i = 0; i < 4; i++) free(t->at[i]);
  free(t->xl), free(t->yl), free(t->inside);
}

static bool crop_tables_alloc(crop_tables *t, int64_t p) {
  size_t n = (size_t)(p ? p : 1);
  for (int i = 0; i < 4; i++) t->at[i] = malloc(n * sizeof(int64_t));
  t->xl = malloc(n * sizeof(float)), t->yl = malloc(n * sizeof(float)), t->inside = malloc(n);
  return t->at[0] && t->at[1] && t->at[2] && t->at[3] && t->xl && t->yl && t->inside;
}

static int lower_crop_and_resize(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x = op_input(c, 0), *r = op_input(c, 1), *bi = op_input(c, 2), *cs = op_input(c, 3);
  if (mlxb_ndim(x) != 4 || mlxb_ndim(r) != 2 || mlxb_dim(r, 1) != 4 || mlxb_ndim(bi) != 1 || mlxb_dim(bi, 0) != mlxb_dim(r, 0))
    return op_fail(c, "X must be 4-D, rois [R, 4] and batch_indices [R]");
  if (mlxb_ndim(cs) != 1) return op_fail(c, "Number of dimensions for crop size should be exactly 1");
  int64_t size[2];
  if (op_input_ints(c, 3, size, 2) != 2) return op_check(c) ? -1 : op_fail(c, "crop_size must hold two values");
  int64_t N = mlxb_dim(x, 0), C = mlxb_dim(x, 1), H = mlxb_dim(x, 2), W = mlxb_dim(x, 3), R = mlxb_dim(r, 0);
  int64_t ch = size[0], cw = size[1], out[4] = {R, C, ch, cw};
  if (ch < 0 || cw < 0) return op_fail(c, "crop_size must not be negative");
  size_t bytes = 4, limit = mlxb_memory_limit();
  for (int i = 0; i < 4; i++)
    if (__builtin_mul_overflow(bytes, (size_t)out[i], &bytes)) bytes = SIZE_MAX;
  if (limit && bytes > limit) return op_fail(c, "output 0 needs %zu bytes, more than the memory limit (%zu bytes)", bytes, limit);
  if (op_util_numel(out, 4) == 0) return op_set_output(c, 0, mlxb_zeros(s, out, 4, mlxb_type(x)));
  if (N * H * W == 0) return op_fail(c, "rois over an empty image");
  float *rv = nms_read_floats(c, 1, (size_t)(R * 4));
  int64_t *bv = malloc((size_t)R * sizeof *bv);
  crop_tables t = {0};
  crop_axis *xs = NULL;
  int rc = -1;
  if (!rv || !bv) {
    if (rv && !bv) op_fail(c, "out of memory");
    goto done;
  }
  if (op_input_ints(c, 2, bv, (int)R) != R) {
    if (!op_check(c)) op_fail(c, "cannot read batch_indices");
    goto done;
  }
  int64_t p = R * ch * cw;
  if (!crop_tables_alloc(&t, p)) {
    op_fail(c, "out of memory");
    goto done;
  }
  bool nearest = !strcmp(ir_attr_string(op_node(c), "mode", "bilinear"), "nearest");
  xs = malloc((size_t)cw * sizeof *xs);
  if (!xs) {
    op_fail(c, "out of memory");
    goto done;
  }
  for (int64_t n = 0; n < R; n++) {
    if (bv[n] < 0 || bv[n] >= N) {
      op_fail(c, "batch index %lld outside [0, %lld)", (long long)bv[n], (long long)N);
      goto done;
    }
    const float *roi = rv + n * 4; /* y1, x1, y2, x2 */
    for (int64_t j = 0; j < cw; j++) xs[j] = crop_sample(roi[1], roi[3], W, cw, j); /* one roi's columns */
    for (int64_t i = 0; i < ch; i++) {
      crop_axis ya = crop_sample(roi[0], roi[2], H, ch, i);
      for (int64_t j = 0; j < cw; j++) {
        const crop_axis xa = xs[j];
        int64_t k = (n * ch + i) * cw + j, base = bv[n] * H * W;
        t.inside[k] = ya.inside && xa.inside;
        t.at[0][k] = base + (nearest ? (int64_t)ya.nearest * W + xa.nearest : (int64_t)ya.low * W + xa.low);
        t.at[1][k] = base + (int64_t)ya.low * W + xa.high;
        t.at[2][k] = base + (int64_t)ya.high * W + xa.low;
        t.at[3][k] = base + (int64_t)ya.high * W + xa.high;
        t.xl[k] = xa.lerp, t.yl[k] = ya.lerp;
      }
    }
  }
  mlxb_dtype dt = mlxb_type(x);
  mlxb_array *rows = mlxb_reshape(s, mlxb_transpose(s, x, (int[]){0, 2, 3, 1}, 4), (int64_t[]){N * H * W, C}, 2);
  mlxb_array *corner[4];
  for (int i = 0; i < (nearest ? 1 : 4); i++)
    corner[i] = mlxb_astype(s, mlxb_take(s, rows, mlxb_from_data(s, t.at[i], &p, 1, MLXB_I64), 0), MLXB_F32);
  mlxb_array *y = corner[0];
  if (!nearest) {
    int64_t col[2] = {p, 1};
    mlxb_array *xl = mlxb_from_data(s, t.xl, col, 2, MLXB_F32), *yl = mlxb_from_data(s, t.yl, col, 2, MLXB_F32);
    mlxb_array *top = op_util_add(s, corner[0], op_util_mul(s, op_util_sub(s, corner[1], corner[0]), xl));
    mlxb_array *bottom = op_util_add(s, corner[2], op_util_mul(s, op_util_sub(s, corner[3], corner[2]), xl));
    y = op_util_add(s, top, op_util_mul(s, op_util_sub(s, bottom, top), yl));
  }
  mlxb_array *inside = mlxb_from_data(s, t.inside, (int64_t[]){p, 1}, 2, MLXB_BOOL);
  float extra = ir_attr_float(op_node(c), "extrapolation_value", 0.0f);
  y = mlxb_where(s, inside, y, mlxb_scalar_f64(s, extra, MLXB_F32));
  y = mlxb_transpose(s, mlxb_reshape(s, y, (int64_t[]){R, ch, cw, C}, 4), (int[]){0, 3, 1, 2}, 4);
  rc = op_set_output(c, 0, mlxb_astype(s, y, dt));
done:
  crop_tables_free(&t);
  free(xs), free(rv), free(bv);
  return rc;
}

/* ---- the table ---------------------------------------------------------------------------- */

static const op_def defs[] = {
  OP_ROW("", "NonMaxSuppression", 10, 28, .inputs = {2, 5}, .outputs = {1, 1}, .dtypes = DT_F32, .claim = claim_nms,
         .lower = lower_nms,
         .doc = "float32 boxes and scores, center_point_box 0 or 1 (corners in either order), all optional inputs; "
                "boxes and scores are read on the host and run through ORT's greedy algorithm with its float32 IoU "
                "and its order of equal scores (lower box index first). The position of NaN scores is unspecified "
                "(ORT's is order-dependent). Declined: center_point_box other than 0/1"),
  OP_ROW("", "RoiAlign", 10, 25, .inputs = {3, 3}, .outputs = {1, 1}, .dtypes = DT_F32 | DT_F16 | DT_BF16,
         .claim = claim_roi_align, .lower = lower_roi_align,
         .doc = "rois and batch_indices read on the host (each Run); avg and max (ORT's maximum of weighted "
                "corners), half_pixel/output_half_pixel, adaptive or fixed sampling_ratio; float64 declined"),
  OP_ROW("com.microsoft", "CropAndResize", 1, 1, .inputs = {4, 4}, .outputs = {1, 1}, .dtypes = DT_F32,
         .claim = claim_crop_and_resize, .lower = lower_crop_and_resize,
         .doc = "float32 (ORT's CPU kernel); rois, batch_indices and crop_size read on the host (each Run); bilinear "
                "and nearest with ORT's float sample positions, extrapolation_value outside the image; a batch index "
                "outside [0, N) fails the Run"),
  OP_ROW("", "MaxRoiPool", 1, 22, .inputs = {2, 2}, .outputs = {1, 1}, .dtypes = DT_FLOAT, .claim = claim_max_roi_pool,
         .lower = lower_max_roi_pool,
         .doc = "rois read on the host (each Run) and turned into gather windows with ORT's float arithmetic; the "
                "true maximum of each bin (ORT starts its maximum at FLT_MIN, so all-negative bins differ)"),
};

OPS_FAMILY(detection, defs);
