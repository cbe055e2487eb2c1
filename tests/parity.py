"""Helpers for parity tests: build one-node ONNX models, run them with the MLX EP in strict mode
(session.disable_cpu_ep_fallback=1, so a test fails if any node falls back to the CPU EP) and
with ORT's CPU EP, and compare the outputs with stated tolerances."""
from __future__ import annotations

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


def assert_parity(model: bytes, feeds: dict, rtol=None, atol=None, strict=True, options=None):
    """Runs model on MLX (strict) and on the CPU EP; compares every output. Returns MLX outputs."""
    want = run_cpu(model, feeds)
    got = run_mlx(model, feeds, strict=strict, options=options)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype, f"output {i}: dtype {g.dtype} != {w.dtype}"
        assert g.shape == w.shape, f"output {i}: shape {g.shape} != {w.shape}"
        if w.dtype.kind in "fc":
            r, a = TOL.get(NP_TO_ONNX.get(w.dtype, TensorProto.FLOAT), (1e-5, 1e-5))
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64),
                                       rtol=rtol if rtol is not None else r,
                                       atol=atol if atol is not None else a,
                                       err_msg=f"output {i}", equal_nan=True)
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"output {i}")
    return got
