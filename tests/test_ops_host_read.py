"""Parity tests of the host_read family (src/ops/host_read.c): NonZero and Unique on the MLX EP in
strict mode against ORT's CPU EP, plus NumPy references for forms ORT has no kernel for."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from parity import rng_values, NP_TO_ONNX, assert_parity, feeds_model, run_mlx


RNG = np.random.default_rng(0)




@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint8, np.bool_, np.int64, np.float16])
@pytest.mark.parametrize("shape", [(7,), (3, 4), (2, 3, 4), (0, 3)])
def test_nonzero(dtype, shape):
    x = rng_values(shape, dtype)
    if np.dtype(dtype).kind == "f":
        x[x < 0] = 0
    assert_parity(*feeds_model("NonZero", {"x": x}, out_dtypes=[TensorProto.INT64], opset=13))


def test_nonzero_specials():
    x = np.array([[0.0, -0.0, np.nan], [np.inf, 1e-30, 0.0]], np.float32)
    assert_parity(*feeds_model("NonZero", {"x": x}, out_dtypes=[TensorProto.INT64], opset=9))


def test_nonzero_all_zero():
    x = np.zeros((2, 3), np.int32)
    assert_parity(*feeds_model("NonZero", {"x": x}, out_dtypes=[TensorProto.INT64], opset=13))


def unique_model(x, sorted_=1, axis=None, n_out=4):
    attrs = {"sorted": sorted_}
    if axis is not None:
        attrs["axis"] = axis
    outs = [NP_TO_ONNX[x.dtype]] + [TensorProto.INT64] * (n_out - 1)
    return feeds_model("Unique", {"x": x}, attrs=attrs, out_dtypes=outs, opset=11)


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int8, np.float64, np.float16])
@pytest.mark.parametrize("sorted_", [0, 1, -1, 2])  # ORT sorts only for 1 (found by tools/fuzz's attrs pool)
@pytest.mark.parametrize("shape", [(12,), (3, 5), (1,), (0,)])
def test_unique_flat(dtype, sorted_, shape):
    x = RNG.integers(-3, 4, size=shape).astype(dtype)
    assert_parity(*unique_model(x, sorted_))


@pytest.mark.parametrize("axis", [0, 1, -1, 2])
@pytest.mark.parametrize("sorted_", [0, 1])
def test_unique_axis(axis, sorted_):
    x = RNG.integers(0, 2, size=(4, 3, 2)).astype(np.float32)
    x = np.concatenate([x, x[:, :1]], axis=1)  # a repeated slice on axis 1
    assert_parity(*unique_model(x, sorted_, axis))


@pytest.mark.parametrize("n_out", [1, 2, 3])
def test_unique_fewer_outputs(n_out):
    x = np.array([2, 1, 1, 3, 4, 3], np.int64)
    assert_parity(*unique_model(x, 0, None, n_out))


def test_unique_signed_zero():
    x = np.array([0.0, -0.0, 1.0, -0.0], np.float32)
    assert_parity(*unique_model(x, 1))


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.uint64, np.bool_])
def test_unique_types_without_ort_kernel(dtype):
    """ORT's Unique lacks these dtypes: compare with numpy.unique."""
    x = np.array([3, 1, 1, 0, 3, 2], np.int64).astype(dtype)
    if dtype == np.uint64:
        x[0] = np.iinfo(np.uint64).max
    y, idx, inv, cnt = run_mlx(*unique_model(x, 1))
    wy, widx, winv, wcnt = np.unique(x, return_index=True, return_inverse=True, return_counts=True)
    np.testing.assert_array_equal(y, wy)
    np.testing.assert_array_equal(idx, widx)
    np.testing.assert_array_equal(inv, winv)
    np.testing.assert_array_equal(cnt, wcnt)
