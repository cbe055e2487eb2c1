"""Parity tests of the shape family (src/ops/shape.c): every case runs on the MLX EP in strict
mode and on ORT's CPU EP. Shape-like inputs are fed both as initializers (host-known) and as graph
inputs (evaluated at run time); data inputs also run with symbolic dims."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper

from parity import rng_values, NP_TO_ONNX, args_model, assert_parity, check_args as check, make_model, normal_data as data, feeds_model, run_mlx

I64_MAX = np.iinfo(np.int64).max
I64_MIN = np.iinfo(np.int64).min


DTYPES = [np.float32, np.float16, np.int64, np.bool_]
KINDS = ["init", "feed"]


# ---- Reshape ------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape", [[4, -1], [0, -1], [-1], [2, 0, 2, 2], [1, 24, 1]])
def test_reshape(dtype, kind, shape):
    check("Reshape", [("x", data((2, 3, 4), dtype), "feed"), ("s", np.array(shape, np.int64), kind)])


@pytest.mark.parametrize("kind", KINDS)
def test_reshape_dynamic(kind):
    check("Reshape", [("x", data((5, 4)), "feed"), ("s", np.array([-1, 2, 2], np.int64), kind)], dynamic=True)


def _reshape_to_scalar():
    check("Reshape", [("x", data((1, 1)), "feed"), ("s", np.zeros(0, np.int64), "init")])
    check("Tile", [("x", np.array(2.0, np.float32), "feed"), ("r", np.zeros(0, np.int64), "init")])


def test_reshape_to_scalar_empty_initializer():
    """Empty initializers once crashed plan creation; a child process keeps a crash from ending
    the whole run."""
    here = os.path.dirname(os.path.abspath(__file__))
    paths = [here, os.path.join(os.path.dirname(here), "python")]
    code = f"import sys; sys.path[:0] = {paths!r}; import test_ops_shape as t; t._reshape_to_scalar()"
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=here)
    assert child.returncode == 0, f"exit {child.returncode}: {child.stderr[-2000:]}"


@pytest.mark.parametrize("shape,allowzero", [([3, 0], 1), ([-1, 0], 0), ([0, 3], 0)])
def test_reshape_empty(shape, allowzero):
    check("Reshape", [("x", np.zeros((0, 3), np.float32), "feed"), ("s", np.array(shape, np.int64), "init")],
          attrs={"allowzero": allowzero})


@pytest.mark.parametrize("opset", [5, 13, 14, 19, 21, 23, 24, 25])
def test_reshape_opsets(opset):
    check("Reshape", [("x", data((2, 3, 4)), "feed"), ("s", np.array([0, -1], np.int64), "init")], opset=opset)


# ---- Transpose ----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("perm", [None, [2, 0, 1], [0, 2, 1]])
def test_transpose(dtype, perm):
    check("Transpose", [("x", data((2, 3, 4), dtype), "feed")], attrs={"perm": perm} if perm else None)


def test_transpose_dynamic():
    check("Transpose", [("x", data((3, 5)), "feed")], dynamic=True)


# ---- Concat -------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat(dtype, axis):
    a, b = data((2, 3, 4), dtype, 1), data((2, 3, 4), dtype, 2)
    check("Concat", [("a", a, "feed"), ("b", b, "init"), ("c", a, "feed")], attrs={"axis": axis})


def test_concat_empty_part():
    check("Concat", [("a", data((2, 3)), "feed"), ("b", np.zeros((2, 0), np.float32), "feed")], attrs={"axis": 1})


def test_concat_dynamic():
    check("Concat", [("a", data((2, 3)), "feed"), ("b", data((4, 3)), "feed")], attrs={"axis": 0}, dynamic=True)


# Concatenations of at least 16 KiB on a CPU scope are one task of the EP's (EpCpuConcat,
# src/mlx/bridge_cpu_concat.cpp), its rows shared with the pool's helpers from 64 KiB: bytes copied
# as they are, so compared exactly. Shapes: a middle axis, an empty part, the last axis with one
# element from a part, many rows of few bytes.
BIG_CONCATS = [((64, 40, 3), (64, 7, 3), 1), ((200, 100), (0, 100), 0), ((5, 12, 300), (5, 12, 1), -1),
               ((3000, 8), (3000, 8), 1)]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int64, np.uint8, np.bool_])
@pytest.mark.parametrize("a_shape,b_shape,axis", BIG_CONCATS)
def test_concat_large(dtype, a_shape, b_shape, axis):
    a, b = data(a_shape, dtype, 1), data(b_shape, dtype, 2)
    model, feeds = args_model("Concat", [("a", a, "feed"), ("b", b, "init"), ("c", a, "feed")], attrs={"axis": axis})
    assert_parity(model, feeds, rtol=0, atol=0, options={"device": "cpu"})


def concat_of_views_model():
    """Concat of transposed parts (the task joins their sources along the permuted axis), of a
    broadcast part, and of two convolutions' channels-last outputs (squeezenet's fire module)."""
    rng = np.random.default_rng(5)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"]),
             helper.make_node("Conv", ["x", "w3"], ["c3"], pads=[1, 1, 1, 1]),
             helper.make_node("Concat", ["c1", "c3"], ["fire"], axis=1),
             helper.make_node("Relu", ["fire"], ["y0"]),
             helper.make_node("Transpose", ["t"], ["ta"], perm=[0, 2, 1]),
             helper.make_node("Transpose", ["u"], ["ua"], perm=[0, 2, 1]),
             helper.make_node("Expand", ["row", "shape"], ["e"]),
             helper.make_node("Concat", ["ta", "ua", "e"], ["y1"], axis=2)]
    inits = {"w1": (rng.standard_normal((24, 8, 1, 1)) * 0.3).astype(np.float32),
             "w3": (rng.standard_normal((40, 8, 3, 3)) * 0.2).astype(np.float32),
             "row": rng.standard_normal((1, 1, 9)).astype(np.float32),
             "shape": np.array([6, 50, 9], np.int64)}
    feeds = {"x": rng.standard_normal((2, 8, 21, 17)).astype(np.float32),
             "t": rng.standard_normal((6, 70, 50)).astype(np.float32),
             "u": rng.standard_normal((6, 33, 50)).astype(np.float32)}
    model = make_model(nodes, [(k, TensorProto.FLOAT, list(v.shape)) for k, v in feeds.items()],
                       [("y0", TensorProto.FLOAT, None), ("y1", TensorProto.FLOAT, None)], inits.items())
    return model, feeds


def test_concat_of_views():
    assert_parity(*concat_of_views_model(), rtol=1e-5, atol=1e-5, options={"device": "cpu"})


@pytest.mark.parametrize("switch", ["1", "0"])
def test_concat_task_runs(switch):
    """Which path ran: the task for both Concats, or MLX's Concatenate (ORT_EP_MLX_CPU_CONCAT=0)."""
    import re
    from parity import cpu_model_probe, histogram_probe
    _, programs = histogram_probe(cpu_model_probe("test_ops_shape", "concat_of_views_model"),
                                  ORT_EP_MLX_CPU_CONCAT=switch)
    assert programs, programs

    def count(op):  # over every program (ORT's optimizers may split the graph into two clusters)
        return sum(int(n) for program in programs for n in re.findall(rf" {op}=(\d+)", program))
    assert (count("EpCpuConcat"), count("Concatenate")) == ((2, 0) if switch == "1" else (0, 2)), programs


# ---- Slice --------------------------------------------------------------------------------------

SLICES = [
    ([0, 1], [2, 3], None, None),
    ([1], [I64_MAX], [1], None),
    ([-1], [I64_MIN], [2], [-1]),
    ([I64_MAX], [I64_MIN], [-1], [-2]),
    ([-100], [100], [0], [1]),
    ([3, 10], [-100, 0], [0, 2], [-1, -3]),
    ([0, 0, 0], [2, 5, 6], [0, 1, 2], [2, 2, 4]),
    ([2], [1], [1], [1]),
    ([4], [0], [1], [-2]),
    ([0], [6], [-1], [I64_MAX]),
    ([5], [-7], [-1], [I64_MIN]),
]


@pytest.mark.parametrize("starts,ends,axes,steps", SLICES)
@pytest.mark.parametrize("kind", KINDS)
def test_slice(starts, ends, axes, steps, kind):
    args = [("x", data((3, 5, 6)), "feed"), ("st", np.array(starts, np.int64), kind),
            ("en", np.array(ends, np.int64), kind)]
    args.append(("ax", np.array(axes, np.int64), kind) if axes is not None else None)
    args.append(("sp", np.array(steps, np.int64), kind) if steps is not None else None)
    while args[-1] is None:
        args.pop()
    check("Slice", args)


@pytest.mark.parametrize("dtype", DTYPES)
def test_slice_dtypes_int32_indices(dtype):
    check("Slice", [("x", data((4, 6), dtype), "feed"), ("st", np.array([1, -1], np.int32), "init"),
                    ("en", np.array([4, 0], np.int32), "init"), ("ax", np.array([0, 1], np.int32), "init"),
                    ("sp", np.array([2, -2], np.int32), "init")])


def test_slice_dynamic():
    check("Slice", [("x", data((7, 4)), "feed"), ("st", np.array([1], np.int64), "init"),
                    ("en", np.array([-1], np.int64), "init")], dynamic=True)


def test_slice_opset1():
    check("Slice", [("x", data((4, 6)), "feed")], attrs={"starts": [1, -4], "ends": [1000, -1], "axes": [0, 1]}, opset=9)


# ---- Squeeze / Unsqueeze / Flatten -------------------------------------------------------------

@pytest.mark.parametrize("axes", [None, [0], [-1], [0, 3]])
@pytest.mark.parametrize("opset", [11, 13, 21])
def test_squeeze(axes, opset):
    x = data((1, 3, 4, 1))
    if opset < 13:
        check("Squeeze", [("x", x, "feed")], attrs={"axes": axes} if axes else None, opset=opset)
    else:
        args = [("x", x, "feed")] + ([("a", np.array(axes, np.int64), "init")] if axes else [])
        check("Squeeze", args, opset=opset)


@pytest.mark.parametrize("dtype", DTYPES)
def test_squeeze_feed_axes(dtype):
    check("Squeeze", [("x", data((1, 3, 1), dtype), "feed"), ("a", np.array([2], np.int64), "feed")])


@pytest.mark.parametrize("axes", [[0], [-1], [1, 3], [-4, 1], [3, 0]])
@pytest.mark.parametrize("form", ["attr", "init", "feed"])
def test_unsqueeze(axes, form):
    x = data((3, 4))
    if form == "attr":
        check("Unsqueeze", [("x", x, "feed")], attrs={"axes": axes}, opset=11)
    else:
        check("Unsqueeze", [("x", x, "feed"), ("a", np.array(axes, np.int64), form)], opset=13)


def test_unsqueeze_scalar():
    check("Unsqueeze", [("x", np.array(3.0, np.float32), "feed"), ("a", np.array([0], np.int64), "init")])


@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1, -3])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_flatten(axis, dtype):
    check("Flatten", [("x", data((2, 3, 4), dtype), "feed")], attrs={"axis": axis})


def test_flatten_dynamic():
    check("Flatten", [("x", data((2, 3, 4)), "feed")], attrs={"axis": 2}, dynamic=True)


# ---- Expand / Tile ------------------------------------------------------------------------------

@pytest.mark.parametrize("xshape,shape", [((3, 1), [2, 1, 4]), ((2, 3, 4), [3, 1]), ((1,), [2, 2]),
                                          ((3, 1), [3, 0]), ((2, 1, 4), [1, 1, 5, 1]), ((), [2, 3])])
@pytest.mark.parametrize("kind", KINDS)
def test_expand(xshape, shape, kind):
    check("Expand", [("x", data(xshape), "feed"), ("s", np.array(shape, np.int64), kind)])


@pytest.mark.parametrize("dtype", DTYPES)
def test_expand_dtypes(dtype):
    check("Expand", [("x", data((1, 4), dtype), "feed"), ("s", np.array([3, 4], np.int64), "init")], dynamic=True)


@pytest.mark.parametrize("reps", [[1, 1], [2, 3], [0, 2], [3, 1]])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
def test_tile(reps, kind, dtype):
    check("Tile", [("x", data((2, 3), dtype), "feed"), ("r", np.array(reps, np.int64), kind)])


# ---- Identity / Shape / Size / Constant --------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES + [np.uint8, np.int32])
def test_identity(dtype):
    check("Identity", [("x", data((2, 3), dtype), "feed")])


@pytest.mark.parametrize("start,end", [(None, None), (1, None), (None, -1), (-2, None), (-10, 10), (2, 1)])
def test_shape(start, end):
    attrs = {k: v for k, v in (("start", start), ("end", end)) if v is not None}
    check("Shape", [("x", data((2, 3, 4)), "feed")], attrs=attrs, out_dtypes=[TensorProto.INT64], dynamic=True)


@pytest.mark.parametrize("opset", [1, 13, 15, 19, 21, 23, 24, 25])
def test_shape_opsets(opset):
    check("Shape", [("x", data((2, 3, 4)), "feed")], attrs={"start": 1} if opset >= 15 else None,
          out_dtypes=[TensorProto.INT64], opset=opset)


@pytest.mark.parametrize("op", ["Squeeze", "Unsqueeze", "Flatten", "Identity", "Transpose", "Size"])
@pytest.mark.parametrize("opset", [13, 21, 23, 24, 25])
def test_opsets(op, opset):
    x = data((1, 3, 1))
    args = [("x", x, "feed")] + ([("a", np.array([0], np.int64), "init")] if op in ("Squeeze", "Unsqueeze") else [])
    check(op, args, opset=opset, out_dtypes=[TensorProto.INT64] if op == "Size" else None)


def test_shape_scalar_and_empty():
    check("Shape", [("x", np.array(1.0, np.float32), "feed")], out_dtypes=[TensorProto.INT64])
    check("Shape", [("x", np.zeros((0, 2), np.float32), "feed")], out_dtypes=[TensorProto.INT64])


@pytest.mark.parametrize("shape", [(2, 3, 4), (), (0, 5)])
def test_size(shape):
    check("Size", [("x", data(shape), "feed")], out_dtypes=[TensorProto.INT64], dynamic=True)


CONSTANTS = [
    ("value", helper.make_tensor("v", TensorProto.FLOAT, [2, 2], [1.0, 2.0, 3.0, 4.0]), TensorProto.FLOAT),
    ("value", helper.make_tensor("v", TensorProto.INT64, [3], [5, -6, 7]), TensorProto.INT64),
    ("value_float", 2.5, TensorProto.FLOAT),
    ("value_floats", [1.5, -2.5], TensorProto.FLOAT),
    ("value_int", 7, TensorProto.INT64),
    ("value_ints", [1, 2, 3], TensorProto.INT64),
]


@pytest.mark.parametrize("attr,value,dtype", CONSTANTS)
def test_constant(attr, value, dtype):
    # The constant feeds a Concat so that some node runs on the EP even if ORT folds the Constant.
    const = helper.make_node("Constant", [], ["k"], **{attr: value})
    flat = helper.make_node("Reshape", ["k", "minus1"], ["kf"])
    cat = helper.make_node("Concat", ["x", "kf"], ["y"], axis=0)
    x = data((3,), np.float32 if dtype == TensorProto.FLOAT else np.int64)
    model = make_model([const, flat, cat], [("x", dtype, [3])], [("y", dtype, None)],
                       {"minus1": np.array([-1], np.int64)}.items())
    assert_parity(model, {"x": x})


# ---- Split --------------------------------------------------------------------------------------

@pytest.mark.parametrize("split,axis", [([2, 4], 1), ([1, 0, 5], -1), ([6], 1)])
@pytest.mark.parametrize("kind", KINDS)
def test_split_input(split, axis, kind):
    check("Split", [("x", data((2, 6)), "feed"), ("s", np.array(split, np.int64), kind)],
          attrs={"axis": axis}, n_out=len(split))


@pytest.mark.parametrize("dtype", DTYPES)
def test_split_attr_opset11(dtype):
    check("Split", [("x", data((6, 2), dtype), "feed")], attrs={"axis": 0, "split": [1, 2, 3]}, n_out=3, opset=11)


@pytest.mark.parametrize("n,dim", [(2, 7), (3, 7), (4, 7), (7, 7), (3, 6)])
def test_split_num_outputs(n, dim):
    check("Split", [("x", data((2, dim)), "feed")], attrs={"axis": 1, "num_outputs": n}, n_out=n, opset=18)


@pytest.mark.parametrize("opset", [10, 11, 13, 18])
def test_split_opsets(opset):
    attrs = {"axis": -1}
    if opset < 13:
        attrs["split"] = [1, 3]
    args = [("x", data((2, 4)), "feed")] + ([("s", np.array([1, 3], np.int64), "init")] if opset >= 13 else [])
    check("Split", args, attrs=attrs, n_out=2, opset=opset)


def test_split_equal_dynamic():
    check("Split", [("x", data((6, 3)), "feed")], attrs={"axis": 0}, n_out=3, opset=13, dynamic=True)


# ---- Pad ----------------------------------------------------------------------------------------

PADS = [[0, 1, 2, 0], [1, 1, 1, 1], [-1, 2, 0, -2], [2, -1, -1, 1], [0, 0, 0, 0], [-1, -1, -1, -1]]


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads", PADS)
@pytest.mark.parametrize("kind", KINDS)
def test_pad_modes(mode, pads, kind):
    check("Pad", [("x", data((4, 5)), "feed"), ("p", np.array(pads, np.int64), kind)], attrs={"mode": mode})


@pytest.mark.parametrize("dtype", DTYPES)
def test_pad_constant_value(dtype):
    x = data((2, 3), dtype)
    check("Pad", [("x", x, "feed"), ("p", np.array([1, 0, 0, 2], np.int64), "init"),
                  ("v", np.array(1, x.dtype), "init")])


def test_pad_constant_value_feed():
    check("Pad", [("x", data((2, 3)), "feed"), ("p", np.array([1, 0, 0, 2], np.int64), "feed"),
                  ("v", np.array(-3.5, np.float32), "feed")])


@pytest.mark.parametrize("axes", [[1], [-1], [0, 2]])
@pytest.mark.parametrize("mode", ["constant", "edge", "wrap"])
def test_pad_axes(axes, mode):
    pads = np.array([1] * len(axes) + [2] * len(axes), np.int64)
    check("Pad", [("x", data((2, 3, 4)), "feed"), ("p", pads, "init"), None, ("a", np.array(axes, np.int64), "init")],
          attrs={"mode": mode})


@pytest.mark.parametrize("opset", [11, 13, 18, 19, 21, 23, 24, 25])
def test_pad_opsets(opset):
    check("Pad", [("x", data((2, 3)), "feed"), ("p", np.array([1, -1, 0, 2], np.int64), "init"),
                  ("v", np.array(0.5, np.float32), "init")], opset=opset)


# Crops that cross (one pad removes more than the other leaves): ORT's CPU EP keeps nothing of the
# input along that axis and fills dim + lo + hi positions with the constant (found by tools/fuzz's
# data pool: a Blackman window of size 0 padded by [-3, 3] in reflect mode); edge and reflect of an
# empty input give the empty output of that extent. A negative extent is refused (tests/hostile).
@pytest.mark.parametrize("mode,shape,pads", [
    ("constant", (2,), [-3, 2]), ("constant", (2,), [-3, 1]), ("constant", (2,), [2, -3]), ("constant", (2,), [-3, 4]),
    ("constant", (2, 3), [-5, 0, 3, 0]), ("constant", (2, 3), [-3, 1, 2, -1]), ("constant", (2, 3), [-3, 0, 2, -3]),
    ("reflect", (0,), [-3, 3]), ("edge", (0,), [-3, 3]), ("reflect", (2, 0), [-5, 0, 5, 0]),
    ("edge", (2, 0), [-5, 0, 4, 0]), ("constant", (3,), [-2**63, 2**63 - 1]), ("constant", (3,), [2**63 - 1, -2**63])])
def test_pad_crossing_crops(mode, shape, pads):
    check("Pad", [("x", data(shape), "feed"), ("p", np.array(pads, np.int64), "feed")], attrs={"mode": mode})


def test_pad_crossing_crops_value():
    check("Pad", [("x", data((2, 3)), "feed"), ("p", np.array([-3, 0, 2, 1], np.int64), "feed"),
                  ("v", np.array(2.5, np.float32), "feed")])


def test_pad_wrap_large():
    check("Pad", [("x", data((3,)), "feed"), ("p", np.array([7, 5], np.int64), "init")], attrs={"mode": "wrap"})


def test_pad_opset2_attrs():
    check("Pad", [("x", data((2, 3)), "feed")], attrs={"pads": [0, 1, 1, 0], "value": 2.0}, opset=10)


def test_pad_dynamic():
    check("Pad", [("x", data((2, 3)), "feed"), ("p", np.array([1, 1, 1, 1], np.int64), "init")],
          attrs={"mode": "reflect"}, dynamic=True)


# ---- DepthToSpace / SpaceToDepth ---------------------------------------------------------------

@pytest.mark.parametrize("mode", ["DCR", "CRD"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.uint8])
def test_depth_to_space(mode, dtype):
    check("DepthToSpace", [("x", data((2, 8, 3, 2), dtype), "feed")], attrs={"blocksize": 2, "mode": mode})


@pytest.mark.parametrize("bs", [1, 2, 3])
def test_space_to_depth(bs):
    check("SpaceToDepth", [("x", data((1, 2, 6, 6)), "feed")], attrs={"blocksize": bs})


# ---- Range / ConstantOfShape / EyeLike / Trilu -------------------------------------------------

RANGES = [(0, 10, 3), (10, 4, -2), (5, 5, 1), (3, 1, 1), (-7, 8, 4), (0, 100, 1)]


@pytest.mark.parametrize("start,limit,delta", RANGES)
@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.int16, np.float32, np.float64])
@pytest.mark.parametrize("kind", KINDS)
def test_range(start, limit, delta, dtype, kind):
    check("Range", [("a", np.array(start, dtype), kind), ("b", np.array(limit, dtype), kind),
                    ("c", np.array(delta, dtype), kind)], out_dtypes=[NP_TO_ONNX[np.dtype(dtype)]])


@pytest.mark.parametrize("start,limit,delta", [(0.1, 2.05, 0.3), (1.0, -1.0, -0.1), (0.0, 1.0, 0.07)])
def test_range_float_accumulation(start, limit, delta):
    check("Range", [("a", np.array(start, np.float32), "feed"), ("b", np.array(limit, np.float32), "feed"),
                    ("c", np.array(delta, np.float32), "feed")], out_dtypes=[TensorProto.FLOAT])


# limit - start rounds in float32 (1e8 + 2 is 1e8 there): ORT counts in double (found by the fuzzer's
# data pool), so these give 5 elements, not the 4 a float32 count gives
@pytest.mark.parametrize("start,limit,delta", [(-2.0, 1e8, 2.5e7), (-1.0, 16777216.0, 4194304.0), (2.0, 1000.0, 2.0)])
def test_range_float_count_in_double(start, limit, delta):
    check("Range", [("a", np.array(start, np.float32), "feed"), ("b", np.array(limit, np.float32), "feed"),
                    ("c", np.array(delta, np.float32), "feed")], out_dtypes=[TensorProto.FLOAT])


COS_VALUES = [None, helper.make_tensor("v", TensorProto.FLOAT, [1], [1.5]),
              helper.make_tensor("v", TensorProto.INT64, [1], [-3]),
              helper.make_tensor("v", TensorProto.BOOL, [1], [True]),
              helper.make_tensor("v", TensorProto.FLOAT16, [1], [np.float16(0.5).view(np.uint16)])]


@pytest.mark.parametrize("value", COS_VALUES)
@pytest.mark.parametrize("shape", [[2, 3], [], [0, 4], [9, 8]])
@pytest.mark.parametrize("kind", KINDS)
def test_constant_of_shape(value, shape, kind):
    dtype = value.data_type if value is not None else TensorProto.FLOAT
    check("ConstantOfShape", [("s", np.array(shape, np.int64), kind)], attrs={"value": value} if value else None,
          out_dtypes=[dtype])


@pytest.mark.parametrize("k", [0, 1, -2, 10])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.float16])
def test_eye_like(k, dtype):
    check("EyeLike", [("x", data((3, 5), dtype), "feed")], attrs={"k": k})


def test_eye_like_dtype_attr():
    check("EyeLike", [("x", data((4, 4)), "feed")], attrs={"dtype": TensorProto.INT32}, out_dtypes=[TensorProto.INT32])


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, 0, 2, -1, 100, -100])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
def test_trilu(upper, k, dtype):
    args = [("x", data((2, 3, 4), dtype), "feed")]
    if k is not None:
        args.append(("k", np.array(k, np.int64), "feed" if k == 2 else "init"))
    check("Trilu", args, attrs={"upper": upper})


# ---- chains ---------------------------------------------------------------------------------------

def test_shape_gather_concat_reshape():
    """The exporter pattern: a new shape built from Shape(x) feeds Reshape, with symbolic dims."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["n"], axis=0),
        helper.make_node("Concat", ["n", "tail"], ["ns"], axis=0),
        helper.make_node("Reshape", ["x", "ns"], ["y"]),
    ]
    inits = {"i0": np.array([0], np.int64), "tail": np.array([-1, 3], np.int64)}
    model = make_model(nodes, [("x", TensorProto.FLOAT, ["N", 4, 6])], [("y", TensorProto.FLOAT, None)], inits.items())
    for n in (1, 3):
        assert_parity(model, {"x": data((n, 4, 6))})


def test_shape_slice_unsqueeze_expand():
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Slice", ["s", "st", "en"], ["s01"]),
        helper.make_node("Concat", ["s01", "one"], ["ns"], axis=0),
        helper.make_node("Expand", ["b", "ns"], ["y"]),
    ]
    inits = {"st": np.array([0], np.int64), "en": np.array([2], np.int64), "one": np.array([5], np.int64)}
    model = make_model(nodes, [("x", TensorProto.FLOAT, ["N", "T", 7]), ("b", TensorProto.FLOAT, [1, 1, 5])],
                       [("y", TensorProto.FLOAT, None)], inits.items())
    assert_parity(model, {"x": data((2, 3, 7)), "b": data((1, 1, 5))})


# ---- Dropout ------------------------------------------------------------------------------------

RNG = np.random.default_rng(0)




@pytest.mark.parametrize("opset", [7, 10, 12, 13, 22])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("with_mask", [False, True])
def test_dropout(opset, dtype, with_mask):
    x = rng_values((3, 4), dtype)
    mask_t = TensorProto.BOOL if opset >= 10 else NP_TO_ONNX[np.dtype(dtype)]
    outs = [NP_TO_ONNX[np.dtype(dtype)]] + ([mask_t] if with_mask else [])
    assert_parity(*feeds_model("Dropout", {"x": x}, out_dtypes=outs, opset=opset))


@pytest.mark.parametrize("ratio", [0.0, 0.5])
def test_dropout_training_false(ratio):
    x = rng_values((2, 5))
    inits = {"r": np.array(ratio, np.float32), "t": np.array(False)}
    assert_parity(*feeds_model("Dropout", {"x": x}, inits, out_dtypes=[TensorProto.FLOAT, TensorProto.BOOL], opset=13))


def test_dropout_training_true_declined():
    x = rng_values((2, 5))
    model, feeds = feeds_model("Dropout", {"x": x}, {"r": np.array(0.5, np.float32), "t": np.array(True)},
                         out_dtypes=[TensorProto.FLOAT, TensorProto.BOOL], opset=13)
    with pytest.raises(Exception, match="fallback to CPU EP has been explicitly disabled"):
        run_mlx(model, feeds)


@pytest.mark.parametrize("starts,ends,steps", [([-1], [-4], [-1]), ([3], [1], [-1]), ([0], [1], [1]),
                                               ([-4611686018427387904], [4], [-2])])
def test_slice_of_an_empty_axis(starts, ends, steps):
    """A slice of a zero-length axis is empty whatever the starts, ends and step (a negative step's
    window [0, dim - 1] is empty too; found by the fuzzer, tools/fuzz seeds 486, 3316, 9998)."""
    check("Slice", [("x", data((0, 3, 4)), "feed"), ("st", np.array(starts, np.int64), "init"),
                    ("en", np.array(ends, np.int64), "init"), ("ax", np.array([0], np.int64), "init"),
                    ("sp", np.array(steps, np.int64), "init")])


# ---- ExpandDims (com.microsoft) ------------------------------------------------------------------

def _expand_dims_model(x, axis_const):
    node = helper.make_node("ExpandDims", ["x", "axis"], ["y"], domain="com.microsoft")
    ins = [("x", NP_TO_ONNX[x.dtype], list(x.shape))] + ([] if axis_const is not None else [("axis", TensorProto.INT32, [])])
    inits = [("axis", np.array(axis_const, np.int32))] if axis_const is not None else []
    return make_model([node], ins, [("y", NP_TO_ONNX[x.dtype], None)], inits, domains=[("com.microsoft", 1)])


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
@pytest.mark.parametrize("const", [True, False])
def test_expand_dims(axis, const):
    x = data((2, 3), dtype=np.float32) if axis % 2 else np.arange(6, dtype=np.int64).reshape(2, 3)
    model = _expand_dims_model(x, axis if const else None)
    feeds = {"x": x} if const else {"x": x, "axis": np.array(axis, np.int32)}
    got = assert_parity(model, feeds)[0]
    assert got.shape == np.expand_dims(x, axis).shape


def test_expand_dims_axis_out_of_range():
    x = np.ones((2, 3), np.float32)
    with pytest.raises(Exception, match=r"outside \[-3, 2\]"):
        run_mlx(_expand_dims_model(x, None), {"x": x, "axis": np.array(3, np.int32)})


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, -1, 2])
def test_contrib_trilu(upper, k):
    """com.microsoft Trilu: the same operator as ai.onnx Trilu 14."""
    x = data((2, 4, 5), dtype=np.float32)
    node = helper.make_node("Trilu", ["x"] + (["k"] if k is not None else []), ["y"], domain="com.microsoft", upper=upper)
    inits = [("k", np.array(k, np.int64))] if k is not None else []
    model = make_model([node], [("x", TensorProto.FLOAT, [2, 4, 5])], [("y", TensorProto.FLOAT, None)], inits,
                       domains=[("com.microsoft", 1)])
    assert_parity(model, {"x": x})


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32, np.float64])
@pytest.mark.parametrize("values", [(2, 11, None), (10, -3, -4), (0.5, 4.0, 0.75)])
def test_contrib_range(dtype, values):
    """com.microsoft Range: ai.onnx Range with delta optional (1 when absent)."""
    start, limit, delta = values
    if np.dtype(dtype).kind == "i" and any(isinstance(v, float) for v in values if v is not None):
        pytest.skip("integer Range of fractional values")
    names = ["a", "b"] + (["d"] if delta is not None else [])
    vals = [start, limit] + ([delta] if delta is not None else [])
    node = helper.make_node("Range", names, ["y"], domain="com.microsoft")
    ins = [(n, NP_TO_ONNX[np.dtype(dtype)], []) for n in names]
    model = make_model([node], ins, [("y", NP_TO_ONNX[np.dtype(dtype)], None)], domains=[("com.microsoft", 1)])
    got = assert_parity(model, {n: np.array(v, dtype) for n, v in zip(names, vals)})[0]
    assert got.shape == np.arange(start, limit, 1 if delta is None else delta).shape


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
@pytest.mark.parametrize("pads_2d", [False, True])
def test_contrib_pad(mode, pads_2d):
    """com.microsoft Pad: pads as an input of [2 * rank] or [1, 2 * rank] values, the value input."""
    x = data((2, 3, 4), dtype=np.float32)
    pads = np.array([0, 1, 2, 1, 0, 1], np.int64)
    if pads_2d:
        pads = pads.reshape(1, 6)
    names = ["x", "p"] + (["v"] if mode == "constant" else [])
    node = helper.make_node("Pad", names, ["y"], domain="com.microsoft", mode=mode)
    inits = [("p", pads)] + ([("v", np.array([1.5], np.float32))] if mode == "constant" else [])
    model = make_model([node], [("x", TensorProto.FLOAT, [2, 3, 4])], [("y", TensorProto.FLOAT, None)], inits,
                       domains=[("com.microsoft", 1)])
    assert_parity(model, {"x": x})


@pytest.mark.parametrize("x", [np.array([2.0, 1.0, 1.0, 3.0, 4.0, 3.0], np.float32), np.array([5, 5, 5], np.float32),
                               np.array([-0.5, 7.0, -0.5], np.float32), np.zeros(0, np.float32)])
def test_contrib_unique(x):
    """com.microsoft Unique: values in order of first occurrence, each element's index into them, counts."""
    node = helper.make_node("Unique", ["x"], ["y", "idx", "counts"], domain="com.microsoft")
    model = make_model([node], [("x", NP_TO_ONNX[x.dtype], [len(x)])],
                       [("y", NP_TO_ONNX[x.dtype], None), ("idx", TensorProto.INT64, None), ("counts", TensorProto.INT64, None)],
                       domains=[("com.microsoft", 1)])
    assert_parity(model, {"x": x})
