/* Recurrent ops (RNN, GRU, LSTM) lowered onto MLX. The input projection X @ W^T (+ biases) is one
 * matmul over the whole sequence; then each step adds h @ R^T and applies the gates. On the CPU
 * the steps of a direction are one operation of ours (mlxb_recurrence_run); on a GPU the time loop
 * is unrolled into the MLX graph for the sequence length of the Run (the runtime builds and
 * compiles one graph per input signature, so no step is evaluated on its own). Half types
 * compute in float32 and round once at the end.
 *
 * Semantics follow ORT's CPU kernels (onnxruntime/core/providers/cpu/rnn): per-batch
 * sequence_lens freeze the state of a finished sequence, Y is zero past its length and Y_h/Y_c
 * hold the state after its last valid step (zero for a length of 0, or T = 0); the reverse
 * direction of a sequence starts at its own last valid step. Clip bounds every gate's input
 * (biases and peepholes included). activation_alpha/beta are consumed in the order of the
 * functions that take them; forms where ORT's CPU EP and the ONNX spec would give different
 * values (a default ORT takes as 0, RNN's per-direction lists) are declined. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ops/op_util.h"

enum { RK_RNN, RK_GRU, RK_LSTM };

typedef enum act_kind {
  ACT_SIGMOID, ACT_TANH, ACT_RELU, ACT_AFFINE, ACT_LEAKYRELU, ACT_THRESHOLDEDRELU, ACT_SCALEDTANH,
  ACT_HARDSIGMOID, ACT_ELU, ACT_SOFTSIGN, ACT_SOFTPLUS, ACT_COUNT
} act_kind;

/* Per function: its name, whether it takes alpha/beta, ORT's defaults (rnn_helpers.cc) and the
 * ONNX operators' defaults (NaN: the operator has none). */
typedef struct act_info {
  const char *name;
  bool needs_alpha, needs_beta;
  float ort_alpha, ort_beta;
  float spec_alpha, spec_beta;
} act_info;

#define NO_DEFAULT (-1e30f)
static const act_info ACTS[ACT_COUNT] = {
    {"Sigmoid", false, false, 0, 0, 0, 0},
    {"Tanh", false, false, 0, 0, 0, 0},
    {"Relu", false, false, 0, 0, 0, 0},
    {"Affine", true, true, 0.f, 0.f, 1.f, 0.f},
    {"LeakyRelu", true, false, 0.01f, 0, 0.01f, 0},
    {"ThresholdedRelu", true, false, 0.f, 0, 1.f, 0},
    {"ScaledTanh", true, true, 0.f, 0.f, NO_DEFAULT, NO_DEFAULT},
    {"HardSigmoid", true, true, 0.2f, 0.5f, 0.2f, 0.5f},
    {"Elu", true, false, 1.f, 0, 1.f, 0},
    {"Softsign", false, false, 0, 0, 0, 0},
    {"Softplus", false, false, 0, 0, 0, 0},
};

typedef struct rnn_act {
  act_kind kind;
  float alpha, beta;
} rnn_act;

#define RNN_MAX_ACTS 6

typedef struct rnn_attrs {
  int kind;        /* RK_* */
  int dirs;        /* 1 or 2 */
  bool reverse;    /* direction == "reverse" (one direction, run backwards) */
  int per_dir;     /* activation functions per direction: 1, 2 or 3 */
  rnn_act acts[RNN_MAX_ACTS];
  bool has_clip;
  float clip;
  int layout;
  int64_t hidden;  /* -1 when absent */
  bool linear_before_reset;
  bool input_forget;
} rnn_attrs;

static int gates_of(int kind) { return kind == RK_LSTM ? 4 : kind == RK_GRU ? 3 : 1; }

static const char *const DEFAULT_ACTS[3][3] = {{"Tanh"}, {"Sigmoid", "Tanh"}, {"Sigmoid", "Tanh", "Tanh"}};

static int find_act(const char *name, bool exact_case) {
  for (int k = 0; k < ACT_COUNT; k++)
    if (exact_case ? !strcmp(name, ACTS[k].name) : !strcasecmp(name, ACTS[k].name)) return k;
  return -1;
}

/* One alpha or beta: the ONNX value (consumed in order, else the operator's default) and ORT's
 * (deep kernels: the same order with ORT's defaults; RNN: the list's entry for the direction, 0
 * when there is no list) must agree. */
static bool pick_param(const float *list, size_t n, size_t *next, bool rnn, int dir, float spec_dflt, float ort_dflt,
                       float *out) {
  float spec = *next < n ? list[*next] : spec_dflt;
  float ort = rnn ? (n ? list[dir] : 0.f) : (*next < n ? list[*next] : ort_dflt);
  if (*next < n) (*next)++;
  if (spec == NO_DEFAULT || spec != ort) return false;
  *out = spec;
  return true;
}

/* Reads and checks the attributes shared by claim and lowering; false with why set. */
static bool rnn_parse(const ir_node *n, int kind, rnn_attrs *a, char *why, size_t why_len) {
  memset(a, 0, sizeof *a);
  a->kind = kind;
  const char *dir = ir_attr_string(n, "direction", "forward");
  if (!strcmp(dir, "forward")) a->dirs = 1;
  else if (!strcmp(dir, "reverse")) a->dirs = 1, a->reverse = true;
  else if (!strcmp(dir, "bidirectional")) a->dirs = 2;
  else return snprintf(why, why_len, "direction '%s'", dir), false;
  a->hidden = ir_attr_int(n, "hidden_size", -1);
  if (ir_node_attr(n, "hidden_size") && a->hidden <= 0)
    return snprintf(why, why_len, "hidden_size %lld", (long long)a->hidden), false;
  int64_t layout = ir_attr_int(n, "layout", 0); /* compared before narrowing: 2^32 is not layout 0 */
  if (layout != 0 && layout != 1) return snprintf(why, why_len, "layout %lld", (long long)layout), false;
  a->layout = (int)layout;
  if (ir_node_attr(n, "clip")) {
    a->has_clip = true;
    a->clip = ir_attr_float(n, "clip", 0.f);
    if (!(a->clip > 0.f)) return snprintf(why, why_len, "clip %g (must be > 0)", (double)a->clip), false;
  }
  a->linear_before_reset = kind == RK_GRU && ir_attr_int(n, "linear_before_reset", 0) != 0;
  a->input_forget = kind == RK_LSTM && ir_attr_int(n, "input_forget", 0) != 0;

  a->per_dir = kind == RK_LSTM ? 3 : kind == RK_GRU ? 2 : 1;
  int need = a->per_dir * a->dirs;
  const ir_attr *acts = ir_node_attr(n, "activations");
  const char *names[RNN_MAX_ACTS];
  size_t given = acts && acts->type == IR_ATTR_STRINGS ? acts->n : 0;
  if (given == 0) {
    for (int d = 0; d < a->dirs; d++)
      for (int k = 0; k < a->per_dir; k++) names[d * a->per_dir + k] = DEFAULT_ACTS[a->per_dir - 1][k];
  } else if ((int)given == need || (kind == RK_RNN && a->dirs == 1 && given == 2)) {
    /* ORT's RNN takes the first of two functions for one direction (the schema's default lists two) */
    for (int k = 0; k < need; k++) names[k] = acts->strings[k];
  } else {
    return snprintf(why, why_len, "%zu activations (expected %d)", given, need), false;
  }
  const float *alphas = NULL, *betas = NULL;
  size_t n_alpha = ir_attr_floats(n, "activation_alpha", &alphas);
  size_t n_beta = ir_attr_floats(n, "activation_beta", &betas);
  bool rnn = kind == RK_RNN;
  if (rnn && ((n_alpha && (int)n_alpha < a->dirs) || (n_beta && (int)n_beta < a->dirs)))
    return snprintf(why, why_len, "fewer activation_alpha/beta values than directions"), false;
  size_t next_alpha = 0, next_beta = 0;
  for (int k = 0; k < need; k++) {
    /* ORT lowercases LSTM/GRU function names; its RNN kernel matches them exactly */
    int kk = find_act(names[k], rnn);
    if (kk < 0) return snprintf(why, why_len, "activation '%s'", names[k]), false;
    const act_info *info = &ACTS[kk];
    rnn_act *act = &a->acts[k];
    act->kind = (act_kind)kk;
    int dir = k / a->per_dir;
    if (info->needs_alpha &&
        !pick_param(alphas, n_alpha, &next_alpha, rnn, dir, info->spec_alpha, info->ort_alpha, &act->alpha))
      return snprintf(why, why_len, "activation_alpha of %s: ORT's CPU EP and the ONNX spec disagree", info->name),
             false;
    if (info->needs_beta &&
        !pick_param(betas, n_beta, &next_beta, rnn, dir, info->spec_beta, info->ort_beta, &act->beta))
      return snprintf(why, why_len, "activation_beta of %s: ORT's CPU EP and the ONNX spec disagree", info->name),
             false;
  }
  return true;
}

static bool claim_rnn(claim_ctx *c, const op_def *def) {
  rnn_attrs a;
  char why[200];
  if (!rnn_parse(c->node, def->arg, &a, why, sizeof why)) return claim_decline(c, "%s", why);
  static const int floats[] = {0, 1, 2, 3, 5, 6, 7};
  int n_floats = def->arg == RK_LSTM ? 7 : 5;
  if (!op_util_claim_same_dtypes(c, floats, n_floats)) return false;
  int32_t lt = claim_input_dtype(c, 4);
  if (lt != ONNX_UNDEFINED && lt != ONNX_INT32)
    return claim_decline(c, "sequence_lens of dtype %s", ir_dtype_name(lt));
  const ir_value *x = claim_input(c, 0);
  if (x && x->rank >= 0 && x->rank != 3) return claim_decline(c, "X of rank %d", x->rank);
  return true;
}

/* ---- lowering ------------------------------------------------------------------------------ */

static mlxb_array *sc(mlxb_scope *s, double v, mlxb_dtype t) { return op_util_scalar(s, v, t); }

static mlxb_array *apply_act(mlxb_scope *s, const rnn_act *f, mlxb_array *x) {
  mlxb_dtype t = mlxb_type(x);
  mlxb_array *zero = sc(s, 0.0, t);
  switch (f->kind) {
    case ACT_SIGMOID: return mlxb_unary(s, MLXB_SIGMOID, x);
    case ACT_TANH: return mlxb_unary(s, MLXB_TANH, x);
    case ACT_RELU: return mlxb_binary(s, MLXB_MAXIMUM, x, zero);
    case ACT_AFFINE:
      return mlxb_binary(s, MLXB_ADD, mlxb_binary(s, MLXB_MUL, x, sc(s, f->alpha, t)), sc(s, f->beta, t));
    case ACT_LEAKYRELU:
      return mlxb_where(s, mlxb_binary(s, MLXB_GREATER_EQUAL, x, zero), x, mlxb_binary(s, MLXB_MUL, x, sc(s, f->alpha, t)));
    case ACT_THRESHOLDEDRELU: return mlxb_where(s, mlxb_binary(s, MLXB_GREATER, x, sc(s, f->alpha, t)), x, zero);
    case ACT_SCALEDTANH:
      return mlxb_binary(s, MLXB_MUL, sc(s, f->alpha, t),
                         mlxb_unary(s, MLXB_TANH, mlxb_binary(s, MLXB_MUL, x, sc(s, f->beta, t))));
    case ACT_HARDSIGMOID: {
      mlxb_array *y = mlxb_binary(s, MLXB_ADD, mlxb_binary(s, MLXB_MUL, x, sc(s, f->alpha, t)), sc(s, f->beta, t));
      return mlxb_clip(s, y, zero, sc(s, 1.0, t));
    }
    case ACT_ELU: {
      mlxb_array *em1 = mlxb_binary(s, MLXB_SUB, mlxb_unary(s, MLXB_EXP, x), sc(s, 1.0, t));
      return mlxb_where(s, mlxb_binary(s, MLXB_GREATER_EQUAL, x, zero), x, mlxb_binary(s, MLXB_MUL, em1, sc(s, f->alpha, t)));
    }
    case ACT_SOFTSIGN:
      return mlxb_binary(s, MLXB_DIV, x, mlxb_binary(s, MLXB_ADD, mlxb_unary(s, MLXB_ABS, x), sc(s, 1.0, t)));
    case ACT_SOFTPLUS: /* log(1 + exp(x)), as ORT computes it */
      return mlxb_unary(s, MLXB_LOG, mlxb_binary(s, MLXB_ADD, mlxb_unary(s, MLXB_EXP, x), sc(s, 1.0, t)));
    default: mlxb_set_error(s, "unknown activation"); return NULL;
  }
}

/* f(clip(x)) */
static mlxb_array *gate(mlxb_scope *s, const rnn_attrs *a, const rnn_act *f, mlxb_array *x) {
  if (a->has_clip) {
    mlxb_dtype t = mlxb_type(x);
    x = mlxb_clip(s, x, sc(s, -(double)a->clip, t), sc(s, (double)a->clip, t));
  }
  return apply_act(s, f, x);
}

/* a[d] of a [D, ...] array, as [...]. */
static mlxb_array *take_dir(mlxb_scope *s, mlxb_array *x, int d) {
  if (!x) return NULL;
  int axis = 0;
  return mlxb_squeeze(s, op_util_slice_axis(s, x, 0, d, d + 1, 1), &axis, 1);
}

static mlxb_array *transpose3(mlxb_scope *s, mlxb_array *x, int p0, int p1, int p2) {
  int perm[3] = {p0, p1, p2};
  return x ? mlxb_transpose(s, x, perm, 3) : NULL;
}

static mlxb_array *rT(mlxb_scope *s, mlxb_array *m) { /* [N, K] -> [K, N] */
  int perm[2] = {1, 0};
  return mlxb_transpose(s, m, perm, 2);
}

/* The state of one direction while its steps are built. */
typedef struct dir_state {
  mlxb_array *h, *c;
} dir_state;

_Static_assert((int)ACT_SIGMOID == (int)MLXB_RACT_SIGMOID && (int)ACT_SOFTPLUS == (int)MLXB_RACT_SOFTPLUS &&
                   (int)ACT_COUNT == (int)MLXB_RACT_COUNT,
               "rnn.c's activations are the bridge's, in its order");
_Static_assert((int)RK_RNN == (int)MLXB_RECUR_RNN && (int)RK_GRU == (int)MLXB_RECUR_GRU &&
                   (int)RK_LSTM == (int)MLXB_RECUR_LSTM,
               "rnn.c's kinds are the bridge's");

/* Constant float32 weights packed at Compile for the CPU's products (where
 * mlxb_gemm_packed_available): each direction's W [G*H, I] for the GEMM of the input projection of
 * every step (one product per Run), and its R [G*H, H] for the recurrence's product of each step
 * (mlxb_recurrence_run; a GRU without linear_before_reset has rows [0, 2H) and [2H, 3H) apart, as
 * its steps take them). A Run then packs neither. */
typedef struct rnn_prepared {
  mlxb_array *w_packed[2];
  mlxb_array *r_packed[2][2];
} rnn_prepared;

/* One direction's steps as one operation on the CPU (mlxb_recurrence_run: the same arithmetic as
 * the unrolled steps below, without an MLX operation per gate and step): xw [T, B, G*H] is the
 * input projection with the biases folded in, h and cs the direction's initial states. */
static int recurrence_on_cpu(op_ctx *c, const rnn_attrs *a, int d, mlxb_array *xw, mlxb_array *r, mlxb_array *rbh,
                             mlxb_array *lens, mlxb_array *h, mlxb_array *cs, mlxb_array *p, int64_t B, bool want_y,
                             mlxb_array **y_out, dir_state *fin) {
  mlxb_scope *s = op_scope(c);
  const rnn_act *acts = &a->acts[d * a->per_dir];
  mlxb_recurrence rec;
  memset(&rec, 0, sizeof rec);
  rec.kind = a->kind;
  for (int i = 0; i < a->per_dir && i < 3; i++) {
    rec.act[i] = (int)acts[i].kind;
    rec.alpha[i] = acts[i].alpha;
    rec.beta[i] = acts[i].beta;
  }
  rec.has_clip = a->has_clip;
  rec.clip = a->clip;
  rec.input_forget = a->input_forget;
  rec.linear_before_reset = a->linear_before_reset;
  rec.backwards = a->reverse || d == 1;
  mlxb_array *lens_b = lens ? mlxb_reshape(s, lens, &B, 1) : NULL;
  if (op_check(c)) return -1;
  mlxb_array *y = NULL;
  const rnn_prepared *kept = op_prepared(c);
  const mlxb_array *const *r_packed = kept ? (const mlxb_array *const *)kept->r_packed[d] : NULL;
  if (mlxb_recurrence_run(s, &rec, xw, take_dir(s, r, d), r_packed, h, cs, take_dir(s, p, d), lens_b, rbh, want_y, &y,
                          &fin->h, &fin->c))
    return op_check(c);
  if (want_y) *y_out = y;
  return 0;
}

/* input i when it is a constant float32 [1 or 2, rows, cols] with nothing empty, else NULL (the
 * lowering reports a bad one) */
static mlxb_array *packable_weight(op_ctx *c, int i, int64_t rows) {
  mlxb_array *v = op_input(c, i);
  if (!v || !op_inputs_const(c, &i, 1) || mlxb_ndim(v) != 3 || mlxb_type(v) != MLXB_F32 || mlxb_size(v) == 0)
    return NULL;
  return mlxb_dim(v, 0) <= 2 && mlxb_dim(v, 1) == rows ? v : NULL;
}

static int prepare_recurrence(op_ctx *c, const rnn_attrs *a, mlxb_array *r, rnn_prepared *kept) {
  mlxb_scope *s = op_scope(c);
  const int64_t H = mlxb_dim(r, 2);
  const bool gru_apart = a->kind == RK_GRU && !a->linear_before_reset;
  for (int d = 0; d < mlxb_dim(r, 0); d++) {
    mlxb_array *rd = take_dir(s, r, d);
    mlxb_array *part = gru_apart ? op_util_slice_axis(s, rd, 0, 0, 2 * H, 1) : rd;
    kept->r_packed[d][0] = op_prepare_keep(c, mlxb_gemm_pack(s, part, true));
    if (gru_apart)
      kept->r_packed[d][1] = op_prepare_keep(c, mlxb_gemm_pack(s, op_util_slice_axis(s, rd, 0, 2 * H, 3 * H, 1), true));
    if (!kept->r_packed[d][0] || (gru_apart && !kept->r_packed[d][1])) return -1;
  }
  return 0;
}

static int prepare_rnn(op_ctx *c, const op_def *def, void **state) {
  rnn_attrs a;
  char why[200];
  mlxb_scope *s = op_scope(c);
  if (!mlxb_gemm_packed_available(s) || !rnn_parse(op_node(c), def->arg, &a, why, sizeof why))
    return 0; /* the lowering reports a bad node */
  /* An R fed at Run has no value here: W is packed alone, its rows G * hidden_size, else its own */
  mlxb_array *r = op_input(c, 2), *w = op_input(c, 1);
  int64_t gh = r && mlxb_ndim(r) == 3 ? gates_of(a.kind) * mlxb_dim(r, 2)
               : a.hidden > 0         ? gates_of(a.kind) * a.hidden
               : w && mlxb_ndim(w) == 3 ? mlxb_dim(w, 1)
                                        : 0;
  if (gh <= 0) return 0;
  w = packable_weight(c, 1, gh);
  r = packable_weight(c, 2, gh);
  if (!w && !r) return 0;
  rnn_prepared *kept = calloc(1, sizeof *kept);
  if (!kept) return op_fail(c, "out of memory");
  *state = kept;
  for (int d = 0; w && d < mlxb_dim(w, 0); d++) {
    kept->w_packed[d] = op_prepare_keep(c, mlxb_gemm_pack(s, take_dir(s, w, d), true));
    if (!kept->w_packed[d]) return -1;
  }
  return r ? prepare_recurrence(c, &a, r, kept) : 0;
}

/* The input projection of every step at once: x [T*B, I] @ W_d^T. */
static mlxb_array *input_projection(op_ctx *c, int d, mlxb_array *x2, mlxb_array *w, int64_t gh) {
  mlxb_scope *s = op_scope(c);
  const rnn_prepared *kept = op_prepared(c);
  if (kept && kept->w_packed[d] && mlxb_type(x2) == MLXB_F32 && mlxb_size(x2) > 0)
    return mlxb_gemm_packed(s, x2, kept->w_packed[d], gh, NULL, false);
  return mlxb_matmul(s, x2, rT(s, take_dir(s, w, d)));
}

/* Builds one direction: returns Y_d [T, B, H] (NULL when not wanted) and the final states. */
static int lower_direction(op_ctx *c, const rnn_attrs *a, int d, mlxb_array *x, mlxb_array *w, mlxb_array *r,
                           mlxb_array *bias, mlxb_array *lens, mlxb_array *h0, mlxb_array *c0, mlxb_array *p,
                           int64_t T, int64_t B, int64_t H, bool want_y, mlxb_array **y_out, dir_state *fin) {
  mlxb_scope *s = op_scope(c);
  mlxb_dtype ct = mlxb_type(x);
  int G = gates_of(a->kind);
  int64_t I = mlxb_dim(x, 2);
  const rnn_act *acts = &a->acts[d * a->per_dir];
  bool backwards = a->reverse || d == 1;

  /* input projection of every step at once: [T*B, I] @ W^T + biases */
  mlxb_array *xw = input_projection(c, d, op_util_reshape2(s, x, T * B, I), w, (int64_t)G * H);
  mlxb_array *rbh = NULL; /* GRU with linear_before_reset: Rbh stays inside r * (h Rh^T + Rbh) */
  if (bias) {
    mlxb_array *bd = take_dir(s, bias, d);
    mlxb_array *wb = op_util_slice_axis(s, bd, 0, 0, G * H, 1), *rb = op_util_slice_axis(s, bd, 0, G * H, 2 * G * H, 1);
    mlxb_array *b;
    if (a->kind == RK_GRU && a->linear_before_reset) {
      rbh = op_util_slice_axis(s, rb, 0, 2 * H, 3 * H, 1);
      mlxb_array *parts[2] = {mlxb_binary(s, MLXB_ADD, op_util_slice_axis(s, wb, 0, 0, 2 * H, 1),
                                          op_util_slice_axis(s, rb, 0, 0, 2 * H, 1)),
                              op_util_slice_axis(s, wb, 0, 2 * H, 3 * H, 1)};
      b = mlxb_concat(s, (const mlxb_array *const *)parts, 2, 0);
    } else {
      b = mlxb_binary(s, MLXB_ADD, wb, rb);
    }
    xw = mlxb_binary(s, MLXB_ADD, xw, b);
  }
  int64_t dims3[3] = {T, B, (int64_t)G * H};
  xw = mlxb_reshape(s, xw, dims3, 3);
  int64_t bh[2] = {B, H};
  mlxb_array *h = h0 ? take_dir(s, h0, d) : mlxb_zeros(s, bh, 2, ct);
  mlxb_array *cs = a->kind == RK_LSTM ? (c0 ? take_dir(s, c0, d) : mlxb_zeros(s, bh, 2, ct)) : NULL;
  if (op_check(c)) return -1;
  if (ct == MLXB_F32 && mlxb_recurrence_available(s))
    return recurrence_on_cpu(c, a, d, xw, r, rbh, lens, h, cs, p, B, want_y, y_out, fin);

  mlxb_array **steps = calloc((size_t)T + 1, sizeof *steps);
  mlxb_array **ys = want_y ? calloc((size_t)T, sizeof *ys) : NULL;
  if (!steps || (want_y && !ys)) {
    free(steps);
    free(ys);
    return op_fail(c, "out of memory");
  }
  int64_t *cuts = calloc((size_t)T, sizeof *cuts);
  if (!cuts) {
    free(steps);
    free(ys);
    return op_fail(c, "out of memory");
  }
  for (int64_t k = 0; k + 1 < T; k++) cuts[k] = k + 1;
  int rc = mlxb_split(s, xw, cuts, (int)(T - 1), 0, steps);
  free(cuts);
  if (rc) {
    free(steps);
    free(ys);
    return op_fail(c, "split failed");
  }

  mlxb_array *rt = rT(s, take_dir(s, r, d)); /* [H, G*H] */
  mlxb_array *rt_zr = NULL, *rt_h = NULL;
  if (a->kind == RK_GRU && !a->linear_before_reset) {
    rt_zr = op_util_slice_axis(s, rt, 1, 0, 2 * H, 1);
    rt_h = op_util_slice_axis(s, rt, 1, 2 * H, 3 * H, 1);
  }
  mlxb_array *pi = NULL, *po = NULL, *pf = NULL;
  if (p) {
    mlxb_array *pd = take_dir(s, p, d);
    pi = op_util_slice_axis(s, pd, 0, 0, H, 1);
    po = op_util_slice_axis(s, pd, 0, H, 2 * H, 1);
    pf = op_util_slice_axis(s, pd, 0, 2 * H, 3 * H, 1);
  }
  mlxb_array *zero = sc(s, 0.0, ct), *one = sc(s, 1.0, ct);
  int64_t gdims[2] = {B, (int64_t)G * H};
  int64_t idx3[3] = {H, 2 * H, 3 * H};

  for (int64_t k = 0; k < T; k++) {
    int64_t t = backwards ? T - 1 - k : k;
    mlxb_array *xt = mlxb_reshape(s, steps[t], gdims, 2);
    mlxb_array *hn = NULL, *cn = NULL;
    if (a->kind == RK_RNN) {
      hn = gate(s, a, &acts[0], mlxb_addmm(s, xt, h, rt, 1.f, 1.f));
    } else if (a->kind == RK_GRU) {
      mlxb_array *g[4];
      mlxb_array *hr = NULL;
      if (a->linear_before_reset) {
        mlxb_array *all = mlxb_matmul(s, h, rt);
        mlxb_array *hparts[3];
        if (mlxb_split(s, all, idx3, 2, 1, hparts)) break;
        if (mlxb_split(s, xt, idx3, 2, 1, g)) break;
        g[0] = mlxb_binary(s, MLXB_ADD, g[0], hparts[0]);
        g[1] = mlxb_binary(s, MLXB_ADD, g[1], hparts[1]);
        hr = rbh ? mlxb_binary(s, MLXB_ADD, hparts[2], rbh) : hparts[2];
      } else {
        mlxb_array *xparts[2];
        int64_t cut = 2 * H;
        if (mlxb_split(s, xt, &cut, 1, 1, xparts)) break;
        mlxb_array *zr = mlxb_addmm(s, xparts[0], h, rt_zr, 1.f, 1.f);
        if (mlxb_split(s, zr, idx3, 1, 1, g)) break;
        g[2] = xparts[1];
      }
      mlxb_array *z = gate(s, a, &acts[0], g[0]);
      mlxb_array *rg = gate(s, a, &acts[0], g[1]);
      mlxb_array *hpre = a->linear_before_reset ? mlxb_binary(s, MLXB_ADD, g[2], mlxb_binary(s, MLXB_MUL, rg, hr))
                                                : mlxb_addmm(s, g[2], mlxb_binary(s, MLXB_MUL, rg, h), rt_h, 1.f, 1.f);
      mlxb_array *hh = gate(s, a, &acts[1], hpre);
      hn = mlxb_binary(s, MLXB_ADD, mlxb_binary(s, MLXB_MUL, mlxb_binary(s, MLXB_SUB, one, z), hh),
                       mlxb_binary(s, MLXB_MUL, z, h));
    } else {
      mlxb_array *g[4]; /* i, o, f, c */
      if (mlxb_split(s, mlxb_addmm(s, xt, h, rt, 1.f, 1.f), idx3, 3, 1, g)) break;
      mlxb_array *ipre = pi ? mlxb_binary(s, MLXB_ADD, g[0], mlxb_binary(s, MLXB_MUL, pi, cs)) : g[0];
      mlxb_array *ig = gate(s, a, &acts[0], ipre);
      mlxb_array *fg;
      if (a->input_forget) {
        fg = mlxb_binary(s, MLXB_SUB, one, ig);
      } else {
        mlxb_array *fpre = pf ? mlxb_binary(s, MLXB_ADD, g[2], mlxb_binary(s, MLXB_MUL, pf, cs)) : g[2];
        fg = gate(s, a, &acts[0], fpre);
      }
      mlxb_array *cg = gate(s, a, &acts[1], g[3]);
      cn = mlxb_binary(s, MLXB_ADD, mlxb_binary(s, MLXB_MUL, cs, fg), mlxb_binary(s, MLXB_MUL, ig, cg));
      mlxb_array *opre = po ? mlxb_binary(s, MLXB_ADD, g[1], mlxb_binary(s, MLXB_MUL, po, cn)) : g[1];
      mlxb_array *og = gate(s, a, &acts[0], opre);
      hn = mlxb_binary(s, MLXB_MUL, og, apply_act(s, &acts[2], cn));
    }
    if (lens) {
      mlxb_array *valid = mlxb_binary(s, MLXB_LESS, mlxb_scalar_i64(s, t, MLXB_I32), lens); /* [B, 1] */
      if (ys) ys[t] = mlxb_where(s, valid, hn, zero);
      h = mlxb_where(s, valid, hn, h);
      if (cn) cs = mlxb_where(s, valid, cn, cs);
    } else {
      if (ys) ys[t] = hn;
      h = hn;
      if (cn) cs = cn;
    }
  }
  free(steps);
  if (op_check(c)) {
    free(ys);
    return -1;
  }
  if (lens) { /* a sequence of length 0 ends in zeros (ORT's GRU/LSTM; its RNN reads out of bounds) */
    mlxb_array *some = mlxb_binary(s, MLXB_GREATER, lens, mlxb_scalar_i64(s, 0, MLXB_I32));
    h = mlxb_where(s, some, h, zero);
    if (cs) cs = mlxb_where(s, some, cs, zero);
  }
  fin->h = h;
  fin->c = cs;
  if (ys) {
    *y_out = mlxb_stack(s, (const mlxb_array *const *)ys, (int)T, 0);
    free(ys);
  }
  return op_check(c);
}

static int lower_rnn(op_ctx *c, const op_def *def) {
  rnn_attrs a;
  char why[200];
  if (!rnn_parse(op_node(c), def->arg, &a, why, sizeof why)) return op_fail(c, "%s", why);
  mlxb_scope *s = op_scope(c);
  bool lstm = a.kind == RK_LSTM;
  mlxb_array *x = op_input(c, 0), *w = op_input(c, 1), *r = op_input(c, 2);
  if (mlxb_ndim(x) != 3 || mlxb_ndim(w) != 3 || mlxb_ndim(r) != 3) return op_fail(c, "X, W and R must be 3-D");
  mlxb_dtype t = mlxb_type(x), ct = op_util_compute_type(t);
  int D = a.dirs, G = gates_of(a.kind);
  if (a.layout) x = transpose3(s, x, 1, 0, 2);
  int64_t T = mlxb_dim(x, 0), B = mlxb_dim(x, 1), I = mlxb_dim(x, 2), H = mlxb_dim(r, 2);
  if (a.hidden >= 0 && a.hidden != H) return op_fail(c, "hidden_size %lld but R has %lld", (long long)a.hidden, (long long)H);
  if (mlxb_dim(w, 0) != D || mlxb_dim(w, 1) != G * H || mlxb_dim(w, 2) != I)
    return op_fail(c, "W must have shape [%d, %lld, %lld]", D, (long long)(G * H), (long long)I);
  if (mlxb_dim(r, 0) != D || mlxb_dim(r, 1) != G * H)
    return op_fail(c, "R must have shape [%d, %lld, %lld]", D, (long long)(G * H), (long long)H);
  mlxb_array *bias = op_input(c, 3), *lens = op_input(c, 4), *h0 = op_input(c, 5);
  mlxb_array *c0 = lstm ? op_input(c, 6) : NULL, *p = lstm ? op_input(c, 7) : NULL;
  if (bias && (mlxb_ndim(bias) != 2 || mlxb_dim(bias, 0) != D || mlxb_dim(bias, 1) != 2 * G * H))
    return op_fail(c, "B must have shape [%d, %lld]", D, (long long)(2 * G * H));
  if (p && (mlxb_ndim(p) != 2 || mlxb_dim(p, 0) != D || mlxb_dim(p, 1) != 3 * H))
    return op_fail(c, "P must have shape [%d, %lld]", D, (long long)(3 * H));
  mlxb_array *init[2] = {h0, c0};
  for (int k = 0; k < 2; k++) {
    if (!init[k]) continue;
    if (a.layout) init[k] = transpose3(s, init[k], 1, 0, 2);
    if (mlxb_ndim(init[k]) != 3 || mlxb_dim(init[k], 0) != D || mlxb_dim(init[k], 1) != B || mlxb_dim(init[k], 2) != H)
      return op_fail(c, "%s has the wrong shape", k ? "initial_c" : "initial_h");
    init[k] = op_util_cast(s, init[k], ct);
  }
  h0 = init[0], c0 = init[1];
  if (lens) {
    if (mlxb_ndim(lens) != 1 || mlxb_dim(lens, 0) != B) return op_fail(c, "sequence_lens must have shape [%lld]", (long long)B);
    lens = op_util_cast(s, lens, MLXB_I32);
    if (op_util_require_range(c, lens, 0, T + 1, "sequence_lens")) return -1;
    int64_t b1[2] = {B, 1};
    lens = mlxb_reshape(s, lens, b1, 2);
  }
  x = op_util_cast(s, x, ct), w = op_util_cast(s, w, ct), r = op_util_cast(s, r, ct);
  bias = op_util_cast(s, bias, ct), p = op_util_cast(s, p, ct);
  if (op_check(c)) return -1;

  bool want_y = op_has_output(c, 0);
  mlxb_array *y = NULL, *yh = NULL, *yc = NULL;
  int64_t ydims[4] = {T, D, B, H}, hdims[3] = {D, B, H};
  if (T == 0 || B == 0 || H == 0) {
    /* nothing to step through: Y is empty and, with no step taken, the states are zero as for a
     * sequence of length 0 (ORT's RNN gives zeros for T = 0; its GRU kernel aborts the process) */
    y = mlxb_zeros(s, ydims, 4, ct);
    yh = mlxb_zeros(s, hdims, 3, ct);
    yc = lstm ? mlxb_zeros(s, hdims, 3, ct) : NULL;
  } else {
    mlxb_array *yd[2] = {NULL, NULL}, *hs[2], *cs[2];
    for (int d = 0; d < D; d++) {
      dir_state fin = {NULL, NULL};
      if (lower_direction(c, &a, d, x, w, r, bias, lens, h0, c0, p, T, B, H, want_y, &yd[d], &fin)) return -1;
      hs[d] = fin.h, cs[d] = fin.c;
    }
    if (want_y) y = mlxb_stack(s, (const mlxb_array *const *)yd, D, 1); /* [T, D, B, H] */
    yh = mlxb_stack(s, (const mlxb_array *const *)hs, D, 0);
    if (lstm) yc = mlxb_stack(s, (const mlxb_array *const *)cs, D, 0);
  }
  if (a.layout) {
    int perm4[4] = {2, 0, 1, 3};
    if (y) y = mlxb_transpose(s, y, perm4, 4); /* [B, T, D, H] */
    yh = transpose3(s, yh, 1, 0, 2);
    yc = transpose3(s, yc, 1, 0, 2);
  }
  if (want_y && op_set_output(c, 0, op_util_cast(s, y, t))) return -1;
  if (op_util_set_optional(c, 1, op_util_cast(s, yh, t))) return -1;
  if (lstm && op_util_set_optional(c, 2, op_util_cast(s, yc, t))) return -1;
  return 0;
}

#define RNN_DOC_COMMON                                                                                    \
  "float32, float16 (computed in float32); forward/reverse/bidirectional, layout 0 and 1, clip, "         \
  "sequence_lens as ORT (Y zero past a sequence's length, Y_h/Y_c its state at the last valid step), "    \
  "initial states, every optional output; on the CPU each direction's steps are one operation of the "   \
  "EP's, on a GPU the time loop is unrolled for the Run's sequence length. "                               \
  "Activations Sigmoid, Tanh, Relu, Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, "                     \
  "HardSigmoid, Elu, Softsign, Softplus; declined: unknown activations, clip <= 0, "                      \
  "activation_alpha/beta forms where ORT's CPU EP and the ONNX spec disagree"

static const op_def defs[] = {
    OP_ROW("", "RNN", 7, 22, .inputs = {3, 6}, .outputs = {0, 2}, .dtypes = DT_F32 | DT_F16, .claim = claim_rnn,
           .lower = lower_rnn, .prepare = prepare_rnn, .release = free, .arg = RK_RNN,
           .doc = RNN_DOC_COMMON " (defaults ORT takes as 0, per-direction alpha/beta lists); activation names are "
                  "case-sensitive, as in ORT's RNN kernel"),
    OP_ROW("", "GRU", 7, 22, .inputs = {3, 6}, .outputs = {0, 2}, .dtypes = DT_F32 | DT_F16, .claim = claim_rnn,
           .lower = lower_rnn, .prepare = prepare_rnn, .release = free, .arg = RK_GRU,
           .doc = RNN_DOC_COMMON " (Affine, ThresholdedRelu, ScaledTanh without explicit values); "
                  "linear_before_reset 0 and 1"),
    OP_ROW("", "LSTM", 7, 22, .inputs = {3, 8}, .outputs = {0, 3}, .dtypes = DT_F32 | DT_F16, .claim = claim_rnn,
           .lower = lower_rnn, .prepare = prepare_rnn, .release = free, .arg = RK_LSTM,
           .doc = RNN_DOC_COMMON " (Affine, ThresholdedRelu, ScaledTanh without explicit values); peepholes, "
                  "input_forget"),
};

OPS_FAMILY(rnn, defs);
