#define _POSIX_C_SOURCE 200809L
/* Checks the MLX bridge (src/mlx/bridge.h) from plain C: creation, elementwise ops, reductions,
 * shapes, slicing with negative steps, gathers, linear algebra, reading back, and the error path.
 * Built against libmlx and bridge.o alone; prints one line per failed check, exits 1 on failure. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlx/bridge.h"

#include "check.h"

/* Reads a as float32 and compares with want[n]. */
static void expect_f32(mlxb_scope *s, const mlxb_array *a, const float *want, size_t n, float tol, const char *what) {
  float got[64];
  CHECK(a != NULL, "%s: NULL array (%s)", what, mlxb_error(s));
  if (!a) return;
  CHECK(mlxb_size(a) == n, "%s: size %zu, want %zu", what, mlxb_size(a), n);
  if (mlxb_size(a) != n || n > 64) return;
  const mlxb_array *f = mlxb_type(a) == MLXB_F32 ? a : mlxb_astype(s, a, MLXB_F32);
  int rc = mlxb_read(s, f, got, n * sizeof(float));
  CHECK(rc == 0, "%s: read failed (%s)", what, mlxb_error(s));
  if (rc) return;
  for (size_t i = 0; i < n; i++)
    CHECK(fabsf(got[i] - want[i]) <= tol || (isnan(got[i]) && isnan(want[i])), "%s[%zu] = %g, want %g", what, i,
          got[i], want[i]);
}

static void expect_i64(mlxb_scope *s, const mlxb_array *a, const int64_t *want, size_t n, const char *what) {
  int64_t got[64];
  CHECK(a != NULL, "%s: NULL array (%s)", what, mlxb_error(s));
  if (!a) return;
  CHECK(mlxb_size(a) == n, "%s: size %zu, want %zu", what, mlxb_size(a), n);
  if (mlxb_size(a) != n || n > 64) return;
  int rc = mlxb_read_i64(s, a, got, n);
  CHECK(rc == 0, "%s: read failed (%s)", what, mlxb_error(s));
  if (rc) return;
  for (size_t i = 0; i < n; i++)
    CHECK(got[i] == want[i], "%s[%zu] = %lld, want %lld", what, i, (long long)got[i], (long long)want[i]);
}

static void expect_shape(const mlxb_array *a, const int64_t *want, int rank, const char *what) {
  int64_t got[8];
  CHECK(a && mlxb_ndim(a) == rank, "%s: rank %d, want %d", what, a ? mlxb_ndim(a) : -1, rank);
  if (!a || mlxb_ndim(a) != rank) return;
  mlxb_shape(a, got);
  for (int i = 0; i < rank; i++) CHECK(got[i] == want[i], "%s: dim %d = %lld, want %lld", what, i, (long long)got[i], (long long)want[i]);
}

static mlxb_array *f32(mlxb_scope *s, const float *v, const int64_t *dims, int rank) {
  return mlxb_from_data(s, v, dims, rank, MLXB_F32);
}

static void test_library(void) {
  char err[64] = "x";
  CHECK(mlxb_init(err, sizeof err) == 0 && err[0] == '\0', "init: %s", err);
  CHECK(strlen(mlxb_version()) > 0, "empty version");
  CHECK(mlxb_dtype_size(MLXB_BOOL) == 1 && mlxb_dtype_size(MLXB_BF16) == 2 && mlxb_dtype_size(MLXB_C64) == 8,
        "dtype sizes");
  printf("mlx %s, gpu available: %d\n", mlxb_version(), (int)mlxb_gpu_available());
}

static void test_creation(mlxb_scope *s) {
  int64_t d23[] = {2, 3};
  float v[] = {1, 2, 3, 4, 5, 6};
  mlxb_array *a = f32(s, v, d23, 2);
  expect_shape(a, d23, 2, "from_data shape");
  expect_f32(s, a, v, 6, 0, "from_data");
  CHECK(mlxb_dim(a, -1) == 3 && mlxb_dim(a, 0) == 2 && mlxb_dim(a, 2) == -1, "mlxb_dim");

  uint8_t bools[] = {0, 1, 2, 0};
  int64_t d4[] = {4};
  mlxb_array *b = mlxb_from_data(s, bools, d4, 1, MLXB_BOOL);
  CHECK(b && mlxb_type(b) == MLXB_BOOL, "bool type");
  expect_i64(s, b, (int64_t[]){0, 1, 1, 0}, 4, "bool from bytes");

  uint16_t halves[] = {0x3C00, 0xC000}; /* 1.0, -2.0 */
  int64_t d2[] = {2};
  expect_f32(s, mlxb_from_data(s, halves, d2, 1, MLXB_F16), (float[]){1, -2}, 2, 0, "f16 from bits");
  uint16_t bf[] = {0x3F80, 0x4040}; /* 1.0, 3.0 */
  expect_f32(s, mlxb_from_data(s, bf, d2, 1, MLXB_BF16), (float[]){1, 3}, 2, 0, "bf16 from bits");

  int64_t big[] = {INT64_MIN, INT64_MAX, -1};
  int64_t d3[] = {3};
  expect_i64(s, mlxb_from_data(s, big, d3, 1, MLXB_I64), big, 3, "i64 round trip");
  uint64_t ubig = UINT64_MAX, ugot = 0;
  int64_t d1[] = {1};
  mlxb_array *u = mlxb_from_data(s, &ubig, d1, 1, MLXB_U64);
  CHECK(mlxb_read(s, u, &ugot, sizeof ugot) == 0 && ugot == UINT64_MAX, "u64 round trip");

  int64_t d0[] = {0, 3};
  mlxb_array *e = mlxb_from_data(s, NULL, d0, 2, MLXB_F32);
  CHECK(e && mlxb_size(e) == 0, "empty array (%s)", mlxb_error(s));
  CHECK(mlxb_read(s, e, NULL, 0) == 0, "read empty (%s)", mlxb_error(s));
  expect_shape(mlxb_reduce(s, MLXB_RSUM, e, (int[]){0}, 1, false), (int64_t[]){3}, 1, "sum over empty axis");
  expect_f32(s, mlxb_reduce(s, MLXB_RSUM, e, (int[]){0}, 1, false), (float[]){0, 0, 0}, 3, 0, "sum over empty axis");

  mlxb_array *sc = mlxb_scalar_f64(s, 2.5, MLXB_F32);
  CHECK(sc && mlxb_ndim(sc) == 0 && mlxb_type(sc) == MLXB_F32, "scalar f64");
  expect_f32(s, sc, (float[]){2.5f}, 1, 0, "scalar value");
  expect_i64(s, mlxb_scalar_i64(s, -1, MLXB_U8), (int64_t[]){255}, 1, "scalar i64 -> u8 wraps");
  mlxb_array *um = mlxb_scalar_i64(s, -1, MLXB_U64);
  CHECK(mlxb_read(s, um, &ugot, sizeof ugot) == 0 && ugot == UINT64_MAX, "scalar i64 -1 -> u64");
  expect_i64(s, mlxb_scalar_i64(s, INT64_MAX, MLXB_I64), (int64_t[]){INT64_MAX}, 1, "scalar i64 max");

  expect_f32(s, mlxb_full(s, d23, 2, sc, MLXB_F32), (float[]){2.5f, 2.5f, 2.5f, 2.5f, 2.5f, 2.5f}, 6, 0, "full");
  expect_f32(s, mlxb_zeros(s, d2, 1, MLXB_I32), (float[]){0, 0}, 2, 0, "zeros");
  expect_i64(s, mlxb_arange(s, 0, 10, 3, MLXB_I64), (int64_t[]){0, 3, 6, 9}, 4, "arange");
  expect_f32(s, mlxb_eye(s, 2, 3, 1, MLXB_F32), (float[]){0, 1, 0, 0, 0, 1}, 6, 0, "eye k=1");

  /* A handle adopted into another scope outlives the first scope. */
  mlxb_scope *t = mlxb_scope_new(MLXB_DEVICE_CPU);
  mlxb_array *r = mlxb_ref(t, a);
  CHECK(r != NULL, "ref");
  mlxb_scope_free(t);
  expect_f32(s, a, v, 6, 0, "array still readable after other scope freed");
}

/* mlxb_eye against its definition (1 where j - i == k) for every dtype family, non-square
 * shapes and k past either side; an empty matrix for a zero dimension. */
static void test_eye(mlxb_scope *s) {
  const mlxb_dtype types[] = {MLXB_F32, MLXB_F16, MLXB_I64, MLXB_U64, MLXB_I32, MLXB_BOOL, MLXB_F64};
  for (size_t t = 0; t < sizeof types / sizeof *types; t++)
    for (int64_t n = 1; n <= 4; n++)
      for (int64_t m = 1; m <= 4; m++)
        for (int64_t k = -5; k <= 5; k++) {
          mlxb_array *e = mlxb_eye(s, n, m, k, types[t]);
          CHECK(e && mlxb_type(e) == types[t], "eye %lldx%lld k=%lld type %d (%s)", (long long)n, (long long)m,
                (long long)k, (int)types[t], mlxb_error(s));
          if (!e) continue;
          int64_t want[16], dims[] = {n, m};
          for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < m; j++) want[i * m + j] = j - i == k;
          expect_shape(e, dims, 2, "eye shape");
          if (types[t] == MLXB_F32 || types[t] == MLXB_F16 || types[t] == MLXB_F64) {
            double got[16];
            CHECK(mlxb_read_f64(s, e, got, (size_t)(n * m)) == 0, "eye read (%s)", mlxb_error(s));
            for (int64_t i = 0; i < n * m; i++) CHECK(got[i] == (double)want[i], "eye float value %lld", (long long)i);
          } else {
            expect_i64(s, e, want, (size_t)(n * m), "eye values");
          }
        }
  mlxb_array *empty = mlxb_eye(s, 0, 3, 0, MLXB_I64);
  expect_shape(empty, (int64_t[]){0, 3}, 2, "eye with no rows");
  CHECK(mlxb_eye(s, 3, 3, INT32_MAX, MLXB_F32) && mlxb_eye(s, 3, 3, INT32_MIN, MLXB_F32), "eye extreme k (%s)",
        mlxb_error(s));
  expect_f32(s, mlxb_eye(s, 2, 2, INT32_MIN, MLXB_F32), (float[]){0, 0, 0, 0}, 4, 0, "eye k = INT32_MIN");
}

/* The bridge's work on 8-byte dtypes that MLX's GPU refuses (float64 anywhere, the scatter family
 * on int64/uint64/float64): the same answers on a CPU scope and, where MLX has one, a GPU scope,
 * whose bridge runs that work on MLX's CPU device. */
static void test_cpu_dtypes(mlxb_scope *s) {
  double v[] = {1.5, -2, 3.25, 4, 5, 6};
  int64_t d23[] = {2, 3}, d32[] = {3, 2};
  mlxb_array *x = mlxb_from_data(s, v, d23, 2, MLXB_F64);
  double got[12];
  /* an output made row-major, read back and written out padded */
  mlxb_array *xt = mlxb_contiguous(s, mlxb_transpose(s, x, (int[]){1, 0}, 2));
  expect_shape(xt, d32, 2, "f64 contiguous shape");
  CHECK(xt && mlxb_read(s, xt, got, 6 * sizeof(double)) == 0, "f64 contiguous read (%s)", mlxb_error(s));
  CHECK(got[0] == 1.5 && got[1] == 4 && got[2] == -2 && got[5] == 6, "f64 contiguous values");
  CHECK(mlxb_read_prefix(s, mlxb_transpose(s, x, (int[]){1, 0}, 2), 0, 2, got, 4 * sizeof(double)) == 0,
        "f64 strided read_prefix (%s)", mlxb_error(s));
  CHECK(got[0] == 1.5 && got[1] == 4 && got[2] == -2 && got[3] == 5, "f64 read_prefix values");
  mlxb_array *padded = mlxb_pad_axis(s, x, 0, 1);
  expect_shape(padded, (int64_t[]){3, 3}, 2, "f64 pad_axis shape");
  CHECK(padded && mlxb_read(s, padded, got, 9 * sizeof(double)) == 0, "f64 pad_axis read (%s)", mlxb_error(s));
  CHECK(got[5] == 6 && got[6] == 0 && got[8] == 0, "f64 pad_axis values");
  mlxb_array *fp = mlxb_from_data_padded(s, v, d23, 2, MLXB_F64, 1, 1);
  CHECK(fp && mlxb_read(s, fp, got, 8 * sizeof(double)) == 0, "f64 from_data_padded (%s)", mlxb_error(s));
  CHECK(got[2] == 3.25 && got[3] == 0 && got[4] == 4, "f64 from_data_padded values");
  int64_t d03[] = {0, 3};
  mlxb_array *none = mlxb_from_data(s, NULL, d03, 2, MLXB_F64);
  CHECK(none && mlxb_size(none) == 0 && mlxb_read(s, none, NULL, 0) == 0, "empty f64 (%s)", mlxb_error(s));
  CHECK(mlxb_from_data_padded(s, NULL, d03, 2, MLXB_F64, 0, 0) != NULL, "empty padded f64 (%s)", mlxb_error(s));

  /* the scatter family into 8-byte dtypes */
  int64_t d4[] = {4}, d2[] = {2}, d21[] = {2, 1};
  int64_t base[] = {10, 20, 30, 40}, idx[] = {3, 1}, upd[] = {-7, INT64_MAX};
  mlxb_array *bi = mlxb_from_data(s, base, d4, 1, MLXB_I64), *ii = mlxb_from_data(s, idx, d2, 1, MLXB_I64);
  mlxb_array *ui = mlxb_from_data(s, upd, d21, 2, MLXB_I64);
  const mlxb_array *ix[] = {ii};
  expect_i64(s, mlxb_scatter(s, MLXB_SCATTER_SET, bi, ix, 1, ui, (int[]){0}), (int64_t[]){10, INT64_MAX, 30, -7}, 4,
             "i64 scatter");
  expect_i64(s, mlxb_scatter(s, MLXB_SCATTER_MAX, bi, ix, 1, ui, (int[]){0}), (int64_t[]){10, INT64_MAX, 30, 40}, 4,
             "i64 scatter_max");
  mlxb_array *u1 = mlxb_from_data(s, upd, d2, 1, MLXB_I64);
  expect_i64(s, mlxb_put_along_axis(s, bi, ii, u1, 0), (int64_t[]){10, INT64_MAX, 30, -7}, 4, "i64 put_along_axis");
  expect_i64(s, mlxb_scatter_add_axis(s, bi, ii, mlxb_from_data(s, (int64_t[]){1, 2}, d2, 1, MLXB_I64), 0),
             (int64_t[]){10, 22, 30, 41}, 4, "i64 scatter_add_axis");
  uint64_t ub[] = {0, 0, 0, 0}, uu[] = {UINT64_MAX, 5}, ugot[4];
  mlxb_array *su = mlxb_scatter(s, MLXB_SCATTER_SET, mlxb_from_data(s, ub, d4, 1, MLXB_U64), ix, 1,
                                mlxb_from_data(s, uu, d21, 2, MLXB_U64), (int[]){0});
  CHECK(su && mlxb_read(s, su, ugot, sizeof ugot) == 0 && ugot[1] == 5 && ugot[3] == UINT64_MAX,
        "u64 scatter (%s)", mlxb_error(s));
  mlxb_array *sf = mlxb_scatter(s, MLXB_SCATTER_ADD, mlxb_from_data(s, v, d4, 1, MLXB_F64), ix, 1,
                                mlxb_from_data(s, (double[]){0.25, 0.5}, d21, 2, MLXB_F64), (int[]){0});
  CHECK(sf && mlxb_read(s, sf, got, 4 * sizeof(double)) == 0 && got[1] == -1.5 && got[3] == 4.25 && got[0] == 1.5,
        "f64 scatter_add (%s)", mlxb_error(s));
  CHECK(mlxb_ok(s), "dtype rules: %s", mlxb_error(s));
}

static void test_elementwise(mlxb_scope *s) {
  int64_t d4[] = {4};
  mlxb_array *x = f32(s, (float[]){-1.5f, 0, 2.5f, 4}, d4, 1);
  expect_f32(s, mlxb_unary(s, MLXB_ABS, x), (float[]){1.5f, 0, 2.5f, 4}, 4, 0, "abs");
  expect_f32(s, mlxb_unary(s, MLXB_NEG, x), (float[]){1.5f, 0, -2.5f, -4}, 4, 0, "neg");
  expect_f32(s, mlxb_unary(s, MLXB_EXP, x), (float[]){expf(-1.5f), 1, expf(2.5f), expf(4)}, 4, 1e-4f, "exp");
  expect_f32(s, mlxb_unary(s, MLXB_ROUND, x), (float[]){-2, 0, 2, 4}, 4, 0, "round half to even");
  expect_f32(s, mlxb_unary(s, MLXB_FLOOR, x), (float[]){-2, 0, 2, 4}, 4, 0, "floor");
  expect_f32(s, mlxb_unary(s, MLXB_SIGMOID, x), (float[]){1 / (1 + expf(1.5f)), 0.5f, 1 / (1 + expf(-2.5f)), 1 / (1 + expf(-4))}, 4, 1e-6f, "sigmoid");

  mlxb_array *y = f32(s, (float[]){2, 2, 2, 2}, d4, 1);
  expect_f32(s, mlxb_binary(s, MLXB_ADD, x, y), (float[]){0.5f, 2, 4.5f, 6}, 4, 0, "add");
  expect_f32(s, mlxb_binary(s, MLXB_POW, y, x), (float[]){powf(2, -1.5f), 1, powf(2, 2.5f), 16}, 4, 1e-5f, "pow");
  mlxb_array *sc = mlxb_scalar_f64(s, 10, MLXB_F32);
  expect_f32(s, mlxb_binary(s, MLXB_MUL, x, sc), (float[]){-15, 0, 25, 40}, 4, 0, "broadcast scalar mul");
  expect_i64(s, mlxb_binary(s, MLXB_LESS, x, y), (int64_t[]){1, 1, 0, 0}, 4, "less");

  int32_t ai[] = {7, -7, 7, -7, INT32_MIN, INT32_MIN};
  int32_t bi[] = {2, 2, -2, -2, -1, 0};
  int64_t d6[] = {6};
  mlxb_array *a = mlxb_from_data(s, ai, d6, 1, MLXB_I32), *b = mlxb_from_data(s, bi, d6, 1, MLXB_I32);
  mlxb_array *fd = mlxb_binary(s, MLXB_FLOOR_DIVIDE, a, b);
  CHECK(fd && mlxb_type(fd) == MLXB_I32, "floor_divide keeps int32");
  expect_i64(s, fd, (int64_t[]){3, -4, -4, 3, INT32_MIN, 0}, 6, "floor_divide (INT_MIN/-1 wraps, /0 gives 0)");
  expect_i64(s, mlxb_binary(s, MLXB_REMAINDER, a, b), (int64_t[]){1, 1, -1, -1, 0, INT32_MIN}, 6,
             "remainder sign of divisor (x%0 gives x)");
  int64_t al[] = {INT64_MIN, 9}, bl[] = {-1, -1};
  int64_t d2[] = {2};
  mlxb_array *la = mlxb_from_data(s, al, d2, 1, MLXB_I64), *lb = mlxb_from_data(s, bl, d2, 1, MLXB_I64);
  expect_i64(s, mlxb_binary(s, MLXB_FLOOR_DIVIDE, la, lb), (int64_t[]){INT64_MIN, -9}, 2, "i64 floor_divide by -1");
  expect_i64(s, mlxb_binary(s, MLXB_REMAINDER, la, lb), (int64_t[]){0, 0}, 2, "i64 remainder by -1");
  mlxb_array *dv = mlxb_binary(s, MLXB_DIV, a, b);
  CHECK(dv && mlxb_type(dv) == MLXB_F32, "integer DIV gives float32");

  int8_t i8[] = {127, -128};
  mlxb_array *c8 = mlxb_from_data(s, i8, d2, 1, MLXB_I8);
  expect_i64(s, mlxb_binary(s, MLXB_ADD, c8, mlxb_scalar_i64(s, 1, MLXB_I8)), (int64_t[]){-128, -127}, 2, "int8 add wraps");

  mlxb_array *cond = mlxb_from_data(s, (uint8_t[]){1, 0, 1, 0}, d4, 1, MLXB_BOOL);
  expect_f32(s, mlxb_where(s, cond, x, y), (float[]){-1.5f, 2, 2.5f, 2}, 4, 0, "where");
  expect_f32(s, mlxb_clip(s, x, mlxb_scalar_f64(s, 0, MLXB_F32), NULL), (float[]){0, 0, 2.5f, 4}, 4, 0, "clip lo");
  expect_f32(s, mlxb_clip(s, x, NULL, NULL), (float[]){-1.5f, 0, 2.5f, 4}, 4, 0, "clip none");
  expect_i64(s, mlxb_astype(s, x, MLXB_I32), (int64_t[]){-1, 0, 2, 4}, 4, "astype truncates");
  mlxb_array *bits = mlxb_view(s, f32(s, (float[]){1.0f}, (int64_t[]){1}, 1), MLXB_I32);
  expect_i64(s, bits, (int64_t[]){0x3F800000}, 1, "view bits");
}

static void test_reduce(mlxb_scope *s) {
  int64_t d23[] = {2, 3};
  mlxb_array *x = f32(s, (float[]){1, 2, 3, 4, 5, 6}, d23, 2);
  expect_f32(s, mlxb_reduce(s, MLXB_RSUM, x, NULL, 0, false), (float[]){21}, 1, 0, "sum all");
  expect_f32(s, mlxb_reduce(s, MLXB_RSUM, x, (int[]){1}, 1, false), (float[]){6, 15}, 2, 0, "sum axis 1");
  mlxb_array *k = mlxb_reduce(s, MLXB_RMAX, x, (int[]){0}, 1, true);
  expect_shape(k, (int64_t[]){1, 3}, 2, "max keepdims");
  expect_f32(s, k, (float[]){4, 5, 6}, 3, 0, "max axis 0");
  expect_f32(s, mlxb_reduce(s, MLXB_RMEAN, x, (int[]){-1}, 1, false), (float[]){2, 5}, 2, 0, "mean");
  expect_f32(s, mlxb_reduce(s, MLXB_RPROD, x, (int[]){1}, 1, false), (float[]){6, 120}, 2, 0, "prod");
  expect_f32(s, mlxb_var(s, x, (int[]){1}, 1, false, 1), (float[]){1, 1}, 2, 1e-6f, "var ddof 1");
  mlxb_array *am = mlxb_argmax(s, x, 1, false);
  CHECK(am && mlxb_type(am) == MLXB_U32, "argmax gives uint32");
  expect_i64(s, am, (int64_t[]){2, 2}, 2, "argmax");
  expect_i64(s, mlxb_argmin(s, x, 0, true), (int64_t[]){0, 0, 0}, 3, "argmin");
  expect_f32(s, mlxb_cumulative(s, MLXB_RSUM, x, 1, false, true), (float[]){1, 3, 6, 4, 9, 15}, 6, 0, "cumsum");
  expect_f32(s, mlxb_cumulative(s, MLXB_RSUM, x, 1, true, false), (float[]){5, 3, 0, 11, 6, 0}, 6, 0,
             "cumsum reverse exclusive");
  mlxb_array *sm = mlxb_softmax(s, x, (int[]){1}, 1, true);
  float e1 = expf(-2), e2 = expf(-1), z = e1 + e2 + 1;
  expect_f32(s, sm, (float[]){e1 / z, e2 / z, 1 / z, e1 / z, e2 / z, 1 / z}, 6, 1e-6f, "softmax");

  int64_t d6[] = {6};
  mlxb_array *v = f32(s, (float[]){3, 1, 2, 1, 3, 1}, d6, 1);
  expect_i64(s, mlxb_argsort(s, v, 0), (int64_t[]){1, 3, 5, 2, 0, 4}, 6, "argsort stable");
  expect_f32(s, mlxb_sort(s, v, 0), (float[]){1, 1, 1, 2, 3, 3}, 6, 0, "sort");
  mlxb_array *tk = mlxb_topk(s, v, 2, 0);
  expect_shape(tk, (int64_t[]){2}, 1, "topk shape");
  expect_f32(s, tk, (float[]){3, 3}, 2, 0, "topk");
}

static void test_shapes(mlxb_scope *s) {
  int64_t d23[] = {2, 3};
  mlxb_array *x = f32(s, (float[]){1, 2, 3, 4, 5, 6}, d23, 2);
  mlxb_array *r = mlxb_reshape(s, x, (int64_t[]){3, 2}, 2);
  expect_shape(r, (int64_t[]){3, 2}, 2, "reshape");
  mlxb_array *t = mlxb_transpose(s, x, (int[]){1, 0}, 2);
  expect_shape(t, (int64_t[]){3, 2}, 2, "transpose shape");
  expect_f32(s, t, (float[]){1, 4, 2, 5, 3, 6}, 6, 0, "transpose read is row-major");
  mlxb_array *bc = mlxb_broadcast_to(s, f32(s, (float[]){7, 8}, (int64_t[]){2, 1}, 2), (int64_t[]){2, 3}, 2);
  expect_f32(s, bc, (float[]){7, 7, 7, 8, 8, 8}, 6, 0, "broadcast read");
  mlxb_array *ed = mlxb_expand_dims(s, x, (int[]){0, 3}, 2);
  expect_shape(ed, (int64_t[]){1, 2, 3, 1}, 4, "expand_dims");
  expect_shape(mlxb_squeeze(s, ed, NULL, 0), d23, 2, "squeeze all");
  expect_shape(mlxb_squeeze(s, ed, (int[]){0}, 1), (int64_t[]){2, 3, 1}, 3, "squeeze one");
  const mlxb_array *pair[] = {x, x};
  expect_shape(mlxb_concat(s, pair, 2, 1), (int64_t[]){2, 6}, 2, "concat");
  expect_shape(mlxb_stack(s, pair, 2, 0), (int64_t[]){2, 2, 3}, 3, "stack");

  mlxb_array *parts[3];
  int64_t at[] = {1, 2};
  CHECK(mlxb_split(s, x, at, 2, 1, parts) == 0, "split (%s)", mlxb_error(s));
  expect_f32(s, parts[0], (float[]){1, 4}, 2, 0, "split part 0");
  expect_f32(s, parts[1], (float[]){2, 5}, 2, 0, "split part 1");
  expect_f32(s, parts[2], (float[]){3, 6}, 2, 0, "split part 2");
  mlxb_array *one[1];
  CHECK(mlxb_split(s, x, NULL, 0, 1, one) == 0 && one[0], "split with no indices");

  int64_t d8[] = {8};
  mlxb_array *v = mlxb_arange(s, 0, 8, 1, MLXB_F32);
  expect_shape(v, d8, 1, "arange 8");
  expect_f32(s, mlxb_slice(s, v, (int64_t[]){1}, (int64_t[]){7}, (int64_t[]){2}), (float[]){1, 3, 5}, 3, 0, "slice step 2");
  expect_f32(s, mlxb_slice(s, v, (int64_t[]){7}, (int64_t[]){-1}, (int64_t[]){-1}), (float[]){7, 6, 5, 4, 3, 2, 1, 0}, 8, 0,
             "slice reverse all");
  expect_f32(s, mlxb_slice(s, v, (int64_t[]){6}, (int64_t[]){0}, (int64_t[]){-3}), (float[]){6, 3}, 2, 0, "slice step -3");
  expect_f32(s, mlxb_slice(s, v, (int64_t[]){6}, (int64_t[]){-1}, (int64_t[]){-3}), (float[]){6, 3, 0}, 3, 0,
             "slice step -3 through 0");
  mlxb_array *es = mlxb_slice(s, v, (int64_t[]){3}, (int64_t[]){3}, (int64_t[]){-1});
  CHECK(es && mlxb_size(es) == 0, "empty negative slice");
  expect_f32(s, mlxb_slice(s, x, (int64_t[]){1, 2}, (int64_t[]){-1, -1}, (int64_t[]){-1, -2}), (float[]){6, 4, 3, 1}, 4,
             0, "2-d negative slice");
  mlxb_array *upd = f32(s, (float[]){10, 20, 30}, (int64_t[]){3}, 1);
  expect_f32(s, mlxb_slice_update(s, v, upd, (int64_t[]){6}, (int64_t[]){-1}, (int64_t[]){-3}),
             (float[]){30, 1, 2, 20, 4, 5, 10, 7}, 8, 0, "slice_update negative step");
  expect_f32(s, mlxb_slice_update(s, v, upd, (int64_t[]){0}, (int64_t[]){6}, (int64_t[]){2}),
             (float[]){10, 1, 20, 3, 30, 5, 6, 7}, 8, 0, "slice_update step 2");

  int32_t idx[] = {2, 0, -1};
  mlxb_array *ix = mlxb_from_data(s, idx, (int64_t[]){3}, 1, MLXB_I32);
  expect_f32(s, mlxb_take(s, x, ix, 1), (float[]){3, 1, 3, 6, 4, 6}, 6, 0, "take axis 1 (negative wraps)");
  mlxb_array *ia = mlxb_from_data(s, (int32_t[]){2, 0}, (int64_t[]){2, 1}, 2, MLXB_I32);
  expect_f32(s, mlxb_take_along_axis(s, x, ia, 1), (float[]){3, 4}, 2, 0, "take_along_axis");
  expect_f32(s, mlxb_put_along_axis(s, x, ia, mlxb_scalar_f64(s, 0, MLXB_F32), 1), (float[]){1, 2, 0, 0, 5, 6}, 6, 0,
             "put_along_axis");
  mlxb_array *ga = mlxb_from_data(s, (int32_t[]){1, 0}, (int64_t[]){2}, 1, MLXB_I32);
  const mlxb_array *gi[] = {ga};
  mlxb_array *g = mlxb_gather(s, x, gi, 1, (int[]){0}, (int64_t[]){1, 3});
  expect_shape(g, (int64_t[]){2, 1, 3}, 3, "gather shape");
  expect_f32(s, g, (float[]){4, 5, 6, 1, 2, 3}, 6, 0, "gather rows");
  mlxb_array *su = f32(s, (float[]){1, 1, 1}, (int64_t[]){1, 1, 3}, 3);
  const mlxb_array *si[] = {mlxb_from_data(s, (int32_t[]){1}, (int64_t[]){1}, 1, MLXB_I32)};
  expect_f32(s, mlxb_scatter(s, MLXB_SCATTER_ADD, x, si, 1, su, (int[]){0}), (float[]){1, 2, 3, 5, 6, 7}, 6, 0,
             "scatter add row 1");

  mlxb_array *p = mlxb_pad(s, x, (int64_t[]){0, 1}, (int64_t[]){1, 0}, mlxb_scalar_f64(s, 9, MLXB_F32), "constant");
  expect_shape(p, (int64_t[]){3, 4}, 2, "pad shape");
  expect_f32(s, p, (float[]){9, 1, 2, 3, 9, 4, 5, 6, 9, 9, 9, 9}, 12, 0, "pad constant");
  expect_f32(s, mlxb_pad(s, v, (int64_t[]){2}, (int64_t[]){1}, NULL, "edge"), (float[]){0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 7},
             11, 0, "pad edge");
  expect_f32(s, mlxb_tile(s, f32(s, (float[]){1, 2}, (int64_t[]){2}, 1), (int64_t[]){2}, 1), (float[]){1, 2, 1, 2}, 4, 0,
             "tile");
  expect_f32(s, mlxb_repeat(s, f32(s, (float[]){1, 2}, (int64_t[]){2}, 1), 2, 0), (float[]){1, 1, 2, 2}, 4, 0, "repeat");
  expect_f32(s, mlxb_triu(s, x, 1), (float[]){0, 2, 3, 0, 0, 6}, 6, 0, "triu");
  expect_f32(s, mlxb_as_strided(s, v, (int64_t[]){3, 2}, (int64_t[]){2, 1}, 2, 1), (float[]){1, 2, 3, 4, 5, 6}, 6, 0,
             "as_strided");
  expect_f32(s, mlxb_contiguous(s, t), (float[]){1, 4, 2, 5, 3, 6}, 6, 0, "contiguous");
  /* an array row-major by construction (data, evaluated) is its own contiguous form: no operation */
  mlxb_array *rowmajor = f32(s, (float[]){1, 2, 3, 4}, (int64_t[]){2, 2}, 2), *same = mlxb_contiguous(s, rowmajor);
  CHECK(same && mlxb_graph_size(&same, 1) == 0, "contiguous of a row-major array adds %zu operations",
        same ? mlxb_graph_size(&same, 1) : (size_t)0);
  mlxb_array *view = mlxb_contiguous(s, t);
  CHECK(view && mlxb_graph_size(&view, 1) >= 1, "contiguous of a transposed view is an operation");
}

static void test_linalg(mlxb_scope *s) {
  mlxb_array *a = f32(s, (float[]){1, 2, 3, 4, 5, 6}, (int64_t[]){2, 3}, 2);
  mlxb_array *b = f32(s, (float[]){1, 0, 0, 1, 1, 1}, (int64_t[]){3, 2}, 2);
  expect_f32(s, mlxb_matmul(s, a, b), (float[]){4, 5, 10, 11}, 4, 0, "matmul");
  mlxb_array *c = f32(s, (float[]){1, 1}, (int64_t[]){2}, 1);
  expect_f32(s, mlxb_addmm(s, c, a, b, 2, 3), (float[]){11, 13, 23, 25}, 4, 0, "addmm");
  const mlxb_array *ops[] = {a, b};
  expect_f32(s, mlxb_einsum(s, "ij,jk->ik", ops, 2), (float[]){4, 5, 10, 11}, 4, 1e-6f, "einsum");

  /* 1-d conv, channels last: x [1, 4, 1], w [1, 2, 1]. */
  mlxb_array *x = f32(s, (float[]){1, 2, 3, 4}, (int64_t[]){1, 4, 1}, 3);
  mlxb_array *w = f32(s, (float[]){1, -1}, (int64_t[]){1, 2, 1}, 3);
  expect_f32(s, mlxb_conv_general(s, x, w, 1, (int[]){1}, (int[]){0}, (int[]){0}, (int[]){1}, (int[]){1}, 1, false),
             (float[]){-1, -1, -1}, 3, 0, "conv1d");
  expect_f32(s, mlxb_conv_general(s, x, w, 1, NULL, (int[]){1}, (int[]){0}, NULL, NULL, 1, false), (float[]){-1, -1, -1, -1},
             4, 0, "conv1d pad lo");

  mlxb_array *ln = mlxb_layer_norm(s, f32(s, (float[]){1, 3}, (int64_t[]){1, 2}, 2), NULL, NULL, 0);
  expect_f32(s, ln, (float[]){-1, 1}, 2, 1e-5f, "layer_norm");
  mlxb_array *rn = mlxb_rms_norm(s, f32(s, (float[]){3, 4}, (int64_t[]){1, 2}, 2), NULL, 0);
  float rms = sqrtf(12.5f);
  expect_f32(s, rn, (float[]){3 / rms, 4 / rms}, 2, 1e-5f, "rms_norm");

  /* sdpa with one key: the output is v whatever the scores. */
  int64_t d[] = {1, 1, 2, 2};
  mlxb_array *q = f32(s, (float[]){1, 0, 0, 1}, d, 4);
  mlxb_array *k = f32(s, (float[]){1, 0, 0, 1}, d, 4);
  mlxb_array *v = f32(s, (float[]){1, 2, 3, 4}, d, 4);
  mlxb_array *o = mlxb_sdpa(s, q, k, v, 1.0f, "causal", NULL, NULL);
  float w1 = expf(0) / (expf(0) + expf(1));
  expect_f32(s, o, (float[]){1, 2, w1 * 1 + (1 - w1) * 3, w1 * 2 + (1 - w1) * 4}, 4, 1e-5f, "sdpa causal");
  mlxb_array *mask = mlxb_from_data(s, (uint8_t[]){1, 0, 1, 1}, (int64_t[]){2, 2}, 2, MLXB_BOOL);
  expect_f32(s, mlxb_sdpa(s, q, k, v, 1.0f, "", mask, NULL), (float[]){1, 2, w1 * 1 + (1 - w1) * 3, w1 * 2 + (1 - w1) * 4},
             4, 1e-5f, "sdpa bool mask");
}

static void test_errors(void) {
  mlxb_scope *s = mlxb_scope_new(MLXB_DEVICE_CPU);
  mlxb_array *x = f32(s, (float[]){1, 2, 3, 4, 5, 6}, (int64_t[]){2, 3}, 2);
  CHECK(mlxb_ok(s) && strcmp(mlxb_error(s), "") == 0, "fresh scope ok");
  mlxb_array *bad = mlxb_reshape(s, x, (int64_t[]){4}, 1);
  CHECK(bad == NULL && !mlxb_ok(s), "reshape to wrong size fails");
  CHECK(strstr(mlxb_error(s), "mlxb_reshape") && strstr(mlxb_error(s), "reshape"), "message names op: %s", mlxb_error(s));
  printf("reshape error: %s\n", mlxb_error(s));
  /* Chaining through NULL keeps the first error. */
  mlxb_array *chained = mlxb_unary(s, MLXB_EXP, bad);
  CHECK(chained == NULL && strstr(mlxb_error(s), "mlxb_reshape"), "first error sticks: %s", mlxb_error(s));
  mlxb_clear_error(s);
  CHECK(mlxb_ok(s), "clear error");
  CHECK(mlxb_unary(s, MLXB_EXP, NULL) == NULL && strstr(mlxb_error(s), "null array argument to mlxb_unary"),
        "null argument message: %s", mlxb_error(s));
  mlxb_clear_error(s);
  CHECK(mlxb_reshape(s, x, (int64_t[]){(int64_t)1 << 40}, 1) == NULL && strstr(mlxb_error(s), "int32"),
        "huge dim rejected: %s", mlxb_error(s));
  mlxb_clear_error(s);
  float buf[5];
  CHECK(mlxb_read(s, x, buf, sizeof buf) == -1 && !mlxb_ok(s), "read with wrong size fails");
  mlxb_clear_error(s);
  CHECK(mlxb_slice(s, x, (int64_t[]){0, 0}, (int64_t[]){2, 3}, (int64_t[]){1, 0}) == NULL, "zero stride fails");
  mlxb_clear_error(s);
  CHECK(mlxb_matmul(s, x, x) == NULL && !mlxb_ok(s), "matmul shape mismatch fails");
  mlxb_set_error(s, "later");
  CHECK(strstr(mlxb_error(s), "matmul") != NULL, "set_error keeps first: %s", mlxb_error(s));
  mlxb_clear_error(s);
  mlxb_array *outs[2];
  CHECK(mlxb_split(s, NULL, (int64_t[]){1}, 1, 0, outs) == -1 && outs[0] == NULL && outs[1] == NULL, "split null");
  CHECK(mlxb_ndim(NULL) == -1 && mlxb_size(NULL) == 0, "queries on NULL");
  CHECK(!mlxb_scope_force_cpu(s, true) && mlxb_scope_force_cpu(s, false), "force_cpu returns old value");
  CHECK(mlxb_scope_device(s) == MLXB_DEVICE_CPU, "scope device");
  mlxb_scope_free(s);
  mlxb_scope_free(NULL);
  CHECK(!mlxb_ok(NULL) && mlxb_unary(NULL, MLXB_EXP, NULL) == NULL, "NULL scope");
}

/* Several threads build and evaluate graphs at once, each in its own scope, sharing one
 * constant of the main thread's scope (the way plans share evaluated constants). */
enum { THREADS = 4, ROUNDS = 50 };
struct worker {
  const mlxb_array *shared; /* evaluated constant of another scope */
  int id;                   /* thread number, scales the data */
  int bad;                  /* wrong results seen */
};

static void *worker_run(void *arg) {
  struct worker *w = arg;
  for (int r = 0; r < ROUNDS; r++) {
    mlxb_scope *s = mlxb_scope_new(MLXB_DEVICE_CPU);
    float v[64];
    for (int i = 0; i < 64; i++) v[i] = (float)(w->id + i);
    mlxb_array *x = mlxb_from_data(s, v, (int64_t[]){8, 8}, 2, MLXB_F32);
    mlxb_array *y = mlxb_matmul(s, x, w->shared); /* shared is the identity */
    y = mlxb_binary(s, MLXB_ADD, y, mlxb_scalar_f64(s, 1, MLXB_F32));
    mlxb_array *sum = mlxb_reduce(s, MLXB_RSUM, y, NULL, 0, false);
    double got = 0;
    if (mlxb_read_f64(s, sum, &got, 1) != 0 || got != 64.0 * w->id + 2016 + 64) w->bad++;
    mlxb_scope_free(s);
  }
  return NULL;
}

static void test_threads(mlxb_scope *s) {
  mlxb_array *eye = mlxb_eye(s, 8, 8, 0, MLXB_F32);
  CHECK(mlxb_eval(s, &eye, 1) == 0, "eval shared constant");
  pthread_t th[THREADS];
  struct worker w[THREADS];
  for (int i = 0; i < THREADS; i++) {
    w[i] = (struct worker){eye, i, 0};
    CHECK(pthread_create(&th[i], NULL, worker_run, &w[i]) == 0, "pthread_create");
  }
  for (int i = 0; i < THREADS; i++) {
    pthread_join(th[i], NULL);
    CHECK(w[i].bad == 0, "thread %d: %d wrong results", i, w[i].bad);
  }
}

/* One mlxb_eval of a list mixing float64 arrays (one given as data, one computed on the CPU stream,
 * as the runtime places float64 nodes) with an array computed on the scope's device, that one
 * first: MLX would put its synchronizing operation, which takes every listed array, on the GPU
 * stream, where float64 inputs are refused. */
static void test_eval_mixed_float64(mlxb_scope *s) {
  double v[] = {1.5, -2, 3.25};
  float w[] = {1, -1, 2};
  int64_t d3[] = {3};
  mlxb_array *given = mlxb_from_data(s, v, d3, 1, MLXB_F64);
  mlxb_array *positive = mlxb_binary(s, MLXB_GREATER, f32(s, w, d3, 1), mlxb_scalar_f64(s, 0.0, MLXB_F32));
  bool old = mlxb_scope_force_cpu(s, true);
  mlxb_array *twice = mlxb_binary(s, MLXB_ADD, given, given);
  mlxb_scope_force_cpu(s, old);
  mlxb_array *list[] = {positive, given, twice};
  CHECK(positive && given && twice && mlxb_eval(s, list, 3) == 0, "eval of float64 beside device work (%s)",
        mlxb_error(s));
  double got[3];
  CHECK(twice && mlxb_read(s, twice, got, sizeof got) == 0 && got[0] == 3.0 && got[2] == 6.5,
        "float64 evaluated apart (%s)", mlxb_error(s));
}

/* Ops that make or read float64 (a lowering's float64 intermediate, as Pow of mixed types builds)
 * without the caller forcing the CPU: on a GPU scope MLX refuses them as they are built, and the
 * bridge builds them on the CPU stream instead, between GPU work before and after. */
static void test_float64_intermediate(mlxb_scope *s) {
  float base[] = {2.75f, 0.25f, 3.5f}, ex[] = {3, -1, 0.5f};
  int64_t d3[] = {3};
  mlxb_array *b = mlxb_binary(s, MLXB_ADD, f32(s, base, d3, 1), mlxb_scalar_f64(s, 0.0, MLXB_F32));
  mlxb_array *p = mlxb_binary(s, MLXB_POW, mlxb_astype(s, b, MLXB_F64), mlxb_astype(s, f32(s, ex, d3, 1), MLXB_F64));
  mlxb_array *y = mlxb_binary(s, MLXB_MUL, mlxb_astype(s, p, MLXB_F32), mlxb_scalar_f64(s, 2.0, MLXB_F32));
  float want[3];
  for (int i = 0; i < 3; i++) want[i] = (float)pow((double)base[i], (double)ex[i]) * 2.0f;
  CHECK(y != NULL, "float64 intermediate built (%s)", mlxb_error(s));
  if (y) expect_f32(s, y, want, 3, 0.0f, "float64 intermediate between float32 work");
}

/* mlxb_quantized_matmul for one row and several (on MLX's CUDA backend the rows past one are
 * dequantized and multiplied, MLX's other kernels not being runnable there), against the products
 * written out: 4-bit weights [8, 64], group 32, x [rows, 64]. */
static void test_quantized_matmul_rows(mlxb_scope *s) {
  enum { N = 8, K = 64, G = 32 };
  uint32_t packed[N * K / 8] = {0};
  float scale[N * K / G], bias[N * K / G], x[3 * K], want[3 * N];
  for (int n = 0; n < N; n++)
    for (int k = 0; k < K; k++) packed[(n * K + k) / 8] |= (uint32_t)((n * 5 + k * 3) % 16) << (4 * (k % 8));
  for (int i = 0; i < N * K / G; i++) scale[i] = 0.125f * (float)(i % 3 + 1), bias[i] = -0.5f * (float)(i % 2);
  for (int i = 0; i < 3 * K; i++) x[i] = (float)((i * 7) % 11) - 5.0f;
  for (int r = 0; r < 3; r++)
    for (int n = 0; n < N; n++) {
      double acc = 0.0;
      for (int k = 0; k < K; k++) {
        int g = n * (K / G) + k / G;
        acc += (double)x[r * K + k] * ((double)((n * 5 + k * 3) % 16) * scale[g] + bias[g]);
      }
      want[r * N + n] = (float)acc; /* every term and partial sum is exact in float32 */
    }
  mlxb_array *w = mlxb_from_data(s, packed, (int64_t[]){N, K / 8}, 2, MLXB_U32);
  mlxb_array *sc = f32(s, scale, (int64_t[]){N, K / G}, 2), *bi = f32(s, bias, (int64_t[]){N, K / G}, 2);
  for (int rows = 1; rows <= 3; rows += 2) {
    mlxb_array *xa = f32(s, x, (int64_t[]){rows, K}, 2);
    expect_f32(s, mlxb_quantized_matmul(s, xa, w, sc, bi, true, G, 4), want, (size_t)rows * N, 0.0f,
               rows == 1 ? "quantized_matmul, one row" : "quantized_matmul, three rows");
  }
}

/* mlxb_quantize_blocks (one CPU task) against the MLX operations MatMulNBits' int8 path used before
 * it (contrib_quant.c's mnb_quantize_a), bit for bit: blocks of 32 with values whose quantized
 * form lands on halves (rounded to even), a block of zeros, one holding NaN and one infinity. */
static void test_quantize_blocks(mlxb_scope *s) {
  enum { ROWS = 2, K = 128, B = 32 };
  if (!mlxb_quantize_blocks_available(s, MLXB_F32)) return;
  float x[ROWS * K];
  for (int i = 0; i < ROWS * K; i++) /* halves, and 127 first in each block: a * (127 / 127) is a half */
    x[i] = i % B ? (float)((i * 37) % 253 - 126) + 0.5f : (i / B) % 2 ? -127.0f : 127.0f;
  for (int i = 32; i < 64; i++) x[i] = 0.0f;
  x[70] = NAN;
  x[K + 5] = INFINITY;
  for (int i = K + 64; i < K + 96; i++) x[i] = (float)(i % 7) * 1e-3f - 2.5e-3f;
  int64_t dims[2] = {ROWS, K}, d3[3] = {ROWS, K / B, B};
  mlxb_array *xa = f32(s, x, dims, 2), *xb = mlxb_reshape(s, xa, d3, 3);
  int last = 2;
  mlxb_array *amax = mlxb_reduce(s, MLXB_RMAX, mlxb_unary(s, MLXB_ABS, xb), &last, 1, true);
  mlxb_array *c127 = mlxb_scalar_f64(s, 127.0, MLXB_F32), *zero = mlxb_scalar_f64(s, 0.0, MLXB_F32);
  mlxb_array *inv = mlxb_where(s, mlxb_binary(s, MLXB_NOT_EQUAL, amax, zero), mlxb_binary(s, MLXB_DIV, c127, amax), zero);
  mlxb_array *q = mlxb_unary(s, MLXB_ROUND, mlxb_binary(s, MLXB_MUL, xb, inv));
  mlxb_array *want = mlxb_reshape(s, mlxb_binary(s, MLXB_MUL, q, mlxb_binary(s, MLXB_DIV, amax, c127)), dims, 2);
  mlxb_array *got = mlxb_quantize_blocks(s, xa, B);
  float g[ROWS * K], w[ROWS * K];
  int rc = got && want ? mlxb_read(s, got, g, sizeof g) | mlxb_read(s, want, w, sizeof w) : -1;
  CHECK(rc == 0, "quantize_blocks: %s", mlxb_error(s));
  if (rc) return;
  int differ = 0;
  for (int i = 0; i < ROWS * K; i++) differ += !(isnan(g[i]) && isnan(w[i])) && memcmp(&g[i], &w[i], sizeof g[i]);
  CHECK(differ == 0, "quantize_blocks: %d of %d values differ from MLX's operations", differ, ROWS * K);
  CHECK(isnan(g[64]) && g[32] == 0.0f && !signbit(g[32]), "quantize_blocks: the NaN block, the zero block");
  CHECK(mlxb_quantize_blocks(s, xa, 48) == NULL, "quantize_blocks: blocks that do not tile K are refused");
  mlxb_clear_error(s);
  /* a GEMV of the pending quantization quantizes in its own task: the same products, bit for bit,
   * as of the quantization evaluated first (NaN block and infinity left out) */
  if (!mlxb_qgemv_available(s, MLXB_F32, 4, B)) return;
  enum { N = 8 };
  x[70] = 1.0f, x[K + 5] = -3.0f;
  uint32_t packed[N * K / 8];
  float scale[N * K / B], bias[N * K / B];
  for (int i = 0; i < N * K / 8; i++) packed[i] = 0x9e3779b9u * (uint32_t)(i + 1);
  for (int i = 0; i < N * K / B; i++) scale[i] = 0.01f * (float)(i % 5 + 1), bias[i] = -0.03f * (float)(i % 3);
  mlxb_array *wq = mlxb_from_data(s, packed, (int64_t[]){N, K / 8}, 2, MLXB_U32);
  mlxb_array *sc = f32(s, scale, (int64_t[]){N, K / B}, 2), *bi = f32(s, bias, (int64_t[]){N, K / B}, 2);
  mlxb_array *xs = f32(s, x, dims, 2), *evaluated = mlxb_quantize_blocks(s, xs, B);
  rc = mlxb_eval(s, &evaluated, 1);
  mlxb_array *folded = mlxb_qgemv(s, mlxb_quantize_blocks(s, xs, B), wq, sc, bi, B, 4);
  mlxb_array *apart = mlxb_qgemv(s, evaluated, wq, sc, bi, B, 4);
  float y1[ROWS * N], y2[ROWS * N];
  rc |= folded && apart ? mlxb_read(s, folded, y1, sizeof y1) | mlxb_read(s, apart, y2, sizeof y2) : -1;
  CHECK(rc == 0, "quantize_blocks then qgemv: %s", mlxb_error(s));
  CHECK(rc || !memcmp(y1, y2, sizeof y1), "quantize_blocks then qgemv: the folded quantization differs");
}

/* mlxb_dequant_f32 against mlxb_dequantize, bit for bit: 4-bit weights [3, 64] in groups of 32
 * with float32 scales of full precision and nonzero biases (the kernel on a CUDA scope with
 * ORT_EP_MLX_DEQUANT_KERNEL=1, MLX's dequantization elsewhere). */
static void test_dequant_f32(mlxb_scope *s) {
  enum { N = 3, K = 64, G = 32 };
  uint32_t packed[N * K / 8];
  float scale[N * K / G], bias[N * K / G], want[N * K], got[N * K];
  for (int i = 0; i < N * K / 8; i++) packed[i] = 0x9e3779b9u * (uint32_t)(i + 1);
  for (int i = 0; i < N * K / G; i++) scale[i] = 0.0123457f * (float)(i + 1), bias[i] = -0.731f + 0.217f * (float)i;
  mlxb_array *w = mlxb_from_data(s, packed, (int64_t[]){N, K / 8}, 2, MLXB_U32);
  mlxb_array *sc = f32(s, scale, (int64_t[]){N, K / G}, 2), *bi = f32(s, bias, (int64_t[]){N, K / G}, 2);
  mlxb_array *ref = mlxb_dequantize(s, w, sc, bi, G, 4, MLXB_F32), *out = mlxb_dequant_f32(s, w, sc, bi, G, 4);
  CHECK(ref && out && mlxb_read(s, ref, want, sizeof want) == 0 && mlxb_read(s, out, got, sizeof got) == 0,
        "dequant_f32 (%s)", mlxb_error(s));
  if (ref && out) CHECK(memcmp(want, got, sizeof got) == 0, "dequant_f32 differs from mlxb_dequantize");
}

/* mlxb_qgemm_split against a float64 reference of x * (scale * q + bias) + bias_n: 70 rows (two
 * row tiles, the second partial), 100 outputs (two column tiles), float16 scales from subnormal
 * to large (each weight then has a lo half), integer zero points; K 256 splits its steps over two blocks, K 64 does not. One row holds
 * an infinite activation (the infinity where the weight is nonzero, NaN where it is zero, as the
 * float32 GEMM gives them). On a scope without the kernel: refused with a message. */
/* Rows [lo, hi) of a 2-D array. */
static mlxb_array *row_range(mlxb_scope *s, mlxb_array *a, int64_t lo, int64_t hi) {
  return mlxb_slice(s, a, (int64_t[]){lo, 0}, (int64_t[]){hi, mlxb_dim(a, 1)}, (int64_t[]){1, 1});
}

/* The weights' rows as three sets (50, 30 and 20 outputs) in one mlxb_qgemm_split_sets launch, their
 * results side by side in got [M, 100]; 0 ok. */
static int qgemm_three_sets(mlxb_scope *s, mlxb_array *xa, mlxb_array *w, mlxb_array *sc, mlxb_array *bi,
                            mlxb_array *pa, int group, int bits, float *got) {
  enum { M = 70, N = 100 };
  static const int64_t cut[4] = {0, 50, 80, 100};
  const mlxb_array *ws[3], *scs[3], *bis[3], *posts[3];
  mlxb_array *out[3] = {0};
  for (int i = 0; i < 3; i++) {
    ws[i] = row_range(s, w, cut[i], cut[i + 1]);
    scs[i] = row_range(s, sc, cut[i], cut[i + 1]);
    bis[i] = row_range(s, bi, cut[i], cut[i + 1]);
    posts[i] = pa && i != 1 ? mlxb_slice(s, pa, &cut[i], &cut[i + 1], (int64_t[]){1}) : NULL;
  }
  if (mlxb_qgemm_split_sets(s, xa, 3, ws, scs, bis, posts, group, bits, out)) return -1;
  static float part[M * N];
  for (int i = 0; i < 3; i++) {
    int64_t n = cut[i + 1] - cut[i];
    if (mlxb_read(s, mlxb_astype(s, out[i], MLXB_F32), part, sizeof(float) * (size_t)(M * n))) return -1;
    for (int m = 0; m < M; m++)
      for (int64_t j = 0; j < n; j++) got[m * N + cut[i] + j] = part[m * n + j];
  }
  return 0;
}

static void check_qgemm_case(mlxb_scope *s, int k, int bits, int group, bool with_bias, bool with_post, bool sets) {
  enum { M = 70, N = 100, KMAX = 256 };
  static float x[M * KMAX], wv[N * KMAX], scale[N * KMAX / 32], bias[N * KMAX / 32], add[N], post[N], got[M * N];
  static uint32_t packed[N * KMAX / 2];
  int vpw = 32 / bits, groups = k / group, words = k / vpw;
  memset(packed, 0, sizeof packed);
  for (int n = 0; n < N; n++) {
    for (int g = 0; g < groups; g++) {
      int zp = (n * 3 + g) % (1 << bits);
      float sc = ldexpf(1.0f + (float)((n + 5 * g) % 1024) / 1024.0f, -((n + g) % 9) - 4); /* 11-bit significands */
      if (n == 7) sc = ldexpf(2047.0f, -5);  /* large weights: up to 255 * 63.97 */
      if (n == 11) sc = ldexpf(1023.0f, -24); /* a subnormal float16 scale */
      scale[n * groups + g] = sc;
      bias[n * groups + g] = -(float)zp * sc;
    }
    for (int j = 0; j < k; j++) {
      uint32_t q = (uint32_t)(n * 7 + j * 13 + (j >> 3)) % (1u << bits);
      packed[n * words + j / vpw] |= q << (bits * (j % vpw));
      wv[n * k + j] = (float)q * scale[n * groups + j / group] + bias[n * groups + j / group];
    }
    add[n] = (float)((n % 11) - 5) / 8.0f;
    post[n] = (float)((n % 7) - 3) / 4.0f;
  }
  for (int i = 0; i < M * k; i++) x[i] = (float)((i * 37 % 61) - 30) / 32.0f;
  x[3 * k + 5] = INFINITY;
  mlxb_array *xa = mlxb_astype(s, f32(s, x, (int64_t[]){M, k}, 2), MLXB_F16);
  mlxb_array *w = mlxb_from_data(s, packed, (int64_t[]){N, words}, 2, MLXB_U32);
  mlxb_array *sc = f32(s, scale, (int64_t[]){N, groups}, 2), *bi = f32(s, bias, (int64_t[]){N, groups}, 2);
  mlxb_array *ad = with_bias ? mlxb_astype(s, f32(s, add, (int64_t[]){N}, 1), MLXB_F16) : NULL;
  mlxb_array *pa = with_post ? mlxb_astype(s, f32(s, post, (int64_t[]){N}, 1), MLXB_F16) : NULL;
  if (sets) { /* the same outputs from three weight sets (no bias input; set 1 without a post bias) */
    if (!mlxb_qgemm_split_available(s, bits, group)) return;
    with_bias = false;
    CHECK(qgemm_three_sets(s, xa, w, sc, bi, pa, group, bits, got) == 0, "qgemm_split_sets (%s)", mlxb_error(s));
    for (int n = 50; n < 80; n++) post[n] = 0.0f;
  }
  mlxb_array *y = sets ? NULL : mlxb_qgemm_split(s, xa, w, sc, bi, ad, pa, group, bits);
  if (!sets && !mlxb_qgemm_split_available(s, bits, group)) {
    CHECK(y == NULL && !mlxb_ok(s), "qgemm_split refused without the kernel");
    mlxb_clear_error(s);
    return;
  }
  if (!sets) expect_shape(y, (int64_t[]){M, N}, 2, "qgemm_split shape");
  if (!sets && (!y || mlxb_read(s, mlxb_astype(s, y, MLXB_F32), got, sizeof got) != 0)) {
    CHECK(0, "qgemm_split k %d bits %d: %s", k, bits, mlxb_error(s));
    mlxb_clear_error(s);
    return;
  }
  int wrong = 0;
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      double want = (with_bias ? add[n] : 0.0) + (with_post ? post[n] : 0.0);
      for (int j = 0; j < k; j++) want += (double)x[m * k + j] * (double)wv[n * k + j];
      float g = got[m * N + n];
      bool ok = isnan(want) ? isnan(g) : isinf(want) ? g == (float)want : fabs(g - want) <= 1e-3 * fabs(want) + 1e-3;
      if (!ok && wrong++ < 4) CHECK(0, "qgemm_split k %d bits %d [%d, %d] = %g, want %g", k, bits, m, n, g, want);
    }
  CHECK(wrong == 0, "qgemm_split k %d bits %d: %d outputs wrong", k, bits, wrong);
}

static void test_qgemm_split(mlxb_scope *s) {
  check_qgemm_case(s, 256, 4, 32, true, false, false);
  check_qgemm_case(s, 64, 4, 32, false, true, false);
  check_qgemm_case(s, 256, 8, 64, false, true, false);
  check_qgemm_case(s, 128, 2, 128, true, true, false);
  check_qgemm_case(s, 256, 4, 32, false, true, true); /* split K */
  check_qgemm_case(s, 64, 4, 32, false, true, true);
}

/* mlxb_int_reduce_rows: float64 sums cast back saturating, as ORT's integer ReduceSum/ReduceMean
 * (the kernel on a CUDA scope; refused elsewhere, where the lowering keeps the CPU stream). */
static void test_int_reduce_rows(mlxb_scope *s) {
  const int64_t big = (int64_t)1 << 62;
  int64_t v64[] = {big, big, big, -big, -big, -big, 1, 2, 3};
  int64_t want_sum[] = {INT64_MAX, INT64_MIN, 6}, want_mean[] = {big, -big, 2};
  mlxb_array *x = mlxb_from_data(s, v64, (int64_t[]){3, 3}, 2, MLXB_I64);
  if (!mlxb_int_reduce_available(s, MLXB_I64)) {
    CHECK(mlxb_int_reduce_rows(s, x, false) == NULL && !mlxb_ok(s), "int_reduce_rows refused without the kernel");
    mlxb_clear_error(s);
    return;
  }
  expect_i64(s, mlxb_int_reduce_rows(s, x, false), want_sum, 3, "int_reduce_rows sum");
  expect_i64(s, mlxb_int_reduce_rows(s, x, true), want_mean, 3, "int_reduce_rows mean");
  int32_t v32[] = {INT32_MAX, 1, 7, INT32_MIN, -1, -5};
  int64_t want32[] = {INT32_MAX, INT32_MIN};
  mlxb_array *y = mlxb_int_reduce_rows(s, mlxb_from_data(s, v32, (int64_t[]){2, 3}, 2, MLXB_I32), false);
  CHECK(y && mlxb_type(y) == MLXB_I32, "int_reduce_rows keeps int32 (%s)", mlxb_error(s));
  if (y) expect_i64(s, mlxb_astype(s, y, MLXB_I64), want32, 2, "int_reduce_rows int32 sum");
}

/* ---- the decode step's kernels (CUDA) and primitives (CPU): against references here -------- */

enum { DB = 2, DHQ = 4, DHKV = 2, DS = 6, DD = 8, DROT = 4, DCOS = 5 };

/* channel d of row x rotated by cos/sin row pos (pairs (j, j + DROT / 2)) */
static float rotated_ref(const float *x, int d, const float *cos, const float *sin, int pos) {
  if (!cos || d >= DROT) return x[d];
  int half = DROT / 2, j = d < half ? d : d - half;
  float x1 = x[j], x2 = x[j + half], c = cos[pos * half + j], sn = sin[pos * half + j];
  return d < half ? x1 * c - x2 * sn : x1 * sn + x2 * c;
}

static void attention_ref(const float *q, const float *k, const float *v, const int64_t *len, int window, float cap,
                          const float *cos, const float *sin, const int *pos, float *out) {
  for (int b = 0; b < DB; b++)
    for (int h = 0; h < DHQ; h++) {
      const float *qr = q + (b * DHQ + h) * DD;
      int kvh = b * DHKV + h / (DHQ / DHKV), hi = (int)len[b], lo = window > 0 && hi > window ? hi - window : 0;
      float qv[DD], score[DS], m = -INFINITY, l = 0.0f;
      for (int d = 0; d < DD; d++) qv[d] = rotated_ref(qr, d, cos, sin, cos ? pos[b] : 0);
      for (int t = lo; t < hi; t++) {
        double sc = 0.0;
        for (int d = 0; d < DD; d++) sc += (double)qv[d] * k[(kvh * DS + t) * DD + d];
        score[t] = (float)sc * 0.5f;
        if (cap > 0.0f) score[t] = cap * tanhf(score[t] / cap);
        m = fmaxf(m, score[t]);
      }
      for (int d = 0; d < DD; d++) out[(b * DHQ + h) * DD + d] = 0.0f;
      for (int t = lo; t < hi; t++) l += expf(score[t] - m);
      for (int t = lo; t < hi; t++)
        for (int d = 0; d < DD; d++) out[(b * DHQ + h) * DD + d] += expf(score[t] - m) / l * v[(kvh * DS + t) * DD + d];
    }
}

/* rows of DD: sum = x + skip (one row) + bias, y = sum / rms(sum) * gamma, in double */
static void rms_ref(const float *x, int rows, const float *skip, const float *bias, const float *gamma, float *sum,
                    float *y) {
  for (int r = 0; r < rows; r++) {
    double ss = 0.0;
    for (int i = 0; i < DD; i++) {
      sum[r * DD + i] = x[r * DD + i] + skip[i] + bias[i];
      ss += (double)sum[r * DD + i] * sum[r * DD + i];
    }
    for (int i = 0; i < DD; i++) y[r * DD + i] = (float)(sum[r * DD + i] / sqrt(ss / DD + 1e-5) * gamma[i]);
  }
}

static void test_decode_step(mlxb_scope *s) {
  if (!mlxb_decode_attention_available(s, MLXB_F32, DD)) return;
  float q[DB * DHQ * DD], k[DB * DHKV * DS * DD], v[DB * DHKV * DS * DD], cos[DCOS * DROT / 2], sin[DCOS * DROT / 2];
  float want[DB * DHQ * DD];
  for (int i = 0; i < DB * DHQ * DD; i++) q[i] = 0.25f * (float)((i * 7) % 9) - 1.0f;
  for (int i = 0; i < DB * DHKV * DS * DD; i++) k[i] = 0.125f * (float)((i * 5) % 13) - 0.75f, v[i] = (float)((i * 3) % 7);
  for (int i = 0; i < DCOS * DROT / 2; i++) cos[i] = cosf(0.3f * (float)i), sin[i] = sinf(0.3f * (float)i);
  mlxb_array *qa = f32(s, q, (int64_t[]){DB, DHQ, 1, DD}, 4), *ka = f32(s, k, (int64_t[]){DB, DHKV, DS, DD}, 4);
  mlxb_array *va = f32(s, v, (int64_t[]){DB, DHKV, DS, DD}, 4);
  /* hostile lengths clamp to the cache: INT64_MAX sees every row, a negative one none (zeros) */
  int64_t lens[DB] = {INT64_MAX, -3}, clamped[DB] = {DS, 0};
  mlxb_array *la = mlxb_from_data(s, lens, (int64_t[]){DB}, 1, MLXB_I64);
  attention_ref(q, k, v, clamped, 0, 0.0f, NULL, NULL, NULL, want);
  expect_f32(s, mlxb_decode_attention(s, qa, ka, va, la, 0, NULL, 0.5f, 0.0f, 0, NULL, NULL), want, DB * DHQ * DD, 1e-5f,
             "decode attention, clamped lengths");
  /* a window, a soft cap, and rotary positions past the cache's ends (clamped to its rows) */
  int64_t lens2[DB] = {2, 4}, rpos[DB] = {1000, -7}, lens2_total[DB] = {3, 5};
  int pos_clamped[DB] = {DCOS - 1, 0};
  mlxb_array *cosa = f32(s, cos, (int64_t[]){DCOS, DROT / 2}, 2), *sina = f32(s, sin, (int64_t[]){DCOS, DROT / 2}, 2);
  mlxb_rope rope = {.cos = cosa, .sin = sina, .positions = mlxb_from_data(s, rpos, (int64_t[]){DB, 1}, 2, MLXB_I64),
                    .dims = DROT, .position_add = 0, .interleaved = false};
  attention_ref(q, k, v, lens2_total, 2, 1.5f, cos, sin, pos_clamped, want);
  expect_f32(s, mlxb_decode_attention(s, qa, ka, va, mlxb_from_data(s, lens2, (int64_t[]){DB}, 1, MLXB_I64), 1, NULL, 0.5f,
                                      1.5f, 2, &rope, NULL),
             want, DB * DHQ * DD, 1e-5f, "decode attention, window, soft cap, rotary");

  /* KV append: past rows below the position, the rotated new row at it, zeros after; a position past
   * the present writes nothing */
  enum { DP = 4, DPLEN = 6 };
  float pk[DB * DHKV * DP * DD], nk[DB * DHKV * DD], want_k[DB * DHKV * DPLEN * DD], want_v[DB * DHKV * DPLEN * DD];
  for (int i = 0; i < DB * DHKV * DP * DD; i++) pk[i] = (float)(i % 17) - 8.0f;
  for (int i = 0; i < DB * DHKV * DD; i++) nk[i] = 0.5f * (float)(i % 5) + 1.0f;
  int64_t at[DB] = {2, 100};
  for (int b = 0; b < DB; b++)
    for (int h = 0; h < DHKV; h++)
      for (int t = 0; t < DPLEN; t++)
        for (int d = 0; d < DD; d++) {
          int bh = b * DHKV + h, o = (bh * DPLEN + t) * DD + d;
          bool past = t < at[b] && t < DP, fresh = t == at[b];
          want_k[o] = past ? pk[(bh * DP + t) * DD + d] : fresh ? rotated_ref(nk + bh * DD, d, cos, sin, pos_clamped[b]) : 0.0f;
          want_v[o] = past ? pk[(bh * DP + t) * DD + d] : fresh ? nk[bh * DD + d] : 0.0f;
        }
  mlxb_array *pka = f32(s, pk, (int64_t[]){DB, DHKV, DP, DD}, 4), *nka = f32(s, nk, (int64_t[]){DB, 1, DHKV * DD}, 3);
  mlxb_array *present_k = NULL, *present_v = NULL;
  int rc = mlxb_decode_kv_append(s, pka, pka, nka, nka, mlxb_from_data(s, at, (int64_t[]){DB}, 1, MLXB_I64), 0, DPLEN,
                                 &rope, &present_k, &present_v);
  CHECK(rc == 0, "kv append (%s)", mlxb_error(s));
  float got[DB * DHKV * DPLEN * DD];
  if (rc == 0 && mlxb_read(s, present_k, got, sizeof got) == 0)
    for (size_t i = 0; i < sizeof got / sizeof *got; i++)
      CHECK(fabsf(got[i] - want_k[i]) <= 1e-6f, "kv append k[%zu] = %g, want %g", i, got[i], want_k[i]);
  if (rc == 0 && mlxb_read(s, present_v, got, sizeof got) == 0)
    for (size_t i = 0; i < sizeof got / sizeof *got; i++)
      CHECK(got[i] == want_v[i], "kv append v[%zu] = %g, want %g", i, got[i], want_v[i]);

  /* the append and the attention in one launch (MLX's CUDA backend): the same present and output as
   * the two kernels, from a past of DP rows; then in place on a cache of DPLEN rows */
  int64_t step_lens[DB] = {3, 100};
  mlxb_array *step_la = mlxb_from_data(s, step_lens, (int64_t[]){DB}, 1, MLXB_I64);
  if (mlxb_decode_step_available(s, MLXB_F32, DD, DPLEN)) {
    mlxb_array *ref_k = NULL, *ref_v = NULL, *fused_k = NULL, *fused_v = NULL;
    mlxb_rope seq_rope = rope;
    seq_rope.positions = mlxb_from_data(s, step_lens, (int64_t[]){DB}, 1, MLXB_I64);
    int arc = mlxb_decode_kv_append(s, pka, pka, nka, nka, step_la, 0, DPLEN, &seq_rope, &ref_k, &ref_v);
    mlxb_array *qs = f32(s, q, (int64_t[]){DB, 1, DHQ * DD}, 3);
    mlxb_array *ref_y = arc ? NULL : mlxb_decode_attention(s, qs, ref_k, ref_v, step_la, 1, NULL, 0.5f, 0.0f, 2, &seq_rope, NULL);
    mlxb_array *y = mlxb_decode_step(s, qs, pka, pka, nka, nka, step_la, 1, DPLEN, 0.5f, 0.0f, 2, &seq_rope, &fused_k,
                                     &fused_v);
    CHECK(ref_y && y, "decode step (%s)", mlxb_error(s));
    float a[DB * DHQ * DD], b2[DB * DHQ * DD], pa[DB * DHKV * DPLEN * DD], pb[DB * DHKV * DPLEN * DD];
    if (ref_y && y && mlxb_read(s, ref_y, a, sizeof a) == 0 && mlxb_read(s, y, b2, sizeof b2) == 0)
      for (size_t i = 0; i < sizeof a / sizeof *a; i++) CHECK(fabsf(a[i] - b2[i]) <= 1e-5f, "decode step y[%zu] %g vs %g", i, b2[i], a[i]);
    if (y && mlxb_read(s, ref_k, pa, sizeof pa) == 0 && mlxb_read(s, fused_k, pb, sizeof pb) == 0)
      CHECK(memcmp(pa, pb, sizeof pa) == 0, "decode step present differs from the append's");
    /* in place: a cache of DPLEN rows holding the past, the new row written at lens[b] (100: outside) */
    mlxb_array *cache = mlxb_contiguous(s, ref_k);
    mlxb_array *yi = mlxb_decode_step_in_place(s, qs, cache, cache, nka, nka, step_la, 1, 0.5f, 0.0f, 2, &seq_rope);
    CHECK(yi != NULL, "decode step in place (%s)", mlxb_error(s));
    if (yi && mlxb_read(s, yi, b2, sizeof b2) == 0)
      for (size_t i = 0; i < sizeof a / sizeof *a; i++) CHECK(fabsf(a[i] - b2[i]) <= 1e-5f, "decode step in place y[%zu]", i);
  }

  /* RMS norm: x + skip (one row repeating over three) + bias, and the sum */
  if (!mlxb_rms_norm_fused_available(s, MLXB_F32)) return;
  float x[3 * DD], skip[DD], bias[DD], gamma[DD], want_y[3 * DD], want_sum[3 * DD];
  for (int i = 0; i < 3 * DD; i++) x[i] = 0.5f * (float)(i % 7) - 1.5f;
  for (int i = 0; i < DD; i++) skip[i] = 0.25f * (float)i, bias[i] = -0.125f * (float)i, gamma[i] = 1.0f + 0.1f * (float)i;
  rms_ref(x, 3, skip, bias, gamma, want_sum, want_y);
  mlxb_array *y = NULL, *sum = NULL;
  rc = mlxb_rms_norm_fused(s, f32(s, x, (int64_t[]){3, DD}, 2), f32(s, skip, (int64_t[]){1, DD}, 2),
                           f32(s, bias, (int64_t[]){DD}, 1), f32(s, gamma, (int64_t[]){DD}, 1), 1e-5f, true, &y, &sum);
  CHECK(rc == 0, "rms norm (%s)", mlxb_error(s));
  if (rc) return;
  expect_f32(s, y, want_y, 3 * DD, 1e-5f, "rms norm y");
  expect_f32(s, sum, want_sum, 3 * DD, 0.0f, "rms norm sum");
  /* many rows (a prompt: on MLX's CUDA backend a warp per row from 16 rows on), the skip repeating */
  enum { MR = 40 };
  float xm[MR * DD], want_m[MR * DD], sum_m[MR * DD];
  for (int i = 0; i < MR * DD; i++) xm[i] = 0.25f * (float)((i * 5) % 11) - 1.25f;
  rms_ref(xm, MR, skip, bias, gamma, sum_m, want_m);
  mlxb_array *ym = NULL, *sm = NULL;
  rc = mlxb_rms_norm_fused(s, f32(s, xm, (int64_t[]){2, MR / 2, DD}, 3), f32(s, skip, (int64_t[]){1, 1, DD}, 3),
                           f32(s, bias, (int64_t[]){DD}, 1), f32(s, gamma, (int64_t[]){DD}, 1), 1e-5f, true, &ym, &sm);
  CHECK(rc == 0, "rms norm, many rows (%s)", mlxb_error(s));
  if (rc == 0) {
    expect_f32(s, ym, want_m, MR * DD, 1e-5f, "rms norm many rows y");
    expect_f32(s, sm, sum_m, MR * DD, 0.0f, "rms norm many rows sum");
  }
  /* float16 and bfloat16 rows: the same float32 arithmetic, rounded once to the dtype */
  static const mlxb_dtype halves[] = {MLXB_F16, MLXB_BF16};
  for (int h = 0; h < 2; h++) {
    mlxb_dtype t = halves[h];
    if (!mlxb_rms_norm_fused_available(s, t)) continue;
    mlxb_array *yh = NULL;
    rc = mlxb_rms_norm_fused(s, mlxb_astype(s, f32(s, x, (int64_t[]){3, DD}, 2), t),
                             mlxb_astype(s, f32(s, skip, (int64_t[]){1, DD}, 2), t),
                             mlxb_astype(s, f32(s, bias, (int64_t[]){DD}, 1), t),
                             mlxb_astype(s, f32(s, gamma, (int64_t[]){DD}, 1), t), 1e-5f, false, &yh, NULL);
    CHECK(rc == 0 && yh && mlxb_type(yh) == t, "rms norm %s (%s)", h ? "bfloat16" : "float16", mlxb_error(s));
    if (rc == 0) expect_f32(s, yh, want_y, 3 * DD, h ? 3e-2f : 4e-3f, h ? "rms norm bfloat16" : "rms norm float16");
  }
}

/* ---- many query rows (a prompt) through the same kernels ------------------------------------- */

enum { RS = 3 }; /* query rows per sequence */

/* the keys row s of a sequence of total length total sees (mlxb_attn_rows' rules) */
static void rows_keys(const mlxb_attn_rows *r, int64_t total, int row, int window, int64_t *lo, int64_t *hi) {
  int64_t bound = (r->first ? 0 : total - r->rows) + row + 1;
  *hi = !r->bidirectional && bound < total ? (bound < 0 ? 0 : bound) : total;
  int64_t from = r->window_from_row ? bound : *hi;
  *lo = window > 0 && from > window ? (from - window < *hi ? from - window : *hi) : 0;
}

/* q [DB, RS, DHQ, DD] against k, v [DB, DHKV, DS, DD]; pos[b * RS + s] rotates row s (cos non-NULL) */
static void rows_attention_ref(const float *q, const float *k, const float *v, const int64_t *total,
                               const mlxb_attn_rows *r, int window, const float *cos, const float *sin,
                               const int *pos, float *out) {
  for (int b = 0; b < DB; b++)
    for (int s = 0; s < RS; s++)
      for (int h = 0; h < DHQ; h++) {
        int u = (b * RS + s) * DHQ + h, kvh = b * DHKV + h / (DHQ / DHKV);
        int64_t lo, hi;
        rows_keys(r, total[b], s, window, &lo, &hi);
        float qv[DD], score[DS], m = -INFINITY, l = 0.0f;
        for (int d = 0; d < DD; d++) qv[d] = rotated_ref(q + u * DD, d, cos, sin, cos ? pos[b * RS + s] : 0);
        for (int64_t t = lo; t < hi; t++) {
          double sc = 0.0;
          for (int d = 0; d < DD; d++) sc += (double)qv[d] * k[(kvh * DS + t) * DD + d];
          score[t] = (float)sc * 0.5f;
          m = fmaxf(m, score[t]);
        }
        for (int d = 0; d < DD; d++) out[u * DD + d] = 0.0f;
        for (int64_t t = lo; t < hi; t++) l += expf(score[t] - m);
        for (int64_t t = lo; t < hi; t++)
          for (int d = 0; d < DD; d++) out[u * DD + d] += expf(score[t] - m) / l * v[(kvh * DS + t) * DD + d];
      }
}

static void test_prompt_rows(mlxb_scope *s) {
  if (!mlxb_rows_attention_available(s, MLXB_F32, DD)) return;
  float q[DB * RS * DHQ * DD], k[DB * DHKV * DS * DD], v[DB * DHKV * DS * DD], cos[DCOS * DROT / 2],
      sin[DCOS * DROT / 2], want[DB * RS * DHQ * DD];
  for (int i = 0; i < DB * RS * DHQ * DD; i++) q[i] = 0.25f * (float)((i * 7) % 9) - 1.0f;
  for (int i = 0; i < DB * DHKV * DS * DD; i++) k[i] = 0.125f * (float)((i * 5) % 13) - 0.75f, v[i] = (float)((i * 3) % 7);
  for (int i = 0; i < DCOS * DROT / 2; i++) cos[i] = cosf(0.3f * (float)i), sin[i] = sinf(0.3f * (float)i);
  mlxb_array *qa = f32(s, q, (int64_t[]){DB, RS, DHQ * DD}, 3), *ka = f32(s, k, (int64_t[]){DB, DHKV, DS, DD}, 4);
  mlxb_array *va = f32(s, v, (int64_t[]){DB, DHKV, DS, DD}, 4);
  mlxb_array *cosa = f32(s, cos, (int64_t[]){DCOS, DROT / 2}, 2), *sina = f32(s, sin, (int64_t[]){DCOS, DROT / 2}, 2);
  /* per-row positions, two past the cache's ends (clamped to its rows) */
  int64_t rpos[DB * RS] = {0, 1, 2, 9, -4, 3};
  int pos_clamped[DB * RS] = {0, 1, 2, DCOS - 1, 0, 3};
  mlxb_rope rope = {.cos = cosa, .sin = sina, .positions = mlxb_from_data(s, rpos, (int64_t[]){DB, RS}, 2, MLXB_I64),
                    .dims = DROT, .position_add = 0, .interleaved = false};
  /* lengths (seqlens_k: total - 1), hostile ones clamped to the cache: INT64_MAX is every row, -9 none */
  int64_t lens[DB] = {4, INT64_MAX}, total[DB] = {5, DS}, lens_bad[DB] = {-9, 1}, total_bad[DB] = {0, 2};
  static const struct {
    mlxb_attn_rows r;
    int window;
    bool rotary, bad;
    const char *what;
  } cases[] = {
      {{RS, true, false, false}, 0, false, false, "first prompt, causal"},
      {{RS, false, false, false}, 0, true, false, "continuation, causal, rotary per row"},
      {{RS, false, false, false}, 2, false, false, "continuation, window"},
      {{RS, true, false, true}, 2, true, false, "first prompt, window from the row, rotary"},
      {{RS, false, true, false}, 0, false, false, "bidirectional"},
      {{RS, false, false, false}, 0, false, true, "continuation, hostile lengths"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const int64_t *l = cases[i].bad ? lens_bad : lens, *tot = cases[i].bad ? total_bad : total;
    rows_attention_ref(q, k, v, tot, &cases[i].r, cases[i].window, cases[i].rotary ? cos : NULL, sin, pos_clamped,
                       want);
    mlxb_array *y = mlxb_decode_attention(s, qa, ka, va, mlxb_from_data(s, l, (int64_t[]){DB}, 1, MLXB_I64), 1,
                                          &cases[i].r, 0.5f, 0.0f, cases[i].window, cases[i].rotary ? &rope : NULL, NULL);
    CHECK(y != NULL, "rows attention, %s (%s)", cases[i].what, mlxb_error(s));
    if (y) expect_f32(s, y, want, DB * RS * DHQ * DD, 1e-5f, cases[i].what);
  }

  /* KV append of RS rows: at 0 (a first prompt, no past rows) and at positions from a past, rotated
   * at the sequence's position plus the row; rows past the present are not written */
  enum { DP = 4, DPLEN = 6 };
  float pk[DB * DHKV * DP * DD], nk[DB * RS * DHKV * DD], got[DB * DHKV * DPLEN * DD], want_k[DB * DHKV * DPLEN * DD];
  for (int i = 0; i < DB * DHKV * DP * DD; i++) pk[i] = (float)(i % 17) - 8.0f;
  for (int i = 0; i < DB * RS * DHKV * DD; i++) nk[i] = 0.5f * (float)(i % 5) + 1.0f;
  int64_t seqpos[DB] = {1, 2};
  mlxb_rope seq_rope = {.cos = cosa, .sin = sina, .positions = mlxb_from_data(s, seqpos, (int64_t[]){DB}, 1, MLXB_I64),
                        .dims = DROT, .position_add = 0, .interleaved = false};
  int64_t at[DB] = {2, 5};
  mlxb_array *pka = f32(s, pk, (int64_t[]){DB, DHKV, DP, DD}, 4), *nka = f32(s, nk, (int64_t[]){DB, RS, DHKV * DD}, 3);
  mlxb_array *none = mlxb_zeros(s, (int64_t[]){DB, DHKV, 0, DD}, 4, MLXB_F32);
  for (int form = 0; form < 2; form++) {
    bool past = form == 1;
    for (int b = 0; b < DB; b++)
      for (int h = 0; h < DHKV; h++)
        for (int t = 0; t < DPLEN; t++)
          for (int d = 0; d < DD; d++) {
            int bh = b * DHKV + h, o = (bh * DPLEN + t) * DD + d, a = past ? (int)at[b] : 0, j = t - a;
            int p = (int)seqpos[b] + j, pc = p < DCOS ? p : DCOS - 1;
            want_k[o] = past && t < a && t < DP ? pk[(bh * DP + t) * DD + d]
                        : j >= 0 && j < RS      ? rotated_ref(nk + ((b * RS + j) * DHKV + h) * DD, d, cos, sin, pc)
                                                : 0.0f;
          }
    mlxb_array *present_k = NULL, *present_v = NULL;
    int rc = mlxb_decode_kv_append(s, past ? pka : none, past ? pka : none, nka, nka,
                                   past ? mlxb_from_data(s, at, (int64_t[]){DB}, 1, MLXB_I64) : NULL, 0, DPLEN,
                                   &seq_rope, &present_k, &present_v);
    CHECK(rc == 0, "rows kv append %d (%s)", form, mlxb_error(s));
    if (rc == 0 && mlxb_read(s, present_k, got, sizeof got) == 0)
      for (size_t i = 0; i < sizeof got / sizeof *got; i++)
        CHECK(fabsf(got[i] - want_k[i]) <= 1e-6f, "rows kv append %d k[%zu] = %g, want %g", form, i, got[i], want_k[i]);
  }
}

/* A Run's copies as operations of its own graph (mlxb_copy_into_device, mlxb_pad_inputs), with the
 * EP's device memory: MLX's GPU memory where MLX has a GPU (opt-in there:
 * ORT_EP_MLX_COPY_IN_PROGRAM=1), else host memory standing in for it (on by default). */
static void test_program_copies(void) {
  bool gpu = mlxb_gpu_available();
  if (!mlxb_device_memory_enable(!gpu)) {
    printf("program copies: no device memory here\n");
    return;
  }
  mlxb_scope *s = mlxb_scope_new(gpu ? MLXB_DEVICE_GPU : MLXB_DEVICE_CPU);
  if (!s) return;
  if (!mlxb_copy_into_device_available(s)) {
    printf("program copies: not on for this device (ORT_EP_MLX_COPY_IN_PROGRAM)\n");
    mlxb_scope_free(s);
    return;
  }
  float v[24], twice[24];
  for (int i = 0; i < 24; i++) v[i] = (float)i - 5.0f, twice[i] = 2.0f * v[i];
  mlxb_array *x = f32(s, v, (int64_t[]){2, 3, 4}, 3);
  mlxb_array *results[2] = {mlxb_contiguous(s, x), mlxb_contiguous(s, mlxb_binary(s, MLXB_ADD, x, x))};
  float *whole = mlxb_device_alloc(sizeof v), *prefix = mlxb_device_alloc(2 * 2 * 4 * sizeof(float));
  CHECK(whole && prefix, "device buffers");
  if (!whole || !prefix) goto done;
  /* the whole first result; the second's first 2 of 3 entries along axis 1 */
  mlxb_output_copy copies[2] = {{0, -1, 0, whole, sizeof v}, {1, 1, 2, prefix, 2 * 2 * 4 * sizeof(float)}};
  mlxb_array *op = mlxb_copy_into_device(s, results, 2, copies, 2);
  CHECK(op != NULL, "copy operation: %s", mlxb_error(s));
  mlxb_array *all[3] = {results[0], results[1], op};
  CHECK(op && mlxb_eval(s, all, 3) == 0, "eval with the copies: %s", mlxb_error(s));
  float host[24];
  if (op) { /* unified memory (or the stand-in's host memory): read directly after the eval */
    memcpy(host, whole, sizeof v);
    for (int i = 0; i < 24; i++) CHECK(host[i] == v[i], "whole copy[%d] = %g, want %g", i, host[i], v[i]);
    for (int b = 0; b < 2; b++)
      for (int k = 0; k < 8; k++)
        CHECK(prefix[b * 8 + k] == twice[b * 12 + k], "prefix copy[%d] = %g, want %g", b * 8 + k, prefix[b * 8 + k],
              twice[b * 12 + k]);
  }
  /* each bad list refused when the operation is built, naming why */
  float on_stack[24];
  const struct {
    mlxb_output_copy c;
    const char *why;
  } bad[] = {{{2, -1, 0, whole, sizeof v}, "source out of range"},
             {{0, -1, 0, whole, sizeof v - 4}, "size does not match"},
             {{0, 1, 4, whole, sizeof v}, "prefix outside"},
             {{0, -1, 0, on_stack, sizeof on_stack}, "not device memory"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    mlxb_clear_error(s);
    CHECK(mlxb_copy_into_device(s, results, 2, &bad[i].c, 1) == NULL && strstr(mlxb_error(s), bad[i].why),
          "bad copy %zu refused (%s): %s", i, bad[i].why, mlxb_error(s));
  }
  mlxb_clear_error(s);
  /* two evaluated inputs padded along their axis 1 and 0 in one operation, zero rows after */
  mlxb_array *padded[3] = {x, x, x};
  CHECK(mlxb_eval(s, padded, 1) == 0, "eval x");
  CHECK(mlxb_pad_inputs(s, padded, (int[]){1, -1, 0}, 3, 2) == 0, "pad inputs: %s", mlxb_error(s));
  expect_shape(padded[0], (int64_t[]){2, 5, 4}, 3, "padded along axis 1");
  CHECK(padded[1] == x, "an input with no axis stays");
  expect_shape(padded[2], (int64_t[]){4, 3, 4}, 3, "padded along axis 0");
  float want1[40], want0[48];
  for (int b = 0; b < 2; b++)
    for (int r = 0; r < 5; r++)
      for (int k = 0; k < 4; k++) want1[(b * 5 + r) * 4 + k] = r < 3 ? v[(b * 3 + r) * 4 + k] : 0.0f;
  for (int i = 0; i < 48; i++) want0[i] = i < 24 ? v[i] : 0.0f;
  expect_f32(s, padded[0], want1, 40, 0.0f, "padded rows along axis 1");
  expect_f32(s, padded[2], want0, 48, 0.0f, "padded rows along axis 0");
  if (gpu) expect_f32(s, results[1], twice, 24, 0.0f, "results after the copies");
done:
  mlxb_device_free(whole);
  mlxb_device_free(prefix);
  CHECK(mlxb_ok(s), "program copies scope ok: %s", mlxb_error(s));
  mlxb_scope_free(s);
}

int main(void) {
  /* the prompt form on CPU scopes too (single-threaded per head there; MLX's CUDA backend by default) */
  setenv("ORT_EP_MLX_ROWS_ATTENTION", "all", 0);
  test_library();
  mlxb_scope *s = mlxb_scope_new(MLXB_DEVICE_CPU);
  CHECK(s != NULL, "scope_new");
  if (!s) return 1;
  test_creation(s);
  test_eye(s);
  test_cpu_dtypes(s);
  test_elementwise(s);
  test_reduce(s);
  test_shapes(s);
  test_linalg(s);
  test_threads(s);
  test_eval_mixed_float64(s);
  test_float64_intermediate(s);
  test_quantized_matmul_rows(s);
  test_dequant_f32(s);
  test_quantize_blocks(s);
  test_qgemm_split(s);
  test_int_reduce_rows(s);
  test_decode_step(s);
  test_prompt_rows(s);
  CHECK(mlxb_ok(s), "main scope still ok: %s", mlxb_error(s));
  mlxb_scope_free(s);
  if (mlxb_gpu_available()) { /* MLX's CUDA or Metal backend: the same answers on a GPU scope */
    mlxb_scope *g = mlxb_scope_new(MLXB_DEVICE_GPU);
    CHECK(g != NULL, "gpu scope_new");
    if (g) {
      test_eye(g);
      test_cpu_dtypes(g);
      test_eval_mixed_float64(g);
      test_float64_intermediate(g);
      test_quantized_matmul_rows(g);
      test_dequant_f32(g);
      test_qgemm_split(g);
      test_int_reduce_rows(g);
      test_decode_step(g);
      test_prompt_rows(g);
      CHECK(mlxb_ok(g), "gpu scope still ok: %s", mlxb_error(g));
      mlxb_scope_free(g);
    }
  }
  test_errors();
  test_program_copies();
  char report[4096];
  int kernels = mlxb_cuda_kernels_selfcheck(report, sizeof report);
  CHECK(kernels >= 0, "our CUDA kernels compile as the kernel cache launches them: %s", report);
  if (kernels > 0) printf("CUDA kernel sources not compiled: %s\n", report);
  printf("%d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
