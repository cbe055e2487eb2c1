/* Logging through ORT's logger: the session's (OrtEpFactory::CreateEp hands it over) or the
 * factory's default one, so the EP's messages go where the application sends ORT's own. */
#include <stdarg.h>
#include <stdio.h>

#include "ep/ep_internal.h"

void ep_log(const ep_runtime *rt, const OrtLogger *logger, OrtLoggingLevel level, const char *fmt, ...) {
  if (!rt || !rt->api || !logger) return;
  OrtLoggingLevel enabled = ORT_LOGGING_LEVEL_FATAL;
  OrtStatus *st = rt->api->Logger_GetLoggingSeverityLevel(logger, &enabled);
  if (st) {
    rt->api->ReleaseStatus(st);
    return;
  }
  if (level < enabled) return; /* below the logger's threshold: not even formatted */
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  st = rt->api->Logger_LogMessage(logger, level, msg, __FILE__, __LINE__, EP_NAME);
  if (st) rt->api->ReleaseStatus(st);
}
