/* Plan internals shared by plan.c (creation), sigcache.c (signature cache) and execute.c (Run);
 * not for other layers. */
#ifndef EP_MLX_PLAN_INTERNAL_H
#define EP_MLX_PLAN_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>

#include "ops/op.h"
#include "runtime/plan.h"

/* Integer constants up to this many elements keep a host copy for op_input_ints. */
enum { PLAN_HOST_CONST_MAX = 4096 };

typedef struct host_value {
  int64_t *ints; /* host copy of an integer value (NULL when unknown) */
  int n;
} host_value;

/* The validity checks of one lowering of a cluster (op_require): per check, the rule's message
 * (static per node and signature) and, while the graph is built, its in-graph summary. */
typedef struct check_list {
  char **rules;         /* "node 'g' (Gather): index {} out of range [-5, 5)"; {} = the bad value */
  mlxb_array **flags;   /* per check: int64 [2] (mlxb_violation); NULL once the rules are kept */
  char **keys;          /* per check: what makes it the same check (op_require_once), or NULL */
  int n, cap;
} check_list;
void check_list_free(check_list *l); /* frees the rules; accepts a zeroed list */
/* Keeps only the rules (what a traced program's list needs once its flags are outputs). */
void check_list_keep_rules(check_list *l);

/* What one input signature (dtypes and shapes of the cluster inputs) determines: the values
 * computed from shapes and constants alone, and the compiled program. Immutable once listed,
 * except `program`/`uncompilable`, which change under the plan's lock. */
enum { OUT_SHAPE_RANK = 8 }; /* outputs of higher rank are never aliased */

typedef struct sig_entry {
  struct sig_entry *next; /* LRU order, most recent first */
  struct plan *owner;
  uint64_t hash;
  int key_len;
  int64_t *key;           /* per input: dtype, rank, dims... */
  host_value *host;       /* per value: shape-derived host ints */
  mlxb_program *program;  /* NULL until first compiled Run */
  bool uncompilable;      /* tracing failed (data-dependent host read): always eager */
  char *trace_error;      /* why tracing failed (malloc'd), or NULL */
  bool trace_refused;     /* the last trace failed by a lowering's refusal (op_trace_refuse; under lock) */
  bool checks_known;      /* `checks` holds the rules of the traced program */
  /* Per output: ONNX dtype, rank, then OUT_SHAPE_RANK dims of the program's results (unset: rank -1),
   * known from the Run that made the entry: what find_aliases allocates before a program runs. */
  int64_t *out_shapes;
  /* The program traced for one output->input aliasing (op_output_alias), its map, and whether its
   * trace failed (the plain program then serves every Run). */
  mlxb_program *alias_program;
  int *alias_map;
  bool alias_uncompilable;
  check_list checks;      /* rules of the program's validity checks (its last output) */
  int refs;               /* 1 while listed + Runs in flight; freed at 0 */
} sig_entry;

/* Length buckets (buckets.c): which cluster inputs a decode step may pad, on which axis, and
 * which outputs then carry padding to trim. `full` pads every growing input (a KV cache that
 * grows with the mask); when only some of them grow in a loop (a fixed-size KV buffer, where only
 * the mask grows), a variant for that subset is analysed on first need and kept. */
typedef struct bucket_bound {
  int length_input; /* a padded input whose length, plus the pad, must stay <= ... */
  int within_input; /* ... dimension `axis` of this (unpadded) input */
  int axis;
} bucket_bound;

typedef struct bucket_variant {
  int n_padded;
  int *input_axis;  /* per cluster input: the padded axis, or -1 */
  int *output_axis; /* per cluster output: the axis to trim, or -1 */
  int n_bounds;
  bucket_bound *bounds;
  bool subset;      /* pads only the inputs that grew (order-preserving guard, see buckets.c) */
  bool *grew;       /* subset variants: per cluster input, whether it is one of those that grew */
} bucket_variant;

enum { BUCKET_MAX_SUBSETS = 4 };

typedef struct bucket_plan {
  bucket_variant full;   /* n_padded == 0 when nothing may be padded */
  bucket_variant *subsets[BUCKET_MAX_SUBSETS]; /* analysed on first need, under the plan's lock */
  int n_subsets;
  int64_t *last_lengths; /* per cluster input: its padded-axis length in the latest Run, -1 before (atomic) */
} bucket_plan;

/* A control-flow body compiled for host loops (op_call_body): one program per input signature
 * of the body (formal inputs and the enclosing graph's non-constant values it reads), traced on
 * first use and replayed per iteration. Listed on its frame under the plan's lock; immutable once
 * listed except `program`/`uncompilable`/`checks`, which change under the lock. */
typedef struct body_program {
  struct body_program *next;
  struct plan *owner;
  const struct graph_frame *frame;
  int key_len;
  int64_t *key;           /* per program input: dtype, rank, dims... */
  mlxb_program *program;  /* NULL until first called */
  bool uncompilable;      /* the body cannot be traced for this signature: lowered per iteration */
  bool trace_refused;     /* its trace failed by a lowering's refusal (op_trace_refuse; under lock) */
  bool checks_known;      /* `checks` holds the rules of the traced program */
  check_list checks;      /* rules of the program's validity checks (its last output) */
} body_program;

enum { BODY_PROGRAMS_MAX = 16 }; /* signatures compiled per body; more are lowered per iteration */

/* What Compile keeps of one graph a Run lowers: the cluster itself, or a control-flow body of
 * one of its nodes (nested bodies included). A body's ir_graph belongs to its node's graph. */
typedef struct graph_frame {
  ir_graph *g;
  const op_def **defs;       /* per node: the row that lowers it; NULL for a body not lowered
                                (the untaken branch of an If with a constant condition) */
  mlxb_array **const_arrays; /* per value: evaluated constant (in the plan's consts), or NULL */
  void **prepared;           /* per node: the state its row's prepare built at Compile, or NULL */
  int *outer;                /* bodies: per value, its index in the enclosing graph, or -1 */
  struct graph_frame ***bodies; /* per node: its n_subgraphs body frames, or NULL */
  char *why_not;             /* defs == NULL: why the body cannot be lowered */
  body_program *programs;    /* bodies: compiled for host loops (op_call_body), under the plan's lock */
  int n_programs;
} graph_frame;

struct plan {
  char *name;              /* fused node name, for messages */
  ir_graph *g;             /* owned snapshot of the cluster; constants no longer borrowed */
  const op_def **defs;     /* per node: the row that lowers it */
  mlxb_scope *consts;      /* owns the constant arrays */
  mlxb_array **const_arrays; /* per value: evaluated constant, or NULL */
  bool *shape_derived;     /* per value: a function of input shapes and constants only */
  plan_config cfg;
  bool compile;            /* cfg.compile resolved for the device */
  pthread_mutex_t lock;    /* guards the signature cache */
  bucket_plan buckets;
  graph_frame top;         /* the cluster as a frame: g, defs, const_arrays above, its prepared
                              states, and the bodies of its control-flow nodes */
  sig_entry *lru;
  int n_entries;
  plan_stats stats;        /* updated with atomics */
  int evals_short;         /* the last Run's eval took at most EVAL_SPIN_US: the next one spins
                              (outputs.c; atomics) */
  char first_trace_error[256]; /* the first signature's trace failure, "" while none (under lock) */
};

/* Prepare (execute.c, where op_ctx lives): runs the prepare of every node of f whose row has one,
 * filling f->prepared (allocated by the caller, n_nodes entries); arrays kept go into p->consts.
 * At Compile only, before any Run. -1 with d naming the node and op. */
int frame_prepare(plan *p, graph_frame *f, diag *d);

/* Signature cache (sigcache.c). */
/* Writes the key (per input: dtype, rank, dims...) into key[], which has room for
 * sum(2 + rank) entries. */
void sig_key_make(const rt_tensor *inputs, int n, int64_t *key, int *len, uint64_t *hash);
sig_entry *sig_lookup(plan *p, const int64_t *key, int len, uint64_t hash); /* +1 ref or NULL */
/* Lists a new entry (copying key, taking ownership of host); returns it with +1 ref, or NULL. */
sig_entry *sig_insert(plan *p, const int64_t *key, int len, uint64_t hash, host_value *host, int64_t *out_shapes);
void sig_release(plan *p, sig_entry *e); /* accepts NULL */
void sig_cache_clear(plan *p);
void host_values_free(host_value *h, int n);

/* Length buckets (buckets.c). */
int buckets_analyse(plan *p, diag *d);  /* fills p->buckets; -1 only when out of memory */
void buckets_free(bucket_plan *b);
/* The pad of this Run (0: run unpadded) and the variant that says which inputs it pads: once
 * lengths are seen to change between Runs, rounds the shortest padded input length up past the
 * next multiple of the bucket step, when the guards in buckets.c hold. */
int64_t buckets_pad(plan *p, const rt_tensor *inputs, int n_inputs, const bucket_variant **variant);
/* Writes in `out` each input as the program sees it; padded inputs get their dims from `dims`
 * (BUCKET_MAX_RANK entries per input). */
enum { BUCKET_MAX_RANK = 16, BUCKET_MAX_INPUTS = 1024 };
void buckets_padded_views(const bucket_variant *v, const rt_tensor *inputs, int n_inputs, int64_t pad, rt_tensor *out,
                          int64_t *dims);

#define PLAN_STAT_ADD(p, field, n) __atomic_add_fetch(&(p)->stats.field, (n), __ATOMIC_RELAXED)

#endif
