/* MatMul, Gemm, Einsum and com.microsoft's FusedMatMul and FusedGemm lowered onto MLX. MLX's matmul has float kernels only, so integer MatMul is
 * built from a broadcast multiply and a sum over K (in chunks that bound the temporary), which wraps
 * exactly as ORT's integer GEMM does. */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op_util.h"

/* Elements of one broadcast product chunk [batch..., M, k, N] in integer MatMul. */
#define MATMUL_INT_CHUNK_ELEMS ((int64_t)1 << 24)
#define EINSUM_MAX_EQUATION 512
#define EINSUM_MAX_INPUTS 16

/* ---- MatMul ------------------------------------------------------------------------------- */

/* Elements of the broadcast batch shape of a [..., M, K] and b [..., K, N] (ranks >= 2). */
static int64_t matmul_batch_elems(const mlxb_array *a, const mlxb_array *b) {
  int ra = mlxb_ndim(a) - 2, rb = mlxb_ndim(b) - 2;
  int r = ra > rb ? ra : rb;
  int64_t n = 1;
  for (int i = 0; i < r; i++) {
    int64_t da = i < r - ra ? 1 : mlxb_dim(a, i - (r - ra));
    int64_t db = i < r - rb ? 1 : mlxb_dim(b, i - (r - rb));
    n *= da > db ? da : db;
  }
  return n;
}

/* Integer a @ b with wrapping arithmetic: sum over k of a[..., :, k, None] * b[..., None, k, :]. */
static mlxb_array *matmul_int(mlxb_scope *s, mlxb_array *a, mlxb_array *b) {
  mlxb_dtype t = mlxb_type(a);
  bool a_vec = mlxb_ndim(a) == 1, b_vec = mlxb_ndim(b) == 1;
  int ax0 = 0, ax1 = 1;
  if (a_vec) a = mlxb_expand_dims(s, a, &ax0, 1); /* [K] -> [1, K] */
  if (b_vec) b = mlxb_expand_dims(s, b, &ax1, 1); /* [K] -> [K, 1] */
  if (!a || !b) return NULL;
  if (mlxb_ndim(a) + 1 > OP_UTIL_MAX_RANK || mlxb_ndim(b) + 1 > OP_UTIL_MAX_RANK) {
    mlxb_set_error(s, "MatMul rank too large");
    return NULL;
  }
  int64_t m = mlxb_dim(a, -2), k = mlxb_dim(a, -1), n = mlxb_dim(b, -1);
  if (mlxb_dim(b, -2) != k) { /* the broadcast multiply below would take a K of 1 against any other */
    char msg[128];
    snprintf(msg, sizeof msg, "MatMul dimension mismatch: K is %lld on the left, %lld on the right", (long long)k,
             (long long)mlxb_dim(b, -2));
    mlxb_set_error(s, msg);
    return NULL;
  }
  int last = -1, mid = -3;
  mlxb_array *ae = mlxb_expand_dims(s, a, &last, 1); /* [..., M, K, 1] */
  mlxb_array *be = mlxb_expand_dims(s, b, &mid, 1);  /* [..., 1, K, N] */
  if (!ae || !be) return NULL;
  int64_t per_k = matmul_batch_elems(a, b) * m * n;
  int64_t chunk = per_k > 0 ? MATMUL_INT_CHUNK_ELEMS / per_k : k;
  if (chunk < 1) chunk = 1;
  int ka = mlxb_ndim(ae) - 2, kb = mlxb_ndim(be) - 2;
  int sum_axis = -2;
  mlxb_array *acc = NULL;
  int64_t k0 = 0;
  do { /* at least once, so that K == 0 still yields zeros of the right shape */
    int64_t k1 = k - k0 < chunk ? k : k0 + chunk;
    mlxb_array *a_part = op_util_slice_axis(s, ae, ka, k0, k1, 1), *b_part = op_util_slice_axis(s, be, kb, k0, k1, 1);
    mlxb_array *prod = mlxb_binary(s, MLXB_MUL, a_part, b_part);
    mlxb_array *part = mlxb_reduce(s, MLXB_RSUM, prod, &sum_axis, 1, false);
    acc = acc ? mlxb_binary(s, MLXB_ADD, acc, part) : part;
    k0 = k1;
  } while (k0 < k && acc);
  if (!acc) return NULL;
  int squeeze[2], ns = 0;
  if (a_vec) squeeze[ns++] = mlxb_ndim(acc) - 2;
  if (b_vec) squeeze[ns++] = mlxb_ndim(acc) - 1;
  if (ns) acc = mlxb_squeeze(s, acc, squeeze, ns);
  return acc && mlxb_type(acc) != t ? mlxb_astype(s, acc, t) : acc;
}

/* ---- a constant float32 weight on the CPU: packed once --------------------------------------
 * The right operand of MatMul (Gemm: B, transB read as it is) when it is a constant float32
 * matrix and the scope's CPU has the EP's GEMM (mlxb_gemm_packed_available): packed at Compile
 * into the kernel's panels, so that a Run's product does not pack it again (the BLAS under MLX's
 * matmul packs both operands every call). */
typedef struct packed_weight {
  mlxb_array *panels;
  int64_t k, n;
} packed_weight;

static int prepare_packed_weight(op_ctx *c, bool transposed, void **state) {
  static const int weight_input[] = {1};
  mlxb_array *b = op_input(c, 1);
  mlxb_scope *s = op_scope(c);
  if (!b || !op_inputs_const(c, weight_input, 1) || !mlxb_gemm_packed_available(s)) return 0;
  if (mlxb_ndim(b) != 2 || mlxb_type(b) != MLXB_F32 || mlxb_size(b) == 0) return 0;
  packed_weight *kept = malloc(sizeof *kept);
  if (!kept) return op_fail(c, "out of memory");
  *state = kept;
  kept->k = mlxb_dim(b, transposed ? 1 : 0);
  kept->n = mlxb_dim(b, transposed ? 0 : 1);
  kept->panels = op_prepare_keep(c, mlxb_gemm_pack(s, b, transposed));
  return kept->panels ? 0 : -1;
}

/* What follows a MatMul in a linear layer, done in the packed GEMM's epilogue while the output is in
 * the cache: an Add of a constant float32 bias [N] that alone reads the product, and a Relu that
 * alone reads that sum (each as its node computes it: one rounded add per value, then max(v, 0),
 * NaN kept); their outputs are handed over (op_compute_for). */
typedef struct matmul_epilogue {
  const ir_node *add, *relu;
  mlxb_array *bias;
} matmul_epilogue;

static matmul_epilogue matmul_epilogue_of(op_ctx *c, int64_t n) {
  matmul_epilogue e = {NULL, NULL, NULL};
  const ir_node *add = op_util_sole_reader(c, op_node(c));
  if (!add || strcmp(add->op_type, "Add") || *add->domain || add->n_inputs != 2 || add->n_outputs != 1) return e;
  int product = op_node(c)->outputs[0];
  mlxb_array *bias = op_const_value(c, add->inputs[0] == product ? add->inputs[1] : add->inputs[0]);
  if (!bias || mlxb_type(bias) != MLXB_F32 || mlxb_ndim(bias) != 1 || mlxb_dim(bias, 0) != n) return e;
  const ir_node *relu = op_util_sole_reader(c, add);
  e.add = add, e.bias = bias, e.relu = relu && op_util_is_relu(relu) ? relu : NULL;
  return e;
}

/* a [..., K] times the packed weight, or NULL where it does not apply (a not float32, empty, or of
 * another K: the caller's product then reports it). With `e`, the epilogue's bias and Relu too. */
static mlxb_array *packed_product(op_ctx *c, mlxb_array *a, const matmul_epilogue *e) {
  const packed_weight *w = op_prepared(c);
  if (!w || mlxb_type(a) != MLXB_F32 || mlxb_ndim(a) < 1 || mlxb_size(a) == 0 || mlxb_dim(a, -1) != w->k) return NULL;
  return mlxb_gemm_packed(op_scope(c), a, w->panels, w->n, e ? e->bias : NULL, e && e->relu);
}

static int prepare_matmul(op_ctx *c, const op_def *def, void **state) { return prepare_packed_weight(c, false, state); }

static int prepare_gemm(op_ctx *c, const op_def *def, void **state) {
  return prepare_packed_weight(c, ir_attr_int(op_node(c), "transB", 0) != 0, state);
}

static int lower_matmul(op_ctx *c, const op_def *def) {
  mlxb_array *a = op_input(c, 0), *b = op_input(c, 1);
  if (mlxb_ndim(a) == 0 || mlxb_ndim(b) == 0) return op_fail(c, "MatMul operands must have rank >= 1");
  if (mlxb_type(a) != mlxb_type(b)) return op_fail(c, "operand dtypes differ");
  mlxb_scope *s = op_scope(c);
  const packed_weight *w = op_prepared(c);
  matmul_epilogue e = w ? matmul_epilogue_of(c, w->n) : (matmul_epilogue){NULL, NULL, NULL};
  mlxb_array *packed = packed_product(c, a, &e);
  if (packed) { /* folded: the Add's and Relu's outputs are this one, which nothing else reads */
    if ((e.add && op_compute_for(c, e.add, packed)) || (e.relu && op_compute_for(c, e.relu, packed))) return -1;
    return op_set_output(c, 0, packed);
  }
  if (op_util_is_float(mlxb_type(a))) return op_set_output(c, 0, mlxb_matmul(s, a, b));
  return op_set_output(c, 0, matmul_int(s, a, b));
}

/* ---- Gemm --------------------------------------------------------------------------------- */

static mlxb_array *transpose_2d(mlxb_scope *s, mlxb_array *x) {
  int perm[2] = {1, 0};
  return mlxb_transpose(s, x, perm, 2);
}

/* Whether Gemm's C (or none) broadcasts to [M, N] one way, as ONNX asks (a: A as multiplied, after
 * transA): else addmm below reports it. */
static bool gemm_bias_fits(const mlxb_array *bias, const mlxb_array *a, const mlxb_array *b, const ir_node *n) {
  int64_t out[2] = {mlxb_dim(a, 0), mlxb_dim(b, ir_attr_int(n, "transB", 0) ? 0 : 1)};
  return op_util_broadcasts_to(bias, out, 2);
}

/* Gemm's result, or NULL with the failure recorded. relu: a Relu node that alone reads a plain
 * Gemm's output, which the packed GEMM's epilogue applies where alpha is 1 and C, if read, is a
 * float32 [N] added as it is (beta 1); *relu_done says whether it did. */
static mlxb_array *gemm_compute(op_ctx *c, const ir_node *relu, bool *relu_done) {
  const ir_node *n = op_node(c);
  mlxb_scope *s = op_scope(c);
  mlxb_array *a = op_input(c, 0), *b = op_input(c, 1), *bias = op_input(c, 2);
  if (mlxb_ndim(a) != 2 || mlxb_ndim(b) != 2) {
    op_fail(c, "Gemm operands must be 2-D");
    return NULL;
  }
  float alpha = ir_attr_float(n, "alpha", 1.0f), beta = ir_attr_float(n, "beta", 1.0f);
  if (ir_attr_int(n, "transA", 0)) a = transpose_2d(s, a);
  *relu_done = false;
  const packed_weight *w = op_prepared(c);
  bool row_bias = bias && mlxb_type(bias) == MLXB_F32 && mlxb_ndim(bias) == 1 && w && mlxb_dim(bias, 0) == w->n;
  bool fits = gemm_bias_fits(bias, a, b, n);
  if (w && fits && alpha == 1.0f && (!bias || beta == 0.0f || (beta == 1.0f && row_bias))) {
    matmul_epilogue e = {NULL, relu, bias && beta != 0.0f ? bias : NULL};
    mlxb_array *y = packed_product(c, a, &e);
    if (y) {
      *relu_done = relu != NULL;
      return y;
    }
  }
  mlxb_array *packed = fits ? packed_product(c, a, NULL) : NULL;
  if (packed) { /* alpha * AB, then beta * C added: as ORT's kernel, which starts Y at beta * C */
    if (alpha != 1.0f) packed = mlxb_binary(s, MLXB_MUL, packed, mlxb_scalar_f64(s, alpha, MLXB_F32));
    if (!bias || beta == 0.0f) return packed;
    if (beta != 1.0f) bias = mlxb_binary(s, MLXB_MUL, bias, mlxb_scalar_f64(s, beta, mlxb_type(bias)));
    return mlxb_binary(s, MLXB_ADD, packed, bias);
  }
  if (ir_attr_int(n, "transB", 0)) b = transpose_2d(s, b);
  /* like ORT, C is not read when beta is 0 (so inf/NaN in C do not leak through 0 * C) */
  if (bias && beta != 0.0f) return mlxb_addmm(s, bias, a, b, alpha, beta);
  mlxb_array *y = mlxb_matmul(s, a, b);
  if (alpha != 1.0f && y) y = mlxb_binary(s, MLXB_MUL, y, mlxb_scalar_f64(s, alpha, mlxb_type(y)));
  return y;
}

static int lower_gemm(op_ctx *c, const op_def *def) {
  const ir_node *relu = op_util_sole_reader(c, op_node(c));
  bool relu_done;
  mlxb_array *y = gemm_compute(c, relu && op_util_is_relu(relu) ? relu : NULL, &relu_done);
  if (!y) {
    op_check(c); /* the bridge's error, where it was one */
    return -1;
  }
  /* folded: the Relu's output is this one, which nothing else reads */
  if (relu_done && op_compute_for(c, relu, y)) return -1;
  return op_set_output(c, 0, y);
}

/* ---- FusedGemm (com.microsoft) -------------------------------------------------------------
 * Gemm followed by an activation (ORT's Gemm + activation fusion for its CPU EP), whose
 * parameters are activation_alpha, activation_beta and activation_gamma. The activations taking
 * parameters are claimed only where the model states them: ORT's functors fall back on defaults
 * of their own otherwise. */

static int fused_gemm_act(const ir_node *n, double *p) {
  static const struct {
    const char *name;
    const char *attrs[2];
  } taken[] = {{"Relu", {0}},
               {"Tanh", {0}},
               {"Sigmoid", {0}},
               {"Softplus", {0}},
               {"Softsign", {0}},
               {"LeakyRelu", {"activation_alpha"}},
               {"Elu", {"activation_alpha"}},
               {"ThresholdedRelu", {"activation_alpha"}},
               {"HardSigmoid", {"activation_alpha", "activation_beta"}},
               {"ScaledTanh", {"activation_alpha", "activation_beta"}},
               {"ParametricSoftplus", {"activation_alpha", "activation_beta"}},
               {"Selu", {"activation_alpha", "activation_gamma"}}};
  const char *name = ir_attr_string(n, "activation", "");
  for (size_t i = 0; i < sizeof taken / sizeof *taken; i++) {
    if (strcmp(name, taken[i].name)) continue;
    for (int j = 0; j < 2 && taken[i].attrs[j]; j++) {
      if (!ir_node_attr(n, taken[i].attrs[j])) return -1;
      p[j] = ir_attr_float(n, taken[i].attrs[j], 0.0f);
    }
    return op_fused_act_find(name);
  }
  return -1;
}

static bool claim_fused_gemm(claim_ctx *c, const op_def *def) {
  double p[2];
  if (fused_gemm_act(c->node, p) < 0)
    return claim_decline(c, "activation '%s' or its activation_alpha/beta/gamma missing",
                         ir_attr_string(c->node, "activation", ""));
  return op_util_claim_same_dtypes(c, (const int[]){1, 2}, 2);
}

static int lower_fused_gemm(op_ctx *c, const op_def *def) {
  double p[2];
  int kind = fused_gemm_act(op_node(c), p);
  if (kind < 0) return op_fail(c, "unsupported activation");
  bool relu_done; /* the activation is FusedGemm's own: no Relu after it is folded */
  mlxb_array *y = gemm_compute(c, NULL, &relu_done);
  if (!y) {
    op_check(c);
    return -1;
  }
  return op_set_output(c, 0, op_fused_act_apply(op_scope(c), y, kind, p));
}

/* ---- FusedMatMul (com.microsoft) -----------------------------------------------------------
 * What ORT's graph optimizer makes of a Transpose (or a scale) feeding a MatMul, common in the
 * transformer graphs it saves: alpha * op(A) @ op(B), where op first moves the leading axis to
 * just before the last one (transBatchX: permutation [1, ..., r - 2, 0, r - 1]) and then swaps
 * the last two axes (transX; a vector stays as it is), as ORT's MatMulComputeHelper does. */

static mlxb_array *fused_operand(mlxb_scope *s, mlxb_array *x, bool trans, bool trans_batch) {
  int r = mlxb_ndim(x), perm[OP_UTIL_MAX_RANK];
  if (trans_batch) {
    for (int i = 0; i < r - 2; i++) perm[i] = i + 1;
    perm[r - 2] = 0;
    perm[r - 1] = r - 1;
    x = mlxb_transpose(s, x, perm, r);
  }
  if (!trans || r < 2) return x;
  for (int i = 0; i < r; i++) perm[i] = i;
  perm[r - 2] = r - 1;
  perm[r - 1] = r - 2;
  return mlxb_transpose(s, x, perm, r);
}

static int lower_fused_matmul(op_ctx *c, const op_def *def) {
  const ir_node *n = op_node(c);
  mlxb_scope *s = op_scope(c);
  mlxb_array *a = op_input(c, 0), *b = op_input(c, 1);
  int ra = mlxb_ndim(a), rb = mlxb_ndim(b);
  if (ra == 0 || rb == 0) return op_fail(c, "Input tensors of wrong rank (0).");
  if (ra > OP_UTIL_MAX_RANK || rb > OP_UTIL_MAX_RANK) return op_fail(c, "operand rank above %d", OP_UTIL_MAX_RANK);
  if (mlxb_type(a) != mlxb_type(b)) return op_fail(c, "operand dtypes differ");
  bool batch_a = ir_attr_int(n, "transBatchA", 0) != 0, batch_b = ir_attr_int(n, "transBatchB", 0) != 0;
  if ((batch_a || batch_b) && !(ra > 2 && ra == rb))
    return op_fail(c, "Two inputs should have same rank and rank >= 3 if transBatchA or transBatchB is true");
  a = fused_operand(s, a, ir_attr_int(n, "transA", 0) != 0, batch_a);
  b = fused_operand(s, b, ir_attr_int(n, "transB", 0) != 0, batch_b);
  mlxb_array *y = mlxb_matmul(s, a, b);
  float alpha = ir_attr_float(n, "alpha", 1.0f);
  if (alpha != 1.0f && y) y = mlxb_binary(s, MLXB_MUL, y, mlxb_scalar_f64(s, alpha, mlxb_type(y)));
  return op_set_output(c, 0, y);
}

static bool claim_fused_matmul(claim_ctx *c, const op_def *def) {
  return op_util_claim_same_dtypes(c, (const int[]){1}, 1);
}

/* ---- Einsum ------------------------------------------------------------------------------- */

static bool einsum_char_ok(char ch) {
  return isalpha((unsigned char)ch) || ch == ',' || ch == '.' || ch == '-' || ch == '>' || ch == ' ';
}

static bool claim_einsum(claim_ctx *c, const op_def *def) {
  const char *eq = ir_attr_string(c->node, "equation", NULL);
  if (!eq) return claim_decline(c, "missing equation");
  if (strlen(eq) >= EINSUM_MAX_EQUATION) return claim_decline(c, "equation longer than %d", EINSUM_MAX_EQUATION);
  for (const char *p = eq; *p; p++)
    if (!einsum_char_ok(*p)) return claim_decline(c, "equation has an unexpected character '%c'", *p);
  if (c->node->n_inputs > EINSUM_MAX_INPUTS) return claim_decline(c, "more than %d operands", EINSUM_MAX_INPUTS);
  return true;
}

/* Writes the equation without spaces and with an explicit output: ONNX's implicit output is the
 * labels that occur once, in ASCII order (upper case first), after any ellipsis dimensions. */
static int einsum_explicit(const char *eq, char *out, size_t cap) {
  size_t len = 0;
  int counts[128] = {0};
  bool ellipsis = false, arrow = false;
  for (const char *p = eq; *p; p++) {
    if (*p == ' ') continue;
    if (len + 1 >= cap) return -1;
    out[len++] = *p;
    if (*p == '>') arrow = true;
    if (*p == '.') ellipsis = true;
    if (isalpha((unsigned char)*p)) counts[(unsigned char)*p]++;
  }
  out[len] = '\0';
  if (arrow) return 0;
  if (len + 6 >= cap) return -1;
  memcpy(out + len, ellipsis ? "->..." : "->", ellipsis ? 5 : 2);
  len += ellipsis ? 5 : 2;
  for (int ch = 0; ch < 128; ch++) {
    if (counts[ch] != 1) continue;
    if (len + 1 >= cap) return -1;
    out[len++] = (char)ch;
  }
  out[len] = '\0';
  return 0;
}

static int lower_einsum(op_ctx *c, const op_def *def) {
  char eq[EINSUM_MAX_EQUATION + 8];
  const mlxb_array *xs[EINSUM_MAX_INPUTS];
  int n = op_num_inputs(c);
  if (n < 1 || n > EINSUM_MAX_INPUTS) return op_fail(c, "Einsum takes 1 to %d operands", EINSUM_MAX_INPUTS);
  if (einsum_explicit(ir_attr_string(op_node(c), "equation", ""), eq, sizeof eq))
    return op_fail(c, "equation too long");
  for (int i = 0; i < n; i++) {
    xs[i] = op_input(c, i);
    if (!xs[i]) return op_fail(c, "missing operand %d", i);
  }
  return op_set_output(c, 0, mlxb_einsum(op_scope(c), eq, xs, n));
}

/* ---- the table --------------------------------------------------------------------------- */

#define DT_MATMUL (DT_FLOAT | DT(ONNX_INT32) | DT(ONNX_INT64) | DT(ONNX_UINT32) | DT(ONNX_UINT64))

static const op_def defs[] = {
  OP_ROW("", "MatMul", 1, 13, .inputs = {2, 2}, .outputs = {1, 1}, .dtypes = DT_MATMUL, .lower = lower_matmul,
         .prepare = prepare_matmul, .release = free,
         .doc = "N-D with batch broadcasting; 1-D operands promoted as numpy. Float types use MLX matmul; "
                "int32/int64/uint32/uint64 use a chunked broadcast multiply-sum that wraps like ORT."),
  OP_ROW("", "Gemm", 7, 13, .inputs = {2, 3}, .outputs = {1, 1}, .dtypes = DT_FLOAT, .lower = lower_gemm,
         .prepare = prepare_gemm, .release = free,
         .doc = "transA, transB, alpha, beta, optional C broadcast to [M, N]; C is ignored when beta is 0 (as ORT). "
                "Declined: integer Gemm (MLX matmul has float kernels only)."),
  OP_ROW("", "Einsum", 12, 12, .inputs = {1, OP_VARIADIC}, .outputs = {1, 1}, .dtypes = DT_FLOAT, .claim = claim_einsum,
         .lower = lower_einsum,
         .doc = "Explicit and implicit equations (implicit output made explicit in ONNX's ASCII order), ellipsis, "
                "repeated labels (traces/diagonals), spaces. Declined: integer operands (MLX einsum uses matmul)."),
  OP_ROW("com.microsoft", "FusedGemm", 1, 1, .inputs = {2, 3}, .outputs = {1, 1}, .dtypes = DT_F32,
         .claim = claim_fused_gemm, .lower = lower_fused_gemm, .prepare = prepare_gemm, .release = free,
         .doc = "Gemm's forms (float32, ORT's CPU kernel) then Relu, Tanh, Sigmoid, Softplus, Softsign, LeakyRelu, "
                "Elu, ThresholdedRelu, HardSigmoid, ScaledTanh, ParametricSoftplus or Selu with their "
                "activation_alpha/beta/gamma. Declined: a parameter the model leaves to ORT's default"),
  OP_ROW("com.microsoft", "FusedMatMul", 1, 1, .inputs = {2, 2}, .outputs = {1, 1}, .dtypes = DT_F32 | DT_F64 | DT_F16,
         .claim = claim_fused_matmul, .lower = lower_fused_matmul,
         .doc = "alpha, transA, transB, transBatchA, transBatchB (equal ranks >= 3, as ORT), batch broadcasting; "
                "float32/float64/float16 (ORT's CPU kernels). Declined: bfloat16 (no ORT CPU kernel)"),
};

OPS_FAMILY(matmul, defs);
