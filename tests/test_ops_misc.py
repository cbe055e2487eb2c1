"""Parity tests of the misc family (src/ops/misc.c): Dropout (inference), Det, ReverseSequence,
TensorScatter, Scatter (opsets 9-10), NonZero and Unique on the MLX EP in strict mode against ORT's
CPU EP, plus NumPy references for forms ORT has no kernel for."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from parity import NP_TO_ONNX, assert_parity, feeds_model as build, run_mlx

RNG = np.random.default_rng(0)


def data(shape, dtype=np.float32):
    if np.dtype(dtype) == np.bool_:
        return RNG.random(shape) > 0.5
    if np.dtype(dtype).kind in "iu":
        return RNG.integers(0, 5, size=shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


# ---- Dropout ------------------------------------------------------------------------------------

@pytest.mark.parametrize("opset", [7, 10, 12, 13, 22])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("with_mask", [False, True])
def test_dropout(opset, dtype, with_mask):
    x = data((3, 4), dtype)
    mask_t = TensorProto.BOOL if opset >= 10 else NP_TO_ONNX[np.dtype(dtype)]
    outs = [NP_TO_ONNX[np.dtype(dtype)]] + ([mask_t] if with_mask else [])
    assert_parity(*build("Dropout", {"x": x}, out_dtypes=outs, opset=opset))


@pytest.mark.parametrize("ratio", [0.0, 0.5])
def test_dropout_training_false(ratio):
    x = data((2, 5))
    inits = {"r": np.array(ratio, np.float32), "t": np.array(False)}
    assert_parity(*build("Dropout", {"x": x}, inits, out_dtypes=[TensorProto.FLOAT, TensorProto.BOOL], opset=13))


def test_dropout_training_true_declined():
    x = data((2, 5))
    model, feeds = build("Dropout", {"x": x}, {"r": np.array(0.5, np.float32), "t": np.array(True)},
                         out_dtypes=[TensorProto.FLOAT, TensorProto.BOOL], opset=13)
    with pytest.raises(Exception, match="fallback to CPU EP has been explicitly disabled"):
        run_mlx(model, feeds)


# ---- Det ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4), (2, 1, 5, 5), (1, 1), (0, 2, 2), (2, 0, 0)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_det(shape, dtype):
    x = data(shape, dtype)
    assert_parity(*build("Det", {"x": x}, opset=11), rtol=1e-4 if dtype == np.float32 else None)


def test_det_singular_and_permuted():
    x = np.array([[[1, 2], [2, 4]], [[0, 1], [1, 0]], [[0, 0, ], [0, 0]]], np.float32)
    assert_parity(*build("Det", {"x": x}, opset=22))


def test_det_float64_vs_numpy():
    x = data((3, 6, 6), np.float64)
    got = run_mlx(*build("Det", {"x": x}, opset=22))[0]
    np.testing.assert_allclose(got, np.linalg.det(x), rtol=1e-12)


# ---- ReverseSequence ----------------------------------------------------------------------------

@pytest.mark.parametrize("time_axis,batch_axis", [(0, 1), (1, 0)])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
@pytest.mark.parametrize("extra", [(), (3,), (2, 2)])
def test_reverse_sequence(time_axis, batch_axis, dtype, extra):
    t, b = 5, 4
    shape = ((t, b) if time_axis == 0 else (b, t)) + extra
    x = data(shape, dtype)
    lens = np.array([5, 1, 3, 0], np.int64) if dtype != np.bool_ else np.array([5, 1, 3, 2], np.int64)
    attrs = {"time_axis": time_axis, "batch_axis": batch_axis}
    assert_parity(*build("ReverseSequence", {"x": x, "l": lens}, attrs=attrs, opset=10))


# ---- TensorScatter ------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("axis", [-2, 1, 2])
@pytest.mark.parametrize("with_indices", [False, True])
def test_tensor_scatter(mode, axis, with_indices):
    past = data((2, 3, 6, 4))
    ushape = list(past.shape)
    ushape[axis] = 2
    upd = data(tuple(ushape))
    cache = past.shape[axis]
    feeds = {"p": past, "u": upd}
    names = ["p", "u"]
    if with_indices:
        feeds["w"] = np.array([cache - 2, 1] if mode == "linear" else [cache - 1, 3], np.int64)
        names.append("w")
    assert_parity(*build("TensorScatter", feeds, attrs={"mode": mode, "axis": axis}, opset=24, names=names))


# ---- Scatter (opset 9-10) -----------------------------------------------------------------------

@pytest.mark.parametrize("axis", [0, 1, -1])
def test_scatter_legacy(axis):
    x = data((3, 4))
    idx = np.array([[1, 0, 2, 2], [0, 2, 1, 0]], np.int64) if axis == 0 else np.array([[3, 0], [1, 2], [0, -1]], np.int64)
    upd = data(idx.shape)
    assert_parity(*build("Scatter", {"x": x, "i": idx, "u": upd}, attrs={"axis": axis}, opset=10))


# ---- NonZero ------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint8, np.bool_, np.int64, np.float16])
@pytest.mark.parametrize("shape", [(7,), (3, 4), (2, 3, 4), (0, 3)])
def test_nonzero(dtype, shape):
    x = data(shape, dtype)
    if np.dtype(dtype).kind == "f":
        x[x < 0] = 0
    assert_parity(*build("NonZero", {"x": x}, out_dtypes=[TensorProto.INT64], opset=13))


def test_nonzero_specials():
    x = np.array([[0.0, -0.0, np.nan], [np.inf, 1e-30, 0.0]], np.float32)
    assert_parity(*build("NonZero", {"x": x}, out_dtypes=[TensorProto.INT64], opset=9))


def test_nonzero_all_zero():
    x = np.zeros((2, 3), np.int32)
    assert_parity(*build("NonZero", {"x": x}, out_dtypes=[TensorProto.INT64], opset=13))


# ---- Unique -------------------------------------------------------------------------------------

def unique_model(x, sorted_=1, axis=None, n_out=4):
    attrs = {"sorted": sorted_}
    if axis is not None:
        attrs["axis"] = axis
    outs = [NP_TO_ONNX[x.dtype]] + [TensorProto.INT64] * (n_out - 1)
    return build("Unique", {"x": x}, attrs=attrs, out_dtypes=outs, opset=11)


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int8, np.float64, np.float16])
@pytest.mark.parametrize("sorted_", [0, 1])
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
