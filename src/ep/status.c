/* OrtStatus helpers every file of the shell uses. They live apart from the exports (ep_main.c) so
 * the shell's files depend one way: exports -> factory -> EP -> compute -> status, log, options. */
#include <stdio.h>

#include "ep/ep_internal.h"

OrtStatus *ep_status_msg(const ep_runtime *rt, OrtErrorCode code, const char *msg) {
  return rt->api->CreateStatus(code, msg);
}

OrtStatus *ep_status_from_diag(const ep_runtime *rt, const diag *d) {
  char msg[sizeof d->msg + 32];
  snprintf(msg, sizeof msg, EP_NAME ": %s", d->failed ? d->msg : "unknown error");
  return rt->api->CreateStatus(ORT_FAIL, msg);
}
