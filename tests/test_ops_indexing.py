"""Parity tests of the indexing family (src/ops/indexing.c): Gather*, Scatter*, OneHot and
Compress on the MLX EP in strict mode against ORT's CPU EP, with index inputs fed both as
initializers and as graph inputs, negative indices, and symbolic dims."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from parity import (NP_TO_ONNX, args_model as build, assert_parity, check_args as check, make_model, mlx_ep,
                    normal_data as data, ort, rng_values, run_cpu, run_mlx, feeds_model)


def indices(shape, dim, dtype=np.int64, seed=1, negative=True):
    """Valid indices into an axis of size dim, half of them negative when asked."""
    rng = np.random.default_rng(seed)
    i = rng.integers(0, dim, size=shape)
    if negative:
        i = np.where(rng.random(shape) > 0.5, i - dim, i)
    return i.astype(dtype)


DTYPES = [np.float32, np.float16, np.int64, np.bool_]
KINDS = ["init", "feed"]


# ---- Gather -------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("itype", [np.int32, np.int64])
@pytest.mark.parametrize("kind", KINDS)
def test_gather(dtype, axis, itype, kind):
    x = data((3, 4, 5), dtype)
    idx = indices((2, 3), x.shape[axis], itype)
    check("Gather", [("x", x, "feed"), ("i", idx, kind)], attrs={"axis": axis})


@pytest.mark.parametrize("idx", [np.array(-1, np.int64), np.array(2, np.int64), np.zeros((0,), np.int64),
                                 np.array([[0]], np.int64)])
def test_gather_shapes(idx):
    check("Gather", [("x", data((4, 3)), "feed"), ("i", idx, "feed")], attrs={"axis": 0})


def test_gather_dynamic():
    check("Gather", [("x", data((6, 3)), "feed"), ("i", indices((4,), 6), "feed")], attrs={"axis": 0}, dynamic=True)


def test_gather_opset11():
    check("Gather", [("x", data((6, 3)), "feed"), ("i", indices((4,), 3), "init")], attrs={"axis": 1}, opset=11)


@pytest.mark.parametrize("opset", [1, 11, 13, 21])
def test_gather_opsets(opset):
    check("Gather", [("x", data((6, 3)), "feed"), ("i", indices((4,), 6, negative=opset >= 11), "init")], opset=opset)


@pytest.mark.parametrize("op,attrs", [("Gather", {"axis": 0}), ("GatherElements", {"axis": 0})])
def test_out_of_range_indices_do_not_crash(op, attrs):
    """ORT rejects these, and so does the EP: no crash, no read outside the array, ORT's rule."""
    x = data((4, 3))
    idx = np.array([[100, -100, 3]], np.int64)
    model, feeds = build(op, [("x", x, "feed"), ("i", idx, "feed")], attrs=attrs)
    with pytest.raises(Exception, match=r"index 100 out of range \[-4, 4\)"):
        run_mlx(model, feeds)


def _shape_arith_model(index, axis=0, to=TensorProto.INT32):
    """Shape(x) -> Gather(index) -> Cast(to), beside a Gather of a constant 2-D int64 table along
    `axis`: integers known when the MLX graph is built, which the EP computes on the host."""
    table = helper.make_tensor("table", TensorProto.INT64, [2, 3], [1, 2, 3, 4, 5, 6])
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "i"], ["g"], axis=0),
             helper.make_node("Cast", ["g"], ["y0"], to=to),
             helper.make_node("Constant", [], ["t"], value=table),
             helper.make_node("Gather", ["t", "j"], ["y1"], axis=axis)]
    j = np.array([[-1, 0]], np.int64)
    return make_model(nodes, [("x", TensorProto.FLOAT, ["b", "t"])],
                      [("y0", to, None), ("y1", TensorProto.INT64, None)],
                      [("i", np.asarray(index, np.int64)), ("j", j)]), {"x": data((3, 5))}


def _unoptimized_mlx_runs(model, feeds, runs=3):
    """Runs on the MLX EP (strict) with ORT's graph optimizations off, so that ORT does not fold the
    constant table's Gather before the EP sees it."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = mlx_ep.session(model, strict=True, sess_options=so)
    return [sess.run(None, feeds) for _ in range(runs)]


@pytest.mark.parametrize("index,axis,to", [(1, 0, TensorProto.INT32), (-2, 1, TensorProto.INT64),
                                           ([1, 0, -1], 1, TensorProto.INT32)])
def test_gather_of_known_integers(index, axis, to):
    """Gather and Cast of shape-derived and constant integers computed on the host: the same values
    as ORT's CPU EP, eager, traced and replayed."""
    model, feeds = _shape_arith_model(index, axis, to)
    want = run_cpu(model, feeds)
    for got in _unoptimized_mlx_runs(model, feeds):
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_array_equal(g, w)


def test_gather_of_known_integers_out_of_range():
    model, feeds = _shape_arith_model(5)
    with pytest.raises(Exception, match=r"index 5 out of range \[-2, 2\)"):
        _unoptimized_mlx_runs(model, feeds, runs=1)


# ---- GatherElements -----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("kind", KINDS)
def test_gather_elements(dtype, axis, kind):
    x = data((3, 4, 5), dtype)
    shape = list(x.shape)
    shape[axis] = 6
    check("GatherElements", [("x", x, "feed"), ("i", indices(shape, x.shape[axis]), kind)], attrs={"axis": axis})


@pytest.mark.parametrize("ishape,axis", [((2, 2), 0), ((2, 1), 1), ((1, 4), 0)])
def test_gather_elements_smaller(ishape, axis):
    x = data((3, 4))
    check("GatherElements", [("x", x, "feed"), ("i", indices(ishape, x.shape[axis], np.int32), "feed")],
          attrs={"axis": axis})


def test_gather_elements_dynamic():
    check("GatherElements", [("x", data((3, 4)), "feed"), ("i", indices((3, 2), 4), "feed")], attrs={"axis": 1},
          dynamic=True)


# ---- GatherND -----------------------------------------------------------------------------------

GATHER_ND = [
    ((4, 5), (3, 2), 0),
    ((4, 5), (3, 1), 0),
    ((4, 5, 6), (2, 2, 1), 0),
    ((4, 5), (2,), 0),
    ((2, 5, 6), (2, 1), 1),
    ((2, 5, 6), (2, 3, 2), 1),
    ((2, 3, 5, 6), (2, 3, 4, 1), 2),
]


@pytest.mark.parametrize("xshape,ishape,b", GATHER_ND)
@pytest.mark.parametrize("kind", KINDS)
def test_gather_nd(xshape, ishape, b, kind):
    x = data(xshape)
    m = ishape[-1]
    rng = np.random.default_rng(3)
    comps = [rng.integers(-xshape[b + k], xshape[b + k], size=ishape[:-1]) for k in range(m)]
    idx = np.stack(comps, axis=-1).astype(np.int64)
    check("GatherND", [("x", x, "feed"), ("i", idx, kind)], attrs={"batch_dims": b})


@pytest.mark.parametrize("dtype", DTYPES)
def test_gather_nd_dtypes(dtype):
    check("GatherND", [("x", data((3, 4), dtype), "feed"), ("i", np.array([[0, -1], [2, 1]], np.int64), "feed")],
          dynamic=True)


@pytest.mark.parametrize("xshape,idx,b", [((2, 0, 1, 3, 0), [[0, -1], [0, -1]], 1), ((2, 0), [0], 0),
                                          ((0, 0, 4, 0), [[0], [0], [0], [2**62]], 0), ((2, 1), np.zeros((0, 1, 1)), 1)])
def test_gather_nd_empty_result(xshape, idx, b):
    """An empty result reads nothing, so ORT answers it whatever the indices hold (an index into an
    axis of size 0, past the end, a batch dim that differs); so does the EP (found by tools/fuzz's
    data pool)."""
    check("GatherND", [("x", np.zeros(xshape, np.float32), "feed"), ("i", np.array(idx, np.int64), "feed")],
          attrs={"batch_dims": b})


# ---- ScatterElements ---------------------------------------------------------------------------

def unique_indices(shape, dim, axis, seed=2):
    """Indices without duplicates along axis (shape[axis] <= dim), some negative."""
    rng = np.random.default_rng(seed)
    out = np.empty(shape, np.int64)
    it = np.moveaxis(out, axis, -1)
    for pos in np.ndindex(it.shape[:-1]):
        perm = rng.permutation(dim)[: it.shape[-1]]
        it[pos] = np.where(rng.random(len(perm)) > 0.5, perm - dim, perm)
    return out


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
@pytest.mark.parametrize("kind", KINDS)
def test_scatter_elements_none(axis, dtype, kind):
    x = data((4, 5), dtype)
    shape = [2, 3]
    idx = unique_indices(shape, x.shape[axis], axis)
    check("ScatterElements", [("x", x, "feed"), ("i", idx, kind), ("u", data(shape, dtype, 5), "feed")],
          attrs={"axis": axis})


@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_scatter_elements_reduction(reduction, dtype):
    x = data((3, 4), dtype)
    idx = np.array([[0, 1, -1, 0], [0, 1, 2, 0], [2, -3, 0, 0]], np.int64)  # duplicates accumulate
    check("ScatterElements", [("x", x, "feed"), ("i", idx, "feed"), ("u", data((3, 4), dtype, 7), "feed")],
          attrs={"axis": 0, "reduction": reduction}, opset=18)


@pytest.mark.parametrize("op", ["ScatterElements", "ScatterND"])
@pytest.mark.parametrize("opset", [11, 13, 16, 18, 21])
def test_scatter_opsets(op, opset):
    idx = np.array([[1, 0, 2]], np.int64) if op == "ScatterElements" else np.array([[1], [0]], np.int64)
    upd = data((1, 3) if op == "ScatterElements" else (2, 3), seed=4)
    check(op, [("x", data((3, 3)), "feed"), ("i", idx, "init"), ("u", upd, "feed")], opset=opset)


def test_scatter_out_of_range_does_not_crash():
    model, feeds = build("ScatterND", [("x", data((3, 3)), "feed"), ("i", np.array([[7], [-9]], np.int64), "feed"),
                                       ("u", data((2, 3), seed=4), "feed")])
    with pytest.raises(Exception, match=r"index 7 out of range \[-3, 3\)"):
        run_mlx(model, feeds)


def test_scatter_elements_add_opset16():
    check("ScatterElements", [("x", data((3, 3)), "feed"), ("i", np.array([[1, 1, 1]], np.int64), "init"),
                              ("u", data((1, 3), seed=4), "feed")], attrs={"axis": 1, "reduction": "add"}, opset=16)


def test_scatter_elements_dynamic():
    check("ScatterElements", [("x", data((5, 3)), "feed"), ("i", unique_indices((2, 3), 5, 0), "feed"),
                              ("u", data((2, 3), seed=4), "feed")], attrs={"axis": 0}, dynamic=True)


# ---- ScatterND ----------------------------------------------------------------------------------

@pytest.mark.parametrize("xshape,ishape", [((4, 5), (3, 2)), ((4, 5), (2, 1)), ((4, 5, 6), (2, 2, 2)), ((4, 5), (2,))])
@pytest.mark.parametrize("kind", KINDS)
def test_scatter_nd_none(xshape, ishape, kind):
    x = data(xshape)
    m = ishape[-1]
    n = int(np.prod(ishape[:-1]))
    rng = np.random.default_rng(5)
    flat = rng.permutation(int(np.prod(xshape[:m])))[:n]  # unique targets
    idx = np.stack(np.unravel_index(flat, xshape[:m]), axis=-1).reshape(ishape)
    idx = np.where(rng.random(ishape) > 0.5, idx - np.array(xshape[:m]), idx).astype(np.int64)
    upd = data(tuple(ishape[:-1]) + tuple(xshape[m:]), seed=6)
    check("ScatterND", [("x", x, "feed"), ("i", idx, kind), ("u", upd, "feed")])


@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_scatter_nd_reduction(reduction, dtype):
    x = data((4, 3), dtype)
    idx = np.array([[0], [2], [0], [-1]], np.int64)  # row 0 twice
    check("ScatterND", [("x", x, "feed"), ("i", idx, "feed"), ("u", data((4, 3), dtype, 8), "feed")],
          attrs={"reduction": reduction}, opset=18)


@pytest.mark.parametrize("dtype", [np.float16, np.bool_, np.int32])
def test_scatter_nd_dtypes(dtype):
    check("ScatterND", [("x", data((4, 3), dtype), "feed"), ("i", np.array([[1, 2], [3, 0]], np.int64), "init"),
                        ("u", data((2,), dtype, 9), "feed")], dynamic=True)


# ---- OneHot -------------------------------------------------------------------------------------

@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("itype,dtype,vtype", [(np.int64, np.int64, np.float32), (np.int32, np.float32, np.float32),
                                               (np.int64, np.int64, np.int64), (np.float32, np.float32, np.float32),
                                               (np.int64, np.float32, np.int32)])
def test_one_hot(axis, kind, itype, dtype, vtype):
    idx = np.array([[0, 3, -1], [-5, 5, 2]], itype)  # -5 and 5 are out of range: all off
    args = [("i", idx, "feed"), ("d", np.array(5, dtype), kind), ("v", np.array([2, 7], vtype), kind)]
    check("OneHot", args, attrs={"axis": axis}, out_dtypes=[NP_TO_ONNX[np.dtype(vtype)]])


@pytest.mark.parametrize("opset", [9, 11, 21])
def test_one_hot_opsets(opset):
    check("OneHot", [("i", np.array([1, -1, 0, 5], np.int64), "feed"), ("d", np.array(4, np.int64), "init"),
                     ("v", np.array([0, 1], np.float32), "init")], out_dtypes=[TensorProto.FLOAT], opset=opset)


@pytest.mark.parametrize("idx", [[1.7, -2.2, 3.9], [1.0, -2.0, 3.0], [-1.0, -1.5, -4.0, -5.0, 4.0, 0.5]])
def test_one_hot_float_indices(idx):
    """ORT compares float indices with positions: a non-integral index matches nothing."""
    check("OneHot", [("i", np.array(idx, np.float32), "feed"), ("d", np.array(4.7, np.float32), "init"),
                     ("v", np.array([0, 1], np.float32), "init")], out_dtypes=[TensorProto.FLOAT])


def test_one_hot_dynamic():
    check("OneHot", [("i", np.array([1, -2, 0], np.int64), "feed"), ("d", np.array([4], np.int64), "init"),
                     ("v", np.array([0, 1], np.float32), "init")], out_dtypes=[TensorProto.FLOAT], dynamic=True)


# ---- Compress -----------------------------------------------------------------------------------

@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("cond", [[1, 0, 1], [0, 0, 0], [1, 1], [0, 1, 1, 0, 1, 1]])
@pytest.mark.parametrize("kind", KINDS)
def test_compress(axis, cond, kind):
    args = [("x", data((3, 3)), "feed"), ("c", np.array(cond, np.bool_), kind)]
    check("Compress", args, attrs={"axis": axis} if axis is not None else None)


@pytest.mark.parametrize("dtype", DTYPES)
def test_compress_dtypes(dtype):
    check("Compress", [("x", data((4, 2), dtype), "feed"), ("c", np.array([1, 0, 1, 1], np.bool_), "feed")],
          attrs={"axis": 0}, dynamic=True)


@pytest.mark.parametrize("opset", [9, 11, 21])
def test_compress_opsets(opset):
    check("Compress", [("x", data((3, 2)), "feed"), ("c", np.array([0, 1, 1], np.bool_), "init")], attrs={"axis": 0},
          opset=opset)


# ---- a chain ------------------------------------------------------------------------------------

def test_embedding_then_gather_elements():
    """Token embedding lookup followed by a per-row pick, with a symbolic batch dim."""
    nodes = [helper.make_node("Gather", ["emb", "ids"], ["e"], axis=0),
             helper.make_node("GatherElements", ["e", "pick"], ["y"], axis=2)]
    emb = data((10, 6))
    model = make_model(nodes, [("ids", TensorProto.INT64, ["B", 3]), ("pick", TensorProto.INT64, ["B", 3, 1])],
                       [("y", TensorProto.FLOAT, None)], {"emb": emb}.items())
    assert_parity(model, {"ids": indices((2, 3), 10), "pick": indices((2, 3, 1), 6)})


# ---- ReverseSequence, TensorScatter, Scatter ----------------------------------------------------

RNG = np.random.default_rng(0)




@pytest.mark.parametrize("time_axis,batch_axis", [(0, 1), (1, 0)])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
@pytest.mark.parametrize("extra", [(), (3,), (2, 2)])
def test_reverse_sequence(time_axis, batch_axis, dtype, extra):
    t, b = 5, 4
    shape = ((t, b) if time_axis == 0 else (b, t)) + extra
    x = rng_values(shape, dtype)
    lens = np.array([5, 1, 3, 0], np.int64) if dtype != np.bool_ else np.array([5, 1, 3, 2], np.int64)
    attrs = {"time_axis": time_axis, "batch_axis": batch_axis}
    assert_parity(*feeds_model("ReverseSequence", {"x": x, "l": lens}, attrs=attrs, opset=10))


@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("axis", [-2, 1, 2])
@pytest.mark.parametrize("with_indices", [False, True])
def test_tensor_scatter(mode, axis, with_indices):
    past = rng_values((2, 3, 6, 4))
    ushape = list(past.shape)
    ushape[axis] = 2
    upd = rng_values(tuple(ushape))
    cache = past.shape[axis]
    feeds = {"p": past, "u": upd}
    names = ["p", "u"]
    if with_indices:
        feeds["w"] = np.array([cache - 2, 1] if mode == "linear" else [cache - 1, 3], np.int64)
        names.append("w")
    assert_parity(*feeds_model("TensorScatter", feeds, attrs={"mode": mode, "axis": axis}, opset=24, names=names))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_scatter_legacy(axis):
    x = rng_values((3, 4))
    idx = np.array([[1, 0, 2, 2], [0, 2, 1, 0]], np.int64) if axis == 0 else np.array([[3, 0], [1, 2], [0, -1]], np.int64)
    upd = rng_values(idx.shape)
    assert_parity(*feeds_model("Scatter", {"x": x, "i": idx, "u": upd}, attrs={"axis": axis}, opset=10))
