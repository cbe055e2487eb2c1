/* One Run of a plan on the calling thread: host inputs become MLX arrays; either every node is
 * lowered in topological order into one MLX graph (eager) or the signature's compiled program is
 * replayed; the cluster outputs are evaluated once and copied into ORT's buffers. The first Run
 * of a signature is always eager and records the shape-derived values it read on the host, so
 * later Runs (and traces) need no evaluation for them. The op_ctx interface itself is in op_ctx.c,
 * the outputs' evaluation and copies (and outputs written in place) in outputs.c. */
#include <stdarg.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/trace.h"
#include "runtime/emulated.h"
#include "runtime/run_internal.h"

static uint64_t now_us(void) { return trace_now_us(); }

/* ---- Run --------------------------------------------------------------------------------- */

enum { MAX_RANK = 64 };

typedef struct run_state {
  mlxb_scope *s;
  const int *alias; /* the aliased program's map (op_output_alias), or NULL */
  mlxb_array **vals;
  seq_value *seqs;
  host_value *host;
  int n_values;
  bool data_read; /* the lowering read a value that depends on data on the host (op_note_host_read) */
} run_state;

static int run_state_init_frame(run_state *r, const graph_frame *f, mlxb_scope *s) {
  r->n_values = f->g->n_values;
  r->s = s;
  r->alias = NULL;
  r->vals = calloc((size_t)r->n_values + 1, sizeof *r->vals);
  r->seqs = calloc((size_t)r->n_values + 1, sizeof *r->seqs);
  r->host = calloc((size_t)r->n_values + 1, sizeof *r->host);
  if (!r->vals || !r->seqs || !r->host) return -1;
  for (int v = 0; v < r->n_values; v++)
    if (f->const_arrays[v]) r->vals[v] = f->const_arrays[v];
  return 0;
}

static int run_state_init(run_state *r, const plan *p, mlxb_scope *s) { return run_state_init_frame(r, &p->top, s); }

static void run_state_free(run_state *r) {
  host_values_free(r->host, r->n_values);
  for (int v = 0; r->seqs && v < r->n_values; v++) free(r->seqs[v].items);
  free(r->seqs);
  free(r->vals);
}

static int check_input(const plan *p, const ir_value *val, const rt_tensor *t, diag *d) {
  if (val->dtype != ONNX_UNDEFINED && t->dtype != val->dtype)
    return diag_fail(d, "%s: input '%s' has dtype %s, expected %s", p->name, val->name, ir_dtype_name(t->dtype),
                     ir_dtype_name(val->dtype));
  if (val->rank >= 0 && t->rank != val->rank)
    return diag_fail(d, "%s: input '%s' has rank %d, expected %d", p->name, val->name, t->rank, val->rank);
  for (int k = 0; val->rank >= 0 && k < t->rank; k++)
    if (val->dims[k] >= 0 && val->dims[k] != t->dims[k])
      return diag_fail(d, "%s: input '%s' has dimension %d = %lld, expected %lld", p->name, val->name, k,
                       (long long)t->dims[k], (long long)val->dims[k]);
  if (op_mlx_dtype(t->dtype) < 0 && !ir_dtype_emulated_bits(t->dtype))
    return diag_fail(d, "%s: input '%s' has dtype %s, which MLX lacks", p->name, val->name, ir_dtype_name(t->dtype));
  return 0;
}

/* One input as an MLX array: our device memory (an IOBinding, or ORT's copy of a host input)
 * wrapped without a copy (its padding, *device_pad_axis, left to bind_inputs, which pads them all
 * at once); else padded to its bucket, or borrowing ORT's buffer where MLX can read it in place
 * (the Run outlives every array of its scope), or copied. */
static mlxb_array *bind_input(plan *p, mlxb_scope *s, const rt_tensor *t, int i, const run_pad *rp,
                              int *device_pad_axis) {
  int axis = rp->pad > 0 ? rp->v->input_axis[i] : -1;
  *device_pad_axis = -1;
  if (ir_dtype_emulated_bits(t->dtype)) return emulated_upload(s, t->dtype, t->data, t->dims, t->rank);
  mlxb_dtype type = (mlxb_dtype)op_mlx_dtype(t->dtype);
  if (type != MLXB_BOOL && mlxb_device_owns(t->data, rt_tensor_bytes(t, type))) {
    PLAN_STAT_ADD(p, device_inputs, 1);
    *device_pad_axis = axis;
    return mlxb_borrow_device(s, t->data, t->dims, t->rank, type);
  }
  PLAN_STAT_ADD(p, host_inputs, 1);
  if (axis >= 0) return mlxb_from_data_padded(s, t->data, t->dims, t->rank, type, axis, rp->pad);
  if (type != MLXB_BOOL && p->cfg.device == MLXB_DEVICE_CPU) return mlxb_borrow_data(s, t->data, t->dims, t->rank, type);
  return mlxb_from_data(s, t->data, t->dims, t->rank, type);
}

static int bind_inputs(plan *p, mlxb_scope *s, const rt_tensor *inputs, int n_inputs, const run_pad *rp,
                       mlxb_array **arrays, diag *d) {
  const ir_graph *g = p->g;
  if (n_inputs != g->n_inputs)
    return diag_fail(d, "%s: expected %d inputs, got %d", p->name, g->n_inputs, n_inputs);
  int axes_stack[64];
  int *pad_axes = n_inputs <= 64 ? axes_stack : malloc(sizeof *pad_axes * (size_t)n_inputs);
  if (!pad_axes) return diag_fail(d, "out of memory");
  int rc = 0;
  bool any_pad = false;
  for (int i = 0; i < n_inputs && !rc; i++) {
    const ir_value *val = &g->values[g->inputs[i]];
    rc = check_input(p, val, &inputs[i], d);
    if (rc) break;
    arrays[i] = bind_input(p, s, &inputs[i], i, rp, &pad_axes[i]);
    if (!arrays[i]) rc = diag_fail(d, "%s: input '%s': %s", p->name, val->name, mlxb_error(s));
    any_pad |= pad_axes[i] >= 0;
  }
  /* padded device inputs: one operation of the Run's graph, or filled here (mlxb_device_prepare)
   * before any lowering or evaluation reads them */
  if (!rc && any_pad && mlxb_pad_inputs(s, arrays, pad_axes, n_inputs, rp->pad))
    rc = diag_fail(d, "%s: padding the inputs: %s", p->name, mlxb_error(s));
  if (!rc && mlxb_device_prepare(s)) rc = diag_fail(d, "%s: padding the inputs: %s", p->name, mlxb_error(s));
  if (pad_axes != axes_stack) free(pad_axes);
  return rc ? -1 : 0;
}

/* MLX GPUs have no float64: nodes touching float64 run on an MLX CPU stream inside the same
 * graph (MLX orders work across streams within one eval). */
static bool node_touches_f64(const ir_graph *g, const ir_node *n) {
  for (int k = 0; k < n->n_inputs; k++)
    if (n->inputs[k] >= 0 && g->values[n->inputs[k]].dtype == ONNX_DOUBLE) return true;
  for (int k = 0; k < n->n_outputs; k++)
    if (n->outputs[k] >= 0 && g->values[n->outputs[k]].dtype == ONNX_DOUBLE) return true;
  return false;
}

/* The size of a graph about to run; with ORT_EP_MLX_OP_HISTOGRAM set, also where its operations
 * go (primitive names and counts) on stderr: the first look when a program is slower than the
 * same computation written in MLX. */
static bool op_histogram_wanted(void) {
  static int wanted = -1;
  if (wanted < 0) wanted = getenv("ORT_EP_MLX_OP_HISTOGRAM") != NULL;
  return wanted;
}

static size_t graph_size_sampled(const plan *p, mlxb_array *const *results, int eager) {
  if (!op_histogram_wanted()) return mlxb_graph_size(results, (size_t)p->g->n_outputs);
  char text[4096];
  size_t ops = mlxb_graph_histogram(results, (size_t)p->g->n_outputs, text, sizeof text);
  fprintf(stderr, "[mlx ep] %s %s: %zu ops: %s\n", p->name, eager ? "eager" : "program", ops, text);
  return ops;
}

/* With ORT_EP_MLX_OP_HISTOGRAM set, the operations one node's lowering added (on stderr): those its
 * outputs reach that no earlier node's line counted (the cluster's tally), so a trace's lines add up
 * to its program. */
static void node_histogram(const op_ctx *c) {
  const op_ctx *root = c;
  while (root->outer) root = root->outer;
  if (!root->tally) return; /* not made (out of memory): no node lines */
  mlxb_array *outs[64];
  size_t n_out = 0;
  for (int k = 0; k < c->node->n_outputs && n_out < 64; k++)
    if (c->node->outputs[k] >= 0 && c->vals[c->node->outputs[k]]) outs[n_out++] = c->vals[c->node->outputs[k]];
  char text[2048];
  size_t ops = mlxb_op_tally_add(root->tally, outs, n_out, text, sizeof text);
  fprintf(stderr, "[mlx ep] node %s (%s): %zu ops: %s\n", c->node->name, c->node->op_type, ops, text);
}

/* Lowers every node of c's graph in order (c->node is set per node). The scope's force_cpu is
 * restored on return: a traced body shares its control-flow node's scope, and that node's own
 * lowering goes on after the body's nodes; after the cluster, the outputs' float64 work finds
 * the CPU through the bridge's dtype rule (dtype_dev), not a flag the last node left set. */
static int lower_frame_nodes(op_ctx *c, run_state *r) {
  const graph_frame *f = c->f;
  diag *d = c->d;
  bool on_gpu = mlxb_scope_device(r->s) == MLXB_DEVICE_GPU;
  for (int i = 0; i < f->g->n_nodes; i++) {
    c->node = &f->g->nodes[i];
    if (on_gpu) mlxb_scope_force_cpu(r->s, node_touches_f64(f->g, c->node));
    mlxb_array *ahead = c->ahead ? c->ahead[i] : NULL; /* computed by an earlier node (op_compute_for) */
    int failed = ahead ? op_set_output(c, 0, ahead) : f->defs[i]->lower(c, f->defs[i]);
    if (failed || !mlxb_ok(r->s)) {
      if (!d->failed) diag_fail(d, "%s", mlxb_error(r->s));
      diag_prefix(d, "node '%s' (%s): ", c->node->name, c->node->op_type);
      return -1;
    }
    for (int k = 0; k < c->node->n_outputs; k++) {
      int v = c->node->outputs[k];
      if (v >= 0 && !r->vals[v] && !r->seqs[v].set && op_has_output(c, k))
        return diag_fail(d, "node '%s' (%s): output %d was not produced", c->node->name, c->node->op_type, k);
    }
    if (c->tracing && op_histogram_wanted()) node_histogram(c);
  }
  return 0;
}

static int lower_frame(op_ctx *c, run_state *r) {
  bool forced = mlxb_scope_force_cpu(r->s, false); /* each node sets it again on a GPU */
  int rc = lower_frame_nodes(c, r);
  mlxb_scope_force_cpu(r->s, forced);
  return rc;
}

static int lower_nodes(plan *p, run_state *r, const host_value *known, bool tracing, check_list *checks, diag *d) {
  mlxb_array **ahead = calloc((size_t)(p->g->n_nodes > 0 ? p->g->n_nodes : 1), sizeof *ahead);
  if (!ahead) return diag_fail(d, "out of memory");
  op_ctx c = {.plan = p, .g = p->g, .f = &p->top, .s = r->s, .run_s = r->s, .vals = r->vals, .seqs = r->seqs,
              .host = r->host, .known = known, .tracing = tracing, .checks = checks, .alias = r->alias,
              .ahead = ahead, .d = d, .tally = tracing && op_histogram_wanted() ? mlxb_op_tally_new() : NULL};
  int rc = lower_frame(&c, r);
  r->data_read = c.data_read;
  mlxb_op_tally_free(c.tally);
  free(ahead);
  return rc;
}

/* ---- control-flow bodies (op_lower_body) ---------------------------------------------------- */

static int node_index(const op_ctx *c) { return (int)(c->node - c->g->nodes); }

static const graph_frame *body_frame(const op_ctx *c, const char *attr) {
  const ir_node *n = c->node;
  int i = node_index(c);
  for (int k = 0; c->f->bodies && c->f->bodies[i] && k < n->n_subgraphs; k++)
    if (n->subgraph_attrs[k] && !strcmp(n->subgraph_attrs[k], attr)) return c->f->bodies[i][k];
  return NULL;
}

const ir_graph *op_body(const op_ctx *c, const char *attr) {
  const graph_frame *f = body_frame(c, attr);
  return f ? f->g : NULL;
}

bool op_tracing(const op_ctx *c) { return c->tracing; }

static int copy_host_value(host_value *dst, const host_value *src) {
  if (!src || !src->ints || dst->ints) return 0;
  dst->ints = malloc(sizeof(int64_t) * (size_t)(src->n ? src->n : 1));
  if (!dst->ints) return -1;
  if (src->n) memcpy(dst->ints, src->ints, sizeof(int64_t) * (size_t)src->n);
  dst->n = src->n;
  return 0;
}

/* A body's references to the enclosing graph: the arrays of this Run and any host integers
 * already known there (a Shape's result), so the body needs no evaluation for them. */
int seq_copy(seq_value *dst, const seq_value *src) {
  mlxb_array **items = malloc(sizeof *items * (size_t)(src->n ? src->n : 1));
  if (!items) return -1;
  if (src->n) memcpy(items, src->items, sizeof *items * (size_t)src->n);
  free(dst->items);
  *dst = (seq_value){.set = true, .n = src->n, .items = items};
  return 0;
}

static int bind_outer(const op_ctx *c, const graph_frame *f, run_state *r) {
  for (int v = 0; v < f->g->n_values; v++) {
    int pv = f->outer[v];
    if (pv < 0) continue;
    r->vals[v] = c->vals[pv];
    if (c->seqs[pv].set && seq_copy(&r->seqs[v], &c->seqs[pv])) return -1;
    if (copy_host_value(&r->host[v], &c->host[pv])) return -1;
    if (c->known && copy_host_value(&r->host[v], &c->known[pv])) return -1;
  }
  return 0;
}

/* Checks recorded from index `from` on move to the Run's scope (a body's own scope is freed when
 * it ends) and, given `when`, count only where it holds. */
static int keep_checks(op_ctx *c, int from, mlxb_array *when) {
  mlxb_scope *rs = c->run_s;
  mlxb_array *zero = when ? mlxb_scalar_i64(rs, 0, MLXB_I64) : NULL;
  mlxb_array *w = when ? mlxb_reshape(rs, when, NULL, 0) : NULL;
  for (int i = from; i < c->checks->n; i++) {
    mlxb_array *flag = c->checks->flags[i];
    c->checks->flags[i] = when ? mlxb_where(rs, w, flag, zero) : mlxb_ref(rs, flag);
  }
  return mlxb_ok(rs) ? 0 : diag_fail(c->d, "%s", mlxb_error(rs));
}

/* The body's outputs into the caller's scope. */
static int take_outputs(op_ctx *c, const graph_frame *f, const char *attr, run_state *r, mlxb_array **outputs,
                        int n_outputs) {
  const ir_graph *g = f->g;
  for (int i = 0; i < n_outputs; i++) {
    mlxb_array *a = r->vals[g->outputs[i]];
    if (!a) return op_fail(c, "body '%s' output '%s' was not computed", attr, g->values[g->outputs[i]].name);
    if (!(outputs[i] = r->s == c->s ? a : mlxb_ref(c->s, a))) return op_check(c);
  }
  return 0;
}

int op_lower_body(op_ctx *c, const char *attr, mlxb_array *const *inputs, int n_inputs, mlxb_array **outputs,
                  int n_outputs, mlxb_array *when) {
  const graph_frame *f = body_frame(c, attr);
  if (!f) return op_fail(c, "no body '%s'", attr);
  if (!f->defs) return op_fail(c, "body '%s' cannot be lowered: %s", attr, f->why_not ? f->why_not : "");
  const ir_graph *g = f->g;
  if (n_inputs != g->n_inputs || n_outputs != g->n_outputs)
    return op_fail(c, "body '%s' takes %d inputs and gives %d outputs, not %d and %d", attr, g->n_inputs,
                   g->n_outputs, n_inputs, n_outputs);
  /* eager: the body builds in a scope of its own, freed when it ends, so a host loop keeps no
   * intermediate of past iterations alive (MLX keeps what the outputs' graph still needs) */
  mlxb_scope *bs = c->tracing ? c->s : mlxb_scope_new(mlxb_scope_device(c->s));
  if (!bs) return op_fail(c, "out of memory");
  run_state r;
  int rc = -1, first_check = c->checks->n;
  if (run_state_init_frame(&r, f, bs) || bind_outer(c, f, &r)) {
    op_fail(c, "out of memory");
    goto done;
  }
  for (int i = 0; i < n_inputs; i++) r.vals[g->inputs[i]] = inputs[i];
  op_ctx inner = {.plan = c->plan, .g = g, .f = f, .outer = c, .s = bs, .run_s = c->run_s, .vals = r.vals,
                  .seqs = r.seqs, .host = r.host, .tracing = c->tracing, .checks = c->checks, .d = c->d};
  if (lower_frame(&inner, &r)) {
    diag_prefix(c->d, "body '%s': ", attr);
    goto done;
  }
  if (take_outputs(c, f, attr, &r, outputs, n_outputs)) goto done;
  rc = keep_checks(c, first_check, when);
done:
  run_state_free(&r);
  if (bs != c->s) mlxb_scope_free(bs);
  return rc;
}

/* ---- compiled bodies for host loops (op_call_body) -------------------------------------------
 * A host loop would lower its body in every iteration; instead the body is traced once per input
 * signature into a program of its own (formal inputs, then the enclosing graph's non-constant
 * values it reads; constants are captured) and replayed. The trace sees no host value of the
 * enclosing graph (they may differ between Runs of one body signature), so a body that reads one
 * on the host fails its trace and is lowered per iteration, as before. */

/* The enclosing graph's non-constant values the body reads, in value order; -1 when one is
 * missing or there are more than max. */
static int body_outer_inputs(const op_ctx *c, const graph_frame *f, mlxb_array **out, int max) {
  int n = 0;
  for (int v = 0; v < f->g->n_values; v++) {
    if (f->outer[v] < 0 || f->const_arrays[v]) continue;
    if (n == max || !c->vals[f->outer[v]]) return -1; /* a sequence, too: the body is lowered */
    out[n++] = c->vals[f->outer[v]];
  }
  return n;
}

/* A trace's check rules, kept by the first thread whose trace finishes (every thread's trace
 * finds the same rules); the flag arrays belong to the trace, so only the rules are kept. */
static void keep_trace_checks(plan *p, check_list *into, bool *known, check_list *checks) {
  pthread_mutex_lock(&p->lock);
  if (!*known) {
    *into = *checks;
    check_list_keep_rules(into);
    *known = true;
    memset(checks, 0, sizeof *checks);
  }
  pthread_mutex_unlock(&p->lock);
}

/* Counts a successful trace in *first (a plan_stats field of p), or, for a hot GPU program's second
 * trace with MLX's fusion, in fusion_traces. */
static void count_trace(plan *p, uint64_t *first) {
  __atomic_fetch_add(mlxb_tracing_fused_again() ? &p->stats.fusion_traces : first, 1, __ATOMIC_RELAXED);
}

static int trace_body(void *user, mlxb_scope *s, mlxb_array *const *inputs, int n_inputs, mlxb_array **outputs,
                      int n_outputs) {
  body_program *bp = user;
  const graph_frame *f = bp->frame;
  const ir_graph *g = f->g;
  plan *p = bp->owner;
  diag d;
  diag_init(&d);
  run_state r;
  check_list checks = {0};
  int rc = -1, k = 0;
  if (run_state_init_frame(&r, f, s)) {
    diag_fail(&d, "out of memory");
    goto done;
  }
  if (n_outputs != g->n_outputs + 1) {
    diag_fail(&d, "a body program has the body's outputs and its checks");
    goto done;
  }
  for (int i = 0; i < g->n_inputs && k < n_inputs; i++) r.vals[g->inputs[i]] = inputs[k++];
  for (int v = 0; v < g->n_values && k < n_inputs; v++)
    if (f->outer[v] >= 0 && !f->const_arrays[v]) r.vals[v] = inputs[k++];
  op_ctx c = {.plan = p, .g = g, .f = f, .s = s, .run_s = s, .vals = r.vals, .seqs = r.seqs, .host = r.host,
              .tracing = true, .checks = &checks, .d = &d};
  if (lower_frame(&c, &r)) goto done;
  for (int i = 0; i < g->n_outputs; i++)
    if (!(outputs[i] = r.vals[g->outputs[i]])) {
      diag_fail(&d, "body output '%s' was not computed", g->values[g->outputs[i]].name);
      goto done;
    }
  outputs[g->n_outputs] = checks_summary(s, &checks);
  keep_trace_checks(p, &bp->checks, &bp->checks_known, &checks);
  count_trace(p, &p->stats.body_traces);
  rc = 0;
done:
  if (rc) {
    pthread_mutex_lock(&p->lock);
    bp->trace_refused = d.trace_refusal;
    pthread_mutex_unlock(&p->lock);
    mlxb_set_error(s, d.msg);
  }
  check_list_free(&checks);
  run_state_free(&r);
  return rc;
}

/* The frame's program for this key, listed when new (NULL past BODY_PROGRAMS_MAX). Under lock. */
static body_program *body_program_find_locked(plan *p, graph_frame *f, const int64_t *key, int key_len) {
  for (body_program *bp = f->programs; bp; bp = bp->next)
    if (bp->key_len == key_len && !memcmp(bp->key, key, sizeof *key * (size_t)key_len)) return bp;
  if (f->n_programs >= BODY_PROGRAMS_MAX) return NULL;
  body_program *bp = calloc(1, sizeof *bp);
  int64_t *kept = malloc(sizeof *kept * (size_t)(key_len ? key_len : 1));
  if (!bp || !kept) {
    free(bp);
    free(kept);
    return NULL;
  }
  memcpy(kept, key, sizeof *key * (size_t)key_len);
  *bp = (body_program){.next = f->programs, .owner = p, .frame = f, .key_len = key_len, .key = kept};
  f->programs = bp;
  f->n_programs++;
  return bp;
}

/* Whether a failed trace fails the Run: never when a lowering refused the trace by design
 * (op_trace_refuse: that signature runs eagerly in every build); otherwise only in a debug build
 * (without NDEBUG), where an unexpected trace failure is a bug to see, not a slow path to hide. */
static bool trace_failure_is_fatal(bool refused) {
#ifdef NDEBUG
  (void)refused;
  return false;
#else
  return !refused;
#endif
}

/* Marks bp uncompilable (lowered per iteration from then on); true when the failure is fatal
 * (trace_failure_is_fatal). Under p->lock. */
static bool body_trace_failed_locked(plan *p, body_program *bp) {
  if (bp->uncompilable) return false;
  bp->uncompilable = true;
  PLAN_STAT_ADD(p, body_trace_failures, 1);
  if (!bp->trace_refused) PLAN_STAT_ADD(p, unexpected_trace_failures, 1);
  return trace_failure_is_fatal(bp->trace_refused);
}

enum { BODY_CALL_MAX_INPUTS = 1024 };

int op_call_body(op_ctx *c, const char *attr, mlxb_array *const *inputs, int n_inputs, mlxb_array **outputs,
                 int n_outputs, mlxb_array **checks, const void **rules) {
  *checks = NULL;
  *rules = NULL;
  plan *p = c->plan;
  graph_frame *f = (graph_frame *)body_frame(c, attr); /* programs are listed under the plan's lock */
  if (c->tracing || !p->compile || !f || !f->defs) return 1;
  const ir_graph *g = f->g;
  if (n_inputs != g->n_inputs || n_outputs != g->n_outputs || n_inputs > BODY_CALL_MAX_INPUTS) return 1;
  mlxb_array *ins[BODY_CALL_MAX_INPUTS];
  for (int i = 0; i < n_inputs; i++)
    if (!(ins[i] = inputs[i])) return 1;
  int n_outer = body_outer_inputs(c, f, ins + n_inputs, BODY_CALL_MAX_INPUTS - n_inputs);
  if (n_outer < 0) return 1;
  int n = n_inputs + n_outer, key_len = 0;
  for (int i = 0; i < n; i++) key_len += 2 + mlxb_ndim(ins[i]);
  int64_t *key = malloc(sizeof *key * (size_t)(key_len ? key_len : 1));
  mlxb_array **outs = malloc(sizeof *outs * (size_t)(n_outputs + 1));
  int rc = 1;
  if (!key || !outs) goto done;
  for (int i = 0, at = 0; i < n; i++) {
    key[at++] = mlxb_type(ins[i]);
    key[at++] = mlxb_ndim(ins[i]);
    mlxb_shape(ins[i], key + at);
    at += mlxb_ndim(ins[i]);
  }
  pthread_mutex_lock(&p->lock);
  body_program *bp = body_program_find_locked(p, f, key, key_len);
  bool fatal = false;
  char err[1024] = "";
  if (bp && !bp->program && !bp->uncompilable) {
    bp->program = mlxb_compile(p->cfg.device, trace_body, bp, g->n_outputs + 1, false, err, sizeof err);
    if (!bp->program) fatal = body_trace_failed_locked(p, bp);
  }
  mlxb_program *prog = bp && !bp->uncompilable ? bp->program : NULL;
  pthread_mutex_unlock(&p->lock);
  if (fatal) {
    rc = op_fail(c, "body '%s': unexpected trace failure (a debug build fails on it): %s", attr, err);
    goto done;
  }
  if (!prog) goto done;
  if (mlxb_program_call(c->s, prog, ins, n, outs, n_outputs + 1)) {
    pthread_mutex_lock(&p->lock); /* e.g. a host read inside the body: it is lowered per iteration */
    fatal = body_trace_failed_locked(p, bp);
    pthread_mutex_unlock(&p->lock);
    snprintf(err, sizeof err, "%s", mlxb_error(c->s));
    mlxb_clear_error(c->s);
    if (fatal) rc = op_fail(c, "body '%s': unexpected trace failure (a debug build fails on it): %s", attr, err);
    goto done;
  }
  pthread_mutex_lock(&p->lock);
  bool known = bp->checks_known;
  int n_checks = bp->checks.n;
  pthread_mutex_unlock(&p->lock);
  if (!known) {
    rc = op_fail(c, "body '%s': the program's checks are unknown", attr);
    goto done;
  }
  for (int i = 0; i < n_outputs; i++) outputs[i] = outs[i];
  if (n_checks) {
    *checks = outs[n_outputs];
    *rules = bp;
  }
  PLAN_STAT_ADD(p, body_replays, 1);
  rc = 0;
done:
  free(key);
  free(outs);
  return rc;
}

int op_keep_body_checks(op_ctx *c, const void *rules, mlxb_array *summary) {
  const body_program *bp = rules;
  if (!bp || !summary) return 0;
  mlxb_scope *rs = c->run_s;
  for (int i = 0; i < bp->checks.n; i++) { /* the rules are immutable once known */
    mlxb_array *flag = mlxb_slice(rs, summary, (const int64_t[]){2 * i}, (const int64_t[]){2 * i + 2},
                                  (const int64_t[]){1});
    char *rule = strdup(bp->checks.rules[i]);
    if (!flag || !rule || check_list_push(c->checks, flag, rule)) {
      free(rule);
      return mlxb_ok(rs) ? op_fail(c, "out of memory") : diag_fail(c->d, "%s", mlxb_error(rs));
    }
  }
  return 0;
}

mlxb_scope *op_swap_scope(op_ctx *c, mlxb_scope *s) {
  mlxb_scope *old = c->s;
  c->s = s;
  return old;
}

int op_eval(op_ctx *c, mlxb_array *const *arrays, int n) {
  if (c->tracing) return op_trace_refuse(c, "evaluation inside a trace");
  if (n > 0 && mlxb_eval(c->s, arrays, (size_t)n)) return op_check(c);
  return 0;
}

void op_note_host_read(op_ctx *c, int v) {
  PLAN_STAT_ADD(c->plan, host_reads, 1);
  if (!c->outer && v >= 0 && c->plan->shape_derived[v]) return; /* the signature fixes it */
  while (c->outer) c = c->outer;
  c->data_read = true;
}

int op_read_ints(op_ctx *c, mlxb_array *a, int64_t *out, int max) {
  if (c->tracing) return op_trace_refuse(c, "a value is read on the host but depends on data");
  if (!a) return op_check(c) ? -1 : op_fail(c, "no value to read");
  size_t n = mlxb_size(a);
  if (n > (size_t)max) return op_fail(c, "%zu values to read (at most %d)", n, max);
  op_note_host_read(c, -1);
  if (mlxb_read_i64(c->s, a, out, n)) return op_check(c);
  return (int)n;
}

int op_output_alias(const op_ctx *c, int k) {
  if (!c->alias || c->outer || k < 0 || k >= c->node->n_outputs || c->node->outputs[k] < 0) return -1;
  const ir_graph *g = c->g;
  int out = c->node->outputs[k];
  for (int i = 0; i < g->n_outputs; i++) {
    if (g->outputs[i] != out || c->alias[i] < 0) continue;
    int in = g->inputs[c->alias[i]];
    for (int m = 0; m < c->node->n_inputs; m++)
      if (c->node->inputs[m] == in) return m;
  }
  return -1;
}

bool op_input_known(const op_ctx *c, int i) {
  if (!op_has_input(c, i)) return false;
  int v = c->node->inputs[i];
  const ir_value *val = &c->g->values[v];
  if (val->is_const && val->const_data && is_int_dtype(val->dtype)) return true;
  return (c->known && c->known[v].ints) || c->host[v].ints;
}

/* Keeps, for a new signature entry, the shape-derived values this Run read on the host. */
static host_value *take_shape_derived(const plan *p, host_value *host) {
  host_value *kept = calloc((size_t)p->g->n_values + 1, sizeof *kept);
  if (!kept) return NULL;
  for (int v = 0; v < p->g->n_values; v++) {
    if (!p->shape_derived[v] || !host[v].ints) continue;
    kept[v] = host[v];
    host[v].ints = NULL;
  }
  return kept;
}

static int run_eager(plan *p, mlxb_scope *s, mlxb_array *const *in, const sig_entry *e, mlxb_array **results,
                     check_list *checks, host_value **derived_out, bool *data_read, diag *d) {
  run_state r;
  int rc = -1;
  if (run_state_init(&r, p, s)) {
    diag_fail(d, "out of memory");
    goto done;
  }
  for (int i = 0; i < p->g->n_inputs; i++) r.vals[p->g->inputs[i]] = in[i];
  if (lower_nodes(p, &r, e ? e->host : NULL, false, checks, d)) goto done;
  *data_read = r.data_read;
  for (int i = 0; i < p->g->n_outputs; i++) results[i] = r.vals[p->g->outputs[i]];
  if (checks->n > 0) results[p->g->n_outputs] = checks_summary(s, checks);
  if (derived_out) *derived_out = take_shape_derived(p, r.host);
  rc = 0;
done:
  run_state_free(&r);
  PLAN_STAT_ADD(p, eager_runs, 1);
  return rc;
}

/* The trace callback of compiled programs: lowers the cluster on MLX's placeholder inputs. */
static int trace_cluster_with(sig_entry *e, const int *alias, mlxb_scope *s, mlxb_array *const *inputs, int n_inputs,
                              mlxb_array **outputs, int n_outputs) {
  plan *p = e->owner;
  diag d;
  diag_init(&d);
  run_state r;
  check_list checks = {0};
  int rc = -1;
  if (run_state_init(&r, p, s)) {
    diag_fail(&d, "out of memory");
    goto done;
  }
  if (n_outputs != p->g->n_outputs + 1) {
    diag_fail(&d, "%s: a program has the cluster's outputs and its checks", p->name);
    goto done;
  }
  for (int i = 0; i < n_inputs && i < p->g->n_inputs; i++) r.vals[p->g->inputs[i]] = inputs[i];
  r.alias = alias;
  if (lower_nodes(p, &r, e->host, true, &checks, &d)) goto done;
  for (int i = 0; i < p->g->n_outputs; i++) outputs[i] = r.vals[p->g->outputs[i]];
  outputs[p->g->n_outputs] = checks_summary(s, &checks);
  pthread_mutex_lock(&p->lock);
  bool mismatch = e->checks_known && e->checks.n != checks.n; /* both programs answer to one rule list */
  pthread_mutex_unlock(&p->lock);
  if (mismatch) {
    diag_fail(&d, "%s: the in-place program's validity checks differ from the plain one's", p->name);
    goto done;
  }
  keep_trace_checks(p, &e->checks, &e->checks_known, &checks);
  count_trace(p, &p->stats.traces);
  rc = 0;
done:
  if (rc) {
    pthread_mutex_lock(&p->lock);
    e->trace_refused = d.trace_refusal;
    pthread_mutex_unlock(&p->lock);
    mlxb_set_error(s, d.msg);
  }
  check_list_free(&checks);
  run_state_free(&r);
  return rc;
}

static int trace_cluster(void *user, mlxb_scope *s, mlxb_array *const *inputs, int n_inputs, mlxb_array **outputs,
                         int n_outputs) {
  return trace_cluster_with(user, NULL, s, inputs, n_inputs, outputs, n_outputs);
}

static int trace_cluster_aliased(void *user, mlxb_scope *s, mlxb_array *const *inputs, int n_inputs,
                                 mlxb_array **outputs, int n_outputs) {
  sig_entry *e = user;
  return trace_cluster_with(e, e->alias_map, s, inputs, n_inputs, outputs, n_outputs);
}

/* Replays (tracing if needed) the entry's program; returns 1 when the cluster cannot be
 * compiled and the caller should run it eagerly, 0 on success, -1 on error. */
/* Marks e uncompilable (it runs eagerly from then on) and keeps why: on e, in the plan's first
 * failure (marked by design or unexpected) and in its trace_failures and unexpected_trace_failures
 * counts (the run report shows them). True when the failure is fatal (trace_failure_is_fatal):
 * the caller then fails the Run with *why. Called under p->lock. */
static bool trace_failed_locked(plan *p, sig_entry *e, const char *why) {
  if (e->uncompilable) return false; /* another thread's call failed first */
  e->uncompilable = true;
  why = why && *why ? why : "unknown error";
  e->trace_error = strdup(why);
  if (!p->first_trace_error[0])
    snprintf(p->first_trace_error, sizeof p->first_trace_error, "%s: %s", e->trace_refused ? "by design" : "unexpected",
             why);
  PLAN_STAT_ADD(p, trace_failures, 1);
  if (!e->trace_refused) PLAN_STAT_ADD(p, unexpected_trace_failures, 1);
  return trace_failure_is_fatal(e->trace_refused);
}

/* The entry's program for a Run whose outputs alias inputs (find_aliases), traced on first need
 * for the first aliasing seen; NULL for another aliasing or after a failed trace (the plain
 * program serves the Run then). Under p->lock. */
static mlxb_program *alias_program_locked(plan *p, sig_entry *e, const int *alias) {
  int n = p->g->n_outputs;
  if (e->alias_uncompilable || e->uncompilable) return NULL;
  if (!e->alias_map) {
    e->alias_map = malloc(sizeof *e->alias_map * (size_t)n);
    if (!e->alias_map) return NULL;
    memcpy(e->alias_map, alias, sizeof *alias * (size_t)n);
    char err[256] = "";
    e->alias_program = mlxb_compile(p->cfg.device, trace_cluster_aliased, e, n + 1, false, err, sizeof err);
    if (!e->alias_program) e->alias_uncompilable = true;
  }
  return memcmp(e->alias_map, alias, sizeof *alias * (size_t)n) ? NULL : e->alias_program;
}

static int run_compiled(plan *p, mlxb_scope *s, mlxb_array *const *in, sig_entry *e, out_binding *ob,
                        mlxb_array **results, check_list *checks, diag *d) {
  pthread_mutex_lock(&p->lock);
  mlxb_program *prog = out_binding_any_alias(ob) ? alias_program_locked(p, e, ob->alias) : NULL;
  ob->any_alias = prog != NULL;
  bool fatal = false;
  char err[1024] = "";
  if (!prog && !e->program && !e->uncompilable) {
    e->program = mlxb_compile(p->cfg.device, trace_cluster, e, p->g->n_outputs + 1, false, err, sizeof err);
    if (!e->program) fatal = trace_failed_locked(p, e, err);
  }
  if (!prog) prog = e->uncompilable ? NULL : e->program;
  pthread_mutex_unlock(&p->lock);
  if (fatal) return diag_fail(d, "%s: unexpected trace failure (a debug build fails on it): %s", p->name, err);
  if (!ob->any_alias) out_binding_drop_aliases(ob);
  if (!prog) return 1;
  if (mlxb_program_call(s, prog, in, p->g->n_inputs, results, p->g->n_outputs + 1)) {
    snprintf(err, sizeof err, "%s", mlxb_error(s));
    pthread_mutex_lock(&p->lock);
    if (ob->any_alias) /* the in-place program alone fails: the plain one serves from now on */
      e->alias_uncompilable = true;
    else /* e.g. a Reshape fed by data (by design): this cluster runs eagerly */
      fatal = trace_failed_locked(p, e, err);
    pthread_mutex_unlock(&p->lock);
    mlxb_clear_error(s);
    out_binding_drop_aliases(ob);
    if (fatal) return diag_fail(d, "%s: unexpected trace failure (a debug build fails on it): %s", p->name, err);
    return 1;
  }
  pthread_mutex_lock(&p->lock); /* a program call has traced it, here or on another thread */
  bool known = e->checks_known;
  pthread_mutex_unlock(&p->lock);
  if (!known) return diag_fail(d, "%s: the program's checks are unknown", p->name);
  *checks = e->checks; /* borrowed: immutable once known, and the Run holds a reference to e */
  PLAN_STAT_ADD(p, compiled_runs, 1);
  return 0;
}

/* Per-Run buffers: on the stack for clusters of usual size, so a Run that hits the signature
 * cache allocates nothing of its own beyond the MLX scope. */
enum { FRAME_IO = 96, FRAME_KEY = 1024 };

typedef struct run_frame {
  mlxb_array *in_stack[FRAME_IO], *out_stack[FRAME_IO];
  rt_tensor view_stack[FRAME_IO];
  int64_t dims_stack[FRAME_IO * BUCKET_MAX_RANK];
  int64_t key_stack[FRAME_KEY];
  mlxb_array **in, **results;
  rt_tensor *views;
  int64_t *view_dims;
  int64_t *key;
} run_frame;

static void *frame_buf(void *stack, size_t stack_bytes, size_t bytes) {
  if (bytes <= stack_bytes) {
    memset(stack, 0, bytes);
    return stack;
  }
  return calloc(1, bytes);
}

static void frame_release(run_frame *f) {
  if (f->in != f->in_stack) free(f->in);
  if (f->results != f->out_stack) free(f->results);
  if (f->views != f->view_stack) free(f->views);
  if (f->view_dims != f->dims_stack) free(f->view_dims);
  if (f->key != f->key_stack) free(f->key);
}

static int frame_init(run_frame *f, int n_inputs, int n_outputs, const rt_tensor *inputs, bool padded) {
  size_t ni = (size_t)n_inputs + 1, key_len = 1;
  for (int i = 0; i < n_inputs; i++) key_len += 2 + (size_t)inputs[i].rank;
  f->in = frame_buf(f->in_stack, sizeof f->in_stack, sizeof *f->in * ni);
  f->results = frame_buf(f->out_stack, sizeof f->out_stack, sizeof *f->results * ((size_t)n_outputs + 1));
  f->key = key_len <= FRAME_KEY ? f->key_stack : malloc(sizeof *f->key * key_len);
  if (!f->in || !f->results || !f->key) return -1;
  if (!padded) return 0;
  f->views = frame_buf(f->view_stack, sizeof f->view_stack, sizeof *f->views * ni);
  f->view_dims = frame_buf(f->dims_stack, sizeof f->dims_stack, sizeof *f->view_dims * ni * BUCKET_MAX_RANK);
  return f->views && f->view_dims ? 0 : -1;
}


static void stat_max(uint64_t *field, uint64_t v) {
  uint64_t cur = __atomic_load_n(field, __ATOMIC_RELAXED);
  while (v > cur && !__atomic_compare_exchange_n(field, &cur, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
}

/* Where the first Runs' time goes (run report): the plan's first Run, and Runs that traced. */
static void account_run_time(plan *p, uint64_t run_index, uint64_t traces_before, uint64_t start_us) {
  uint64_t took = now_us() - start_us;
  if (run_index == 1) PLAN_STAT_ADD(p, first_run_us, took);
  if (__atomic_load_n(&p->stats.traces, __ATOMIC_RELAXED) != traces_before) PLAN_STAT_ADD(p, trace_run_us, took);
}

int plan_execute(plan *p, const rt_tensor *inputs, int n_inputs, rt_output_alloc_fn alloc, void *user, diag *d) {
  uint64_t start_us = now_us(), traces_before = __atomic_load_n(&p->stats.traces, __ATOMIC_RELAXED);
  run_frame f; /* only the pointers are set here: the stacks are cleared as far as used */
  f.in = f.results = NULL;
  f.views = NULL;
  f.view_dims = f.key = NULL;
  int key_len = 0;
  uint64_t hash = 0;
  sig_entry *e = NULL;
  host_value *derived = NULL;
  check_list eager_checks = {0}, compiled_checks = {0}; /* the second borrows the entry's rules */
  out_binding ob; /* set up below: only its pointers matter until then */
  ob.dst = ob.dst_stack;
  ob.alias = ob.alias_stack;
  ob.shapes = ob.shapes_stack;
  int rc = -1;
  uint64_t run_index = PLAN_STAT_ADD(p, runs, 1);
  run_pad rp = {0};
  rp.pad = buckets_pad(p, inputs, n_inputs, &rp.v);
  int64_t pad = rp.pad;
  PLAN_STAT_ADD(p, padded_runs, pad > 0 ? 1 : 0);
  mlxb_exclusive_begin(p->cfg.device);
  mlxb_scope *s = mlxb_scope_new(p->cfg.device);
  if (!s || frame_init(&f, n_inputs, p->g->n_outputs, inputs, pad > 0)) {
    diag_fail(d, "out of memory");
    goto done;
  }
  if (pad > 0) buckets_padded_views(rp.v, inputs, n_inputs, pad, f.views, f.view_dims);
  /* the signature of the inputs as the MLX graph sees them */
  sig_key_make(pad > 0 ? f.views : inputs, n_inputs, f.key, &key_len, &hash);
  uint64_t phase = now_us();
  if (bind_inputs(p, s, inputs, n_inputs, &rp, f.in, d)) goto done;
  uint64_t bound = now_us();
  PLAN_STAT_ADD(p, bind_us, bound - phase);
  trace_sink_event(p->cfg.trace, "bind", p->name, pad > 0 ? "padded" : NULL, phase, bound - phase);
  phase = bound;
  e = sig_lookup(p, f.key, key_len, hash);
  if (out_binding_init(&ob, p->g->n_outputs, !e)) {
    diag_fail(d, "out of memory");
    goto done;
  }
  PLAN_STAT_ADD(p, sig_hits, e ? 1 : 0);
  PLAN_STAT_ADD(p, sig_misses, e ? 0 : 1);
  if (e && p->compile && find_aliases(p, e, inputs, n_inputs, &rp, &ob, alloc, user, d)) goto done;
  int compiled = e && p->compile ? run_compiled(p, s, f.in, e, &ob, f.results, &compiled_checks, d) : 1;
  if (compiled < 0) goto done;
  bool data_read = false;
  if (compiled > 0 && run_eager(p, s, f.in, e, f.results, &eager_checks, e ? NULL : &derived, &data_read, d))
    goto done;
  /* outputs whose shapes may follow the data are never asked of ORT before a Run (find_aliases) */
  if (data_read) out_binding_forget_shapes(&ob);
  /* the size of the graph about to run, sampled when a signature is new or was just traced */
  if (!e || __atomic_load_n(&p->stats.traces, __ATOMIC_RELAXED) != traces_before)
    stat_max(compiled > 0 ? &p->stats.eager_ops : &p->stats.program_ops,
             graph_size_sampled(p, f.results, compiled > 0));
  stat_max(&p->stats.checks, (uint64_t)(compiled > 0 ? eager_checks.n : compiled_checks.n));
  uint64_t built = now_us();
  PLAN_STAT_ADD(p, graph_us, built - phase);
  trace_sink_event(p->cfg.trace, "graph", p->name, compiled > 0 ? "lowered (eager)" : "compiled program", phase,
                   built - phase);
  if (write_outputs(p, s, f.results, compiled > 0 ? &eager_checks : &compiled_checks, &rp, &ob, alloc, user, d))
    goto done;
  if (!e && derived) {
    e = sig_insert(p, f.key, key_len, hash, derived, out_binding_take_shapes(&ob));
    derived = NULL;
  }
  rc = 0;
done:
  check_list_free(&eager_checks);
  sig_release(p, e);
  host_values_free(derived, p->g->n_values);
  out_binding_free(&ob);
  frame_release(&f);
  mlxb_scope_free(s);
  mlxb_exclusive_end(p->cfg.device);
  account_run_time(p, run_index, traces_before, start_us);
  trace_sink_event(p->cfg.trace, "Run", p->name, rc ? "failed" : NULL, start_us, now_us() - start_us);
  return rc;
}

/* ---- prepare (Compile) ---------------------------------------------------------------------
 * Each node whose row has a prepare gets an op_ctx like a lowering's in a scope of its own: the
 * frame's constants are its only arrays (a copy of the table, so nothing it sets reaches the
 * frame), no signature is known, and validity checks may not be recorded (there is no Run to
 * fail). What it keeps (op_prepare_keep) is evaluated into the plan's constants. */
int frame_prepare(plan *p, graph_frame *f, diag *d) {
  const ir_graph *g = f->g;
  bool any = false;
  for (int i = 0; i < g->n_nodes && !any; i++) any = f->defs[i]->prepare != NULL;
  if (!any) return 0;
  run_state r;
  check_list checks = {0};
  mlxb_scope *s = mlxb_scope_new(p->cfg.device);
  int rc = -1;
  if (!s || run_state_init_frame(&r, f, s)) {
    if (s) run_state_free(&r);
    mlxb_scope_free(s);
    return diag_fail(d, "out of memory");
  }
  op_ctx c = {.plan = p, .g = g, .f = f, .s = s, .run_s = s, .vals = r.vals, .host = r.host, .preparing = true,
              .checks = &checks, .d = d};
  bool on_gpu = p->cfg.device == MLXB_DEVICE_GPU;
  for (int i = 0; i < g->n_nodes; i++) {
    const op_def *def = f->defs[i];
    if (!def->prepare) continue;
    c.node = &g->nodes[i];
    if (on_gpu) mlxb_scope_force_cpu(s, node_touches_f64(g, c.node));
    int failed = def->prepare(&c, def, &f->prepared[i]) || !mlxb_ok(s);
    if (!failed && checks.n) failed = op_fail(&c, "prepare recorded a validity check");
    if (failed) {
      if (!d->failed) diag_fail(d, "%s", mlxb_error(s));
      diag_prefix(d, "node '%s' (%s): prepare: ", c.node->name, c.node->op_type);
      goto done;
    }
  }
  rc = 0;
done:
  check_list_free(&checks);
  run_state_free(&r);
  mlxb_scope_free(s);
  return rc;
}
