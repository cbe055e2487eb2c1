"""Parity tests of the extra family (src/ops/extra.c): NonMaxSuppression, CumProd and BitCast on the
MLX EP in strict mode against ORT's CPU EP."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from parity import args_model, assert_parity, make_model, run_mlx

RNG = np.random.default_rng(0)


# ---- NonMaxSuppression --------------------------------------------------------------------------

def nms_boxes(b, n, center, flip=False, seed=0):
    rng = np.random.default_rng(seed)
    if center:
        xy = rng.uniform(0, 10, (b, n, 2))
        wh = rng.uniform(0.5, 4, (b, n, 2))
        return np.concatenate([xy, wh], -1).astype(np.float32)
    p0 = rng.uniform(0, 10, (b, n, 2))
    p1 = p0 + rng.uniform(0.5, 4, (b, n, 2))
    boxes = np.concatenate([p0, p1], -1)
    if flip:  # corners in either order
        swap = rng.random((b, n)) > 0.5
        boxes[swap] = boxes[swap][:, [2, 3, 0, 1]]
    return boxes.astype(np.float32)


def nms_scores(b, c, n, ties, seed=1):
    rng = np.random.default_rng(seed)
    if ties:  # few distinct values: the order of equal scores matters
        return (rng.integers(0, 4, (b, c, n)) / 4).astype(np.float32)
    return rng.random((b, c, n)).astype(np.float32)


def nms_args(boxes, scores, max_out=None, iou=None, score=None, kind="feed"):
    args = [("boxes", boxes, "feed"), ("scores", scores, "feed")]
    extra = [("m", np.array([max_out], np.int64) if max_out is not None else None),
             ("iou", np.array([iou], np.float32) if iou is not None else None),
             ("st", np.array([score], np.float32) if score is not None else None)]
    while extra and extra[-1][1] is None:
        extra.pop()
    args += [None if v is None else (k, v, kind) for k, v in extra]
    return args


def check_nms(args, opset=11, **attrs):
    model, feeds = args_model("NonMaxSuppression", args, attrs=attrs, out_dtypes=[TensorProto.INT64], opset=opset)
    return assert_parity(model, feeds)


@pytest.mark.parametrize("opset", [10, 11])
@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("kind", ["feed", "init"])
def test_nms(opset, center, ties, kind):
    boxes, scores = nms_boxes(2, 40, center), nms_scores(2, 3, 40, ties)
    check_nms(nms_args(boxes, scores, 7, 0.3, 0.2, kind), opset=opset, center_point_box=center)


@pytest.mark.parametrize("iou", [0.0, 0.1, 0.5, 1.0])
@pytest.mark.parametrize("max_out", [1, 3, 100, -2, 0])
def test_nms_thresholds(iou, max_out):
    boxes, scores = nms_boxes(1, 30, 0, flip=True), nms_scores(1, 2, 30, True)
    check_nms(nms_args(boxes, scores, max_out, iou))


@pytest.mark.parametrize("score", [None, 0.0, 0.25, 0.5, 2.0])
def test_nms_score_threshold(score):
    boxes, scores = nms_boxes(1, 25, 0), nms_scores(1, 2, 25, True)
    check_nms(nms_args(boxes, scores, 10, 0.5, score))


def test_nms_optional_inputs_absent():
    boxes, scores = nms_boxes(1, 10, 0), nms_scores(1, 1, 10, False)
    out = check_nms(nms_args(boxes, scores))  # max_output_boxes_per_class defaults to 0
    assert out[0].shape == (0, 3)
    check_nms(nms_args(boxes, scores, 5))
    check_nms([("boxes", boxes, "feed"), ("scores", scores, "feed"), ("m", np.array([5], np.int64), "feed"), None,
               ("st", np.array([0.3], np.float32), "feed")])


def test_nms_large_ties():
    boxes, scores = nms_boxes(3, 300, 0, flip=True, seed=4), nms_scores(3, 4, 300, True, seed=5)
    check_nms(nms_args(boxes, scores, 50, 0.4, 0.0))


def test_nms_degenerate_boxes():
    boxes = np.array([[[0, 0, 1, 1], [0, 0, 1, 1], [0, 0, 0, 1], [0.5, 0.5, 1.5, 1.5], [1, 1, 0, 0],
                       [np.nan, 0, 1, 1], [0, 0, 1, 1]]], np.float32)
    scores = np.array([[[0.9, 0.9, 0.8, 0.7, 0.9, 0.95, 0.9]]], np.float32)  # NaN scores: order unspecified
    check_nms(nms_args(boxes, scores, 10, 0.1))
    check_nms(nms_args(boxes, scores, 10, 0.1, 0.5))


def test_nms_empty():
    check_nms(nms_args(np.zeros((1, 0, 4), np.float32), np.zeros((1, 2, 0), np.float32), 3, 0.5))
    check_nms(nms_args(np.zeros((0, 5, 4), np.float32), np.zeros((0, 2, 5), np.float32), 3, 0.5))


def test_nms_center_point_box_declined():
    boxes, scores = nms_boxes(1, 5, 0), nms_scores(1, 1, 5, False)
    model, feeds = args_model("NonMaxSuppression", nms_args(boxes, scores, 3), attrs={"center_point_box": 2},
                              out_dtypes=[TensorProto.INT64], opset=11)
    with pytest.raises(Exception):
        run_mlx(model, feeds)


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


# ---- BitCast ------------------------------------------------------------------------------------

BITCAST_GROUPS = [
    [np.int8, np.uint8],
    [np.int16, np.uint16, np.float16, "bfloat16"],
    [np.int32, np.uint32, np.float32],
    [np.int64, np.uint64, np.float64],
]
ONNX_OF = {"bfloat16": TensorProto.BFLOAT16}


def onnx_of(t):
    from parity import NP_TO_ONNX
    return ONNX_OF.get(t) or NP_TO_ONNX[np.dtype(t)]


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
            model, feeds = args_model("BitCast", [("x", x, "feed")], attrs={"to": onnx_of(dst)},
                                      out_dtypes=[onnx_of(dst)], opset=26)
            want = assert_parity(model, feeds)[0]
            assert np.asarray(want).tobytes() == x.tobytes()


@pytest.mark.parametrize("src", [np.int16, np.uint16, np.float16])
@pytest.mark.parametrize("back", [TensorProto.INT16, TensorProto.FLOAT16])
def test_bitcast_bfloat16(src, back):
    # numpy cannot hold bfloat16 outputs: view as bfloat16 and back in one model.
    x = bitcast_input(src)
    nodes = [helper.make_node("BitCast", ["x"], ["b"], to=TensorProto.BFLOAT16),
             helper.make_node("BitCast", ["b"], ["y0"], to=back)]
    model = make_model(nodes, [("x", onnx_of(src), list(x.shape))], [("y0", back, None)], opset=26)
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
    with pytest.raises(Exception):
        run_mlx(model, feeds)
