/* Sticky first-failure messages; see diag.h. */
#include "common/diag.h"

#include <stdio.h>
#include <string.h>

void diag_init(diag *d) {
  d->msg[0] = '\0';
  d->failed = 0;
  d->trace_refusal = false;
}

int diag_vfail(diag *d, const char *fmt, va_list ap) {
  if (!d || d->failed) return -1;
  vsnprintf(d->msg, sizeof d->msg, fmt, ap);
  d->failed = 1;
  return -1;
}

int diag_fail(diag *d, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int rc = diag_vfail(d, fmt, ap);
  va_end(ap);
  return rc;
}

void diag_prefix(diag *d, const char *fmt, ...) {
  char prefix[512], old[sizeof d->msg];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  memcpy(old, d->msg, sizeof old);
  size_t np = strlen(prefix);
  if (np >= sizeof d->msg) np = sizeof d->msg - 1;
  memcpy(d->msg, prefix, np);
  size_t rest = sizeof d->msg - 1 - np, no = strlen(old);
  if (no > rest) no = rest;
  memcpy(d->msg + np, old, no);
  d->msg[np + no] = '\0';
}
