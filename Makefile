# onnxruntime-ep-mlx: `make demo` sets everything up and runs the demo; `make test` runs the tests.
# Every dependency is installed into this folder on first use: a virtualenv (.venv) from PyPI, and
# Debian packages (ORT C headers, ONNX node test data) unpacked into third_party/.
PYTHON      ?= python3
VENV        := .venv
PY          := $(VENV)/bin/python
BUILD       := build
JOBS        ?= $(shell nproc)
ORT_HEADERS_DEB := libonnxruntime-dev=1.27.1+dfsg-1
ONNX_DATA_DEB   := libonnx-testdata=1.20.0-6
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

third_party/.stamp: scripts/fetch_debs.sh
	rm -rf third_party/root third_party/debs
	scripts/fetch_debs.sh $(ORT_HEADERS_DEB) $(ONNX_DATA_DEB)
	touch $@

$(BUILD)/.configured: $(VENV)/.stamp third_party/.stamp CMakeLists.txt
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release \
	  -DMLX_ROOT="$$($(PY) -m mlx --cmake-dir)" \
	  -DORT_INCLUDE_DIR="$(CURDIR)/third_party/root/usr/include/onnxruntime" \
	  -DORT_RUNTIME_LIB_DIR="$$($(PY) -c 'import onnxruntime,os;print(os.path.join(os.path.dirname(onnxruntime.__file__),"capi"))')" >/dev/null
	touch $@

$(LIB): $(BUILD)/.configured FORCE
	cmake --build $(BUILD) -j $(JOBS)

FORCE:

demo: $(LIB)
	$(PY) examples/demo.py

test: $(LIB) .venv-ort123/.stamp
	$(PY) -m pytest -q -x tests
	$(PY) tools/gen_operators.py --check
	$(BUILD)/test_c_api $(LIB) tests/data/add_relu.onnx
	.venv-ort123/bin/python tests/smoke_ort123.py $(LIB)
	$(PY) tests/conformance/run.py --check

conformance: $(LIB)
	$(PY) tests/conformance/run.py --write

docs: $(LIB)
	$(PY) tools/gen_operators.py --write

bench: $(LIB)
	$(PY) bench/run.py

clean:
	rm -rf $(BUILD)
