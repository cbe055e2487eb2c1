/* EP options. ORT hands them over as session config entries "ep.<ep name lower-cased>.<key>";
 * every key under that prefix must be one of OPTIONS below (an unknown key fails the session,
 * naming the valid ones). The environment variable ORT_EP_MLX_REPORT sets the report's
 * destination too. Adding an option is one row of OPTIONS, a parser and a field of ep_options. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ep/ep_internal.h"

#define OPTION_PREFIX "ep.mlxexecutionprovider."

typedef int (*option_parse_fn)(const char *key, const char *value, ep_options *out, diag *d);

static int parse_device(const char *key, const char *v, ep_options *out, diag *d) {
  if (!strcmp(v, "auto") || !*v) {
    out->device = mlxb_gpu_available() ? MLXB_DEVICE_GPU : MLXB_DEVICE_CPU;
    return 0;
  }
  if (!strcmp(v, "cpu")) {
    out->device = MLXB_DEVICE_CPU;
    return 0;
  }
  if (!strcmp(v, "gpu")) {
    if (!mlxb_gpu_available()) return diag_fail(d, "option device=gpu, but MLX has no GPU on this machine");
    out->device = MLXB_DEVICE_GPU;
    return 0;
  }
  return diag_fail(d, "option device='%s' is invalid (expected cpu, gpu or auto)", v);
}

static int parse_compile(const char *key, const char *v, ep_options *out, diag *d) {
  if (!*v || !strcmp(v, "auto")) out->compile = PLAN_COMPILE_AUTO;
  else if (!strcmp(v, "1") || !strcmp(v, "on")) out->compile = PLAN_COMPILE_ON;
  else if (!strcmp(v, "0") || !strcmp(v, "off")) out->compile = PLAN_COMPILE_OFF;
  else return diag_fail(d, "option compile='%s' is invalid (expected auto, on, off, 1 or 0)", v);
  return 0;
}

/* A decimal integer in lo..hi and nothing else (no leading space, no trailing text): 0, else -1. */
static int read_long(const char *v, long long lo, long long hi, long long *out) {
  char *end = NULL;
  errno = 0;
  long long n = strtoll(v, &end, 10);
  if (!*v || isspace((unsigned char)*v) || *end || errno || n < lo || n > hi) return -1;
  *out = n;
  return 0;
}

static int parse_long(const char *key, const char *v, long long lo, long long hi, long long *out, diag *d) {
  if (read_long(v, lo, hi, out)) return diag_fail(d, "option %s='%s' is invalid (%lld..%lld)", key, v, lo, hi);
  return 0;
}

static int parse_cache_size(const char *key, const char *v, ep_options *out, diag *d) {
  long long n = 0;
  if (parse_long(key, v, 1, 4096, &n, d)) return -1;
  out->cache_size = (int)n;
  return 0;
}

/* auto: a trace costs only our lowering on the CPU, so short buckets waste little compute; on a
 * GPU a trace also builds fused kernels, so longer buckets retrace less often. Reads the device,
 * which OPTIONS parses first. */
static int parse_decode_bucket(const char *key, const char *v, ep_options *out, diag *d) {
  if (!strcmp(v, "auto")) {
    out->decode_bucket = out->device == MLXB_DEVICE_GPU ? 256 : 64;
    return 0;
  }
  long long n = 0;
  if (parse_long(key, v, 0, 1 << 20, &n, d)) return -1;
  out->decode_bucket = (int)n;
  return 0;
}

/* bytes (at least 1 MiB) or auto (MLX's default); MLX's limit is process-wide, so the last
 * session that sets it wins. */
static int parse_memory_limit(const char *key, const char *v, ep_options *out, diag *d) {
  if (!strcmp(v, "auto")) {
    out->memory_limit = 0;
    return 0;
  }
  long long n = 0;
  if (read_long(v, 1 << 20, (long long)(~0ull >> 1), &n))
    return diag_fail(d, "option %s='%s' is invalid (bytes, at least 1048576, or auto)", key, v);
  out->memory_limit = (unsigned long long)n;
  if (mlxb_set_memory_limit((size_t)n)) return diag_fail(d, "option %s: MLX refused %lld bytes", key, n);
  return 0;
}

/* "" (off unless ORT_EP_MLX_REPORT names a destination), stderr or 1, stdout, or a file path,
 * which must open for appending now: a report that cannot be written is an error, not a silence. */
static int parse_report(const char *key, const char *v, ep_options *out, diag *d) {
  const char *dest = *v ? v : getenv("ORT_EP_MLX_REPORT");
  if (!dest) dest = "";
  if (strlen(dest) >= sizeof out->report_path) return diag_fail(d, "option report: path too long");
  snprintf(out->report_path, sizeof out->report_path, "%s", dest);
  if (!*dest || !strcmp(dest, "stderr") || !strcmp(dest, "1") || !strcmp(dest, "stdout")) return 0;
  FILE *f = fopen(dest, "a");
  if (!f) return diag_fail(d, "option report='%s': cannot open the file for writing: %s", dest, strerror(errno));
  fclose(f);
  return 0;
}

/* "" (none unless ORT_EP_MLX_TRACE names a file) or a file path for a Chrome-trace JSON of every
 * Run's phases, written when the session ends; the file is created at session creation. */
static int parse_trace(const char *key, const char *v, ep_options *out, diag *d) {
  const char *dest = *v ? v : getenv("ORT_EP_MLX_TRACE");
  if (!dest) dest = "";
  if (strlen(dest) >= sizeof out->trace_path) return diag_fail(d, "option trace: path too long");
  snprintf(out->trace_path, sizeof out->trace_path, "%s", dest);
  return 0;
}

/* Every option, in parsing order (decode_bucket's auto reads the device). default_value is what
 * an absent key parses as; README's options table documents the same rows. */
static const struct option_def {
  const char *key;
  const char *default_value;
  option_parse_fn parse;
} OPTIONS[] = {
    {"device", "auto", parse_device},
    {"compile", "auto", parse_compile},
    {"cache_size", "32", parse_cache_size},
    {"decode_bucket", "auto", parse_decode_bucket},
    {"memory_limit", "auto", parse_memory_limit},
    {"report", "", parse_report},
    {"trace", "", parse_trace},
};
#define N_OPTIONS (sizeof OPTIONS / sizeof OPTIONS[0])

static int option_index(const char *key) {
  for (size_t i = 0; i < N_OPTIONS; i++)
    if (!strcmp(OPTIONS[i].key, key)) return (int)i;
  return -1;
}

static int fail_unknown_key(const char *key, diag *d) {
  char valid[512] = "";
  size_t used = 0;
  for (size_t i = 0; i < N_OPTIONS && used < sizeof valid; i++)
    used += (size_t)snprintf(valid + used, sizeof valid - used, "%s%s", i ? ", " : "", OPTIONS[i].key);
  return diag_fail(d, "unknown option '%s' (valid options: %s)", key, valid);
}

FILE *ep_report_open(const ep_options *opts) {
  const char *dest = opts->report_path;
  if (!*dest) return NULL;
  if (!strcmp(dest, "stderr") || !strcmp(dest, "1")) return stderr;
  if (!strcmp(dest, "stdout")) return stdout;
  return fopen(dest, "a"); /* opened once already when the options were read */
}

void ep_report_close(FILE *f) {
  if (f && f != stderr && f != stdout) fclose(f);
  else if (f) fflush(f);
}

int ep_options_read(const ep_runtime *rt, const OrtSessionOptions *so, ep_options *out, diag *d) {
  memset(out, 0, sizeof *out);
  const char *given[N_OPTIONS] = {0}; /* values of the keys present, borrowed from entries */
  OrtKeyValuePairs *entries = NULL;
  OrtStatus *st = rt->api->GetSessionOptionsConfigEntries(so, &entries);
  if (st) {
    diag_fail(d, "reading options: %s", rt->api->GetErrorMessage(st));
    rt->api->ReleaseStatus(st);
    return -1;
  }
  const char *const *keys = NULL, *const *values = NULL;
  size_t n = 0;
  rt->api->GetKeyValuePairs(entries, &keys, &values, &n);
  int rc = 0;
  for (size_t i = 0; i < n && !rc; i++) {
    if (strncmp(keys[i], OPTION_PREFIX, sizeof OPTION_PREFIX - 1)) continue; /* not ours */
    const char *key = keys[i] + sizeof OPTION_PREFIX - 1;
    int at = option_index(key);
    if (at < 0) rc = fail_unknown_key(key, d);
    else given[at] = values[i];
  }
  for (size_t i = 0; i < N_OPTIONS && !rc; i++)
    rc = OPTIONS[i].parse(OPTIONS[i].key, given[i] ? given[i] : OPTIONS[i].default_value, out, d);
  rt->api->ReleaseKeyValuePairs(entries);
  return rc;
}
