/* The op_ctx interface lowerings use (src/ops/op.h): their inputs and outputs in the Run, host
 * integers, sequences, validity checks (op_require) and failures. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/run_internal.h"

/* ---- op_ctx: the interface of op lowerings ------------------------------------------------- */

mlxb_scope *op_scope(op_ctx *c) { return c->s; }
const ir_node *op_node(const op_ctx *c) { return c->node; }
const ir_graph *op_graph(const op_ctx *c) { return c->g; }
int op_num_inputs(const op_ctx *c) { return c->node->n_inputs; }
int op_num_outputs(const op_ctx *c) { return c->node->n_outputs; }

bool op_has_input(const op_ctx *c, int i) {
  return i >= 0 && i < c->node->n_inputs && c->node->inputs[i] >= 0;
}

bool op_has_output(const op_ctx *c, int i) {
  if (i < 0 || i >= c->node->n_outputs || c->node->outputs[i] < 0) return false;
  const ir_value *v = &c->g->values[c->node->outputs[i]];
  return v->n_consumers > 0 || v->is_graph_output;
}

mlxb_array *op_input(op_ctx *c, int i) {
  if (!op_has_input(c, i)) return NULL;
  return c->vals[c->node->inputs[i]];
}

int32_t op_input_dtype(const op_ctx *c, int i) {
  return op_has_input(c, i) ? c->g->values[c->node->inputs[i]].dtype : ONNX_UNDEFINED;
}

int32_t op_output_dtype(const op_ctx *c, int i) {
  if (i < 0 || i >= c->node->n_outputs || c->node->outputs[i] < 0) return ONNX_UNDEFINED;
  return c->g->values[c->node->outputs[i]].dtype;
}

const void *op_prepared(const op_ctx *c) {
  return c->f->prepared ? c->f->prepared[c->node - c->g->nodes] : NULL;
}

const void *op_prepared_of(const op_ctx *c, const ir_node *n) {
  if (!c->f->prepared || n < c->g->nodes || n >= c->g->nodes + c->g->n_nodes) return NULL;
  return c->f->prepared[n - c->g->nodes];
}

const op_def *op_def_of(const op_ctx *c, const ir_node *n) {
  if (!c->f->defs || n < c->g->nodes || n >= c->g->nodes + c->g->n_nodes) return NULL;
  return c->f->defs[n - c->g->nodes];
}

mlxb_array *op_const_value(const op_ctx *c, int v) {
  return v >= 0 && v < c->g->n_values ? c->f->const_arrays[v] : NULL;
}

bool op_can_compute_for(const op_ctx *c) { return c->ahead != NULL; }

int op_compute_for(op_ctx *c, const ir_node *n, mlxb_array *a) {
  if (!c->ahead) return op_fail(c, "op_compute_for outside a cluster's own lowering");
  if (!a) return op_check(c);
  if (n <= c->node || n >= c->g->nodes + c->g->n_nodes || n->n_outputs != 1)
    return op_fail(c, "op_compute_for: node '%s' is not a later single-output node of this graph", n->name);
  c->ahead[n - c->g->nodes] = a;
  PLAN_STAT_ADD(c->plan, computed_ahead, 1);
  return 0;
}

mlxb_array *op_prepare_keep(op_ctx *c, mlxb_array *a) {
  if (!c->preparing) return op_fail(c, "op_prepare_keep outside prepare"), NULL;
  mlxb_array *kept = mlxb_contiguous(c->s, a);
  if (!kept || mlxb_eval(c->s, &kept, 1)) return op_check(c), NULL;
  kept = mlxb_ref(c->plan->consts, kept);
  if (!kept) op_fail(c, "%s", mlxb_error(c->plan->consts));
  return kept;
}

bool op_inputs_const(const op_ctx *c, const int *inputs, int n) {
  for (int k = 0; k < n; k++) {
    int i = inputs[k];
    if (!op_has_input(c, i)) continue;
    if (!c->f->const_arrays[c->node->inputs[i]]) return false;
  }
  return true;
}

int op_fail(op_ctx *c, const char *fmt, ...) {
  if (!mlxb_ok(c->s)) return op_check(c); /* a bridge call failed first: that is the cause */
  va_list ap;
  va_start(ap, fmt);
  diag_vfail(c->d, fmt, ap);
  va_end(ap);
  return -1;
}

int op_trace_refuse(op_ctx *c, const char *fmt, ...) {
  if (!mlxb_ok(c->s)) return op_check(c); /* a bridge call failed first: that is the cause */
  if (c->d->failed) return -1;            /* so did something else: the refusal is not the cause */
  va_list ap;
  va_start(ap, fmt);
  diag_vfail(c->d, fmt, ap);
  va_end(ap);
  c->d->trace_refusal = true;
  return -1;
}

int op_check(op_ctx *c) {
  if (mlxb_ok(c->s)) return 0;
  return diag_fail(c->d, "%s", mlxb_error(c->s));
}

/* ---- validity checks (op_require) ----------------------------------------------------------
 * A check is a bool array computed in the graph; each becomes an int64 pair (violated?, first bad
 * value) and all pairs of a Run form ONE extra array, evaluated in the same eval as the outputs
 * (and an extra output of a compiled program). Only when a flag is set is the rule's message, kept
 * per Run or per compiled signature, formatted into the Run's error. */

void check_list_keep_rules(check_list *l) {
  for (int i = 0; l->keys && i < l->n; i++) free(l->keys[i]);
  free(l->keys);
  free(l->flags);
  l->keys = NULL;
  l->flags = NULL;
}

void check_list_free(check_list *l) {
  check_list_keep_rules(l);
  for (int i = 0; i < l->n; i++) free(l->rules[i]);
  free(l->rules);
  memset(l, 0, sizeof *l);
}

static int check_list_push_keyed(check_list *l, mlxb_array *flag, char *rule, char *key) {
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 8;
    char **r = realloc(l->rules, sizeof *r * (size_t)cap);
    if (r) l->rules = r;
    mlxb_array **f = realloc(l->flags, sizeof *f * (size_t)cap);
    if (f) l->flags = f;
    char **k = realloc(l->keys, sizeof *k * (size_t)cap);
    if (k) l->keys = k;
    if (!r || !f || !k) return -1;
    l->cap = cap;
  }
  l->rules[l->n] = rule;
  l->keys[l->n] = key;
  l->flags[l->n++] = flag;
  return 0;
}

int check_list_push(check_list *l, mlxb_array *flag, char *rule) { return check_list_push_keyed(l, flag, rule, NULL); }

static bool check_list_has(const check_list *l, const char *key) {
  for (int i = 0; l->keys && i < l->n; i++)
    if (l->keys[i] && !strcmp(l->keys[i], key)) return true;
  return false;
}

/* Keeps a check's summary (mlxb_violation's int64 pair) with its rule. */
static int keep_check(op_ctx *c, const char *key, mlxb_array *flag, const char *rule_fmt, va_list ap) {
  if (!flag) return op_check(c);
  char rule[512];
  int head = snprintf(rule, sizeof rule, "node '%s' (%s): ", c->node->name, c->node->op_type);
  if (head > 0 && (size_t)head < sizeof rule) vsnprintf(rule + head, sizeof rule - (size_t)head, rule_fmt, ap);
  char *kept = strdup(rule), *kept_key = key ? strdup(key) : NULL;
  if (!kept || (key && !kept_key) || check_list_push_keyed(c->checks, flag, kept, kept_key)) {
    free(kept);
    free(kept_key);
    return op_fail(c, "out of memory");
  }
  return 0;
}

static int require_keyed(op_ctx *c, const char *key, mlxb_array *ok, mlxb_array *bad_value, const char *rule_fmt,
                         va_list ap) {
  return keep_check(c, key, mlxb_violation(c->s, ok, bad_value), rule_fmt, ap);
}

int op_require_summary(op_ctx *c, const char *key, mlxb_array *summary, const char *rule_fmt, ...) {
  if (key && op_require_seen(c, key)) return 0;
  va_list ap;
  va_start(ap, rule_fmt);
  int rc = keep_check(c, key && !c->outer ? key : NULL, summary, rule_fmt, ap);
  va_end(ap);
  return rc;
}

int op_require(op_ctx *c, mlxb_array *ok, mlxb_array *bad_value, const char *rule_fmt, ...) {
  va_list ap;
  va_start(ap, rule_fmt);
  int rc = require_keyed(c, NULL, ok, bad_value, rule_fmt, ap);
  va_end(ap);
  return rc;
}

/* Inside a body a check may count only where a branch is taken (op_lower_body's `when`), so
 * bodies never share theirs: a skipped unconditional check would be lost. */
bool op_require_seen(const op_ctx *c, const char *key) { return !c->outer && check_list_has(c->checks, key); }

int op_require_once(op_ctx *c, const char *key, mlxb_array *ok, mlxb_array *bad_value, const char *rule_fmt, ...) {
  if (op_require_seen(c, key)) return 0;
  va_list ap;
  va_start(ap, rule_fmt);
  int rc = require_keyed(c, c->outer ? NULL : key, ok, bad_value, rule_fmt, ap);
  va_end(ap);
  return rc;
}

/* The Run's checks as one int64 [2n] array; a placeholder [0] when there are none. */
mlxb_array *checks_summary(mlxb_scope *s, const check_list *l) {
  if (l->n == 0) return mlxb_zeros(s, (const int64_t[]){0}, 1, MLXB_I64);
  if (l->n == 1) return l->flags[0];
  return mlxb_concat(s, (const mlxb_array *const *)l->flags, l->n, 0);
}

/* Fails the Run with the first violated rule, its "{}" replaced by the offending value. */
int checks_verdict(const plan *p, mlxb_scope *s, mlxb_array *summary, const check_list *l, diag *d) {
  int64_t stack_vals[32], *vals = stack_vals;
  size_t n = 2 * (size_t)l->n;
  if (mlxb_size(summary) != n) return diag_fail(d, "%s: %zu check values for %d checks", p->name, mlxb_size(summary), l->n);
  if (n > 32 && !(vals = malloc(sizeof *vals * n))) return diag_fail(d, "out of memory");
  int rc = mlxb_read_i64(s, summary, vals, n) ? diag_fail(d, "%s: %s", p->name, mlxb_error(s)) : 0;
  for (int i = 0; rc == 0 && i < l->n; i++) {
    if (!vals[2 * i]) continue;
    const char *rule = l->rules[i], *at = strstr(rule, "{}");
    if (at)
      rc = diag_fail(d, "%.*s%lld%s", (int)(at - rule), rule, (long long)vals[2 * i + 1], at + 2);
    else
      rc = diag_fail(d, "%s", rule);
  }
  if (vals != stack_vals) free(vals);
  return rc;
}

bool is_int_dtype(int32_t t) {
  return t == ONNX_INT8 || t == ONNX_INT16 || t == ONNX_INT32 || t == ONNX_INT64 || t == ONNX_UINT8 ||
         t == ONNX_UINT16 || t == ONNX_UINT32 || t == ONNX_UINT64 || t == ONNX_BOOL;
}

static int const_host_ints(const ir_value *v, int64_t *out, int max) {
  size_t esz = ir_dtype_size(v->dtype);
  size_t n = esz ? v->const_bytes / esz : 0;
  if (n > (size_t)max) return -1;
  for (size_t k = 0; k < n; k++) {
    const void *p = (const char *)v->const_data + k * esz;
    switch (v->dtype) {
      case ONNX_INT64: out[k] = *(const int64_t *)p; break;
      case ONNX_INT32: out[k] = *(const int32_t *)p; break;
      case ONNX_INT16: out[k] = *(const int16_t *)p; break;
      case ONNX_INT8: out[k] = *(const int8_t *)p; break;
      case ONNX_UINT64: out[k] = (int64_t)*(const uint64_t *)p; break;
      case ONNX_UINT32: out[k] = *(const uint32_t *)p; break;
      case ONNX_UINT16: out[k] = *(const uint16_t *)p; break;
      case ONNX_UINT8: case ONNX_BOOL: out[k] = *(const uint8_t *)p; break;
      default: return -1;
    }
  }
  return (int)n;
}

int op_input_ints(op_ctx *c, int i, int64_t *out, int max) {
  if (!op_has_input(c, i)) return op_fail(c, "input %d is absent", i);
  int v = c->node->inputs[i];
  const ir_value *val = &c->g->values[v];
  if (val->is_const && val->const_data && is_int_dtype(val->dtype)) {
    int n = const_host_ints(val, out, max);
    return n >= 0 ? n : op_fail(c, "input %d has more than %d values", i, max);
  }
  if (c->known && c->known[v].ints) {
    const host_value *k = &c->known[v];
    if (k->n > max) return op_fail(c, "input %d has %d values (at most %d)", i, k->n, max);
    memcpy(out, k->ints, sizeof(int64_t) * (size_t)k->n);
    return k->n;
  }
  host_value *h = &c->host[v];
  if (!h->ints) {
    if (c->tracing) return op_trace_refuse(c, "input %d is read on the host but depends on data", i);
    op_note_host_read(c, v);
    mlxb_array *a = c->vals[v];
    if (!a) return op_fail(c, "input %d has no value", i);
    size_t n = mlxb_size(a);
    if (n > (size_t)max) return op_fail(c, "input %d has %zu values (at most %d)", i, n, max);
    h->ints = malloc(sizeof(int64_t) * (n ? n : 1));
    if (!h->ints) return op_fail(c, "out of memory");
    if (mlxb_read_i64(c->s, a, h->ints, n)) {
      free(h->ints);
      h->ints = NULL;
      return op_check(c);
    }
    h->n = (int)n;
  }
  if (h->n > max) return op_fail(c, "input %d has %d values (at most %d)", i, h->n, max);
  memcpy(out, h->ints, sizeof(int64_t) * (size_t)h->n);
  return h->n;
}

int op_input_doubles(op_ctx *c, int i, double *out, int max) {
  mlxb_array *a = op_input(c, i);
  if (!a) return op_fail(c, "input %d is absent", i);
  if (c->tracing) return op_trace_refuse(c, "input %d is read on the host inside a trace", i);
  op_note_host_read(c, c->node->inputs[i]);
  size_t n = mlxb_size(a);
  if (n > (size_t)max) return op_fail(c, "input %d has %zu values (at most %d)", i, n, max);
  if (mlxb_read_f64(c->s, a, out, n)) return op_check(c);
  return (int)n;
}

/* Sizes computed from data (Expand, Tile, ConstantOfShape, Range, Resize...) are refused before
 * anything is allocated when they overflow or pass MLX's memory limit. */
static int check_output_size(op_ctx *c, int i, const mlxb_array *a) {
  size_t bytes = mlxb_dtype_size(mlxb_type(a)), limit = mlxb_memory_limit();
  int rank = mlxb_ndim(a);
  for (int k = 0; k < rank; k++) {
    int64_t dim = mlxb_dim(a, k);
    if (dim == 0) return 0;
    if (dim < 0 || __builtin_mul_overflow(bytes, (size_t)dim, &bytes)) bytes = SIZE_MAX;
  }
  if (limit && bytes > limit)
    return op_fail(c, "output %d needs %zu bytes, more than the memory limit (%zu bytes)", i, bytes, limit);
  return 0;
}

int op_set_output(op_ctx *c, int i, mlxb_array *a) {
  if (!a) return op_check(c) ? -1 : op_fail(c, "output %d: no array", i);
  if (check_output_size(c, i, a)) return -1;
  if (i < 0 || i >= c->node->n_outputs) return op_fail(c, "output %d out of range", i);
  int v = c->node->outputs[i];
  if (v < 0) return 0; /* optional output not wired */
  int32_t want = c->g->values[v].dtype, got = op_onnx_dtype(mlxb_type(a));
  if (ir_dtype_emulated_bits(want) && got != ONNX_UINT8)
    return op_fail(c, "output %d: %s values must be uint8 codes, lowering produced %s", i, ir_dtype_name(want),
                   ir_dtype_name(got));
  if (want != ONNX_UNDEFINED && op_mlx_dtype(want) >= 0 && got != want)
    return op_fail(c, "output %d: lowering produced %s, graph declares %s", i, ir_dtype_name(got), ir_dtype_name(want));
  c->vals[v] = a;
  return 0;
}

/* The array of n host integers in dtype t: int32 written as int32 (a constant of the graph, where an
 * int64 constant and a cast would put one operation more into every Run of a compiled program). */
static mlxb_array *host_ints_array(mlxb_scope *s, const int64_t *vals, int n, const int64_t *dims, int rank, int t) {
  enum { STACK = 64 };
  if (t != MLXB_I32 || n > STACK) {
    mlxb_array *a = mlxb_from_data(s, n > 0 ? vals : NULL, dims, rank, MLXB_I64);
    return a && t != MLXB_I64 ? mlxb_astype(s, a, (mlxb_dtype)t) : a;
  }
  int32_t narrow[STACK];
  for (int k = 0; k < n; k++) narrow[k] = (int32_t)(uint32_t)(uint64_t)vals[k]; /* the low 32 bits */
  return mlxb_from_data(s, n > 0 ? narrow : NULL, dims, rank, MLXB_I32);
}

int op_set_output_ints(op_ctx *c, int i, const int64_t *vals, int n, const int64_t *dims, int rank, int32_t dtype) {
  int t = op_mlx_dtype(dtype);
  if (t < 0) return op_fail(c, "output %d: dtype %s", i, ir_dtype_name(dtype));
  mlxb_array *a = host_ints_array(c->s, vals, n, dims, rank, t);
  if (op_set_output(c, i, a)) return -1;
  int v = c->node->outputs[i];
  if (v < 0 || n < 0) return 0;
  host_value *h = &c->host[v];
  free(h->ints);
  h->ints = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
  if (!h->ints) return op_fail(c, "out of memory");
  if (n) memcpy(h->ints, vals, sizeof(int64_t) * (size_t)n);
  h->n = n;
  return 0;
}

int op_input_seq(op_ctx *c, int i, mlxb_array *const **items) {
  *items = NULL;
  if (!op_has_input(c, i)) return op_fail(c, "input %d is absent", i);
  const seq_value *q = &c->seqs[c->node->inputs[i]];
  if (!q->set) return op_fail(c, "input %d is not a sequence of this Run", i);
  *items = q->items;
  return q->n;
}

int op_set_output_seq(op_ctx *c, int i, mlxb_array *const *items, int n) {
  if (i < 0 || i >= c->node->n_outputs) return op_fail(c, "output %d out of range", i);
  int v = c->node->outputs[i];
  if (v < 0) return 0;
  const ir_value *val = &c->g->values[v];
  if (!val->is_sequence) return op_fail(c, "output %d is not a sequence", i);
  size_t bytes = 0, limit = mlxb_memory_limit();
  for (int k = 0; k < n; k++) {
    if (!items[k]) return op_check(c) ? -1 : op_fail(c, "output %d: no tensor %d", i, k);
    int32_t got = op_onnx_dtype(mlxb_type(items[k]));
    if (val->elem_dtype != ONNX_UNDEFINED && got != val->elem_dtype)
      return op_fail(c, "output %d: tensor %d is %s, the sequence holds %s", i, k, ir_dtype_name(got),
                     ir_dtype_name(val->elem_dtype));
    bytes += mlxb_size(items[k]) * mlxb_dtype_size(mlxb_type(items[k]));
  }
  if (limit && bytes > limit)
    return op_fail(c, "output %d: a sequence of %zu bytes is more than the memory limit (%zu bytes)", i, bytes, limit);
  seq_value src = {.set = true, .n = n, .items = (mlxb_array **)items};
  return seq_copy(&c->seqs[v], &src) ? op_fail(c, "out of memory") : 0;
}
