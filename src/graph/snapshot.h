/* Reads an OrtGraph into an owned ir_graph. Constant initializer data is borrowed
 * (ir_value.const_borrowed): valid only until the ORT call that handed over the graph returns;
 * whoever keeps constants past that call copies them. */
#ifndef EP_MLX_SNAPSHOT_H
#define EP_MLX_SNAPSHOT_H

#include <onnxruntime_c_api.h>

#include "graph/ir.h"

int ir_graph_from_ort(const OrtApi *api, const OrtGraph *graph, ir_graph **out, diag *d);

/* The ONNX data type of an ORT element type. ORT numbers its newest types in another order than
 * ONNX (uint2, int2, float8e8m0 are 24, 25, 26 in ORT and 25, 26, 24 in ONNX); all else agree. */
int32_t ir_dtype_from_ort(ONNXTensorElementDataType et);

/* Turns a non-NULL OrtStatus into a diag failure (releasing the status); returns -1. */
int ir_ort_status_to_diag(const OrtApi *api, OrtStatus *st, diag *d, const char *what);

#endif
