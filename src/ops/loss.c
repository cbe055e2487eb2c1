/* Loss ops: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (the latter is log-softmax over
 * the class axis followed by the former). Targets are clipped into [0, C-1] before MLX gathers
 * with them (MLX does no bounds checks), and ignore_index rows are masked out with where. */
#include <string.h>

#include "ops/op_util.h"


enum { LOSS_ARG_NLL, LOSS_ARG_SOFTMAX }; /* op_def.arg */

typedef enum loss_reduction { LOSS_NONE, LOSS_SUM, LOSS_MEAN } loss_reduction;

static bool loss_parse_reduction(const char *s, loss_reduction *out) {
  if (!strcmp(s, "none")) return *out = LOSS_NONE, true;
  if (!strcmp(s, "sum")) return *out = LOSS_SUM, true;
  if (!strcmp(s, "mean")) return *out = LOSS_MEAN, true;
  return false;
}

/* ---- claim -------------------------------------------------------------------------------- */

static bool claim_loss(claim_ctx *c, const op_def *def) {
  loss_reduction red;
  const char *r = ir_attr_string(c->node, "reduction", "mean");
  if (!loss_parse_reduction(r, &red)) return claim_decline(c, "reduction '%s' is unknown", r);
  int32_t t = claim_input_dtype(c, 1);
  if (t != ONNX_INT32 && t != ONNX_INT64) return claim_decline(c, "target dtype %s (int32/int64 only)", ir_dtype_name(t));
  const ir_value *x = claim_input(c, 0);
  if (x && x->rank >= 0 && (x->rank < 2 || x->rank > OP_UTIL_MAX_RANK))
    return claim_decline(c, "input rank %d (2..%d supported)", x->rank, OP_UTIL_MAX_RANK);
  /* MLX's float64 exp is only float32-accurate (about 1e-7 relative), too coarse for doubles. */
  if (def->arg == LOSS_ARG_SOFTMAX && claim_input_dtype(c, 0) == ONNX_DOUBLE)
    return claim_decline(c, "float64 log-softmax (MLX's float64 exp has float32 accuracy)");
  int32_t wt = claim_input_dtype(c, 2);
  if (wt != ONNX_UNDEFINED && wt != claim_input_dtype(c, 0)) return claim_decline(c, "weight dtype differs from input's");
  return true;
}

/* ---- the shared NLL core ------------------------------------------------------------------ */

/* The NLL of log-probabilities lp [N, C, d...] at targets t [N, d...], reduced as asked. */
static mlxb_array *loss_nll(op_ctx *c, mlxb_array *lp, mlxb_array *target, mlxb_array *weight) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  loss_reduction red = LOSS_MEAN;
  loss_parse_reduction(ir_attr_string(n, "reduction", "mean"), &red);
  int rank = mlxb_ndim(lp);
  if (rank < 2 || rank > OP_UTIL_MAX_RANK || mlxb_ndim(target) != rank - 1) {
    op_fail(c, "input rank %d and target rank %d do not fit [N, C, d...] / [N, d...]", rank, mlxb_ndim(target));
    return NULL;
  }
  int64_t classes = mlxb_dim(lp, 1);
  if (weight && (mlxb_ndim(weight) != 1 || mlxb_dim(weight, 0) != classes)) {
    op_fail(c, "weight must hold one value per class (%lld)", (long long)classes);
    return NULL;
  }
  mlxb_dtype ft = mlxb_type(lp);
  mlxb_array *t64 = mlxb_astype(s, target, MLXB_I64);
  /* Clipped targets keep MLX in bounds; the rows they alter are either ignored (masked below)
   * or invalid models ORT rejects. An empty class axis leaves nothing to gather. */
  if (classes == 0 && mlxb_size(target) > 0) {
    op_fail(c, "input has no classes");
    return NULL;
  }
  /* ORT refuses a target outside [0, C) other than ignore_index (its kernels default it to -1) */
  const ir_attr *ignore = ir_node_attr(n, "ignore_index");
  mlxb_array *in_range = mlxb_binary(s, MLXB_LOGICAL_AND, mlxb_binary(s, MLXB_GREATER_EQUAL, t64, mlxb_scalar_i64(s, 0, MLXB_I64)),
                                     mlxb_binary(s, MLXB_LESS, t64, mlxb_scalar_i64(s, classes, MLXB_I64)));
  in_range = mlxb_binary(s, MLXB_LOGICAL_OR, in_range, mlxb_binary(s, MLXB_EQUAL, t64, mlxb_scalar_i64(s, ignore ? ignore->i : -1, MLXB_I64)));
  if (op_require(c, in_range, t64, "target {} out of range [0, %lld)", (long long)classes)) return NULL;
  mlxb_array *safe = mlxb_clip(s, t64, mlxb_scalar_i64(s, 0, MLXB_I64), mlxb_scalar_i64(s, classes > 0 ? classes - 1 : 0, MLXB_I64));
  int one = 1;
  mlxb_array *picked = mlxb_take_along_axis(s, lp, mlxb_expand_dims(s, safe, &one, 1), 1);
  picked = mlxb_squeeze(s, picked, &one, 1);
  mlxb_array *w = weight ? mlxb_take(s, weight, safe, 0) : NULL;
  {
    mlxb_array *keep = mlxb_binary(s, MLXB_NOT_EQUAL, t64, mlxb_scalar_i64(s, ignore ? ignore->i : -1, MLXB_I64));
    mlxb_array *zero = mlxb_scalar_f64(s, 0.0, ft);
    if (!w) w = mlxb_full(s, NULL, 0, mlxb_scalar_f64(s, 1.0, ft), ft);
    w = mlxb_where(s, keep, w, zero);
  }
  mlxb_array *loss = mlxb_unary(s, MLXB_NEG, w ? mlxb_binary(s, MLXB_MUL, picked, w) : picked);
  if (red == LOSS_NONE) return loss;
  mlxb_array *sum = mlxb_reduce(s, MLXB_RSUM, loss, NULL, 0, false);
  if (red == LOSS_SUM) return sum;
  if (!w) return mlxb_reduce(s, MLXB_RMEAN, loss, NULL, 0, false);
  /* Weighted mean: divide by the weights actually applied (0/0 = NaN when all are ignored); w
   * has the targets' shape here (a take, or a where against the keep mask). */
  mlxb_array *wsum = mlxb_reduce(s, MLXB_RSUM, w, NULL, 0, false);
  return mlxb_binary(s, MLXB_DIV, sum, wsum);
}

/* ---- lowerings ---------------------------------------------------------------------------- */

static int lower_nll(op_ctx *c, const op_def *def) {
  mlxb_array *x = op_input(c, 0), *t = op_input(c, 1);
  mlxb_array *y = loss_nll(c, x, t, op_input(c, 2));
  if (!y) return op_fail(c, "loss was not computed");
  return op_set_output(c, 0, y);
}

static int lower_softmax_ce(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x = op_input(c, 0), *t = op_input(c, 1);
  if (mlxb_ndim(x) < 2) return op_fail(c, "scores must have rank >= 2");
  int axis = 1;
  mlxb_array *lse = mlxb_reduce(s, MLXB_RLOGSUMEXP, x, &axis, 1, true);
  mlxb_array *lp = mlxb_binary(s, MLXB_SUB, x, lse);
  mlxb_array *y = loss_nll(c, lp, t, op_input(c, 2));
  if (!y) return op_fail(c, "loss was not computed");
  if (op_set_output(c, 0, y)) return -1;
  return op_util_set_optional(c, 1, lp);
}

/* ---- the table ---------------------------------------------------------------------------- */

static const op_def defs[] = {
  OP_ROW("", "NegativeLogLikelihoodLoss", 12, 22, .inputs = {2, 3}, .outputs = {1, 1}, .dtypes = DT_FLOAT,
         .claim = claim_loss, .lower = lower_nll, .arg = LOSS_ARG_NLL,
         .doc = "reduction none/sum/mean, optional weight, ignore_index, [N, C] and [N, C, d1..dk]; int32/int64 "
                "targets (a target outside [0, C) other than ignore_index, -1 when absent as in ORT's kernels, fails "
                "the Run)"),
  OP_ROW("", "SoftmaxCrossEntropyLoss", 12, 13, .inputs = {2, 3}, .outputs = {1, 2}, .dtypes = DT_FLOAT,
         .claim = claim_loss, .lower = lower_softmax_ce, .arg = LOSS_ARG_SOFTMAX,
         .doc = "float/float16/bfloat16; reduction none/sum/mean, optional weights, ignore_index, optional log_prob "
                "output, N-D; int32/int64 labels. float64 declined (MLX's float64 exp has float32 accuracy)"),
};

OPS_FAMILY(loss, defs);
