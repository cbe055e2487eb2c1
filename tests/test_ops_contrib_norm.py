"""Parity of ORT's transformer normalizations (src/ops/contrib_norm.c): SimplifiedLayerNormalization
(ai.onnx domain, opset 1), SkipLayerNormalization, SkipSimplifiedLayerNormalization and
EmbedLayerNormalization against ORT's CPU EP, and GroupNorm/SkipGroupNorm (no CPU kernel in ORT)
against a numpy reference of the schema. The CPU reference runs single-threaded: ORT's float16
SkipLayerNorm converts each row's skip into one buffer shared by its worker threads."""
from __future__ import annotations

import functools

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from parity import NP_TO_ONNX, TOL, claim_report, make_model, onnx_type, run_mlx

MS = "com.microsoft"
F, H = TensorProto.FLOAT, TensorProto.FLOAT16


def data(shape, dtype, lo=-2.0, hi=2.0, seed=0):
    return np.random.default_rng(seed).uniform(lo, hi, size=shape).astype(dtype)


def run_cpu_1thread(model, feeds):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"]).run(None, feeds)


def check(model, feeds, rtol=None, atol=None):
    want = run_cpu_1thread(model, feeds)
    got = run_mlx(model, feeds)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, f"output {i}: {g.dtype}{g.shape} vs {w.dtype}{w.shape}"
        if w.dtype.kind == "f":
            r, a = TOL.get(NP_TO_ONNX[w.dtype], (1e-5, 1e-5))
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol or r, atol=atol or a,
                                       err_msg=f"output {i}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"output {i}")
    return got


def node_model(op, inputs, outputs, consts=None, attrs=None, domain=MS, out_types=None):
    """inputs: ordered (name, array or None for an absent optional); consts: names fed as initializers."""
    consts = consts or set()
    names = [n if a is not None else "" for n, a in inputs]
    node = helper.make_node(op, names, outputs, domain=domain, **(attrs or {}))
    present = [(n, a) for n, a in inputs if a is not None]
    graph_in = [(n, onnx_type(a), list(a.shape)) for n, a in present if n not in consts]
    inits = [(n, a) for n, a in present if n in consts]
    outs = [(o, t, None) for o, t in zip(outputs, out_types) if o]
    domains = [(MS, 1)] if domain == MS else []
    model = make_model([node], graph_in, outs, inits, opset=17, domains=domains)
    return model, {n: a for n, a in present if n not in consts}


declined_reason = functools.partial(claim_report, session_may_fail=True)


# ---- SimplifiedLayerNormalization ----------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("axis", [-1, 1])
def test_simplified_layer_norm(dtype, axis):
    x = data([2, 3, 8], dtype, seed=1)
    scale = data([3, 8] if axis == 1 else [8], dtype, seed=2)
    t = NP_TO_ONNX[np.dtype(dtype)]
    model, feeds = node_model("SimplifiedLayerNormalization", [("x", x), ("scale", scale)], ["y"],
                              attrs={"axis": axis, "epsilon": 1e-4}, domain="", out_types=[t])
    check(model, feeds, rtol=1e-10 if dtype == np.float64 else None, atol=1e-10 if dtype == np.float64 else None)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_simplified_layer_norm_inv_std(dtype):
    """inv_std_var is float32 for every T (ORT's type inference says so for float64 too)."""
    x, scale = data([4, 16], dtype, seed=3), data([16], dtype, seed=4)
    model, feeds = node_model("SimplifiedLayerNormalization", [("x", x), ("scale", scale)], ["y", "inv"],
                              consts={"scale"}, domain="", out_types=[NP_TO_ONNX[np.dtype(dtype)], F])
    check(model, feeds, rtol=1e-10 if dtype == np.float64 else None, atol=1e-10 if dtype == np.float64 else None)


# ---- SkipLayerNormalization, SkipSimplifiedLayerNormalization ---------------------------------------

@pytest.mark.parametrize("op", ["SkipLayerNormalization", "SkipSimplifiedLayerNormalization"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("skip_shape", [[2, 5, 32], [1, 5, 32], [5, 32]])
@pytest.mark.parametrize("with_bias", [False, True])
def test_skip_layer_norm(op, dtype, skip_shape, with_bias):
    x = data([2, 5, 32], dtype, seed=5)
    skip, gamma = data(skip_shape, dtype, seed=6), data([32], dtype, seed=7)
    beta, bias = data([32], dtype, seed=8), data([32], dtype, seed=9) if with_bias else None
    t = NP_TO_ONNX[np.dtype(dtype)]
    if op == "SkipLayerNormalization":
        inputs = [("x", x), ("skip", skip), ("gamma", gamma), ("beta", beta), ("bias", bias)]
    else:
        inputs = [("x", x), ("skip", skip), ("gamma", gamma), ("bias", bias)]
    model, feeds = node_model(op, inputs, ["y", "", "", "sum"], consts={"gamma", "beta", "bias"},
                              attrs={"epsilon": 1e-5}, out_types=[t, F, F, t])
    check(model, feeds)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_skip_layer_norm_2d_no_beta(dtype):
    x, skip, gamma = data([6, 24], dtype, seed=10), data([6, 24], dtype, seed=11), data([24], dtype, seed=12)
    model, feeds = node_model("SkipLayerNormalization", [("x", x), ("skip", skip), ("gamma", gamma)], ["y"],
                              out_types=[NP_TO_ONNX[np.dtype(dtype)]])
    check(model, feeds)


def test_skip_layer_norm_const_skip_f32():
    x, skip = data([2, 5, 16], np.float32, seed=13), data([5, 16], np.float32, seed=14)
    gamma, beta = data([16], np.float32, seed=15), data([16], np.float32, seed=16)
    model, feeds = node_model("SkipLayerNormalization", [("x", x), ("skip", skip), ("gamma", gamma), ("beta", beta)],
                              ["y"], consts={"skip", "gamma", "beta"}, out_types=[F])
    check(model, feeds)


def test_skip_layer_norm_declined_forms(tmp_path):
    x, skip = data([2, 5, 16], np.float16, seed=17), data([5, 16], np.float16, seed=18)
    gamma = data([16], np.float16, seed=19)
    model, _ = node_model("SkipLayerNormalization", [("x", x), ("skip", skip), ("gamma", gamma)], ["y"],
                          consts={"skip"}, out_types=[H])
    assert "reuses row 0" in declined_reason(model, tmp_path)
    x32 = x.astype(np.float32)
    model, _ = node_model("SkipLayerNormalization", [("x", x32), ("skip", x32.copy()), ("gamma", gamma.astype(np.float32))],
                          ["y", "mean"], out_types=[F, F])
    assert "mean/inv_std_var" in declined_reason(model, tmp_path)


# ---- EmbedLayerNormalization --------------------------------------------------------------------

def embed_inputs(dtype, segments, mask, position_ids, seed=20):
    rng = np.random.default_rng(seed)
    b, s, h, vocab = 2, 6, 16, 30
    ids = rng.integers(0, vocab, size=[b, s]).astype(np.int32)
    inputs = [("ids", ids), ("seg_ids", rng.integers(0, 2, size=[b, s]).astype(np.int32) if segments else None),
              ("word", data([vocab, h], dtype, seed=seed + 1)), ("pos", data([8, h], dtype, seed=seed + 2)),
              ("seg", data([2, h], dtype, seed=seed + 3) if segments else None),
              ("gamma", data([h], dtype, seed=seed + 4)), ("beta", data([h], dtype, seed=seed + 5)),
              ("mask", rng.integers(0, 2, size=[b, s]).astype(np.int32) if mask else None)]
    if position_ids == "full":
        inputs.append(("pos_ids", rng.integers(0, 8, size=[b, s]).astype(np.int32)))
    elif position_ids == "broadcast":
        inputs.append(("pos_ids", rng.integers(0, 8, size=[1, s]).astype(np.int32)))
    return inputs


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("segments", [True, False])
@pytest.mark.parametrize("mask", [True, False])
def test_embed_layer_norm(dtype, segments, mask):
    t = NP_TO_ONNX[np.dtype(dtype)]
    inputs = embed_inputs(dtype, segments, mask, None)
    model, feeds = node_model("EmbedLayerNormalization", inputs, ["y", "mask_index", "sum"],
                              consts={"word", "pos", "seg", "gamma", "beta"}, attrs={"epsilon": 1e-6},
                              out_types=[t, TensorProto.INT32, t])
    check(model, feeds)


@pytest.mark.parametrize("position_ids", ["full", "broadcast"])
def test_embed_layer_norm_position_ids(position_ids):
    inputs = embed_inputs(np.float32, True, True, position_ids, seed=30)
    model, feeds = node_model("EmbedLayerNormalization", inputs, ["y", "mask_index"],
                              consts={"word", "pos", "seg", "gamma", "beta"},
                              out_types=[F, TensorProto.INT32])
    check(model, feeds)


# ---- GroupNorm, SkipGroupNorm (numpy reference: ORT has no CPU kernel) ------------------------------

def group_norm_ref(x, gamma, beta, groups, eps, silu):
    n, h, w, c = x.shape
    xg = x.astype(np.float64).reshape(n, h * w, groups, c // groups)
    mean = xg.mean(axis=(1, 3), keepdims=True)
    var = (xg * xg).mean(axis=(1, 3), keepdims=True) - mean * mean
    y = ((xg - mean) / np.sqrt(var + eps)).reshape(x.shape) * gamma.astype(np.float64) + beta.astype(np.float64)
    return y / (1 + np.exp(-y)) if silu else y


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("activation", [0, 1])
def test_group_norm(dtype, activation):
    x = data([2, 4, 3, 32], dtype, -3, 3, seed=40)
    gamma, beta = data([32], np.float32, seed=41), data([32], np.float32, seed=42)
    model, feeds = node_model("GroupNorm", [("x", x), ("gamma", gamma), ("beta", beta)], ["y"],
                              consts={"gamma", "beta"}, out_types=[NP_TO_ONNX[np.dtype(dtype)]],
                              attrs={"groups": 8, "activation": activation, "epsilon": 1e-5, "channels_last": 1})
    (got,) = run_mlx(model, feeds)
    want = group_norm_ref(x, gamma, beta, 8, 1e-5, activation)
    tol = 1e-2 if dtype == np.float16 else 1e-5
    assert got.dtype == dtype
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("skip_shape", [[2, 4, 3, 16], [2, 1, 1, 16], [2, 16]])
def test_skip_group_norm(dtype, skip_shape):
    x, skip = data([2, 4, 3, 16], dtype, seed=43), data(skip_shape, dtype, seed=44)
    bias = data([16], dtype, seed=45)
    gamma, beta = data([16], dtype, seed=46), data([16], dtype, seed=47)
    t = NP_TO_ONNX[np.dtype(dtype)]
    model, feeds = node_model("SkipGroupNorm", [("x", x), ("gamma", gamma), ("beta", beta), ("skip", skip), ("bias", bias)],
                              ["y", "s"], consts={"gamma", "beta", "bias"}, out_types=[t, t],
                              attrs={"groups": 4, "activation": 1, "epsilon": 1e-5})
    got_y, got_s = run_mlx(model, feeds)
    sk = skip.reshape(2, 1, 1, 16) if len(skip_shape) == 2 else skip
    s = x.astype(np.float64) + sk.astype(np.float64) + bias.astype(np.float64)
    tol = 1e-2 if dtype == np.float16 else 1e-5
    np.testing.assert_allclose(got_s.astype(np.float64), s, rtol=tol, atol=tol)
    np.testing.assert_allclose(got_y.astype(np.float64), group_norm_ref(s, gamma, beta, 4, 1e-5, True), rtol=tol, atol=tol)


def test_group_norm_nchw_declined(tmp_path):
    x, g = data([1, 2, 2, 8], np.float32), data([8], np.float32)
    model, _ = node_model("GroupNorm", [("x", x), ("gamma", g), ("beta", g.copy())], ["y"], out_types=[F],
                          attrs={"groups": 2, "activation": 0, "channels_last": 0})
    assert "channels_last=0" in declined_reason(model, tmp_path)
