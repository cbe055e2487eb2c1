/* Error messages that travel with a failing status. Every fallible internal function returns int
 * (0 = ok, -1 = failed) and, on failure, leaves a message naming node, op and reason in a diag.
 * The EP shell turns a failed diag into an OrtStatus at the ABI boundary. */
#ifndef EP_MLX_DIAG_H
#define EP_MLX_DIAG_H

#include <stdarg.h>
#include <stdbool.h>

typedef struct diag {
  char msg[1024]; /* NUL-terminated message of the first failure */
  int failed;     /* nonzero once a failure has been recorded */
  bool trace_refusal; /* that failure is a lowering refusing a compile trace by design (op_trace_refuse) */
} diag;

void diag_init(diag *d);
/* Records a failure (only the first one sticks) and returns -1 so callers can `return diag_fail(...)`. */
int diag_fail(diag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int diag_vfail(diag *d, const char *fmt, va_list ap);
/* Prefixes an already recorded message with context, e.g. "node 'x' (Add): ". */
void diag_prefix(diag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
