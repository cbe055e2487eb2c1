"""Parity tests of the loss family (src/ops/loss.c): NegativeLogLikelihoodLoss and
SoftmaxCrossEntropyLoss on the MLX EP in strict mode against ORT's CPU EP, over reductions,
weights, ignore_index (including rows that are all ignored) and N-D inputs."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from parity import NP_TO_ONNX, assert_parity, make_model

OPS = ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"]


def build(op, x, t, w=None, attrs=None, log_prob=False, opset=13):
    names = ["x", "t"] + (["w"] if w is not None else [])
    outs = ["y0"] + (["y1"] if log_prob else [])
    node = helper.make_node(op, names, outs, **(attrs or {}))
    feeds = {"x": x, "t": t}
    if w is not None:
        feeds["w"] = w
    ins = [(k, NP_TO_ONNX[v.dtype], list(v.shape)) for k, v in feeds.items()]
    ft = NP_TO_ONNX[x.dtype]
    model = make_model([node], ins, [(o, ft, None) for o in outs], opset=opset)
    return model, feeds


def case(shape, classes, dtype=np.float32, tdtype=np.int64, seed=0, ignore=None):
    rng = np.random.default_rng(seed)
    n, rest = shape[0], tuple(shape[1:])
    x = rng.standard_normal((n, classes) + rest).astype(dtype)
    t = rng.integers(0, classes, size=(n,) + rest).astype(tdtype)
    if ignore is not None:
        t.flat[::3] = ignore
    return x, t


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("shape", [(3,), (2, 4), (2, 3, 2)])
@pytest.mark.parametrize("weighted", [False, True])
def test_reductions(op, reduction, shape, weighted):
    x, t = case(shape, 5)
    w = np.random.default_rng(1).random(5).astype(np.float32) if weighted else None
    assert_parity(*build(op, x, t, w, {"reduction": reduction}))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("ignore", [-1, 2, -100])
@pytest.mark.parametrize("weighted", [False, True])
def test_ignore_index(op, reduction, ignore, weighted):
    x, t = case((4, 3), 5, ignore=ignore)
    w = np.random.default_rng(1).random(5).astype(np.float32) if weighted else None
    assert_parity(*build(op, x, t, w, {"reduction": reduction, "ignore_index": ignore}))


@pytest.mark.parametrize("op", OPS)
def test_all_ignored_mean_is_nan(op):
    x, _ = case((3,), 4)
    t = np.full(3, -1, np.int64)
    got = assert_parity(*build(op, x, t, None, {"reduction": "mean", "ignore_index": -1}))
    assert np.isnan(got[0])


@pytest.mark.parametrize("op,dtype", [(OPS[0], np.float16), (OPS[0], np.float64), (OPS[1], np.float16)])
@pytest.mark.parametrize("tdtype", [np.int32, np.int64])
def test_dtypes(op, dtype, tdtype):
    x, t = case((3, 2), 4, dtype=dtype, tdtype=tdtype)
    w = np.linspace(0.5, 2, 4).astype(dtype)
    assert_parity(*build(op, x, t, w, {"reduction": "mean", "ignore_index": 1}))


@pytest.mark.parametrize("reduction", ["none", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
def test_sce_log_prob(reduction, weighted):
    x, t = case((2, 3), 6, ignore=0)
    w = np.random.default_rng(2).random(6).astype(np.float32) if weighted else None
    assert_parity(*build("SoftmaxCrossEntropyLoss", x, t, w, {"reduction": reduction, "ignore_index": 0},
                         log_prob=True))


def test_nll_opset22():
    x, t = case((4,), 3)
    assert_parity(*build("NegativeLogLikelihoodLoss", x, t, None, {"reduction": "sum"}, opset=22))
