/* The rotary rotation shared by the RotaryEmbedding ops (rotary.c, which defines it) and
 * GroupQueryAttention's do_rotary (attention.c). */
#ifndef EP_MLX_ROTARY_H
#define EP_MLX_ROTARY_H

#include <stdbool.h>
#include <stdint.h>

#include "mlx/bridge.h"

/* Rotates the first rot_dim channels of x's last axis; cos and sin hold rot_dim / 2 values on
 * their last axis and broadcast against x's other axes. Half-precision inputs are computed in
 * float32 and rounded once, as MLAS's rotary kernel does; float32 stays float32. */
mlxb_array *rotary_embed(mlxb_scope *s, mlxb_array *x, mlxb_array *cos, mlxb_array *sin, int64_t rot_dim,
                         bool interleaved);

#endif
