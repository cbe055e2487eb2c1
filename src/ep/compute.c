/* OrtNodeComputeInfo: the per-fused-node entry ORT calls at Run. Compute turns ORT's input
 * OrtValues into host views, runs the plan on the calling thread and lets the plan write its
 * outputs straight into buffers ORT allocates with the computed shapes. */
#include <stdlib.h>
#include <string.h>

#include "ep/ep_internal.h"
#include "graph/snapshot.h"

enum { MAX_RANK = 64, MAX_STACK_INPUTS = 16 };

typedef struct compute_io {
  const ep_runtime *rt;
  OrtKernelContext *ctx;
} compute_io;

static int alloc_output(void *user, int index, int32_t dtype, const int64_t *dims, int rank, void **data, diag *d) {
  compute_io *io = user;
  OrtValue *out = NULL;
  OrtStatus *st = io->rt->api->KernelContext_GetOutput(io->ctx, (size_t)index, dims, (size_t)rank, &out);
  if (st) return ir_ort_status_to_diag(io->rt->api, st, d, "KernelContext_GetOutput");
  st = io->rt->api->GetTensorMutableData(out, data);
  if (st) return ir_ort_status_to_diag(io->rt->api, st, d, "GetTensorMutableData");
  return 0;
}

typedef struct input_view {
  rt_tensor t;
  int64_t dims[MAX_RANK];
} input_view;

static int read_input(const ep_runtime *rt, OrtKernelContext *ctx, size_t i, input_view *v, diag *d) {
  const OrtValue *val = NULL;
  OrtTensorTypeAndShapeInfo *info = NULL;
  OrtStatus *st = rt->api->KernelContext_GetInput(ctx, i, &val);
  if (st) return ir_ort_status_to_diag(rt->api, st, d, "KernelContext_GetInput");
  if (!val) return diag_fail(d, "input %zu is missing", i);
  ONNXTensorElementDataType et;
  size_t rank = 0;
  if ((st = rt->api->GetTensorTypeAndShape(val, &info))) return ir_ort_status_to_diag(rt->api, st, d, "input type");
  if (!(st = rt->api->GetTensorElementType(info, &et)) && !(st = rt->api->GetDimensionsCount(info, &rank))) {
    if (rank > MAX_RANK) {
      rt->api->ReleaseTensorTypeAndShapeInfo(info);
      return diag_fail(d, "input %zu has rank %zu (at most %d)", i, rank, MAX_RANK);
    }
    st = rt->api->GetDimensions(info, v->dims, rank);
  }
  rt->api->ReleaseTensorTypeAndShapeInfo(info);
  if (st) return ir_ort_status_to_diag(rt->api, st, d, "input shape");
  void *data = NULL;
  if ((st = rt->api->GetTensorMutableData((OrtValue *)val, &data))) return ir_ort_status_to_diag(rt->api, st, d, "input data");
  v->t.dtype = ir_dtype_from_ort(et);
  v->t.rank = (int)rank;
  v->t.dims = v->dims;
  v->t.data = data;
  return 0;
}

static OrtStatus *ORT_API_CALL compute_create_state(OrtNodeComputeInfo *this_ptr, OrtNodeComputeContext *ctx, void **state) {
  *state = this_ptr; /* the plan is immutable: no per-node state beyond it */
  return NULL;
}

static void ORT_API_CALL compute_release_state(OrtNodeComputeInfo *this_ptr, void *state) {}

static OrtStatus *ORT_API_CALL compute_run(OrtNodeComputeInfo *this_ptr, void *state, OrtKernelContext *ctx) {
  ep_compute *c = (ep_compute *)this_ptr;
  const ep_runtime *rt = &c->ep->factory->rt;
  diag d;
  diag_init(&d);
  size_t n = 0;
  OrtStatus *st = rt->api->KernelContext_GetInputCount(ctx, &n);
  if (st) return st;
  input_view stack_views[MAX_STACK_INPUTS];
  input_view *views = n <= MAX_STACK_INPUTS ? stack_views : malloc(sizeof *views * n);
  rt_tensor stack_tensors[MAX_STACK_INPUTS];
  rt_tensor *tensors = n <= MAX_STACK_INPUTS ? stack_tensors : malloc(sizeof *tensors * n);
  if (!views || !tensors) {
    diag_fail(&d, "out of memory");
    goto done;
  }
  for (size_t i = 0; i < n; i++) {
    if (read_input(rt, ctx, i, &views[i], &d)) goto done;
    tensors[i] = views[i].t;
  }
  compute_io io = {rt, ctx};
  plan_execute(c->plan, tensors, (int)n, alloc_output, &io, &d);
done:
  if (views != stack_views) free(views);
  if (tensors != stack_tensors) free(tensors);
  return d.failed ? ep_status_from_diag(rt, &d) : NULL;
}

OrtStatus *ep_compute_create(ep_instance *ep, plan *p, OrtNodeComputeInfo **out) {
  ep_compute *c = calloc(1, sizeof *c);
  if (!c) return ep_status_msg(&ep->factory->rt, ORT_FAIL, EP_NAME ": out of memory");
  c->ep = ep;
  c->plan = p;
  c->base.ort_version_supported = ep->factory->rt.api_version;
  c->base.CreateState = compute_create_state;
  c->base.Compute = compute_run;
  c->base.ReleaseState = compute_release_state;
  *out = &c->base;
  return NULL;
}
