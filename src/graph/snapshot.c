/* OrtGraph -> ir_graph. Every OrtStatus is checked and released; strings, shapes and attributes
 * are copied into the snapshot's arena, constant data is borrowed (see snapshot.h). */
#include "graph/snapshot.h"

#include <stdlib.h>
#include <string.h>

#include "common/strmap.h"

typedef struct builder {
  const OrtApi *api;
  ir_graph *g;
  int cap_values; /* allocated entries of g->values */
  diag *d;
} builder;

int32_t ir_dtype_from_ort(ONNXTensorElementDataType et) {
  switch (et) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT2: return ONNX_UINT2;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT2: return ONNX_INT2;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E8M0: return ONNX_FLOAT8E8M0;
    default: return (int32_t)et;
  }
}

int ir_ort_status_to_diag(const OrtApi *api, OrtStatus *st, diag *d, const char *what) {
  if (!st) return 0;
  diag_fail(d, "%s: %s", what, api->GetErrorMessage(st));
  api->ReleaseStatus(st);
  return -1;
}

#define ORT_CHECK(b, expr)                                                   \
  do {                                                                       \
    OrtStatus *st_ = (expr);                                                 \
    if (st_) return ir_ort_status_to_diag((b)->api, st_, (b)->d, #expr);     \
  } while (0)

static int read_type(builder *b, const OrtValueInfo *vi, ir_value *v) {
  const OrtTypeInfo *ti = NULL;
  enum ONNXType kind = ONNX_TYPE_UNKNOWN;
  const OrtTensorTypeAndShapeInfo *tsi = NULL;
  v->rank = -1;
  ORT_CHECK(b, b->api->GetValueInfoTypeInfo(vi, &ti));
  if (!ti) return 0;
  ORT_CHECK(b, b->api->GetOnnxTypeFromTypeInfo(ti, &kind));
  if (kind == ONNX_TYPE_SEQUENCE) { /* dtype stays undefined; a sequence of tensors keeps its element dtype */
    const OrtSequenceTypeInfo *sti = NULL;
    OrtTypeInfo *elem = NULL;
    enum ONNXType elem_kind = ONNX_TYPE_UNKNOWN;
    const OrtTensorTypeAndShapeInfo *elem_tsi = NULL;
    ONNXTensorElementDataType elem_et = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
    ORT_CHECK(b, b->api->CastTypeInfoToSequenceTypeInfo(ti, &sti));
    if (!sti) return 0;
    ORT_CHECK(b, b->api->GetSequenceElementType(sti, &elem));
    if (!elem) return 0;
    OrtStatus *st = b->api->GetOnnxTypeFromTypeInfo(elem, &elem_kind);
    if (!st && elem_kind == ONNX_TYPE_TENSOR) st = b->api->CastTypeInfoToTensorInfo(elem, &elem_tsi);
    if (!st && elem_tsi) st = b->api->GetTensorElementType(elem_tsi, &elem_et);
    b->api->ReleaseTypeInfo(elem);
    if (st) return ir_ort_status_to_diag(b->api, st, b->d, "sequence element type");
    if (elem_kind == ONNX_TYPE_TENSOR) {
      v->is_sequence = true;
      v->elem_dtype = ir_dtype_from_ort(elem_et);
    }
    return 0;
  }
  if (kind != ONNX_TYPE_TENSOR) return 0; /* maps, optionals: dtype stays undefined */
  ORT_CHECK(b, b->api->CastTypeInfoToTensorInfo(ti, &tsi));
  if (!tsi) return 0;
  ONNXTensorElementDataType et;
  size_t rank = 0;
  ORT_CHECK(b, b->api->GetTensorElementType(tsi, &et));
  ORT_CHECK(b, b->api->GetDimensionsCount(tsi, &rank));
  v->dtype = ir_dtype_from_ort(et);
  v->rank = (int)rank;
  v->dims = arena_alloc(b->g->mem, (rank ? rank : 1) * sizeof(int64_t));
  if (!v->dims) return diag_fail(b->d, "out of memory");
  if (rank) ORT_CHECK(b, b->api->GetDimensions(tsi, v->dims, rank));
  for (size_t i = 0; i < rank; i++)
    if (v->dims[i] < 0) v->dims[i] = -1;
  /* ORT reports a missing shape as zero dimensions; only a constant's rank 0 is certain. */
  bool is_const = false;
  ORT_CHECK(b, b->api->ValueInfo_IsConstantInitializer(vi, &is_const));
  if (rank == 0 && !is_const) v->rank = -1;
  return 0;
}

static int read_const(builder *b, const OrtValueInfo *vi, ir_value *v) {
  bool is_const = false;
  const OrtValue *ov = NULL;
  ORT_CHECK(b, b->api->ValueInfo_IsConstantInitializer(vi, &is_const));
  if (!is_const) return 0;
  ORT_CHECK(b, b->api->ValueInfo_GetInitializerValue(vi, &ov));
  if (!ov) return 0;
  v->is_const = true;
  if (v->dtype == ONNX_STRING || v->dtype == ONNX_UNDEFINED) return 0;
  const void *data = NULL;
  size_t bytes = 0;
  ORT_CHECK(b, b->api->GetTensorSizeInBytes(ov, &bytes));
  ORT_CHECK(b, b->api->GetTensorMutableData((OrtValue *)ov, (void **)&data));
  v->const_data = data;
  v->const_bytes = bytes;
  v->const_borrowed = true;
  return 0;
}

/* Returns the index of the value named by vi, creating it on first sight; -1 on failure. */
static int intern_value(builder *b, const OrtValueInfo *vi, int *out) {
  const char *name = NULL;
  *out = -1;
  ORT_CHECK(b, b->api->GetValueInfoName(vi, &name));
  if (!name || !*name) return 0; /* absent optional */
  int idx = strmap_get(b->g->name_index, name);
  if (idx >= 0) {
    *out = idx;
    return 0;
  }
  if (b->g->n_values == b->cap_values) {
    int cap = b->cap_values ? b->cap_values * 2 : 64;
    ir_value *nv = realloc(b->g->values, (size_t)cap * sizeof *nv);
    if (!nv) return diag_fail(b->d, "out of memory");
    b->g->values = nv;
    b->cap_values = cap;
  }
  idx = b->g->n_values++;
  ir_value *v = &b->g->values[idx];
  memset(v, 0, sizeof *v);
  v->producer = -1;
  v->name = arena_strdup(b->g->mem, name);
  if (!v->name) return diag_fail(b->d, "out of memory");
  bool is_out = false, req = false, opt = false, outer = false;
  ORT_CHECK(b, b->api->ValueInfo_IsGraphOutput(vi, &is_out));
  ORT_CHECK(b, b->api->ValueInfo_IsRequiredGraphInput(vi, &req));
  ORT_CHECK(b, b->api->ValueInfo_IsOptionalGraphInput(vi, &opt));
  ORT_CHECK(b, b->api->ValueInfo_IsFromOuterScope(vi, &outer));
  v->is_graph_output = is_out;
  v->is_graph_input = req || opt || outer;
  v->is_outer_scope = outer;
  if (read_type(b, vi, v) || read_const(b, vi, v)) return -1;
  if (strmap_put(b->g->name_index, v->name, idx)) return diag_fail(b->d, "out of memory");
  *out = idx;
  return 0;
}

static int read_value_list(builder *b, const OrtValueInfo *const *vis, size_t n, int *out) {
  for (size_t i = 0; i < n; i++) {
    out[i] = -1;
    if (vis[i] && intern_value(b, vis[i], &out[i])) return -1;
  }
  return 0;
}

static int read_tensor_attr(builder *b, const OrtOpAttr *attr, ir_attr *a) {
  OrtValue *ov = NULL;
  OrtTensorTypeAndShapeInfo *tsi = NULL;
  ORT_CHECK(b, b->api->OpAttr_GetTensorAttributeAsOrtValue(attr, &ov));
  int rc = -1;
  ONNXTensorElementDataType et;
  size_t rank = 0, bytes = 0;
  void *data = NULL;
  ir_tensor *t = arena_alloc(b->g->mem, sizeof *t);
  if (!t) {
    diag_fail(b->d, "out of memory");
    goto done;
  }
  OrtStatus *st = b->api->GetTensorTypeAndShape(ov, &tsi);
  if (!st) st = b->api->GetTensorElementType(tsi, &et);
  if (!st) st = b->api->GetDimensionsCount(tsi, &rank);
  if (st) {
    ir_ort_status_to_diag(b->api, st, b->d, "tensor attribute");
    goto done;
  }
  t->dtype = ir_dtype_from_ort(et);
  t->rank = (int)rank;
  t->dims = arena_alloc(b->g->mem, (rank ? rank : 1) * sizeof(int64_t));
  if (!t->dims) {
    diag_fail(b->d, "out of memory");
    goto done;
  }
  if (rank && (st = b->api->GetDimensions(tsi, t->dims, rank))) {
    ir_ort_status_to_diag(b->api, st, b->d, "tensor attribute dims");
    goto done;
  }
  if (t->dtype != ONNX_STRING) {
    if ((st = b->api->GetTensorSizeInBytes(ov, &bytes)) || (st = b->api->GetTensorMutableData(ov, &data))) {
      ir_ort_status_to_diag(b->api, st, b->d, "tensor attribute data");
      goto done;
    }
    t->data = arena_memdup(b->g->mem, data, bytes);
    t->bytes = bytes;
    if (!t->data) {
      diag_fail(b->d, "out of memory");
      goto done;
    }
  }
  a->tensor = t;
  rc = 0;
done:
  if (tsi) b->api->ReleaseTensorTypeAndShapeInfo(tsi);
  b->api->ReleaseValue(ov);
  return rc;
}

/* ReadOpAttr with a buffer sized by a first probing call (which reports the byte count). */
static void *read_attr_bytes(builder *b, const OrtOpAttr *attr, OrtOpAttrType type, size_t *bytes) {
  size_t need = 0;
  OrtStatus *st = b->api->ReadOpAttr(attr, type, NULL, 0, &need);
  if (st) b->api->ReleaseStatus(st); /* expected: buffer too small; `need` holds the size */
  *bytes = need;
  void *buf = arena_alloc(b->g->mem, need + 1);
  if (!buf) {
    diag_fail(b->d, "out of memory");
    return NULL;
  }
  if (need == 0) return buf;
  st = b->api->ReadOpAttr(attr, type, buf, need, bytes);
  if (st) {
    ir_ort_status_to_diag(b->api, st, b->d, "ReadOpAttr");
    return NULL;
  }
  return buf;
}

static int read_attr(builder *b, const OrtOpAttr *attr, ir_attr *a) {
  const char *name = NULL;
  OrtOpAttrType type = ORT_OP_ATTR_UNDEFINED;
  size_t got = 0;
  ORT_CHECK(b, b->api->OpAttr_GetName(attr, &name));
  ORT_CHECK(b, b->api->OpAttr_GetType(attr, &type));
  a->name = arena_strdup(b->g->mem, name);
  if (!a->name) return diag_fail(b->d, "out of memory");
  switch (type) {
    case ORT_OP_ATTR_INT:
      a->type = IR_ATTR_INT;
      ORT_CHECK(b, b->api->ReadOpAttr(attr, type, &a->i, sizeof a->i, &got));
      return 0;
    case ORT_OP_ATTR_FLOAT:
      a->type = IR_ATTR_FLOAT;
      ORT_CHECK(b, b->api->ReadOpAttr(attr, type, &a->f, sizeof a->f, &got));
      return 0;
    case ORT_OP_ATTR_INTS: {
      a->type = IR_ATTR_INTS;
      a->ints = read_attr_bytes(b, attr, type, &got);
      a->n = got / sizeof(int64_t);
      return a->ints ? 0 : -1;
    }
    case ORT_OP_ATTR_FLOATS: {
      a->type = IR_ATTR_FLOATS;
      a->floats = read_attr_bytes(b, attr, type, &got);
      a->n = got / sizeof(float);
      return a->floats ? 0 : -1;
    }
    case ORT_OP_ATTR_STRING: {
      a->type = IR_ATTR_STRING;
      char *s = read_attr_bytes(b, attr, type, &got);
      if (!s) return -1;
      s[got] = '\0';
      a->s = s;
      return 0;
    }
    case ORT_OP_ATTR_STRINGS: {
      a->type = IR_ATTR_STRINGS;
      char *s = read_attr_bytes(b, attr, type, &got);
      if (!s) return -1;
      size_t count = 0;
      for (size_t i = 0; i < got; i++) count += s[i] == '\0';
      a->strings = arena_alloc(b->g->mem, (count ? count : 1) * sizeof(char *));
      if (!a->strings) return diag_fail(b->d, "out of memory");
      for (size_t i = 0, start = 0; i < got; i++) {
        if (s[i] != '\0') continue;
        a->strings[a->n++] = s + start;
        start = i + 1;
      }
      return 0;
    }
    case ORT_OP_ATTR_TENSOR:
      a->type = IR_ATTR_TENSOR;
      return read_tensor_attr(b, attr, a);
    case ORT_OP_ATTR_GRAPH:
      a->type = IR_ATTR_GRAPH; /* bodies are read through Node_GetSubgraphs when needed */
      return 0;
    default:
      a->type = IR_ATTR_UNDEFINED;
      return 0;
  }
}

static int snapshot(const OrtApi *api, const OrtGraph *graph, const ir_node *parent, ir_graph **out, diag *d);

/* The bodies of a control-flow node, each snapshotted into its own ir_graph (recursively). */
static int read_subgraphs(builder *b, const OrtNode *on, ir_node *n) {
  size_t count = (size_t)n->n_subgraphs;
  if (!count) return 0;
  const OrtGraph **graphs = calloc(count, sizeof *graphs);
  const char **names = calloc(count, sizeof *names);
  n->subgraphs = arena_alloc(b->g->mem, count * sizeof *n->subgraphs);
  n->subgraph_attrs = arena_alloc(b->g->mem, count * sizeof *n->subgraph_attrs);
  int rc = -1;
  if (!graphs || !names || !n->subgraphs || !n->subgraph_attrs) {
    diag_fail(b->d, "out of memory");
    goto done;
  }
  memset(n->subgraphs, 0, count * sizeof *n->subgraphs);
  OrtStatus *st = b->api->Node_GetSubgraphs(on, graphs, count, names);
  if (st) {
    ir_ort_status_to_diag(b->api, st, b->d, "Node_GetSubgraphs");
    goto done;
  }
  for (size_t k = 0; k < count; k++) {
    n->subgraph_attrs[k] = arena_strdup(b->g->mem, names[k] ? names[k] : "");
    if (!n->subgraph_attrs[k]) {
      diag_fail(b->d, "out of memory");
      goto done;
    }
    if (snapshot(b->api, graphs[k], n, &n->subgraphs[k], b->d)) {
      diag_prefix(b->d, "body '%s': ", n->subgraph_attrs[k]);
      goto done;
    }
  }
  rc = 0;
done:
  free(graphs);
  free(names);
  return rc;
}

static int read_node(builder *b, const OrtNode *on, int index) {
  ir_node *n = &b->g->nodes[index];
  const char *name = NULL, *op = NULL, *domain = NULL;
  size_t n_in = 0, n_out = 0, n_impl = 0, n_attr = 0, n_sub = 0;
  ORT_CHECK(b, b->api->Node_GetName(on, &name));
  ORT_CHECK(b, b->api->Node_GetOperatorType(on, &op));
  ORT_CHECK(b, b->api->Node_GetDomain(on, &domain));
  ORT_CHECK(b, b->api->Node_GetSinceVersion(on, &n->since_version));
  ORT_CHECK(b, b->api->Node_GetNumInputs(on, &n_in));
  ORT_CHECK(b, b->api->Node_GetNumOutputs(on, &n_out));
  ORT_CHECK(b, b->api->Node_GetNumImplicitInputs(on, &n_impl));
  ORT_CHECK(b, b->api->Node_GetNumAttributes(on, &n_attr));
  ORT_CHECK(b, b->api->Node_GetNumSubgraphs(on, &n_sub));
  arena *m = b->g->mem;
  n->name = arena_strdup(m, name ? name : "");
  n->op_type = arena_strdup(m, op ? op : "");
  n->domain = arena_strdup(m, domain ? domain : "");
  n->n_subgraphs = (int)n_sub;
  size_t most = n_in > n_out ? n_in : n_out;
  if (n_impl > most) most = n_impl;
  if (n_attr > most) most = n_attr;
  const void **scratch = calloc(most ? most : 1, sizeof(void *));
  n->inputs = arena_alloc(m, (n_in + 1) * sizeof(int));
  n->outputs = arena_alloc(m, (n_out + 1) * sizeof(int));
  n->implicit_inputs = arena_alloc(m, (n_impl + 1) * sizeof(int));
  n->attrs = arena_alloc(m, (n_attr + 1) * sizeof(ir_attr));
  if (!scratch || !n->name || !n->op_type || !n->domain || !n->inputs || !n->outputs ||
      !n->implicit_inputs || !n->attrs) {
    free(scratch);
    return diag_fail(b->d, "out of memory");
  }
  int rc = 0;
  OrtStatus *st = NULL;
  n->n_inputs = (int)n_in;
  if (n_in && (st = b->api->Node_GetInputs(on, (const OrtValueInfo **)scratch, n_in))) goto status;
  if (read_value_list(b, (const OrtValueInfo *const *)scratch, n_in, n->inputs)) goto fail;
  n->n_outputs = (int)n_out;
  if (n_out && (st = b->api->Node_GetOutputs(on, (const OrtValueInfo **)scratch, n_out))) goto status;
  if (read_value_list(b, (const OrtValueInfo *const *)scratch, n_out, n->outputs)) goto fail;
  n->n_implicit_inputs = (int)n_impl;
  if (n_impl && (st = b->api->Node_GetImplicitInputs(on, (const OrtValueInfo **)scratch, n_impl))) goto status;
  if (read_value_list(b, (const OrtValueInfo *const *)scratch, n_impl, n->implicit_inputs)) goto fail;
  n->n_attrs = (int)n_attr;
  if (n_attr && (st = b->api->Node_GetAttributes(on, (const OrtOpAttr **)scratch, n_attr))) goto status;
  for (size_t i = 0; i < n_attr; i++)
    if (read_attr(b, (const OrtOpAttr *)scratch[i], &n->attrs[i])) goto fail;
  if (read_subgraphs(b, on, n)) goto fail;
  for (int i = 0; i < n->n_outputs; i++)
    if (n->outputs[i] >= 0) b->g->values[n->outputs[i]].producer = index;
  free(scratch);
  return 0;
status:
  ir_ort_status_to_diag(b->api, st, b->d, "reading node");
fail:
  rc = -1;
  free(scratch);
  diag_prefix(b->d, "node '%s' (%s): ", n->name ? n->name : "?", n->op_type ? n->op_type : "?");
  return rc;
}

static int read_graph_io(builder *b, const OrtGraph *graph, bool inputs) {
  size_t n = 0;
  if (inputs) ORT_CHECK(b, b->api->Graph_GetNumInputs(graph, &n));
  else ORT_CHECK(b, b->api->Graph_GetNumOutputs(graph, &n));
  const OrtValueInfo **vis = calloc(n ? n : 1, sizeof *vis);
  int *idx = arena_alloc(b->g->mem, (n + 1) * sizeof(int));
  if (!vis || !idx) {
    free(vis);
    return diag_fail(b->d, "out of memory");
  }
  OrtStatus *st = inputs ? b->api->Graph_GetInputs(graph, vis, n) : b->api->Graph_GetOutputs(graph, vis, n);
  int rc = st ? ir_ort_status_to_diag(b->api, st, b->d, "graph inputs/outputs")
              : read_value_list(b, (const OrtValueInfo *const *)vis, n, idx);
  free(vis);
  if (rc) return rc;
  int kept = 0;
  for (size_t i = 0; i < n; i++) {
    if (idx[i] < 0) continue;
    if (inputs && b->g->values[idx[i]].is_const) continue; /* initializer listed as an input */
    if (inputs && b->g->values[idx[i]].is_outer_scope) continue; /* a body's formal inputs only */
    idx[kept++] = idx[i];
  }
  if (inputs) {
    b->g->inputs = idx;
    b->g->n_inputs = kept;
  } else {
    b->g->outputs = idx;
    b->g->n_outputs = kept;
  }
  return 0;
}

static int read_opsets(builder *b, const OrtGraph *graph) {
  size_t n = 0;
  ORT_CHECK(b, b->api->Graph_GetNumOperatorSets(graph, &n));
  if (!n) return 0;
  const char **domains = calloc(n, sizeof *domains);
  int64_t *versions = calloc(n, sizeof *versions);
  int rc = 0;
  if (!domains || !versions) {
    rc = diag_fail(b->d, "out of memory");
  } else {
    OrtStatus *st = b->api->Graph_GetOperatorSets(graph, domains, versions, n);
    if (st) rc = ir_ort_status_to_diag(b->api, st, b->d, "Graph_GetOperatorSets");
    for (size_t i = 0; !rc && i < n; i++)
      if (!domains[i] || !*domains[i] || !strcmp(domains[i], "ai.onnx")) b->g->opset_onnx = (int)versions[i];
  }
  free(domains);
  free(versions);
  return rc;
}

static void count_consumers(ir_graph *g) {
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = &g->nodes[i];
    for (int k = 0; k < n->n_inputs; k++)
      if (n->inputs[k] >= 0) g->values[n->inputs[k]].n_consumers++;
    for (int k = 0; k < n->n_implicit_inputs; k++)
      if (n->implicit_inputs[k] >= 0) g->values[n->implicit_inputs[k]].n_consumers++;
  }
}

/* The name and op of a body's control-flow node: from the snapshot being read when known, else
 * from ORT (which may not know it yet while it partitions the innermost bodies). */
static int read_parent(builder *b, const OrtGraph *graph, const ir_node *known) {
  const OrtNode *parent = NULL;
  const char *name = known ? known->name : NULL, *op = known ? known->op_type : NULL;
  if (!known) {
    OrtStatus *st = b->api->Graph_GetParentNode(graph, &parent);
    if (st) return ir_ort_status_to_diag(b->api, st, b->d, "Graph_GetParentNode");
    if (parent && ((st = b->api->Node_GetName(parent, &name)) || (st = b->api->Node_GetOperatorType(parent, &op))))
      return ir_ort_status_to_diag(b->api, st, b->d, "parent node");
  }
  b->g->is_subgraph = known || parent;
  b->g->parent_name = arena_strdup(b->g->mem, name ? name : "");
  b->g->parent_op = arena_strdup(b->g->mem, op ? op : "");
  return b->g->parent_name && b->g->parent_op ? 0 : diag_fail(b->d, "out of memory");
}

int ir_graph_from_ort(const OrtApi *api, const OrtGraph *graph, ir_graph **out, diag *d) {
  return snapshot(api, graph, NULL, out, d);
}

static int snapshot(const OrtApi *api, const OrtGraph *graph, const ir_node *parent_node, ir_graph **out, diag *d) {
  *out = NULL;
  builder b = {api, calloc(1, sizeof(ir_graph)), 0, d};
  size_t n_nodes = 0;
  const OrtNode **nodes = NULL;
  if (!b.g) return diag_fail(d, "out of memory");
  b.g->mem = arena_create();
  b.g->name_index = strmap_create(256);
  if (!b.g->mem || !b.g->name_index) goto oom;
  OrtStatus *st = api->Graph_GetNumNodes(graph, &n_nodes);
  if (st) {
    ir_ort_status_to_diag(api, st, d, "Graph_GetNumNodes");
    goto fail;
  }
  nodes = calloc(n_nodes ? n_nodes : 1, sizeof *nodes);
  b.g->nodes = arena_alloc(b.g->mem, (n_nodes + 1) * sizeof(ir_node));
  if (!nodes || !b.g->nodes) goto oom;
  memset(b.g->nodes, 0, (n_nodes + 1) * sizeof(ir_node)); /* ir_graph_free reads bodies of every node */
  if (n_nodes && (st = api->Graph_GetNodes(graph, nodes, n_nodes))) {
    ir_ort_status_to_diag(api, st, d, "Graph_GetNodes");
    goto fail;
  }
  b.g->n_nodes = (int)n_nodes;
  if (read_graph_io(&b, graph, true)) goto fail;
  for (size_t i = 0; i < n_nodes; i++)
    if (read_node(&b, nodes[i], (int)i)) goto fail;
  if (read_graph_io(&b, graph, false) || read_opsets(&b, graph)) goto fail;
  if (read_parent(&b, graph, parent_node)) goto fail;
  count_consumers(b.g);
  free(nodes);
  *out = b.g;
  return 0;
oom:
  diag_fail(d, "out of memory");
fail:
  free(nodes);
  ir_graph_free(b.g);
  return -1;
}
