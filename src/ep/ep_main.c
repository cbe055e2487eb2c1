/* The library's two exports. CreateEpFactories negotiates the ORT API version (the version our
 * headers know, falling back to 23) so one binary serves ORT 1.23 through the newest release. */
#include <stdlib.h>
#include <string.h>

#include "ep/ep_internal.h"

/* The API version to ask for first: the runtime's minor version ("1.23.2" -> 23) when our
 * headers know it, so older runtimes are not asked (and do not complain) for newer ones. */
static uint32_t first_version(const OrtApiBase *base) {
  const char *s = base->GetVersionString ? base->GetVersionString() : NULL;
  const char *dot = s ? strchr(s, '.') : NULL;
  long minor = dot ? strtol(dot + 1, NULL, 10) : 0;
  if (minor >= EP_MIN_API_VERSION && minor < ORT_API_VERSION) return (uint32_t)minor;
  return ORT_API_VERSION;
}

static int negotiate(const OrtApiBase *base, ep_runtime *rt) {
  if (!base || !base->GetApi) return -1;
  for (uint32_t v = first_version(base); v >= EP_MIN_API_VERSION; v--) {
    const OrtApi *api = base->GetApi(v);
    if (!api) continue;
    rt->api = api;
    rt->ep_api = api->GetEpApi ? api->GetEpApi() : NULL;
    rt->api_version = v;
    return rt->ep_api ? 0 : -1;
  }
  return -1;
}

__attribute__((visibility("default"))) OrtStatus *CreateEpFactories(const char *registered_name,
                                                                     const OrtApiBase *ort_api_base,
                                                                     const OrtLogger *default_logger,
                                                                     OrtEpFactory **factories, size_t max_factories,
                                                                     size_t *num_factories) {
  ep_runtime rt = {0};
  if (num_factories) *num_factories = 0;
  if (negotiate(ort_api_base, &rt)) return NULL; /* no usable API table: nothing we can report through */
  if (!factories || !num_factories || max_factories < 1)
    return rt.api->CreateStatus(ORT_INVALID_ARGUMENT, EP_NAME ": no room for a factory");
  char err[512];
  if (mlxb_init(err, sizeof err)) return rt.api->CreateStatus(ORT_FAIL, err);
  OrtStatus *st = ep_factory_create(&rt, default_logger, &factories[0]);
  if (st) return st;
  *num_factories = 1;
  return NULL;
}

__attribute__((visibility("default"))) OrtStatus *ReleaseEpFactory(OrtEpFactory *factory) {
  ep_factory_destroy(factory);
  return NULL;
}
