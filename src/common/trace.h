/* A Chrome-trace (Perfetto) recorder: complete events ("ph": "X") collected in memory by any
 * thread and written as one JSON file when the sink closes. Used for the phases of each Run
 * (option `trace`): open it in https://ui.perfetto.dev or chrome://tracing. */
#ifndef EP_MLX_TRACE_H
#define EP_MLX_TRACE_H

#include <stddef.h>
#include <stdint.h>

typedef struct trace_sink trace_sink;

/* Creates the file now (so a bad path fails at once); NULL with err set on failure. */
trace_sink *trace_sink_open(const char *path, char *err, size_t err_len);
/* One event: `name` on the calling thread from ts_us for dur_us (microseconds of a monotonic
 * clock); `detail` (may be NULL) is shown as the event's argument. Thread-safe; never fails
 * loudly (an event that cannot be stored is dropped and counted). */
void trace_sink_event(trace_sink *t, const char *name, const char *cluster, const char *detail, uint64_t ts_us,
                      uint64_t dur_us);
/* Writes the JSON and frees the sink; accepts NULL. 0, or -1 when the file could not be written. */
int trace_sink_close(trace_sink *t);
/* Microseconds of the monotonic clock the events use. */
uint64_t trace_now_us(void);

#endif
