/* Shared state of the ORT ABI shell: the negotiated API tables, the factory, the EP object and
 * the compiled-node objects. ORT objects are C structs whose first member is ORT's vtable struct,
 * allocated zeroed so optional callbacks stay NULL; trampolines cast back. */
#ifndef EP_MLX_EP_INTERNAL_H
#define EP_MLX_EP_INTERNAL_H

#include <onnxruntime_c_api.h>

#include <stdio.h>

#include "common/diag.h"
#include "mlx/bridge.h"
#include "runtime/plan.h"

#define EP_NAME "MLXExecutionProvider"
#define EP_VENDOR "onnxruntime-ep-mlx"
#ifndef EP_MLX_VERSION
#define EP_MLX_VERSION "0.0.0"
#endif
#define EP_MIN_API_VERSION 23

typedef struct ep_runtime {
  const OrtApi *api;       /* negotiated; never NULL once the library is loaded */
  const OrtEpApi *ep_api;
  uint32_t api_version;    /* the version GetApi accepted, written to ort_version_supported */
} ep_runtime;

/* MLX's GPU memory as ORT sees it (src/ep/device_memory.c); info is NULL where there is none. */
typedef struct ep_device_memory {
  const ep_runtime *rt;
  OrtMemoryInfo *info;          /* owned; attached to our OrtEpDevice */
  const OrtMemoryDevice *device; /* of info */
  OrtAllocator allocator;       /* one for every session (ORT's Release is a no-op on it) */
  OrtDataTransferImpl transfer; /* host <-> device and device <-> device copies */
} ep_device_memory;

typedef struct ep_factory {
  OrtEpFactory base;       /* must stay first */
  ep_runtime rt;
  const OrtLogger *logger; /* ORT's default logger (borrowed for the factory's lifetime) */
  ep_device_memory memory; /* device memory, when MLX has some */
} ep_factory;

typedef struct ep_options {
  mlxb_device device;      /* where clusters run */
  plan_compile_mode compile; /* option compile=0|1|auto */
  int cache_size;          /* option cache_size: input signatures kept per cluster */
  int decode_bucket;       /* option decode_bucket: padded-length step of growing inputs, 0 = off */
  unsigned long long memory_limit; /* option memory_limit: bytes, 0 = auto (MLX's) */
  char report_path[1024];  /* claim report destination: "", "stderr", "stdout" or a file */
  char trace_path[1024];   /* option trace: Chrome-trace JSON of every Run's phases, "" = none */
} ep_options;

typedef struct ep_instance {
  OrtEp base;              /* must stay first */
  ep_factory *factory;
  ep_options opts;
  struct trace_sink *trace; /* owned; open while the session lives when option trace is set */
  const OrtLogger *logger; /* the session's logger (borrowed for the EP's lifetime) */
  int capability_calls;    /* numbers claim reports */
} ep_instance;

typedef struct ep_compute {
  OrtNodeComputeInfo base; /* must stay first */
  ep_instance *ep;
  plan *plan;              /* owned; immutable, shared by concurrent Runs */
} ep_compute;

/* The factory the exports hand ORT (src/ep/factory.c); ep_factory_destroy accepts NULL. */
OrtStatus *ep_factory_create(const ep_runtime *rt, const OrtLogger *logger, OrtEpFactory **out);
void ep_factory_destroy(OrtEpFactory *f);

/* An OrtStatus from a failed diag (message prefixed with the EP name); src/ep/status.c. */
OrtStatus *ep_status_from_diag(const ep_runtime *rt, const diag *d);
OrtStatus *ep_status_msg(const ep_runtime *rt, OrtErrorCode code, const char *msg);

int ep_options_read(const ep_runtime *rt, const OrtSessionOptions *so, ep_options *out, diag *d);
void ep_instance_init(ep_instance *ep, ep_factory *f);
OrtStatus *ep_compute_create(ep_instance *ep, plan *p, OrtNodeComputeInfo **out);
OrtStatus *ep_device_memory_init(ep_device_memory *m, const ep_runtime *rt);
void ep_device_memory_free(ep_device_memory *m);
OrtStatus *ep_device_memory_attach(const ep_device_memory *m, OrtEpDevice *dev);
/* The allocator for mi when mi is our device memory, else NULL. */
OrtAllocator *ep_device_memory_allocator(ep_device_memory *m, const OrtMemoryInfo *mi);
OrtDataTransferImpl *ep_device_memory_transfer(ep_device_memory *m); /* NULL without device memory */
/* Logs through ORT's logger (the session's, or the factory's before there is one); never fails. */
void ep_log(const ep_runtime *rt, const OrtLogger *logger, OrtLoggingLevel level, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Opens the report destination (NULL when none); ep_report_close closes it. */
FILE *ep_report_open(const ep_options *opts);
void ep_report_close(FILE *f);

#endif
