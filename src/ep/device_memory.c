/* The EP's device memory, seen from ORT: one OrtMemoryInfo for MLX's GPU (attached to our
 * OrtEpDevice), the allocator ORT uses for it, and the data transfer that copies between it and
 * host memory. With these, ORT places the EP's inputs and outputs in MLX's GPU memory, copies
 * host tensors in and out itself, and a caller's IOBinding keeps tensors (a KV cache) on the GPU
 * from one Run to the next. Where MLX has no such memory (its CPU backend; Metal, whose unified
 * memory is host memory already), nothing is registered and the EP works in host memory.
 * On by default on MLX's CUDA backend; ORT_EP_MLX_DEVICE_MEMORY=0 turns it off (see
 * ep_device_memory_init). */
#include <stdlib.h>
#include <string.h>

#include "ep/ep_internal.h"

/* PCI vendor of MLX's CUDA devices: ORT's Python aliases ("cuda") name memory by vendor. */
#define DEVICE_VENDOR_NVIDIA 0x10DE

static ep_device_memory *memory_of_allocator(const OrtAllocator *a) {
  return (ep_device_memory *)((char *)a - offsetof(ep_device_memory, allocator));
}

static ep_device_memory *memory_of_transfer(const OrtDataTransferImpl *t) {
  return (ep_device_memory *)((char *)t - offsetof(ep_device_memory, transfer));
}

static void *ORT_API_CALL allocator_alloc(OrtAllocator *a, size_t size) { return mlxb_device_alloc(size); }

static void ORT_API_CALL allocator_free(OrtAllocator *a, void *p) { mlxb_device_free(p); }

static const OrtMemoryInfo *ORT_API_CALL allocator_info(const OrtAllocator *a) {
  return memory_of_allocator(a)->info;
}

static bool is_ours(const ep_device_memory *m, const OrtMemoryDevice *d) {
  return d && m->rt->ep_api->MemoryDevice_AreEqual(d, m->device);
}

static bool is_host(const ep_device_memory *m, const OrtMemoryDevice *d) {
  return d && m->rt->ep_api->MemoryDevice_GetDeviceType(d) == OrtMemoryInfoDeviceType_CPU;
}

static void ORT_API_CALL transfer_release(OrtDataTransferImpl *t) {} /* owned by the factory */

static bool ORT_API_CALL transfer_can_copy(const OrtDataTransferImpl *t, const OrtMemoryDevice *src,
                                           const OrtMemoryDevice *dst) {
  const ep_device_memory *m = memory_of_transfer(t);
  return (is_ours(m, src) && (is_ours(m, dst) || is_host(m, dst))) || (is_host(m, src) && is_ours(m, dst));
}

/* Source and destination addresses and sizes of one tensor copy. */
static OrtStatus *copy_operands(const OrtApi *api, const OrtValue *src, OrtValue *dst, const void **from, void **to,
                                size_t *bytes) {
  size_t dst_bytes = 0;
  OrtStatus *st = api->GetTensorSizeInBytes(src, bytes);
  if (!st) st = api->GetTensorSizeInBytes(dst, &dst_bytes);
  if (!st) st = api->GetTensorData(src, from);
  if (!st) st = api->GetTensorMutableData(dst, to);
  if (!st && dst_bytes != *bytes) st = api->CreateStatus(ORT_INVALID_ARGUMENT, EP_NAME ": copy between tensors of different sizes");
  return st;
}

enum { COPY_BATCH = 64 };

static OrtStatus *ORT_API_CALL transfer_copy(OrtDataTransferImpl *t, const OrtValue **src, OrtValue **dst,
                                             OrtSyncStream **streams, size_t n) {
  const OrtApi *api = memory_of_transfer(t)->rt->api;
  const void *from[COPY_BATCH];
  void *to[COPY_BATCH];
  size_t bytes[COPY_BATCH];
  for (size_t done = 0; done < n;) {
    size_t k = n - done < COPY_BATCH ? n - done : COPY_BATCH;
    for (size_t i = 0; i < k; i++) {
      OrtStatus *st = copy_operands(api, src[done + i], dst[done + i], &from[i], &to[i], &bytes[i]);
      if (st) return st;
    }
    char err[256];
    if (mlxb_device_copy(to, from, bytes, k, err, sizeof err)) {
      char msg[320];
      snprintf(msg, sizeof msg, EP_NAME ": data transfer: %s", err);
      return api->CreateStatus(ORT_FAIL, msg);
    }
    done += k;
  }
  return NULL;
}

OrtStatus *ep_device_memory_init(ep_device_memory *m, const ep_runtime *rt) {
  memset(m, 0, sizeof *m);
  m->rt = rt;
  /* On wherever MLX has GPU memory of its own (its CUDA backend): the whole GPU suite ran with it,
   * twice in a row (2026-12-06), as did the conformance shards and the decoder bench. "0" or "off"
   * keeps ORT's host memory; "host" stands host memory in for MLX's GPU memory, so that CI (MLX's
   * CPU backend, where nothing is registered otherwise) runs this whole path. */
  const char *mode = getenv("ORT_EP_MLX_DEVICE_MEMORY");
  if (mode && (!strcmp(mode, "0") || !strcmp(mode, "off"))) return NULL;
  if (!mlxb_device_memory_enable(mode && !strcmp(mode, "host"))) return NULL;
  OrtStatus *st = rt->api->CreateMemoryInfo_V2("MLX GPU", OrtMemoryInfoDeviceType_GPU, DEVICE_VENDOR_NVIDIA, 0,
                                               OrtDeviceMemoryType_DEFAULT, 0, OrtDeviceAllocator, &m->info);
  if (st) return st;
  m->device = rt->ep_api->MemoryInfo_GetMemoryDevice(m->info);
  m->allocator.version = rt->api_version;
  m->allocator.Alloc = allocator_alloc;
  m->allocator.Free = allocator_free;
  m->allocator.Info = allocator_info;
  m->allocator.Reserve = allocator_alloc;
  m->transfer.ort_version_supported = rt->api_version;
  m->transfer.Release = transfer_release;
  m->transfer.CanCopy = transfer_can_copy;
  m->transfer.CopyTensors = transfer_copy;
  return NULL;
}

void ep_device_memory_free(ep_device_memory *m) {
  if (m->info) m->rt->api->ReleaseMemoryInfo(m->info);
  m->info = NULL;
}

OrtStatus *ep_device_memory_attach(const ep_device_memory *m, OrtEpDevice *dev) {
  return m->info ? m->rt->ep_api->EpDevice_AddAllocatorInfo(dev, m->info) : NULL;
}

OrtAllocator *ep_device_memory_allocator(ep_device_memory *m, const OrtMemoryInfo *mi) {
  if (!m->info || !mi) return NULL;
  if (mi != m->info && !m->rt->ep_api->MemoryDevice_AreEqual(m->rt->ep_api->MemoryInfo_GetMemoryDevice(mi), m->device))
    return NULL;
  return &m->allocator;
}

OrtDataTransferImpl *ep_device_memory_transfer(ep_device_memory *m) { return m->info ? &m->transfer : NULL; }
