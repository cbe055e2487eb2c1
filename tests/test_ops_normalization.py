"""Parity of the normalization family (src/ops/normalization.c) against ORT's CPU EP: Softmax,
LogSoftmax and Hardmax in both axis conventions, LayerNormalization (with its statistics outputs),
RMSNormalization, inference BatchNormalization, InstanceNormalization, GroupNormalization 18/21,
LpNormalization, MeanVarianceNormalization and LRN."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from parity import assert_parity, claim_report as declined_reason, make_model, onnx_type, run_mlx, single_op_model

F = TensorProto.FLOAT


def data(shape, dtype, lo=-2.0, hi=2.0, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(lo, hi, size=shape).astype(dtype)


# ---- Softmax, LogSoftmax, Hardmax ---------------------------------------------------------------

SOFTMAX_OPS = ["Softmax", "LogSoftmax", "Hardmax"]


@pytest.mark.parametrize("op", SOFTMAX_OPS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("axis", [None, 0, 1, 2, -1, -3])
def test_softmax_opset13(op, dtype, axis):
    if op == "Hardmax" and dtype == np.float64:
        pytest.skip("ORT's CPU EP has no float64 Hardmax")
    if op != "Hardmax" and dtype == np.float64:
        pytest.skip("declined: MLX's float64 exp is float32-accurate (test_softmax_f64_declined)")
    x = data([2, 3, 5], dtype, -4, 4)
    attrs = {} if axis is None else {"axis": axis}
    assert_parity(single_op_model(op, {"x": x}, attrs=attrs, opset=13), {"x": x})


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_f64_declined(op, tmp_path):
    x = data([2, 3], np.float64)
    report = declined_reason(single_op_model(op, {"x": x}, opset=13), tmp_path)
    assert f"declined {op}" in report and "float64" in report


def test_hardmax_f64():
    x = np.array([[1.0, 3.0, 3.0, -1.0], [0.5, -2.0, 0.75, 0.0]], np.float64)
    (got,) = run_mlx(single_op_model("Hardmax", {"x": x}, opset=13), {"x": x})
    np.testing.assert_array_equal(got, np.array([[0, 1, 0, 0], [0, 0, 1, 0]], np.float64))


@pytest.mark.parametrize("op", SOFTMAX_OPS)
@pytest.mark.parametrize("axis", [None, 0, 1, 2, -1, -2])
def test_softmax_legacy_coerced_2d(op, axis):
    """Before opset 13 the input is flattened to 2-D at axis (default 1)."""
    x = data([2, 3, 4], np.float32, -4, 4, seed=1)
    attrs = {} if axis is None else {"axis": axis}
    assert_parity(single_op_model(op, {"x": x}, attrs=attrs, opset=11), {"x": x})


@pytest.mark.parametrize("op", SOFTMAX_OPS)
def test_softmax_ties_empty_and_symbolic(op):
    x = np.array([[1.0, 3.0, 3.0, -1.0], [2.0, 2.0, 2.0, 2.0]], np.float32)
    assert_parity(single_op_model(op, {"x": x}, opset=13), {"x": x})
    e = np.zeros([0, 4], np.float32)
    assert_parity(single_op_model(op, {"x": e}, opset=13), {"x": e})
    node = helper.make_node(op, ["x"], ["y"], axis=-1)
    model = make_model([node], [("x", F, ["b", "n"])], [("y", F, None)], opset=13)
    for shape in ([1, 7], [3, 2]):
        x = data(shape, np.float32, seed=sum(shape))
        assert_parity(model, {"x": x})


# ---- LayerNormalization, RMSNormalization -------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("axis", [-1, -2, 1, 0])
@pytest.mark.parametrize("with_bias", [True, False])
def test_layernorm(dtype, axis, with_bias):
    shape = [2, 3, 8]
    x = data(shape, dtype, seed=2)
    norm_shape = shape[axis:]
    feeds = {"x": x, "scale": data(norm_shape, dtype, 0.5, 1.5, seed=3)}
    if with_bias:
        feeds["bias"] = data(norm_shape, dtype, seed=4)
    attrs = {"axis": axis, "epsilon": 1e-3}
    assert_parity(single_op_model("LayerNormalization", feeds, attrs=attrs, opset=17), feeds)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("axis", [-1, 1])
def test_layernorm_stats_outputs(dtype, axis):
    x = data([2, 3, 6], dtype, seed=5)
    norm_shape = [2, 3, 6][axis:]
    feeds = {"x": x, "scale": data(norm_shape, dtype, seed=6), "bias": data(norm_shape, dtype, seed=7)}
    model = single_op_model("LayerNormalization", feeds, n_outputs=3, out_dtypes=[onnx_type(x), F, F],
                            attrs={"axis": axis}, opset=17)
    assert_parity(model, feeds)


def test_layernorm_constant_params_broadcast_scale_and_symbolic():
    x = data([2, 4, 16], np.float32, seed=8)
    model = single_op_model("LayerNormalization", {"x": x},
                            initializers={"scale": data([16], np.float32, seed=9),
                                          "bias": data([16], np.float32, seed=10)}, opset=17)
    assert_parity(model, {"x": x})
    # Scale broadcast over the normalized dims (axis=1 normalizes [4, 16] with scale [16])
    feeds = {"x": x, "scale": data([16], np.float32, seed=11)}
    assert_parity(single_op_model("LayerNormalization", feeds, attrs={"axis": 1}, opset=17), feeds)
    node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"])
    model = make_model([node], [("x", F, ["b", "t", 16]), ("s", F, [16]), ("b", F, [16])], [("y", F, None)], opset=17)
    for shape in ([1, 3, 16], [2, 5, 16]):
        feeds = {"x": data(shape, np.float32, seed=12), "s": data([16], np.float32, seed=13),
                 "b": data([16], np.float32, seed=14)}
        assert_parity(model, feeds)


def test_layernorm_offset_input():
    """Large mean relative to the spread: the variance must be mean((x - mean)^2), as ORT computes."""
    x = (100.0 + data([4, 64], np.float32, seed=15)).astype(np.float32)
    feeds = {"x": x, "scale": np.ones([64], np.float32)}
    assert_parity(single_op_model("LayerNormalization", feeds, opset=17), feeds, rtol=1e-4, atol=1e-4)


def test_layernorm_stash_type_declined(tmp_path):
    feeds = {"x": data([2, 4], np.float32), "scale": data([4], np.float32)}
    report = declined_reason(single_op_model("LayerNormalization", feeds, attrs={"stash_type": 11}, opset=17), tmp_path)
    assert "LayerNormalization" in report and "stash_type" in report


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("axis", [-1, -2, 0])
def test_rmsnorm(dtype, axis):
    shape = [2, 3, 8]
    feeds = {"x": data(shape, dtype, seed=16), "scale": data(shape[axis:], dtype, 0.5, 1.5, seed=17)}
    assert_parity(single_op_model("RMSNormalization", feeds, attrs={"axis": axis, "epsilon": 1e-4}, opset=23),
                  feeds)


# ---- BatchNormalization -------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("shape", [[2, 3], [2, 3, 5], [2, 3, 4, 4]])
@pytest.mark.parametrize("opset", [9, 15])
def test_batchnorm(dtype, shape, opset):
    c = shape[1]
    feeds = {"x": data(shape, dtype, seed=18), "scale": data([c], dtype, seed=19), "b": data([c], dtype, seed=20),
             "mean": data([c], dtype, seed=21), "var": data([c], dtype, 0.1, 2.0, seed=22)}
    assert_parity(single_op_model("BatchNormalization", feeds, attrs={"epsilon": 1e-3}, opset=opset), feeds)


def test_batchnorm_constant_params():
    x = data([2, 4, 3, 3], np.float32, seed=23)
    init = {"scale": data([4], np.float32, seed=24), "b": data([4], np.float32, seed=25),
            "mean": data([4], np.float32, seed=26), "var": data([4], np.float32, 0.5, 1.5, seed=27)}
    assert_parity(single_op_model("BatchNormalization", {"x": x}, initializers=init, opset=15), {"x": x})
    assert_parity(single_op_model("BatchNormalization", {"x": x}, initializers=init, opset=7), {"x": x})


def test_batchnorm_training_declined(tmp_path):
    feeds = {"x": data([2, 3, 4], np.float32), "scale": data([3], np.float32), "b": data([3], np.float32),
             "mean": data([3], np.float32), "var": data([3], np.float32, 0.5, 1.0)}
    model = single_op_model("BatchNormalization", feeds, n_outputs=3, attrs={"training_mode": 1}, opset=15)
    report = declined_reason(model, tmp_path)
    assert "BatchNormalization" in report and "training" in report


# ---- InstanceNormalization, GroupNormalization --------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shape", [[2, 3, 5], [2, 3, 4, 4], [1, 2, 2, 3, 3]])
def test_instancenorm(dtype, shape):
    c = shape[1]
    feeds = {"x": data(shape, dtype, seed=28), "scale": data([c], dtype, seed=29), "b": data([c], dtype, seed=30)}
    assert_parity(single_op_model("InstanceNormalization", feeds, attrs={"epsilon": 1e-4}, opset=6), feeds)
    assert_parity(single_op_model("InstanceNormalization", feeds, opset=22), feeds)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("shape,groups", [([2, 4, 5], 2), ([2, 6, 3, 3], 3), ([1, 4, 2, 2], 4), ([2, 4, 3], 1)])
@pytest.mark.parametrize("opset", [18, 21])
def test_groupnorm(dtype, shape, groups, opset):
    c = shape[1]
    n = groups if opset == 18 else c
    feeds = {"x": data(shape, dtype, seed=31), "scale": data([n], dtype, seed=32), "bias": data([n], dtype, seed=33)}
    model = single_op_model("GroupNormalization", feeds, attrs={"num_groups": groups, "epsilon": 1e-3}, opset=opset)
    # opset 21 computes float64 input's statistics in float32 (stash_type=1): float32 tolerance
    tol = {"rtol": 1e-5, "atol": 1e-6} if opset == 21 and dtype == np.float64 else {}
    assert_parity(model, feeds, **tol)


# ---- LpNormalization, MeanVarianceNormalization, LRN --------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_lpnorm(dtype, p, axis):
    x = data([3, 4, 5], dtype, seed=34)
    x[0, 0, :] = 0  # a zero norm along the last axis
    if dtype != np.float16:  # ORT's float16 cast insertion fails on opset-1 models
        assert_parity(single_op_model("LpNormalization", {"x": x}, attrs={"p": p, "axis": axis}, opset=1), {"x": x})
    assert_parity(single_op_model("LpNormalization", {"x": x}, attrs={"p": p, "axis": axis}, opset=22), {"x": x})


@pytest.mark.parametrize("axes", [None, [0, 2, 3], [1], [-1, -2], [2, 3, 3], [0, 1, 2, 3]])
@pytest.mark.parametrize("opset", [9, 13])
def test_mvn(axes, opset):
    x = data([2, 3, 4, 5], np.float32, seed=35)
    attrs = {} if axes is None else {"axes": axes}
    assert_parity(single_op_model("MeanVarianceNormalization", {"x": x}, attrs=attrs, opset=opset), {"x": x},
                  rtol=1e-4, atol=1e-5)


def test_mvn_constant_slice_is_nan_like_ort():
    x = np.ones([1, 2, 2, 2], np.float32)
    assert_parity(single_op_model("MeanVarianceNormalization", {"x": x}, opset=13), {"x": x})


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("size", [1, 3, 5, 7, 9])
def test_lrn(dtype, size):
    x = data([2, 6, 3, 3], dtype, seed=36)
    attrs = {"size": size, "alpha": 0.01, "beta": 0.6, "bias": 1.5}
    assert_parity(single_op_model("LRN", {"x": x}, attrs=attrs, opset=13), {"x": x})
    if dtype == np.float32:  # ORT's float16 cast insertion fails on opset-1 models
        assert_parity(single_op_model("LRN", {"x": x}, attrs={"size": size}, opset=1), {"x": x})


def lrn_reference(x, size, alpha, beta, bias):
    """The ONNX definition: window [c - floor((size-1)/2), c + ceil((size-1)/2)] over channels."""
    x = x.astype(np.float64)
    c = x.shape[1]
    sq = np.zeros_like(x)
    for i in range(c):
        lo, hi = max(0, i - (size - 1) // 2), min(c - 1, i + -(-(size - 1) // 2))
        sq[:, i] = (x[:, lo:hi + 1] ** 2).sum(axis=1)
    return x / (bias + alpha / size * sq) ** beta


@pytest.mark.parametrize("size", [2, 4, 8])
def test_lrn_even_size(size):
    """ORT's CPU EP rejects even sizes; the spec defines them (numpy reference)."""
    x = data([2, 6, 3, 3], np.float32, seed=37)
    (got,) = run_mlx(single_op_model("LRN", {"x": x}, attrs={"size": size, "alpha": 0.1}, opset=13), {"x": x})
    np.testing.assert_allclose(got, lrn_reference(x, size, 0.1, 0.75, 1.0), rtol=1e-5, atol=1e-6)


def test_batchnorm_mixed_param_types():
    """Opset 15: float16 X with float32 (or float16) scale/B and float32 mean/var."""
    x = data([2, 3, 4], np.float16, seed=38)
    for pt in (np.float32, np.float16):
        feeds = {"x": x, "scale": data([3], pt, seed=39), "b": data([3], pt, seed=40),
                 "mean": data([3], np.float32, seed=41), "var": data([3], np.float32, 0.5, 1.5, seed=42)}
        assert_parity(single_op_model("BatchNormalization", feeds, opset=15), feeds)


def test_bfloat16_against_numpy():
    """ORT's CPU EP has no bfloat16 kernels for these: x (float32) -> Cast(bfloat16) -> op -> Cast."""
    import ml_dtypes

    def rb(a):
        return np.asarray(a, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)

    x = rb(data([3, 8], np.float32, seed=60))
    s = np.ones([8], np.float32)
    mu = x.mean(1, keepdims=True)
    e = np.exp(x - x.max(1, keepdims=True))
    cases = [("Softmax", {}, e / e.sum(1, keepdims=True), 13),
             ("LayerNormalization", {}, (x - mu) / np.sqrt(((x - mu) ** 2).mean(1, keepdims=True) + 1e-5), 17),
             ("RMSNormalization", {}, x / np.sqrt((x * x).mean(1, keepdims=True) + 1e-5), 23)]
    for op, attrs, want, opset in cases:
        nodes = [helper.make_node("Cast", ["x"], ["xb"], to=TensorProto.BFLOAT16)]
        ins = ["xb"]
        if op != "Softmax":
            nodes.append(helper.make_node("Cast", ["s"], ["sb"], to=TensorProto.BFLOAT16))
            ins.append("sb")
        nodes += [helper.make_node(op, ins, ["yb"], **attrs), helper.make_node("Cast", ["yb"], ["y"], to=F)]
        model = make_model(nodes, [("x", F, [3, 8]), ("s", F, [8])] if op != "Softmax" else [("x", F, [3, 8])],
                           [("y", F, None)], opset=opset)
        feeds = {"x": x, "s": s} if op != "Softmax" else {"x": x}
        (got,) = run_mlx(model, feeds)
        np.testing.assert_allclose(got, rb(want), rtol=1e-2, atol=1e-2, err_msg=op)


@pytest.mark.parametrize("opset", [13, 16])
def test_layernorm_pre17_models(opset):
    # ORT registers LayerNormalization in the ai.onnx domain at version 1 for pre-opset-17 exports.
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 5, 8)).astype(np.float32)
    inits = {"g": rng.standard_normal(8).astype(np.float32), "b": rng.standard_normal(8).astype(np.float32)}
    model = single_op_model("LayerNormalization", {"x": x}, initializers=inits, attrs={"axis": -1, "epsilon": 1e-5},
                            opset=opset)
    assert_parity(model, {"x": x}, rtol=1e-5, atol=1e-5)
