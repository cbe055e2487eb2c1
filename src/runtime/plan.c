/* Plan creation: re-checks every claim, copies constants out of ORT's memory into MLX (and small
 * integer constants into the snapshot's arena for host reads), evaluates them once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/emulated.h"
#include "runtime/plan_internal.h"

static int upload_constant(plan *p, int v, diag *d) {
  ir_value *val = &p->g->values[v];
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
  p->const_arrays[v] = a;
  bool keep_host = (val->dtype != ONNX_FLOAT && val->dtype != ONNX_FLOAT16 && val->dtype != ONNX_BFLOAT16)
                   ? count <= PLAN_HOST_CONST_MAX : count <= 64;
  if (keep_host) {
    val->const_data = val->const_bytes ? arena_memdup(p->g->mem, val->const_data, val->const_bytes)
                                       : arena_alloc(p->g->mem, 1); /* empty: data may be NULL */
    if (!val->const_data) return diag_fail(d, "out of memory");
  } else {
    val->const_data = NULL;
  }
  val->const_borrowed = false;
  return 0;
}

static int upload_constants(plan *p, diag *d) {
  ir_graph *g = p->g;
  int n_consts = 0;
  for (int v = 0; v < g->n_values; v++) {
    if (!g->values[v].is_const || !g->values[v].const_borrowed) continue;
    if (upload_constant(p, v, d)) return -1;
    n_consts++;
  }
  if (!n_consts) return 0;
  mlxb_array **all = malloc(sizeof *all * (size_t)n_consts);
  if (!all) return diag_fail(d, "out of memory");
  int k = 0;
  for (int v = 0; v < g->n_values; v++)
    if (p->const_arrays[v]) all[k++] = p->const_arrays[v];
  int rc = mlxb_eval(p->consts, all, (size_t)k);
  free(all);
  if (rc) return diag_fail(d, "evaluating constants: %s", mlxb_error(p->consts));
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
    if (!derived) {
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
  p->memo = calloc((size_t)g->n_nodes * OP_CONST_MEMO_SLOTS + 1, sizeof *p->memo);
  p->consts = mlxb_scope_new(dev);
  if (!p->name || !p->defs || !p->const_arrays || !p->shape_derived || !p->memo || !p->consts) {
    plan_free(p);
    return diag_fail(d, "out of memory");
  }
  strcpy(p->name, name ? name : "");
  mlxb_exclusive_begin(dev);
  int rc = check_claims(p, d) || upload_constants(p, d) ? -1 : 0;
  mlxb_exclusive_end(dev);
  if (rc) {
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
  mlxb_scope_free(p->consts);
  mlxb_exclusive_end(p->cfg.device);
  pthread_mutex_destroy(&p->lock);
  buckets_free(&p->buckets);
  free(p->shape_derived);
  free(p->memo);
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
  out->trace_failures = __atomic_load_n(&p->stats.trace_failures, __ATOMIC_RELAXED);
  out->compiled_runs = __atomic_load_n(&p->stats.compiled_runs, __ATOMIC_RELAXED);
  out->eager_runs = __atomic_load_n(&p->stats.eager_runs, __ATOMIC_RELAXED);
  out->host_reads = __atomic_load_n(&p->stats.host_reads, __ATOMIC_RELAXED);
  out->padded_runs = __atomic_load_n(&p->stats.padded_runs, __ATOMIC_RELAXED);
  out->device_inputs = __atomic_load_n(&p->stats.device_inputs, __ATOMIC_RELAXED);
  out->host_inputs = __atomic_load_n(&p->stats.host_inputs, __ATOMIC_RELAXED);
  out->device_outputs = __atomic_load_n(&p->stats.device_outputs, __ATOMIC_RELAXED);
  out->host_outputs = __atomic_load_n(&p->stats.host_outputs, __ATOMIC_RELAXED);
  out->first_run_us = __atomic_load_n(&p->stats.first_run_us, __ATOMIC_RELAXED);
  out->trace_run_us = __atomic_load_n(&p->stats.trace_run_us, __ATOMIC_RELAXED);
  out->bind_us = __atomic_load_n(&p->stats.bind_us, __ATOMIC_RELAXED);
  out->graph_us = __atomic_load_n(&p->stats.graph_us, __ATOMIC_RELAXED);
  out->eval_us = __atomic_load_n(&p->stats.eval_us, __ATOMIC_RELAXED);
  out->copy_us = __atomic_load_n(&p->stats.copy_us, __ATOMIC_RELAXED);
  out->eager_ops = __atomic_load_n(&p->stats.eager_ops, __ATOMIC_RELAXED);
  out->program_ops = __atomic_load_n(&p->stats.program_ops, __ATOMIC_RELAXED);
}

void plan_first_trace_failure(plan *p, char *buf, size_t len) {
  if (!len) return;
  pthread_mutex_lock(&p->lock);
  snprintf(buf, len, "%s", p->first_trace_error);
  pthread_mutex_unlock(&p->lock);
}
