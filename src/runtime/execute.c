/* One Run of a plan on the calling thread: host inputs become MLX arrays, every node is lowered
 * in topological order into one MLX graph, the cluster outputs are evaluated once and copied
 * into ORT's buffers. Also implements the op_ctx interface the lowerings use. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/plan_internal.h"

typedef struct host_value {
  int64_t *ints; /* host copy of an integer value (NULL when unknown) */
  int n;
} host_value;

struct op_ctx {
  const plan *plan;
  const ir_graph *g;
  const ir_node *node;
  mlxb_scope *s;
  mlxb_array **vals;  /* per value: its array in this Run */
  host_value *host;   /* per value: host-known integers */
  diag *d;
};

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

int op_fail(op_ctx *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  diag_vfail(c->d, fmt, ap);
  va_end(ap);
  return -1;
}

int op_check(op_ctx *c) {
  if (mlxb_ok(c->s)) return 0;
  return op_fail(c, "%s", mlxb_error(c->s));
}

static bool is_int_dtype(int32_t t) {
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
  host_value *h = &c->host[v];
  if (!h->ints) {
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
  size_t n = mlxb_size(a);
  if (n > (size_t)max) return op_fail(c, "input %d has %zu values (at most %d)", i, n, max);
  if (mlxb_read_f64(c->s, a, out, n)) return op_check(c);
  return (int)n;
}

int op_set_output(op_ctx *c, int i, mlxb_array *a) {
  if (!a) return op_check(c) ? -1 : op_fail(c, "output %d: no array", i);
  if (i < 0 || i >= c->node->n_outputs) return op_fail(c, "output %d out of range", i);
  int v = c->node->outputs[i];
  if (v < 0) return 0; /* optional output not wired */
  int32_t want = c->g->values[v].dtype, got = op_onnx_dtype(mlxb_type(a));
  if (want != ONNX_UNDEFINED && op_mlx_dtype(want) >= 0 && got != want)
    return op_fail(c, "output %d: lowering produced %s, graph declares %s", i, ir_dtype_name(got), ir_dtype_name(want));
  c->vals[v] = a;
  return 0;
}

int op_set_output_ints(op_ctx *c, int i, const int64_t *vals, int n, const int64_t *dims, int rank, int32_t dtype) {
  int t = op_mlx_dtype(dtype);
  if (t < 0) return op_fail(c, "output %d: dtype %s", i, ir_dtype_name(dtype));
  mlxb_array *a = mlxb_from_data(c->s, NULL, dims, rank, MLXB_I64);
  if (n > 0) a = mlxb_from_data(c->s, vals, dims, rank, MLXB_I64);
  if (a && t != MLXB_I64) a = mlxb_astype(c->s, a, (mlxb_dtype)t);
  if (op_set_output(c, i, a)) return -1;
  int v = c->node->outputs[i];
  if (v < 0 || n <= 0) return 0;
  host_value *h = &c->host[v];
  free(h->ints);
  h->ints = malloc(sizeof(int64_t) * (size_t)n);
  if (!h->ints) return op_fail(c, "out of memory");
  memcpy(h->ints, vals, sizeof(int64_t) * (size_t)n);
  h->n = n;
  return 0;
}

/* ---- Run --------------------------------------------------------------------------------- */

typedef struct run_state {
  mlxb_scope *s;
  mlxb_array **vals;
  host_value *host;
  int n_values;
} run_state;

static void run_state_free(run_state *r) {
  if (r->host)
    for (int v = 0; v < r->n_values; v++) free(r->host[v].ints);
  free(r->host);
  free(r->vals);
  mlxb_scope_free(r->s);
}

static int bind_inputs(const plan *p, run_state *r, const rt_tensor *inputs, int n_inputs, diag *d) {
  const ir_graph *g = p->g;
  if (n_inputs != g->n_inputs)
    return diag_fail(d, "%s: expected %d inputs, got %d", p->name, g->n_inputs, n_inputs);
  for (int i = 0; i < n_inputs; i++) {
    const ir_value *val = &g->values[g->inputs[i]];
    const rt_tensor *t = &inputs[i];
    if (val->dtype != ONNX_UNDEFINED && t->dtype != val->dtype)
      return diag_fail(d, "%s: input '%s' has dtype %s, expected %s", p->name, val->name, ir_dtype_name(t->dtype),
                       ir_dtype_name(val->dtype));
    if (val->rank >= 0 && t->rank != val->rank)
      return diag_fail(d, "%s: input '%s' has rank %d, expected %d", p->name, val->name, t->rank, val->rank);
    for (int k = 0; val->rank >= 0 && k < t->rank; k++)
      if (val->dims[k] >= 0 && val->dims[k] != t->dims[k])
        return diag_fail(d, "%s: input '%s' has dimension %d = %lld, expected %lld", p->name, val->name, k,
                         (long long)t->dims[k], (long long)val->dims[k]);
    int mt = op_mlx_dtype(t->dtype);
    if (mt < 0) return diag_fail(d, "%s: input '%s' has dtype %s, which MLX lacks", p->name, val->name, ir_dtype_name(t->dtype));
    r->vals[g->inputs[i]] = mlxb_from_data(r->s, t->data, t->dims, t->rank, (mlxb_dtype)mt);
    if (!r->vals[g->inputs[i]]) return diag_fail(d, "%s: input '%s': %s", p->name, val->name, mlxb_error(r->s));
  }
  return 0;
}

static int lower_nodes(const plan *p, run_state *r, diag *d) {
  op_ctx c = {.plan = p, .g = p->g, .s = r->s, .vals = r->vals, .host = r->host, .d = d};
  for (int i = 0; i < p->g->n_nodes; i++) {
    c.node = &p->g->nodes[i];
    if (p->defs[i]->lower(&c, p->defs[i]) || !mlxb_ok(r->s)) {
      if (!d->failed) diag_fail(d, "%s", mlxb_error(r->s));
      diag_prefix(d, "node '%s' (%s): ", c.node->name, c.node->op_type);
      return -1;
    }
    for (int k = 0; k < c.node->n_outputs; k++) {
      int v = c.node->outputs[k];
      if (v >= 0 && !r->vals[v] && op_has_output(&c, k))
        return diag_fail(d, "node '%s' (%s): output %d was not produced", c.node->name, c.node->op_type, k);
    }
  }
  return 0;
}

enum { MAX_RANK = 64 };

static int write_outputs(const plan *p, run_state *r, rt_output_alloc_fn alloc, void *user, diag *d) {
  const ir_graph *g = p->g;
  int n = g->n_outputs;
  mlxb_array **outs = calloc((size_t)n + 1, sizeof *outs);
  if (!outs) return diag_fail(d, "out of memory");
  int rc = -1;
  for (int i = 0; i < n; i++) {
    mlxb_array *a = r->vals[g->outputs[i]];
    if (!a) {
      diag_fail(d, "%s: output '%s' was not computed", p->name, g->values[g->outputs[i]].name);
      goto done;
    }
    outs[i] = mlxb_contiguous(r->s, a);
  }
  if (mlxb_eval(r->s, outs, (size_t)n)) {
    diag_fail(d, "%s: %s", p->name, mlxb_error(r->s));
    goto done;
  }
  for (int i = 0; i < n; i++) {
    int64_t dims[MAX_RANK];
    int rank = mlxb_ndim(outs[i]);
    if (rank > MAX_RANK) {
      diag_fail(d, "%s: output rank %d is too large", p->name, rank);
      goto done;
    }
    mlxb_shape(outs[i], dims);
    int32_t dtype = op_onnx_dtype(mlxb_type(outs[i]));
    void *dst = NULL;
    if (alloc(user, i, dtype, dims, rank, &dst, d)) goto done;
    size_t bytes = mlxb_size(outs[i]) * mlxb_dtype_size(mlxb_type(outs[i]));
    if (bytes && mlxb_read(r->s, outs[i], dst, bytes)) {
      diag_fail(d, "%s: %s", p->name, mlxb_error(r->s));
      goto done;
    }
  }
  rc = 0;
done:
  free(outs);
  return rc;
}

int plan_execute(const plan *p, const rt_tensor *inputs, int n_inputs, rt_output_alloc_fn alloc, void *user, diag *d) {
  run_state r = {.n_values = p->g->n_values};
  r.s = mlxb_scope_new(p->device);
  r.vals = calloc((size_t)r.n_values + 1, sizeof *r.vals);
  r.host = calloc((size_t)r.n_values + 1, sizeof *r.host);
  int rc = -1;
  if (!r.s || !r.vals || !r.host) {
    diag_fail(d, "out of memory");
    goto done;
  }
  for (int v = 0; v < r.n_values; v++)
    if (p->const_arrays[v]) r.vals[v] = p->const_arrays[v];
  if (bind_inputs(p, &r, inputs, n_inputs, d) || lower_nodes(p, &r, d) || write_outputs(p, &r, alloc, user, d))
    goto done;
  rc = 0;
done:
  run_state_free(&r);
  return rc;
}
