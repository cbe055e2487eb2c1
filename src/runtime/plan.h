/* A plan is the owned, compiled form of one cluster: its graph snapshot (nodes in topological
 * order, typed attributes), the op row of every node, and its constants uploaded to MLX and
 * evaluated once at Compile. Plans are immutable after creation, so any number of threads may
 * execute one plan at the same time; all per-Run state lives on the executing thread. */
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

/* Asks the caller (the EP shell) for the buffer of output `index`; 0 ok, -1 with d set. */
typedef int (*rt_output_alloc_fn)(void *user, int index, int32_t dtype, const int64_t *dims, int rank,
                                  void **data, diag *d);

/* Takes ownership of g (freed with the plan, also on failure). Copies every borrowed constant. */
int plan_create(ir_graph *g, mlxb_device dev, const char *name, plan **out, diag *d);
void plan_free(plan *p); /* accepts NULL */
int plan_num_inputs(const plan *p);
int plan_num_outputs(const plan *p);
const char *plan_name(const plan *p);

int plan_execute(const plan *p, const rt_tensor *inputs, int n_inputs, rt_output_alloc_fn alloc, void *user, diag *d);

#endif
