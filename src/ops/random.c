/* Random ops: RandomNormal, RandomUniform, their *Like forms, Bernoulli and Multinomial on MLX's
 * counter-based generator. Values cannot match ORT's generator bit for bit; the distributions,
 * shapes and dtypes do. With a seed every Run returns the same values (ORT advances its generator
 * from Run to Run); without one each Run draws fresh values from MLX's per-thread key sequence,
 * and a cluster holding such a node is kept out of compiled replay, which would freeze them. */
#include <string.h>

#include "ops/op_util.h"


/* The seed attribute (a float) as generator key material in *seed; *seeded says whether there
 * is one. Unseeded draws must differ per Run, which a compiled program (replaying a trace) cannot
 * do: failing inside a trace makes the runtime run the cluster eagerly instead. 0 or -1. */
static int rand_seed(op_ctx *c, uint64_t *seed, bool *seeded) {
  const ir_attr *a = ir_node_attr(op_node(c), "seed");
  *seed = 0;
  *seeded = a && a->type == IR_ATTR_FLOAT;
  if (!*seeded) return mlxb_in_trace() ? op_trace_refuse(c, "unseeded random values cannot be compiled") : 0;
  float f = a->f;
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  *seed = bits;
  return 0;
}

/* The input whose shape a *Like op or Bernoulli copies must fit the dims buffer. */
static bool rand_claim_input_rank(claim_ctx *c) {
  const ir_value *x = claim_input(c, 0);
  if (x && x->rank > OP_UTIL_MAX_RANK) return claim_decline(c, "rank %d is too large", x->rank);
  return true;
}

/* The dims of the input whose shape a *Like op or Bernoulli copies; its rank, or -1 (recorded). */
static int rand_dims_of(op_ctx *c, int64_t *dims) {
  mlxb_array *x = op_input(c, 0);
  int rank = mlxb_ndim(x);
  if (rank > OP_UTIL_MAX_RANK) return op_fail(c, "rank %d is too large", rank);
  mlxb_shape(x, dims);
  return rank;
}

/* The dtype attribute, or the input's dtype for *Like ops without one. */
static int32_t rand_dtype(const ir_node *n, int32_t input_dtype, int32_t dflt) {
  const ir_attr *a = ir_node_attr(n, "dtype");
  if (a && a->type == IR_ATTR_INT) return (int32_t)a->i;
  return input_dtype != ONNX_UNDEFINED ? input_dtype : dflt;
}

/* ---- RandomNormal / RandomUniform (and *Like) --------------------------------------------- */

enum { RAND_NORMAL, RAND_UNIFORM, RAND_NORMAL_LIKE, RAND_UNIFORM_LIKE }; /* op_def.arg */

static bool claim_random(claim_ctx *c, const op_def *def) {
  bool like = def->arg == RAND_NORMAL_LIKE || def->arg == RAND_UNIFORM_LIKE;
  int32_t t = rand_dtype(c->node, like ? claim_input_dtype(c, 0) : ONNX_UNDEFINED, ONNX_FLOAT);
  if (!op_util_onnx_is_float(t)) return claim_decline(c, "dtype %s is not a float type", ir_dtype_name(t));
  if (like) return rand_claim_input_rank(c);
  const int64_t *shape;
  size_t n = ir_attr_ints(c->node, "shape", &shape);
  if (!ir_node_attr(c->node, "shape")) return claim_decline(c, "no shape attribute");
  if (n > OP_UTIL_MAX_RANK) return claim_decline(c, "rank %zu is too large", n);
  for (size_t i = 0; i < n; i++)
    if (shape[i] < 0) return claim_decline(c, "negative dimension in shape");
  return true;
}

static int lower_random(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  bool like = def->arg == RAND_NORMAL_LIKE || def->arg == RAND_UNIFORM_LIKE;
  uint64_t seed;
  bool seeded;
  if (rand_seed(c, &seed, &seeded)) return -1;
  int64_t dims[OP_UTIL_MAX_RANK];
  int rank;
  if (like) {
    if ((rank = rand_dims_of(c, dims)) < 0) return -1;
  } else {
    const int64_t *shape;
    size_t k = ir_attr_ints(n, "shape", &shape);
    if (k > OP_UTIL_MAX_RANK) return op_fail(c, "rank %zu is too large", k);
    rank = (int)k;
    memcpy(dims, shape, k * sizeof *dims);
  }
  int mt = op_mlx_dtype(rand_dtype(n, like ? op_input_dtype(c, 0) : ONNX_UNDEFINED, ONNX_FLOAT));
  if (mt < 0) return op_fail(c, "unsupported dtype");
  mlxb_array *y;
  if (def->arg == RAND_NORMAL || def->arg == RAND_NORMAL_LIKE)
    y = mlxb_random_normal(s, dims, rank, (mlxb_dtype)mt, ir_attr_float(n, "mean", 0.0f), ir_attr_float(n, "scale", 1.0f),
                           seeded, seed);
  else
    y = mlxb_random_uniform(s, dims, rank, (mlxb_dtype)mt, ir_attr_float(n, "low", 0.0f), ir_attr_float(n, "high", 1.0f),
                            seeded, seed);
  return op_set_output(c, 0, y);
}

/* ---- Bernoulli ---------------------------------------------------------------------------- */

static bool claim_bernoulli(claim_ctx *c, const op_def *def) {
  int32_t t = rand_dtype(c->node, claim_input_dtype(c, 0), ONNX_FLOAT);
  if (op_mlx_dtype(t) < 0) return claim_decline(c, "output dtype %s", ir_dtype_name(t));
  return rand_claim_input_rank(c);
}

/* 1 where a uniform draw in [0, 1) falls below p, as ORT's kernel does. */
static int lower_bernoulli(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  mlxb_array *p = op_input(c, 0);
  int64_t dims[OP_UTIL_MAX_RANK];
  int rank = rand_dims_of(c, dims);
  if (rank < 0) return -1;
  uint64_t seed;
  bool seeded;
  if (rand_seed(c, &seed, &seeded)) return -1;
  int mt = op_mlx_dtype(rand_dtype(n, op_input_dtype(c, 0), ONNX_FLOAT));
  if (mt < 0) return op_fail(c, "unsupported dtype");
  mlxb_array *u = mlxb_random_uniform(s, dims, rank, MLXB_F32, 0.0, 1.0, seeded, seed);
  mlxb_array *hit = mlxb_binary(s, MLXB_LESS, u, p);
  return op_set_output(c, 0, mlxb_astype(s, hit, (mlxb_dtype)mt));
}

/* ---- Multinomial -------------------------------------------------------------------------- */

static bool claim_multinomial(claim_ctx *c, const op_def *def) {
  int64_t t = ir_attr_int(c->node, "dtype", ONNX_INT32);
  if (t != ONNX_INT32 && t != ONNX_INT64) return claim_decline(c, "dtype %lld (int32/int64 only)", (long long)t);
  const ir_value *x = claim_input(c, 0);
  if (x && x->rank >= 0 && x->rank != 2) return claim_decline(c, "input rank %d (expected [batch, classes])", x->rank);
  if (ir_attr_int(c->node, "sample_size", 1) < 0) return claim_decline(c, "negative sample_size");
  return true;
}

static int lower_multinomial(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  mlxb_array *logits = op_input(c, 0);
  uint64_t seed;
  bool seeded;
  if (rand_seed(c, &seed, &seeded)) return -1;
  int64_t k = ir_attr_int(n, "sample_size", 1);
  if (k < 0 || k > INT32_MAX) return op_fail(c, "sample_size %lld is out of range", (long long)k);
  mlxb_dtype t = ir_attr_int(n, "dtype", ONNX_INT32) == ONNX_INT64 ? MLXB_I64 : MLXB_I32;
  mlxb_array *draws = mlxb_random_categorical(s, mlxb_astype(s, logits, MLXB_F32), (int)k, seeded, seed);
  return op_set_output(c, 0, mlxb_astype(s, draws, t));
}

/* ---- the table ---------------------------------------------------------------------------- */

#define RAND_DOC_SEED                                                                                   \
  "; a seed gives the same values every Run (ORT advances its generator between Runs); values differ from ORT's " \
  "generator; float64 values are drawn in float32 (MLX's generator has no float64)"

static const op_def defs[] = {
  OP_ROW("", "RandomNormal", 1, 22, .inputs = {0, 0}, .outputs = {1, 1}, .claim = claim_random, .lower = lower_random,
         .arg = RAND_NORMAL, .flags = OP_FLAG_RANDOM,
         .doc = "float/float16/float64/bfloat16, mean/scale/shape attributes" RAND_DOC_SEED),
  OP_ROW("", "RandomUniform", 1, 22, .inputs = {0, 0}, .outputs = {1, 1}, .claim = claim_random, .lower = lower_random,
         .arg = RAND_UNIFORM, .flags = OP_FLAG_RANDOM,
         .doc = "float/float16/float64/bfloat16, low/high/shape attributes" RAND_DOC_SEED),
  OP_ROW("", "RandomNormalLike", 1, 22, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_ALL, .claim = claim_random,
         .lower = lower_random, .arg = RAND_NORMAL_LIKE, .flags = OP_FLAG_RANDOM,
         .doc = "shape of any input, float dtype from the attribute or the input" RAND_DOC_SEED),
  OP_ROW("", "RandomUniformLike", 1, 22, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_ALL, .claim = claim_random,
         .lower = lower_random, .arg = RAND_UNIFORM_LIKE, .flags = OP_FLAG_RANDOM,
         .doc = "shape of any input, float dtype from the attribute or the input" RAND_DOC_SEED),
  OP_ROW("", "Bernoulli", 15, 22, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOAT, .claim = claim_bernoulli,
         .lower = lower_bernoulli, .flags = OP_FLAG_RANDOM,
         .doc = "float probabilities, any MLX output dtype; 1 where a uniform draw falls below p" RAND_DOC_SEED),
  OP_ROW("", "Multinomial", 7, 22, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOAT, .claim = claim_multinomial,
         .lower = lower_multinomial, .flags = OP_FLAG_RANDOM,
         .doc = "[batch, classes] unnormalized log-probabilities, sample_size draws, int32/int64 output" RAND_DOC_SEED),
};

OPS_FAMILY(random, defs);
