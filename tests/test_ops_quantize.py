"""Parity tests of the quantize family (src/ops/quantize.c): QuantizeLinear, DequantizeLinear,
DynamicQuantizeLinear, MatMulInteger and QLinearMatMul on the MLX EP in strict mode against ORT's
CPU EP (integer outputs must match exactly), plus exactness checks against NumPy where ORT's own
kernels are known to be inexact (u8 x s8 MatMulInteger saturates 16-bit pair sums on AVX2)."""
from __future__ import annotations

import numpy as np
import pytest
from parity import NP_TO_ONNX, assert_parity, feeds_model as build, run_mlx


def ot(dtype):
    return NP_TO_ONNX[np.dtype(dtype)]


def rand(shape, scale=50.0, dtype=np.float32, seed=0):
    x = (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)
    flat = x.reshape(-1)
    flat[: min(8, flat.size)] = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 300.0, -300.0])[: min(8, flat.size)]
    return x


QTYPES = [np.uint8, np.int8, np.uint16, np.int16]


# ---- QuantizeLinear -----------------------------------------------------------------------------

@pytest.mark.parametrize("qt", QTYPES)
@pytest.mark.parametrize("xdtype", [np.float32, np.float16])
@pytest.mark.parametrize("kind", ["init", "feed"])
def test_quantize_per_tensor(qt, xdtype, kind):
    x = rand((3, 17), dtype=xdtype)
    s, z = np.array(0.5, xdtype), np.array(3, qt)
    if kind == "init":
        model, feeds = build("QuantizeLinear", {"x": x}, {"s": s, "z": z}, out_dtypes=[ot(qt)])
    else:
        model, feeds = build("QuantizeLinear", {"x": x, "s": s, "z": z}, out_dtypes=[ot(qt)])
    assert_parity(model, feeds)


@pytest.mark.parametrize("qt", [np.uint8, np.int8])
@pytest.mark.parametrize("opset", [10, 13, 19])
def test_quantize_old_opsets(qt, opset):
    x = rand((4, 5))
    assert_parity(*build("QuantizeLinear", {"x": x}, {"s": np.float32(0.3), "z": np.array(-1 if qt == np.int8 else 7, qt)},
                         out_dtypes=[ot(qt)], opset=opset))


def test_quantize_no_zero_point_is_uint8():
    x = rand((10,))
    assert_parity(*build("QuantizeLinear", {"x": x}, {"s": np.float32(0.7)}, out_dtypes=[ot(np.uint8)]))


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("qt", [np.int8, np.uint16])
def test_quantize_per_axis(axis, qt):
    x = rand((3, 4, 5))
    d = x.shape[axis]
    s = np.linspace(0.1, 2.0, d).astype(np.float32)
    z = np.arange(d).astype(qt)
    assert_parity(*build("QuantizeLinear", {"x": x}, {"s": s, "z": z}, {"axis": axis}, out_dtypes=[ot(qt)]))


@pytest.mark.parametrize("block,axis", [(2, 1), (3, 1), (4, 0), (5, -1)])
@pytest.mark.parametrize("with_zp", [True, False])
def test_quantize_blocked(block, axis, with_zp):
    x = rand((4, 7))
    sshape = list(x.shape)
    sshape[axis] = -(-x.shape[axis] // block)
    rng = np.random.default_rng(3)
    inits = {"s": (rng.random(sshape) + 0.1).astype(np.float32)}
    if with_zp:
        inits["z"] = rng.integers(-10, 10, sshape).astype(np.int8)
    model, feeds = build("QuantizeLinear", {"x": x}, inits, {"axis": axis, "block_size": block},
                         out_dtypes=[ot(np.int8) if with_zp else ot(np.uint8)])
    assert_parity(model, feeds)


def test_quantize_output_dtype_attr():
    x = rand((6,))
    assert_parity(*build("QuantizeLinear", {"x": x}, {"s": np.float32(0.25)},
                         {"output_dtype": int(ot(np.int16))}, out_dtypes=[ot(np.int16)]))


@pytest.mark.parametrize("qt", [np.int8, np.uint8])
def test_quantize_specials(qt):
    x = np.array([np.nan, np.inf, -np.inf, 1e30, -1e30, 0.0, -0.0, 127.5, 128.5], np.float32)
    assert_parity(*build("QuantizeLinear", {"x": x}, {"s": np.float32(1.0), "z": np.array(0, qt)}, out_dtypes=[ot(qt)]))


# ---- DequantizeLinear ---------------------------------------------------------------------------

def qdata(shape, qt, seed=0):
    info = np.iinfo(qt)
    return np.random.default_rng(seed).integers(info.min, info.max, size=shape, endpoint=True).astype(qt)


@pytest.mark.parametrize("qt", QTYPES + [np.int32])
@pytest.mark.parametrize("st", [np.float32, np.float16])
def test_dequantize_per_tensor(qt, st):
    x = qdata((5, 6), qt)
    inits = {"s": np.array(0.037, st)}
    if qt != np.int32:
        inits["z"] = np.array(5, qt)
    assert_parity(*build("DequantizeLinear", {"x": x}, inits, out_dtypes=[ot(st)]))


@pytest.mark.parametrize("opset", [10, 13, 19])
def test_dequantize_old_opsets(opset):
    x = qdata((3, 4), np.uint8)
    assert_parity(*build("DequantizeLinear", {"x": x}, {"s": np.float32(0.1), "z": np.uint8(128)},
                         out_dtypes=[ot(np.float32)], opset=opset))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_dequantize_per_axis(axis):
    x = qdata((2, 3, 4), np.int8)
    d = x.shape[axis]
    s = np.linspace(0.01, 1.0, d).astype(np.float32)
    z = (np.arange(d) - 1).astype(np.int8)
    assert_parity(*build("DequantizeLinear", {"x": x, "s": s, "z": z}, attrs={"axis": axis},
                         out_dtypes=[ot(np.float32)]))


@pytest.mark.parametrize("block,axis", [(2, 1), (3, 1), (4, 0)])
@pytest.mark.parametrize("st", [np.float32, np.float16])
def test_dequantize_blocked(block, axis, st):
    x = qdata((4, 7), np.uint8)
    sshape = list(x.shape)
    sshape[axis] = -(-x.shape[axis] // block)
    rng = np.random.default_rng(5)
    inits = {"s": (rng.random(sshape) + 0.1).astype(st), "z": rng.integers(0, 255, sshape).astype(np.uint8)}
    assert_parity(*build("DequantizeLinear", {"x": x}, inits, {"axis": axis, "block_size": block},
                         out_dtypes=[ot(st)]))


# ---- DynamicQuantizeLinear ----------------------------------------------------------------------

@pytest.mark.parametrize("case", ["mixed", "positive", "negative", "zeros", "empty", "scalar"])
def test_dynamic_quantize(case):
    rng = np.random.default_rng(7)
    x = {"mixed": rng.standard_normal((4, 9)) * 3, "positive": rng.random(20) * 10 + 1,
         "negative": -rng.random((3, 3)) * 0.01, "zeros": np.zeros(5), "empty": np.zeros((0, 3)),
         "scalar": np.array(2.5)}[case].astype(np.float32)
    from onnx import TensorProto
    assert_parity(*build("DynamicQuantizeLinear", {"x": x}, out_dtypes=[TensorProto.UINT8, TensorProto.FLOAT,
                                                                           TensorProto.UINT8], opset=11))


# ---- MatMulInteger ------------------------------------------------------------------------------

def mmi_ref(a, b, azp=None, bzp=None):
    a = a.astype(np.int64) - (0 if azp is None else (azp.reshape(-1, 1) if np.size(azp) > 1 else azp))
    b = b.astype(np.int64) - (0 if bzp is None else bzp)
    return (a @ b).astype(np.int32)


@pytest.mark.parametrize("at,bt", [(np.uint8, np.uint8), (np.int8, np.int8)])
@pytest.mark.parametrize("ashape,bshape", [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((2, 3, 4), (2, 4, 2)),
                                           ((4,), (4, 3)), ((3, 4), (4,)), ((1, 2, 3), (5, 3, 2))])
@pytest.mark.parametrize("zp", ["none", "scalar"])
def test_matmul_integer(at, bt, ashape, bshape, zp):
    a, b = qdata(ashape, at, 1), qdata(bshape, bt, 2)
    inits = {"az": np.array(3, at), "bz": np.array(-2 if bt == np.int8 else 200, bt)} if zp == "scalar" else {}
    model, feeds = build("MatMulInteger", {"a": a, "b": b}, inits, out_dtypes=[ot(np.int32)], opset=10)
    assert_parity(model, feeds)


def test_matmul_integer_u8s8_small_values():
    """ORT's u8 x s8 kernel is exact while pair sums fit 16 bits."""
    a = np.random.default_rng(1).integers(0, 128, (5, 16)).astype(np.uint8)
    b = qdata((16, 3), np.int8, 2)
    model, feeds = build("MatMulInteger", {"a": a, "b": b}, {"az": np.uint8(1), "bz": np.int8(-1)},
                         out_dtypes=[ot(np.int32)], opset=10)
    assert_parity(model, feeds)


@pytest.mark.parametrize("azp,bzp", [(np.uint8(7), np.int8(-3)), (np.arange(1, 4).astype(np.uint8), None),
                                     (None, np.arange(5).astype(np.int8))])
def test_matmul_integer_exact_vs_numpy(azp, bzp):
    """u8 x s8 at full range (where ORT saturates), per-row A and per-column B zero points."""
    a, b = qdata((3, 64), np.uint8, 1), qdata((64, 5), np.int8, 2)
    names = ["a", "b", "az" if azp is not None else "", "bz" if bzp is not None else ""]
    inits = {k: v for k, v in {"az": azp, "bz": bzp}.items() if v is not None}
    model, feeds = build("MatMulInteger", {"a": a, "b": b}, inits, out_dtypes=[ot(np.int32)], opset=10, names=names)
    got = run_mlx(model, feeds)[0]
    np.testing.assert_array_equal(got, mmi_ref(a, b, azp, bzp))


def test_matmul_integer_large_k_exact():
    a, b = qdata((2, 4096), np.int8, 3), qdata((4096, 2), np.int8, 4)
    model, feeds = build("MatMulInteger", {"a": a, "b": b}, out_dtypes=[ot(np.int32)], opset=10)
    np.testing.assert_array_equal(run_mlx(model, feeds)[0], mmi_ref(a, b))


# ---- QLinearMatMul ------------------------------------------------------------------------------

@pytest.mark.parametrize("at,bt", [(np.uint8, np.uint8), (np.int8, np.int8), (np.uint8, np.int8)])
@pytest.mark.parametrize("ashape,bshape", [((3, 8), (8, 5)), ((2, 3, 8), (8, 4)), ((2, 2, 8), (2, 8, 3))])
@pytest.mark.parametrize("opset,st", [(10, np.float32), (21, np.float32), (21, np.float16)])
def test_qlinear_matmul(at, bt, ashape, bshape, opset, st):
    rng = np.random.default_rng(11)
    a = qdata(ashape, at, 1)
    if at == np.uint8 and bt == np.int8:  # keep ORT's u8 x s8 kernel inside its exact range
        a = (a // 2).astype(np.uint8)
    b = qdata(bshape, bt, 2)
    inits = {"as": np.array(0.02, st), "az": np.array(rng.integers(0, 20), at),
             "bs": np.array(0.03, st), "bz": np.array(rng.integers(0, 20), bt),
             "ys": np.array(0.5, st), "yz": np.array(5, at)}
    names = ["a", "as", "az", "b", "bs", "bz", "ys", "yz"]
    model, feeds = build("QLinearMatMul", {"a": a, "b": b}, inits, out_dtypes=[ot(at)], opset=opset, names=names)
    assert_parity(model, feeds)


def test_qlinear_matmul_per_column():
    a, b = qdata((3, 8), np.uint8, 1), qdata((8, 4), np.uint8, 2)
    inits = {"as": np.float32(0.02), "az": np.uint8(3), "bs": np.linspace(0.01, 0.05, 4).astype(np.float32),
             "bz": np.arange(4).astype(np.uint8) * 10, "ys": np.float32(0.3), "yz": np.uint8(100)}
    names = ["a", "as", "az", "b", "bs", "bz", "ys", "yz"]
    assert_parity(*build("QLinearMatMul", {"a": a, "b": b}, inits, out_dtypes=[ot(np.uint8)], opset=10, names=names))


# ---- MatMulIntegerToFloat / DynamicQuantizeMatMul (com.microsoft) ---------------------------------

def _ms_model(op, ins, n_out=1):
    from onnx import TensorProto, helper
    from parity import make_model
    names = [n if n else "" for n, _ in ins]
    node = helper.make_node(op, names, ["y"], domain="com.microsoft")
    graph_ins = [(n, NP_TO_ONNX[a.dtype], list(a.shape)) for n, a in ins if n]
    return make_model([node], graph_ins, [("y", TensorProto.FLOAT, None)], domains=[("com.microsoft", 1)])


def _q(shape, dtype, seed):
    info = np.iinfo(dtype)
    return np.random.default_rng(seed).integers(info.min, info.max + 1, shape).astype(dtype)


@pytest.mark.parametrize("at,bt", [(np.uint8, np.int8), (np.uint8, np.uint8), (np.int8, np.int8)])
@pytest.mark.parametrize("per_column,zero_points,bias", [(False, False, False), (True, True, True), (False, True, False)])
def test_matmul_integer_to_float(at, bt, per_column, zero_points, bias):
    a, b = _q((2, 3, 16), at, 1), _q((16, 5), bt, 2)
    if at == np.uint8 and bt == np.int8:
        # ORT's AVX2 u8 x s8 kernel (CPUs without VNNI) saturates int16 pair sums: keep A to 7 bits
        # so its reference is exact; test_matmul_integer_to_float_full_range covers the rest
        a = (a // 2).astype(np.uint8)
    n = 5
    ins = [("a", a), ("b", b), ("as", np.array(0.02, np.float32)),
           ("bs", np.linspace(0.01, 0.05, n).astype(np.float32) if per_column else np.array(0.03, np.float32))]
    if zero_points or bias:
        ins += [("az", np.array(3, at)) if zero_points else ("", None),
                ("bz", (np.arange(n) % 4).astype(bt) if per_column else np.array(2, bt)) if zero_points else ("", None)]
    if bias:
        ins.append(("bias", np.linspace(-1, 1, n).astype(np.float32)))
    model = _ms_model("MatMulIntegerToFloat", ins)
    assert_parity(model, {k: v for k, v in ins if k}, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("per_column", [False, True])
def test_matmul_integer_to_float_full_range(per_column):
    """u8 x s8 over their whole ranges (where ORT's AVX2 kernel saturates) against a float64
    reference: (a - az) @ (b - bz) * as * bs + bias."""
    a, b, n = _q((2, 3, 16), np.uint8, 1), _q((16, 5), np.int8, 2), 5
    a_scale, a_zero = np.float32(0.02), np.uint8(3)
    b_scale = np.linspace(0.01, 0.05, n).astype(np.float32) if per_column else np.array(0.03, np.float32)
    b_zero = (np.arange(n) % 4).astype(np.int8) if per_column else np.array(2, np.int8)
    bias = np.linspace(-1, 1, n).astype(np.float32)
    ins = [("a", a), ("b", b), ("as", np.array(a_scale)), ("bs", b_scale), ("az", np.array(a_zero)), ("bz", b_zero),
           ("bias", bias)]
    got = run_mlx(_ms_model("MatMulIntegerToFloat", ins), {k: v for k, v in ins})[0]
    acc = (a.astype(np.int64) - int(a_zero)) @ (b.astype(np.int64) - b_zero.astype(np.int64))
    want = acc * (np.float64(a_scale) * b_scale.astype(np.float64)) + bias
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("bt", [np.int8, np.uint8])
@pytest.mark.parametrize("per_column,zero_point,bias", [(False, False, False), (True, True, True)])
def test_dynamic_quantize_matmul(bt, per_column, zero_point, bias):
    a = np.random.default_rng(3).standard_normal((4, 16)).astype(np.float32)
    b, n = _q((16, 6), bt, 4), 6
    if bt == np.int8:
        # A is quantized to the whole uint8 range, and ORT's AVX2 u8 x s8 kernel (CPUs without VNNI)
        # saturates int16 pair sums: B within [-64, 63] keeps its reference exact
        # (test_dynamic_quantize_matmul_full_range covers the rest)
        b = (b // 2).astype(np.int8)
    ins = [("a", a), ("b", b), ("bs", np.linspace(0.01, 0.05, n).astype(np.float32) if per_column else np.array(0.03, np.float32))]
    if zero_point or bias:
        ins.append(("bz", (np.arange(n) % 3).astype(bt) if per_column else np.array(1, bt)) if zero_point else ("", None))
    if bias:
        ins.append(("bias", np.linspace(-1, 1, n).astype(np.float32)))
    model = _ms_model("DynamicQuantizeMatMul", ins)
    assert_parity(model, {k: v for k, v in ins if k}, rtol=1e-5, atol=1e-5)


def test_dynamic_quantize_matmul_full_range():
    """u8 x s8 with B over its whole range (where ORT's AVX2 kernel saturates) against a float64
    reference: A quantized as DynamicQuantizeLinear does (uint8, round half to even), then
    (qa - za) @ (b - bz) * sa * sb + bias."""
    a = np.random.default_rng(3).standard_normal((4, 16)).astype(np.float32)
    b, n = _q((16, 6), np.int8, 4), 6
    b_scale, b_zero = np.linspace(0.01, 0.05, n).astype(np.float32), (np.arange(n) % 3).astype(np.int8)
    bias = np.linspace(-1, 1, n).astype(np.float32)
    ins = [("a", a), ("b", b), ("bs", b_scale), ("bz", b_zero), ("bias", bias)]
    got = run_mlx(_ms_model("DynamicQuantizeMatMul", ins), dict(ins))[0]
    lo, hi = min(0.0, float(a.min())), max(0.0, float(a.max()))
    a_scale = np.float32((hi - lo) / 255)
    a_zero = int(np.clip(np.rint(-lo / a_scale), 0, 255))
    qa = np.clip(np.rint(a / a_scale) + a_zero, 0, 255).astype(np.int64)
    acc = (qa - a_zero) @ (b.astype(np.int64) - b_zero.astype(np.int64))
    want = acc * (np.float64(a_scale) * b_scale.astype(np.float64)) + bias
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


# ---- com.microsoft QuantizeLinear / DequantizeLinear ----------------------------------------------

@pytest.mark.parametrize("qt", [np.int8, np.uint8, np.int16, np.uint16])
@pytest.mark.parametrize("per_axis", [False, True])
def test_contrib_quantize_dequantize(qt, per_axis):
    from onnx import TensorProto, helper
    from parity import make_model
    x = rand((2, 3, 4), scale=300.0)
    scale = np.array([0.5, 2.0, 7.0], np.float32) if per_axis else np.array(1.5, np.float32)
    zp = (np.array([1, 0, 3]) if per_axis else np.array(2)).astype(qt)
    q = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], domain="com.microsoft", axis=1)
    d = helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], domain="com.microsoft", axis=1)
    model = make_model([q, d], [("x", TensorProto.FLOAT, [2, 3, 4])],
                       [("q", NP_TO_ONNX[np.dtype(qt)], None), ("y", TensorProto.FLOAT, None)],
                       [("s", scale), ("z", zp)], domains=[("com.microsoft", 1)])
    assert_parity(model, {"x": x})
