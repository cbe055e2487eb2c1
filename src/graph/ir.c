/* Queries over the owned graph snapshot: attribute lookup, dtype facts, value lookup. */
#include "graph/ir.h"

#include <stdlib.h>
#include <string.h>

#include "common/strmap.h"

void ir_graph_free(ir_graph *g) {
  if (!g) return;
  for (int i = 0; i < g->n_nodes; i++) /* bodies of control-flow nodes (their own arenas) */
    for (int k = 0; g->nodes && g->nodes[i].subgraphs && k < g->nodes[i].n_subgraphs; k++)
      ir_graph_free(g->nodes[i].subgraphs[k]);
  strmap_free(g->name_index);
  free(g->values); /* grown with realloc while reading */
  arena_free(g->mem);
  free(g);
}

int ir_graph_find_value(const ir_graph *g, const char *name) {
  if (!g->name_index || !name) return -1;
  return strmap_get(g->name_index, name);
}

const ir_graph *ir_node_subgraph(const ir_node *n, const char *attr) {
  for (int k = 0; n->subgraphs && k < n->n_subgraphs; k++)
    if (n->subgraph_attrs[k] && !strcmp(n->subgraph_attrs[k], attr)) return n->subgraphs[k];
  return NULL;
}

const ir_attr *ir_node_attr(const ir_node *n, const char *name) {
  for (int i = 0; i < n->n_attrs; i++)
    if (!strcmp(n->attrs[i].name, name)) return &n->attrs[i];
  return NULL;
}

int64_t ir_attr_int(const ir_node *n, const char *name, int64_t dflt) {
  const ir_attr *a = ir_node_attr(n, name);
  return a && a->type == IR_ATTR_INT ? a->i : dflt;
}

float ir_attr_float(const ir_node *n, const char *name, float dflt) {
  const ir_attr *a = ir_node_attr(n, name);
  if (a && a->type == IR_ATTR_FLOAT) return a->f;
  if (a && a->type == IR_ATTR_INT) return (float)a->i;
  return dflt;
}

const char *ir_attr_string(const ir_node *n, const char *name, const char *dflt) {
  const ir_attr *a = ir_node_attr(n, name);
  return a && a->type == IR_ATTR_STRING ? a->s : dflt;
}

size_t ir_attr_ints(const ir_node *n, const char *name, const int64_t **out) {
  const ir_attr *a = ir_node_attr(n, name);
  *out = NULL;
  if (!a || a->type != IR_ATTR_INTS) return 0;
  *out = a->ints;
  return a->n;
}

size_t ir_attr_floats(const ir_node *n, const char *name, const float **out) {
  const ir_attr *a = ir_node_attr(n, name);
  *out = NULL;
  if (!a || a->type != IR_ATTR_FLOATS) return 0;
  *out = a->floats;
  return a->n;
}

size_t ir_dtype_size(int32_t dtype) {
  switch (dtype) {
    case ONNX_BOOL: case ONNX_INT8: case ONNX_UINT8:
    case ONNX_FLOAT8E4M3FN: case ONNX_FLOAT8E4M3FNUZ: case ONNX_FLOAT8E5M2: case ONNX_FLOAT8E5M2FNUZ:
    case ONNX_FLOAT8E8M0:
      return 1;
    case ONNX_INT16: case ONNX_UINT16: case ONNX_FLOAT16: case ONNX_BFLOAT16: return 2;
    case ONNX_INT32: case ONNX_UINT32: case ONNX_FLOAT: return 4;
    case ONNX_INT64: case ONNX_UINT64: case ONNX_DOUBLE: case ONNX_COMPLEX64: return 8;
    case ONNX_COMPLEX128: return 16;
    default: return 0;
  }
}

const char *ir_dtype_name(int32_t dtype) {
  static const char *const names[ONNX_DTYPE_MAX] = {
      "undefined", "float32", "uint8", "int8", "uint16", "int16", "int32", "int64", "string", "bool",
      "float16", "float64", "uint32", "uint64", "complex64", "complex128", "bfloat16",
      "float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz", "uint4", "int4", "float4e2m1",
      "float8e8m0", "uint2", "int2"};
  return dtype >= 0 && dtype < ONNX_DTYPE_MAX ? names[dtype] : "unknown";
}

int ir_dtype_emulated_bits(int32_t dtype) {
  switch (dtype) {
    case ONNX_FLOAT8E4M3FN: case ONNX_FLOAT8E4M3FNUZ: case ONNX_FLOAT8E5M2: case ONNX_FLOAT8E5M2FNUZ:
    case ONNX_FLOAT8E8M0:
      return 8;
    case ONNX_INT4: case ONNX_UINT4: case ONNX_FLOAT4E2M1: return 4;
    case ONNX_INT2: case ONNX_UINT2: return 2;
    default: return 0;
  }
}

size_t ir_dtype_storage_bytes(int32_t dtype, int64_t n) {
  if (n < 0) return 0;
  int bits = ir_dtype_emulated_bits(dtype);
  if (bits) return (size_t)((n * bits + 7) / 8);
  return (size_t)n * ir_dtype_size(dtype);
}

int64_t ir_value_static_size(const ir_value *v) {
  if (v->rank < 0) return -1;
  int64_t n = 1;
  for (int i = 0; i < v->rank; i++) {
    if (v->dims[i] < 0) return -1;
    if (__builtin_mul_overflow(n, v->dims[i], &n)) return -1; /* declared dims past int64: not a size */
  }
  return n;
}

const ir_value *ir_node_input(const ir_graph *g, const ir_node *n, int i) {
  if (i < 0 || i >= n->n_inputs || n->inputs[i] < 0) return NULL;
  return &g->values[n->inputs[i]];
}

const ir_value *ir_node_output(const ir_graph *g, const ir_node *n, int i) {
  if (i < 0 || i >= n->n_outputs || n->outputs[i] < 0) return NULL;
  return &g->values[n->outputs[i]];
}
