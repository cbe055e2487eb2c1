/* OrtEpFactory: identity, one OrtEpDevice on ORT's CPU hardware device (MLX picks its own GPU
 * inside the EP), EP creation from session options. Every member ORT may call is set, even those
 * that only answer "nothing": a NULL CreateDataTransfer crashes ORT 1.30 at registration. */
#include <stdlib.h>
#include <string.h>

#include "common/trace.h"
#include "ep/ep_internal.h"

static ep_factory *factory_of(const OrtEpFactory *f) { return (ep_factory *)f; }

static const char *ORT_API_CALL factory_get_name(const OrtEpFactory *f) { return EP_NAME; }
static const char *ORT_API_CALL factory_get_vendor(const OrtEpFactory *f) { return EP_VENDOR; }
static uint32_t ORT_API_CALL factory_get_vendor_id(const OrtEpFactory *f) { return 0; }
static const char *ORT_API_CALL factory_get_version(const OrtEpFactory *f) { return EP_MLX_VERSION; }

static OrtStatus *ORT_API_CALL factory_get_supported_devices(OrtEpFactory *this_ptr, const OrtHardwareDevice *const *devices,
                                                             size_t num_devices, OrtEpDevice **ep_devices,
                                                             size_t max_ep_devices, size_t *num_ep_devices) {
  ep_factory *f = factory_of(this_ptr);
  const ep_runtime *rt = &f->rt;
  *num_ep_devices = 0;
  for (size_t i = 0; i < num_devices && *num_ep_devices < max_ep_devices; i++) {
    if (rt->api->HardwareDevice_Type(devices[i]) != OrtHardwareDeviceType_CPU) continue;
    OrtKeyValuePairs *meta = NULL;
    rt->api->CreateKeyValuePairs(&meta);
    rt->api->AddKeyValuePair(meta, "mlx_version", mlxb_version());
    rt->api->AddKeyValuePair(meta, "mlx_gpu", mlxb_gpu_available() ? "1" : "0");
    rt->api->AddKeyValuePair(meta, "mlx_cpu_blas", mlxb_cpu_blas_describe());
    OrtEpDevice *dev = NULL;
    OrtStatus *st = rt->ep_api->CreateEpDevice(this_ptr, devices[i], meta, NULL, &dev);
    rt->api->ReleaseKeyValuePairs(meta);
    if (!st) st = ep_device_memory_attach(&f->memory, dev);
    if (st) {
      if (dev) rt->ep_api->ReleaseEpDevice(dev);
      return st;
    }
    ep_devices[(*num_ep_devices)++] = dev;
    break; /* one device: the CPU entry */
  }
  return NULL;
}

static OrtStatus *ORT_API_CALL factory_create_ep(OrtEpFactory *this_ptr, const OrtHardwareDevice *const *devices,
                                                 const OrtKeyValuePairs *const *ep_metadata, size_t num_devices,
                                                 const OrtSessionOptions *session_options, const OrtLogger *logger,
                                                 OrtEp **out) {
  ep_factory *f = factory_of(this_ptr);
  *out = NULL;
  diag d;
  diag_init(&d);
  ep_options opts;
  if (ep_options_read(&f->rt, session_options, &opts, &d)) return ep_status_from_diag(&f->rt, &d);
  ep_instance *ep = calloc(1, sizeof *ep);
  if (!ep) return ep_status_msg(&f->rt, ORT_FAIL, EP_NAME ": out of memory");
  ep_instance_init(ep, f);
  ep->opts = opts;
  ep->logger = logger ? logger : f->logger;
  if (*opts.trace_path) {
    char err[1100];
    ep->trace = trace_sink_open(opts.trace_path, err, sizeof err);
    if (!ep->trace) {
      free(ep);
      char msg[1200];
      snprintf(msg, sizeof msg, EP_NAME ": option trace: %s", err);
      return ep_status_msg(&f->rt, ORT_INVALID_ARGUMENT, msg);
    }
  }
  ep_log(&f->rt, ep->logger, ORT_LOGGING_LEVEL_INFO,
         "session EP created: device %s, compile %d, decode_bucket %d%s%s; CPU BLAS: %s",
         opts.device == MLXB_DEVICE_GPU ? "gpu" : "cpu", (int)opts.compile, opts.decode_bucket,
         *opts.trace_path ? ", trace " : "", opts.trace_path, mlxb_cpu_blas_describe());
  *out = &ep->base;
  return NULL;
}

static void ORT_API_CALL factory_release_ep(OrtEpFactory *f, OrtEp *ep) {
  ep_instance *inst = (ep_instance *)ep;
  if (inst && trace_sink_close(inst->trace))
    ep_log(&factory_of(f)->rt, inst->logger, ORT_LOGGING_LEVEL_WARNING, "could not write the trace file '%s'",
           inst->opts.trace_path);
  free(ep);
}

static OrtStatus *ORT_API_CALL factory_validate_compat(OrtEpFactory *f, const OrtHardwareDevice *const *devices,
                                                       size_t num_devices, const char *info,
                                                       OrtCompiledModelCompatibility *out) {
  *out = OrtCompiledModelCompatibility_EP_UNSUPPORTED; /* we write no EPContext models */
  return NULL;
}

static OrtStatus *ORT_API_CALL factory_create_allocator(OrtEpFactory *f, const OrtMemoryInfo *mi,
                                                        const OrtKeyValuePairs *opts, OrtAllocator **out) {
  *out = ep_device_memory_allocator(&factory_of(f)->memory, mi); /* NULL: ORT's CPU allocator */
  return NULL;
}

static void ORT_API_CALL factory_release_allocator(OrtEpFactory *f, OrtAllocator *a) {}

static OrtStatus *ORT_API_CALL factory_create_data_transfer(OrtEpFactory *f, OrtDataTransferImpl **out) {
  *out = ep_device_memory_transfer(&factory_of(f)->memory); /* NULL: host memory only */
  return NULL;
}

static bool ORT_API_CALL factory_is_stream_aware(const OrtEpFactory *f) { return false; }

static OrtStatus *ORT_API_CALL factory_create_sync_stream(OrtEpFactory *f, const OrtMemoryDevice *md,
                                                          const OrtKeyValuePairs *opts, OrtSyncStreamImpl **out) {
  *out = NULL;
  return NULL;
}

static OrtStatus *ORT_API_CALL factory_incompat_details(OrtEpFactory *f, const OrtHardwareDevice *hw,
                                                        OrtDeviceEpIncompatibilityDetails *details) {
  return NULL;
}

static OrtStatus *ORT_API_CALL factory_create_importer(OrtEpFactory *f, const OrtEpDevice *dev,
                                                       OrtExternalResourceImporterImpl **out) {
  *out = NULL;
  return NULL;
}

static OrtStatus *ORT_API_CALL factory_num_custom_op_domains(OrtEpFactory *f, size_t *n) {
  *n = 0;
  return NULL;
}

static OrtStatus *ORT_API_CALL factory_custom_op_domains(OrtEpFactory *f, OrtCustomOpDomain **domains, size_t n) {
  return NULL;
}

OrtStatus *ep_factory_create(const ep_runtime *rt, const OrtLogger *logger, OrtEpFactory **out) {
  ep_factory *f = calloc(1, sizeof *f);
  if (!f) return rt->api->CreateStatus(ORT_FAIL, EP_NAME ": out of memory");
  f->rt = *rt;
  f->logger = logger;
  OrtStatus *st = ep_device_memory_init(&f->memory, &f->rt);
  if (st) {
    free(f);
    return st;
  }
  OrtEpFactory *b = &f->base;
  b->ort_version_supported = rt->api_version;
  b->GetName = factory_get_name;
  b->GetVendor = factory_get_vendor;
  b->GetSupportedDevices = factory_get_supported_devices;
  b->CreateEp = factory_create_ep;
  b->ReleaseEp = factory_release_ep;
  b->GetVendorId = factory_get_vendor_id;
  b->GetVersion = factory_get_version;
  b->ValidateCompiledModelCompatibilityInfo = factory_validate_compat;
  b->CreateAllocator = factory_create_allocator;
  b->ReleaseAllocator = factory_release_allocator;
  b->CreateDataTransfer = factory_create_data_transfer;
  b->IsStreamAware = factory_is_stream_aware;
  b->CreateSyncStreamForDevice = factory_create_sync_stream;
  if (rt->api_version >= 24) {
    b->GetHardwareDeviceIncompatibilityDetails = factory_incompat_details;
    b->CreateExternalResourceImporterForDevice = factory_create_importer;
    b->GetNumCustomOpDomains = factory_num_custom_op_domains;
    b->GetCustomOpDomains = factory_custom_op_domains;
  }
  *out = b;
  return NULL;
}

void ep_factory_destroy(OrtEpFactory *f) {
  if (!f) return;
  ep_device_memory_free(&factory_of(f)->memory);
  free(f);
}
