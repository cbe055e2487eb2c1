/* Plan internals shared by plan.c (creation) and execute.c (Run); not for other layers. */
#ifndef EP_MLX_PLAN_INTERNAL_H
#define EP_MLX_PLAN_INTERNAL_H

#include "ops/op.h"
#include "runtime/plan.h"

/* Integer constants up to this many elements keep a host copy for op_input_ints. */
enum { PLAN_HOST_CONST_MAX = 4096 };

struct plan {
  char *name;              /* fused node name, for messages */
  ir_graph *g;             /* owned snapshot of the cluster; constants no longer borrowed */
  const op_def **defs;     /* per node: the row that lowers it */
  mlxb_scope *consts;      /* owns the constant arrays */
  mlxb_array **const_arrays; /* per value: evaluated constant, or NULL */
  mlxb_device device;
};

#endif
