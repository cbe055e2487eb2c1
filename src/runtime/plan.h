/* A plan is the owned, compiled form of one cluster: its graph snapshot (nodes in topological
 * order, typed attributes), the op row of every node, and its constants uploaded to MLX and
 * evaluated once at Compile. Runs keep their state on the calling thread; the only shared mutable
 * part is the signature cache (host-known shape values and compiled programs per input
 * signature), guarded by the plan's lock, so any number of threads may execute one plan. */
#ifndef EP_MLX_PLAN_H
#define EP_MLX_PLAN_H

#include <stdint.h>

#include "graph/ir.h"
#include "mlx/bridge.h"

typedef struct plan plan;

/* Host view of one tensor crossing the cluster boundary. */
typedef struct rt_tensor {
  int32_t dtype;        /* ONNX data type */
  int rank;
  const int64_t *dims;
  const void *data;
} rt_tensor;

typedef enum plan_compile_mode {
  PLAN_COMPILE_OFF,     /* build and evaluate the MLX graph at every Run */
  PLAN_COMPILE_ON,      /* MLX compile() once per input signature, replay afterwards */
  PLAN_COMPILE_AUTO     /* ON on every device. CPU programs are traced without MLX's kernel
                           fusion (which would JIT-build each fused kernel with g++, seconds
                           each); replaying a trace costs no more than lowering every node */
} plan_compile_mode;

typedef struct plan_config {
  mlxb_device device;
  plan_compile_mode compile;
  int cache_size;       /* input signatures remembered per plan (LRU) */
  int bucket_step;      /* decode buckets: padded lengths are multiples of this; 0 = never pad */
  struct trace_sink *trace; /* borrowed: phases of every Run as Chrome-trace events, or NULL */
} plan_config;

typedef struct plan_stats {
  uint64_t runs;          /* plan_execute calls */
  uint64_t sig_hits;      /* Runs whose input signature was cached */
  uint64_t sig_misses;
  uint64_t evictions;     /* signatures dropped by the LRU */
  uint64_t traces;        /* MLX traces of the cluster (compile mode) */
  uint64_t fusion_traces; /* second traces of hot GPU programs, with MLX's fusion (mlxb_tracing_fused_again) */
  uint64_t trace_failures; /* signatures whose trace failed (they run eagerly from then on) */
  uint64_t unexpected_trace_failures; /* trace failures (cluster or body) no lowering refused by design
                                         (op_trace_refuse): a debug build fails the Run on them */
  uint64_t compiled_runs; /* Runs that replayed a compiled program */
  uint64_t eager_runs;    /* Runs that built the graph node by node */
  uint64_t host_reads;    /* values evaluated to read them on the host */
  uint64_t padded_runs;   /* Runs whose growing inputs were padded to a bucket (buckets.c) */
  uint64_t device_inputs; /* inputs bound from the EP's device memory without a copy */
  uint64_t host_inputs;   /* inputs read from host memory */
  uint64_t device_outputs; /* outputs written into the EP's device memory on the device */
  uint64_t host_outputs;  /* outputs copied into host memory */
  uint64_t inplace_outputs; /* outputs the program wrote in place into an input's buffer (no copy) */
  uint64_t program_copies;  /* device outputs copied by the program's own eval (mlxb_copy_into_device) */
  uint64_t computed_ahead; /* node outputs computed by an earlier node (op_compute_for), over every lowering */
  uint64_t checks;        /* validity checks of the largest Run (op_require; repeated ones counted once) */
  uint64_t first_run_us;  /* wall time of the plan's first Run (eager; kernel JIT included) */
  uint64_t trace_run_us;  /* wall time of the Runs that traced a program (trace and fused-kernel JIT) */
  uint64_t bind_us;       /* time binding inputs (copies, padding), summed over Runs */
  uint64_t graph_us;      /* time building the graph: lowering (eager) or replaying a program */
  uint64_t eval_us;       /* time in MLX's eval of the outputs (the device work, waited for) */
  uint64_t copy_us;       /* time copying outputs into ORT's buffers */
  uint64_t eager_ops;     /* operations of the largest graph a lowering built (a signature's first Run) */
  uint64_t program_ops;   /* operations of the largest compiled program's replay (sampled when traced) */
  uint64_t body_traces;   /* traces of control-flow bodies compiled for host loops (op_call_body) */
  uint64_t body_replays;  /* host-loop iterations that replayed a compiled body */
  uint64_t body_trace_failures; /* body signatures that cannot be traced (lowered per iteration) */
} plan_stats;

/* Asks the caller (the EP shell) for the buffer of output `index`; 0 ok, -1 with d set. */
typedef int (*rt_output_alloc_fn)(void *user, int index, int32_t dtype, const int64_t *dims, int rank,
                                  void **data, diag *d);

/* Takes ownership of g (freed with the plan, also on failure). Copies every borrowed constant. */
int plan_create(ir_graph *g, const plan_config *cfg, const char *name, plan **out, diag *d);
void plan_free(plan *p); /* accepts NULL */
int plan_num_inputs(const plan *p);
int plan_num_outputs(const plan *p);
const char *plan_name(const plan *p);
int plan_num_nodes(const plan *p);
void plan_get_stats(const plan *p, plan_stats *out);
/* The message of the plan's first trace failure into buf; "" when no trace failed. */
void plan_first_trace_failure(plan *p, char *buf, size_t len);

/* "name[axis], ..." of the inputs a decode step pads (buckets.c); "" when none. */
void plan_describe_buckets(const plan *p, char *buf, size_t len);

int plan_execute(plan *p, const rt_tensor *inputs, int n_inputs, rt_output_alloc_fn alloc, void *user, diag *d);

#endif
