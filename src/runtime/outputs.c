/* A Run's outputs: evaluated with the validity checks, then copied into the buffers ORT hands out
 * (host memory, or the EP's device memory on the device), without the rows a decode bucket
 * padded; and, with device memory, the outputs a caller bound to an input's own buffer, which a
 * program traced for them writes in place (find_aliases, op_output_alias). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/trace.h"
#include "runtime/emulated.h"
#include "runtime/run_internal.h"

enum { MAX_RANK = 64 };

static void *stack_or_heap(void *stack, size_t bytes, bool fits) { return fits ? stack : malloc(bytes); }

int out_binding_init(out_binding *ob, int n, bool record) {
  ob->n = 0;
  ob->dst = NULL;
  ob->alias = NULL;
  ob->shapes = NULL;
  if (!mlxb_device_memory_available() || n <= 0) return 0;
  bool fits = n <= OUT_BINDING_STACK;
  ob->dst = stack_or_heap(ob->dst_stack, sizeof *ob->dst * (size_t)n, fits);
  ob->alias = stack_or_heap(ob->alias_stack, sizeof *ob->alias * (size_t)n, fits);
  ob->shapes = stack_or_heap(ob->shapes_stack, sizeof *ob->shapes * (size_t)n * OUT_SHAPE_STRIDE, fits);
  if (!ob->dst || !ob->alias || !ob->shapes) return -1;
  for (int i = 0; i < n; i++) {
    ob->dst[i] = NULL;
    ob->alias[i] = -1;
    ob->shapes[(size_t)i * OUT_SHAPE_STRIDE + 1] = -1; /* rank unknown until written */
  }
  ob->n = n;
  ob->record = record;
  ob->any_alias = false;
  return 0;
}

void out_binding_free(out_binding *ob) {
  if (ob->dst != ob->dst_stack) free(ob->dst);
  if (ob->alias != ob->alias_stack) free(ob->alias);
  if (ob->shapes != ob->shapes_stack) free(ob->shapes);
}

void out_binding_forget_shapes(out_binding *ob) { ob->record = false; }

int64_t *out_binding_take_shapes(const out_binding *ob) {
  if (!ob->n || !ob->record) return NULL;
  size_t bytes = sizeof *ob->shapes * (size_t)ob->n * OUT_SHAPE_STRIDE;
  int64_t *copy = malloc(bytes);
  if (copy) memcpy(copy, ob->shapes, bytes);
  return copy;
}

/* The axis of output i that carries a padded Run's extra rows, or -1. */
static int padded_axis(const run_pad *rp, int i) {
  return rp->pad > 0 ? rp->v->output_axis[i] : -1;
}

/* Copies evaluated `a` into host memory: packed for an emulated dtype, the first `keep` rows of
 * `axis` when axis >= 0. */
static int copy_to_host(mlxb_scope *s, mlxb_array *a, int32_t declared, int axis, int64_t keep, void *dst,
                        size_t bytes) {
  size_t n = mlxb_size(a);
  if (ir_dtype_emulated_bits(declared))
    return n ? emulated_download(s, declared, a, dst, ir_dtype_storage_bytes(declared, (int64_t)n)) : 0;
  if (axis >= 0) return mlxb_read_prefix(s, a, axis, keep, dst, bytes);
  return n ? mlxb_read(s, a, dst, bytes) : 0;
}

/* Keeps output i's dtype and dims (before any padding is cut) for find_aliases' next Runs. */
static void note_out_shape(out_binding *ob, int i, int32_t dtype, bool emulated, mlxb_array *a) {
  if (!ob->n || !ob->record) return;
  int64_t *at = ob->shapes + (size_t)i * OUT_SHAPE_STRIDE;
  int rank = mlxb_ndim(a);
  if (emulated || rank > OUT_SHAPE_RANK) return; /* stays unknown: never aliased */
  at[0] = dtype;
  at[1] = rank;
  mlxb_shape(a, at + 2);
}

static bool same_dims(const int64_t *a, const int64_t *b, int rank) {
  for (int k = 0; k < rank; k++)
    if (a[k] != b[k]) return false;
  return true;
}

/* Output i's dims as ORT gets them: a bucket's padded rows cut. Known before the program runs. */
static int output_dims(plan *p, mlxb_array *a, int i, const run_pad *rp, int64_t *dims, int *rank, diag *d) {
  int axis = padded_axis(rp, i);
  *rank = mlxb_ndim(a);
  if (*rank > MAX_RANK) return diag_fail(d, "%s: output rank %d is too large", p->name, *rank);
  mlxb_shape(a, dims);
  if (axis >= 0) dims[axis] = dims[axis] > rp->pad ? dims[axis] - rp->pad : 0;
  return 0;
}

/* The dtype ORT gets for output i: the declared one for an emulated (packed) dtype. */
static int32_t output_dtype(const plan *p, mlxb_array *a, int i) {
  int32_t declared = p->g->values[p->g->outputs[i]].dtype;
  return ir_dtype_emulated_bits(declared) ? declared : op_onnx_dtype(mlxb_type(a));
}

/* ORT's buffer for output i: the one find_aliases asked for (which must still fit), else one
 * allocated now. Notes the output's shape for find_aliases' next Runs. */
static int output_buffer(plan *p, mlxb_array *a, int i, const run_pad *rp, out_binding *ob, rt_output_alloc_fn alloc,
                         void *user, void **dst, diag *d) {
  int64_t dims[MAX_RANK];
  int rank;
  if (output_dims(p, a, i, rp, dims, &rank, d)) return -1;
  int32_t dtype = output_dtype(p, a, i);
  *dst = NULL;
  if (ob->n && ob->dst[i]) {
    const int64_t *known = ob->shapes + (size_t)i * OUT_SHAPE_STRIDE; /* what find_aliases asked ORT for */
    if (known[0] != dtype || known[1] != rank || !same_dims(known + 2, dims, rank))
      return diag_fail(d, "%s: output %d changed dtype or shape within its signature", p->name, i);
    *dst = ob->dst[i];
  } else if (alloc(user, i, dtype, dims, rank, dst, d)) {
    return -1;
  }
  note_out_shape(ob, i, dtype, ir_dtype_emulated_bits(dtype) != 0, a);
  return 0;
}

/* The bytes output i keeps (a bucket's padded rows cut). */
static size_t output_bytes(mlxb_array *a, const int64_t *dims, int rank) {
  size_t kept = mlxb_dtype_size(mlxb_type(a));
  for (int k = 0; k < rank; k++) kept *= (size_t)dims[k];
  return kept;
}

/* Copies evaluated output i into dst, ORT's buffer for it (output_buffer), without the trailing
 * rows of a padded output (never a packed sub-byte one: buckets.c refuses those). */
static int copy_output(plan *p, mlxb_scope *s, mlxb_array *a, int i, const run_pad *rp, out_binding *ob, void *dst,
                       bool *on_device, diag *d) {
  int axis = padded_axis(rp, i);
  int64_t dims[MAX_RANK];
  int rank;
  if (output_dims(p, a, i, rp, dims, &rank, d)) return -1;
  if (ob->n && ob->alias[i] >= 0 && mlxb_holds_buffer(a, dst)) {
    PLAN_STAT_ADD(p, inplace_outputs, 1); /* the program wrote it in place: nothing to copy */
    return 0;
  }
  int32_t declared = p->g->values[p->g->outputs[i]].dtype;
  bool emulated = ir_dtype_emulated_bits(declared) != 0;
  size_t kept = output_bytes(a, dims, rank);
  int rc;
  if (!emulated && mlxb_size(a) && mlxb_device_owns(dst, kept)) {
    *on_device = true; /* ORT's buffer is our device memory: copied on the GPU */
    PLAN_STAT_ADD(p, device_outputs, 1);
    rc = mlxb_write_device(s, a, axis, axis >= 0 ? dims[axis] : 0, dst, kept);
  } else {
    PLAN_STAT_ADD(p, host_outputs, 1);
    rc = copy_to_host(s, a, declared, axis, axis >= 0 ? dims[axis] : 0, dst, kept);
  }
  return rc ? diag_fail(d, "%s: %s", p->name, mlxb_error(s)) : 0;
}

/* A program whose last eval took at most this long is waited for by looking at its arrays, up to as
 * long, before sleeping (mlxb_eval_spinning: on a CPU scope a sleeping waiter's wake-up took 30-40
 * us on a 2-core VM, as long as a small MLP's whole Run; a longer program's wait sleeps at once,
 * leaving the core to the pool's helpers). */
enum { EVAL_SPIN_US = 100 };

/* A Run's output buffers, asked of ORT before the eval where the program itself copies into the
 * device ones (mlxb_copy_into_device): `in_program` marks those, dst holds every buffer asked. */
typedef struct out_plan {
  void **dst;
  bool *in_program;
  mlxb_output_copy *copies;
  mlxb_array *copier; /* the copies' operation, evaluated with the results; NULL: copies after */
  /* for clusters of usual size: a Run that hits its signature allocates nothing */
  void *dst_stack[OUT_BINDING_STACK];
  bool in_program_stack[OUT_BINDING_STACK];
  mlxb_output_copy copies_stack[OUT_BINDING_STACK];
} out_plan;

static void out_plan_free(out_plan *op) {
  if (op->dst != op->dst_stack) free(op->dst);
  if (op->in_program != op->in_program_stack) free(op->in_program);
  if (op->copies != op->copies_stack) free(op->copies);
}

/* Output i as one of the program's copies, when ORT's buffer for it is our device memory and the
 * copy is a plain one (not written in place, not packed, not empty; float64 never gets here). */
static bool copy_in_program(plan *p, mlxb_array *a, int i, const out_binding *ob, void *dst, const int64_t *dims,
                            int rank) {
  if ((ob->n && ob->alias[i] >= 0) || ir_dtype_emulated_bits(p->g->values[p->g->outputs[i]].dtype)) return false;
  if (!mlxb_size(a)) return false;
  return mlxb_device_owns(dst, output_bytes(a, dims, rank));
}

/* Before the eval, where the scope allows it: ORT's buffers for every output, and one operation
 * that copies the program's results into the device ones, after all of them. */
static int plan_outputs(plan *p, mlxb_scope *s, mlxb_array **results, size_t n_eval, const run_pad *rp,
                        out_binding *ob, rt_output_alloc_fn alloc, void *user, out_plan *op, diag *d) {
  int n = p->g->n_outputs;
  op->dst = NULL, op->in_program = NULL, op->copies = NULL, op->copier = NULL;
  if (!ob->n || !mlxb_copy_into_device_available(s)) return 0;
  for (int i = 0; i < n; i++)
    if (mlxb_type(results[i]) == MLXB_F64) return 0; /* float64 lives on the CPU stream: copied after */
  bool fits = n <= OUT_BINDING_STACK;
  op->dst = stack_or_heap(op->dst_stack, sizeof *op->dst * (size_t)n, fits);
  op->in_program = stack_or_heap(op->in_program_stack, sizeof *op->in_program * (size_t)n, fits);
  op->copies = stack_or_heap(op->copies_stack, sizeof *op->copies * (size_t)n, fits);
  if (!op->dst || !op->in_program || !op->copies) return diag_fail(d, "out of memory");
  mlxb_output_copy *copies = op->copies;
  int n_copies = 0, rc = 0;
  for (int i = 0; i < n && !rc; i++) {
    int64_t dims[MAX_RANK];
    int rank;
    op->in_program[i] = false;
    rc = output_buffer(p, results[i], i, rp, ob, alloc, user, &op->dst[i], d) ||
         output_dims(p, results[i], i, rp, dims, &rank, d);
    if (rc || !copy_in_program(p, results[i], i, ob, op->dst[i], dims, rank)) continue;
    int axis = padded_axis(rp, i);
    copies[n_copies++] = (mlxb_output_copy){.src = i, .axis = axis, .keep = axis >= 0 ? dims[axis] : 0,
                                            .dst = op->dst[i], .bytes = output_bytes(results[i], dims, rank)};
    op->in_program[i] = true;
  }
  if (!rc && n_copies) {
    op->copier = mlxb_copy_into_device(s, results, (int)n_eval, copies, n_copies);
    if (!op->copier) rc = diag_fail(d, "%s: %s", p->name, mlxb_error(s));
  }
  return rc ? -1 : 0;
}

/* Evaluates the outputs and the checks' summary (results[n], when there are checks) at once, fails
 * the Run when a check is violated, else copies the outputs into the buffers the caller hands out:
 * within the same eval where plan_outputs could (device buffers), after it otherwise. */
int write_outputs(plan *p, mlxb_scope *s, mlxb_array **results, const check_list *checks, const run_pad *rp,
                  out_binding *ob, rt_output_alloc_fn alloc, void *user, diag *d) {
  int n = p->g->n_outputs;
  for (int i = 0; i < n; i++) {
    if (!results[i]) return diag_fail(d, "%s: output '%s' was not computed", p->name, p->g->values[p->g->outputs[i]].name);
    /* an output written in place is its input's own array: a contiguous copy would hide that; a
     * float64 output is made contiguous on the CPU, whatever the scope's device */
    if (!(ob->n && ob->alias[i] >= 0)) results[i] = mlxb_contiguous(s, results[i]);
  }
  size_t n_eval = (size_t)n + (checks->n > 0);
  if (checks->n > 0 && !results[n]) return diag_fail(d, "%s: the checks were not computed", p->name);
  out_plan op;
  if (plan_outputs(p, s, results, n_eval, rp, ob, alloc, user, &op, d)) {
    out_plan_free(&op);
    return -1;
  }
  mlxb_array *eval_stack[OUT_BINDING_STACK + 2];
  mlxb_array **to_eval = results;
  if (op.copier) {
    to_eval = n_eval < OUT_BINDING_STACK + 2 ? eval_stack : malloc(sizeof *to_eval * (n_eval + 1));
    if (!to_eval) {
      out_plan_free(&op);
      return diag_fail(d, "out of memory");
    }
    memcpy(to_eval, results, sizeof *to_eval * n_eval);
    to_eval[n_eval] = op.copier;
  }
  uint64_t t0 = trace_now_us();
  bool spin = __atomic_load_n(&p->evals_short, __ATOMIC_RELAXED);
  int rc = mlxb_eval_spinning(s, to_eval, n_eval + (op.copier != NULL), spin ? EVAL_SPIN_US : 0);
  if (to_eval != results && to_eval != eval_stack) free(to_eval);
  if (rc) {
    out_plan_free(&op);
    return diag_fail(d, "%s: %s", p->name, mlxb_error(s));
  }
  uint64_t t1 = trace_now_us();
  __atomic_store_n(&p->evals_short, t1 - t0 <= EVAL_SPIN_US, __ATOMIC_RELAXED);
  PLAN_STAT_ADD(p, eval_us, t1 - t0);
  trace_sink_event(p->cfg.trace, "eval", p->name, op.copier ? "with copies" : NULL, t0, t1 - t0);
  if (checks->n > 0 && checks_verdict(p, s, results[n], checks, d)) {
    out_plan_free(&op);
    return -1;
  }
  bool on_device = false;
  for (int i = 0; i < n && !rc; i++) {
    if (op.dst && op.in_program[i]) {
      PLAN_STAT_ADD(p, device_outputs, 1);
      PLAN_STAT_ADD(p, program_copies, 1);
      continue;
    }
    void *dst = op.dst ? op.dst[i] : NULL;
    if (!dst) rc = output_buffer(p, results[i], i, rp, ob, alloc, user, &dst, d);
    if (!rc) rc = copy_output(p, s, results[i], i, rp, ob, dst, &on_device, d);
  }
  out_plan_free(&op);
  /* queued device copies read MLX buffers that the scope frees next: wait for them, even on error */
  if (on_device && mlxb_device_finish(s) && !rc) rc = diag_fail(d, "%s: %s", p->name, mlxb_error(s));
  uint64_t t2 = trace_now_us();
  PLAN_STAT_ADD(p, copy_us, t2 - t1);
  trace_sink_event(p->cfg.trace, "copy out", p->name, on_device ? "device" : "host", t1, t2 - t1);
  return rc;
}

bool out_binding_any_alias(const out_binding *ob) {
  for (int i = 0; i < ob->n; i++)
    if (ob->alias[i] >= 0) return true;
  return false;
}

/* The aliases hold only for a program traced with them: any other path copies every output. */
void out_binding_drop_aliases(out_binding *ob) {
  for (int i = 0; i < ob->n; i++) ob->alias[i] = -1;
  ob->any_alias = false;
}

/* Input j when output buffers of `dtype` and `dims` could be its own: unpadded, in our device
 * memory (onnxruntime-genai's shared KV buffer is such an IOBinding). */
static bool aliasable_input(const rt_tensor *t, const run_pad *rp, int j, int32_t dtype, const int64_t *dims, int rank) {
  if (t->dtype != dtype || t->rank != rank || !t->data || !same_dims(t->dims, dims, rank)) return false;
  if (rp->pad > 0 && rp->v->input_axis[j] >= 0) return false;
  int type = op_mlx_dtype(dtype);
  if (type < 0 || type == MLXB_BOOL || ir_dtype_emulated_bits(dtype)) return false;
  return mlxb_device_owns(t->data, rt_tensor_bytes(t, (mlxb_dtype)type));
}

/* Before a program runs, asks ORT for each output that could share an input's buffer (same dtype
 * and dims, by the shapes the entry's first Run wrote); one that ORT hands out at such an input's
 * address is an alias (op_output_alias). */
int find_aliases(plan *p, const sig_entry *e, const rt_tensor *inputs, int n_inputs, const run_pad *rp,
                        out_binding *ob, rt_output_alloc_fn alloc, void *user, diag *d) {
  if (!ob->n || !e->out_shapes) return 0; /* out_shapes is immutable once the entry is listed */
  for (int i = 0; i < ob->n; i++) {
    const int64_t *shape = e->out_shapes + (size_t)i * OUT_SHAPE_STRIDE;
    int rank = (int)shape[1];
    if (rank < 0 || padded_axis(rp, i) >= 0) continue;
    bool candidate = false;
    for (int j = 0; j < n_inputs && !candidate; j++)
      candidate = aliasable_input(&inputs[j], rp, j, (int32_t)shape[0], shape + 2, rank);
    if (!candidate) continue;
    memcpy(ob->shapes + (size_t)i * OUT_SHAPE_STRIDE, shape, sizeof *shape * OUT_SHAPE_STRIDE);
    if (alloc(user, i, (int32_t)shape[0], shape + 2, rank, &ob->dst[i], d)) return -1;
    for (int j = 0; j < n_inputs && ob->alias[i] < 0; j++)
      if (inputs[j].data == ob->dst[i] && aliasable_input(&inputs[j], rp, j, (int32_t)shape[0], shape + 2, rank))
        ob->alias[i] = j;
  }
  return 0;
}
