"""Parity tests of the detection family (src/ops/detection.c): NonMaxSuppression, RoiAlign and
MaxRoiPool on the MLX EP in strict mode against ORT's CPU EP."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from parity import check_feeds, check_op as check, f32, i64, NP_TO_ONNX, args_model, assert_parity, make_model, normal_data as rand, run_cpu, run_mlx


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
    with pytest.raises(Exception, match=r"fallback to CPU EP has been explicitly disabled"):
        run_mlx(model, feeds)


# ---- RoiAlign -----------------------------------------------------------------------------------



ROIS = np.array([[0, 0, 7, 6], [1.2, 2.5, 5.5, 7.9], [3.3, 1.1, 3.4, 1.2], [-2, -3, 12, 14], [6, 5, 2, 1]], np.float32)


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("ctm", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("ratio", [0, 2])
@pytest.mark.parametrize("scale", [1.0, 0.5])
def test_roi_align(mode, ctm, ratio, scale):
    attrs = {"mode": mode, "coordinate_transformation_mode": ctm, "sampling_ratio": ratio, "spatial_scale": scale,
             "output_height": 3, "output_width": 2}
    x = rand((2, 3, 8, 9))
    check("RoiAlign", [("x", x, "feed"), ("r", ROIS / scale, "feed"), ("b", i64(0, 1, 0, 1, 0), "feed")], attrs,
          opset=16, rtol=1e-4, atol=1e-5)


def test_roi_align_opset10():
    attrs = {"output_height": 2, "output_width": 2, "sampling_ratio": 2}
    check("RoiAlign", [("x", rand((1, 2, 6, 6)), "feed"), ("r", ROIS[:3], "feed"), ("b", i64(0, 0, 0), "feed")], attrs,
          opset=10, rtol=1e-4, atol=1e-5)


def test_roi_align_bad_batch_index_fails_cleanly():
    node = helper.make_node("RoiAlign", ["x", "r", "b"], ["y"])
    model = make_model([node], [("x", TensorProto.FLOAT, [1, 1, 4, 4]), ("r", TensorProto.FLOAT, [1, 4]),
                                ("b", TensorProto.INT64, [1])], [("y", TensorProto.FLOAT, None)], opset=16)
    with pytest.raises(Exception, match="batch index"):
        run_mlx(model, {"x": rand((1, 1, 4, 4)), "r": f32(0, 0, 2, 2).reshape(1, 4), "b": i64(7)})


def test_roi_align_large_adaptive_grid():
    """A wide roi with sampling_ratio 0 takes ceil(width / bins) samples per bin: 3 x 499999 here
    (found by tools/fuzz's data pool; the EP used to refuse grids past 4096 per side)."""
    rois = np.array([[2.2, -0.27, 1e6, 4.65], [2.6, 3.1, 5.6, 5.1]], np.float32)
    attrs = {"output_height": 1, "output_width": 1, "sampling_ratio": 0, "spatial_scale": 0.5}
    check("RoiAlign", [("x", rand((1, 1, 5, 5)), "feed"), ("r", rois, "feed"), ("b", i64(0, 0), "feed")], attrs,
          opset=16, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("corner,match", [(3e12, "more than the memory limit"), (1e7, "more than the memory limit"),
                                          (np.inf, "must be finite"), (np.nan, "must be finite"), (1e30, "past int64")])
def test_roi_align_huge_roi(corner, match):
    """ORT refuses non-finite rois and fails to allocate past memory; the EP refuses both before
    building anything. A grid count past int64 (1e30) is an undefined conversion in ORT (x86: zeros
    here, an error or zeros elsewhere as its table size wraps): the EP refuses it."""
    node = helper.make_node("RoiAlign", ["x", "r", "b"], ["y"], output_height=2, output_width=2)
    model = make_model([node], [("x", TensorProto.FLOAT, [1, 1, 4, 4]), ("r", TensorProto.FLOAT, [1, 4]),
                                ("b", TensorProto.INT64, [1])], [("y", TensorProto.FLOAT, None)], opset=16)
    feeds = {"x": rand((1, 1, 4, 4)), "r": f32(0, 0, corner, corner).reshape(1, 4), "b": i64(0)}
    if corner != 1e30:
        with pytest.raises(Exception):
            run_cpu(model, feeds)
    with pytest.raises(Exception, match=match):
        run_mlx(model, feeds)


@pytest.mark.parametrize("roi,refused", [([0, 3, 3, 0], True), ([3, 0, 0, 3], True), ([3, 0, 0, -0.5], False),
                                         ([0, 1, 3, 0.5], False), ([3, 3, 0, 0], False)])
def test_roi_align_backwards_roi(roi, refused):
    """A roi given backwards along one side has a negative sample grid: ORT's table size (a size_t)
    fails on the negative product; backwards along both sides, or with a zero side, nothing is
    sampled (found by tools/fuzz's data pool)."""
    node = helper.make_node("RoiAlign", ["x", "r", "b"], ["y"], output_height=2, output_width=2)
    model = make_model([node], [("x", TensorProto.FLOAT, [1, 1, 4, 4]), ("r", TensorProto.FLOAT, [1, 4]),
                                ("b", TensorProto.INT64, [1])], [("y", TensorProto.FLOAT, None)], opset=16)
    feeds = {"x": rand((1, 1, 4, 4)), "r": np.array([roi], np.float32), "b": i64(0)}
    if not refused:
        np.testing.assert_array_equal(run_mlx(model, feeds)[0], run_cpu(model, feeds)[0])
        return
    with pytest.raises(Exception, match="Integer overflow"):
        run_cpu(model, feeds)
    with pytest.raises(Exception, match="negative sample grid"):
        run_mlx(model, feeds)


# ---- MaxRoiPool ---------------------------------------------------------------------------------

def pool_rand(shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)




@pytest.mark.parametrize("scale", [1.0, 0.5, 0.25])
@pytest.mark.parametrize("pooled", [[2, 2], [3, 2]])
def test_max_roi_pool(scale, pooled):
    x = np.abs(pool_rand((2, 3, 8, 9)))  # ORT starts its maximum at FLT_MIN: keep values positive
    rois = np.array([[0, 0, 0, 7, 6], [1, 2, 1, 8, 7], [0, 3.4, 2.6, 5.5, 4.4], [1, 6, 6, 4, 4],
                     [0, -3, -2, 20, 30]], np.float32)
    if scale != 1.0:
        rois[:, 1:] /= scale
    check_feeds("MaxRoiPool", {"x": x, "r": rois}, {"pooled_shape": pooled, "spatial_scale": scale}, opset=21)


def test_max_roi_pool_bad_batch_index_fails_cleanly():
    x = np.abs(pool_rand((1, 2, 6, 6)))
    rois = np.array([[3, 0, 0, 4, 4]], np.float32)
    node = helper.make_node("MaxRoiPool", ["x", "r"], ["y"], pooled_shape=[2, 2])
    model = make_model([node], [("x", TensorProto.FLOAT, [1, 2, 6, 6]), ("r", TensorProto.FLOAT, [1, 5])],
                       [("y", TensorProto.FLOAT, None)], opset=21)
    with pytest.raises(Exception, match="batch index"):
        run_mlx(model, {"x": x, "r": rois})


# ---- CropAndResize (com.microsoft) ----------------------------------------------------------------

def _crop_model(extrapolation=0.0, mode="bilinear"):
    node = helper.make_node("CropAndResize", ["x", "rois", "bi", "cs"], ["y"], domain="com.microsoft", mode=mode,
                            extrapolation_value=extrapolation)
    ins = [("x", TensorProto.FLOAT, [2, 3, 6, 7]), ("rois", TensorProto.FLOAT, ["r", 4]), ("bi", TensorProto.INT32, ["r"]),
           ("cs", TensorProto.INT32, [2])]
    return make_model([node], ins, [("y", TensorProto.FLOAT, None)], domains=[("com.microsoft", 1)])


CROP_ROIS = np.array([[0.1, 0.2, 0.8, 0.9], [0.0, 0.0, 1.0, 1.0], [-0.2, 0.5, 0.4, 1.3], [0.6, 0.7, 0.2, 0.1],
                      [0.3, 0.3, 0.3, 0.3]], np.float32)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("crop", [(3, 4), (1, 5), (4, 1), (1, 1)])
@pytest.mark.parametrize("extrapolation", [0.0, -7.5])
def test_crop_and_resize(mode, crop, extrapolation):
    """Boxes inside, covering, partly outside (extrapolation), flipped and degenerate; one-row and
    one-column crops (the centre sample)."""
    x = np.random.default_rng(2).standard_normal((2, 3, 6, 7)).astype(np.float32)
    feeds = {"x": x, "rois": CROP_ROIS, "bi": np.array([0, 1, 1, 0, 1], np.int32), "cs": np.array(crop, np.int32)}
    assert_parity(_crop_model(extrapolation, mode), feeds, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("index", [2, -1, 2**31 - 1])
def test_crop_and_resize_batch_index_out_of_range(index):
    """A batch index outside [0, N) fails the Run (ORT's check refuses it too)."""
    from parity import run_cpu
    x = np.zeros((2, 3, 6, 7), np.float32)
    feeds = {"x": x, "rois": CROP_ROIS[:2], "bi": np.array([0, index], np.int32), "cs": np.array([2, 2], np.int32)}
    with pytest.raises(Exception):
        run_cpu(_crop_model(), feeds)
    with pytest.raises(Exception, match="batch index"):
        run_mlx(_crop_model(), feeds)


def test_crop_and_resize_far_rois():
    """Coordinates far outside the image (past int32 once scaled) give extrapolation_value, as in ORT."""
    x = np.random.default_rng(3).standard_normal((2, 3, 6, 7)).astype(np.float32)
    rois = np.array([[1e30, -1e30, -1e30, 1e30], [0.1, 3e9, 0.9, -3e9]], np.float32)
    feeds = {"x": x, "rois": rois, "bi": np.array([1, 0], np.int32), "cs": np.array([3, 3], np.int32)}
    assert_parity(_crop_model(2.5), feeds, rtol=1e-5, atol=1e-5)
