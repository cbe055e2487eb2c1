/* The owned graph snapshot: values, nodes and typed attributes copied out of an OrtGraph, so that
 * nothing borrowed from ORT is needed after the call that handed the graph over. One arena owns
 * every string and array of a graph. Constant (initializer) data is either borrowed for the
 * duration of the ORT call (`const_data`, flagged by `const_borrowed`) or copied into the arena. */
#ifndef EP_MLX_IR_H
#define EP_MLX_IR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/arena.h"
#include "common/diag.h"

/* ONNX TensorProto.DataType values. */
enum {
  ONNX_UNDEFINED = 0, ONNX_FLOAT = 1, ONNX_UINT8 = 2, ONNX_INT8 = 3, ONNX_UINT16 = 4, ONNX_INT16 = 5,
  ONNX_INT32 = 6, ONNX_INT64 = 7, ONNX_STRING = 8, ONNX_BOOL = 9, ONNX_FLOAT16 = 10, ONNX_DOUBLE = 11,
  ONNX_UINT32 = 12, ONNX_UINT64 = 13, ONNX_COMPLEX64 = 14, ONNX_COMPLEX128 = 15, ONNX_BFLOAT16 = 16,
  ONNX_FLOAT8E4M3FN = 17, ONNX_FLOAT8E4M3FNUZ = 18, ONNX_FLOAT8E5M2 = 19, ONNX_FLOAT8E5M2FNUZ = 20,
  ONNX_UINT4 = 21, ONNX_INT4 = 22, ONNX_FLOAT4E2M1 = 23, ONNX_FLOAT8E8M0 = 24, ONNX_UINT2 = 25,
  ONNX_INT2 = 26, ONNX_DTYPE_MAX = 27
};

typedef struct ir_tensor {
  int32_t dtype;   /* ONNX data type */
  int rank;
  int64_t *dims;   /* rank entries */
  const void *data; /* row-major elements (packed for sub-byte types) */
  size_t bytes;
} ir_tensor;

typedef enum ir_attr_type {
  IR_ATTR_UNDEFINED, IR_ATTR_FLOAT, IR_ATTR_INT, IR_ATTR_STRING, IR_ATTR_FLOATS, IR_ATTR_INTS,
  IR_ATTR_STRINGS, IR_ATTR_TENSOR, IR_ATTR_GRAPH
} ir_attr_type;

typedef struct ir_attr {
  const char *name;
  ir_attr_type type;
  int64_t i;            /* IR_ATTR_INT */
  float f;              /* IR_ATTR_FLOAT */
  const char *s;        /* IR_ATTR_STRING (NUL-terminated copy) */
  size_t n;             /* element count of ints/floats/strings */
  int64_t *ints;        /* IR_ATTR_INTS */
  float *floats;        /* IR_ATTR_FLOATS */
  const char **strings; /* IR_ATTR_STRINGS */
  ir_tensor *tensor;    /* IR_ATTR_TENSOR (data copied into the arena) */
} ir_attr;

typedef struct ir_value {
  const char *name;
  int32_t dtype;       /* ONNX data type; ONNX_UNDEFINED when not a tensor or unknown */
  int rank;            /* -1 when unknown (ORT cannot tell a missing shape from rank 0) */
  int64_t *dims;       /* rank entries; -1 marks a dynamic dimension */
  int producer;        /* index of the producing node, -1 for graph inputs and constants */
  int n_consumers;     /* nodes reading this value (implicit inputs included) */
  bool is_graph_input;
  bool is_graph_output;
  bool is_outer_scope; /* a control-flow body's reference to a value of an enclosing graph */
  bool is_const;       /* initializer or Constant-free constant known at partition time */
  bool is_optional_absent;
  bool is_sequence;    /* a sequence of tensors of dtype elem_dtype (dtype stays ONNX_UNDEFINED, so
                          only rows flagged OP_FLAG_SEQUENCES take it) */
  int32_t elem_dtype;  /* sequences: the element tensors' dtype (ONNX_UNDEFINED when unknown) */
  const void *const_data; /* constant elements, or NULL when not kept */
  size_t const_bytes;
  bool const_borrowed; /* const_data points into ORT memory valid only during the ORT call */
} ir_value;

typedef struct ir_node {
  const char *name;
  const char *op_type;
  const char *domain;  /* "" for ai.onnx */
  int since_version;
  int n_inputs;
  int *inputs;         /* value indices; -1 for an absent optional input */
  int n_outputs;
  int *outputs;        /* value indices; -1 for an absent optional output */
  int n_attrs;
  ir_attr *attrs;
  int n_implicit_inputs;
  int *implicit_inputs;
  int n_subgraphs;     /* > 0 for If/Loop/Scan and friends */
  struct ir_graph **subgraphs;   /* n_subgraphs bodies, owned by the node's graph (NULL entries
                                    only while reading) */
  const char **subgraph_attrs;   /* per body: its attribute name ("then_branch", "body") */
} ir_node;

typedef struct ir_graph {
  arena *mem;           /* owns everything below */
  int n_values;
  ir_value *values;
  int n_nodes;
  ir_node *nodes;       /* topological order */
  int n_inputs;
  int *inputs;          /* non-constant graph inputs, in graph order */
  int n_outputs;
  int *outputs;
  int opset_onnx;       /* ai.onnx opset imported by the model (0 when unknown) */
  bool is_subgraph;     /* body of a control-flow node (If/Loop/Scan) */
  const char *parent_name; /* for a body: the control-flow node's name and op ("" when unknown) */
  const char *parent_op;
  void *name_index;     /* private: name -> value index */
} ir_graph;

void ir_graph_free(ir_graph *g); /* accepts NULL */
int ir_graph_find_value(const ir_graph *g, const char *name); /* -1 when absent */
/* The body of node n held in attribute `attr` ("then_branch", "body"); NULL when absent. */
const ir_graph *ir_node_subgraph(const ir_node *n, const char *attr);

/* Attribute lookup; the default is returned when the attribute is absent or of another type. */
const ir_attr *ir_node_attr(const ir_node *n, const char *name);
int64_t ir_attr_int(const ir_node *n, const char *name, int64_t dflt);
float ir_attr_float(const ir_node *n, const char *name, float dflt);
const char *ir_attr_string(const ir_node *n, const char *name, const char *dflt);
/* Returns the element count (0 when absent) and points *out at the elements. */
size_t ir_attr_ints(const ir_node *n, const char *name, const int64_t **out);
size_t ir_attr_floats(const ir_node *n, const char *name, const float **out);

/* Element size in bytes of an ONNX data type; 0 for strings, sub-byte and unknown types. */
size_t ir_dtype_size(int32_t dtype);
/* Bits per element of the dtypes MLX lacks and the EP emulates on bit patterns (float8 and
 * float8e8m0: 8; int4, uint4, float4e2m1: 4; int2, uint2: 2), else 0. Inside MLX such a value is a
 * uint8 array of its logical shape holding one raw code per element. */
int ir_dtype_emulated_bits(int32_t dtype);
/* Bytes ORT uses for n elements of dtype (sub-byte types packed, low bits first); 0 if unknown. */
size_t ir_dtype_storage_bytes(int32_t dtype, int64_t n);
const char *ir_dtype_name(int32_t dtype);
/* Element count of a value with fully static shape, or -1. */
int64_t ir_value_static_size(const ir_value *v);

/* Convenience accessors for node inputs/outputs (NULL when absent or out of range). */
const ir_value *ir_node_input(const ir_graph *g, const ir_node *n, int i);
const ir_value *ir_node_output(const ir_graph *g, const ir_node *n, int i);

#endif
