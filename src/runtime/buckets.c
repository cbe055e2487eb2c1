/* Length buckets: a decoder's KV cache grows by one row per step, so without help every decode
 * step is a new input signature and a new trace. Instead, the inputs whose sequence axis grows
 * are padded with zero rows up to a multiple of the bucket step, and the whole decode loop within
 * one bucket shares one signature (and one compiled program). Exactness comes from the op
 * table: every node a padded value reaches must have a `pad` rule that proves its valid outputs
 * unchanged (op.h); padded cluster outputs are trimmed back before ORT sees them.
 *
 * Which inputs to pad is found at plan creation: start from the last dynamic axis of every
 * input, propagate the facts through the rules, and when a node refuses, stop padding the inputs
 * that reached it; repeat until the rules accept everything (or nothing is left). That is the
 * `full` variant. A loop where only some of those inputs grow (onnxruntime-genai's shared KV
 * buffer: past and present are one buffer of the maximum length, only the attention mask grows)
 * gets a variant padding just those, analysed the same way when first seen; its rules may bound
 * the padded length by another input's dimension (pad_bound in op.h). */
#include <stdint.h>
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
  bucket_bound *bounds; /* the rules' bounds, over cluster inputs */
  int n_bounds, cap_bounds;
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

/* The cluster input whose value is v, or -1. */
static int cluster_input_of(const ir_graph *g, int v) {
  for (int i = 0; i < g->n_inputs; i++)
    if (g->inputs[i] == v) return i;
  return -1;
}

static bool bound_add(propagation *pr, bucket_bound b) {
  if (pr->n_bounds == pr->cap_bounds) {
    int cap = pr->cap_bounds ? 2 * pr->cap_bounds : 8;
    bucket_bound *grown = realloc(pr->bounds, sizeof *grown * (size_t)cap);
    if (!grown) return false;
    pr->bounds = grown;
    pr->cap_bounds = cap;
  }
  pr->bounds[pr->n_bounds++] = b;
  return true;
}

/* Records a rule's bound over cluster inputs: every padded input the length derives from must,
 * padded, stay within the named dimension of an unpadded cluster input. False: not checkable. */
static bool record_bound(propagation *pr, const ir_node *n, const pad_bound *b) {
  if (b->length < 0) return true;
  if (b->length >= n->n_inputs || b->within < 0 || b->within >= n->n_inputs) return false;
  int len_v = n->inputs[b->length], within_v = n->inputs[b->within];
  if (len_v < 0 || within_v < 0 || pr->facts[len_v].kind != PAD_LENGTH || pr->facts[within_v].kind != PAD_NONE)
    return false;
  int within = cluster_input_of(pr->g, within_v);
  const ir_value *w = &pr->g->values[within_v];
  if (within < 0 || b->axis < 0 || (w->rank >= 0 && b->axis >= w->rank)) return false;
  const uint64_t *origins = origin_of(pr, len_v);
  for (int i = 0; i < pr->g->n_inputs; i++)
    if (origins[i / 64] >> (i % 64) & 1)
      if (!bound_add(pr, (bucket_bound){.length_input = i, .within_input = within, .axis = b->axis})) return false;
  return true;
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
  pad_bound bound = {.length = -1, .within = -1, .axis = 0};
  if (implicit || !def->pad || !def->pad(pr->g, n, in, out, &bound) || !record_bound(pr, n, &bound)) {
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
  pr->n_bounds = 0;
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

static void variant_free(bucket_variant *v) {
  if (!v) return;
  free(v->input_axis);
  free(v->output_axis);
  free(v->bounds);
  free(v->grew);
  memset(v, 0, sizeof *v);
}

static void propagation_free(propagation *pr) {
  free(pr->facts);
  free(pr->origins);
  free(pr->refused);
  free(pr->in);
  free(pr->out);
  free(pr->bounds);
}

static int propagation_init(propagation *pr, const ir_graph *g) {
  int arity = max_arity(g);
  memset(pr, 0, sizeof *pr);
  pr->g = g;
  pr->words = (g->n_inputs + 63) / 64;
  pr->facts = calloc((size_t)g->n_values + 1, sizeof *pr->facts);
  pr->origins = calloc((size_t)g->n_values * (size_t)pr->words + 1, sizeof *pr->origins);
  pr->refused = calloc((size_t)pr->words, sizeof *pr->refused);
  pr->in = calloc((size_t)arity, sizeof *pr->in);
  pr->out = calloc((size_t)arity, sizeof *pr->out);
  return pr->facts && pr->origins && pr->refused && pr->in && pr->out ? 0 : -1;
}

/* Settles the padding of the inputs with axis[i] >= 0 into v, which takes axis[] over. */
static int variant_build(const plan *p, int *axis, bucket_variant *v) {
  const ir_graph *g = p->g;
  propagation pr;
  int init = propagation_init(&pr, g);
  memset(v, 0, sizeof *v);
  v->input_axis = axis;
  v->output_axis = malloc(sizeof *v->output_axis * ((size_t)g->n_outputs + 1));
  if (init || !axis || !v->output_axis) {
    propagation_free(&pr);
    variant_free(v);
    return -1;
  }
  v->n_padded = settle(&pr, p, axis);
  for (int o = 0; o < g->n_outputs; o++) {
    pad_fact f = pr.facts[g->outputs[o]];
    v->output_axis[o] = v->n_padded && f.kind == PAD_ROWS ? f.axis : -1;
  }
  if (v->n_padded && pr.n_bounds) {
    v->bounds = pr.bounds;
    v->n_bounds = pr.n_bounds;
    pr.bounds = NULL;
  }
  propagation_free(&pr);
  return 0;
}

int buckets_analyse(plan *p, diag *d) {
  const ir_graph *g = p->g;
  bucket_plan *b = &p->buckets;
  memset(b, 0, sizeof *b);
  if (p->cfg.bucket_step <= 0 || g->n_inputs == 0) return 0;
  int *axis = malloc(sizeof *axis * (size_t)g->n_inputs);
  b->last_lengths = malloc(sizeof *b->last_lengths * (size_t)g->n_inputs);
  if (!axis || !b->last_lengths) {
    free(axis);
    buckets_free(b);
    return diag_fail(d, "out of memory");
  }
  for (int i = 0; i < g->n_inputs; i++) {
    axis[i] = candidate_axis(g, i);
    b->last_lengths[i] = -1;
  }
  if (variant_build(p, axis, &b->full)) {
    buckets_free(b);
    return diag_fail(d, "out of memory");
  }
  if (!b->full.n_padded) buckets_free(b);
  return 0;
}

void buckets_free(bucket_plan *b) {
  variant_free(&b->full);
  for (int i = 0; i < b->n_subsets; i++) {
    variant_free(b->subsets[i]);
    free(b->subsets[i]);
  }
  free(b->last_lengths);
  memset(b, 0, sizeof *b);
}

/* Whether variant v was made for exactly the inputs in grew[]. */
static bool variant_for(const bucket_variant *v, const bool *grew, int n_inputs) {
  for (int i = 0; i < n_inputs; i++)
    if (v->grew[i] != grew[i]) return false;
  return true;
}

/* The kept variant for the inputs in grew[] (a subset of full's), analysed and kept on first
 * need; NULL when it pads nothing or cannot be made. Takes the plan's lock. */
static const bucket_variant *subset_variant(plan *p, const bool *grew) {
  const ir_graph *g = p->g;
  bucket_plan *b = &p->buckets;
  const bucket_variant *found = NULL;
  pthread_mutex_lock(&p->lock);
  for (int k = 0; k < b->n_subsets && !found; k++)
    if (variant_for(b->subsets[k], grew, g->n_inputs)) found = b->subsets[k];
  if (!found && b->n_subsets < BUCKET_MAX_SUBSETS) {
    bucket_variant *v = calloc(1, sizeof *v);
    int *axis = malloc(sizeof *axis * (size_t)g->n_inputs);
    bool *set = malloc(sizeof *set * (size_t)g->n_inputs);
    if (v && axis && set) {
      for (int i = 0; i < g->n_inputs; i++) axis[i] = grew[i] ? b->full.input_axis[i] : -1;
      memcpy(set, grew, sizeof *set * (size_t)g->n_inputs);
      int rc = variant_build(p, axis, v); /* takes axis over, also on failure */
      axis = NULL;
      if (!rc) {
        v->subset = true;
        v->grew = set;
        set = NULL;
        b->subsets[b->n_subsets++] = v;
        found = v;
        v = NULL;
      }
    }
    free(axis);
    free(set);
    free(v);
  }
  pthread_mutex_unlock(&p->lock);
  return found && found->n_padded ? found : NULL;
}

/* The strict guard of the full variant: every padded length is longer than every other dynamic
 * input dimension, so that no padded length can be mistaken for a query length or a batch size
 * (GroupQueryAttention calls a step whose query is as long as the total length a first prompt). */
static bool longer_than_others(const bucket_variant *v, const ir_graph *g, const rt_tensor *inputs, int n_inputs) {
  int64_t other = 0;
  for (int i = 0; i < n_inputs; i++) {
    const ir_value *val = &g->values[g->inputs[i]];
    for (int a = 0; a < val->rank; a++)
      if (a != v->input_axis[i] && val->dims[a] < 0 && inputs[i].dims[a] > other) other = inputs[i].dims[a];
  }
  for (int i = 0; i < n_inputs; i++)
    if (v->input_axis[i] >= 0 && inputs[i].dims[v->input_axis[i]] <= other) return false;
  return true;
}

/* The guard of a subset variant: padding keeps every order relation between a padded length L
 * and each other dynamic input dimension X (no X equals L, none lies strictly between L and
 * L + pad), so a test such as "query length == total length" answers as it would unpadded (a
 * query is never longer than its total, so it never meets L + pad), and a fixed buffer longer than
 * the total is at least as long as the padded total (padding up to a buffer's length is how the
 * last bucket ends, see bounded_pad). */
static bool is_bound_dim(const bucket_variant *v, int input, int axis) {
  for (int k = 0; k < v->n_bounds; k++)
    if (v->bounds[k].within_input == input && v->bounds[k].axis == axis) return true;
  return false;
}

static bool keeps_order(const bucket_variant *v, const ir_graph *g, const rt_tensor *inputs, int n_inputs, int64_t pad) {
  for (int i = 0; i < n_inputs; i++) {
    if (v->input_axis[i] < 0) continue;
    int64_t len = inputs[i].dims[v->input_axis[i]];
    for (int j = 0; j < n_inputs; j++) {
      const ir_value *val = &g->values[g->inputs[j]];
      for (int a = 0; a < val->rank; a++) {
        /* a rule's bound governs its own dimension (the padded length may reach it) */
        if (val->dims[a] >= 0 || a == v->input_axis[j] || is_bound_dim(v, j, a)) continue;
        int64_t x = inputs[j].dims[a];
        if (x == len || (x > len && x < len + pad)) return false;
      }
    }
  }
  return true;
}

/* The largest pad every bound allows (a fixed buffer's length minus the padded input's), or -1
 * when a bound cannot be read; INT64_MAX without bounds. */
static int64_t bounded_pad(const bucket_variant *v, const rt_tensor *inputs) {
  int64_t most = INT64_MAX;
  for (int k = 0; k < v->n_bounds; k++) {
    const bucket_bound *b = &v->bounds[k];
    int axis = v->input_axis[b->length_input];
    const rt_tensor *w = &inputs[b->within_input];
    if (axis < 0 || b->axis >= w->rank) return -1;
    int64_t room = w->dims[b->axis] - inputs[b->length_input].dims[axis];
    if (room < most) most = room;
  }
  return most;
}

/* Padding starts once lengths are seen to change from one Run to the next (a decode loop): Runs
 * that repeat them keep their exact shapes and skip the padding's cost. When every input of the
 * full variant grew, the full variant pads; when only some did (the others are fixed buffers),
 * a variant for those pads. Guards: every padded length is at least 1 (an empty past is a first
 * prompt, which the rules do not cover), the variant's order guard, and the rules' bounds. */
int64_t buckets_pad(plan *p, const rt_tensor *inputs, int n_inputs, const bucket_variant **variant) {
  const bucket_plan *b = &p->buckets;
  const ir_graph *g = p->g;
  *variant = NULL;
  if (!b->full.n_padded || n_inputs != g->n_inputs || n_inputs > BUCKET_MAX_INPUTS) return 0;
  bool grew[BUCKET_MAX_INPUTS];
  bool first = false, all = true, any = false;
  for (int i = 0; i < n_inputs; i++) {
    const ir_value *v = &g->values[g->inputs[i]];
    grew[i] = false;
    if (v->rank >= 0 && inputs[i].rank != v->rank) return 0;
    int axis = b->full.input_axis[i];
    if (axis < 0) continue;
    int64_t len = inputs[i].dims[axis];
    int64_t previous = __atomic_exchange_n(&p->buckets.last_lengths[i], len, __ATOMIC_RELAXED);
    first = first || previous < 0;
    grew[i] = previous >= 0 && previous != len;
    all = all && grew[i];
    any = any || grew[i];
  }
  if (first || !any) return 0;
  const bucket_variant *v = all ? &b->full : subset_variant(p, grew);
  if (!v) return 0;
  int64_t shortest = -1;
  for (int i = 0; i < n_inputs; i++) {
    if (v->input_axis[i] < 0) continue;
    int64_t len = inputs[i].dims[v->input_axis[i]];
    shortest = shortest < 0 || len < shortest ? len : shortest;
  }
  if (shortest < 1) return 0;
  int64_t step = p->cfg.bucket_step;
  int64_t pad = (shortest / step + 1) * step - shortest;
  /* a fixed buffer ends the last bucket early: pad up to its length, which is a signature too */
  int64_t room = bounded_pad(v, inputs);
  if (room < pad) pad = room;
  if (pad < 1) return 0;
  if (v->subset ? !keeps_order(v, g, inputs, n_inputs, pad) : !longer_than_others(v, g, inputs, n_inputs)) return 0;
  *variant = v;
  return pad;
}

void buckets_padded_views(const bucket_variant *v, const rt_tensor *inputs, int n_inputs, int64_t pad, rt_tensor *out,
                          int64_t *dims) {
  for (int i = 0; i < n_inputs; i++) {
    out[i] = inputs[i];
    int axis = pad > 0 && v ? v->input_axis[i] : -1;
    if (axis < 0) continue;
    int64_t *d = dims + (size_t)i * BUCKET_MAX_RANK;
    memcpy(d, inputs[i].dims, sizeof *d * (size_t)inputs[i].rank);
    d[axis] += pad;
    out[i].dims = d;
  }
}

static void describe_variant(const ir_graph *g, const bucket_variant *v, char *buf, size_t len, size_t *used) {
  for (int i = 0; i < g->n_inputs && *used < len; i++) {
    if (v->input_axis[i] < 0) continue;
    int w = snprintf(buf + *used, len - *used, "%s%s[%d]", *used ? ", " : "", g->values[g->inputs[i]].name,
                     v->input_axis[i]);
    if (w < 0) break;
    *used += (size_t)w;
  }
}

void plan_describe_buckets(const plan *p, char *buf, size_t len) {
  const bucket_plan *b = &p->buckets;
  size_t used = 0;
  buf[0] = '\0';
  if (!b->full.n_padded) return;
  describe_variant(p->g, &b->full, buf, len, &used);
  for (int k = 0; k < b->n_subsets && used < len; k++) {
    if (!b->subsets[k]->n_padded) continue;
    int w = snprintf(buf + used, len - used, "; when only these grow: ");
    if (w < 0) break;
    used += (size_t)w;
    size_t mark = used;
    describe_variant(p->g, b->subsets[k], buf + mark, len - mark, &(size_t){0});
    used = strlen(buf);
  }
}
