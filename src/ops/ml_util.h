/* Helpers shared by the ai.onnx.ml families (ml.c, ml_linear.c, ml_svm.c, ml_trees.c): host tables,
 * the rows-of-features view ORT's ml kernels take, and the post-transforms as ORT's ml_common.h
 * computes them (float32). */
#ifndef EP_MLX_ML_UTIL_H
#define EP_MLX_ML_UTIL_H

#include "ops/op_util.h"

#define ML "ai.onnx.ml"
#define DT_ML_IN (DT_F32 | DT_F64 | DT(ONNX_INT32) | DT(ONNX_INT64)) /* T of most ml ops */

typedef enum ml_post { ML_POST_NONE, ML_POST_LOGISTIC, ML_POST_SOFTMAX, ML_POST_SOFTMAX_ZERO, ML_POST_PROBIT, ML_POST_BAD } ml_post;

mlxb_array *ml_f32(mlxb_scope *s, double v);
mlxb_array *ml_vec_f32(mlxb_scope *s, const float *v, int64_t n);
mlxb_array *ml_vec_i64(mlxb_scope *s, const int64_t *v, int64_t n);
/* Host doubles as an array of float type t, converted on the host: a GPU scope has no float64
 * kernels to cast with. */
mlxb_array *ml_host_reals(mlxb_scope *s, const double *v, const int64_t *dims, int rank, mlxb_dtype t);
mlxb_array *ml_reshape1(mlxb_scope *s, mlxb_array *x, int64_t a);
/* Column k of a [n, m] array, as [n]. */
mlxb_array *ml_column(mlxb_scope *s, mlxb_array *x, int64_t k);
mlxb_array *ml_concat2(mlxb_scope *s, mlxb_array *a, mlxb_array *b, int axis);
int64_t ml_attr_count(const ir_node *n, const char *name);
bool ml_attr_has(const ir_node *n, const char *name);
/* The input's rank when the graph knows it, else -1. */
int ml_claim_rank(const claim_ctx *c, int i);
/* ORT's ml kernels see X as rows of features: rank 1 is one row, rank 2 is [rows, features].
 * Returns X as [n, f] of dtype t, or NULL with the failure recorded. */
mlxb_array *ml_rows(op_ctx *c, mlxb_dtype t, int64_t *n, int64_t *f);
ml_post ml_post_parse(const char *p);
ml_post ml_post_of(const ir_node *n);
/* 1 / (1 + exp(-|x|)), mirrored for x < 0. */
mlxb_array *ml_logistic(mlxb_scope *s, mlxb_array *x);
/* sqrt(2) * ErfInv(2p - 1) with ORT's closed-form ErfInv approximation (a = 0.147). */
mlxb_array *ml_probit(mlxb_scope *s, mlxb_array *p);
/* The row maximum as ORT's loops find it: starting at -FLT_MAX, NaN never taken. */
mlxb_array *ml_row_max(mlxb_scope *s, mlxb_array *x);
mlxb_array *ml_softmax(mlxb_scope *s, mlxb_array *x);
/* Softmax over the non-zero scores; zeros become zero * exp(-max) and stay out of the sum. ORT
 * computes in float32 even for double scores, except the products with zeros and the final
 * division, which are double there. */
mlxb_array *ml_softmax_zero(mlxb_scope *s, mlxb_array *x);
/* The transform of rows of two or more scores (last axis), in float32 as ORT computes it
 * whatever the score type; the result keeps z's dtype. */
mlxb_array *ml_post_rows(mlxb_scope *s, mlxb_array *z, ml_post post);
/* ORT's transform of one score per row: only PROBIT applies. */
mlxb_array *ml_post_single(mlxb_scope *s, mlxb_array *z, ml_post post);
/* A one-score row [n, 1] widened to two classes as ORT does: [1 - p, p] with p the score, or its
 * logistic under LOGISTIC (modes 0 and 1; other transforms are not applied), or for mixed-sign
 * weights (modes 2 and 3) [-s, s] or, under LOGISTIC, the logistic of both. */
mlxb_array *ml_second_class(mlxb_scope *s, mlxb_array *z, int mode, ml_post post);
/* Index of the first maximum of each row under '>', as ORT's loops and std::max_element pick it:
 * NaN never wins, except a NaN in column 0, which stays. Returns int32 [n]. */
mlxb_array *ml_argmax_first(mlxb_scope *s, mlxb_array *z);
/* labels[idx] for int32 indices known to be in range. */
mlxb_array *ml_pick_labels(mlxb_scope *s, const int64_t *labels, int64_t n, mlxb_array *idx);
/* X [n, f] @ W^T for row-major weights W [m, f] given on the host. */
mlxb_array *ml_matmul_t(mlxb_scope *s, mlxb_array *x, const float *w, int64_t m, int64_t f);
bool ml_claim_rows_rank(claim_ctx *c);

/* A key and its position, sorted by qsort with ml_key_cmp_int or ml_key_cmp_real. */
typedef struct ml_key {
  int64_t i;   /* integer keys */
  double r;    /* real keys */
  int64_t pos;
} ml_key;
/* Integer keys in order, ties by position. */
int ml_key_cmp_int(const void *a, const void *b);
/* Real keys compare with < and > (so -0 equals 0), ties by position. */
int ml_key_cmp_real(const void *a, const void *b);

#endif
