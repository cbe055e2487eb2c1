/* The op registry: one table whose rows answer both "can this node run on MLX exactly?" (claim)
 * and "build it in MLX" (lower). Each op family lives in one file of src/ops/ and exports one
 * table with OPS_FAMILY(); registry.c lists the families. The partitioner, the plan builder and
 * the generated docs/OPERATORS.md all read this table, so "claimed" always means "translatable". */
#ifndef EP_MLX_OP_H
#define EP_MLX_OP_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "graph/ir.h"
#include "mlx/bridge.h"

/* ---- dtype sets (bit n = ONNX data type n) ------------------------------------------------ */
#define DT(t) (1ull << (t))
#define DT_F32 DT(ONNX_FLOAT)
#define DT_F16 DT(ONNX_FLOAT16)
#define DT_BF16 DT(ONNX_BFLOAT16)
#define DT_F64 DT(ONNX_DOUBLE)
#define DT_BOOL DT(ONNX_BOOL)
#define DT_SINT (DT(ONNX_INT8) | DT(ONNX_INT16) | DT(ONNX_INT32) | DT(ONNX_INT64))
#define DT_UINT (DT(ONNX_UINT8) | DT(ONNX_UINT16) | DT(ONNX_UINT32) | DT(ONNX_UINT64))
#define DT_INT (DT_SINT | DT_UINT)
#define DT_FLOAT (DT_F32 | DT_F16 | DT_BF16 | DT_F64)
#define DT_NUMERIC (DT_FLOAT | DT_INT)
#define DT_ALL (DT_NUMERIC | DT_BOOL) /* every dtype MLX represents */

typedef struct op_def op_def;
typedef struct claim_ctx claim_ctx;
typedef struct op_ctx op_ctx;

/* ---- claiming (reads only the graph snapshot; never touches MLX) --------------------------- */
struct claim_ctx {
  const ir_graph *graph;
  const ir_node *node;
  mlxb_device device;  /* where the cluster will run */
  char reason[256];    /* why the node was declined */
};

/* Records why the node is declined and returns false. */
bool claim_decline(claim_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const ir_value *claim_input(const claim_ctx *c, int i);   /* NULL when absent */
const ir_value *claim_output(const claim_ctx *c, int i);  /* NULL when absent */
int32_t claim_input_dtype(const claim_ctx *c, int i);     /* ONNX_UNDEFINED when absent */
bool claim_input_is_const(const claim_ctx *c, int i);     /* initializer with data available */
/* Reads an integer constant input (any int dtype) into out[max]; returns count or -1. */
int claim_const_ints(const claim_ctx *c, int i, int64_t *out, int max);
/* Control flow: whether every node of `body` (nested bodies included) is claimed and every body
 * input and output has an MLX dtype; when not, declines naming the body node that blocks it. */
bool claim_body(claim_ctx *c, const ir_graph *body, const char *attr);

/* ---- lowering (runs while a cluster's MLX graph is built) ---------------------------------- */
mlxb_scope *op_scope(op_ctx *c);
const ir_node *op_node(const op_ctx *c);
const ir_graph *op_graph(const op_ctx *c);
int op_num_inputs(const op_ctx *c);
int op_num_outputs(const op_ctx *c);
bool op_has_input(const op_ctx *c, int i);
bool op_has_output(const op_ctx *c, int i);  /* output present (consumed or a graph output) */
mlxb_array *op_input(op_ctx *c, int i);      /* NULL when absent (no error is recorded) */
int32_t op_input_dtype(const op_ctx *c, int i);
int32_t op_output_dtype(const op_ctx *c, int i); /* from the graph; ONNX_UNDEFINED if unknown */
/* Integer values of input i read on the host: constants and shape-derived values are known
 * without evaluation; anything else is evaluated (data-dependent). Returns the count or -1. */
int op_input_ints(op_ctx *c, int i, int64_t *out, int max);
/* Same for floating-point scalars/vectors. */
int op_input_doubles(op_ctx *c, int i, double *out, int max);
/* Sets output i (a NULL array means a bridge error: returns op_check's failure). Fails when the
 * array's dtype differs from the dtype the graph declares for the output. 0 or -1. */
int op_set_output(op_ctx *c, int i, mlxb_array *a);
/* Marks an output as host-known (e.g. Shape's result) so consumers need no evaluation. */
int op_set_output_ints(op_ctx *c, int i, const int64_t *vals, int n, const int64_t *dims, int rank, int32_t dtype);
/* The state the row's prepare built for this node at Compile (see op_prepare_fn), or NULL. */
const void *op_prepared(const op_ctx *c);
/* The state the prepare of node n (of the graph being lowered) built, or NULL: a lowering that
 * computes ahead for siblings (op_compute_for) reads theirs. */
const void *op_prepared_of(const op_ctx *c, const ir_node *n);
/* The plan's array of constant value v of the graph being lowered (an initializer), or NULL. */
mlxb_array *op_const_value(const op_ctx *c, int v);
/* Computing ahead for a later node: siblings that read the same input computed by the first of
 * them, a constant bias add folded into the node that feeds it. op_compute_for sets the output of
 * node n (a single-output node of the graph being lowered, after this one); when n's turn comes
 * the runtime takes that array as its output instead of lowering n. Only while a cluster's own
 * graph is lowered (op_can_compute_for): inside control-flow bodies and prepare every node
 * computes its own. 0, or -1 with the failure recorded. */
bool op_can_compute_for(const op_ctx *c);
int op_compute_for(op_ctx *c, const ir_node *n, mlxb_array *a);
/* Prepare only: evaluates a (made contiguous) and keeps it with the plan's constants for the
 * plan's lifetime; returns the kept array, immutable and shared by every Run, or NULL on error. */
mlxb_array *op_prepare_keep(op_ctx *c, mlxb_array *a);
/* Whether every listed input is absent or a constant of the plan. */
bool op_inputs_const(const op_ctx *c, const int *inputs, int n);
/* Untrusted data: requires every element of `ok` (bool, any shape) to be true, or this Run fails
 * with "node 'n' (Op): <rule>", where "{}" in the rule becomes the broadcast `bad_value` (may be
 * NULL) at the first false element. The check is computed in the graph and evaluated with the
 * outputs (one small extra array per Run, also in compiled programs); it never reads data on the
 * host. Lowerings still bound their indices in the graph (the bridge clips every index it hands
 * MLX), so a violated check only decides the error. 0, or -1 on a bridge error. */
int op_require(op_ctx *c, mlxb_array *ok, mlxb_array *bad_value, const char *rule_fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* op_require for a check that nodes repeat on the same data (each of a decoder's attention layers
 * checks the same seqlens_k): the first with `key` is kept and later ones add nothing, so its rule
 * names the first node. The caller's key must fix the data and the rule (the graph value checked
 * and every bound). op_require_seen tells whether the key is kept already, so a caller can skip
 * building `ok`. Outside control-flow bodies only; inside one every check is its own. */
int op_require_once(op_ctx *c, const char *key, mlxb_array *ok, mlxb_array *bad_value, const char *rule_fmt, ...)
    __attribute__((format(printf, 5, 6)));
bool op_require_seen(const op_ctx *c, const char *key);
/* op_require (key NULL) or op_require_once (a key) for a check whose summary is built already
 * (mlxb_violation's int64 pair, e.g. mlxb_range_violation's). */
int op_require_summary(op_ctx *c, const char *key, mlxb_array *summary, const char *rule_fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* ---- control-flow bodies (If, Loop, Scan rows flagged OP_FLAG_BODIES) ----------------------
 * op_lower_body lowers the node's body `attr` into the same MLX graph: `inputs` bind the body's
 * formal inputs in order (n_inputs of them), values of enclosing graphs the body refers to are
 * the arrays they have in this Run (with their host values), and outputs[] receives the body's
 * n_outputs results. When `when` (a bool scalar) is given, every validity check the body records
 * (op_require) counts only where `when` is true: a branch computed but not taken (a traced If
 * with a runtime condition) never fails the Run. 0, or -1 with the failure recorded. */
const ir_graph *op_body(const op_ctx *c, const char *attr);
int op_lower_body(op_ctx *c, const char *attr, mlxb_array *const *inputs, int n_inputs, mlxb_array **outputs,
                  int n_outputs, mlxb_array *when);
/* Host loops: runs body `attr` from a program compiled once per input signature of the body and
 * replayed (instead of lowering it again every iteration). Returns 0 with outputs[] set; 1 when
 * the body is not run that way (inside a trace, compile off, or a body that cannot be traced, e.g.
 * one that reads a value on the host): the caller then uses op_lower_body; -1 on failure. The
 * call's validity checks are NOT recorded: *checks receives their summary (int64 [2k], NULL when
 * the body has none) and *rules what they mean; a loop may merge the summaries of successive
 * calls with the same *rules (the first violation of each check) and hands them over with
 * op_keep_body_checks, once, before the Run's outputs are evaluated. */
int op_call_body(op_ctx *c, const char *attr, mlxb_array *const *inputs, int n_inputs, mlxb_array **outputs,
                 int n_outputs, mlxb_array **checks, const void **rules);
int op_keep_body_checks(op_ctx *c, const void *rules, mlxb_array *summary);
/* ---- sequence values (rows flagged OP_FLAG_SEQUENCES) ---------------------------------------
 * A sequence of tensors lives in the Run as a list of MLX arrays. op_input_seq points *items at
 * input i's tensors (borrowed for the lowering) and returns their count, or -1 (recorded) when
 * input i is not a sequence of this Run. op_set_output_seq sets output i to a copy of the list
 * (the arrays are shared; MLX arrays are immutable); 0 or -1. */
int op_input_seq(op_ctx *c, int i, mlxb_array *const **items);
int op_set_output_seq(op_ctx *c, int i, mlxb_array *const *items, int n);
/* Makes s the scope the lowering builds in (op_scope) and returns the previous one: eager host
 * loops build each iteration in a scope of their own and free the one before, so memory stays
 * bounded by one iteration's state. Validity checks always live in the Run's scope. */
mlxb_scope *op_swap_scope(op_ctx *c, mlxb_scope *s);
/* Whether the Run is being traced into a compiled program (nothing may be evaluated). */
bool op_tracing(const op_ctx *c);
/* Evaluates arrays now (a host loop cutting its graph). Fails inside a trace. */
int op_eval(op_ctx *c, mlxb_array *const *arrays, int n);
/* Host integers of an array the lowering built (a Loop's condition): evaluates it, counted as a host
 * read. Fails inside a trace. Returns the count or -1. */
int op_read_ints(op_ctx *c, mlxb_array *a, int64_t *out, int max);
/* Whether input i's host integers are known without evaluating anything (a constant, or a value
 * of the signature computed from shapes and constants). */
bool op_input_known(const op_ctx *c, int i);
/* The input of this node whose buffer the caller also bound as output k's (onnxruntime-genai's
 * shared KV buffer: one device buffer is past and present), or -1. Only in a compiled Run that saw
 * it; the lowering may then write that output in place and set it to the input itself, and the
 * Run hands nothing back for it. Both must be the cluster's own input and output. */
int op_output_alias(const op_ctx *c, int k);

/* Records a failure (node and op are prefixed by the caller) and returns -1; when a bridge call
 * of this node failed already, its message is the one recorded (the cause, not a symptom). */
int op_fail(op_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* op_fail for a lowering that cannot be traced by design (called inside a compile trace only): a
 * value it must read on the host depends on data, a loop longer than a trace unrolls, unseeded
 * random draws, If branches of different shapes under a condition from data. The runtime then
 * runs that input signature eagerly in every build; any other failure of a trace is unexpected
 * and fails the Run in a debug build (built without NDEBUG). -1. */
int op_trace_refuse(op_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* -1 with the bridge's message when the scope has an error, else 0. */
int op_check(op_ctx *c);

/* Maps between ONNX and MLX dtypes; -1 when MLX has no such dtype. */
int op_mlx_dtype(int32_t onnx_dtype);
int32_t op_onnx_dtype(mlxb_dtype t);

/* ---- length padding (decode buckets, src/runtime/buckets.c) -------------------------------
 * To replay one compiled program across a decode loop, the runtime may pad the growing axis of
 * some cluster inputs (a KV cache's sequence axis, an attention mask's length) with `pad`
 * trailing zeros, the same `pad` for every padded input of a Run. A node sees such inputs only if
 * its row's `pad` rule accepts them: the rule gets the fact of every input and sets the fact of
 * every output, promising that the valid part of each output equals the unpadded result. */
typedef enum pad_kind {
  PAD_NONE = 0, /* the value is what it would be without padding */
  PAD_ROWS,     /* the unpadded value followed by `pad` zero rows along `axis` */
  PAD_LENGTH    /* integer tensor: element `axis` (0 for a scalar) is the unpadded value + pad */
} pad_kind;

typedef struct pad_fact {
  pad_kind kind;
  int axis;
} pad_fact;

/* A rule whose promise holds only while a padded length stays within a dimension of another
 * input (GroupQueryAttention over a fixed-size past buffer: its present keeps the buffer's length
 * while the padded total length fits in it) names them in *bound: node input `length` (a
 * PAD_LENGTH fact) must stay <= dimension `axis` of node input `within`. The runtime pads a Run
 * only when every bound holds. Defaults to {-1, -1, 0}: no bound. */
typedef struct pad_bound {
  int length;
  int within;
  int axis;
} pad_bound;

/* Called when at least one input fact is not PAD_NONE; in[]/out[] have n_inputs/n_outputs
 * entries (absent values PAD_NONE). Returns false when the node cannot take the padding. */
typedef bool (*op_pad_fn)(const ir_graph *g, const ir_node *n, const pad_fact *in, pad_fact *out, pad_bound *bound);

/* ---- a norm inside its readers' launch -------------------------------------------------------
 * A decoder's RMS norm often feeds sibling projections and nothing else (Q, K and V; gate and up).
 * A row whose lowering can normalize its own input inside its launch says so with lower_normed;
 * the norm node's lowering then hands its first reader n the norm (its input and arithmetic), and
 * the row lowers n and every other reader of the norm's output v ahead (op_compute_for), the norm
 * costing no launch of its own. op_normed: rows x [..., K], optional skip (the rows or a divisor
 * of them) and bias [K] added in float32, gamma [K], eps; with want_sum the row sets sum (x + skip
 * + bias rounded to x's dtype, the norm's residual output). The callback returns 1 when it does not
 * take this form (nothing recorded: the norm lowers as usual), 0 when it did, -1 on failure. */
typedef struct op_normed {
  mlxb_array *x, *skip, *bias, *gamma;
  float eps;
  bool want_sum;
  mlxb_array *sum;
} op_normed;
typedef int (*op_lower_normed_fn)(op_ctx *c, const op_def *def, const ir_node *n, int v, op_normed *norm);
/* The row lowering node n of the graph being lowered, or NULL. */
const op_def *op_def_of(const op_ctx *c, const ir_node *n);

/* ---- the table ---------------------------------------------------------------------------- */
typedef bool (*op_claim_fn)(claim_ctx *c, const op_def *def);
typedef int (*op_lower_fn)(op_ctx *c, const op_def *def);
/* Optional, run once per node when the plan is built (Compile), after the claim was re-checked
 * and the constants uploaded, never per Run: parses attributes and builds host-side tables and
 * arrays derived from constant inputs (op_prepare_keep) once. It sees the op_ctx of a lowering in
 * which only constant inputs have arrays (op_input is NULL for the others) and nothing may be set
 * as an output. *state (NULL on entry) is the node's state, owned by the plan, read by lowerings
 * through op_prepared(), and handed to the row's `release` when the plan is destroyed, also when
 * prepare failed (a partial state). Leaving *state NULL is fine (nothing to prepare: the lowering
 * then works from the node as usual). 0, or -1 with op_fail: Compile then fails, naming the node
 * and op. States are immutable after Compile (concurrent Runs read them without a lock); release
 * frees host memory only, the arrays kept by op_prepare_keep belong to the plan's constants. */
typedef int (*op_prepare_fn)(op_ctx *c, const op_def *def, void **state);
typedef void (*op_release_fn)(void *state);

enum {
  OP_FLAG_NONE = 0,
  OP_FLAG_ANY_DTYPE = 1 << 0,   /* op handles dtypes MLX lacks itself (Cast to int4, ...) */
  OP_FLAG_SHAPE_ONLY = 1 << 2,  /* outputs depend on input shapes only (Shape, Size) */
  OP_FLAG_RANDOM = 1 << 3,      /* outputs are not a function of the inputs (random draws) */
  OP_FLAG_BODIES = 1 << 4,      /* control flow (If, Loop, Scan): the row claims and lowers the
                                   node's bodies itself (claim_body, op_lower_body) */
  OP_FLAG_SEQUENCES = 1 << 5,   /* takes or gives sequence values (op_input_seq, op_set_output_seq);
                                   they never cross a cluster's boundary (partition.c) */
};

/* How many inputs (or outputs) a node of the row lists. The first `min` must be present (neither
 * missing nor an empty name); at most `max` may be listed, absent ones included. The generic claim
 * checks both, so a lowering takes inputs [0, min) as given and tests only the optional ones
 * (op_has_input). The bounds follow the op's schema over the row's opsets (the loosest of them).
 * A row that forgets them gets {0, 0} and declines every node with inputs, which its tests see. */
typedef struct op_arity {
  int min;
  int max; /* OP_VARIADIC: no limit */
} op_arity;

enum { OP_VARIADIC = INT_MAX };

struct op_def {
  const char *domain;  /* "" (ai.onnx), "com.microsoft", "ai.onnx.ml" */
  const char *op_type;
  int since_min;       /* opset range this row covers, inclusive */
  int since_max;
  op_arity inputs;     /* checked at claim, before dtypes and def->claim */
  op_arity outputs;
  uint64_t dtypes;     /* allowed dtypes of input 0 (DT_* set); 0 = no check */
  op_claim_fn claim;   /* extra checks; NULL = dtype and arity checks only */
  op_lower_fn lower;
  int arg;             /* per-row data for shared workers (e.g. an mlxb_unary_op) */
  unsigned flags;      /* OP_FLAG_* */
  const char *doc;     /* forms and constraints, for docs/OPERATORS.md */
  op_pad_fn pad;       /* optional: which padded inputs the lowering tolerates (above) */
  op_prepare_fn prepare; /* optional: per-node state built once at Compile (above) */
  op_release_fn release; /* frees a prepared state; NULL: nothing to free */
  op_lower_normed_fn lower_normed; /* optional: takes a norm's rows into its own launch (above) */
};

/* One row: the key positionally, everything else by name (fields left out are 0/NULL), e.g.
 *   OP_ROW("", "Relu", 14, 14, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_FLOAT,
 *          .lower = lower_relu, .doc = "float dtypes") */
#define OP_ROW(dom_, type_, from_, to_, ...) \
  { .domain = (dom_), .op_type = (type_), .since_min = (from_), .since_max = (to_), __VA_ARGS__ }

typedef struct op_family {
  const char *name;    /* file stem, e.g. "elementwise" */
  const op_def *defs;
  size_t count;
} op_family;

#define OPS_FAMILY(stem, table) \
  const op_family ops_family_##stem = {#stem, table, sizeof(table) / sizeof((table)[0])}

/* Finds the row for (domain, op_type, since_version); NULL when none. */
const op_def *op_registry_find(const char *domain, const char *op_type, int since_version);
/* Whether any row exists for (domain, op_type), whatever the opset. */
bool op_registry_knows(const char *domain, const char *op_type);
size_t op_registry_family_count(void);
const op_family *op_registry_family(size_t i);

/* Generic claim: dtype checks of the row plus every value MLX-representable, then def->claim. */
bool op_claim_node(claim_ctx *c, const op_def *def);
/* The first row covering the node that claims it (several rows may cover one op and opset, e.g.
 * a family for emulated dtypes beside the plain one); NULL with c->reason set when none does. */
const op_def *op_registry_claim(claim_ctx *c);

#endif
