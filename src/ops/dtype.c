/* ONNX <-> MLX dtype mapping shared by claiming and lowering. */
#include "ops/op.h"

int op_mlx_dtype(int32_t t) {
  switch (t) {
    case ONNX_BOOL: return MLXB_BOOL;
    case ONNX_UINT8: return MLXB_U8;
    case ONNX_UINT16: return MLXB_U16;
    case ONNX_UINT32: return MLXB_U32;
    case ONNX_UINT64: return MLXB_U64;
    case ONNX_INT8: return MLXB_I8;
    case ONNX_INT16: return MLXB_I16;
    case ONNX_INT32: return MLXB_I32;
    case ONNX_INT64: return MLXB_I64;
    case ONNX_FLOAT16: return MLXB_F16;
    case ONNX_BFLOAT16: return MLXB_BF16;
    case ONNX_FLOAT: return MLXB_F32;
    case ONNX_DOUBLE: return MLXB_F64;
    case ONNX_COMPLEX64: return MLXB_C64;
    default: return -1;
  }
}

int32_t op_onnx_dtype(mlxb_dtype t) {
  static const int32_t map[MLXB_DTYPE_COUNT] = {
      [MLXB_BOOL] = ONNX_BOOL, [MLXB_U8] = ONNX_UINT8, [MLXB_U16] = ONNX_UINT16, [MLXB_U32] = ONNX_UINT32,
      [MLXB_U64] = ONNX_UINT64, [MLXB_I8] = ONNX_INT8, [MLXB_I16] = ONNX_INT16, [MLXB_I32] = ONNX_INT32,
      [MLXB_I64] = ONNX_INT64, [MLXB_F16] = ONNX_FLOAT16, [MLXB_BF16] = ONNX_BFLOAT16, [MLXB_F32] = ONNX_FLOAT,
      [MLXB_F64] = ONNX_DOUBLE, [MLXB_C64] = ONNX_COMPLEX64};
  return (unsigned)t < MLXB_DTYPE_COUNT ? map[t] : ONNX_UNDEFINED;
}
