/* LinearClassifier and LinearRegressor of the ai.onnx.ml domain. ONNX leaves much of their
 * arithmetic open, so every formula here follows ORT's CPU kernels step by step (float32 scores,
 * their post-transforms, their tie-breaking and their binary-class quirks); forms where ORT and the
 * spec disagree, or where ORT reads uninitialized memory, are declined. */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ml_util.h"

/* ---- LinearClassifier / LinearRegressor ---------------------------------------------------- */


static bool claim_linear_classifier(claim_ctx *c, const op_def *def) {
  const ir_node *n = c->node;
  if (ml_attr_count(n, "classlabels_strings") > 0) return claim_decline(c, "string class labels (string output)");
  int64_t classes = ml_attr_count(n, "intercepts"), coefs = ml_attr_count(n, "coefficients");
  int64_t labels = ml_attr_count(n, "classlabels_ints");
  ml_post post = ml_post_of(n);
  if (post == ML_POST_BAD) return claim_decline(c, "unknown post_transform");
  if (classes < 1) return claim_decline(c, "no intercepts (ORT takes the class count from them)");
  if (coefs == 0 || coefs % classes) return claim_decline(c, "coefficients do not split into %lld classes", (long long)classes);
  if (classes > 1 && labels < classes) return claim_decline(c, "fewer class labels than classes");
  if (classes == 1 && labels != 0 && labels != 2) return claim_decline(c, "one class needs 0 or 2 labels (ORT fails)");
  if (classes == 1 && labels == 2 && post == ML_POST_PROBIT)
    return claim_decline(c, "binary PROBIT leaves ORT's second score column unwritten");
  return ml_claim_rows_rank(c);
}

static int lower_linear_classifier(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  const float *coef, *icpt;
  const int64_t *labels;
  int64_t coefs = (int64_t)ir_attr_floats(n, "coefficients", &coef);
  int64_t classes = (int64_t)ir_attr_floats(n, "intercepts", &icpt);
  int64_t nlab = (int64_t)ir_attr_ints(n, "classlabels_ints", &labels);
  ml_post post = ml_post_of(n);
  int64_t rows, feats;
  mlxb_array *x = ml_rows(c, MLXB_F32, &rows, &feats);
  if (!x) return -1;
  if (coefs != classes * feats)
    return op_fail(c, "%lld coefficients for %lld classes and %lld features", (long long)coefs, (long long)classes,
                   (long long)feats);
  mlxb_array *z = op_util_add(s, ml_matmul_t(s, x, coef, classes, feats), ml_vec_f32(s, icpt, classes));
  mlxb_array *y;
  if (classes == 1) {
    int64_t pos = nlab == 2 ? labels[1] : 1, neg = nlab == 2 ? labels[0] : 0;
    mlxb_array *gt = mlxb_binary(s, MLXB_GREATER, ml_reshape1(s, z, rows), ml_f32(s, 0.0));
    y = mlxb_where(s, gt, mlxb_scalar_i64(s, pos, MLXB_I64), mlxb_scalar_i64(s, neg, MLXB_I64));
    z = nlab == 2 ? ml_second_class(s, z, 1, post) : ml_post_single(s, z, post);
  } else {
    y = ml_pick_labels(s, labels, nlab, ml_argmax_first(s, z));
    z = ml_post_rows(s, z, post);
  }
  if (op_set_output(c, 0, y)) return -1;
  return op_has_output(c, 1) ? op_set_output(c, 1, z) : 0;
}

static bool claim_linear_regressor(claim_ctx *c, const op_def *def) {
  const ir_node *n = c->node;
  int64_t targets = ir_attr_int(n, "targets", 1), coefs = ml_attr_count(n, "coefficients");
  if (ml_post_of(n) == ML_POST_BAD) return claim_decline(c, "unknown post_transform");
  if (targets < 1) return claim_decline(c, "targets %lld", (long long)targets);
  if (coefs == 0 || coefs % targets) return claim_decline(c, "coefficients do not split into %lld targets", (long long)targets);
  int r = ml_claim_rank(c, 0);
  if (r > 2) return claim_decline(c, "input rank %d (ORT's kernel takes rank 0 to 2)", r);
  return true;
}

static int lower_linear_regressor(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  const float *coef, *icpt;
  int64_t coefs = (int64_t)ir_attr_floats(n, "coefficients", &coef);
  int64_t nicpt = (int64_t)ir_attr_floats(n, "intercepts", &icpt);
  int64_t targets = ir_attr_int(n, "targets", 1);
  mlxb_array *x = op_input(c, 0);
  int r = mlxb_ndim(x);
  if (r > 2) return op_fail(c, "input rank %d (at most 2)", r);
  /* Rank 0 and 1 are one row of every element. */
  int64_t rows = r <= 1 ? 1 : mlxb_dim(x, 0), feats = r <= 1 ? (int64_t)mlxb_size(x) : mlxb_dim(x, 1);
  if (coefs != targets * feats)
    return op_fail(c, "%lld coefficients for %lld targets and %lld features", (long long)coefs, (long long)targets,
                   (long long)feats);
  mlxb_array *z = ml_matmul_t(s, op_util_reshape2(s, x, rows, feats), coef, targets, feats);
  if (nicpt == targets) z = op_util_add(s, z, ml_vec_f32(s, icpt, targets)); /* ORT ignores intercepts of another length */
  ml_post post = ml_post_of(n);
  z = targets == 1 ? ml_post_single(s, z, post) : ml_post_rows(s, z, post);
  return op_set_output(c, 0, z);
}

/* ---- the table ---------------------------------------------------------------------------- */

static const op_def defs[] = {
    OP_ROW(ML, "LinearClassifier", 1, 1, .inputs = {1, 1}, .outputs = {2, 2}, .dtypes = DT_ML_IN,
           .claim = claim_linear_classifier, .lower = lower_linear_classifier,
           .doc = "float/double/int32/int64 X of rank 1 or 2 (cast to float, as ORT); int64 classlabels_ints; every "
                  "post_transform; one class with two labels gives [1 - p, p] (p the score, or its logistic under "
                  "LOGISTIC; other transforms ignored, as ORT), one class without labels a raw score (PROBIT only). "
                  "Declined: classlabels_strings (string output), no intercepts, binary PROBIT (ORT leaves a column "
                  "unwritten)"),
    OP_ROW(ML, "LinearRegressor", 1, 1, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_F32,
           .claim = claim_linear_regressor, .lower = lower_linear_regressor,
           .doc = "float X of rank <= 2 (ORT's only type); intercepts used when one per target; every post_transform "
                  "(one target: PROBIT only, as ORT)"),
};

OPS_FAMILY(ml_linear, defs);
