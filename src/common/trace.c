/* Chrome-trace recorder: events are formatted as JSON objects into one growing buffer under a
 * mutex (a few hundred nanoseconds each) and written out at close. */
#include "common/trace.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

struct trace_sink {
  FILE *file;
  pthread_mutex_t lock;
  char *buf;      /* the events, comma-separated JSON objects */
  size_t len, cap;
  uint64_t dropped;
};

uint64_t trace_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

trace_sink *trace_sink_open(const char *path, char *err, size_t err_len) {
  trace_sink *t = calloc(1, sizeof *t);
  if (!t) {
    snprintf(err, err_len, "out of memory");
    return NULL;
  }
  t->file = fopen(path, "w");
  if (!t->file) {
    snprintf(err, err_len, "cannot open '%s' for writing", path);
    free(t);
    return NULL;
  }
  pthread_mutex_init(&t->lock, NULL);
  return t;
}

/* Copies s into a JSON string body (quotes and control characters escaped, truncated). */
static void json_text(char *out, size_t cap, const char *s) {
  size_t n = 0;
  for (; s && *s && n + 7 < cap; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') {
      out[n++] = '\\';
      out[n++] = (char)ch;
    } else if (ch < 0x20) {
      n += (size_t)snprintf(out + n, cap - n, "\\u%04x", ch);
    } else {
      out[n++] = (char)ch;
    }
  }
  out[n] = '\0';
}

static int reserve(trace_sink *t, size_t more) {
  if (t->len + more <= t->cap) return 0;
  size_t cap = t->cap ? t->cap : 1 << 16;
  while (cap < t->len + more) cap *= 2;
  char *grown = realloc(t->buf, cap);
  if (!grown) return -1;
  t->buf = grown;
  t->cap = cap;
  return 0;
}

void trace_sink_event(trace_sink *t, const char *name, const char *cluster, const char *detail, uint64_t ts_us,
                      uint64_t dur_us) {
  if (!t) return;
  char ename[128], ecluster[256], edetail[128], line[768];
  json_text(ename, sizeof ename, name);
  json_text(ecluster, sizeof ecluster, cluster);
  json_text(edetail, sizeof edetail, detail ? detail : "");
  long tid = (long)syscall(SYS_gettid);
  int n = snprintf(line, sizeof line,
                   "{\"name\":\"%s\",\"cat\":\"MLXExecutionProvider\",\"ph\":\"X\",\"ts\":%llu,\"dur\":%llu,"
                   "\"pid\":%ld,\"tid\":%ld,\"args\":{\"cluster\":\"%s\",\"detail\":\"%s\"}}",
                   ename, (unsigned long long)ts_us, (unsigned long long)dur_us, (long)getpid(), tid, ecluster,
                   edetail);
  if (n < 0 || (size_t)n >= sizeof line) return;
  pthread_mutex_lock(&t->lock);
  if (reserve(t, (size_t)n + 2)) {
    t->dropped++;
  } else {
    if (t->len) t->buf[t->len++] = ',';
    memcpy(t->buf + t->len, line, (size_t)n);
    t->len += (size_t)n;
  }
  pthread_mutex_unlock(&t->lock);
}

int trace_sink_close(trace_sink *t) {
  if (!t) return 0;
  int rc = fprintf(t->file, "{\"traceEvents\":[%.*s],\"displayTimeUnit\":\"ms\",\"otherData\":{\"dropped\":%llu}}\n",
                   (int)t->len, t->buf ? t->buf : "", (unsigned long long)t->dropped) < 0 ? -1 : 0;
  if (fclose(t->file)) rc = -1;
  pthread_mutex_destroy(&t->lock);
  free(t->buf);
  free(t);
  return rc;
}
