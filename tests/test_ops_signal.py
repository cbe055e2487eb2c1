"""Parity tests of the signal family (src/ops/signal.c): DFT and STFT on the MLX EP in strict mode
against ORT's CPU EP and NumPy's FFT, and the window / mel filter-bank generators against ORT
(which they must match to the last bit in float32)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from parity import assert_parity, feeds_model, run_cpu, run_mlx_each

RNG = np.random.default_rng(0)


def build(op, feeds, inits=None, attrs=None, out_dtype=TensorProto.FLOAT, opset=20, names=None):
    return feeds_model(op, feeds, inits, attrs, [out_dtype], opset, names)


def fft_tol(got, want):
    """FFT outputs are sums of many terms: compare with a tolerance scaled by the output's size.
    ORT's naive DFT (non-power-of-2 lengths) accumulates angle errors of ~1e-4 relative."""
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=0, atol=3e-4 * scale)


def mlx_outputs(model, feeds):
    """Output 0 of each Run of the eager/trace/replay triple (parity.run_mlx_each)."""
    return [out[0] for out in run_mlx_each(model, feeds)]


def check_fft(model, feeds, reference=None, atol=None):
    """Every Run against ORT's CPU EP (fft_tol) and, when given, against a NumPy reference."""
    want = run_cpu(model, feeds)[0]
    for got in mlx_outputs(model, feeds):
        fft_tol(got, want)
        if reference is not None:
            np.testing.assert_allclose(got, reference, atol=atol)


def dft_model(x, opset, attrs, axis=None, dft_length=None):
    names, inits = ["x"], {}
    names.append("dl" if dft_length is not None else "")
    if dft_length is not None:
        inits["dl"] = np.array(dft_length, np.int64)
    if axis is not None and opset >= 20:
        names.append("ax")
        inits["ax"] = np.array(axis, np.int64)
    elif axis is not None:
        attrs = {**attrs, "axis": axis}
    return build("DFT", {"x": x}, inits, attrs, opset=opset, names=names)


def numpy_dft(x, axis, inverse=False, onesided=False, n=None):
    sig = x[..., 0] + 1j * x[..., 1] if x.shape[-1] == 2 else x[..., 0].astype(np.complex128)
    ax = axis if axis >= 0 else axis + x.ndim
    if onesided and inverse:
        return np.fft.irfft(sig, n=n, axis=ax)[..., None]
    y = (np.fft.ifft if inverse else np.fft.fft)(sig, n=n, axis=ax)
    if onesided:
        y = np.take(y, np.arange(y.shape[ax] // 2 + 1), axis=ax)
    return np.stack([y.real, y.imag], -1)


@pytest.mark.parametrize("n", [8, 16, 12, 7])
@pytest.mark.parametrize("complex_in", [False, True])
@pytest.mark.parametrize("inverse", [False, True])
@pytest.mark.parametrize("opset", [17, 20])
def test_dft(n, complex_in, inverse, opset):
    x = RNG.standard_normal((3, n, 2 if complex_in else 1)).astype(np.float32)
    model, feeds = dft_model(x, opset, {"inverse": int(inverse)}, axis=1)
    check_fft(model, feeds, numpy_dft(x, 1, inverse), atol=1e-5 * max(1, n))


@pytest.mark.parametrize("n", [8, 9])
@pytest.mark.parametrize("dft_length", [None, 6, 16])
def test_dft_onesided(n, dft_length):
    x = RNG.standard_normal((2, n, 1)).astype(np.float32)
    model, feeds = dft_model(x, 20, {"onesided": 1}, axis=1, dft_length=dft_length)
    check_fft(model, feeds, numpy_dft(x, 1, onesided=True, n=dft_length), atol=1e-4)


@pytest.mark.parametrize("bins", [5, 4])
@pytest.mark.parametrize("dft_length", [None, 8, 9, 4])
def test_dft_irfft(bins, dft_length):
    """IRFFT follows ONNX's reference (numpy.fft.irfft: the bins are cut or zero-padded to
    n // 2 + 1); ORT's kernel deviates when the bin count is not dft_length // 2 + 1."""
    x = RNG.standard_normal((2, bins, 2)).astype(np.float32)
    model, feeds = dft_model(x, 20, {"onesided": 1, "inverse": 1}, axis=1, dft_length=dft_length)
    want = numpy_dft(x, 1, inverse=True, onesided=True, n=dft_length)
    if dft_length is None or dft_length // 2 + 1 == bins:
        check_fft(model, feeds, want, atol=1e-5)
    else:
        for got in mlx_outputs(model, feeds):
            np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.parametrize("axis", [0, 1, 2, -2, -3])
@pytest.mark.parametrize("opset", [17, 20])
def test_dft_axes(axis, opset):
    x = RNG.standard_normal((4, 6, 8, 2)).astype(np.float32)
    model, feeds = dft_model(x, opset, {}, axis=axis)
    check_fft(model, feeds, numpy_dft(x, axis), atol=1e-4)


@pytest.mark.parametrize("onesided", [0, 1])
def test_dft_rank2_opset20(onesided):
    x = RNG.standard_normal((12, 1)).astype(np.float32)
    model, feeds = dft_model(x, 20, {"onesided": onesided}, axis=0)
    check_fft(model, feeds, numpy_dft(x, 0, onesided=bool(onesided)), atol=1e-5)


@pytest.mark.parametrize("dft_length", [4, 10, 32])
def test_dft_length_complex(dft_length):
    x = RNG.standard_normal((2, 10, 2)).astype(np.float32)
    model, feeds = dft_model(x, 20, {}, axis=1, dft_length=dft_length)
    check_fft(model, feeds)


def test_dft_length_fed():
    x = RNG.standard_normal((2, 16, 1)).astype(np.float32)
    model, feeds = build("DFT", {"x": x, "dl": np.array(8, np.int64)}, attrs={"onesided": 1}, opset=20,
                         names=["x", "dl"])
    check_fft(model, feeds)


def test_dft_large_power_of_two():
    x = RNG.standard_normal((1, 4096, 1)).astype(np.float32)
    model, feeds = dft_model(x, 20, {}, axis=1)
    check_fft(model, feeds)


# ---- STFT ----------------------------------------------------------------------------------------

def stft_model(signal, step, window=None, frame_length=None, onesided=None):
    names = ["x", "st", "w" if window is not None else "", "fl" if frame_length is not None else ""]
    inits = {"st": np.array(step, np.int64)}
    if window is not None:
        inits["w"] = window
    if frame_length is not None:
        inits["fl"] = np.array(frame_length, np.int64)
    attrs = {} if onesided is None else {"onesided": onesided}
    return build("STFT", {"x": signal}, inits, attrs, opset=17, names=names)


@pytest.mark.parametrize("frame,step", [(16, 8), (15, 4), (8, 8)])
@pytest.mark.parametrize("windowed", [False, True])
@pytest.mark.parametrize("onesided", [None, 0])
def test_stft_real(frame, step, windowed, onesided):
    x = RNG.standard_normal((2, 64, 1)).astype(np.float32)
    w = np.hanning(frame).astype(np.float32) if windowed else None
    model, feeds = stft_model(x, step, w, None if windowed else frame, onesided)
    check_fft(model, feeds)


def test_stft_complex():
    x = RNG.standard_normal((1, 40, 2)).astype(np.float32)
    model, feeds = stft_model(x, 5, np.hamming(10).astype(np.float32), 10, onesided=0)
    check_fft(model, feeds)


# ---- windows and mel ----------------------------------------------------------------------------

WINDOWS = ["HannWindow", "HammingWindow", "BlackmanWindow"]
# The window values are ORT's formula evaluated in double; ORT's build may use a vectorized cos
# that differs from the C library's by an ulp or two.
COS_RTOL = 1e-6


@pytest.mark.parametrize("op", WINDOWS)
@pytest.mark.parametrize("size", [1, 2, 10, 33])
@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("dtype", [TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT32, TensorProto.UINT8])
def test_windows(op, size, periodic, dtype):
    if size == 1 and periodic == 0 and dtype != TensorProto.FLOAT and dtype != TensorProto.DOUBLE:
        pytest.skip("the symmetric window of size 1 is 0/0: NaN, undefined once cast to an integer")
    model, feeds = build(op, {}, {"n": np.array(size, np.int64)},
                         {"periodic": periodic, "output_datatype": dtype}, out_dtype=dtype, opset=17)
    assert_parity(model, feeds, rtol=COS_RTOL, atol=0)


@pytest.mark.parametrize("op", WINDOWS)
def test_window_fed_size(op):
    model, feeds = build(op, {"n": np.array(16, np.int32)}, opset=17)
    assert_parity(model, feeds, rtol=COS_RTOL, atol=1e-15)


@pytest.mark.parametrize("bins,dft,rate,lo,hi", [(8, 16, 8192, 0.0, 4096.0), (10, 64, 16000, 20.0, 7600.0),
                                                 (5, 512, 22050, 300.0, 8000.0), (3, 9, 100, 1.0, 40.0)])
@pytest.mark.parametrize("dtype", [TensorProto.FLOAT, TensorProto.DOUBLE])
def test_mel_weight_matrix(bins, dft, rate, lo, hi, dtype):
    inits = {"b": np.array(bins, np.int64), "d": np.array(dft, np.int64), "r": np.array(rate, np.int64),
             "lo": np.array(lo, np.float32), "hi": np.array(hi, np.float32)}
    model, feeds = build("MelWeightMatrix", {}, inits, {"output_datatype": dtype}, out_dtype=dtype, opset=17)
    assert_parity(model, feeds, rtol=0, atol=0)
