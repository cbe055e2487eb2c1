/* Claiming and clustering: asks the op registry about every node of a graph snapshot and groups
 * the claimed nodes into convex clusters (no unclaimed node on a path between two members), each
 * of which becomes one fused node in ORT and one MLX graph in the runtime. */
#ifndef EP_MLX_PARTITION_H
#define EP_MLX_PARTITION_H

#include <stdio.h>

#include "graph/ir.h"
#include "mlx/bridge.h"
#include "ops/op.h"

typedef struct partition {
  int n_nodes;
  const op_def **defs;  /* per node: the claiming row, NULL when declined */
  char **reasons;       /* per node: why it was declined (NULL when claimed) */
  int *cluster_of;      /* per node: cluster index in [0, n_clusters) or -1 */
  int n_clusters;
} partition;

/* skip[i] (may be NULL) marks nodes that must not be claimed (already assigned elsewhere). */
int partition_graph(const ir_graph *g, mlxb_device dev, const bool *skip, partition **out, diag *d);
void partition_free(partition *p); /* accepts NULL */
/* Human-readable claim report: claimed/declined per op type with reasons, and the clusters. */
void partition_write_report(const ir_graph *g, const partition *p, const char *title, FILE *f);

#endif
