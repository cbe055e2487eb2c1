"""Parity of the activation family (src/ops/activation.c) against ORT's CPU EP, over dtypes,
attributes, special values, PRelu's slope broadcasting and every form of Clip. Where ORT's CPU EP
has no kernel for a dtype (e.g. most float64 activations), a float64 NumPy reference of the
spec's formula stands in."""
from __future__ import annotations

import functools
import math

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from parity import assert_parity, claim_report, make_model, onnx_type, run_cpu, run_mlx, single_op_model, uniform_data

ERF = np.vectorize(math.erf)
SELU_A, SELU_G = 1.67326319217681884765625, 1.05070102214813232421875


def data(shape, dtype, lo=-6.0, hi=6.0, seed=0):
    return uniform_data(shape, dtype, lo, hi, seed)


def softplus(x):
    return np.logaddexp(x, 0.0)


def f32(v):
    """Float attributes are float32: ORT (and the spec's function bodies) use them as such."""
    return float(np.float32(v))


# op -> (attrs, reference(x, attrs) in float64)
ACTS = {
    "Relu": ({}, lambda x, a: np.maximum(x, 0)),
    "LeakyRelu": ({"alpha": 0.1}, lambda x, a: np.where(x < 0, a["alpha"] * x, x)),
    "Sigmoid": ({}, lambda x, a: 1 / (1 + np.exp(-x))),
    "Gelu": ({}, lambda x, a: 0.5 * x * (1 + ERF(x / math.sqrt(2)))),
    "Elu": ({"alpha": 0.7}, lambda x, a: np.where(x < 0, a["alpha"] * np.expm1(x), x)),
    "Selu": ({}, lambda x, a: SELU_G * np.where(x > 0, x, SELU_A * np.expm1(x))),
    "Celu": ({"alpha": 1.3}, lambda x, a: np.maximum(0, x) + np.minimum(0, a["alpha"] * np.expm1(x / a["alpha"]))),
    "HardSigmoid": ({"alpha": 0.3, "beta": 0.4}, lambda x, a: np.clip(a["alpha"] * x + a["beta"], 0, 1)),
    "HardSwish": ({}, lambda x, a: x * np.clip(f32(1 / 6) * x + 0.5, 0, 1)),
    "Softplus": ({}, lambda x, a: softplus(x)),
    "Softsign": ({}, lambda x, a: x / (1 + np.abs(x))),
    "Mish": ({}, lambda x, a: x * np.tanh(softplus(x))),
    "ThresholdedRelu": ({"alpha": 0.5}, lambda x, a: np.where(x > a["alpha"], x, 0)),
    "Shrink": ({"lambd": 0.8, "bias": 0.3},
               lambda x, a: np.where(x < -a["lambd"], x + a["bias"], np.where(x > a["lambd"], x - a["bias"], 0))),
    "Swish": ({"alpha": 1.5}, lambda x, a: x / (1 + np.exp(-a["alpha"] * x))),
}
OPSET = {"Gelu": 20, "Swish": 24}


def check(op, feeds, attrs=None, opset=None, ref=None, use_ref=False, **tol):
    """Parity with ORT's CPU EP; when it has no kernel for the dtype (or use_ref), MLX against
    the float64 reference ref(x) instead."""
    model = single_op_model(op, feeds, attrs=attrs, opset=opset or OPSET.get(op, 22))
    try:
        if use_ref:
            raise ort.capi.onnxruntime_pybind11_state.NotImplemented("reference requested")
        run_cpu(model, feeds)
    except ort.capi.onnxruntime_pybind11_state.NotImplemented:
        assert ref is not None, f"ORT's CPU EP cannot run {op} and no reference was given"
        x = next(iter(feeds.values()))
        got = run_mlx(model, feeds)[0]
        assert got.dtype == x.dtype
        want = ref(x.astype(np.float64))
        if x.dtype.kind in "iu":
            np.testing.assert_array_equal(got, want.astype(x.dtype))
        else:
            np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol.get("rtol", 1e-12),
                                       atol=tol.get("atol", 1e-12), equal_nan=True)
        return got
    return assert_parity(model, feeds, **tol)


report_of = functools.partial(claim_report, session_may_fail=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("op", sorted(ACTS))
def test_activation(op, dtype, tmp_path):
    attrs, ref = ACTS[op]
    feeds = {"x": data([4, 25], dtype)}
    if op == "Gelu" and dtype == np.float64:
        assert "declined Gelu" in report_of(single_op_model(op, feeds, opset=20), tmp_path)
        return
    if op == "Celu" and dtype != np.float32:
        pytest.skip("Celu takes float32 only before opset 28, which ORT cannot load")
    rounded = {k: f32(v) for k, v in attrs.items()}
    # ORT 1.31 computes float64 Shrink at float32 precision; the spec's float64 result is checked.
    check(op, feeds, attrs=attrs, ref=lambda x: ref(x, rounded), use_ref=op == "Shrink" and dtype == np.float64)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op", sorted(ACTS))
def test_activation_defaults_and_extremes(op, dtype):
    """Default attributes; large magnitudes (overflow of naive formulas), infinities, NaN."""
    if op == "Gelu" and dtype == np.float64:
        pytest.skip("declined (see test_activation)")
    if op == "Celu" and dtype != np.float32:
        pytest.skip("Celu takes float32 only before opset 28, which ORT cannot load")
    x = np.array([-1000, -100, -30, -20, -1e-3, -0.0, 0.0, 1e-3, 20, 30, 88, 100, 1000,
                  np.inf, -np.inf, np.nan], dtype)
    ref = ACTS[op][1]
    defaults = {"LeakyRelu": {"alpha": 0.01}, "Elu": {"alpha": 1.0}, "Celu": {"alpha": 1.0},
                "HardSigmoid": {"alpha": 0.2, "beta": 0.5}, "ThresholdedRelu": {"alpha": 1.0},
                "Shrink": {"lambd": 0.5, "bias": 0.0}, "Swish": {"alpha": 1.0}}.get(op, {})
    with np.errstate(all="ignore"):
        check(op, {"x": x}, ref=lambda v: ref(v, {k: f32(a) for k, a in defaults.items()}),
              use_ref=op == "Shrink" and dtype == np.float64)


@pytest.mark.parametrize("approx", ["none", "tanh"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_gelu(approx, dtype):
    check("Gelu", {"x": data([3, 40], dtype)}, attrs={"approximate": approx}, opset=20)


def test_gelu_tanh_float64():
    x = data([3, 40], np.float64)
    ref = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    check("Gelu", {"x": x}, attrs={"approximate": "tanh"}, opset=20, ref=lambda v: ref)


def test_sigmoid_float64_precise():
    """Float64 sigmoid keeps relative precision down to the subnormals (ORT's only absolute)."""
    x = np.concatenate([np.linspace(-745, 745, 1001), [0.0, -0.0, np.inf, -np.inf, np.nan]])
    check("Sigmoid", {"x": x})
    with np.errstate(all="ignore"):
        check("Sigmoid", {"x": x}, ref=lambda v: np.exp(-np.logaddexp(0.0, -v)), use_ref=True, rtol=1e-13, atol=1e-300)


@pytest.mark.parametrize("shape", [[], [0, 3], [2, 3, 4]])
def test_shapes(shape):
    for op in ("Relu", "Elu", "Softplus", "HardSwish"):
        check(op, {"x": data(shape, np.float32)})


# ---- Relu and Shrink on integers -----------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64])
def test_relu_int(dtype):
    x = data([3, 7], dtype, -100, 100)
    check("Relu", {"x": x}, opset=14, ref=lambda v: np.maximum(v, 0))


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
                                   np.uint64, np.float16, np.float64])
def test_shrink_dtypes(dtype):
    x = data([3, 9], dtype, -100, 250)
    ref = ACTS["Shrink"][1]
    for attrs in ({"lambd": 1.5, "bias": 2.7}, {}):
        a = {"lambd": f32(attrs.get("lambd", 0.5)), "bias": f32(attrs.get("bias", 0.0))}
        check("Shrink", {"x": x}, attrs=attrs, opset=9, ref=lambda v: ref(v, a), use_ref=dtype == np.float64)


# ---- PRelu ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("slope_shape", [[4], [3, 1], [1], [], [2, 3, 4], [1, 1, 4]])
def test_prelu_broadcast(slope_shape):
    feeds = {"x": data([2, 3, 4], np.float32), "s": data(slope_shape, np.float32, 0.0, 1.0, seed=1)}
    check("PRelu", feeds, opset=16)
    check("PRelu", feeds, opset=9)


@pytest.mark.parametrize("dtype", [np.float16, np.float64, np.int32, np.int64, np.uint32, np.uint64])
def test_prelu_dtypes(dtype):
    feeds = {"x": data([3, 5], dtype, -9, 9), "s": data([5], dtype, -3, 3, seed=1)}
    check("PRelu", feeds, opset=16, ref=lambda v: np.where(v < 0, feeds["s"].astype(np.float64) * v, v))


# ---- Clip ----------------------------------------------------------------------------------------

def clip_model(dtype, lo, hi, opset, shape=(2, 6)):
    """Clip with optional min/max inputs (None = absent) given as initializers."""
    t = onnx_type(np.zeros(0, dtype))
    names, inits = ["x"], {}
    for name, v in (("lo", lo), ("hi", hi)):
        if v is None:
            names.append("")
        else:
            names.append(name)
            inits[name] = np.array(v, dtype)
    while names and names[-1] == "":
        names.pop()
    node = helper.make_node("Clip", names, ["y"])
    return make_model([node], [("x", t, list(shape))], [("y", t, None)], inits.items(), opset=opset)


CLIP_X = np.array([[-np.inf, -100, -2.5, -1, -0.0, 0.0], [0.5, 1, 2.5, 100, np.inf, np.nan]])


def clip_reference(x, lo, hi):
    """The spec: absent bounds are numeric_limits<T>::lowest() and max(); min > max gives max."""
    info = np.finfo(x.dtype) if x.dtype.kind == "f" else np.iinfo(x.dtype)
    lo = info.min if lo is None else lo
    hi = info.max if hi is None else hi
    return np.minimum(np.maximum(x, np.asarray(lo, x.dtype)), np.asarray(hi, x.dtype))


@pytest.mark.parametrize("lo,hi", [(-1.0, 2.0), (None, 2.0), (-1.0, None), (None, None), (3.0, 1.0)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("opset", [11, 13])
def test_clip_inputs(dtype, lo, hi, opset):
    with np.errstate(over="ignore"):
        x = CLIP_X.astype(dtype)
    model = clip_model(dtype, lo, hi, opset)
    if opset == 11 and dtype != np.float32:
        # ORT's CPU EP has no float16/float64 Clip-11: for float16 it runs float32 through inserted
        # casts (so absent bounds become +-FLT_MAX, i.e. no bound), for float64 nothing. The spec
        # (bounds default to float16's own limits) is checked instead.
        got = run_mlx(model, {"x": x})[0]
        np.testing.assert_array_equal(got, clip_reference(x, lo, hi))
        return
    assert_parity(model, {"x": x})


@pytest.mark.parametrize("lo,hi", [(-7, 20), (None, 20), (-7, None), (None, None), (9, 2)])
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8, np.uint32, np.uint64])
def test_clip_int(dtype, lo, hi):
    if np.dtype(dtype).kind == "u" and lo is not None and lo < 0:
        lo = 3
    x = data([2, 6], dtype, -60, 60)
    assert_parity(clip_model(dtype, lo, hi, 13), {"x": x})


def test_clip_min_max_as_graph_inputs():
    node = helper.make_node("Clip", ["x", "lo", "hi"], ["y"])
    F = TensorProto.FLOAT
    model = make_model([node], [("x", F, [3, 4]), ("lo", F, []), ("hi", F, [])], [("y", F, None)], opset=13)
    feeds = {"x": data([3, 4], np.float32), "lo": np.array(-1.5, np.float32), "hi": np.array(0.5, np.float32)}
    assert_parity(model, feeds)


@pytest.mark.parametrize("attrs", [{}, {"min": -1.0}, {"max": 2.0}, {"min": -1.0, "max": 2.0}])
def test_clip_opset6_attrs(attrs):
    x = CLIP_X.astype(np.float32)
    assert_parity(single_op_model("Clip", {"x": x}, attrs=attrs, opset=6), {"x": x})


def test_clip_opset6_min_above_max():
    """ORT refuses min > max at Clip-6; later versions define the result as max, which we give."""
    x = CLIP_X.astype(np.float32)
    got = run_mlx(single_op_model("Clip", {"x": x}, attrs={"min": 2.0, "max": -1.0}, opset=6), {"x": x})[0]
    np.testing.assert_array_equal(got, clip_reference(x, 2.0, -1.0))


def test_clip_empty_and_scalar():
    for shape in ([0, 3], []):
        x = data(shape, np.float32)
        assert_parity(clip_model(np.float32, -1.0, 1.0, 13, shape=shape), {"x": x})


# ---- bfloat16 (numpy has none: inputs and outputs go through Cast nodes) ----------------------------

def bf16_model(op, opset, attrs=None):
    F, BF = TensorProto.FLOAT, TensorProto.BFLOAT16
    nodes = [helper.make_node("Cast", ["x"], ["xb"], to=BF), helper.make_node(op, ["xb"], ["r"], **(attrs or {})),
             helper.make_node("Cast", ["r"], ["y"], to=F)]
    return make_model(nodes, [("x", F, [3, 20])], [("y", F, None)], opset=opset)


@pytest.mark.parametrize("op", ["Relu", "LeakyRelu", "Sigmoid", "Gelu", "Elu", "Selu", "HardSigmoid", "HardSwish",
                                "Softplus", "Softsign", "Mish", "ThresholdedRelu", "Swish", "Clip"])
def test_bfloat16(op):
    """MLX in bfloat16 against the CPU EP in float32 on the same (bfloat16-rounded) inputs."""
    opset = {"Swish": 24}.get(op, 22)
    x = run_cpu(bf16_model("Identity", 22), {"x": data([3, 20], np.float32)})[0]
    attrs = dict(ACTS.get(op, ({}, None))[0])
    got = run_mlx(bf16_model(op, opset, attrs), {"x": x})[0]
    want = run_cpu(single_op_model(op, {"x": x}, attrs=attrs, opset=opset), {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2)
