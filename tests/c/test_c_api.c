/* The EP seen from a plain C program: registers the plugin library through ORT's public C API,
 * selects the MLX device, runs tests/data/add_relu.onnx (y = Relu(a + b), float[2, 3]) with CPU
 * fallback disabled and checks y against values computed here. Every further model gets a strict
 * session too (Compile, with the rows' prepare stages) and three Runs on zero-filled inputs of its
 * declared shapes (float, int64 and int32 inputs, fixed dimensions), so their plans run under the
 * leak check as well. Usage:
 *   test_c_api <ep library path> <model.onnx> [model.onnx ...] */
#define _XOPEN_SOURCE 700 /* realpath */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnxruntime_c_api.h"

#define EP_NAME "MLXExecutionProvider"
#define MIN_API_VERSION 22 /* plugin EP libraries arrived with ORT 1.22 */
#define N_ROWS 2
#define N_COLS 3
#define N_ELEMS (N_ROWS * N_COLS)

static const OrtApi *api;

/* Prints and releases a failed status; returns 0 when `status` is NULL (success), else -1. */
static int check(OrtStatus *status, const char *what) {
  if (!status) return 0;
  fprintf(stderr, "test_c_api: %s failed: %s\n", what, api->GetErrorMessage(status));
  api->ReleaseStatus(status);
  return -1;
}

/* The newest API the runtime offers, from the headers' version down to MIN_API_VERSION (the
 * runtime returns NULL for versions newer than itself). */
static const OrtApi *api_get(void) {
  const OrtApiBase *base = OrtGetApiBase();
  for (uint32_t v = ORT_API_VERSION; v >= MIN_API_VERSION; v--) {
    const OrtApi *a = base->GetApi(v);
    if (a) return a;
  }
  fprintf(stderr, "test_c_api: runtime %s offers no API version >= %d\n", base->GetVersionString(),
          MIN_API_VERSION);
  return NULL;
}

/* The EP's device among the registered ones; NULL (with a message) when absent. */
static const OrtEpDevice *device_find(OrtEnv *env) {
  const OrtEpDevice *const *devices = NULL;
  size_t n = 0;
  if (check(api->GetEpDevices(env, &devices, &n), "GetEpDevices")) return NULL;
  for (size_t i = 0; i < n; i++)
    if (strcmp(api->EpDevice_EpName(devices[i]), EP_NAME) == 0) return devices[i];
  fprintf(stderr, "test_c_api: no OrtEpDevice named %s among %zu devices\n", EP_NAME, n);
  return NULL;
}

/* Session options with the EP selected and CPU fallback disabled. */
static OrtSessionOptions *options_create(OrtEnv *env, const OrtEpDevice *device) {
  OrtSessionOptions *so = NULL;
  if (check(api->CreateSessionOptions(&so), "CreateSessionOptions")) return NULL;
  if (check(api->SessionOptionsAppendExecutionProvider_V2(so, env, &device, 1, NULL, NULL, 0),
            "SessionOptionsAppendExecutionProvider_V2") ||
      check(api->AddSessionConfigEntry(so, "session.disable_cpu_ep_fallback", "1"),
            "AddSessionConfigEntry")) {
    api->ReleaseSessionOptions(so);
    return NULL;
  }
  return so;
}

/* Checks y's type, shape and values against Relu(a + b). */
static int output_check(OrtValue *y, const float *a, const float *b) {
  OrtTensorTypeAndShapeInfo *info = NULL;
  ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  size_t rank = 0;
  int64_t dims[2] = {0, 0};
  float *data = NULL;
  int rc = -1;
  if (check(api->GetTensorTypeAndShape(y, &info), "GetTensorTypeAndShape")) return -1;
  if (check(api->GetTensorElementType(info, &type), "GetTensorElementType") ||
      check(api->GetDimensionsCount(info, &rank), "GetDimensionsCount"))
    goto done;
  if (type != ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT || rank != 2) {
    fprintf(stderr, "test_c_api: y has element type %d and rank %zu, want float rank 2\n", (int)type,
            rank);
    goto done;
  }
  if (check(api->GetDimensions(info, dims, 2), "GetDimensions")) goto done;
  if (dims[0] != N_ROWS || dims[1] != N_COLS) {
    fprintf(stderr, "test_c_api: y has shape [%lld, %lld], want [2, 3]\n", (long long)dims[0],
            (long long)dims[1]);
    goto done;
  }
  if (check(api->GetTensorMutableData(y, (void **)&data), "GetTensorMutableData")) goto done;
  for (int i = 0; i < N_ELEMS; i++) {
    float want = a[i] + b[i] > 0.0f ? a[i] + b[i] : 0.0f;
    float diff = data[i] > want ? data[i] - want : want - data[i]; /* no libm needed */
    if (diff > 1e-6f) {
      fprintf(stderr, "test_c_api: y[%d] = %g, want %g\n", i, (double)data[i], (double)want);
      goto done;
    }
  }
  rc = 0;
done:
  api->ReleaseTensorTypeAndShapeInfo(info);
  return rc;
}

/* Runs the model once on a and b (float[2, 3] each) and checks the result. */
static int session_run_check(OrtSession *session) {
  static const float a[N_ELEMS] = {1.0f, -2.0f, 3.5f, -0.25f, 0.0f, 7.0f};
  static const float b[N_ELEMS] = {0.5f, 1.0f, -4.0f, 0.5f, -1.0f, 0.125f};
  const int64_t shape[2] = {N_ROWS, N_COLS};
  const char *input_names[2] = {"a", "b"};
  const char *output_names[1] = {"y"};
  OrtMemoryInfo *mem = NULL;
  OrtValue *inputs[2] = {NULL, NULL};
  OrtValue *y = NULL;
  int rc = -1;
  if (check(api->CreateCpuMemoryInfo(OrtArenaAllocator, OrtMemTypeDefault, &mem),
            "CreateCpuMemoryInfo"))
    return -1;
  /* The tensors borrow a and b (ORT never writes inputs), hence the casts. */
  if (check(api->CreateTensorWithDataAsOrtValue(mem, (void *)a, sizeof a, shape, 2,
                                                ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, &inputs[0]),
            "CreateTensorWithDataAsOrtValue(a)") ||
      check(api->CreateTensorWithDataAsOrtValue(mem, (void *)b, sizeof b, shape, 2,
                                                ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, &inputs[1]),
            "CreateTensorWithDataAsOrtValue(b)"))
    goto done;
  if (check(api->Run(session, NULL, input_names, (const OrtValue *const *)inputs, 2, output_names,
                     1, &y),
            "Run"))
    goto done;
  rc = output_check(y, a, b);
done:
  api->ReleaseValue(y);
  api->ReleaseValue(inputs[1]);
  api->ReleaseValue(inputs[0]);
  api->ReleaseMemoryInfo(mem);
  return rc;
}

/* Creates a strict session for the model with the registered EP and runs it three times. */
static int model_run(OrtEnv *env, const char *model_path) {
  const OrtEpDevice *device = device_find(env);
  OrtSessionOptions *so = NULL;
  OrtSession *session = NULL;
  int rc = -1;
  if (!device) return -1;
  so = options_create(env, device);
  if (!so) return -1;
  if (check(api->CreateSession(env, model_path, so, &session), "CreateSession")) goto done;
  /* Three Runs of one signature: eager, then the compile trace, then a replay (all three paths
   * run under the leak check). */
  for (int r = 0; r < 3; r++)
    if ((rc = session_run_check(session)) != 0) break;
done:
  api->ReleaseSession(session);
  api->ReleaseSessionOptions(so);
  return rc;
}

/* One zero-filled input tensor of the session's input i (fixed dims only); NULL on failure. */
static OrtValue *zero_input(OrtSession *session, OrtAllocator *alloc, size_t i) {
  OrtTypeInfo *ti = NULL;
  const OrtTensorTypeAndShapeInfo *info = NULL;
  OrtValue *v = NULL;
  ONNXTensorElementDataType type;
  size_t rank = 0;
  int64_t dims[8];
  if (check(api->SessionGetInputTypeInfo(session, i, &ti), "SessionGetInputTypeInfo")) return NULL;
  if (check(api->CastTypeInfoToTensorInfo(ti, &info), "CastTypeInfoToTensorInfo") || !info ||
      check(api->GetTensorElementType(info, &type), "GetTensorElementType") ||
      check(api->GetDimensionsCount(info, &rank), "GetDimensionsCount") || rank > 8 ||
      check(api->GetDimensions(info, dims, rank), "GetDimensions"))
    goto done;
  size_t n = 1, esz = type == ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT   ? 4
                      : type == ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32 ? 4
                      : type == ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64 ? 8
                                                                    : 0;
  for (size_t k = 0; k < rank; k++) n *= dims[k] > 0 ? (size_t)dims[k] : 0;
  if (!esz || !n) {
    fprintf(stderr, "test_c_api: input %zu needs a float/int32/int64 type and fixed dimensions\n", i);
    goto done;
  }
  void *data = NULL;
  if (check(api->CreateTensorAsOrtValue(alloc, dims, rank, type, &v), "CreateTensorAsOrtValue")) goto done;
  if (check(api->GetTensorMutableData(v, &data), "GetTensorMutableData")) {
    api->ReleaseValue(v);
    v = NULL;
    goto done;
  }
  memset(data, 0, n * esz);
done:
  api->ReleaseTypeInfo(ti);
  return v;
}

/* A strict session for the model and three Runs (eager, trace, replay) on zero inputs. */
static int model_run_zeros(OrtEnv *env, const char *model_path) {
  enum { MAX_IO = 16 };
  const OrtEpDevice *device = device_find(env);
  OrtSessionOptions *so = device ? options_create(env, device) : NULL;
  OrtSession *session = NULL;
  OrtAllocator *alloc = NULL;
  OrtValue *inputs[MAX_IO] = {0}, *outputs[MAX_IO] = {0};
  char *in_names[MAX_IO] = {0}, *out_names[MAX_IO] = {0};
  size_t n_in = 0, n_out = 0;
  int rc = -1;
  if (!so) return -1;
  if (check(api->CreateSession(env, model_path, so, &session), "CreateSession") ||
      check(api->GetAllocatorWithDefaultOptions(&alloc), "GetAllocatorWithDefaultOptions") ||
      check(api->SessionGetInputCount(session, &n_in), "SessionGetInputCount") ||
      check(api->SessionGetOutputCount(session, &n_out), "SessionGetOutputCount"))
    goto done;
  if (n_in > MAX_IO || n_out > MAX_IO) goto done;
  for (size_t i = 0; i < n_in; i++)
    if (check(api->SessionGetInputName(session, i, alloc, &in_names[i]), "SessionGetInputName") ||
        !(inputs[i] = zero_input(session, alloc, i)))
      goto done;
  for (size_t i = 0; i < n_out; i++)
    if (check(api->SessionGetOutputName(session, i, alloc, &out_names[i]), "SessionGetOutputName")) goto done;
  for (int r = 0; r < 3; r++) {
    if (check(api->Run(session, NULL, (const char *const *)in_names, (const OrtValue *const *)inputs, n_in,
                       (const char *const *)out_names, n_out, outputs),
              "Run"))
      goto done;
    for (size_t i = 0; i < n_out; i++) {
      api->ReleaseValue(outputs[i]);
      outputs[i] = NULL;
    }
  }
  rc = 0;
done:
  for (size_t i = 0; i < MAX_IO; i++) {
    api->ReleaseValue(inputs[i]);
    api->ReleaseValue(outputs[i]);
    if (in_names[i]) check(api->AllocatorFree(alloc, in_names[i]), "AllocatorFree");
    if (out_names[i]) check(api->AllocatorFree(alloc, out_names[i]), "AllocatorFree");
  }
  api->ReleaseSession(session);
  api->ReleaseSessionOptions(so);
  if (rc) fprintf(stderr, "test_c_api: model %s failed\n", model_path);
  return rc;
}

int main(int argc, char **argv) {
  OrtEnv *env = NULL;
  char lib_path[PATH_MAX];
  int rc = 1;
  if (argc < 3) {
    fprintf(stderr, "usage: %s <ep library path> <model.onnx> [model.onnx ...]\n", argv[0]);
    return 2;
  }
  /* ORT resolves a relative library path against its own folder, not the working directory. */
  if (!realpath(argv[1], lib_path)) snprintf(lib_path, sizeof lib_path, "%s", argv[1]);
  api = api_get();
  if (!api) return 1;
  if (check(api->CreateEnv(ORT_LOGGING_LEVEL_WARNING, "test_c_api", &env), "CreateEnv")) return 1;
  if (check(api->RegisterExecutionProviderLibrary(env, EP_NAME, lib_path),
            "RegisterExecutionProviderLibrary"))
    goto release_env;
  if (model_run(env, argv[2]) == 0) rc = 0;
  for (int m = 3; m < argc && rc == 0; m++)
    if (model_run_zeros(env, argv[m])) rc = 1;
  if (check(api->UnregisterExecutionProviderLibrary(env, EP_NAME),
            "UnregisterExecutionProviderLibrary"))
    rc = 1;
release_env:
  api->ReleaseEnv(env);
  if (rc == 0) printf("test_c_api: OK\n");
  return rc;
}
