"""Helpers for parity tests: build one-node ONNX models, run them with the MLX EP in strict mode
(session.disable_cpu_ep_fallback=1, so a test fails if any node falls back to the CPU EP) and
with ORT's CPU EP, and compare the outputs with stated tolerances."""
from __future__ import annotations

import functools
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import onnxruntime_ep_mlx as mlx_ep

NP_TO_ONNX = {np.dtype(k): v for k, v in {
    "float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16, "float64": TensorProto.DOUBLE,
    "int8": TensorProto.INT8, "int16": TensorProto.INT16, "int32": TensorProto.INT32,
    "int64": TensorProto.INT64, "uint8": TensorProto.UINT8, "uint16": TensorProto.UINT16,
    "uint32": TensorProto.UINT32, "uint64": TensorProto.UINT64, "bool": TensorProto.BOOL}.items()}

# Default tolerances per dtype (rtol, atol).
TOL = {TensorProto.FLOAT: (1e-5, 1e-5), TensorProto.FLOAT16: (1e-2, 1e-2),
       TensorProto.BFLOAT16: (2e-2, 2e-2), TensorProto.DOUBLE: (1e-10, 1e-10)}


_RNG = np.random.default_rng(0)


def rng_values(shape, dtype=np.float32, rng=None):
    """Random test data of a dtype: bools, small non-negative integers, or standard normals."""
    rng = rng or _RNG
    if np.dtype(dtype) == np.bool_:
        return rng.random(shape) > 0.5
    if np.dtype(dtype).kind in "iu":
        return rng.integers(0, 5, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def onnx_type(arr) -> int:
    return NP_TO_ONNX[np.asarray(arr).dtype]


def make_model(nodes, inputs, outputs, initializers=(), opset=21, domains=()):
    """inputs/outputs: lists of (name, onnx_dtype, shape or None); shape entries may be strings."""
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        initializer=[numpy_helper.from_array(np.asarray(v), k) if not isinstance(v, onnx.TensorProto) else v
                     for k, v in dict(initializers).items()])
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in domains]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 10
    return model.SerializeToString()


def single_op_model(op, inputs: dict, n_outputs=1, out_dtypes=None, attrs=None, opset=21,
                    initializers=None, domain="", out_shapes=None):
    """A model with one node. inputs maps name -> numpy array (feeds) ; initializers maps
    name -> numpy array (constants). Outputs are named y0, y1, ... with unknown shapes."""
    initializers = initializers or {}
    names = list(inputs) + [k for k in initializers if k not in inputs]
    node = helper.make_node(op, names if not isinstance(inputs, list) else inputs,
                            [f"y{i}" for i in range(n_outputs)], domain=domain, **(attrs or {}))
    first = next(iter({**inputs, **initializers}.values()), None)
    out_dtypes = out_dtypes or [onnx_type(first)] * n_outputs
    ins = [(k, onnx_type(v), list(np.shape(v))) for k, v in inputs.items()]
    outs = [(f"y{i}", out_dtypes[i], (out_shapes[i] if out_shapes else None)) for i in range(n_outputs)]
    domains = [(domain, 1)] if domain else []
    return make_model([node], ins, outs, initializers.items(), opset=opset, domains=domains)


def run_cpu(model: bytes, feeds: dict):
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def run_mlx(model: bytes, feeds: dict, strict=True, options=None):
    sess = mlx_ep.session(model, options=options, strict=strict)
    return sess.run(None, feeds)


# assert_parity runs the MLX session this many times on the same feeds: the first Run of a
# signature builds the MLX graph eagerly, the second traces the compiled program, the third
# replays it; every Run must match ORT's CPU EP.
PARITY_RUNS = 3


def _assert_outputs_match(got, want, rtol, atol, run):
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        where = f"run {run + 1}, output {i}"
        assert g.dtype == w.dtype, f"{where}: dtype {g.dtype} != {w.dtype}"
        assert g.shape == w.shape, f"{where}: shape {g.shape} != {w.shape}"
        if w.dtype.kind in "fc":
            r, a = TOL.get(NP_TO_ONNX.get(w.dtype, TensorProto.FLOAT), (1e-5, 1e-5))
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64),
                                       rtol=rtol if rtol is not None else r,
                                       atol=atol if atol is not None else a,
                                       err_msg=where, equal_nan=True)
        else:
            np.testing.assert_array_equal(g, w, err_msg=where)


def run_mlx_each(model: bytes, feeds: dict, strict=True, options=None):
    """The outputs of PARITY_RUNS Runs of one MLX session on the same feeds (eager, trace, replay):
    assert_parity's triple, for tests that compare with tolerances of their own."""
    sess = mlx_ep.session(model, options=options, strict=strict)
    return [sess.run(None, feeds) for _ in range(PARITY_RUNS)]


def assert_parity(model: bytes, feeds: dict, rtol=None, atol=None, strict=True, options=None):
    """Runs model on MLX (strict; PARITY_RUNS times: eager, trace, replay) and on the CPU EP;
    compares every output of every Run. Returns the first Run's MLX outputs."""
    want = run_cpu(model, feeds)
    runs = run_mlx_each(model, feeds, strict=strict, options=options)
    for run, got in enumerate(runs):
        _assert_outputs_match(got, want, rtol, atol, run)
    return runs[0]


# ---- model builders shared by the op tests -------------------------------------------------------

def feeds_model(op, feeds: dict, inits=None, attrs=None, out_dtypes=None, opset=21, names=None, n_out=1):
    """One-node model: feeds are graph inputs, inits initializers (name -> array); names orders the
    node inputs ('' for an absent optional input). Outputs y0, y1, ... have out_dtypes, by default
    n_out outputs of the first input's dtype. Returns (model, feeds)."""
    inits = inits or {}
    names = names or list(feeds) + list(inits)
    if not out_dtypes:
        first = next(iter({**feeds, **inits}.values()))
        out_dtypes = [NP_TO_ONNX[first.dtype]] * n_out
    node = helper.make_node(op, names, [f"y{i}" for i in range(len(out_dtypes))], **(attrs or {}))
    ins = [(k, NP_TO_ONNX[v.dtype], list(v.shape)) for k, v in feeds.items()]
    outs = [(f"y{i}", t, None) for i, t in enumerate(out_dtypes)]
    return make_model([node], ins, outs, inits.items(), opset=opset), feeds


def args_model(op, args, attrs=None, n_out=1, out_dtypes=None, opset=21, dynamic=False):
    """One-node model. args: (name, array, 'feed'|'init') tuples, or None for an absent optional
    input. dynamic=True gives feeds symbolic dims. Returns (model bytes, feeds)."""
    ins, inits, feeds, names = [], {}, {}, []
    for a in args:
        if a is None:
            names.append("")
            continue
        name, arr, kind = a
        arr = np.asarray(arr)
        names.append(name)
        if kind == "init":
            inits[name] = arr
        else:
            feeds[name] = arr
            shape = [f"{name}_d{i}" for i in range(arr.ndim)] if dynamic else list(arr.shape)
            ins.append((name, NP_TO_ONNX[arr.dtype], shape))
    first = np.asarray(args[0][1])
    out_dtypes = out_dtypes or [NP_TO_ONNX[first.dtype]] * n_out
    node = helper.make_node(op, names, [f"y{i}" for i in range(n_out)], **(attrs or {}))
    outs = [(f"y{i}", out_dtypes[i], None) for i in range(n_out)]
    return make_model([node], ins, outs, inits.items(), opset=opset), feeds


def check_args(op, args, **kw):
    """assert_parity on args_model(op, args, **kw)."""
    model, feeds = args_model(op, args, **kw)
    return assert_parity(model, feeds)


def check_op(op, args, attrs=None, opset=21, out_dtype=None, **tol):
    """assert_parity on one node: args are (name, array, 'feed'|'init') tuples, or None for an absent
    optional input; tol goes to assert_parity."""
    model, feeds = args_model(op, args, attrs, out_dtypes=[out_dtype] if out_dtype else None, opset=opset)
    return assert_parity(model, feeds, **tol)


def check_feeds(op, feeds, attrs=None, n_out=1, out_dtypes=None, opset=22, inits=None, names=None, **tol):
    """assert_parity on one node whose inputs are the feeds (then the constants inits), in order or
    as `names` lists them; outputs y0.. take the first feed's dtype unless out_dtypes says."""
    inits = inits or {}
    names = names or list(feeds) + list(inits)
    first = next(iter(feeds.values()))
    out_dtypes = out_dtypes or [NP_TO_ONNX[first.dtype]] * n_out
    node = helper.make_node(op, names, [f"y{i}" for i in range(n_out)], **(attrs or {}))
    model = make_model([node], [(k, NP_TO_ONNX[v.dtype], list(v.shape)) for k, v in feeds.items()],
                       [(f"y{i}", out_dtypes[i], None) for i in range(n_out)], inits.items(), opset=opset)
    return assert_parity(model, feeds, **tol)


def f32(*v):
    return np.array(v, np.float32)


def i64(*v):
    return np.array(v, np.int64)


# ---- test data ------------------------------------------------------------------------------------

def uniform_data(shape, dtype, lo, hi, seed=0):
    """Random values of dtype in [lo, hi] (ints: inclusive; unsigned: from max(lo, 0); bools: half
    of them true)."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return np.asarray(rng.random(shape) < 0.5)
    if dtype.kind in "iu":
        lo = max(int(lo), 0) if dtype.kind == "u" else int(lo)
        return np.asarray(rng.integers(lo, int(hi) + 1, size=shape).astype(dtype))
    return np.asarray(rng.uniform(lo, hi, size=shape).astype(dtype))


def normal_data(shape, dtype=np.float32, seed=0):
    """Random values of dtype: standard normal floats, ints in [-50, 50), bools half true."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype) == np.bool_:
        return rng.random(shape) > 0.5
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-50, 50, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


# ---- claim reports --------------------------------------------------------------------------------

def claim_report(model: bytes, tmp_path, session_may_fail=False) -> str:
    """The claim report's text for a model whose nodes may fall back to the CPU EP. With
    session_may_fail the session may fail to build (ORT's CPU EP may lack a kernel for a declined
    node too): only the report matters then."""
    path = tmp_path / "report.txt"
    try:
        mlx_ep.session(model, options={"report": str(path)}, strict=False)
    except Exception:  # noqa: BLE001 - e.g. NOT_IMPLEMENTED from the CPU EP
        if not session_may_fail:
            raise
    return path.read_text()


# ---- which MLX operations ran -------------------------------------------------------------------

def child_pythonpath() -> str:
    """PYTHONPATH for a test's child process: the package and the tests folder first, then the
    caller's own path, where MLX and a carried onnxruntime may live (the GPU machine's wheels
    are on PYTHONPATH, not installed)."""
    import os
    tests = os.path.dirname(os.path.abspath(__file__))
    own = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join([os.path.join(os.path.dirname(tests), "python"), tests, *own])


def histogram_probe(probe: str, **env_switches: str):
    """Runs `probe` (Python source; sys.argv[1] is the tests folder) in a fresh process, on the EP's
    default device, with ORT_EP_MLX_OP_HISTOGRAM=1 and the given environment switches (each read
    once per process by the EP). Returns (completed process, the "program:" lines of its stderr: one
    per compiled signature, with the MLX operations of its program). The probes run CPU sessions:
    where MLX's default device is a GPU the histogram tags their operations "@cpu", which is
    dropped here so that the lines read the same on every machine."""
    import os
    tests = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, ORT_EP_MLX_OP_HISTOGRAM="1", **env_switches, PYTHONPATH=child_pythonpath())
    env.pop("ORT_EP_MLX_DEVICE", None)
    out = subprocess.run([sys.executable, "-c", probe, tests], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out, [line.replace("@cpu=", "=") for line in out.stderr.splitlines() if " program: " in line]


def cpu_model_probe(module: str, builder: str) -> str:
    """histogram_probe's source for one model: `module.builder()` gives (model, feeds), run on the
    CPU device as assert_parity runs it (eager, trace, replay)."""
    return ("import sys\nsys.path.insert(0, sys.argv[1])\nfrom parity import run_mlx_each\n"
            f"from {module} import {builder}\nrun_mlx_each(*{builder}(), options={{'device': 'cpu'}})\n")


def device_memory_info():
    """The memory info of the device memory the EP registered (MLX's CUDA backend, unless ORT_EP_MLX_DEVICE_MEMORY=0),
    or None: MLX's CPU backend, or device memory not enabled."""
    mlx_ep.register_execution_provider_library()
    devices = [d for d in ort.get_ep_devices() if d.ep_name == mlx_ep.ep_name()]
    return devices[0].memory_info(ort.OrtDeviceMemoryType.DEFAULT) if devices else None


def cpu_has(*flags: str) -> bool:
    """Whether /proc/cpuinfo lists every one of the CPU flags (avx2, fma, avx512f, ...): which of the
    EP's own CPU kernels run here. False where there is no such file."""
    try:
        with open("/proc/cpuinfo") as f:
            have = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return False
    return all(flag in have for flag in flags)


@functools.lru_cache(maxsize=None)
def default_device_is_cpu() -> bool:
    """The parity tests run on the EP's default device: MLX's GPU where there is one (the CUDA kernels
    run there instead, scripts/gpu_check.sh)."""
    out = subprocess.run([sys.executable, "-c", "import mlx.core as mx; print(mx.default_device() == mx.cpu)"],
                         capture_output=True, text=True, timeout=120)
    return out.stdout.strip() == "True"
