/* What a Run shares between its driver (execute.c) and the op_ctx interface it hands lowerings
 * (op_ctx.c): the per-Run values, the op_ctx itself and the validity-check list helpers. Private
 * to src/runtime. */
#ifndef EP_MLX_RUNTIME_RUN_INTERNAL_H
#define EP_MLX_RUNTIME_RUN_INTERNAL_H

#include "runtime/plan_internal.h"

/* A sequence value of a Run: its tensors (rows flagged OP_FLAG_SEQUENCES make and read them). */
typedef struct seq_value {
  bool set;           /* produced in this Run (an empty sequence has n == 0) */
  int n;
  mlxb_array **items; /* malloc'd; the arrays belong to the scopes that made them */
} seq_value;


struct op_ctx {
  plan *plan;
  const ir_graph *g;
  const graph_frame *f; /* the graph being lowered (f->g == g): the cluster, or a body */
  op_ctx *outer;      /* while lowering a body: the enclosing graph's context, else NULL */
  const ir_node *node;
  mlxb_scope *s;       /* where the lowering builds (a body's or a loop iteration's own scope) */
  mlxb_scope *run_s;  /* the Run's scope, where validity checks are kept */
  mlxb_array **vals;  /* per value: its array in this Run */
  seq_value *seqs;    /* per value: its tensors in this Run, for sequence values */
  host_value *host;   /* per value: host integers found in this Run (owned by the Run) */
  const host_value *known; /* per value: shape-derived integers of the signature, or NULL */
  bool tracing;       /* inside an MLX compile trace: nothing may be evaluated */
  bool preparing;     /* a row's prepare at Compile (frame_prepare): only constants have arrays */
  check_list *checks; /* validity checks of this lowering (op_require) */
  const int *alias;   /* per cluster output: the cluster input sharing its buffer, or -1; NULL: none */
  mlxb_array **ahead; /* per node of the cluster's graph: its output computed ahead (op_compute_for);
                         NULL outside the cluster graph's own lowering */
  diag *d;
  bool data_read;     /* the cluster's own context: a value depending on data was read (op_note_host_read) */
  mlxb_op_tally *tally; /* the cluster's own context, tracing with ORT_EP_MLX_OP_HISTOGRAM: what earlier
                           nodes' lines counted (node_histogram); NULL otherwise */
};

/* Counts a host read (the run report's host_reads) of value v of c->g (-1: an array of no value)
 * and, unless the signature alone fixes it (a shape-derived value of the cluster's graph), marks the
 * Run's lowering as having read data (the outermost context's data_read). */
void op_note_host_read(op_ctx *c, int v);

int seq_copy(seq_value *dst, const seq_value *src);

/* op_require's rules: one flag array per rule (NULL once a trace has recorded them). */
int check_list_push(check_list *l, mlxb_array *flag, char *rule);
/* One array summing every rule's flags, evaluated with the outputs; NULL when there are none. */
mlxb_array *checks_summary(mlxb_scope *s, const check_list *l);
/* After the eval: 0, or the first violated rule formatted into d. */
int checks_verdict(const plan *p, mlxb_scope *s, mlxb_array *summary, const check_list *l, diag *d);
bool is_int_dtype(int32_t t);

/* ---- a Run's outputs (outputs.c) ---------------------------------------------------------- */
/* A Run's padding: how much, and which inputs and outputs carry it (NULL variant when pad is 0). */
typedef struct run_pad {
  int64_t pad;
  const bucket_variant *v;
} run_pad;

static inline size_t rt_tensor_bytes(const rt_tensor *t, mlxb_dtype type) {
  size_t n = mlxb_dtype_size(type);
  for (int k = 0; k < t->rank; k++) n *= (size_t)(t->dims[k] > 0 ? t->dims[k] : 0);
  return n;
}

/* What a Run with device memory knows of its outputs before its program runs: onnxruntime-genai
 * binds one device buffer as a KV cache's past input and present output, and a program that
 * knows it (op_output_alias) writes the new rows in place instead of a whole present to copy. */
enum { OUT_SHAPE_STRIDE = OUT_SHAPE_RANK + 2, OUT_BINDING_STACK = 64 };

typedef struct out_binding {
  int n;           /* the cluster's outputs; 0 when the Run has no device memory (all else unused) */
  bool record;     /* a Run of a new signature: keep the shapes it writes (out_binding_take_shapes) */
  void **dst;      /* per output: ORT's buffer, asked for before the program ran, or NULL */
  int *alias;      /* per output: the input whose buffer dst is, or -1 */
  bool any_alias;  /* some alias[i] >= 0 and the program was traced for them */
  int64_t *shapes; /* per output: dtype, rank, dims (known from the entry, or as this Run wrote them) */
  /* the arrays above for clusters of usual size: a Run that hits its signature allocates nothing */
  void *dst_stack[OUT_BINDING_STACK];
  int alias_stack[OUT_BINDING_STACK];
  int64_t shapes_stack[OUT_BINDING_STACK * OUT_SHAPE_STRIDE];
} out_binding;

/* n outputs; record for a Run whose signature is new. Nothing to do without device memory. */
int out_binding_init(out_binding *ob, int n, bool record);
void out_binding_free(out_binding *ob);
/* The shapes a recording Run wrote, malloc'd for a new signature entry (NULL: none, or no memory). */
int64_t *out_binding_take_shapes(const out_binding *ob);
/* The Run's output shapes are not the signature's alone (they followed data read on the host):
 * none are kept for find_aliases. */
void out_binding_forget_shapes(out_binding *ob);
bool out_binding_any_alias(const out_binding *ob);
void out_binding_drop_aliases(out_binding *ob); /* the aliases hold only for a program traced with them */
/* Before a program runs: asks ORT for the outputs that could be an input's own buffer. 0 or -1. */
int find_aliases(plan *p, const sig_entry *e, const rt_tensor *inputs, int n_inputs, const run_pad *rp,
                 out_binding *ob, rt_output_alloc_fn alloc, void *user, diag *d);
/* Evaluates results[0..n) (and the checks' summary results[n]), fails the Run on a violated
 * check, else copies every output out (nothing for one written in place). 0 or -1. */
int write_outputs(plan *p, mlxb_scope *s, mlxb_array **results, const check_list *checks, const run_pad *rp,
                  out_binding *ob, rt_output_alloc_fn alloc, void *user, diag *d);

#endif
