/* The BLAS under MLX's CPU backend.
 *
 * MLX's CPU backend runs every float GEMM (MatMul, Gemm, convolutions, attention products) through
 * three CBLAS calls, and the mlx-cpu wheel ships netlib's reference BLAS for them: plain loops,
 * 10-16x slower than an optimized BLAS on the same cores. This library defines those three symbols
 * itself. libmlx is a dependency of this library, so when ORT loads the EP (dlopen, RTLD_LOCAL) the
 * dynamic linker binds libmlx's calls to these definitions ahead of its own libblas, and they
 * forward to the BLAS chosen here, once per process:
 *
 *   ORT_EP_MLX_BLAS=off (or 0, mlx)  MLX's own BLAS (the next definition after this library);
 *   ORT_EP_MLX_BLAS=/path/libX.so    that library: an LP64 CBLAS (plain or scipy_-prefixed names);
 *   unset or auto                    OpenBLAS from the scipy-openblas32 package, when it is
 *                                    installed in the site-packages that holds MLX's backend wheel
 *                                    (site-packages/scipy_openblas32/lib); else MLX's own.
 *
 * A library that cannot be loaded, lacks one of the three, is a 64-bit-integer OpenBLAS, or
 * forwards back here is not used (MLX's own is, and the description says why). Every BLAS computes
 * float32 products in float32; only the order of the additions, so the last bits, differ.
 * If libmlx was loaded into the process before this library (Python's `import mlx.core` first), it
 * is bound to its own BLAS already and these definitions are never called: mlxb_cpu_blas_describe
 * tells, by running one product on MLX's CPU stream.
 *
 * Plain C, apart from the C++ bridge: nothing here touches MLX's API but the probe, through it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mlx/bridge.h"

#ifdef __APPLE__ /* MLX links Accelerate there, through a two-level namespace nothing can interpose */
const char *mlxb_cpu_blas_describe(void) { return "MLX's own (Accelerate)"; }
#else

/* CBLAS's enums are ints in every ABI MLX links against (CblasRowMajor = 101). */
typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *, int, float, float *,
                         int);
typedef void (*dgemm_fn)(int, int, int, int, int, int, double, const double *, int, const double *, int, double,
                         double *, int);
typedef void (*cgemm_fn)(int, int, int, int, int, int, const void *, const void *, int, const void *, int,
                         const void *, void *, int);

enum { DESCRIPTION_LEN = 1024 };

static struct {
  pthread_once_t once;
  sgemm_fn sgemm;
  dgemm_fn dgemm;
  cgemm_fn cgemm;
  char description[DESCRIPTION_LEN];
} blas = {PTHREAD_ONCE_INIT, NULL, NULL, NULL, ""};

static atomic_ulong forwarded_calls; /* products that came through these definitions */

/* Visible to the dynamic linker (the build hides everything else; src/ep/exports.map lists them). */
#define CBLAS_EXPORT __attribute__((visibility("default")))

CBLAS_EXPORT void cblas_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                              const float *b, int ldb, float beta, float *c, int ldc);
CBLAS_EXPORT void cblas_dgemm(int order, int ta, int tb, int m, int n, int k, double alpha, const double *a, int lda,
                              const double *b, int ldb, double beta, double *c, int ldc);
CBLAS_EXPORT void cblas_cgemm(int order, int ta, int tb, int m, int n, int k, const void *alpha, const void *a, int lda,
                              const void *b, int ldb, const void *beta, void *c, int ldc);

/* The file that defines f. */
static const char *library_of(const void *f) {
  Dl_info info;
  return f && dladdr(f, &info) && info.dli_fname ? info.dli_fname : "an unknown library";
}

/* MLX's own: the definitions the dynamic linker would have bound libmlx to without this library. */
static void use_own(const char *why) {
  blas.sgemm = (sgemm_fn)dlsym(RTLD_NEXT, "cblas_sgemm");
  blas.dgemm = (dgemm_fn)dlsym(RTLD_NEXT, "cblas_dgemm");
  blas.cgemm = (cgemm_fn)dlsym(RTLD_NEXT, "cblas_cgemm");
  if (!blas.sgemm || !blas.dgemm || !blas.cgemm) {
    blas.sgemm = NULL, blas.dgemm = NULL, blas.cgemm = NULL;
    snprintf(blas.description, DESCRIPTION_LEN, "none: %s, and MLX's own CBLAS was not found", why);
    return;
  }
  snprintf(blas.description, DESCRIPTION_LEN, "MLX's own, %s (%s)", library_of((const void *)blas.sgemm), why);
}

/* site-packages/scipy_openblas32/lib/libscipy_openblas.so, where site-packages holds MLX's own BLAS
 * in an auditwheel folder (site-packages/mlx_cpu.libs/libblas-*.so); false when it is not there. */
static bool openblas_beside_mlx(char *path, size_t len) {
  const char *lib = library_of(dlsym(RTLD_NEXT, "cblas_sgemm"));
  const char *dir_end = strrchr(lib, '/');
  if (!dir_end || dir_end - lib < 6 || strncmp(dir_end - 5, ".libs", 5)) return false;
  const char *site_end = dir_end - 5;
  while (site_end > lib && *site_end != '/') site_end--;
  char found[PATH_MAX];
  int n = snprintf(found, sizeof found, "%.*s/scipy_openblas32/lib/libscipy_openblas.so", (int)(site_end - lib), lib);
  return n > 0 && (size_t)n < sizeof found && len >= PATH_MAX && realpath(found, path) != NULL;
}

static void resolve(void);

static void *symbol(void *lib, const char *prefix, const char *name) {
  char full[64];
  snprintf(full, sizeof full, "%s%s", prefix, name);
  return dlsym(lib, full);
}

/* The three products from the library at path (kept loaded for the life of the process); false,
 * with the reason in why, when it cannot serve them. */
static bool use_library(const char *path, char *why, size_t why_len) {
  /* OpenBLAS's idle threads spin 2^28 cycles (~0.1 s) after each product by default, taking the
   * cores from whatever runs next in the host process: ORT's own kernels ran 2.5x slower beside
   * them on 2 cores. 2^16 cycles keeps back-to-back products warm. OpenBLAS reads it when loaded;
   * a value the user set wins. */
  setenv("OPENBLAS_THREAD_TIMEOUT", "16", 0);
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *e = dlerror();
    snprintf(why, why_len, "could not load %s: %s", path, e ? e : "unknown error");
    return false;
  }
  static const char *const prefixes[] = {"", "scipy_"};
  for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++) {
    sgemm_fn s = (sgemm_fn)symbol(lib, prefixes[i], "cblas_sgemm");
    dgemm_fn d = (dgemm_fn)symbol(lib, prefixes[i], "cblas_dgemm");
    cgemm_fn c = (cgemm_fn)symbol(lib, prefixes[i], "cblas_cgemm");
    if (!s || !d || !c) continue;
    if (!strcmp(library_of((const void *)s), library_of((const void *)resolve))) { /* this very library */
      snprintf(why, why_len, "%s resolves to this EP's own definitions", path);
      break;
    }
    const char *(*config)(void) = (const char *(*)(void))symbol(lib, prefixes[i], "openblas_get_config");
    const char *cfg = config ? config() : NULL;
    if (cfg && strstr(cfg, "USE64BITINT")) { /* 64-bit integer arguments: not the ABI libmlx calls */
      snprintf(why, why_len, "%s is a 64-bit-integer build (%s)", path, cfg);
      break;
    }
    blas.sgemm = s, blas.dgemm = d, blas.cgemm = c;
    snprintf(blas.description, DESCRIPTION_LEN, "%s, %s", cfg ? cfg : "CBLAS", path);
    return true;
  }
  if (!*why) snprintf(why, why_len, "%s lacks cblas_sgemm, cblas_dgemm or cblas_cgemm", path);
  dlclose(lib);
  return false;
}

static bool turned_off(const char *v) { return !strcmp(v, "off") || !strcmp(v, "0") || !strcmp(v, "mlx"); }

static void resolve(void) {
  const char *want = getenv("ORT_EP_MLX_BLAS");
  char why[DESCRIPTION_LEN / 2] = "", path[PATH_MAX];
  if (want && *want && turned_off(want)) {
    snprintf(why, sizeof why, "ORT_EP_MLX_BLAS=%s", want);
  } else if (want && *want && strcmp(want, "auto")) {
    if (use_library(want, why, sizeof why)) return;
  } else if (!openblas_beside_mlx(path, sizeof path)) {
    snprintf(why, sizeof why, "scipy-openblas32 is not installed beside MLX's backend wheel");
  } else if (use_library(path, why, sizeof why)) {
    return;
  }
  use_own(why);
}

/* Never reached in practice (libmlx's own BLAS defines all three): a product nothing can compute
 * comes out NaN rather than as whatever C held. */
static void poison(int order, int m, int n, size_t elem, size_t words, void *c, int ldc) {
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      size_t at = order == 101 ? (size_t)i * ldc + j : (size_t)j * ldc + i;
      for (size_t w = 0; w < words; w++) {
        if (elem == sizeof(double)) ((double *)c)[at] = NAN;
        else ((float *)c)[at * words + w] = NAN;
      }
    }
}

void cblas_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda, const float *b,
                 int ldb, float beta, float *c, int ldc) {
  pthread_once(&blas.once, resolve);
  atomic_fetch_add_explicit(&forwarded_calls, 1, memory_order_relaxed);
  if (blas.sgemm) blas.sgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  else poison(order, m, n, sizeof(float), 1, c, ldc);
}

void cblas_dgemm(int order, int ta, int tb, int m, int n, int k, double alpha, const double *a, int lda,
                 const double *b, int ldb, double beta, double *c, int ldc) {
  pthread_once(&blas.once, resolve);
  atomic_fetch_add_explicit(&forwarded_calls, 1, memory_order_relaxed);
  if (blas.dgemm) blas.dgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  else poison(order, m, n, sizeof(double), 1, c, ldc);
}

void cblas_cgemm(int order, int ta, int tb, int m, int n, int k, const void *alpha, const void *a, int lda,
                 const void *b, int ldb, const void *beta, void *c, int ldc) {
  pthread_once(&blas.once, resolve);
  atomic_fetch_add_explicit(&forwarded_calls, 1, memory_order_relaxed);
  if (blas.cgemm) blas.cgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  else poison(order, m, n, sizeof(float), 2, c, ldc);
}

/* One float32 product on MLX's CPU stream: whether it came through the definitions above. */
static bool mlx_products_come_here(void) {
  mlxb_scope *s = mlxb_scope_new(MLXB_DEVICE_CPU);
  if (!s) return false;
  static const float ones[4] = {1, 1, 1, 1};
  const int64_t dims[2] = {2, 2};
  unsigned long before = atomic_load(&forwarded_calls);
  mlxb_array *a = mlxb_from_data(s, ones, dims, 2, MLXB_F32);
  mlxb_array *p = mlxb_matmul(s, a, a);
  bool ran = p && mlxb_eval(s, &p, 1) == 0;
  mlxb_scope_free(s);
  return ran && atomic_load(&forwarded_calls) != before;
}

static struct {
  pthread_once_t once;
  char text[DESCRIPTION_LEN + 128];
} described = {PTHREAD_ONCE_INIT, ""};

static void describe(void) {
  if (mlx_products_come_here()) {
    snprintf(described.text, sizeof described.text, "%s", blas.description);
    return;
  }
  const char *own = library_of(dlsym(RTLD_NEXT, "cblas_sgemm"));
  snprintf(described.text, sizeof described.text,
           "MLX's own, %s (libmlx was loaded before this EP's library, so its products do not reach the EP: "
           "load the EP before importing mlx)",
           own);
}

const char *mlxb_cpu_blas_describe(void) {
  /* Resolved here, on the caller's thread (registration), not lazily inside MLX's first product on
   * its stream thread: resolve() may setenv, which must not race the host's threads. */
  pthread_once(&blas.once, resolve);
  pthread_once(&described.once, describe);
  return described.text;
}
#endif
