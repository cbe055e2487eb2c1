/* Control flow (If, Loop, Scan) lowered into the cluster's MLX graph together with its bodies:
 * a claimed control-flow node brings every node of its bodies with it (claim_body), and its
 * lowering lowers a body wherever the node's semantics call for it (op_lower_body), so a body
 * costs no extra cluster, boundary copy or eval of its own.
 *
 * - If: a condition known without evaluation (a constant, or a value of the signature computed
 *   from shapes) lowers the taken branch alone; so does an eager Run, which reads the condition on
 *   the host first. A trace cannot read data: it lowers both branches and selects each output with
 *   `where` (exact: the taken branch's bits), the checks of each branch counting only when it is
 *   taken; branches whose outputs differ in shape cannot be selected, so such a signature runs
 *   eagerly (the trace fails and says why).
 * - Loop: a trip count known in a trace unrolls the body (at most LOOP_TRACE_MAX iterations); an
 *   exit condition computed by the body is followed with a mask (iterations after the exit keep
 *   the carried values and count no checks), which a trace cannot do for scan outputs (their
 *   length depends on data). Everything else runs as a host loop in an eager Run: the body is
 *   replayed per iteration from a program compiled once per body signature (op_call_body; lowered
 *   per iteration when it cannot be traced), the exit condition read on the host, and the graph
 *   cut by an eval every LOOP_EVAL_EVERY iterations.
 * - Scan (opset 9+): the sequence length comes from shapes, so the body is unrolled over it, any
 *   axes and directions. Opset 8 (batch axis, optional sequence_lens) unrolls per batch item.
 * Untrusted trip counts and sequence lengths: at most LOOP_MAX_ITERS iterations, and scan outputs
 * are counted against MLX's memory limit as they grow; either failure names the node. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op_util.h"

enum {
  CF_MAX_VALUES = 256,       /* inputs/outputs of one control-flow node */
  LOOP_TRACE_MAX = 1024,     /* iterations a trace unrolls; longer loops run eagerly */
  LOOP_EVAL_EVERY = 256,     /* eager host loops evaluate their state this often */
};
static const int64_t LOOP_MAX_ITERS = (int64_t)1 << 22; /* iterations of one Loop or Scan node */

static int set_outputs(op_ctx *c, mlxb_array **vals, int n) {
  for (int i = 0; i < n; i++)
    if (op_set_output(c, i, vals[i])) return -1;
  return 0;
}

static bool same_shape(const mlxb_array *a, const mlxb_array *b) {
  if (mlxb_type(a) != mlxb_type(b) || mlxb_ndim(a) != mlxb_ndim(b)) return false;
  for (int k = 0; k < mlxb_ndim(a); k++)
    if (mlxb_dim(a, k) != mlxb_dim(b, k)) return false;
  return true;
}

/* A one-element condition as a bool scalar. */
static mlxb_array *cond_scalar(op_ctx *c, mlxb_array *cond) {
  if (!cond) return NULL;
  if (mlxb_size(cond) != 1) {
    op_fail(c, "the condition has %zu elements, not 1", mlxb_size(cond));
    return NULL;
  }
  return mlxb_astype(op_scope(c), mlxb_reshape(op_scope(c), cond, NULL, 0), MLXB_BOOL);
}

/* ---- If ------------------------------------------------------------------------------------ */

static bool claim_if(claim_ctx *c, const op_def *def) {
  const ir_node *n = c->node;
  const ir_graph *then_g = ir_node_subgraph(n, "then_branch"), *else_g = ir_node_subgraph(n, "else_branch");
  if (!then_g || !else_g) return claim_decline(c, "a branch is missing");
  if (claim_input_dtype(c, 0) != ONNX_BOOL) return claim_decline(c, "the condition is not a bool tensor");
  if (n->n_outputs > CF_MAX_VALUES) return claim_decline(c, "more than %d outputs", CF_MAX_VALUES);
  if (then_g->n_outputs != n->n_outputs || else_g->n_outputs != n->n_outputs)
    return claim_decline(c, "the branches give %d and %d outputs for %d", then_g->n_outputs, else_g->n_outputs,
                         n->n_outputs);
  if (then_g->n_inputs || else_g->n_inputs) return claim_decline(c, "a branch has formal inputs");
  int64_t cond;
  if (claim_const_ints(c, 0, &cond, 1) == 1) /* known at Compile: only the taken branch is lowered */
    return cond ? claim_body(c, then_g, "then_branch") : claim_body(c, else_g, "else_branch");
  return claim_body(c, then_g, "then_branch") && claim_body(c, else_g, "else_branch");
}

/* Both branches, each output selected by the condition (a trace, where the condition is data). */
static int lower_if_select(op_ctx *c, int n) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *a[CF_MAX_VALUES], *b[CF_MAX_VALUES];
  mlxb_array *cond = cond_scalar(c, op_input(c, 0));
  mlxb_array *not_cond = mlxb_unary(s, MLXB_LOGICAL_NOT, cond);
  if (!not_cond) return op_check(c) ? -1 : op_fail(c, "no condition");
  if (op_lower_body(c, "then_branch", NULL, 0, a, n, cond) || op_lower_body(c, "else_branch", NULL, 0, b, n, not_cond))
    return -1;
  for (int i = 0; i < n; i++) {
    if (!same_shape(a[i], b[i]))
      return op_trace_refuse(c, "output %d differs in shape or dtype between the branches: a condition computed from "
                                "data is traced only when they agree (this input signature runs eagerly)", i);
    a[i] = mlxb_where(s, cond, a[i], b[i]);
  }
  return set_outputs(c, a, n);
}

static int lower_if(op_ctx *c, const op_def *def) {
  int n = op_num_outputs(c);
  if (n > CF_MAX_VALUES) return op_fail(c, "more than %d outputs", CF_MAX_VALUES);
  if (op_tracing(c) && !op_input_known(c, 0)) return lower_if_select(c, n);
  int64_t cond = 0;
  int got = op_input_ints(c, 0, &cond, 1);
  if (got < 0) return -1;
  if (got != 1) return op_fail(c, "the condition has %d elements, not 1", got);
  mlxb_array *out[CF_MAX_VALUES];
  if (op_lower_body(c, cond ? "then_branch" : "else_branch", NULL, 0, out, n, NULL)) return -1;
  return set_outputs(c, out, n);
}

/* ---- shared by Loop and Scan: scan outputs collected per iteration --------------------------- */

typedef struct scan_lists {
  int k;              /* scan outputs */
  int64_t n, cap;     /* iterations collected */
  mlxb_array **items; /* cap * k: iteration t's output j at t * k + j */
  size_t bytes;       /* collected so far, against MLX's memory limit */
} scan_lists;

static int scan_push(op_ctx *c, scan_lists *l, mlxb_array *const *outs) {
  if (!l->k) return 0;
  if (l->n == l->cap) {
    int64_t cap = l->cap ? 2 * l->cap : 16;
    mlxb_array **items = realloc(l->items, sizeof *items * (size_t)(cap * l->k));
    if (!items) return op_fail(c, "out of memory");
    l->items = items;
    l->cap = cap;
  }
  size_t limit = mlxb_memory_limit();
  for (int j = 0; j < l->k; j++) {
    l->items[l->n * l->k + j] = outs[j];
    l->bytes += mlxb_size(outs[j]) * mlxb_dtype_size(mlxb_type(outs[j]));
  }
  l->n++;
  if (limit && l->bytes > limit)
    return op_fail(c, "scan outputs of %lld iterations need more than the memory limit (%zu bytes)", (long long)l->n,
                   limit);
  return 0;
}

/* Scan output j: its iterations stacked on `axis` (in reverse order when `reverse`). With no
 * iteration the per-iteration shape comes from the body's declared output. */
static mlxb_array *scan_stack(op_ctx *c, const scan_lists *l, int j, const ir_value *decl, int64_t axis_attr,
                              bool reverse) {
  mlxb_scope *s = op_scope(c);
  if (l->n == 0) {
    int64_t dims[OP_UTIL_MAX_RANK + 1];
    if (!decl || decl->rank < 0 || decl->rank >= OP_UTIL_MAX_RANK || op_mlx_dtype(decl->dtype) < 0) {
      op_fail(c, "no iteration ran and the body's scan output %d has no known shape", j);
      return NULL;
    }
    int axis = op_util_resolve_axis(c, axis_attr, decl->rank + 1);
    if (axis < 0) return NULL;
    for (int k = 0, d = 0; k <= decl->rank; k++) {
      if (k == axis) {
        dims[k] = 0;
        continue;
      }
      dims[k] = decl->dims[d++];
      if (dims[k] < 0) {
        op_fail(c, "no iteration ran and the body's scan output %d has no known shape", j);
        return NULL;
      }
    }
    return mlxb_zeros(s, dims, decl->rank + 1, (mlxb_dtype)op_mlx_dtype(decl->dtype));
  }
  mlxb_array **xs = malloc(sizeof *xs * (size_t)l->n);
  if (!xs) {
    op_fail(c, "out of memory");
    return NULL;
  }
  for (int64_t t = 0; t < l->n; t++) {
    xs[t] = l->items[(reverse ? l->n - 1 - t : t) * l->k + j];
    if (!same_shape(xs[t], xs[0])) {
      free(xs);
      op_fail(c, "scan output %d changes shape between iterations", j);
      return NULL;
    }
  }
  int axis = op_util_resolve_axis(c, axis_attr, mlxb_ndim(xs[0]) + 1);
  mlxb_array *y = axis < 0 ? NULL : mlxb_stack(s, (const mlxb_array *const *)xs, (int)l->n, axis);
  free(xs);
  return y;
}

/* Eager host loops keep only the latest iteration's state alive: each iteration builds in a scope
 * of its own (op_swap_scope), the one before is freed once the new state exists (MLX keeps what
 * the graph still needs, and evaluated arrays drop their inputs), and scan outputs move to the
 * Run's scope. A trace builds everything in its own scope. */
typedef struct carry_scopes {
  mlxb_scope *run;  /* the scope the node's lowering was called with */
  mlxb_scope *prev; /* the previous iteration's, holding the current state */
} carry_scopes;

static int iteration_begin(op_ctx *c, carry_scopes *cs) {
  if (op_tracing(c)) return 0;
  mlxb_scope *next = mlxb_scope_new(mlxb_scope_device(cs->run));
  if (!next) return op_fail(c, "out of memory");
  op_swap_scope(c, next);
  return 0;
}

/* Ends an iteration (also a failed one): its scope now holds the state. */
static int iteration_end(op_ctx *c, carry_scopes *cs, int rc) {
  if (op_tracing(c)) return rc;
  if (!rc) rc = op_check(c);
  mlxb_scope *done = op_swap_scope(c, cs->run);
  mlxb_scope_free(cs->prev);
  cs->prev = done;
  return rc;
}

/* Moves n arrays into the node's scope. */
static int keep_in_run(op_ctx *c, const carry_scopes *cs, mlxb_array **a, int n) {
  if (op_tracing(c)) return 0;
  for (int k = 0; k < n; k++) a[k] = mlxb_ref(cs->run, a[k]);
  return op_check(c);
}

/* Eager host loops cut their graph now and then: evaluates the state and what was collected. */
static int cut_graph(op_ctx *c, mlxb_array **state, int n_state, const scan_lists *l) {
  if (op_eval(c, state, n_state)) return -1;
  return l->k && l->n ? op_eval(c, l->items, (int)(l->n * l->k)) : 0;
}

/* Host loops replay a compiled body (op_call_body) where they can. The validity checks of the
 * replayed iterations are merged into one summary per body signature (each check's first
 * violation), kept with the loop's state and handed to the Run once. */
typedef struct body_checks {
  const void *rules; /* what `acc` means (op_call_body's *rules), NULL while empty */
  mlxb_array *acc;   /* int64 [2k]: per check (violated?, first bad value) over the iterations */
} body_checks;

static int body_checks_flush(op_ctx *c, body_checks *bc) {
  int rc = bc->acc ? op_keep_body_checks(c, bc->rules, bc->acc) : 0;
  bc->acc = NULL;
  bc->rules = NULL;
  return rc;
}

static int body_checks_add(op_ctx *c, body_checks *bc, mlxb_array *cur, const void *rules) {
  if (!cur) return 0;
  if (!bc->acc || rules != bc->rules) {
    if (body_checks_flush(c, bc)) return -1;
    bc->acc = cur;
    bc->rules = rules;
    return 0;
  }
  mlxb_scope *s = op_scope(c);
  int64_t pairs[2] = {(int64_t)mlxb_size(cur) / 2, 2}, flat = (int64_t)mlxb_size(cur);
  mlxb_array *a = mlxb_reshape(s, bc->acc, pairs, 2), *b = mlxb_reshape(s, cur, pairs, 2);
  mlxb_array *seen = mlxb_binary(s, MLXB_NOT_EQUAL, op_util_slice_axis(s, a, 1, 0, 1, 1), mlxb_scalar_i64(s, 0, MLXB_I64));
  bc->acc = mlxb_reshape(s, mlxb_where(s, seen, a, b), &flat, 1);
  return op_check(c);
}

/* One iteration of an eager host loop: the compiled body when it can be replayed, else lowered. */
static int body_run(op_ctx *c, mlxb_array *const *in, int n_in, mlxb_array **out, int n_out, body_checks *bc) {
  if (bc && !op_tracing(c)) {
    mlxb_array *checks;
    const void *rules;
    /* the merged checks move with the state into this iteration's scope (the one before is freed) */
    if (bc->acc && !(bc->acc = mlxb_ref(op_scope(c), bc->acc))) return op_check(c);
    int rc = op_call_body(c, "body", in, n_in, out, n_out, &checks, &rules);
    if (rc <= 0) return rc ? -1 : body_checks_add(c, bc, checks, rules);
  }
  return op_lower_body(c, "body", in, n_in, out, n_out, NULL);
}

/* Evaluates the merged checks with the state when a host loop cuts its graph. */
static int body_checks_eval(op_ctx *c, body_checks *bc) { return bc->acc ? op_eval(c, &bc->acc, 1) : 0; }

/* ---- Loop ---------------------------------------------------------------------------------- */

static bool claim_loop(claim_ctx *c, const op_def *def) {
  const ir_node *n = c->node;
  const ir_graph *body = ir_node_subgraph(n, "body");
  if (!body) return claim_decline(c, "no body");
  if (n->n_inputs < 2) return claim_decline(c, "fewer than 2 inputs");
  int carried = n->n_inputs - 2, scans = body->n_outputs - 1 - carried;
  if (n->n_inputs > CF_MAX_VALUES || body->n_outputs > CF_MAX_VALUES)
    return claim_decline(c, "more than %d values", CF_MAX_VALUES);
  if (claim_input(c, 0) && claim_input_dtype(c, 0) != ONNX_INT64) return claim_decline(c, "M is not int64");
  if (claim_input(c, 1) && claim_input_dtype(c, 1) != ONNX_BOOL) return claim_decline(c, "cond is not bool");
  if (body->n_inputs != 2 + carried || scans < 0 || n->n_outputs != carried + scans)
    return claim_decline(c, "the body's inputs and outputs do not match the node's");
  for (int k = 2; k < n->n_inputs; k++)
    if (!claim_input(c, k)) return claim_decline(c, "loop-carried input %d is absent", k);
  return claim_body(c, body, "body");
}

/* Whether the body's condition output is its condition input (through Identity nodes) or a
 * constant true: the loop then never exits early and nothing needs to be read per iteration. */
static bool loop_never_exits_early(const ir_graph *body) {
  int v = body->outputs[0];
  while (v >= 0 && body->values[v].producer >= 0) {
    const ir_node *p = &body->nodes[body->values[v].producer];
    if (strcmp(p->op_type, "Identity") || p->n_inputs < 1) break;
    v = p->inputs[0];
  }
  if (v < 0) return false;
  if (v == body->inputs[1]) return true;
  const ir_value *val = &body->values[v];
  return val->is_const && val->const_data && val->const_bytes == 1 && *(const uint8_t *)val->const_data;
}

typedef struct loop_run {
  int carried, scans;
  int64_t trip;               /* INT64_MAX without M */
  mlxb_array *state[CF_MAX_VALUES];  /* iteration number slot unused; [0] cond, then carried */
  scan_lists lists;
} loop_run;

/* One iteration: body(i, cond, carried...) -> (cond, carried..., scans...). */
static int loop_step(op_ctx *c, loop_run *r, int64_t i, mlxb_array *cond, mlxb_array **out, mlxb_array *when,
                     body_checks *bc) {
  mlxb_array *in[CF_MAX_VALUES];
  in[0] = mlxb_scalar_i64(op_scope(c), i, MLXB_I64);
  in[1] = cond;
  for (int k = 0; k < r->carried; k++) in[2 + k] = r->state[1 + k];
  if (!in[0] || !in[1]) return op_check(c) ? -1 : op_fail(c, "no condition");
  if (bc) return body_run(c, in, 2 + r->carried, out, 1 + r->carried + r->scans, bc);
  return op_lower_body(c, "body", in, 2 + r->carried, out, 1 + r->carried + r->scans, when);
}

/* A trace with a known trip count: the body unrolled; an exit condition from data is followed with
 * a mask (no scan outputs then: their length would depend on data). */
static int loop_unrolled(op_ctx *c, loop_run *r, mlxb_array *cond, bool early_exit) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *out[CF_MAX_VALUES];
  if (r->trip > LOOP_TRACE_MAX)
    return op_trace_refuse(c, "%lld iterations are more than a trace unrolls (%d): this input signature runs eagerly",
                           (long long)r->trip, LOOP_TRACE_MAX);
  if (early_exit && r->scans)
    return op_trace_refuse(c, "the loop may exit early and has scan outputs, whose length depends on data: this input "
                              "signature runs eagerly");
  for (int64_t i = 0; i < r->trip; i++) {
    if (loop_step(c, r, i, cond, out, early_exit ? cond : NULL, NULL)) return -1;
    for (int k = 0; k < r->carried; k++) {
      if (early_exit && !same_shape(out[1 + k], r->state[1 + k]))
        return op_trace_refuse(c, "loop-carried value %d changes shape in a loop that may exit early: this input "
                                  "signature runs eagerly", k);
      r->state[1 + k] = early_exit ? mlxb_where(s, cond, out[1 + k], r->state[1 + k]) : out[1 + k];
    }
    if (scan_push(c, &r->lists, out + 1 + r->carried)) return -1;
    if (early_exit) cond = mlxb_binary(s, MLXB_LOGICAL_AND, cond, cond_scalar(c, out[0]));
    if (op_check(c)) return -1;
  }
  return 0;
}

/* One iteration of a host loop, in the iteration's scope; *cond becomes the exit condition read. */
static int loop_host_step(op_ctx *c, loop_run *r, const carry_scopes *cs, int64_t i, mlxb_array *cond_arr,
                          bool early_exit, int64_t *cond, body_checks *bc) {
  mlxb_array *out[CF_MAX_VALUES];
  if (loop_step(c, r, i, cond_arr, out, NULL, bc)) return -1;
  for (int k = 0; k < r->carried; k++) r->state[1 + k] = out[1 + k];
  if (keep_in_run(c, cs, out + 1 + r->carried, r->scans) || scan_push(c, &r->lists, out + 1 + r->carried)) return -1;
  if (early_exit) {
    mlxb_array *flag = cond_scalar(c, out[0]);
    if (!flag || op_read_ints(c, flag, cond, 1) < 0) return -1;
  }
  if ((i + 1) % LOOP_EVAL_EVERY) return 0;
  return cut_graph(c, r->state + 1, r->carried, &r->lists) || body_checks_eval(c, bc) ? -1 : 0;
}

/* An eager Run: iterations until the trip count or the exit condition, read on the host. */
static int loop_host(op_ctx *c, loop_run *r, int64_t cond, bool early_exit) {
  carry_scopes cs = {.run = op_scope(c)};
  mlxb_array *cond_arr = mlxb_scalar_i64(cs.run, 1, MLXB_BOOL);
  body_checks bc = {0};
  int rc = 0;
  if (!early_exit && r->trip > LOOP_MAX_ITERS && cond)
    return op_fail(c, "trip count %lld without an exit condition is more than the EP runs (%lld iterations)",
                   (long long)r->trip, (long long)LOOP_MAX_ITERS);
  for (int64_t i = 0; !rc && i < r->trip && cond; i++) {
    if (i >= LOOP_MAX_ITERS)
      rc = op_fail(c, "more than %lld iterations (the EP's limit for one Loop)", (long long)LOOP_MAX_ITERS);
    else if (!(rc = iteration_begin(c, &cs)))
      rc = iteration_end(c, &cs, loop_host_step(c, r, &cs, i, cond_arr, early_exit, &cond, &bc));
  }
  if (!rc) rc = keep_in_run(c, &cs, r->state + 1, r->carried);
  if (!rc) rc = body_checks_flush(c, &bc);
  mlxb_scope_free(cs.prev);
  return rc;
}

static int loop_outputs(op_ctx *c, loop_run *r) {
  const ir_graph *body = op_body(c, "body");
  for (int k = 0; k < r->carried; k++)
    if (op_set_output(c, k, r->state[1 + k])) return -1;
  for (int j = 0; j < r->scans; j++) {
    if (!op_has_output(c, r->carried + j)) continue;
    const ir_value *decl = &body->values[body->outputs[1 + r->carried + j]];
    if (op_set_output(c, r->carried + j, scan_stack(c, &r->lists, j, decl, 0, false))) return -1;
  }
  return 0;
}

static int lower_loop(op_ctx *c, const op_def *def) {
  const ir_graph *body = op_body(c, "body");
  if (!body) return op_fail(c, "no body");
  loop_run r = {.carried = op_num_inputs(c) - 2, .trip = INT64_MAX};
  r.scans = body->n_outputs - 1 - r.carried;
  r.lists.k = r.scans;
  for (int k = 0; k < r.carried; k++) r.state[1 + k] = op_input(c, 2 + k);
  bool early_exit = !loop_never_exits_early(body), tracing = op_tracing(c);
  int rc = -1;
  if (op_has_input(c, 0)) {
    if (tracing && !op_input_known(c, 0)) {
      op_trace_refuse(c, "the trip count depends on data: this input signature runs eagerly");
      goto done;
    }
    if (op_util_input_int(c, 0, &r.trip)) goto done;
  }
  if (tracing) {
    if (r.trip == INT64_MAX) {
      op_trace_refuse(c, "no trip count: the loop ends on data, and this input signature runs eagerly");
      goto done;
    }
    mlxb_array *cond = op_has_input(c, 1) ? cond_scalar(c, op_input(c, 1)) : mlxb_scalar_i64(op_scope(c), 1, MLXB_BOOL);
    bool masked = early_exit || (op_has_input(c, 1) && !op_input_known(c, 1));
    int64_t cond0 = 1;
    if (!masked && op_has_input(c, 1) && op_util_input_int(c, 1, &cond0)) goto done;
    if (!cond0) r.trip = 0;
    if (!cond || loop_unrolled(c, &r, cond, masked)) goto done;
  } else {
    int64_t cond0 = 1;
    if (op_has_input(c, 1)) {
      mlxb_array *flag = cond_scalar(c, op_input(c, 1));
      if (!flag || (op_input_known(c, 1) ? op_util_input_int(c, 1, &cond0) : op_read_ints(c, flag, &cond0, 1) < 0))
        goto done;
    }
    if (loop_host(c, &r, cond0, early_exit)) goto done;
  }
  rc = loop_outputs(c, &r);
done:
  free(r.lists.items);
  return rc;
}

/* ---- Scan ---------------------------------------------------------------------------------- */

typedef struct scan_attrs {
  int states, inputs, outputs; /* N, M, K */
  const int64_t *in_axes, *in_dirs, *out_axes, *out_dirs;
  size_t n_in_axes, n_in_dirs, n_out_axes, n_out_dirs;
} scan_attrs;

static bool why_not(char *why, size_t len, const char *msg) {
  snprintf(why, len, "%s", msg);
  return false;
}

static bool read_scan_attrs(const ir_node *n, const ir_graph *body, scan_attrs *a, char *why, size_t len) {
  int64_t m = ir_attr_int(n, "num_scan_inputs", -1);
  if (m < 1 || m > n->n_inputs) return why_not(why, len, "num_scan_inputs is missing or invalid");
  a->inputs = (int)m;
  a->states = n->n_inputs - a->inputs;
  a->outputs = n->n_outputs - a->states;
  a->n_in_axes = ir_attr_ints(n, "scan_input_axes", &a->in_axes);
  a->n_in_dirs = ir_attr_ints(n, "scan_input_directions", &a->in_dirs);
  a->n_out_axes = ir_attr_ints(n, "scan_output_axes", &a->out_axes);
  a->n_out_dirs = ir_attr_ints(n, "scan_output_directions", &a->out_dirs);
  if (a->outputs < 0 || body->n_inputs != a->states + a->inputs || body->n_outputs != a->states + a->outputs)
    return why_not(why, len, "the body's inputs and outputs do not match the node's");
  if ((a->n_in_axes && a->n_in_axes != (size_t)a->inputs) || (a->n_in_dirs && a->n_in_dirs != (size_t)a->inputs) ||
      (a->n_out_axes && a->n_out_axes != (size_t)a->outputs) || (a->n_out_dirs && a->n_out_dirs != (size_t)a->outputs))
    return why_not(why, len, "an axes or directions attribute has the wrong length");
  for (size_t k = 0; k < a->n_in_dirs; k++)
    if (a->in_dirs[k] != 0 && a->in_dirs[k] != 1) return why_not(why, len, "a direction is not 0 or 1");
  for (size_t k = 0; k < a->n_out_dirs; k++)
    if (a->out_dirs[k] != 0 && a->out_dirs[k] != 1) return why_not(why, len, "a direction is not 0 or 1");
  return true;
}

static bool claim_scan(claim_ctx *c, const op_def *def) {
  const ir_graph *body = ir_node_subgraph(c->node, "body");
  if (!body) return claim_decline(c, "no body");
  if (c->node->n_inputs > CF_MAX_VALUES || c->node->n_outputs > CF_MAX_VALUES)
    return claim_decline(c, "more than %d values", CF_MAX_VALUES);
  scan_attrs a;
  char why[160];
  if (!read_scan_attrs(c->node, body, &a, why, sizeof why)) return claim_decline(c, "%s", why);
  for (int k = 0; k < c->node->n_inputs; k++)
    if (!claim_input(c, k)) return claim_decline(c, "input %d is absent", k);
  return claim_body(c, body, "body");
}

/* The sequence length: every scan input's length along its axis (ORT requires them equal). */
static int64_t scan_length(op_ctx *c, const scan_attrs *a, int *axes) {
  int64_t len = -1;
  for (int j = 0; j < a->inputs; j++) {
    mlxb_array *x = op_input(c, a->states + j);
    int rank = mlxb_ndim(x);
    axes[j] = op_util_resolve_axis(c, a->n_in_axes ? a->in_axes[j] : 0, rank);
    if (axes[j] < 0) return -1;
    int64_t d = mlxb_dim(x, axes[j]);
    if (len >= 0 && d != len)
      return op_fail(c, "scan input %d has %lld steps, scan input 0 has %lld", j, (long long)d, (long long)len);
    len = d;
  }
  return len;
}

static int lower_scan(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_graph *body = op_body(c, "body");
  scan_attrs a;
  char why[160];
  if (!body) return op_fail(c, "no body");
  if (!read_scan_attrs(op_node(c), body, &a, why, sizeof why)) return op_fail(c, "%s", why);
  int axes[CF_MAX_VALUES];
  int64_t steps = scan_length(c, &a, axes);
  if (steps < 0) return -1;
  if (steps > LOOP_MAX_ITERS)
    return op_fail(c, "%lld steps are more than the EP runs (%lld)", (long long)steps, (long long)LOOP_MAX_ITERS);
  if (op_tracing(c) && steps > LOOP_TRACE_MAX)
    return op_trace_refuse(c, "%lld steps are more than a trace unrolls (%d): this input signature runs eagerly",
                           (long long)steps, LOOP_TRACE_MAX);
  mlxb_array *state[CF_MAX_VALUES], *in[CF_MAX_VALUES], *out[CF_MAX_VALUES];
  for (int k = 0; k < a.states; k++) state[k] = op_input(c, k);
  scan_lists lists = {.k = a.outputs};
  carry_scopes cs = {.run = s};
  body_checks bc = {0};
  int rc = -1;
  for (int64_t t = 0; t < steps; t++) {
    if (iteration_begin(c, &cs)) goto done;
    mlxb_scope *is = op_scope(c);
    for (int k = 0; k < a.states; k++) in[k] = state[k];
    for (int j = 0; j < a.inputs; j++) {
      int64_t at = a.n_in_dirs && a.in_dirs[j] ? steps - 1 - t : t;
      mlxb_array *x = op_input(c, a.states + j);
      in[a.states + j] = mlxb_squeeze(is, op_util_slice_axis(is, x, axes[j], at, at + 1, 1), &axes[j], 1);
    }
    int step = op_check(c) || body_run(c, in, a.states + a.inputs, out, a.states + a.outputs, &bc) ||
               keep_in_run(c, &cs, out + a.states, a.outputs) || scan_push(c, &lists, out + a.states);
    for (int k = 0; k < a.states && !step; k++) state[k] = out[k];
    if (!step && !op_tracing(c) && (t + 1) % LOOP_EVAL_EVERY == 0)
      step = cut_graph(c, state, a.states, &lists) || body_checks_eval(c, &bc);
    if (iteration_end(c, &cs, step ? -1 : 0)) goto done;
  }
  if (keep_in_run(c, &cs, state, a.states) || body_checks_flush(c, &bc)) goto done;
  for (int k = 0; k < a.states; k++)
    if (op_set_output(c, k, state[k])) goto done;
  for (int j = 0; j < a.outputs; j++) {
    if (!op_has_output(c, a.states + j)) continue;
    const ir_value *decl = &body->values[body->outputs[a.states + j]];
    bool reverse = a.n_out_dirs && a.out_dirs[j];
    if (op_set_output(c, a.states + j, scan_stack(c, &lists, j, decl, a.n_out_axes ? a.out_axes[j] : 0, reverse)))
      goto done;
  }
  rc = 0;
done:
  mlxb_scope_free(cs.prev);
  free(lists.items);
  return rc;
}

/* ---- Scan opset 8 --------------------------------------------------------------------------
 * Inputs: optional sequence_lens [batch], then states [batch, ...] and scan inputs [batch, steps,
 * ...]; attribute `directions` per scan input. The body runs per batch item b over the first
 * sequence_lens[b] steps (all steps without it), a reverse input read from step sequence_lens[b]-1
 * down; scan outputs are written in iteration order and zero after sequence_lens[b] (ORT's
 * Scan8Impl). Every batch item is lowered separately, so the body sees exactly ORT's values. */

static bool read_scan8_attrs(const ir_node *n, const ir_graph *body, scan_attrs *a, char *why, size_t len) {
  int64_t m = ir_attr_int(n, "num_scan_inputs", -1);
  if (n->n_inputs < 2) return why_not(why, len, "fewer than 2 inputs");
  if (m < 1 || m > n->n_inputs - 1) return why_not(why, len, "num_scan_inputs is missing or invalid");
  memset(a, 0, sizeof *a);
  a->inputs = (int)m;
  a->states = n->n_inputs - 1 - a->inputs;
  a->outputs = n->n_outputs - a->states;
  a->n_in_dirs = ir_attr_ints(n, "directions", &a->in_dirs);
  if (a->outputs < 0 || body->n_inputs != a->states + a->inputs || body->n_outputs != a->states + a->outputs)
    return why_not(why, len, "the body's inputs and outputs do not match the node's");
  if (a->n_in_dirs && a->n_in_dirs != (size_t)a->inputs) return why_not(why, len, "directions has the wrong length");
  for (size_t k = 0; k < a->n_in_dirs; k++)
    if (a->in_dirs[k] != 0 && a->in_dirs[k] != 1) return why_not(why, len, "a direction is not 0 or 1");
  return true;
}

static bool claim_scan8(claim_ctx *c, const op_def *def) {
  const ir_graph *body = ir_node_subgraph(c->node, "body");
  if (!body) return claim_decline(c, "no body");
  if (c->node->n_inputs > CF_MAX_VALUES || c->node->n_outputs > CF_MAX_VALUES)
    return claim_decline(c, "more than %d values", CF_MAX_VALUES);
  scan_attrs a;
  char why[160];
  if (!read_scan8_attrs(c->node, body, &a, why, sizeof why)) return claim_decline(c, "%s", why);
  if (claim_input(c, 0) && claim_input_dtype(c, 0) != ONNX_INT64) return claim_decline(c, "sequence_lens is not int64");
  for (int k = 1; k < c->node->n_inputs; k++)
    if (!claim_input(c, k)) return claim_decline(c, "input %d is absent", k);
  return claim_body(c, body, "body");
}

/* Batch size and steps (ORT's checks: states rank >= 1, scan inputs rank >= 2, all agree). */
static int scan8_shape(op_ctx *c, const scan_attrs *a, int64_t *batch, int64_t *steps) {
  *batch = -1;
  *steps = -1;
  for (int k = 0; k < a->states + a->inputs; k++) {
    mlxb_array *x = op_input(c, 1 + k);
    bool scan_in = k >= a->states;
    if (mlxb_ndim(x) < (scan_in ? 2 : 1))
      return op_fail(c, "input %d has rank %d: %s need at least %d dimensions", 1 + k, mlxb_ndim(x),
                     scan_in ? "scan inputs" : "states", scan_in ? 2 : 1);
    if (*batch >= 0 && mlxb_dim(x, 0) != *batch)
      return op_fail(c, "inputs have inconsistent batch sizes (%lld and %lld)", (long long)*batch,
                     (long long)mlxb_dim(x, 0));
    *batch = mlxb_dim(x, 0);
    if (!scan_in) continue;
    if (*steps >= 0 && mlxb_dim(x, 1) != *steps)
      return op_fail(c, "scan inputs have inconsistent sequence lengths (%lld and %lld)", (long long)*steps,
                     (long long)mlxb_dim(x, 1));
    *steps = mlxb_dim(x, 1);
  }
  return 0;
}

/* Scan output j of one batch item: its `n` steps stacked, then zeros up to `steps`. */
static mlxb_array *scan8_item_output(op_ctx *c, const scan_lists *l, int j, const ir_value *decl, int64_t steps) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *y = scan_stack(c, l, j, decl, 0, false);
  if (!y || l->n == steps) return y;
  int64_t dims[OP_UTIL_MAX_RANK + 1];
  int rank = mlxb_ndim(y);
  if (rank > OP_UTIL_MAX_RANK + 1) {
    op_fail(c, "scan output %d has rank %d", j, rank);
    return NULL;
  }
  mlxb_shape(y, dims);
  dims[0] = steps - l->n;
  mlxb_array *parts[2] = {y, mlxb_zeros(s, dims, rank, mlxb_type(y))};
  return mlxb_concat(s, (const mlxb_array *const *)parts, 2, 0);
}

static int lower_scan8(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_graph *body = op_body(c, "body");
  scan_attrs a;
  char why[160];
  if (!body) return op_fail(c, "no body");
  if (!read_scan8_attrs(op_node(c), body, &a, why, sizeof why)) return op_fail(c, "%s", why);
  int64_t batch, steps;
  if (scan8_shape(c, &a, &batch, &steps)) return -1;
  if (a.inputs && steps < 0) return op_fail(c, "no scan input");
  int64_t *lens = NULL;
  mlxb_array **finals = NULL, **scans = NULL, **item = NULL;
  scan_lists lists = {.k = a.outputs};
  carry_scopes cs = {.run = s};
  body_checks bc = {0};
  int rc = -1;
  if (batch > LOOP_MAX_ITERS || (steps > 0 && batch * steps > LOOP_MAX_ITERS)) {
    op_fail(c, "%lld batch items of %lld steps are more than the EP runs (%lld iterations)", (long long)batch,
            (long long)steps, (long long)LOOP_MAX_ITERS);
    goto done;
  }
  if (op_tracing(c) && batch * steps > LOOP_TRACE_MAX) {
    op_trace_refuse(c, "%lld iterations are more than a trace unrolls (%d): this input signature runs eagerly",
                    (long long)(batch * steps), LOOP_TRACE_MAX);
    goto done;
  }
  lens = malloc(sizeof *lens * (size_t)(batch + 1));
  finals = calloc((size_t)(batch * a.states + 1), sizeof *finals);
  scans = calloc((size_t)(batch * a.outputs + 1), sizeof *scans);
  item = calloc((size_t)(batch + 1), sizeof *item);
  if (!lens || !finals || !scans || !item) {
    op_fail(c, "out of memory");
    goto done;
  }
  for (int64_t b = 0; b < batch; b++) lens[b] = steps;
  if (op_has_input(c, 0)) {
    if (op_tracing(c) && !op_input_known(c, 0)) {
      op_trace_refuse(c, "sequence_lens depends on data: this input signature runs eagerly");
      goto done;
    }
    int64_t n = mlxb_size(op_input(c, 0));
    if (n != batch) {
      op_fail(c, "sequence_lens has %lld entries for a batch of %lld", (long long)n, (long long)batch);
      goto done;
    }
    if (batch && op_input_ints(c, 0, lens, (int)batch) != batch) goto done;
    for (int64_t b = 0; b < batch; b++)
      if (lens[b] < 1 || lens[b] > steps) {
        op_fail(c, "sequence_lens[%lld] = %lld is outside [1, %lld] (the sequence length)", (long long)b,
                (long long)lens[b], (long long)steps);
        goto done;
      }
  }
  mlxb_array *state[CF_MAX_VALUES], *in[CF_MAX_VALUES], *out[CF_MAX_VALUES];
  for (int64_t b = 0; b < batch; b++) {
    for (int k = 0; k < a.states; k++) {
      mlxb_array *x = op_input(c, 1 + k);
      int zero = 0;
      state[k] = mlxb_squeeze(s, op_util_slice_axis(s, x, 0, b, b + 1, 1), &zero, 1);
    }
    lists.n = 0; /* bytes keep counting across batch items */
    for (int64_t t = 0; t < lens[b]; t++) {
      if (iteration_begin(c, &cs)) goto done;
      mlxb_scope *is = op_scope(c);
      for (int k = 0; k < a.states; k++) in[k] = state[k];
      for (int j = 0; j < a.inputs; j++) {
        int64_t at = a.n_in_dirs && a.in_dirs[j] ? lens[b] - 1 - t : t;
        mlxb_array *x = op_input(c, 1 + a.states + j);
        int axes[2] = {0, 1};
        in[a.states + j] = mlxb_squeeze(
            is, op_util_slice_axis(is, op_util_slice_axis(is, x, 0, b, b + 1, 1), 1, at, at + 1, 1), axes, 2);
      }
      int step = op_check(c) || body_run(c, in, a.states + a.inputs, out, a.states + a.outputs, &bc) ||
                 keep_in_run(c, &cs, out + a.states, a.outputs) || scan_push(c, &lists, out + a.states);
      for (int k = 0; k < a.states && !step; k++) state[k] = out[k];
      if (!step && !op_tracing(c) && (t + 1) % LOOP_EVAL_EVERY == 0)
        step = cut_graph(c, state, a.states, &lists) || body_checks_eval(c, &bc);
      if (iteration_end(c, &cs, step ? -1 : 0)) goto done;
    }
    if (keep_in_run(c, &cs, state, a.states) || body_checks_flush(c, &bc)) goto done;
    for (int k = 0; k < a.states; k++) finals[b * a.states + k] = state[k];
    for (int j = 0; j < a.outputs; j++) {
      const ir_value *decl = &body->values[body->outputs[a.states + j]];
      if (!(scans[b * a.outputs + j] = scan8_item_output(c, &lists, j, decl, steps))) goto done;
    }
  }
  for (int k = 0; k < a.states; k++) {
    mlxb_array *y;
    if (batch == 0) {
      y = op_input(c, 1 + k); /* no batch item: the (empty) initial state */
    } else {
      for (int64_t b = 0; b < batch; b++) item[b] = finals[b * a.states + k];
      y = mlxb_stack(s, (const mlxb_array *const *)item, (int)batch, 0);
    }
    if (op_set_output(c, k, y)) goto done;
  }
  for (int j = 0; j < a.outputs; j++) {
    if (!op_has_output(c, a.states + j)) continue;
    if (batch == 0) {
      op_fail(c, "an empty batch gives scan outputs of no known shape");
      goto done;
    }
    for (int64_t b = 0; b < batch; b++) item[b] = scans[b * a.outputs + j];
    if (op_set_output(c, a.states + j, mlxb_stack(s, (const mlxb_array *const *)item, (int)batch, 0))) goto done;
  }
  rc = 0;
done:
  mlxb_scope_free(cs.prev);
  free(lists.items);
  free(lens);
  free(finals);
  free(scans);
  free(item);
  return rc;
}

#define CF_DOC_BODIES "bodies claimed with the node (every body node must be claimed) and lowered into its cluster"

static const op_def defs[] = {
    OP_ROW("", "If", 1, 25, .inputs = {1, 1}, .outputs = {1, OP_VARIADIC}, .dtypes = DT_BOOL, .claim = claim_if,
           .lower = lower_if, .flags = OP_FLAG_BODIES,
           .doc = "Tensor outputs; " CF_DOC_BODIES ". A constant condition claims and lowers the taken branch alone; "
                  "otherwise an eager Run reads the condition and lowers the taken branch, and a compiled program "
                  "lowers both and selects with where (untaken branch's checks masked); branch outputs of different "
                  "shapes run eagerly"),
    OP_ROW("", "Loop", 1, 25, .inputs = {0, OP_VARIADIC}, .outputs = {1, OP_VARIADIC}, .claim = claim_loop,
           .lower = lower_loop, .flags = OP_FLAG_BODIES,
           .doc = "Tensor values; " CF_DOC_BODIES ". Constant, shape-derived and runtime trip counts, exit "
                  "condition, loop-carried values, scan outputs, outer-scope values. Unrolled in a compiled program "
                  "when the trip count is known there (<= 1024; an exit condition from data is masked, without scan "
                  "outputs); otherwise a host loop in an eager Run (exit condition read per iteration, the body "
                  "compiled once per signature and replayed); at most 2^22 iterations; no sequence-typed "
                  "loop-carried values"),
    OP_ROW("", "Scan", 8, 8, .inputs = {0, OP_VARIADIC}, .outputs = {1, OP_VARIADIC}, .claim = claim_scan8,
           .lower = lower_scan8, .flags = OP_FLAG_BODIES,
           .doc = "Tensor values; " CF_DOC_BODIES ". Opset 8: batch axis 0, optional sequence_lens (each in [1, "
                  "steps], as ORT requires; read on the host, so a trace with sequence_lens from data runs eagerly), "
                  "directions; the body is lowered per batch item and step, scan outputs zero after a batch item's "
                  "length"),
    OP_ROW("", "Scan", 9, 25, .inputs = {1, OP_VARIADIC}, .outputs = {1, OP_VARIADIC}, .claim = claim_scan,
           .lower = lower_scan, .flags = OP_FLAG_BODIES,
           .doc = "Tensor values; " CF_DOC_BODIES ". Any scan_input/output axes and directions; unrolled over the "
                  "sequence length (compiled up to 1024 steps, eager beyond, at most 2^22)"),
};

OPS_FAMILY(control, defs);
