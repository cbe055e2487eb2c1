/* SVMClassifier and SVMRegressor of the ai.onnx.ml domain. ONNX leaves much of their
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

#define ML_MAX_PROB_CLASSES 32 /* SVM pairwise coupling: up to 100 sweeps of O(classes) ops each */

/* ---- SVMClassifier / SVMRegressor ---------------------------------------------------------- */

typedef enum svm_kernel { SVM_LINEAR, SVM_POLY, SVM_RBF, SVM_SIGMOID, SVM_BAD } svm_kernel;

typedef struct svm_params {
  svm_kernel kernel;
  float gamma, coef0, degree; /* kernel_params */
} svm_params;

/* kernel_type and kernel_params; false for an unknown kernel or fewer than three parameters (ORT
 * requires the attribute and reads three values from it). */
static bool svm_params_read(const ir_node *n, svm_params *p, const char **why) {
  static const char *const names[] = {"LINEAR", "POLY", "RBF", "SIGMOID"};
  _Static_assert(sizeof names / sizeof names[0] == SVM_BAD, "one name per svm_kernel value");
  const char *k = ir_attr_string(n, "kernel_type", "LINEAR");
  p->kernel = SVM_BAD;
  for (int i = 0; i < SVM_BAD; i++)
    if (strcmp(k, names[i]) == 0) p->kernel = (svm_kernel)i;
  if (p->kernel == SVM_BAD) return *why = "unknown kernel_type", false;
  const float *kp;
  size_t nk = ir_attr_floats(n, "kernel_params", &kp);
  if (!ml_attr_has(n, "kernel_params")) return *why = "no kernel_params (ORT requires them)", false;
  if (nk > 0 && nk < 3) return *why = "kernel_params needs gamma, coef0 and degree", false;
  p->gamma = nk ? kp[0] : 0.0f, p->coef0 = nk ? kp[1] : 0.0f, p->degree = nk ? kp[2] : 0.0f;
  return true;
}

/* The kernel's rows w [m, f] (support vectors, or liblinear's coefficients) as svm_kernel_dot
 * takes them: [1, m, f] for RBF, transposed to [f, m] for the others. Built at prepare. */
static mlxb_array *svm_kernel_rows(mlxb_scope *s, const svm_params *p, const float *w, int64_t m, int64_t f) {
  if (p->kernel == SVM_RBF) {
    int64_t d3[3] = {1, m, f};
    return mlxb_from_data(s, w, d3, 3, MLXB_F32);
  }
  int64_t d[2] = {m, f};
  int perm[2] = {1, 0};
  return mlxb_transpose(s, mlxb_from_data(s, w, d, 2, MLXB_F32), perm, 2);
}

/* ORT's batched_kernel_dot: x [n, f] against rows w [m, f] -> [n, m], with w as svm_kernel_rows
 * built it. RBF is exp(-gamma * |x - w|^2); the others are alpha * x.w + c (alpha = 1 and c =
 * bias for LINEAR, gamma and coef0 for POLY and SIGMOID) followed by the power or tanh. */
static mlxb_array *svm_kernel_dot(mlxb_scope *s, const svm_params *p, mlxb_array *x, mlxb_array *w, float bias) {
  if (p->kernel == SVM_RBF) {
    int ax1 = 1, ax2 = 2;
    mlxb_array *diff = op_util_sub(s, mlxb_expand_dims(s, x, &ax1, 1), w);
    mlxb_array *sum = mlxb_reduce(s, MLXB_RSUM, op_util_mul(s, diff, diff), &ax2, 1, false);
    return mlxb_unary(s, MLXB_EXP, op_util_mul(s, ml_f32(s, -p->gamma), sum));
  }
  float alpha = p->kernel == SVM_LINEAR ? 1.0f : p->gamma, c = p->kernel == SVM_LINEAR ? bias : p->coef0;
  mlxb_array *k = mlxb_matmul(s, x, w);
  if (alpha != 1.0f) k = op_util_mul(s, ml_f32(s, alpha), k);
  if (c != 0.0f) k = op_util_add(s, k, ml_f32(s, c));
  if (p->kernel == SVM_POLY) {
    if (p->degree == 2.0f) return op_util_mul(s, k, k);
    if (p->degree == 3.0f) return op_util_mul(s, op_util_mul(s, k, k), k);
    return mlxb_binary(s, MLXB_POW, k, ml_f32(s, p->degree));
  }
  if (p->kernel == SVM_SIGMOID) return mlxb_unary(s, MLXB_TANH, k);
  return k;
}

static bool claim_svm_regressor(claim_ctx *c, const op_def *def) {
  const ir_node *n = c->node;
  svm_params p;
  const char *why;
  if (!svm_params_read(n, &p, &why)) return claim_decline(c, "%s", why);
  /* ORT never applies post_transform here; the spec does: decline where they differ. */
  if (ml_post_of(n) != ML_POST_NONE) return claim_decline(c, "post_transform (ORT ignores it, the spec applies it)");
  int64_t v = ir_attr_int(n, "n_supports", 0), sv = ml_attr_count(n, "support_vectors"), coefs = ml_attr_count(n, "coefficients");
  if (ml_attr_count(n, "rho") < 1) return claim_decline(c, "no rho");
  if (coefs < 1) return claim_decline(c, "no coefficients");
  if (v < 0) return claim_decline(c, "n_supports %lld", (long long)v);
  if (v > 0 && (sv == 0 || sv % v || coefs < v)) return claim_decline(c, "support_vectors/coefficients do not match n_supports");
  return ml_claim_rows_rank(c);
}

/* An SVMRegressor as prepare leaves it (prepare_svm_regressor): the kernel and, kept with the
 * plan's constants, the kernel's rows and the coefficients. Built once at Compile. */
typedef struct svm_reg_prepared {
  svm_params p;       /* LINEAR in liblinear mode (no support vectors) */
  int64_t feats;      /* features the model takes */
  float bias;         /* rho[0] */
  bool one_class;
  mlxb_array *w;      /* support vectors, or the coefficients in liblinear mode (svm_kernel_rows) */
  mlxb_array *coef;   /* with support vectors: their coefficients as [v, 1] */
} svm_reg_prepared;

static int lower_svm_regressor(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const svm_reg_prepared *sp = op_prepared(c);
  if (!sp) return op_fail(c, "the model was not prepared");
  int64_t rows, feats;
  mlxb_array *x = ml_rows(c, MLXB_F32, &rows, &feats), *y;
  if (!x) return -1;
  if (feats != sp->feats) return op_fail(c, "%lld features, the model has %lld", (long long)feats, (long long)sp->feats);
  if (sp->coef) {
    mlxb_array *k = svm_kernel_dot(s, &sp->p, x, sp->w, 0.0f);
    y = op_util_add(s, mlxb_matmul(s, k, sp->coef), ml_f32(s, sp->bias));
  } else {
    y = svm_kernel_dot(s, &sp->p, x, sp->w, sp->bias);
  }
  if (sp->one_class)
    y = mlxb_where(s, mlxb_binary(s, MLXB_GREATER, y, ml_f32(s, 0.0)), ml_f32(s, 1.0), ml_f32(s, -1.0));
  return op_set_output(c, 0, y);
}

static void svm_release(void *state) { free(state); }

/* The attributes as the claim has just accepted them again (so reading them fails only for want
 * of memory), and their arrays. */
static int prepare_svm_regressor(op_ctx *c, const op_def *def, void **state) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  svm_reg_prepared *sp = calloc(1, sizeof *sp);
  if (!sp) return op_fail(c, "out of memory");
  *state = sp;
  const char *why;
  if (!svm_params_read(n, &sp->p, &why)) return op_fail(c, "%s", why);
  const float *coef, *rho, *sv;
  int64_t coefs = (int64_t)ir_attr_floats(n, "coefficients", &coef);
  int64_t nsv = (int64_t)ir_attr_floats(n, "support_vectors", &sv);
  if (ir_attr_floats(n, "rho", &rho) < 1 || coefs < 1) return op_fail(c, "no rho or coefficients");
  int64_t v = ir_attr_int(n, "n_supports", 0);
  sp->bias = rho[0];
  sp->one_class = ir_attr_int(n, "one_class", 0) != 0;
  if (v > 0) {
    sp->feats = nsv / v;
    int64_t d[2] = {v, 1};
    sp->w = op_prepare_keep(c, svm_kernel_rows(s, &sp->p, sv, v, sp->feats));
    sp->coef = op_prepare_keep(c, mlxb_from_data(s, coef, d, 2, MLXB_F32));
    if (!sp->w || !sp->coef) return -1;
  } else {
    sp->p = (svm_params){SVM_LINEAR, 0, 0, 0};
    sp->feats = coefs;
    if (!(sp->w = op_prepare_keep(c, svm_kernel_rows(s, &sp->p, coef, 1, coefs)))) return -1;
  }
  return 0;
}

/* The SVMClassifier attributes ORT reads, with its derived counts. */
typedef struct svm_model {
  svm_params p;
  int64_t classes, vectors, feats; /* feats: 0 until known from X */
  const int64_t *labels, *per_class;
  const float *coef, *rho, *sv, *prob_a, *prob_b;
  int64_t ncoef, nrho, nsv, nprob;
  ml_post post;
} svm_model;

static bool svm_model_read(const ir_node *n, svm_model *m, const char **why) {
  memset(m, 0, sizeof *m);
  if (ml_attr_count(n, "classlabels_strings") > 0) return *why = "string class labels (string output)", false;
  if (!svm_params_read(n, &m->p, why)) return false;
  m->post = ml_post_of(n);
  if (m->post == ML_POST_BAD) return *why = "unknown post_transform", false;
  m->classes = (int64_t)ir_attr_ints(n, "classlabels_ints", &m->labels);
  int64_t npc = (int64_t)ir_attr_ints(n, "vectors_per_class", &m->per_class);
  m->ncoef = (int64_t)ir_attr_floats(n, "coefficients", &m->coef);
  m->nrho = (int64_t)ir_attr_floats(n, "rho", &m->rho);
  m->nsv = (int64_t)ir_attr_floats(n, "support_vectors", &m->sv);
  m->nprob = (int64_t)ir_attr_floats(n, "prob_a", &m->prob_a);
  if ((int64_t)ir_attr_floats(n, "prob_b", &m->prob_b) != m->nprob) return *why = "prob_a and prob_b differ in length", false;
  if (m->classes < 1) return *why = "no class labels", false;
  if (m->ncoef < 1) return *why = "no coefficients", false;
  for (int64_t i = 0; i < npc; i++) {
    if (m->per_class[i] < 0) return *why = "negative vectors_per_class", false;
    /* a sum that wraps would size the pair tables below what the per-class loops index */
    if (__builtin_add_overflow(m->vectors, m->per_class[i], &m->vectors) || m->vectors > m->nsv)
      return *why = "vectors_per_class sums past the support vectors", false;
  }
  int64_t pairs = m->classes * (m->classes - 1) / 2;
  if (m->vectors > 0) {
    if (npc != m->classes) return *why = "vectors_per_class does not match the class count", false;
    if (m->nsv == 0 || m->nsv % m->vectors) return *why = "support_vectors do not split into vectors", false;
    if (m->classes < 2) return *why = "one class", false;
    if (m->ncoef < (m->classes - 1) * m->vectors || m->nrho < pairs) return *why = "too few coefficients or rho", false;
    if (m->nprob > 0 && m->nprob < pairs) return *why = "too few prob_a/prob_b", false;
    if (m->nprob > 0 && m->classes > ML_MAX_PROB_CLASSES) return *why = "probabilities for more than 32 classes", false;
    if (m->nprob == 0 && m->classes == 2 && m->post == ML_POST_PROBIT)
      return *why = "binary PROBIT leaves ORT's second score column unwritten", false;
    m->feats = m->nsv / m->vectors;
  } else {
    if (m->ncoef % m->classes) return *why = "coefficients do not split into classes", false;
    if (m->nrho < 1) return *why = "no rho", false;
    m->p.kernel = SVM_LINEAR; /* liblinear mode */
    m->feats = m->ncoef / m->classes;
  }
  return true;
}

static bool claim_svm_classifier(claim_ctx *c, const op_def *def) {
  svm_model m;
  const char *why;
  if (!svm_model_read(c->node, &m, &why)) return claim_decline(c, "%s", why);
  return ml_claim_rows_rank(c);
}

/* Whether every row has converged, read on the host (outside compile traces): sweeps stop early
 * once they no longer change anything. */
static bool svm_all_done(mlxb_scope *s, mlxb_array *done) {
  int64_t all = 0;
  mlxb_array *a = mlxb_reduce(s, MLXB_RALL, done, NULL, 0, false);
  return a && mlxb_read_i64(s, a, &all, 1) == 0 && all;
}

/* Pairwise coupling of the one-vs-one probabilities r into class probabilities (ORT's
 * multiclass_probability, after Wu, Lin and Weng): up to 100 Gauss-Seidel sweeps, each row
 * stopping when its error is below 0.005 / k. Every float32 operation is spelled out in ORT's
 * order so that rows stop on the same sweep. sig [n, pairs] holds the pair probabilities. */
static mlxb_array *svm_coupling(mlxb_scope *s, mlxb_array *sig, int64_t k, int64_t n) {
  mlxb_array *r[ML_MAX_PROB_CLASSES][ML_MAX_PROB_CLASSES] = {{0}};
  mlxb_array *q[ML_MAX_PROB_CLASSES][ML_MAX_PROB_CLASSES] = {{0}};
  mlxb_array *qrow[ML_MAX_PROB_CLASSES], *mask[ML_MAX_PROB_CLASSES];
  int64_t idx = 0;
  for (int64_t i = 0; i < k - 1; i++)
    for (int64_t j = i + 1; j < k; j++, idx++) {
      r[i][j] = ml_column(s, sig, idx);
      r[j][i] = op_util_sub(s, ml_f32(s, 1.0), r[i][j]);
    }
  for (int64_t i = 0; i < k; i++) {
    q[i][i] = mlxb_zeros(s, &n, 1, MLXB_F32);
    for (int64_t j = 0; j < k; j++) {
      if (j == i) continue;
      q[i][i] = op_util_add(s, q[i][i], op_util_mul(s, r[j][i], r[j][i]));
      if (j > i) q[i][j] = op_util_mul(s, mlxb_unary(s, MLXB_NEG, r[j][i]), r[i][j]);
    }
    for (int64_t j = 0; j < i; j++) q[i][j] = q[j][i];
  }
  for (int64_t i = 0; i < k; i++) {
    qrow[i] = mlxb_stack(s, (const mlxb_array *const *)q[i], (int)k, 1);
    mask[i] = mlxb_binary(s, MLXB_EQUAL, mlxb_arange(s, 0, (double)k, 1, MLXB_I32), mlxb_scalar_i64(s, i, MLXB_I32));
  }
  int64_t nk[2] = {n, k};
  mlxb_array *p = mlxb_full(s, nk, 2, ml_f32(s, 1.0f / (float)k), MLXB_F32);
  mlxb_array *done = mlxb_zeros(s, &n, 1, MLXB_BOOL);
  mlxb_array *eps = ml_f32(s, 0.005f / (float)k);
  int ax = 1;
  for (int loop = 0; loop < 100; loop++) {
    mlxb_array *qp = mlxb_zeros(s, nk, 2, MLXB_F32), *pqp = mlxb_zeros(s, &n, 1, MLXB_F32);
    for (int64_t j = 0; j < k; j++) qp = op_util_add(s, qp, op_util_mul(s, qrow[j], op_util_reshape2(s, ml_column(s, p, j), n, 1)));
    for (int64_t i = 0; i < k; i++) pqp = op_util_add(s, pqp, op_util_mul(s, ml_column(s, p, i), ml_column(s, qp, i)));
    mlxb_array *err = mlxb_unary(s, MLXB_ABS, op_util_sub(s, qp, op_util_reshape2(s, pqp, n, 1)));
    err = mlxb_where(s, mlxb_unary(s, MLXB_ISNAN, err), ml_f32(s, 0.0), err); /* '>' never takes NaN */
    mlxb_array *max_err = mlxb_reduce(s, MLXB_RMAX, err, &ax, 1, false);
    done = mlxb_binary(s, MLXB_LOGICAL_OR, done, mlxb_binary(s, MLXB_LESS, max_err, eps));
    if (loop % 4 == 0 && !mlxb_in_trace() && svm_all_done(s, done)) break; /* later sweeps change nothing */
    mlxb_array *np = p;
    for (int64_t i = 0; i < k; i++) {
      mlxb_array *qii = q[i][i], *qpi = ml_column(s, qp, i);
      mlxb_array *diff = op_util_div(s, op_util_add(s, mlxb_unary(s, MLXB_NEG, qpi), pqp), qii);
      mlxb_array *one_d = op_util_add(s, ml_f32(s, 1.0), diff), *diff2 = op_util_reshape2(s, diff, n, 1), *one_d2 = op_util_reshape2(s, one_d, n, 1);
      np = mlxb_where(s, mask[i], op_util_add(s, np, diff2), np);
      mlxb_array *inner = op_util_add(s, op_util_mul(s, diff, qii), op_util_mul(s, ml_f32(s, 2.0), qpi));
      pqp = op_util_div(s, op_util_div(s, op_util_add(s, pqp, op_util_mul(s, diff, inner)), one_d), one_d);
      qp = op_util_div(s, op_util_add(s, qp, op_util_mul(s, diff2, qrow[i])), one_d2);
      np = op_util_div(s, np, one_d2);
    }
    p = mlxb_where(s, op_util_reshape2(s, done, n, 1), p, np);
  }
  return p;
}

/* An SVMClassifier as prepare leaves it (prepare_svm_classifier): the model as the claim read it
 * (its pointers are into the node's attributes, which the plan keeps) and, kept with the plan's
 * constants, every array the lowering combines with X. Built once at Compile. */
typedef struct svm_cls_prepared {
  svm_model m;
  bool all_pos;          /* liblinear mode: every coefficient >= 0 (svm_linear_labels) */
  mlxb_array *w;         /* support vectors, or the coefficients in liblinear mode (svm_kernel_rows) */
  mlxb_array *labels;    /* int64 [classes] */
  mlxb_array *pair_w, *pair_used; /* with support vectors: svm_pair_tables */
  mlxb_array *rho;       /* with support vectors: float32 [pairs] */
  mlxb_array *vote_a, *vote_b;    /* with support vectors: svm_vote_tables */
  mlxb_array *prob_a, *prob_b;    /* with probabilities: float32 [pairs] */
} svm_cls_prepared;

/* The one-vs-one weights of libsvm: for classes i < j, the coefficients of row j-1 against class
 * i's support vectors and those of row i against class j's, as [1, vectors, pairs], and which
 * cells a pair uses. */
static int svm_pair_tables(op_ctx *c, svm_cls_prepared *sp) {
  mlxb_scope *s = op_scope(c);
  const svm_model *m = &sp->m;
  int64_t k = m->classes, v = m->vectors, pairs = k * (k - 1) / 2;
  float *w = calloc((size_t)(v * pairs), sizeof *w);
  uint8_t *used = calloc((size_t)(v * pairs), 1);
  int64_t *start = calloc((size_t)k, sizeof *start);
  if (!w || !used || !start) {
    free(w), free(used), free(start);
    return op_fail(c, "out of memory");
  }
  for (int64_t i = 1; i < k; i++) start[i] = start[i - 1] + m->per_class[i - 1];
  int64_t pk = 0;
  for (int64_t i = 0; i < k - 1; i++)
    for (int64_t j = i + 1; j < k; j++, pk++) {
      for (int64_t t = 0; t < m->per_class[i]; t++) {
        w[(start[i] + t) * pairs + pk] = m->coef[v * (j - 1) + start[i] + t];
        used[(start[i] + t) * pairs + pk] = 1;
      }
      for (int64_t t = 0; t < m->per_class[j]; t++) {
        w[(start[j] + t) * pairs + pk] = m->coef[v * i + start[j] + t];
        used[(start[j] + t) * pairs + pk] = 1;
      }
    }
  int64_t d3[3] = {1, v, pairs};
  sp->pair_w = op_prepare_keep(c, mlxb_from_data(s, w, d3, 3, MLXB_F32));
  sp->pair_used = op_prepare_keep(c, mlxb_from_data(s, used, d3, 3, MLXB_BOOL));
  free(w), free(used), free(start);
  return sp->pair_w && sp->pair_used ? 0 : -1;
}

/* One-vs-one decision values: the pair weights against the kernel values plus rho; float
 * products summed in double, as ORT. Returns the double sums [n, pairs]. */
static mlxb_array *svm_pair_sums(mlxb_scope *s, const svm_cls_prepared *sp, mlxb_array *kern) {
  int ax2 = 2, ax1 = 1;
  mlxb_array *prod = op_util_mul(s, mlxb_expand_dims(s, kern, &ax2, 1), sp->pair_w); /* float products, as ORT */
  prod = mlxb_where(s, sp->pair_used, prod, ml_f32(s, 0.0));                        /* no inf * 0 from other classes */
  bool old = mlxb_scope_force_cpu(s, true);                                      /* float64 work */
  mlxb_array *sum = mlxb_reduce(s, MLXB_RSUM, op_util_cast(s, prod, MLXB_F64), &ax1, 1, false);
  sum = op_util_add(s, sum, op_util_cast(s, sp->rho, MLXB_F64));
  mlxb_scope_force_cpu(s, old);
  return sum;
}

/* Which class each one-vs-one classifier votes for: a [pairs, classes] has 1 at class i of pair
 * (i, j), b at class j. */
static int svm_vote_tables(op_ctx *c, svm_cls_prepared *sp) {
  mlxb_scope *s = op_scope(c);
  int64_t k = sp->m.classes, pairs = k * (k - 1) / 2;
  float *a = calloc((size_t)(pairs * k), sizeof *a), *b = calloc((size_t)(pairs * k), sizeof *b);
  if (!a || !b) {
    free(a), free(b);
    return op_fail(c, "out of memory");
  }
  int64_t pk = 0;
  for (int64_t i = 0; i < k - 1; i++)
    for (int64_t j = i + 1; j < k; j++, pk++) a[pk * k + i] = 1.0f, b[pk * k + j] = 1.0f;
  int64_t d[2] = {pairs, k};
  sp->vote_a = op_prepare_keep(c, mlxb_from_data(s, a, d, 2, MLXB_F32));
  sp->vote_b = op_prepare_keep(c, mlxb_from_data(s, b, d, 2, MLXB_F32));
  free(a), free(b);
  return sp->vote_a && sp->vote_b ? 0 : -1;
}

/* Votes of the one-vs-one classifiers (class i wins where the sum is > 0, else j), as float counts [n, k]. */
static mlxb_array *svm_votes(mlxb_scope *s, const svm_cls_prepared *sp, mlxb_array *pos) {
  mlxb_array *pf = op_util_cast(s, pos, MLXB_F32);
  return op_util_add(s, mlxb_matmul(s, pf, sp->vote_a), mlxb_matmul(s, op_util_sub(s, ml_f32(s, 1.0), pf), sp->vote_b));
}

/* Label of liblinear mode for two classes (ORT's ChooseClass): without probabilities a positive
 * best score (>= 0.5 when every coefficient is >= 0) picks labels[1]. */
static mlxb_array *svm_linear_labels(mlxb_scope *s, const svm_cls_prepared *sp, mlxb_array *z, mlxb_array *best) {
  const svm_model *m = &sp->m;
  mlxb_array *y = mlxb_take(s, sp->labels, best, 0);
  if (m->classes != 2 || m->nprob > 0) return y;
  int64_t n = mlxb_dim(z, 0);
  mlxb_array *maxw = ml_reshape1(s, mlxb_take_along_axis(s, z, op_util_reshape2(s, best, n, 1), 1), n);
  mlxb_array *win = sp->all_pos ? mlxb_binary(s, MLXB_GREATER_EQUAL, maxw, ml_f32(s, 0.5)) : mlxb_binary(s, MLXB_GREATER, maxw, ml_f32(s, 0.0));
  return mlxb_where(s, win, mlxb_scalar_i64(s, m->labels[1], MLXB_I64), y);
}

static int lower_svm_classifier(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const svm_cls_prepared *sp = op_prepared(c);
  if (!sp) return op_fail(c, "the model was not prepared");
  const svm_model *m = &sp->m;
  int64_t rows, feats, k = m->classes;
  mlxb_array *x = ml_rows(c, MLXB_F32, &rows, &feats), *y, *z;
  if (!x) return -1;
  if (feats != m->feats) return op_fail(c, "%lld features, the model has %lld", (long long)feats, (long long)m->feats);
  if (m->vectors == 0) {
    z = svm_kernel_dot(s, &m->p, x, sp->w, m->rho[0]);
    y = svm_linear_labels(s, sp, z, ml_argmax_first(s, z));
    z = k >= 2 ? ml_post_rows(s, z, m->post) : ml_post_single(s, z, m->post);
  } else {
    mlxb_array *kern = svm_kernel_dot(s, &m->p, x, sp->w, 0.0f);
    mlxb_array *sums = svm_pair_sums(s, sp, kern);
    bool old = mlxb_scope_force_cpu(s, true);
    mlxb_array *pos = mlxb_binary(s, MLXB_GREATER, sums, mlxb_scalar_f64(s, 0.0, MLXB_F64));
    mlxb_array *scores = op_util_cast(s, sums, MLXB_F32);
    mlxb_scope_force_cpu(s, old);
    mlxb_array *votes = svm_votes(s, sp, pos);
    y = mlxb_take(s, sp->labels, op_util_cast(s, mlxb_argmax(s, votes, 1, false), MLXB_I32), 0);
    if (m->nprob > 0) {
      mlxb_array *val = op_util_add(s, op_util_mul(s, scores, sp->prob_a), sp->prob_b);
      mlxb_array *sig = op_util_sub(s, ml_f32(s, 1.0), ml_logistic(s, val));
      sig = mlxb_binary(s, MLXB_MINIMUM, mlxb_binary(s, MLXB_MAXIMUM, sig, ml_f32(s, 1.0e-7f)), ml_f32(s, 1.0f - 1.0e-7f));
      z = ml_post_rows(s, svm_coupling(s, sig, k, rows), m->post);
    } else if (k > 2) {
      z = ml_post_rows(s, scores, m->post);
    } else {
      z = ml_second_class(s, scores, m->post == ML_POST_NONE ? 2 : 0, m->post);
    }
  }
  if (op_set_output(c, 0, y)) return -1;
  return op_has_output(c, 1) ? op_set_output(c, 1, z) : 0;
}

static int prepare_svm_classifier(op_ctx *c, const op_def *def, void **state) {
  mlxb_scope *s = op_scope(c);
  svm_cls_prepared *sp = calloc(1, sizeof *sp);
  if (!sp) return op_fail(c, "out of memory");
  *state = sp;
  svm_model *m = &sp->m;
  const char *why;
  if (!svm_model_read(op_node(c), m, &why)) return op_fail(c, "%s", why);
  if (!(sp->labels = op_prepare_keep(c, ml_vec_i64(s, m->labels, m->classes)))) return -1;
  if (m->vectors == 0) {
    sp->all_pos = true;
    for (int64_t i = 0; i < m->ncoef; i++) sp->all_pos = sp->all_pos && m->coef[i] >= 0.0f;
    sp->w = op_prepare_keep(c, svm_kernel_rows(s, &m->p, m->coef, m->classes, m->feats));
    return sp->w ? 0 : -1;
  }
  int64_t pairs = m->classes * (m->classes - 1) / 2;
  if (!(sp->w = op_prepare_keep(c, svm_kernel_rows(s, &m->p, m->sv, m->vectors, m->feats)))) return -1;
  if (!(sp->rho = op_prepare_keep(c, ml_vec_f32(s, m->rho, pairs)))) return -1;
  if (svm_pair_tables(c, sp) || svm_vote_tables(c, sp)) return -1;
  if (m->nprob > 0) {
    sp->prob_a = op_prepare_keep(c, ml_vec_f32(s, m->prob_a, pairs));
    sp->prob_b = op_prepare_keep(c, ml_vec_f32(s, m->prob_b, pairs));
    if (!sp->prob_a || !sp->prob_b) return -1;
  }
  return 0;
}

/* ---- the table ---------------------------------------------------------------------------- */

static const op_def defs[] = {
    OP_ROW(ML, "SVMRegressor", 1, 1, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_F32,
           .claim = claim_svm_regressor, .lower = lower_svm_regressor, .prepare = prepare_svm_regressor,
           .release = svm_release,
           .doc = "float X; LINEAR/POLY/RBF/SIGMOID kernels with support vectors, or liblinear coefficients; "
                  "one_class. Declined: post_transform other than NONE (ORT ignores it), missing kernel_params"),
    OP_ROW(ML, "SVMClassifier", 1, 1, .inputs = {1, 1}, .outputs = {2, 2}, .dtypes = DT_ML_IN,
           .claim = claim_svm_classifier, .lower = lower_svm_classifier, .prepare = prepare_svm_classifier,
           .release = svm_release,
           .doc = "float/double/int32/int64 X (cast to float); int64 labels; LINEAR/POLY/RBF/SIGMOID kernels with "
                  "one-vs-one voting, prob_a/prob_b probabilities by ORT's pairwise coupling (<= 32 classes), or "
                  "liblinear coefficients; every post_transform. Declined: string labels, binary PROBIT without "
                  "probabilities (ORT leaves a column unwritten)"),
};

OPS_FAMILY(ml_svm, defs);
