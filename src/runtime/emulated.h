/* Values of the dtypes MLX lacks (float8, int4/uint4, float4e2m1, int2/uint2) live in MLX as
 * uint8 arrays of their logical shape, one raw bit pattern per element; these move them across
 * the cluster boundary, where ORT packs sub-byte elements (low bits first). */
#ifndef EP_MLX_EMULATED_H
#define EP_MLX_EMULATED_H

#include "graph/ir.h"
#include "mlx/bridge.h"

/* An MLX uint8 array of codes from ORT's storage of n elements of dtype; NULL on error (in s). */
mlxb_array *emulated_upload(mlxb_scope *s, int32_t dtype, const void *storage, const int64_t *dims, int rank);
/* Writes the codes of an evaluated uint8 array into ORT's storage for dtype. 0 ok, -1 (error in s). */
int emulated_download(mlxb_scope *s, int32_t dtype, const mlxb_array *codes, void *storage, size_t storage_bytes);

#endif
