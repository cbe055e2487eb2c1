/* Plan creation: re-checks every claim, copies constants out of ORT's memory into MLX (and small
 * integer constants into the snapshot's arena for host reads), evaluates them once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/emulated.h"
#include "runtime/plan_internal.h"

static int upload_constant(plan *p, ir_graph *g, mlxb_array **const_arrays, int v, diag *d) {
  ir_value *val = &g->values[v];
  int t = op_mlx_dtype(val->dtype);
  bool emulated = ir_dtype_emulated_bits(val->dtype) != 0;
  int64_t count = ir_value_static_size(val);
  if (t < 0 && !emulated) {
    val->const_data = NULL; /* not a tensor MLX can hold (e.g. strings) */
    val->const_borrowed = false;
    return 0;
  }
  if (count < 0 || ir_dtype_storage_bytes(val->dtype, count) != val->const_bytes)
    return diag_fail(d, "constant '%s': %zu bytes do not match its shape", val->name, val->const_bytes);
  mlxb_array *a = emulated ? emulated_upload(p->consts, val->dtype, val->const_data, val->dims, val->rank)
                           : mlxb_from_data(p->consts, val->const_data, val->dims, val->rank, (mlxb_dtype)t);
  if (!a) return diag_fail(d, "constant '%s': %s", val->name, mlxb_error(p->consts));
  const_arrays[v] = a;
  bool keep_host = (val->dtype != ONNX_FLOAT && val->dtype != ONNX_FLOAT16 && val->dtype != ONNX_BFLOAT16)
                   ? count <= PLAN_HOST_CONST_MAX : count <= 64;
  if (keep_host) {
    val->const_data = val->const_bytes ? arena_memdup(g->mem, val->const_data, val->const_bytes)
                                       : arena_alloc(g->mem, 1); /* empty: data may be NULL */
    if (!val->const_data) return diag_fail(d, "out of memory");
  } else {
    val->const_data = NULL;
  }
  val->const_borrowed = false;
  return 0;
}

static int upload_constants(plan *p, ir_graph *g, mlxb_array **const_arrays, diag *d) {
  int n_consts = 0;
  for (int v = 0; v < g->n_values; v++) {
    if (!g->values[v].is_const || !g->values[v].const_borrowed || g->values[v].is_outer_scope) continue;
    if (upload_constant(p, g, const_arrays, v, d)) return -1;
    n_consts++;
  }
  if (!n_consts) return 0;
  mlxb_array **all = malloc(sizeof *all * (size_t)n_consts);
  if (!all) return diag_fail(d, "out of memory");
  int k = 0;
  for (int v = 0; v < g->n_values; v++)
    if (const_arrays[v] && !g->values[v].is_outer_scope) all[k++] = const_arrays[v];
  int rc = mlxb_eval(p->consts, all, (size_t)k);
  free(all);
  if (rc) return diag_fail(d, "evaluating constants: %s", mlxb_error(p->consts));
  return 0;
}

/* ---- control-flow bodies ---------------------------------------------------------------------
 * Every body of a claimed control-flow node gets a frame like the cluster's: its rows, constants
 * and prepared states. A body refers to values of the enclosing graph by name (ORT's outer scope); the
 * frame maps them to the enclosing graph's indices, and a constant there is a constant here. */

static void frame_free(graph_frame *f);

/* Hands every prepared state to its row's release (host memory only: arrays a prepare kept are
 * the plan's constants, freed with them). */
static void frame_release_prepared(graph_frame *f) {
  for (int i = 0; f->prepared && f->defs && i < f->g->n_nodes; i++)
    if (f->prepared[i] && f->defs[i] && f->defs[i]->release) f->defs[i]->release(f->prepared[i]);
  free(f->prepared);
  f->prepared = NULL;
}

static void frame_free_bodies(graph_frame *f) {
  for (int i = 0; f->bodies && i < f->g->n_nodes; i++) {
    for (int k = 0; f->bodies[i] && k < f->g->nodes[i].n_subgraphs; k++) {
      frame_free(f->bodies[i][k]);
      free(f->bodies[i][k]);
    }
    free(f->bodies[i]);
  }
  free(f->bodies);
  f->bodies = NULL;
}

static void frame_free(graph_frame *f) {
  if (!f) return;
  frame_free_bodies(f);
  for (body_program *bp = f->programs, *next; bp; bp = next) {
    next = bp->next;
    mlxb_program_free(bp->program);
    check_list_free(&bp->checks);
    free(bp->key);
    free(bp);
  }
  frame_release_prepared(f);
  free(f->defs);
  free(f->const_arrays);
  free(f->outer);
  free(f->why_not);
}

/* Links the body's outer-scope values to the enclosing graph's, sharing its constants. */
static int link_outer(graph_frame *f, const graph_frame *enclosing, diag *d) {
  ir_graph *g = f->g;
  for (int v = 0; v < g->n_values; v++) {
    ir_value *val = &g->values[v];
    f->outer[v] = -1;
    if (!val->is_outer_scope) continue;
    int pv = ir_graph_find_value(enclosing->g, val->name);
    if (pv < 0) return diag_fail(d, "body value '%s' refers to no value of the enclosing graph", val->name);
    const ir_value *src = &enclosing->g->values[pv];
    f->outer[v] = pv;
    val->dtype = src->dtype;
    val->is_sequence = src->is_sequence;
    val->elem_dtype = src->elem_dtype;
    val->is_const = src->is_const;
    val->const_data = src->const_data; /* the enclosing graph's host copy (or NULL), never borrowed */
    val->const_bytes = src->const_bytes;
    val->const_borrowed = false;
    f->const_arrays[v] = enclosing->const_arrays[pv];
  }
  return 0;
}

/* The row of every body node; a body some node of which is not claimed (the untaken branch of a
 * constant If) keeps defs NULL and the reason. */
static int claim_frame(graph_frame *f, mlxb_device dev) {
  const ir_graph *g = f->g;
  f->defs = calloc((size_t)g->n_nodes + 1, sizeof *f->defs);
  if (!f->defs) return -1;
  for (int i = 0; i < g->n_nodes; i++) {
    claim_ctx c = {.graph = g, .node = &g->nodes[i], .device = dev};
    if ((f->defs[i] = op_registry_claim(&c))) continue;
    char why[512];
    snprintf(why, sizeof why, "node '%s' (%s): %s", g->nodes[i].name, g->nodes[i].op_type, c.reason);
    free(f->defs);
    f->defs = NULL;
    f->why_not = strdup(why);
    return f->why_not ? 0 : -1;
  }
  return 0;
}

static int frame_build_bodies(plan *p, graph_frame *f, diag *d);

static int frame_build_body(plan *p, graph_frame *f, ir_graph *g, const graph_frame *enclosing, diag *d) {
  f->g = g;
  f->const_arrays = calloc((size_t)g->n_values + 1, sizeof *f->const_arrays);
  f->outer = calloc((size_t)g->n_values + 1, sizeof *f->outer);
  f->prepared = calloc((size_t)g->n_nodes + 1, sizeof *f->prepared);
  if (!f->const_arrays || !f->outer || !f->prepared || claim_frame(f, p->cfg.device))
    return diag_fail(d, "out of memory");
  if (link_outer(f, enclosing, d) || upload_constants(p, g, f->const_arrays, d)) return -1;
  return f->defs ? frame_build_bodies(p, f, d) || frame_prepare(p, f, d) : 0;
}

/* Frames for the bodies of f's control-flow nodes (recursively). */
static int frame_build_bodies(plan *p, graph_frame *f, diag *d) {
  const ir_graph *g = f->g;
  f->bodies = calloc((size_t)g->n_nodes + 1, sizeof *f->bodies);
  if (!f->bodies) return diag_fail(d, "out of memory");
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = &g->nodes[i];
    if (!n->n_subgraphs) continue;
    f->bodies[i] = calloc((size_t)n->n_subgraphs, sizeof *f->bodies[i]);
    if (!f->bodies[i]) return diag_fail(d, "out of memory");
    for (int k = 0; k < n->n_subgraphs; k++) {
      if (!(f->bodies[i][k] = calloc(1, sizeof *f->bodies[i][k]))) return diag_fail(d, "out of memory");
      if (frame_build_body(p, f->bodies[i][k], n->subgraphs[k], f, d)) {
        diag_prefix(d, "node '%s' (%s) body '%s': ", n->name, n->op_type, n->subgraph_attrs[k]);
        return -1;
      }
    }
  }
  return 0;
}

static int check_claims(plan *p, diag *d) {
  const ir_graph *g = p->g;
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = &g->nodes[i];
    claim_ctx c = {.graph = g, .node = n, .device = p->cfg.device};
    const op_def *def = op_registry_claim(&c);
    if (!def)
      return diag_fail(d, "node '%s' (%s): claim no longer holds at Compile: %s", n->name, n->op_type, c.reason);
    p->defs[i] = def;
  }
  return 0;
}

/* A value is shape-derived when input shapes and constants alone determine it: outputs of rows
 * flagged OP_FLAG_SHAPE_ONLY, constants, and anything computed deterministically from such values. */
static void mark_shape_derived(plan *p) {
  const ir_graph *g = p->g;
  for (int v = 0; v < g->n_values; v++) p->shape_derived[v] = g->values[v].is_const;
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = &g->nodes[i];
    unsigned flags = p->defs[i]->flags;
    bool derived = (flags & OP_FLAG_SHAPE_ONLY) != 0;
    if (!derived && !n->n_subgraphs) { /* bodies are not followed: control flow is never derived */
      derived = n->n_implicit_inputs == 0 && !(flags & OP_FLAG_RANDOM);
      for (int k = 0; k < n->n_inputs && derived; k++)
        derived = n->inputs[k] < 0 || p->shape_derived[n->inputs[k]];
    }
    for (int k = 0; k < n->n_outputs; k++)
      if (n->outputs[k] >= 0) p->shape_derived[n->outputs[k]] = derived;
  }
}

int plan_create(ir_graph *g, const plan_config *cfg, const char *name, plan **out, diag *d) {
  mlxb_device dev = cfg->device;
  *out = NULL;
  plan *p = calloc(1, sizeof *p);
  if (!p) {
    ir_graph_free(g);
    return diag_fail(d, "out of memory");
  }
  p->g = g;
  p->cfg = *cfg;
  if (p->cfg.cache_size < 1) p->cfg.cache_size = 1;
  p->compile = cfg->compile != PLAN_COMPILE_OFF; /* AUTO: on, on every device (plan.h) */
  pthread_mutex_init(&p->lock, NULL);
  p->name = malloc(strlen(name ? name : "") + 1);
  p->defs = calloc((size_t)g->n_nodes + 1, sizeof *p->defs);
  p->const_arrays = calloc((size_t)g->n_values + 1, sizeof *p->const_arrays);
  p->shape_derived = calloc((size_t)g->n_values + 1, sizeof *p->shape_derived);
  p->top.prepared = calloc((size_t)g->n_nodes + 1, sizeof *p->top.prepared);
  p->consts = mlxb_scope_new(dev);
  if (!p->name || !p->defs || !p->const_arrays || !p->shape_derived || !p->top.prepared || !p->consts) {
    plan_free(p);
    return diag_fail(d, "out of memory");
  }
  strcpy(p->name, name ? name : "");
  mlxb_exclusive_begin(dev);
  p->top.g = g, p->top.defs = p->defs, p->top.const_arrays = p->const_arrays;
  bool failed = check_claims(p, d) || upload_constants(p, g, p->const_arrays, d) ||
                frame_build_bodies(p, &p->top, d) || frame_prepare(p, &p->top, d);
  if (!failed && dev == MLXB_DEVICE_GPU) mlxb_prefer_device_constants(p->consts);
  mlxb_exclusive_end(dev);
  if (failed) {
    plan_free(p);
    return -1;
  }
  mark_shape_derived(p);
  if (buckets_analyse(p, d)) {
    plan_free(p);
    return -1;
  }
  *out = p;
  return 0;
}

void plan_free(plan *p) {
  if (!p) return;
  mlxb_exclusive_begin(p->cfg.device); /* releases device memory MLX may be using */
  sig_cache_clear(p);
  frame_free_bodies(&p->top); /* with their compiled programs; the rest of top is the plan's own fields, freed below */
  mlxb_scope_free(p->consts);
  mlxb_exclusive_end(p->cfg.device);
  pthread_mutex_destroy(&p->lock);
  buckets_free(&p->buckets);
  frame_release_prepared(&p->top);
  free(p->shape_derived);
  free(p->const_arrays);
  free(p->defs);
  free(p->name);
  ir_graph_free(p->g);
  free(p);
}

int plan_num_inputs(const plan *p) { return p->g->n_inputs; }
int plan_num_outputs(const plan *p) { return p->g->n_outputs; }
const char *plan_name(const plan *p) { return p->name; }
int plan_num_nodes(const plan *p) { return p->g->n_nodes; }

void plan_get_stats(const plan *p, plan_stats *out) {
  out->runs = __atomic_load_n(&p->stats.runs, __ATOMIC_RELAXED);
  out->sig_hits = __atomic_load_n(&p->stats.sig_hits, __ATOMIC_RELAXED);
  out->sig_misses = __atomic_load_n(&p->stats.sig_misses, __ATOMIC_RELAXED);
  out->evictions = __atomic_load_n(&p->stats.evictions, __ATOMIC_RELAXED);
  out->traces = __atomic_load_n(&p->stats.traces, __ATOMIC_RELAXED);
  out->fusion_traces = __atomic_load_n(&p->stats.fusion_traces, __ATOMIC_RELAXED);
  out->trace_failures = __atomic_load_n(&p->stats.trace_failures, __ATOMIC_RELAXED);
  out->unexpected_trace_failures = __atomic_load_n(&p->stats.unexpected_trace_failures, __ATOMIC_RELAXED);
  out->compiled_runs = __atomic_load_n(&p->stats.compiled_runs, __ATOMIC_RELAXED);
  out->eager_runs = __atomic_load_n(&p->stats.eager_runs, __ATOMIC_RELAXED);
  out->host_reads = __atomic_load_n(&p->stats.host_reads, __ATOMIC_RELAXED);
  out->padded_runs = __atomic_load_n(&p->stats.padded_runs, __ATOMIC_RELAXED);
  out->device_inputs = __atomic_load_n(&p->stats.device_inputs, __ATOMIC_RELAXED);
  out->host_inputs = __atomic_load_n(&p->stats.host_inputs, __ATOMIC_RELAXED);
  out->device_outputs = __atomic_load_n(&p->stats.device_outputs, __ATOMIC_RELAXED);
  out->inplace_outputs = __atomic_load_n(&p->stats.inplace_outputs, __ATOMIC_RELAXED);
  out->program_copies = __atomic_load_n(&p->stats.program_copies, __ATOMIC_RELAXED);
  out->computed_ahead = __atomic_load_n(&p->stats.computed_ahead, __ATOMIC_RELAXED);
  out->checks = __atomic_load_n(&p->stats.checks, __ATOMIC_RELAXED);
  out->host_outputs = __atomic_load_n(&p->stats.host_outputs, __ATOMIC_RELAXED);
  out->first_run_us = __atomic_load_n(&p->stats.first_run_us, __ATOMIC_RELAXED);
  out->trace_run_us = __atomic_load_n(&p->stats.trace_run_us, __ATOMIC_RELAXED);
  out->bind_us = __atomic_load_n(&p->stats.bind_us, __ATOMIC_RELAXED);
  out->graph_us = __atomic_load_n(&p->stats.graph_us, __ATOMIC_RELAXED);
  out->eval_us = __atomic_load_n(&p->stats.eval_us, __ATOMIC_RELAXED);
  out->copy_us = __atomic_load_n(&p->stats.copy_us, __ATOMIC_RELAXED);
  out->eager_ops = __atomic_load_n(&p->stats.eager_ops, __ATOMIC_RELAXED);
  out->program_ops = __atomic_load_n(&p->stats.program_ops, __ATOMIC_RELAXED);
  out->body_traces = __atomic_load_n(&p->stats.body_traces, __ATOMIC_RELAXED);
  out->body_replays = __atomic_load_n(&p->stats.body_replays, __ATOMIC_RELAXED);
  out->body_trace_failures = __atomic_load_n(&p->stats.body_trace_failures, __ATOMIC_RELAXED);
}

void plan_first_trace_failure(plan *p, char *buf, size_t len) {
  if (!len) return;
  pthread_mutex_lock(&p->lock);
  snprintf(buf, len, "%s", p->first_trace_error);
  pthread_mutex_unlock(&p->lock);
}
