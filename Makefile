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

.PHONY: all demo test test-python test-c test-ort123 conformance docs bench clean
all: $(LIB)

$(VENV)/.stamp: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt
	touch $@

.venv-ort123/.stamp:
	$(PYTHON) -m venv .venv-ort123
	.venv-ort123/bin/pip install -q --disable-pip-version-check onnxruntime==1.23.2 numpy==2.4.6 onnx==1.23.2
	touch $@

# Fetched once, when absent (the files themselves are the targets).
$(FETCHED_HEADERS):
	scripts/fetch_debs.sh headers

$(TESTDATA):
	scripts/fetch_debs.sh testdata

$(BUILD)/.configured: $(VENV)/.stamp $(if $(ORT_INCLUDE_DIR),,$(FETCHED_HEADERS)) CMakeLists.txt VERSION
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release \
	  -DMLX_ROOT="$$($(PY) -m mlx --cmake-dir)" \
	  -DORT_INCLUDE_DIR="$(ORT_HEADERS)" \
	  -DORT_RUNTIME_LIB_DIR="$$($(PY) -c 'import onnxruntime,os;print(os.path.join(os.path.dirname(onnxruntime.__file__),"capi"))')" >/dev/null
	touch $@

$(LIB): $(BUILD)/.configured FORCE
	cmake --build $(BUILD) -j $(JOBS)

FORCE:

demo: $(LIB)
	$(PY) examples/demo.py

test: $(LIB) .venv-ort123/.stamp $(TESTDATA)
	$(PY) -m pytest -q -x tests
	$(PY) tools/gen_operators.py --check
	$(BUILD)/test_c_api $(LIB) tests/data/add_relu.onnx
	.venv-ort123/bin/python tests/smoke_ort123.py $(LIB)
	$(PY) tests/conformance/run.py --check

conformance: $(LIB) $(TESTDATA)
	$(PY) tests/conformance/run.py --write

docs: $(LIB)
	$(PY) tools/gen_operators.py --write

bench: $(LIB) $(TESTDATA)
	$(PY) bench/run.py

clean:
	rm -rf $(BUILD)
