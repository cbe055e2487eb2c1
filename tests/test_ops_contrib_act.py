"""Parity of the com.microsoft activations (src/ops/contrib_act.c): Gelu, BiasGelu, FastGelu and
QuickGelu against ORT's CPU EP (float16 runs there through inserted casts), and BiasAdd and
BiasSplitGelu, which have no CPU kernel in ORT, against a float64 numpy reference of the schema."""
from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from parity import assert_parity, claim_report, run_mlx, single_op_model

MS = "com.microsoft"


def data(shape, dtype, lo=-4.0, hi=4.0, seed=0):
    return np.random.default_rng(seed).uniform(lo, hi, size=shape).astype(dtype)


declined_reason = functools.partial(claim_report, session_may_fail=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shape", [[2, 3, 16], [7], [1, 0, 4]])
def test_gelu(dtype, shape):
    x = data(shape, dtype)
    assert_parity(single_op_model("Gelu", {"x": x}, domain=MS), {"x": x})


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_bias_gelu(dtype):
    x, b = data([2, 5, 24], dtype, seed=1), data([24], dtype, seed=2)
    assert_parity(single_op_model("BiasGelu", {"x": x, "b": b}, domain=MS), {"x": x, "b": b})
    model = single_op_model("BiasGelu", {"x": x}, initializers={"b": b}, domain=MS)
    assert_parity(model, {"x": x})


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("with_bias", [False, True])
def test_fast_gelu(dtype, with_bias):
    x = data([3, 4, 32], dtype, -6, 6, seed=3)
    inputs = {"x": x}
    if with_bias:
        inputs["b"] = data([32], dtype, seed=4)
    assert_parity(single_op_model("FastGelu", inputs, domain=MS), inputs)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("alpha", [None, 1.0, -0.5])
def test_quick_gelu(dtype, alpha):
    x = data([4, 33], dtype, -8, 8, seed=5)
    attrs = {} if alpha is None else {"alpha": alpha}
    assert_parity(single_op_model("QuickGelu", {"x": x}, attrs=attrs, domain=MS), {"x": x})


def test_gelu_float64_declined(tmp_path):
    x = data([4], np.float64)
    report = declined_reason(single_op_model("Gelu", {"x": x}, domain=MS), tmp_path)
    assert "declined com.microsoft::Gelu" in report and "float64" in report


def _erf_gelu(v):
    erf = np.vectorize(math.erf)
    return 0.5 * v * (1.0 + erf(v / math.sqrt(2.0)))


TOL = {np.float32: dict(rtol=1e-5, atol=1e-5), np.float16: dict(rtol=1e-2, atol=1e-2)}


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_bias_add(dtype):
    x, b, skip = data([2, 3, 320], dtype, seed=6), data([320], dtype, seed=7), data([2, 3, 320], dtype, seed=8)
    model = single_op_model("BiasAdd", {"x": x, "b": b, "skip": skip}, domain=MS)
    (got,) = run_mlx(model, {"x": x, "b": b, "skip": skip})
    want = x.astype(np.float64) + b.astype(np.float64) + skip.astype(np.float64)
    assert got.dtype == dtype
    np.testing.assert_allclose(got.astype(np.float64), want, **TOL[dtype])


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_bias_split_gelu(dtype):
    x, b = data([2, 4, 64], dtype, seed=9), data([64], dtype, seed=10)
    model = single_op_model("BiasSplitGelu", {"x": x, "b": b}, domain=MS)
    (got,) = run_mlx(model, {"x": x, "b": b})
    v = x.astype(np.float64) + b.astype(np.float64)
    want = v[..., :32] * _erf_gelu(v[..., 32:])
    assert got.dtype == dtype and got.shape == (2, 4, 32)
    np.testing.assert_allclose(got.astype(np.float64), want, **TOL[dtype])


def test_bias_add_rank_declined(tmp_path):
    x, b = data([6, 8], np.float32), data([8], np.float32)
    report = declined_reason(single_op_model("BiasAdd", {"x": x, "b": b, "skip": x.copy()}, domain=MS), tmp_path)
    assert "declined com.microsoft::BiasAdd" in report and "rank 2" in report
