/* EP options. ORT hands them over as session config entries "ep.<ep name lower-cased>.<key>";
 * the environment variable ORT_EP_MLX_REPORT sets the claim report's destination too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ep/ep_internal.h"

#define OPTION_PREFIX "ep.mlxexecutionprovider."

/* Reads option `key` into buf; returns 1 when present, 0 when absent, -1 on failure. */
static int read_option(const ep_runtime *rt, const OrtSessionOptions *so, const char *key, char *buf, size_t len,
                       diag *d) {
  char full[256];
  snprintf(full, sizeof full, OPTION_PREFIX "%s", key);
  int has = 0;
  OrtStatus *st = rt->api->HasSessionConfigEntry(so, full, &has);
  if (st) {
    diag_fail(d, "reading option %s: %s", key, rt->api->GetErrorMessage(st));
    rt->api->ReleaseStatus(st);
    return -1;
  }
  if (!has) return 0;
  size_t size = len;
  st = rt->api->GetSessionConfigEntry(so, full, buf, &size);
  if (st) {
    diag_fail(d, "option %s: %s", key, rt->api->GetErrorMessage(st));
    rt->api->ReleaseStatus(st);
    return -1;
  }
  return 1;
}

static int parse_device(const char *v, mlxb_device *out, diag *d) {
  if (!strcmp(v, "auto") || !*v) {
    *out = mlxb_gpu_available() ? MLXB_DEVICE_GPU : MLXB_DEVICE_CPU;
    return 0;
  }
  if (!strcmp(v, "cpu")) {
    *out = MLXB_DEVICE_CPU;
    return 0;
  }
  if (!strcmp(v, "gpu")) {
    if (!mlxb_gpu_available()) return diag_fail(d, "option device=gpu, but MLX has no GPU on this machine");
    *out = MLXB_DEVICE_GPU;
    return 0;
  }
  return diag_fail(d, "option device='%s' is invalid (expected cpu, gpu or auto)", v);
}

static int parse_compile(const char *v, plan_compile_mode *out, diag *d) {
  if (!*v || !strcmp(v, "auto")) *out = PLAN_COMPILE_AUTO;
  else if (!strcmp(v, "1") || !strcmp(v, "on")) *out = PLAN_COMPILE_ON;
  else if (!strcmp(v, "0") || !strcmp(v, "off")) *out = PLAN_COMPILE_OFF;
  else return diag_fail(d, "option compile='%s' is invalid (expected 0, 1 or auto)", v);
  return 0;
}

static int parse_int(const char *key, const char *v, long lo, long hi, int *out, diag *d) {
  char *end = NULL;
  long n = strtol(v, &end, 10);
  if (!*v || *end || n < lo || n > hi) return diag_fail(d, "option %s='%s' is invalid (%ld..%ld)", key, v, lo, hi);
  *out = (int)n;
  return 0;
}

/* memory_limit: bytes (at least 1 MiB) or auto (MLX's default); MLX's limit is process-wide. */
static int parse_memory_limit(const char *v, diag *d) {
  if (!*v || !strcmp(v, "auto")) return 0;
  char *end = NULL;
  unsigned long long n = strtoull(v, &end, 10);
  if (*end || v[0] == '-' || n < (1ull << 20))
    return diag_fail(d, "option memory_limit='%s' is invalid (bytes, at least 1048576, or auto)", v);
  if (mlxb_set_memory_limit((size_t)n)) return diag_fail(d, "option memory_limit: MLX refused %llu bytes", n);
  return 0;
}

FILE *ep_report_open(const ep_options *opts) {
  const char *dest = opts->report_path;
  if (!*dest) return NULL;
  if (!strcmp(dest, "stderr") || !strcmp(dest, "1")) return stderr;
  if (!strcmp(dest, "stdout")) return stdout;
  return fopen(dest, "a"); /* diagnostics only: a failure to open just means no report */
}

void ep_report_close(FILE *f) {
  if (f && f != stderr && f != stdout) fclose(f);
  else if (f) fflush(f);
}

int ep_options_read(const ep_runtime *rt, const OrtSessionOptions *so, ep_options *out, diag *d) {
  memset(out, 0, sizeof *out);
  char buf[1024] = "";
  int rc = read_option(rt, so, "device", buf, sizeof buf, d);
  if (rc < 0) return -1;
  if (parse_device(rc ? buf : "auto", &out->device, d)) return -1;
  rc = read_option(rt, so, "compile", buf, sizeof buf, d);
  if (rc < 0 || parse_compile(rc ? buf : "auto", &out->compile, d)) return -1;
  out->cache_size = 32;
  rc = read_option(rt, so, "cache_size", buf, sizeof buf, d);
  if (rc < 0 || (rc && parse_int("cache_size", buf, 1, 4096, &out->cache_size, d))) return -1;
  /* auto: a trace costs only our lowering on the CPU, so short buckets waste little compute; on a
   * GPU a trace also builds fused kernels, so longer buckets retrace less often. */
  out->decode_bucket = out->device == MLXB_DEVICE_GPU ? 256 : 64;
  rc = read_option(rt, so, "decode_bucket", buf, sizeof buf, d);
  if (rc < 0) return -1;
  if (rc && strcmp(buf, "auto") && parse_int("decode_bucket", buf, 0, 1 << 20, &out->decode_bucket, d)) return -1;
  rc = read_option(rt, so, "memory_limit", buf, sizeof buf, d);
  if (rc < 0 || (rc && parse_memory_limit(buf, d))) return -1;
  const char *env = getenv("ORT_EP_MLX_REPORT");
  if (env) snprintf(out->report_path, sizeof out->report_path, "%s", env);
  rc = read_option(rt, so, "report", buf, sizeof buf, d);
  if (rc < 0) return -1;
  if (rc) snprintf(out->report_path, sizeof out->report_path, "%s", buf);
  return 0;
}
