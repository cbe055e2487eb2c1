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
  diag *d;
};

int seq_copy(seq_value *dst, const seq_value *src);

/* op_require's rules: one flag array per rule (NULL once a trace has recorded them). */
int check_list_push(check_list *l, mlxb_array *flag, char *rule);
/* One array summing every rule's flags, evaluated with the outputs; NULL when there are none. */
mlxb_array *checks_summary(mlxb_scope *s, const check_list *l);
/* After the eval: 0, or the first violated rule formatted into d. */
int checks_verdict(const plan *p, mlxb_scope *s, mlxb_array *summary, const check_list *l, diag *d);
bool is_int_dtype(int32_t t);

#endif
