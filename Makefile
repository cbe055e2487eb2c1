# onnxruntime-ep-mlx: `make demo` sets everything up and runs the demo; `make test` runs the tests.
# Every dependency is installed into this folder on first use: a virtualenv (.venv) from PyPI, and
# Debian packages (ORT C headers, ONNX node test data) unpacked into third_party/ by
# scripts/fetch_debs.sh (which holds their pins). `make ORT_INCLUDE_DIR=/path` builds against
# headers of your own and fetches none.
PYTHON      ?= python3
VENV        := .venv
PY          := $(VENV)/bin/python
BUILD       := build
JOBS        ?= $(shell nproc)
ORT_INCLUDE_DIR ?=
FETCHED_HEADERS := third_party/root/usr/include/onnxruntime/onnxruntime_ep_c_api.h
ORT_HEADERS := $(if $(ORT_INCLUDE_DIR),$(ORT_INCLUDE_DIR),$(CURDIR)/$(patsubst %/,%,$(dir $(FETCHED_HEADERS))))
TESTDATA    := third_party/root/usr/share/libonnx-testdata/data/node
LIB         := $(BUILD)/libonnxruntime_ep_mlx.so

.PHONY: all demo test test-python test-c test-ort123 conformance docs bench clean sanitize fuzz check-vmath
all: $(LIB)

# MLX's backend wheel: cpu (mlx-cpu, the default) or cuda13 (mlx-cuda-13, on an NVIDIA machine).
# Both ship mlx/lib/libmlx.so, so switching removes the other one first.
MLX_BACKEND ?= cpu
ifeq ($(MLX_BACKEND),cuda13)
MLX_BACKEND_PIN := mlx-cuda-13==$(shell sed -n 's/^mlx-cpu==//p' requirements.txt)
MLX_OTHER_BACKEND := mlx-cpu
else ifeq ($(MLX_BACKEND),cpu)
MLX_BACKEND_PIN := mlx-cpu==$(shell sed -n 's/^mlx-cpu==//p' requirements.txt)
MLX_OTHER_BACKEND := mlx-cuda-13
else
$(error MLX_BACKEND must be cpu or cuda13, not '$(MLX_BACKEND)')
endif

$(VENV)/.stamp-$(MLX_BACKEND): requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip uninstall -q -y $(MLX_OTHER_BACKEND) 2>/dev/null || true
	grep -v '^mlx-cpu==' requirements.txt > $(VENV)/requirements-$(MLX_BACKEND).txt
	echo '$(MLX_BACKEND_PIN)' >> $(VENV)/requirements-$(MLX_BACKEND).txt
	$(PY) -m pip install -q --disable-pip-version-check --force-reinstall --no-deps '$(MLX_BACKEND_PIN)'
	$(PY) -m pip install -q --disable-pip-version-check -r $(VENV)/requirements-$(MLX_BACKEND).txt
	rm -f $(VENV)/.stamp-*
	touch $@ $(VENV)/.stamp

.venv-ort123/.stamp:
	$(PYTHON) -m venv .venv-ort123
	.venv-ort123/bin/pip install -q --disable-pip-version-check onnxruntime==1.23.2 numpy==2.4.6 onnx==1.23.2
	touch $@

# A middle runtime for the same library: the smoke test and the hostile-data catalogue.
.venv-ort127/.stamp:
	$(PYTHON) -m venv .venv-ort127
	.venv-ort127/bin/pip install -q --disable-pip-version-check onnxruntime==1.27.0 numpy==2.4.6 onnx==1.23.2 pytest==9.2.0
	touch $@

# Fetched once, when absent (the files themselves are the targets).
$(FETCHED_HEADERS):
	scripts/fetch_debs.sh headers

$(TESTDATA):
	scripts/fetch_debs.sh testdata

# MLX's CMake package from a CUDA wheel asks for the CUDA toolkit at configure time although
# nothing CUDA is on its interface: the CUDA backend links libmlx.so directly.
MLX_CMAKE = $(if $(filter cuda13,$(MLX_BACKEND)),-DMLX_LIBRARY_FILE="$$($(PY) -m mlx --cmake-dir)/lib/libmlx.so" -DMLX_HEADERS_DIR="$$($(PY) -m mlx --cmake-dir)/include",-DMLX_ROOT="$$($(PY) -m mlx --cmake-dir)")

$(BUILD)/.configured: $(VENV)/.stamp-$(MLX_BACKEND) $(if $(ORT_INCLUDE_DIR),,$(FETCHED_HEADERS)) CMakeLists.txt VERSION
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release \
	  $(MLX_CMAKE) \
	  -DORT_INCLUDE_DIR="$(ORT_HEADERS)" \
	  -DORT_RUNTIME_LIB_DIR="$$($(PY) -c 'import onnxruntime,os;print(os.path.join(os.path.dirname(onnxruntime.__file__),"capi"))')" >/dev/null
	touch $@

$(LIB): $(BUILD)/.configured FORCE
	cmake --build $(BUILD) -j $(JOBS)

FORCE:

demo: $(LIB)
	$(PY) examples/demo.py

test: $(LIB) .venv-ort123/.stamp .venv-ort127/.stamp $(TESTDATA)
	$(PY) -m pytest -q -x tests
	$(PY) tools/gen_operators.py --check
	$(BUILD)/test_bridge
	$(BUILD)/test_registry
	$(BUILD)/test_c_api $(LIB) tests/data/add_relu.onnx
	.venv-ort123/bin/python tests/smoke_ort123.py $(LIB)
	.venv-ort127/bin/python tests/smoke_ort123.py $(LIB)
	ORT_EP_MLX_LIBRARY=$(CURDIR)/$(LIB) .venv-ort127/bin/python -m pytest -q -p no:cacheprovider tests/hostile
	$(PY) tests/conformance/run.py --check

conformance: $(LIB) $(TESTDATA)
	$(PY) tests/conformance/run.py --write

docs: $(LIB)
	$(PY) tools/gen_operators.py --write

# Every float32 through the CPU vector math of src/mlx/bridge_cpu_vmath.cpp (about a minute).
check-vmath: $(LIB)
	cmake --build $(BUILD) --target check_vmath -j $(JOBS)
	$(BUILD)/check_vmath

bench: $(LIB) $(TESTDATA)
	$(PY) bench/run.py

clean:
	rm -rf $(BUILD)

# ASan+UBSan build of the library (build-asan/, CMake option EP_MLX_SANITIZE) and the C program,
# the hostile catalogue and the fuzz slice under it (README, "Sanitizers"). Python is not
# instrumented: libasan/libubsan are preloaded. The *_beyond_memory cases are left out: ORT's CPU
# EP (the reference side) allocates terabytes there and ASan's operator new aborts instead of
# throwing bad_alloc.
ASAN_RT = $(shell gcc -print-file-name=libasan.so) $(shell gcc -print-file-name=libubsan.so)
sanitize: $(VENV)/.stamp-$(MLX_BACKEND) $(if $(ORT_INCLUDE_DIR),,$(FETCHED_HEADERS))
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEP_MLX_SANITIZE=ON $(MLX_CMAKE) \
	  -DORT_INCLUDE_DIR="$(ORT_HEADERS)" \
	  -DORT_RUNTIME_LIB_DIR="$$($(PY) -c 'import onnxruntime,os;print(os.path.join(os.path.dirname(onnxruntime.__file__),"capi"))')" >/dev/null
	cmake --build build-asan -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=0:halt_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  build-asan/test_c_api $(CURDIR)/build-asan/libonnxruntime_ep_mlx.so tests/data/add_relu.onnx
	LD_PRELOAD="$(ASAN_RT)" ASAN_OPTIONS=detect_leaks=0:halt_on_error=1:allocator_may_return_null=1 \
	  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ORT_EP_MLX_LIBRARY=$(CURDIR)/build-asan/libonnxruntime_ep_mlx.so \
	  $(PY) -m pytest -q -p no:cacheprovider tests/hostile tests/fuzz tests/test_cpu_qgemv.py tests/test_ops_contrib_quant.py tests/test_cpu_gemm.py tests/test_cpu_blas.py tests/test_cpu_unary.py tests/test_cpu_decode.py tests/test_ops_rnn.py tests/test_ops_pool.py tests/test_ops_shape.py -k "not beyond_memory"

# A long differential fuzzing run (docs/RELIABILITY.md): make fuzz FUZZ_COUNT=10000 FUZZ_SEED=0
FUZZ_COUNT ?= 10000
FUZZ_SEED ?= 0
fuzz: $(LIB)
	$(PY) tools/fuzz/run.py --count $(FUZZ_COUNT) --seed $(FUZZ_SEED) --save
