/* Length buckets: a decoder's KV cache grows by one row per step, so without help every decode
 * step is a new input signature and a new trace. Instead, the inputs whose sequence axis grows
 * are padded with zero rows up to a multiple of the bucket step, and the whole decode loop within
 * one bucket shares one signature (and one compiled program). Exactness comes from the op
 * table: every node a padded value reaches must have a `pad` rule that proves its valid outputs
 * unchanged (op.h); padded cluster outputs are trimmed back before ORT sees them.
 *
 * Which inputs to pad is found at plan creation: start from the last dynamic axis of every
 * input, propagate the facts through the rules, and when a node refuses, stop padding the inputs
 * that reached it; repeat until the rules accept everything (or nothing is left). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/plan_internal.h"

typedef struct propagation {
  const ir_graph *g;
  int words;         /* 64-bit words per origin set */
  pad_fact *facts;   /* per value */
  uint64_t *origins; /* per value: the padded inputs it derives from */
  uint64_t *refused; /* origins of the first value a node or output refused */
  pad_fact *in, *out; /* scratch: the facts of one node's inputs and outputs */
} propagation;

static uint64_t *origin_of(propagation *pr, int v) { return pr->origins + (size_t)v * (size_t)pr->words; }

static void origin_union(propagation *pr, uint64_t *dst, int v) {
  const uint64_t *src = origin_of(pr, v);
  for (int w = 0; w < pr->words; w++) dst[w] |= src[w];
}

/* The axis of input i worth padding: its last dynamic axis, or -1. */
static int candidate_axis(const ir_graph *g, int i) {
  const ir_value *v = &g->values[g->inputs[i]];
  if (v->rank < 1 || v->rank > BUCKET_MAX_RANK || v->dtype == ONNX_BOOL || op_mlx_dtype(v->dtype) < 0) return -1;
  for (int a = v->rank - 1; a >= 0; a--)
    if (v->dims[a] < 0) return a;
  return -1;
}

/* Records in pr->refused the origins of node n's padded inputs. */
static void refuse_node(propagation *pr, const ir_node *n) {
  for (int k = 0; k < n->n_inputs; k++)
    if (n->inputs[k] >= 0 && pr->facts[n->inputs[k]].kind != PAD_NONE) origin_union(pr, pr->refused, n->inputs[k]);
  for (int k = 0; k < n->n_implicit_inputs; k++)
    if (pr->facts[n->implicit_inputs[k]].kind != PAD_NONE) origin_union(pr, pr->refused, n->implicit_inputs[k]);
}

/* Applies node n's rule; false (with pr->refused set) when it refuses. */
static bool propagate_node(propagation *pr, const ir_node *n, const op_def *def) {
  pad_fact *in = pr->in, *out = pr->out;
  bool any = false;
  for (int k = 0; k < n->n_inputs; k++) {
    in[k] = n->inputs[k] >= 0 ? pr->facts[n->inputs[k]] : (pad_fact){PAD_NONE, 0};
    any = any || in[k].kind != PAD_NONE;
  }
  bool implicit = false;
  for (int k = 0; k < n->n_implicit_inputs; k++) implicit = implicit || pr->facts[n->implicit_inputs[k]].kind != PAD_NONE;
  if (!any && !implicit) return true;
  for (int k = 0; k < n->n_outputs; k++) out[k] = (pad_fact){PAD_NONE, 0};
  if (implicit || !def->pad || !def->pad(pr->g, n, in, out)) {
    refuse_node(pr, n);
    return false;
  }
  for (int k = 0; k < n->n_outputs; k++) {
    int v = n->outputs[k];
    if (v < 0) continue;
    pr->facts[v] = out[k];
    if (out[k].kind == PAD_NONE) continue;
    for (int j = 0; j < n->n_inputs; j++)
      if (n->inputs[j] >= 0) origin_union(pr, origin_of(pr, v), n->inputs[j]);
  }
  return true;
}

/* Propagates the padding of the inputs whose axis[i] >= 0; true when every node and output
 * accepts it, else pr->refused names the inputs to stop padding. */
static bool propagate(propagation *pr, const plan *p, const int *axis) {
  const ir_graph *g = pr->g;
  memset(pr->facts, 0, sizeof *pr->facts * (size_t)g->n_values);
  memset(pr->origins, 0, sizeof *pr->origins * (size_t)g->n_values * (size_t)pr->words);
  memset(pr->refused, 0, sizeof *pr->refused * (size_t)pr->words);
  for (int i = 0; i < g->n_inputs; i++) {
    if (axis[i] < 0) continue;
    pr->facts[g->inputs[i]] = (pad_fact){PAD_ROWS, axis[i]};
    origin_of(pr, g->inputs[i])[i / 64] |= 1ull << (i % 64);
  }
  for (int i = 0; i < g->n_nodes; i++)
    if (!propagate_node(pr, &g->nodes[i], p->defs[i])) return false;
  for (int o = 0; o < g->n_outputs; o++) {
    const ir_value *v = &g->values[g->outputs[o]];
    pad_kind k = pr->facts[g->outputs[o]].kind;
    /* a padded length would reach ORT; packed sub-byte outputs cannot drop rows when copied out */
    if (k == PAD_NONE || (k == PAD_ROWS && !ir_dtype_emulated_bits(v->dtype))) continue;
    origin_union(pr, pr->refused, g->outputs[o]);
    return false;
  }
  return true;
}

static int max_arity(const ir_graph *g) {
  int m = 1;
  for (int i = 0; i < g->n_nodes; i++) {
    if (g->nodes[i].n_inputs > m) m = g->nodes[i].n_inputs;
    if (g->nodes[i].n_outputs > m) m = g->nodes[i].n_outputs;
  }
  return m;
}

/* Shrinks axis[] until propagation succeeds; returns the number of padded inputs left. */
static int settle(propagation *pr, const plan *p, int *axis) {
  const ir_graph *g = pr->g;
  for (;;) {
    int left = 0;
    for (int i = 0; i < g->n_inputs; i++) left += axis[i] >= 0;
    if (!left || propagate(pr, p, axis)) return left;
    bool dropped = false;
    for (int i = 0; i < g->n_inputs; i++) {
      if (axis[i] < 0 || !(pr->refused[i / 64] >> (i % 64) & 1)) continue;
      axis[i] = -1;
      dropped = true;
    }
    if (!dropped) return 0; /* cannot happen: a refusal always names a padded input */
  }
}

int buckets_analyse(plan *p, diag *d) {
  const ir_graph *g = p->g;
  bucket_plan *b = &p->buckets;
  memset(b, 0, sizeof *b);
  if (p->cfg.bucket_step <= 0 || g->n_inputs == 0) return 0;
  int arity = max_arity(g);
  propagation pr = {.g = g, .words = (g->n_inputs + 63) / 64};
  pr.facts = calloc((size_t)g->n_values + 1, sizeof *pr.facts);
  pr.origins = calloc((size_t)g->n_values * (size_t)pr.words + 1, sizeof *pr.origins);
  pr.refused = calloc((size_t)pr.words, sizeof *pr.refused);
  pr.in = calloc((size_t)arity, sizeof *pr.in);
  pr.out = calloc((size_t)arity, sizeof *pr.out);
  b->input_axis = malloc(sizeof *b->input_axis * (size_t)g->n_inputs);
  b->output_axis = malloc(sizeof *b->output_axis * ((size_t)g->n_outputs + 1));
  int rc = 0;
  if (!pr.facts || !pr.origins || !pr.refused || !pr.in || !pr.out || !b->input_axis || !b->output_axis) {
    rc = diag_fail(d, "out of memory");
    goto done;
  }
  for (int i = 0; i < g->n_inputs; i++) b->input_axis[i] = candidate_axis(g, i);
  b->n_padded = settle(&pr, p, b->input_axis);
  b->last_length = -1;
  for (int o = 0; o < g->n_outputs; o++) {
    pad_fact f = pr.facts[g->outputs[o]];
    b->output_axis[o] = b->n_padded && f.kind == PAD_ROWS ? f.axis : -1;
  }
done:
  free(pr.facts);
  free(pr.origins);
  free(pr.refused);
  free(pr.in);
  free(pr.out);
  if (rc || !b->n_padded) buckets_free(b);
  return rc;
}

void buckets_free(bucket_plan *b) {
  free(b->input_axis);
  free(b->output_axis);
  memset(b, 0, sizeof *b);
}

/* Padding starts once the length is seen to change from one Run to the next (a decode loop):
 * Runs that repeat one length keep their exact shapes and skip the padding's cost. Guards: every
 * padded length is at least 1 (an empty past is a first prompt, which the rules do not cover) and
 * longer than every other dynamic input dimension, so that no padded length can be mistaken for
 * a query length or a batch size (GroupQueryAttention calls a step whose query is as long as the
 * total length a first prompt). */
int64_t buckets_pad(plan *p, const rt_tensor *inputs, int n_inputs) {
  const bucket_plan *b = &p->buckets;
  const ir_graph *g = p->g;
  if (!b->n_padded || n_inputs != g->n_inputs) return 0;
  int64_t shortest = -1, other = 0;
  for (int i = 0; i < n_inputs; i++) {
    const ir_value *v = &g->values[g->inputs[i]];
    if (v->rank < 0) continue;
    if (inputs[i].rank != v->rank) return 0;
    for (int a = 0; a < v->rank; a++) {
      int64_t dim = inputs[i].dims[a];
      if (a == b->input_axis[i]) shortest = shortest < 0 || dim < shortest ? dim : shortest;
      else if (v->dims[a] < 0 && dim > other) other = dim;
    }
  }
  int64_t previous = __atomic_exchange_n(&p->buckets.last_length, shortest, __ATOMIC_RELAXED);
  if (shortest < 1 || previous < 0 || previous == shortest) return 0;
  for (int i = 0; i < n_inputs; i++)
    if (b->input_axis[i] >= 0 && inputs[i].dims[b->input_axis[i]] <= other) return 0;
  int64_t step = p->cfg.bucket_step;
  return (shortest / step + 1) * step - shortest;
}

void buckets_padded_views(const plan *p, const rt_tensor *inputs, int n_inputs, int64_t pad, rt_tensor *out,
                          int64_t *dims) {
  for (int i = 0; i < n_inputs; i++) {
    out[i] = inputs[i];
    int axis = pad > 0 && p->buckets.n_padded ? p->buckets.input_axis[i] : -1;
    if (axis < 0) continue;
    int64_t *d = dims + (size_t)i * BUCKET_MAX_RANK;
    memcpy(d, inputs[i].dims, sizeof *d * (size_t)inputs[i].rank);
    d[axis] += pad;
    out[i].dims = d;
  }
}

void plan_describe_buckets(const plan *p, char *buf, size_t len) {
  const bucket_plan *b = &p->buckets;
  const ir_graph *g = p->g;
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < g->n_inputs && b->n_padded && used < len; i++) {
    if (b->input_axis[i] < 0) continue;
    int w = snprintf(buf + used, len - used, "%s%s[%d]", used ? ", " : "", g->values[g->inputs[i]].name,
                     b->input_axis[i]);
    if (w < 0) break;
    used += (size_t)w;
  }
}
