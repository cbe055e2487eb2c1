"""Parity of the elementwise family (src/ops/elementwise.c) against ORT's CPU EP: unary math,
binary arithmetic with integer semantics, logic, comparisons, Where and the variadic ops, over
dtypes, broadcasting, scalars and empty tensors."""
from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from onnx import TensorProto, helper

from parity import assert_parity, claim_report, make_model, onnx_type, run_cpu, run_mlx, single_op_model, uniform_data

B = TensorProto.BOOL


def data(shape, dtype, lo=-3.0, hi=3.0, seed=0):
    return uniform_data(shape, dtype, lo, hi, seed)


def check(op, feeds, attrs=None, opset=21, out_dtypes=None, **tol):
    model = single_op_model(op, feeds, attrs=attrs, opset=opset, out_dtypes=out_dtypes)
    return assert_parity(model, feeds, **tol)


declined_reason = functools.partial(claim_report, session_may_fail=True)


# ---- unary ---------------------------------------------------------------------------------------

# op -> (lo, hi) of the input domain
UNARY_FLOAT = {
    "Sqrt": (0.0, 5.0), "Reciprocal": (0.5, 4.0), "Exp": (-5.0, 5.0), "Log": (0.01, 10.0),
    "Erf": (-3.0, 3.0), "Tanh": (-4.0, 4.0), "Ceil": (-5.0, 5.0), "Floor": (-5.0, 5.0),
    "Round": (-5.0, 5.0), "Sin": (-6.0, 6.0), "Cos": (-6.0, 6.0), "Tan": (-1.4, 1.4),
    "Asin": (-0.99, 0.99), "Acos": (-0.99, 0.99), "Atan": (-5.0, 5.0), "Sinh": (-4.0, 4.0),
    "Cosh": (-4.0, 4.0), "Asinh": (-5.0, 5.0), "Acosh": (1.0, 6.0), "Atanh": (-0.99, 0.99),
    "Abs": (-5.0, 5.0), "Neg": (-5.0, 5.0), "Sign": (-2.0, 2.0),
}


# NumPy references for float64, which ORT's CPU EP lacks for most of these ops.
NP_UNARY = {
    "Sqrt": np.sqrt, "Reciprocal": np.reciprocal, "Exp": np.exp, "Log": np.log,
    "Erf": np.vectorize(math.erf), "Tanh": np.tanh, "Ceil": np.ceil, "Floor": np.floor,
    "Round": np.round, "Sin": np.sin, "Cos": np.cos, "Tan": np.tan, "Asin": np.arcsin,
    "Acos": np.arccos, "Atan": np.arctan, "Sinh": np.sinh, "Cosh": np.cosh, "Asinh": np.arcsinh,
    "Acosh": np.arccosh, "Atanh": np.arctanh, "Abs": np.abs, "Neg": np.negative, "Sign": np.sign,
}


# MLX computes these in float64 at float32 precision: declined.
F64_DECLINED = {"Sin", "Cos", "Erf"}


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("op", sorted(UNARY_FLOAT))
def test_unary_float(op, dtype, tmp_path):
    lo, hi = UNARY_FLOAT[op]
    feeds = {"x": data([3, 17], dtype, lo, hi)}
    if dtype == np.float64 and op in F64_DECLINED:
        assert f"declined {op}" in declined_reason(single_op_model(op, feeds), tmp_path)
        return
    if dtype != np.float64:
        check(op, feeds)
        return
    got = run_mlx(single_op_model(op, feeds), feeds)[0]
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, NP_UNARY[op](feeds["x"]).astype(np.float64), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape", [[], [0, 3], [1]])
def test_unary_shapes(shape):
    check("Exp", {"x": data(shape, np.float32)})


def test_round_half_to_even():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4999, 3.5000002, -0.0, np.inf, np.nan], np.float32)
    check("Round", {"x": x})
    check("Round", {"x": x.astype(np.float16)})


def test_special_values():
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0], np.float32)
    for op in ("Abs", "Neg", "Sign", "Ceil", "Floor", "Exp", "Tanh", "Erf", "Sqrt", "Log", "Reciprocal"):
        check(op, {"x": x})


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("op", ["Erf", "Sin", "Tanh", "Sinh", "Asinh", "Atan", "Tan", "Asin", "Atanh", "Sqrt", "Abs", "Neg"])
def test_signed_zero(op, dtype):
    """The sign of a zero survives as in ORT (odd functions keep it): MLX's erf gave -0 for +0 and its
    sin +0 for -0, and a later Reciprocal made -inf of +inf (fuzz seed 16115)."""
    x = np.array([0.0, -0.0, 0.25], dtype)
    got = check(op, {"x": x})[0]
    want = run_cpu(single_op_model(op, {"x": x}), {"x": x})[0]
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    check("Reciprocal", {"x": x})


def test_exp_float64_full_range():
    x = np.concatenate([np.linspace(-745, 709.7, 2001), [-1e-300, 0.0, 1e-300, np.inf, -np.inf, np.nan, 710.0]])
    check("Exp", {"x": x}, rtol=1e-14, atol=0)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64])
@pytest.mark.parametrize("op", ["Abs", "Neg", "Sign"])
def test_unary_int(op, dtype):
    if op == "Neg" and np.dtype(dtype).kind == "u":
        pytest.skip("Neg has no unsigned types")
    x = data([4, 5], dtype, -100, 100)
    if np.dtype(dtype).kind == "i":
        x.flat[0] = np.iinfo(dtype).min  # wraps under Abs/Neg
    check(op, {"x": x})


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("pos,neg", [(1, 1), (1, 0), (0, 1), (0, 0)])
def test_isinf(dtype, pos, neg):
    x = np.array([np.inf, -np.inf, np.nan, 0.0, 5.0, -3.0], dtype)
    check("IsInf", {"x": x}, attrs={"detect_positive": pos, "detect_negative": neg}, out_dtypes=[B])


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_isnan(dtype):
    check("IsNaN", {"x": np.array([[np.inf, -np.inf], [np.nan, 0.0]], dtype)}, out_dtypes=[B])


def test_not():
    check("Not", {"x": data([3, 4], np.bool_)}, opset=21)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8, np.uint16, np.uint64])
def test_bitwise_not(dtype):
    check("BitwiseNot", {"x": data([2, 5], dtype, -50, 200)}, opset=18)


# ---- binary arithmetic -----------------------------------------------------------------------------

SHAPES = [([2, 3, 4], [4]), ([3, 1], [1, 4]), ([], [2, 3]), ([2, 3], []), ([0, 3], [3]), ([2, 1, 3], [2, 3])]
NUM_DTYPES = [np.float32, np.float16, np.float64, np.int8, np.int32, np.int64, np.uint8, np.uint32]


@pytest.mark.parametrize("dtype", NUM_DTYPES)
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
def test_arith_dtypes(op, dtype):
    a = data([3, 4], dtype, -50, 50, seed=1)
    b = data([4], dtype, 1, 9, seed=2)
    if np.dtype(dtype).kind == "i":
        b = b * np.where(np.arange(4) % 2 == 0, 1, -1).astype(dtype)  # negative divisors too
    check(op, {"a": a, "b": b}, opset=14)


@pytest.mark.parametrize("sa,sb", SHAPES)
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
def test_arith_broadcast(op, sa, sb):
    check(op, {"a": data(sa, np.float32, seed=3), "b": data(sb, np.float32, 0.5, 2.0, seed=4)})


@pytest.mark.parametrize("sa,sb", SHAPES[:3])
def test_int_div_broadcast(sa, sb):
    a = data(sa, np.int64, -100, 100, seed=5)
    b = data(sb, np.int64, 1, 7, seed=6) * np.int64(-1)
    check("Div", {"a": a, "b": b})


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64])
def test_int_div_truncates(dtype):
    a = np.array([7, -7, 7, -7, 6, -6, 0, 1, -1, np.iinfo(dtype).max, np.iinfo(dtype).min + 1], dtype)
    b = np.array([2, 2, -2, -2, 3, -3, 5, -1, 1, -1, 7], dtype)
    check("Div", {"a": a, "b": b})


def test_int_overflow_wraps():
    a = np.array([127, -128, 100], np.int8)
    check("Add", {"a": a, "b": np.array([1, -1, 100], np.int8)})
    check("Mul", {"a": a, "b": np.array([2, 2, 3], np.int8)})
    check("Sub", {"a": np.array([0, 1], np.uint8), "b": np.array([1, 2], np.uint8)})


def test_add_old_opset():
    a, b = data([2, 3], np.float32), data([3], np.float32, seed=1)
    check("Add", {"a": a, "b": b}, opset=7)
    check("Mul", {"a": a, "b": b}, opset=13)


# ---- Pow -------------------------------------------------------------------------------------------

POW_PAIRS = [
    (np.float32, np.float32), (np.float32, np.int32), (np.float32, np.int64), (np.float32, np.float64),
    (np.float32, np.float16), (np.float64, np.float32), (np.float64, np.int64), (np.float16, np.float16),
    (np.float16, np.int32), (np.int32, np.int32), (np.int64, np.int64), (np.int32, np.int64),
    (np.int64, np.int32), (np.int32, np.float32), (np.int64, np.float64),
]


@pytest.mark.parametrize("tb,te", POW_PAIRS)
def test_pow_dtypes(tb, te):
    base = data([3, 4], tb, 0, 4, seed=7)
    if np.dtype(tb).kind == "f":
        base = (base + np.asarray(0.25, tb)).astype(tb)
    exp = data([4], te, -2 if np.dtype(tb).kind == "f" else 0, 5, seed=8)
    if np.dtype(te).kind == "f":
        exp = np.array([0.5, 2.0, 1 / 3, 3.0], te)
    check("Pow", {"a": base, "b": exp}, opset=15)


def test_pow_int_negative_exponent():
    a = np.array([2, -2, 1, -1, 1, -1, 3, 0, 5], np.int32)
    e = np.array([-1, -1, -3, -3, -4, -4, -2, 0, 0], np.int32)
    check("Pow", {"a": a, "b": e})
    check("Pow", {"a": a.astype(np.int64), "b": e.astype(np.int64)})


def test_pow_int_base_float_exponent_truncates():
    a = np.array([2, 8, 10, 27, 7, 9], np.int32)
    e = np.array([0.5, 1 / 3, 2.0, 1 / 3, 1.5, 0.5], np.float32)
    check("Pow", {"a": a, "b": e})
    check("Pow", {"a": a.astype(np.int64), "b": e.astype(np.float64)})


@pytest.mark.parametrize("sa,sb", SHAPES)
def test_pow_broadcast(sa, sb):
    check("Pow", {"a": data(sa, np.float32, 0.1, 3.0), "b": data(sb, np.float32, -2.0, 3.0, seed=1)})


# ---- Mod -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64])
def test_mod_int(dtype, fmod):
    a = data([3, 8], dtype, -100, 100, seed=9)
    b = data([8], dtype, 1, 9, seed=10)
    if np.dtype(dtype).kind == "i":
        b = b * np.where(np.arange(8) % 3 == 0, -1, 1).astype(dtype)
    check("Mod", {"a": a, "b": b}, attrs={"fmod": fmod}, opset=13)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_mod_float_fmod(dtype):
    a = np.array([7.5, -7.5, 7.5, -7.5, 5.0, -0.0, 1.0, -1.0, 6e4 if dtype == np.float16 else 1e20, -3e-5,
                  np.nan, 2.0], dtype)
    b = np.array([2.0, 2.0, -2.0, -2.0, 2.5, 2.0, np.inf, np.inf, 3.0, 7.0, 1.0, np.nan], dtype)
    check("Mod", {"a": a, "b": b}, attrs={"fmod": 1})
    a2 = data([4, 6], dtype, -50, 50, seed=11)
    b2 = data([6], dtype, 0.5, 7, seed=12) * np.array([1, -1, 1, -1, 1, -1], dtype)
    check("Mod", {"a": a2, "b": b2}, attrs={"fmod": 1})


def test_mod_float_fmod_inf_and_zero():
    a = np.array([np.inf, -np.inf, 1.0, 0.0], np.float32)
    b = np.array([1.0, 2.0, 0.0, 0.0], np.float32)
    check("Mod", {"a": a, "b": b}, attrs={"fmod": 1})


def test_mod_float_fmod0_declined(tmp_path):
    f = {"a": np.ones(3, np.float32), "b": np.ones(3, np.float32)}
    report = declined_reason(single_op_model("Mod", f, attrs={"fmod": 0}), tmp_path)
    assert "declined Mod" in report and "fmod=0" in report


# ---- BitShift and bitwise/logical ops --------------------------------------------------------------

def shift_reference(x, y, left):
    """BitShift of unsigned values in Python ints: amounts of the bit width or more give 0."""
    bits = x.dtype.itemsize * 8
    mask = (1 << bits) - 1
    out = [((int(a) << int(b)) & mask if left else int(a) >> int(b)) if int(b) < bits else 0
           for a, b in zip(*(v.ravel() for v in np.broadcast_arrays(x, y)))]
    return np.array(out, dtype=x.dtype).reshape(np.broadcast_shapes(x.shape, y.shape))


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64])
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bitshift(dtype, direction):
    bits = np.dtype(dtype).itemsize * 8
    x = np.array([1, 2, 3, 255, 128, 7, 1, 5, 9, 200], dtype)
    y = np.array([0, 1, 7, 3, bits - 1, bits, bits + 1, 2 * bits, 200, 2], dtype)
    x2, y2 = data([2, 3], dtype, 0, 200), np.array([2], dtype)
    for a, b in ((x, y), (x2, y2)):
        feeds = {"x": a, "y": b}
        model = single_op_model("BitShift", feeds, attrs={"direction": direction}, opset=11)
        if dtype == np.uint16:  # ORT's CPU EP has no uint16 BitShift
            np.testing.assert_array_equal(run_mlx(model, feeds)[0], shift_reference(a, b, direction == "LEFT"))
        else:
            assert_parity(model, feeds)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8, np.uint16, np.uint64])
@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
def test_bitwise(op, dtype):
    check(op, {"a": data([3, 4], dtype, -100, 200, seed=1), "b": data([4], dtype, -100, 200, seed=2)}, opset=18)


@pytest.mark.parametrize("sa,sb", SHAPES)
@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logical(op, sa, sb):
    check(op, {"a": data(sa, np.bool_, seed=1), "b": data(sb, np.bool_, seed=2)})


# ---- comparisons -----------------------------------------------------------------------------------

CMP = ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int32, np.int64, np.uint8, np.int8])
@pytest.mark.parametrize("op", CMP)
def test_compare_dtypes(op, dtype):
    a = data([3, 5], dtype, -3, 3, seed=1)
    b = data([5], dtype, -3, 3, seed=2)
    if np.dtype(dtype).kind == "f":
        a = np.round(a)  # make ties common
        b = np.round(b)
        a.flat[0] = np.nan
    check(op, {"a": a, "b": b}, out_dtypes=[B])


@pytest.mark.parametrize("sa,sb", SHAPES)
@pytest.mark.parametrize("op", CMP)
def test_compare_broadcast(op, sa, sb):
    check(op, {"a": data(sa, np.int64, seed=1), "b": data(sb, np.int64, seed=2)}, out_dtypes=[B])


def test_equal_bool():
    check("Equal", {"a": data([2, 3], np.bool_, seed=1), "b": data([3], np.bool_, seed=2)}, out_dtypes=[B])


# ---- Where -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.int32, np.uint8, np.bool_])
def test_where_dtypes(dtype):
    feeds = {"c": data([3, 4], np.bool_), "x": data([3, 4], dtype, seed=1), "y": data([4], dtype, seed=2)}
    model = single_op_model("Where", feeds, out_dtypes=[onnx_type(feeds["x"])])
    if dtype == np.bool_:  # ORT's CPU EP has no bool Where
        got = run_mlx(model, feeds)[0]
        np.testing.assert_array_equal(got, np.where(feeds["c"], feeds["x"], feeds["y"]))
        assert got.dtype == np.bool_
    else:
        assert_parity(model, feeds)


@pytest.mark.parametrize("sc,sx,sy", [([2, 1, 4], [3, 1], [1]), ([], [2, 3], [3]), ([4], [], []), ([0, 3], [3], [1])])
def test_where_broadcast(sc, sx, sy):
    feeds = {"c": data(sc, np.bool_), "x": data(sx, np.float32, seed=1), "y": data(sy, np.float32, seed=2)}
    assert_parity(single_op_model("Where", feeds, out_dtypes=[TensorProto.FLOAT]), feeds)


# ---- variadic --------------------------------------------------------------------------------------

VARIADIC_SHAPES = [[[2, 3]], [[2, 3], [3]], [[2, 1, 3], [4, 1], [3]], [[], [2, 2], [1, 2], [2, 1]], [[0, 3], [3]]]


@pytest.mark.parametrize("shapes", VARIADIC_SHAPES)
@pytest.mark.parametrize("op", ["Min", "Max", "Sum", "Mean"])
def test_variadic_broadcast(op, shapes):
    feeds = {f"x{i}": data(s, np.float32, seed=i) for i, s in enumerate(shapes)}
    check(op, feeds)


@pytest.mark.parametrize("dtype", [np.float16, np.float64, np.int32, np.int64, np.uint8, np.int8, np.uint64])
@pytest.mark.parametrize("op", ["Min", "Max", "Sum", "Mean"])
def test_variadic_dtypes(op, dtype):
    if op in ("Sum", "Mean") and np.dtype(dtype).kind != "f":
        pytest.skip("Sum and Mean take float types only")
    if op == "Mean" and dtype == np.float64:
        pytest.skip("ORT's CPU EP has no double Mean")
    feeds = {f"x{i}": data([3, 4], dtype, -20, 20, seed=i) for i in range(3)}
    check(op, feeds)


def test_sum_mean_half_accumulate_in_float():
    feeds = {"a": np.array([1, 1], np.float16), "b": np.array([2 ** -11, 3 * 2 ** -11], np.float16),
             "c": np.array([2 ** -11, 2 ** -11], np.float16)}
    for op in ("Sum", "Mean"):
        check(op, feeds, rtol=0, atol=0)


def test_min_max_nan():
    a = np.array([np.nan, 1.0, 2.0, np.nan], np.float32)
    b = np.array([0.0, np.nan, 1.0, np.nan], np.float32)
    for op in ("Min", "Max"):
        check(op, {"a": a, "b": b})
        check(op, {"b": b, "a": a})


def test_variadic_opset6_same_shapes():
    feeds = {"a": data([2, 3], np.float32), "b": data([2, 3], np.float32, seed=1)}
    for op in ("Min", "Max", "Sum", "Mean"):
        check(op, feeds, opset=7)


# ---- bfloat16 (numpy has none: inputs and outputs go through Cast nodes) ----------------------------

def bf16_model(op, n_inputs, shape, attrs=None, out_bool=False):
    """Casts float32 inputs to bfloat16, applies op, casts a bfloat16 result back to float32."""
    F, BF = TensorProto.FLOAT, TensorProto.BFLOAT16
    names = [f"x{i}" for i in range(n_inputs)]
    nodes = [helper.make_node("Cast", [n], [n + "_b"], to=BF) for n in names]
    nodes.append(helper.make_node(op, [n + "_b" for n in names], ["r"], **(attrs or {})))
    if not out_bool:
        nodes.append(helper.make_node("Cast", ["r"], ["y"], to=F))
    return make_model(nodes, [(n, F, shape) for n in names], [("r" if out_bool else "y", B if out_bool else F, None)],
                      opset=22)


@pytest.mark.parametrize("op,n,lo,hi", [("Add", 2, -3, 3), ("Sub", 2, -3, 3), ("Mul", 2, -3, 3), ("Div", 2, 0.5, 3),
                                        ("Pow", 2, 0.5, 2), ("Sqrt", 1, 0, 4), ("Exp", 1, -3, 3), ("Neg", 1, -3, 3),
                                        ("Abs", 1, -3, 3), ("Round", 1, -3, 3), ("Sign", 1, -3, 3), ("Tanh", 1, -3, 3),
                                        ("Max", 3, -3, 3), ("Sum", 3, -3, 3), ("Mean", 3, -3, 3), ("Less", 2, -3, 3),
                                        ("IsNaN", 1, -3, 3)])
def test_bfloat16(op, n, lo, hi):
    """MLX in bfloat16 against the CPU EP in float32 on the same (bfloat16-rounded) inputs."""
    out_bool = op in ("Less", "IsNaN")
    rounded = lambda v: run_cpu(bf16_model("Identity", 1, [2, 5]), {"x0": v})[0]  # noqa: E731
    feeds = {f"x{i}": rounded(data([2, 5], np.float32, lo, hi, seed=i)) for i in range(n)}
    got = run_mlx(bf16_model(op, n, [2, 5], out_bool=out_bool), feeds)[0]
    want = run_cpu(single_op_model(op, feeds, out_dtypes=[B] if out_bool else None), feeds)[0]
    if out_bool:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2)
