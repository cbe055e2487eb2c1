"""Parity of the reduction family (src/ops/reduction.c) against ORT's CPU EP: the Reduce* ops with
axes as attribute, constant input and runtime input, keepdims, noop_with_empty_axes, empty
reductions, ORT's saturating integer reductions; ArgMax/ArgMin, CumSum and TopK."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from parity import assert_parity, claim_report as declined_reason, make_model, onnx_type, single_op_model, uniform_data, args_model

I64 = TensorProto.INT64

REDUCE_OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]


def data(shape, dtype, lo=-3.0, hi=3.0, seed=0):
    return uniform_data(shape, dtype, lo, hi, seed)


def reduce_data(op, shape, dtype, seed=0):
    """Inputs in a range where every op is well defined (LogSum needs positive sums, Prod small values)."""
    if op == "ReduceLogSum":
        return data(shape, dtype, 1, 3, seed)
    if op == "ReduceProd":
        return data(shape, dtype, 0.5, 1.5, seed) if np.dtype(dtype).kind == "f" else data(shape, dtype, -2, 2, seed)
    return data(shape, dtype, -3, 3, seed)


def attr_opset(op):
    return 11 if op == "ReduceSum" else 13


# ---- Reduce* ------------------------------------------------------------------------------------

AXES_CASES = [([1], 1), ([-1, 0], 0), (None, 1), (None, 0), ([0, 2], 0), ([2, -1], 1)]


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.int64])
@pytest.mark.parametrize("axes,keepdims", AXES_CASES)
def test_reduce_axes_attribute(op, dtype, axes, keepdims):
    x = reduce_data(op, [3, 4, 5], dtype)
    attrs = {"keepdims": keepdims}
    if axes is not None:
        attrs["axes"] = axes
    assert_parity(single_op_model(op, {"x": x}, attrs=attrs, opset=attr_opset(op)), {"x": x})


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("axes,keepdims", [([1], 1), ([-1, 0], 0), ([0, 1, 2], 1)])
def test_reduce_axes_constant_input(op, dtype, axes, keepdims):
    if op == "ReduceLogSumExp" and dtype == np.float64:
        pytest.skip("declined: MLX's float64 exp is float32-accurate (test_reduce_logsumexp_f64_declined)")
    x = reduce_data(op, [3, 4, 5], dtype, seed=1)
    model = single_op_model(op, {"x": x}, initializers={"axes": np.array(axes, np.int64)},
                            attrs={"keepdims": keepdims}, opset=18)
    assert_parity(model, {"x": x})


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("axes", [[2], [0, -1], [1, 1]])
def test_reduce_axes_runtime_input(op, axes):
    x = reduce_data(op, [2, 3, 4], np.float32, seed=2)
    feeds = {"x": x, "axes": np.array(axes, np.int64)}
    assert_parity(single_op_model(op, feeds, attrs={"keepdims": 0}, opset=18), feeds)


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@pytest.mark.parametrize("noop", [0, 1])
def test_reduce_empty_axes(op, dtype, noop):
    """Empty axes: every axis, or (noop_with_empty_axes=1) the elementwise part only."""
    x = reduce_data(op, [2, 3], dtype, seed=3)
    model = single_op_model(op, {"x": x}, initializers={"axes": np.zeros([0], np.int64)},
                            attrs={"noop_with_empty_axes": noop}, opset=18)
    assert_parity(model, {"x": x})
    # absent axes input behaves the same
    assert_parity(single_op_model(op, {"x": x}, attrs={"noop_with_empty_axes": noop}, opset=18), {"x": x})


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@pytest.mark.parametrize("axes,keepdims", [([1], 1), ([1], 0), ([0], 1), ([0, 1, 2], 0), ([2], 0)])
def test_reduce_empty_input(op, dtype, axes, keepdims):
    """Reducing over zero elements gives ORT's identity (0, 1, -inf, INT_MIN, ...)."""
    x = np.zeros([2, 0, 3], dtype)
    model = single_op_model(op, {"x": x}, initializers={"axes": np.array(axes, np.int64)},
                            attrs={"keepdims": keepdims}, opset=18)
    assert_parity(model, {"x": x})


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_rank0(op):
    x = np.array(2.5 if op != "ReduceLogSum" else 1.5, np.float32)
    assert_parity(single_op_model(op, {"x": x}, opset=18), {"x": x})
    assert_parity(single_op_model(op, {"x": x}, attrs={"keepdims": 0}, opset=attr_opset(op)), {"x": x})


I32_MAX, I32_MIN = 2**31 - 1, -2**31

SATURATION_CASES = [
    ("ReduceSum", np.int32, [I32_MAX, 1, 5]),
    ("ReduceSum", np.int32, [-I32_MAX, -5]),
    ("ReduceSum", np.int64, [2**62, 2**62]),
    ("ReduceSum", np.int64, [-2**62, -2**62, -2**62]),
    ("ReduceProd", np.int32, [65536, 65536]),
    ("ReduceProd", np.int32, [-65536, 65536]),
    ("ReduceProd", np.int64, [2**32, 2**32]),
    ("ReduceMean", np.int32, [I32_MAX, I32_MAX, I32_MAX]),
    ("ReduceMean", np.int32, [-7, 0]),
    ("ReduceMean", np.int64, [2**62, 2**62, 2**62]),
    ("ReduceSumSquare", np.int32, [46341, 0]),
    ("ReduceL1", np.int32, [I32_MIN, 0]),
    ("ReduceL2", np.int32, [46341, 46341]),
    ("ReduceL2", np.int32, [2, 3]),
    ("ReduceLogSum", np.int32, [0, 0]),
    ("ReduceLogSum", np.int32, [-3, 1]),
    ("ReduceLogSum", np.int64, [20, 0]),
    ("ReduceLogSumExp", np.int32, [0] * 7 + [-1] * 3),
    ("ReduceLogSumExp", np.int32, [-5] * 7 + [-6] * 3),
    ("ReduceLogSumExp", np.int64, [1, 2, 4]),
    ("ReduceMax", np.int64, [2**53 + 1, 0]),
    ("ReduceMin", np.int64, [2**53 + 1, 2**60]),
]


@pytest.mark.parametrize("op,dtype,values", SATURATION_CASES)
def test_reduce_integer_like_ort(op, dtype, values):
    """ORT accumulates integer reductions in float64 and saturates; overflow must not wrap."""
    x = np.array([values], dtype)
    assert_parity(single_op_model(op, {"x": x}, initializers={"axes": np.array([1], np.int64)}, opset=18), {"x": x})


def test_reduce_logsumexp_f64_declined(tmp_path):
    x = data([2, 3], np.float64)
    report = declined_reason(single_op_model("ReduceLogSumExp", {"x": x}, opset=18), tmp_path)
    assert "declined ReduceLogSumExp" in report and "float64" in report


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.bool_])
def test_reduce_max_min_small_types(op, dtype):
    x = data([3, 4], dtype, -100, 100)
    model = single_op_model(op, {"x": x}, initializers={"axes": np.array([1], np.int64)}, opset=20)
    assert_parity(model, {"x": x})
    assert_parity(single_op_model(op, {"x": x}, opset=20), {"x": x})


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceL2", "ReduceLogSumExp"])
def test_reduce_symbolic_dims(op):
    """Symbolic input dims: one plan serves several shapes."""
    node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=0)
    model = make_model([node], [("x", TensorProto.FLOAT, ["n", "m", 4])], [("y", TensorProto.FLOAT, None)],
                       initializers={"axes": np.array([1], np.int64)}, opset=18)
    for shape in ([2, 3, 4], [5, 1, 4], [1, 7, 4]):
        x = reduce_data(op, shape, np.float32, seed=sum(shape))
        assert_parity(model, {"x": x})


# ---- ArgMax / ArgMin ----------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int32, np.int64, np.int8, np.uint8])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("last", [0, 1])
def test_argmax_argmin(op, dtype, axis, keepdims, last):
    # few distinct values, so that ties are common and select_last_index matters
    x = data([4, 5, 6], dtype, 0, 3, seed=4)
    model = single_op_model(op, {"x": x}, attrs={"axis": axis, "keepdims": keepdims, "select_last_index": last},
                            out_dtypes=[I64], opset=13)
    assert_parity(model, {"x": x})


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_argmax_opset11_and_empty(op):
    x = data([3, 4], np.float32, seed=5)
    assert_parity(single_op_model(op, {"x": x}, attrs={"axis": 1}, out_dtypes=[I64], opset=11), {"x": x})
    e = np.zeros([2, 0], np.float32)  # the reduced axis (0) is not empty
    assert_parity(single_op_model(op, {"x": e}, attrs={"axis": 0}, out_dtypes=[I64], opset=13), {"x": e})


# ---- CumSum -------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
def test_cumsum(dtype, axis, exclusive, reverse):
    x = data([3, 4, 5], dtype, -5, 5, seed=6)
    model = single_op_model("CumSum", {"x": x}, initializers={"axis": np.array(axis, np.int32)},
                            attrs={"exclusive": exclusive, "reverse": reverse}, opset=14)
    assert_parity(model, {"x": x})


def test_cumsum_runtime_axis_and_wrap():
    x = np.array([[2**31 - 1, 1, 5], [3, 4, -2**31]], np.int32)
    feeds = {"x": x, "axis": np.array(1, np.int64)}
    assert_parity(single_op_model("CumSum", feeds, opset=14), feeds)
    feeds = {"x": x, "axis": np.array(-2, np.int64)}
    assert_parity(single_op_model("CumSum", feeds, opset=11, attrs={"reverse": 1}), feeds)


def test_cumsum_empty():
    x = np.zeros([0, 3], np.float32)
    assert_parity(single_op_model("CumSum", {"x": x}, initializers={"axis": np.array(0, np.int64)}, opset=14),
                  {"x": x})


# ---- TopK ---------------------------------------------------------------------------------------

def topk_model(x, k, attrs, opset=11, runtime_k=False):
    feeds = {"x": x}
    kk = np.array([k], np.int64)
    if runtime_k:
        feeds["k"] = kk
        model = single_op_model("TopK", feeds, n_outputs=2, out_dtypes=[onnx_type(x), I64], attrs=attrs, opset=opset)
    else:
        model = single_op_model("TopK", feeds, n_outputs=2, out_dtypes=[onnx_type(x), I64], attrs=attrs,
                                opset=opset, initializers={"k": kk})
    return model, feeds


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int32, np.int64, np.int8, np.uint8])
@pytest.mark.parametrize("axis", [0, -1])
@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("k", [0, 1, 3, 6])
def test_topk(dtype, axis, largest, k):
    x = data([6, 7], dtype, 0, 4, seed=7)  # many ties: ORT returns the lower index first
    model, feeds = topk_model(x, k, {"axis": axis, "largest": largest})
    assert_parity(model, feeds)


@pytest.mark.parametrize("opset", [10, 11, 24])
def test_topk_runtime_k(opset):
    x = data([3, 50], np.float32, seed=8)
    model, feeds = topk_model(x, 5, {}, opset=opset, runtime_k=True)
    assert_parity(model, feeds)


def test_topk_opset1_and_signed_zero():
    x = data([4, 9], np.float32, seed=9)
    model = single_op_model("TopK", {"x": x}, n_outputs=2, out_dtypes=[TensorProto.FLOAT, I64],
                            attrs={"k": 3}, opset=1)
    assert_parity(model, {"x": x})
    z = np.array([[0.0, -0.0, 0.0, -0.0, 1.0]], np.float32)
    model, feeds = topk_model(z, 5, {})
    assert_parity(model, feeds)


def test_topk_unsorted(tmp_path):
    x = data([3, 8], np.float32, seed=10)
    model, feeds = topk_model(x, 1, {"sorted": 0})
    assert_parity(model, feeds)
    model, _ = topk_model(x, 3, {"sorted": 0})
    report = declined_reason(model, tmp_path)
    assert "TopK" in report and "sorted=0" in report


# ---- bfloat16 (ORT's CPU EP has no bfloat16 kernels here: numpy reference) ----------------------

def bf16_round(a):
    import ml_dtypes
    return np.asarray(a, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


def bf16_model(op, n_in, inits=None, opset=21, n_out=1, **attrs):
    """x (float32) -> Cast(bfloat16) -> op -> Cast(float32); the casts run on MLX too."""
    nodes = [helper.make_node("Cast", [f"x{i}"], [f"b{i}"], to=TensorProto.BFLOAT16) for i in range(n_in)]
    outs = ["yb"] + [f"y{i}" for i in range(1, n_out)]
    nodes.append(helper.make_node(op, [f"b{i}" for i in range(n_in)] + list(inits or {}), outs, **attrs))
    nodes.append(helper.make_node("Cast", ["yb"], ["y0"], to=TensorProto.FLOAT))
    ins = [(f"x{i}", TensorProto.FLOAT, None) for i in range(n_in)]
    out_info = [("y0", TensorProto.FLOAT, None)] + [(f"y{i}", I64, None) for i in range(1, n_out)]
    return make_model(nodes, ins, out_info, initializers=inits or {}, opset=opset)


def test_bfloat16_against_numpy():
    from parity import run_mlx
    x = bf16_round(data([3, 8], np.float32, seed=11))
    (got,) = run_mlx(bf16_model("ReduceSum", 1, {"axes": np.array([1], np.int64)}), {"x0": x})
    np.testing.assert_array_equal(got, bf16_round(x.sum(1, keepdims=True)))
    (got,) = run_mlx(bf16_model("ReduceMax", 1, opset=18), {"x0": x})
    np.testing.assert_array_equal(got, x.max(keepdims=True))
    (got,) = run_mlx(bf16_model("CumSum", 1, {"axis": np.array(1, np.int64)}), {"x0": x})
    np.testing.assert_array_equal(got, bf16_round(np.cumsum(x, 1)))
    got, idx = run_mlx(bf16_model("TopK", 1, {"k": np.array([3], np.int64)}, opset=24, n_out=2), {"x0": x})
    want_idx = np.argsort(-x, axis=1, kind="stable")[:, :3]
    np.testing.assert_array_equal(idx, want_idx)
    np.testing.assert_array_equal(got, np.take_along_axis(x, want_idx, 1))


# ---- CumProd ------------------------------------------------------------------------------------

def cumprod_data(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(1, 4, size=shape).astype(dtype)
    return rng.uniform(0.5, 1.5, shape).astype(dtype) * rng.choice([-1, 1], shape).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int32, np.int64, np.uint32, np.uint64])
@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
def test_cumprod(dtype, exclusive, reverse):
    x = cumprod_data((3, 4, 5), dtype)
    for axis in (0, 1, -1):
        model, feeds = args_model("CumProd", [("x", x, "feed"), ("a", np.array(axis, np.int64), "init")],
                                  attrs={"exclusive": exclusive, "reverse": reverse}, opset=26)
        assert_parity(model, feeds, rtol=1e-2 if dtype == np.float16 else None)


@pytest.mark.parametrize("axis_dtype", [np.int32, np.int64])
def test_cumprod_runtime_axis(axis_dtype):
    x = cumprod_data((4, 6), np.float32)
    model, feeds = args_model("CumProd", [("x", x, "feed"), ("a", np.array([1], axis_dtype), "feed")], opset=26)
    assert_parity(model, feeds)


def test_cumprod_wraps_and_long_axis():
    x = np.full((70,), 3, np.int32)
    model, feeds = args_model("CumProd", [("x", x, "feed"), ("a", np.array(0, np.int64), "init")], opset=26)
    assert_parity(model, feeds)
    x = cumprod_data((2, 200), np.float32, seed=3)
    model, feeds = args_model("CumProd", [("x", x, "feed"), ("a", np.array(1, np.int64), "init")],
                              attrs={"reverse": 1, "exclusive": 1}, opset=26)
    assert_parity(model, feeds, rtol=1e-5)


def test_cumprod_empty_and_scalarlike():
    for shape in [(0, 3), (1,), (2, 1)]:
        x = cumprod_data(shape, np.float32)
        model, feeds = args_model("CumProd", [("x", x, "feed"), ("a", np.array(-1, np.int64), "init")], opset=26)
        assert_parity(model, feeds)


# ---- attribute values other than 0 and 1, read as ORT reads them (found by tools/fuzz's attrs pool)

@pytest.mark.parametrize("keepdims", [2, -1, 2**31])
@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ArgMax"])
def test_keepdims_other_than_one_reduces(op, keepdims):
    """ORT keeps the reduced dims only for keepdims == 1; any other value reduces them away."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    attrs = {"keepdims": keepdims, **({"axis": 1} if op == "ArgMax" else {})}
    model = single_op_model(op, {"x": x}, attrs=attrs, out_dtypes=[TensorProto.INT64] if op == "ArgMax" else None)
    assert_parity(model, {"x": x})


@pytest.mark.parametrize("sorted_", [2, -1])
def test_topk_sorted_other_than_one_is_declined(tmp_path, sorted_):
    """ORT's TopK sorts only for sorted == 1; other values leave its heap order, which cannot be matched."""
    x = np.array([1, 5, 3, 4, 2], np.float32)
    node = helper.make_node("TopK", ["x", "k"], ["y", "i"], sorted=sorted_)
    model = make_model([node], [("x", TensorProto.FLOAT, [5]), ("k", TensorProto.INT64, [1])],
                       [("y", TensorProto.FLOAT, None), ("i", TensorProto.INT64, None)], [("k", np.array([3], np.int64))])
    assert "sorted=0 with K > 1" in declined_reason(model, tmp_path)
