/* The EP's CUDA kernels, one spec each (cuda_kernel_spec, bridge_internal.h), shared between the
 * files that define them and the self-check that compiles them all (bridge_kernels.cpp). Internal
 * to the bridge. */
#ifndef EP_MLX_BRIDGE_KERNEL_SPECS_H
#define EP_MLX_BRIDGE_KERNEL_SPECS_H

#include "mlx/bridge_internal.h"

namespace mlxb_detail {

/* attention (bridge_kernels_attention.cpp) */
extern const cuda_kernel_spec decode_attention_kernel, rows_attention_kernel, decode_step_kernel,
    decode_step_inplace_kernel, decode_merge_kernel, kv_append_kernel, kv_write_kernel;
/* quantized products (bridge_kernels_quant.cpp) */
extern const cuda_kernel_spec qgemv_kernel, dequant_f32_kernel, qgemm_split_kernel, qgemm_reduce_kernel,
    gather_bq_kernel;
/* norms and reductions (bridge_kernels.cpp) */
extern const cuda_kernel_spec rms_norm_kernel, rms_rows_kernel, int_reduce_kernel, range_check_kernel;

} // namespace mlxb_detail

#endif
