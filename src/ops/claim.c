/* The claim side shared by every row: generic dtype checks and helpers for claim functions. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ops/op.h"

bool claim_decline(claim_ctx *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->reason, sizeof c->reason, fmt, ap);
  va_end(ap);
  return false;
}

const ir_value *claim_input(const claim_ctx *c, int i) { return ir_node_input(c->graph, c->node, i); }

const ir_value *claim_output(const claim_ctx *c, int i) { return ir_node_output(c->graph, c->node, i); }

int32_t claim_input_dtype(const claim_ctx *c, int i) {
  const ir_value *v = claim_input(c, i);
  return v ? v->dtype : ONNX_UNDEFINED;
}

bool claim_input_is_const(const claim_ctx *c, int i) {
  const ir_value *v = claim_input(c, i);
  return v && v->is_const && v->const_data;
}

int claim_const_ints(const claim_ctx *c, int i, int64_t *out, int max) {
  const ir_value *v = claim_input(c, i);
  if (!v || !v->is_const || !v->const_data) return -1;
  size_t esz = ir_dtype_size(v->dtype);
  if (!esz) return -1;
  size_t n = v->const_bytes / esz;
  if (n > (size_t)max) return -1;
  for (size_t k = 0; k < n; k++) {
    switch (v->dtype) {
      case ONNX_INT64: out[k] = ((const int64_t *)v->const_data)[k]; break;
      case ONNX_INT32: out[k] = ((const int32_t *)v->const_data)[k]; break;
      case ONNX_INT16: out[k] = ((const int16_t *)v->const_data)[k]; break;
      case ONNX_INT8: out[k] = ((const int8_t *)v->const_data)[k]; break;
      case ONNX_UINT8: out[k] = ((const uint8_t *)v->const_data)[k]; break;
      case ONNX_UINT16: out[k] = ((const uint16_t *)v->const_data)[k]; break;
      case ONNX_UINT32: out[k] = ((const uint32_t *)v->const_data)[k]; break;
      case ONNX_UINT64: out[k] = (int64_t)((const uint64_t *)v->const_data)[k]; break;
      case ONNX_BOOL: out[k] = ((const uint8_t *)v->const_data)[k] != 0; break;
      default: return -1;
    }
  }
  return (int)n;
}

static bool dtype_in_mlx(int32_t t) { return t != ONNX_UNDEFINED && op_mlx_dtype(t) >= 0; }

/* The row's arity, once for every lowering: the required leading values are present and no more
 * are listed than the op defines. `what` is "input" or "output". */
static bool arity_ok(claim_ctx *c, op_arity a, int n, const int *values, const char *what) {
  if (n > a.max) return claim_decline(c, "%d %ss listed, the op takes at most %d", n, what, a.max);
  for (int i = 0; i < a.min; i++)
    if (i >= n || values[i] < 0) return claim_decline(c, "%s %d is required and missing", what, i);
  return true;
}

bool op_claim_node(claim_ctx *c, const op_def *def) {
  const ir_node *n = c->node;
  if (n->n_subgraphs > 0 && !(def->flags & OP_FLAG_BODIES))
    return claim_decline(c, "has a subgraph (control flow is left to ORT)");
  if (!arity_ok(c, def->inputs, n->n_inputs, n->inputs, "input") ||
      !arity_ok(c, def->outputs, n->n_outputs, n->outputs, "output"))
    return false;
  for (int i = 0; i < n->n_inputs + n->n_outputs; i++) {
    const ir_value *v = i < n->n_inputs ? claim_input(c, i) : claim_output(c, i - n->n_inputs);
    if (!v || !v->is_sequence) continue;
    const char *what = i < n->n_inputs ? "input" : "output";
    int k = i < n->n_inputs ? i : i - n->n_inputs;
    if (!(def->flags & OP_FLAG_SEQUENCES)) return claim_decline(c, "%s %d is a sequence", what, k);
    if (!dtype_in_mlx(v->elem_dtype))
      return claim_decline(c, "%s %d is a sequence of %s tensors, which MLX lacks", what, k,
                           ir_dtype_name(v->elem_dtype));
  }
  if (!(def->flags & OP_FLAG_ANY_DTYPE)) {
    for (int i = 0; i < n->n_inputs; i++) {
      const ir_value *v = claim_input(c, i);
      if (v && v->is_sequence && (def->flags & OP_FLAG_SEQUENCES)) continue;
      if (v && !dtype_in_mlx(v->dtype))
        return claim_decline(c, "input %d has dtype %s, which MLX lacks", i, ir_dtype_name(v->dtype));
    }
    for (int i = 0; i < n->n_outputs; i++) {
      const ir_value *v = claim_output(c, i);
      if (v && v->is_sequence && (def->flags & OP_FLAG_SEQUENCES)) continue;
      if (v && !dtype_in_mlx(v->dtype))
        return claim_decline(c, "output %d has dtype %s, which MLX lacks", i, ir_dtype_name(v->dtype));
    }
  }
  if (def->dtypes && n->n_inputs > 0) {
    int32_t t = claim_input_dtype(c, 0);
    if (t != ONNX_UNDEFINED && !(def->dtypes & DT(t)))
      return claim_decline(c, "input 0 dtype %s is not supported by this op", ir_dtype_name(t));
  }
  return def->claim ? def->claim(c, def) : true;
}

static bool body_values_in_mlx(claim_ctx *c, const ir_graph *body, const char *attr) {
  for (int k = 0; k < body->n_inputs; k++) {
    const ir_value *v = &body->values[body->inputs[k]];
    if (!v->is_outer_scope && v->is_sequence)
      return claim_decline(c, "body '%s' input '%s' is a sequence (a body's inputs and outputs must be tensors)",
                           attr, v->name);
    if (!v->is_outer_scope && !dtype_in_mlx(v->dtype))
      return claim_decline(c, "body '%s' input '%s' has dtype %s, which MLX lacks", attr, v->name,
                           ir_dtype_name(v->dtype));
  }
  for (int k = 0; k < body->n_outputs; k++) {
    const ir_value *v = &body->values[body->outputs[k]];
    if (v->is_sequence)
      return claim_decline(c, "body '%s' output '%s' is a sequence (a body's inputs and outputs must be tensors)",
                           attr, v->name);
    if (!dtype_in_mlx(v->dtype))
      return claim_decline(c, "body '%s' output '%s' has dtype %s, which MLX lacks", attr, v->name,
                           ir_dtype_name(v->dtype));
  }
  return true;
}

bool claim_body(claim_ctx *c, const ir_graph *body, const char *attr) {
  if (!body) return claim_decline(c, "no body '%s'", attr);
  if (!body_values_in_mlx(c, body, attr)) return false;
  for (int i = 0; i < body->n_nodes; i++) {
    const ir_node *n = &body->nodes[i];
    claim_ctx inner = {.graph = body, .node = n, .device = c->device};
    if (!op_registry_claim(&inner))
      return claim_decline(c, "body '%s' node '%s' (%s): %s", attr, n->name, n->op_type, inner.reason);
  }
  return true;
}
