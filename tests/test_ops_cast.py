"""Parity of Cast and CastLike (src/ops/cast.c) against ORT's CPU EP for every pair of MLX dtypes,
including out-of-range and special float values, bfloat16 through Cast chains, scalars, empty
tensors, and the dtypes that are declined (float8, int4, string)."""
from __future__ import annotations

import functools

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnxruntime_ep_mlx as mlx_ep
from parity import (NP_TO_ONNX, PARITY_RUNS, args_model, assert_parity, claim_report, make_model, run_cpu, run_mlx,
                    single_op_model)

BF16 = TensorProto.BFLOAT16
DTYPES = [np.float32, np.float16, np.float64, np.int8, np.int16, np.int32, np.int64,
          np.uint8, np.uint16, np.uint32, np.uint64, np.bool_]


def onnx_of(dtype) -> int:
    return NP_TO_ONNX[np.dtype(dtype)]


def values(dtype, seed=0) -> np.ndarray:
    """Values that exercise a cast from dtype: fractions, negatives, values out of the range of
    narrower types (which wrap the same way in ORT and the EP)."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return np.array([True, False, True, True, False, False])
    if dtype.kind == "f":
        v = np.concatenate([rng.uniform(-300, 300, 10), [0.0, -0.0, 0.5, -0.5, 1.5, 255.9, 65000.0, -1e5]])
        with np.errstate(over="ignore"):  # -1e5 is -inf in float16
            return v.astype(dtype)
    info = np.iinfo(dtype)
    v = [0, 1, 2, 127, info.max, info.min, info.max - 1, 255, 256, 1000, 70000, 2 ** 31, 2 ** 40 + 3]
    v += [-1, -2, -129, -70000] if dtype.kind == "i" else []
    return np.array([x for x in v if info.min <= x <= info.max], dtype=dtype)


@pytest.mark.parametrize("dst", DTYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("src", DTYPES, ids=lambda t: np.dtype(t).name)
def test_cast_pairs(src, dst):
    x = values(src)
    model = single_op_model("Cast", {"x": x}, attrs={"to": onnx_of(dst)}, out_dtypes=[onnx_of(dst)])
    assert_parity(model, {"x": x}, rtol=0, atol=0)


INT_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]

# Floats whose integer conversion is not plain truncation, and their neighbours: NaN, infinities,
# the powers of two that bound the int32/uint32/int64/uint64 conversions with the largest float32
# below each, values that truncate onto a bound, and values that wrap in the narrow types.
SPECIAL = [np.nan, np.inf, -np.inf, -1.7, 1.7, -0.99, 0.99, -0.5, 300.5, -300.5, 300.7, -300.7, 255.5, 256.0,
           -129.0, 32767.5, 32768.0, -32768.5, 65504.0, -65504.0, 70000.5, -70000.5, 3e9, -3e9, 1e10, -1e10,
           1e19, 1e20, -1e20, 2.0 ** 31, -2.0 ** 31, 2.0 ** 31 - 128, 2.0 ** 31 - 0.5, -2.0 ** 31 - 0.5,
           -2.0 ** 31 - 1, -2.0 ** 31 - 256, 2.0 ** 32, 2.0 ** 32 - 256, 2.0 ** 32 - 0.5, 2.0 ** 32 + 5,
           -2.0 ** 32, 2.0 ** 63, -2.0 ** 63, 2.0 ** 63 - 2 ** 39, -2.0 ** 63 - 2 ** 40, 2.0 ** 64,
           2.0 ** 64 - 2 ** 40, 2.0 ** 64 + 2 ** 41, 3.0e38, -3.0e38]


def special(dtype) -> np.ndarray:
    """SPECIAL in dtype, padded with in-range values to a multiple of 8 elements: ORT converts
    floats to uint32 in blocks (4 floats or doubles, 8 bfloat16s) and the leftover last elements
    another way (cast.c), which the EP does not follow."""
    v = SPECIAL + [0.0, 1.0, -1.0, 42.9, -42.9, 1e-3, -0.0][: -len(SPECIAL) % 8]
    with np.errstate(over="ignore"):  # beyond float16's range is infinity there
        return np.array(v, np.float64).astype(dtype)


@pytest.mark.parametrize("dst", INT_DTYPES + [np.bool_, np.float16], ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("src", [np.float32, np.float64, np.float16], ids=lambda t: np.dtype(t).name)
def test_cast_special_floats(src, dst):
    """NaN, infinities and out-of-range values become what ORT's CPU EP gives (the x86 conversion
    results, spelled out in cast.c): MLX's CUDA backend would saturate them in a bare astype."""
    x = special(src)
    model = single_op_model("Cast", {"x": x}, attrs={"to": onnx_of(dst)}, out_dtypes=[onnx_of(dst)])
    assert_parity(model, {"x": x}, rtol=0, atol=0)


# cast.c's table for float32, written out: ORT's CPU EP (checked too) and the EP must both give it.
RULE_INPUTS = [np.nan, np.inf, -np.inf, 3e9, -3e9, 1e10, -1e10, 2.0 ** 64, -0.5, 300.7, -300.7, 70000.5]
I32_MIN, I64_MIN = -2 ** 31, -2 ** 63
RULES = {
    np.int32: [I32_MIN] * 8 + [0, 300, -300, 70000],
    np.int8: [0] * 9 + [44, -44, 112],
    np.uint16: [0] * 9 + [300, 65236, 4464],
    np.int64: [I64_MIN] * 3 + [3000000000, -3000000000, 10 ** 10, -10 ** 10, I64_MIN, 0, 300, -300, 70000],
    np.uint32: [2 ** 31, 0, 2 ** 31, 3000000000, 2 ** 31, 0, 2 ** 31, 0, 0, 300, 2 ** 32 - 300, 70000],
    np.uint64: [2 ** 63, 0, 2 ** 63, 3000000000, 2 ** 64 - 3000000000, 10 ** 10, 2 ** 64 - 10 ** 10, 0, 0, 300,
                2 ** 64 - 300, 70000],
}


@pytest.mark.parametrize("dst", list(RULES), ids=lambda t: np.dtype(t).name)
def test_cast_float32_rules(dst):
    x = np.array(RULE_INPUTS, np.float32)
    want = np.array(RULES[dst], dst)
    model = single_op_model("Cast", {"x": x}, attrs={"to": onnx_of(dst)}, out_dtypes=[onnx_of(dst)])
    np.testing.assert_array_equal(run_cpu(model, {"x": x})[0], want)
    np.testing.assert_array_equal(run_mlx(model, {"x": x})[0], want)


def bfloat16_bits(x: np.ndarray) -> np.ndarray:
    """float32 values as bfloat16 bit patterns (the high halves: exact for the powers of two)."""
    return (np.asarray(x, np.float32).view(np.uint32) >> 16).astype(np.uint16)


def run_bfloat16(sess, bits: np.ndarray):
    x = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, BF16)
    return sess.run_with_ort_values(None, {"x": x})[0].numpy()


@pytest.mark.parametrize("dst", INT_DTYPES + [np.bool_], ids=lambda t: np.dtype(t).name)
def test_cast_special_bfloat16(dst):
    """The special floats fed as bfloat16 (through OrtValue: numpy has no bfloat16), not through a
    float32 -> bfloat16 Cast that ORT would fold into one cast."""
    bits = bfloat16_bits(special(np.float32))
    nodes = [helper.make_node("Cast", ["x"], ["y"], to=onnx_of(dst))]
    model = make_model(nodes, [("x", BF16, [len(bits)])], [("y", onnx_of(dst), [len(bits)])], opset=21)
    want = run_bfloat16(ort.InferenceSession(model, providers=["CPUExecutionProvider"]), bits)
    sess = mlx_ep.session(model, strict=True)
    for _ in range(PARITY_RUNS):  # eager, trace, replay
        got = run_bfloat16(sess, bits)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("opset", [6, 9, 13, 19, 21, 23])
def test_cast_opsets(opset):
    x = values(np.float32)
    model = single_op_model("Cast", {"x": x}, attrs={"to": TensorProto.INT32}, out_dtypes=[TensorProto.INT32],
                            opset=opset)
    assert_parity(model, {"x": x})


@pytest.mark.parametrize("shape", [[], [0, 3], [2, 0], [1]])
def test_cast_shapes(shape):
    x = np.asarray(np.random.default_rng(0).uniform(-5, 5, shape).astype(np.float32))
    model = single_op_model("Cast", {"x": x}, attrs={"to": TensorProto.INT64}, out_dtypes=[TensorProto.INT64])
    assert_parity(model, {"x": x})


def chain_model(src: int, mid: int, dst: int, n: int) -> bytes:
    """x (src) -> Cast(mid) -> Cast(dst): reaches bfloat16, which numpy cannot feed or fetch."""
    nodes = [helper.make_node("Cast", ["x"], ["m"], to=mid), helper.make_node("Cast", ["m"], ["y"], to=dst)]
    return make_model(nodes, [("x", src, [n])], [("y", dst, [n])], opset=21)


def cpu_cast(x: np.ndarray, to: int) -> np.ndarray:
    return run_cpu(single_op_model("Cast", {"x": x}, attrs={"to": to}, out_dtypes=[to]), {"x": x})[0]


@pytest.mark.parametrize("other", DTYPES, ids=lambda t: np.dtype(t).name)
def test_bfloat16_round_trips(other):
    """other -> bfloat16 -> float32 and float32 -> bfloat16 -> other."""
    x = values(other)
    assert_parity(chain_model(onnx_of(other), BF16, TensorProto.FLOAT, len(x)), {"x": x}, rtol=0, atol=0)
    f = values(np.float32, seed=1)
    f = np.concatenate([f, np.array([np.nan, np.inf, -np.inf, 1.00390625, 1.01171875, 3.4e38], np.float32)])
    if np.dtype(other).kind in "iu":
        f = f[np.isfinite(f)]  # NaN and infinity into integers: kept to the float tests above
    # ORT computes float32 -> bfloat16 -> int8/uint8 as one float32 -> int8 cast (skipping the
    # bfloat16 rounding), even with graph optimizations off; the reference is therefore ORT's
    # bfloat16 rounding (read back as float32, exact) followed by ORT's float32 -> other cast.
    rounded = run_cpu(chain_model(TensorProto.FLOAT, BF16, TensorProto.FLOAT, len(f)), {"x": f})[0]
    want = cpu_cast(rounded, onnx_of(other))
    got = run_mlx(chain_model(TensorProto.FLOAT, BF16, onnx_of(other), len(f)), {"x": f})[0]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dst", [np.float32, np.float16, np.int64, np.int8, np.uint8, np.bool_, np.float64],
                         ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("src", [np.float32, np.int32, np.bool_, np.float16], ids=lambda t: np.dtype(t).name)
def test_cast_like(src, dst):
    feeds = {"x": values(src), "like": np.zeros([2], dst)}
    model = single_op_model("CastLike", feeds, out_dtypes=[onnx_of(dst)], opset=21)
    assert_parity(model, feeds, rtol=0, atol=0)


def test_cast_like_initializer_target():
    x = values(np.float32)
    model = single_op_model("CastLike", {"x": x}, initializers={"like": np.zeros([1], np.int16)},
                            out_dtypes=[TensorProto.INT16], opset=15)
    assert_parity(model, {"x": x})


report_of = functools.partial(claim_report, session_may_fail=True)


# float8/int4 targets are the `emulated` family's (tests/test_ops_emulated.py); strings are no tensor MLX has.
@pytest.mark.parametrize("to", [TensorProto.STRING])
def test_cast_declined_targets(to, tmp_path):
    x = values(np.float32)
    model = single_op_model("Cast", {"x": x}, attrs={"to": to}, out_dtypes=[to], opset=21)
    assert "declined Cast" in report_of(model, tmp_path)


# ---- BitCast ------------------------------------------------------------------------------------

BITCAST_GROUPS = [
    [np.int8, np.uint8],
    [np.int16, np.uint16, np.float16, "bfloat16"],
    [np.int32, np.uint32, np.float32],
    [np.int64, np.uint64, np.float64],
]


BITCAST_ONNX_OF = {"bfloat16": TensorProto.BFLOAT16}


def bitcast_onnx_of(t):
    from parity import NP_TO_ONNX
    return BITCAST_ONNX_OF.get(t) or NP_TO_ONNX[np.dtype(t)]


def bitcast_input(dtype, shape=(3, 5), seed=0):
    rng = np.random.default_rng(seed)
    width = np.dtype(dtype).itemsize
    raw = rng.integers(0, 256, size=shape + (width,), dtype=np.uint8)
    return raw.view(dtype).reshape(shape)


@pytest.mark.parametrize("group", range(len(BITCAST_GROUPS)))
def test_bitcast(group):
    types = BITCAST_GROUPS[group]
    for src in types:
        if src == "bfloat16":
            continue  # numpy has no bfloat16 feed; covered by test_bitcast_bfloat16
        x = bitcast_input(src)
        for dst in types:
            if dst == "bfloat16":
                continue
            model, feeds = args_model("BitCast", [("x", x, "feed")], attrs={"to": bitcast_onnx_of(dst)},
                                      out_dtypes=[bitcast_onnx_of(dst)], opset=26)
            want = assert_parity(model, feeds)[0]
            assert np.asarray(want).tobytes() == x.tobytes()


@pytest.mark.parametrize("src", [np.int16, np.uint16, np.float16])
@pytest.mark.parametrize("back", [TensorProto.INT16, TensorProto.FLOAT16])
def test_bitcast_bfloat16(src, back):
    # numpy cannot hold bfloat16 outputs: view as bfloat16 and back in one model.
    x = bitcast_input(src)
    nodes = [helper.make_node("BitCast", ["x"], ["b"], to=TensorProto.BFLOAT16),
             helper.make_node("BitCast", ["b"], ["y0"], to=back)]
    model = make_model(nodes, [("x", bitcast_onnx_of(src), list(x.shape))], [("y0", back, None)], opset=26)
    got = assert_parity(model, {"x": x})[0]
    assert np.asarray(got).tobytes() == x.tobytes()


def test_bitcast_bool():
    # ORT 1.31 has no bool BitCast kernel: the spec's byte view (0/1) is the reference.
    x = np.array([[True, False, True]])
    for dst, np_dst in ((TensorProto.UINT8, np.uint8), (TensorProto.INT8, np.int8), (TensorProto.BOOL, np.bool_)):
        model, feeds = args_model("BitCast", [("x", x, "feed")], attrs={"to": dst}, out_dtypes=[dst], opset=26)
        np.testing.assert_array_equal(run_mlx(model, feeds)[0], x.view(np_dst))


@pytest.mark.parametrize("src,dst", [(np.uint8, TensorProto.BOOL), (np.float32, TensorProto.INT64),
                                     (np.int32, TensorProto.INT16)])
def test_bitcast_declined(src, dst):
    x = bitcast_input(src)
    model, feeds = args_model("BitCast", [("x", x, "feed")], attrs={"to": dst}, out_dtypes=[dst], opset=26)
    # uint8 -> bool is the EP's decline; the widths that differ ORT's shape inference rejects first.
    # With the EP's device memory on (ORT_EP_MLX_DEVICE_MEMORY), ORT's memcpy transformer runs and
    # fails first on the declined node, which no EP took (the CPU EP has no BitCast kernel): its own
    # session-creation error for the same decline.
    with pytest.raises(Exception, match=r"fallback to CPU EP has been explicitly disabled|BitCast requires input "
                                        r"and output types to have the same bit-width|"
                                        r"Provider type for BitCast node with name '.*' is not set"):
        run_mlx(model, feeds)
