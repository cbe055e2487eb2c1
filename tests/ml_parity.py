"""Helpers shared by the ai.onnx.ml parity tests (test_ops_ml*.py): one-node models of the ml
domain, parity checks and claim probes."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto as TP, helper, numpy_helper

import onnxruntime_ep_mlx as mlx_ep
from parity import assert_parity, make_model, onnx_type

ML = "ai.onnx.ml"


F, D, I64, I32 = TP.FLOAT, TP.DOUBLE, TP.INT64, TP.INT32


POSTS = ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"]


def ml_model(op, attrs, feeds, outs, opset=1, in_names=None):
    """One ai.onnx.ml node; feeds maps input name -> array, outs lists (name, dtype)."""
    names = in_names or list(feeds)
    node = helper.make_node(op, names, [o for o, _ in outs], domain=ML, **attrs)
    ins = [(k, onnx_type(v), list(np.shape(v))) for k, v in feeds.items()]
    return make_model([node], ins, [(o, t, None) for o, t in outs], domains=[(ML, opset)])


def check(op, attrs, feeds, outs, opset=1, rtol=None, atol=None):
    return assert_parity(ml_model(op, attrs, feeds, outs, opset), feeds, rtol=rtol, atol=atol)


def claimed(model) -> bool:
    """Whether the MLX EP claims the model's nodes (a strict session can be created)."""
    try:
        mlx_ep.session(model, strict=True)
        return True
    except Exception:  # noqa: BLE001 - ORT raises its own exception types
        return False


def rng_data(shape, dtype=np.float32, lo=-3.0, hi=3.0, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(int(lo), int(hi) + 1, size=shape).astype(dtype)
    return rng.uniform(lo, hi, size=shape).astype(dtype)


def tensor_attr(name, values, dtype):
    return numpy_helper.from_array(np.asarray(values, dtype=dtype), name)
