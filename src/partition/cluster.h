/* Private to src/partition: groups the claimed nodes of a graph into convex clusters (no path
 * between two members of a cluster leaves it) whose condensed graph is acyclic, in time linear in
 * nodes plus edges. See cluster.c for the algorithm. */
#ifndef EP_MLX_CLUSTER_H
#define EP_MLX_CLUSTER_H

#include <stdbool.h>

#include "common/diag.h"
#include "graph/ir.h"

/* claimed[i] says whether node i may be fused. Writes cluster_of[i] (in [0, *n_clusters), or -1
 * for an unclaimed node); cluster ids are numbered in the order of their first node. Fails (with
 * a message in d) on allocation failure or when the graph has a cycle. */
int cluster_convex(const ir_graph *g, const bool *claimed, int *cluster_of, int *n_clusters, diag *d);

#endif
