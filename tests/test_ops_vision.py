"""Parity tests of the vision family (src/ops/vision.c): Resize/Upsample, GridSample, AffineGrid,
Col2Im, RoiAlign and CenterCropPad on the MLX EP in strict mode against ORT's CPU EP."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from parity import args_model, assert_parity, make_model, normal_data as rand, run_mlx


def check(op, args, attrs=None, opset=21, out_dtype=None, **tol):
    """args: (name, array, 'feed'|'init') tuples, or None for an absent optional input."""
    model, feeds = args_model(op, args, attrs, out_dtypes=[out_dtype] if out_dtype else None, opset=opset)
    return assert_parity(model, feeds, **tol)


def f32(*v):
    return np.array(v, np.float32)


def i64(*v):
    return np.array(v, np.int64)


# ---- Resize -------------------------------------------------------------------------------------

COORDS = ["half_pixel", "asymmetric", "pytorch_half_pixel", "align_corners", "half_pixel_symmetric"]
NEAREST = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
SCALES = [f32(1, 1, 2, 3), f32(1, 1, 0.5, 0.6), f32(1, 1, 1.7, 0.8), f32(1, 1, 0.3, 2.5)]


@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("nearest", NEAREST)
@pytest.mark.parametrize("scales", SCALES)
def test_resize_nearest(coord, nearest, scales):
    # Width 8: at width 7 and scale 0.6, half_pixel_symmetric lands within float rounding of a tie
    # that ORT's nearest path breaks differently from its own linear path.
    attrs = {"mode": "nearest", "coordinate_transformation_mode": coord, "nearest_mode": nearest}
    check("Resize", [("x", rand((1, 2, 5, 8)), "feed"), None, ("s", scales, "init")], attrs, opset=19)


@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("scales", SCALES)
@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_linear_cubic(coord, scales, mode):
    attrs = {"mode": mode, "coordinate_transformation_mode": coord}
    check("Resize", [("x", rand((2, 3, 5, 7)), "feed"), None, ("s", scales, "init")], attrs, opset=19)


@pytest.mark.parametrize("scales", SCALES)
@pytest.mark.parametrize("a", [-0.75, -0.5])
def test_resize_cubic_exclude_outside(scales, a):
    attrs = {"mode": "cubic", "cubic_coeff_a": a, "exclude_outside": 1}
    check("Resize", [("x", rand((1, 2, 6, 5)), "feed"), None, ("s", scales, "init")], attrs, opset=19)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("sizes", [i64(1, 2, 9, 4), i64(1, 2, 3, 11), i64(1, 2, 1, 1)])
def test_resize_sizes(mode, sizes):
    check("Resize", [("x", rand((1, 2, 5, 7)), "feed"), None, None, ("z", sizes, "init")], {"mode": mode}, opset=19)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("extrapolation", [0.0, 10.0])
def test_resize_tf_crop_and_resize(mode, extrapolation):
    roi = f32(0, 0, 0.4, -0.2, 1, 1, 1.2, 0.7)
    attrs = {"mode": mode, "coordinate_transformation_mode": "tf_crop_and_resize", "extrapolation_value": extrapolation}
    check("Resize", [("x", rand((1, 2, 5, 7)), "feed"), ("r", roi, "init"), None, ("z", i64(1, 2, 6, 6), "init")],
          attrs, opset=19)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("scales", [f32(1, 1, 0.5, 0.6), f32(1, 1, 0.3, 0.45), f32(1, 1, 1.5, 0.7)])
@pytest.mark.parametrize("exclude_outside", [0, 1])
def test_resize_antialias(mode, scales, exclude_outside):
    attrs = {"mode": mode, "antialias": 1, "exclude_outside": exclude_outside}
    check("Resize", [("x", rand((1, 2, 12, 13)), "feed"), None, ("s", scales, "init")], attrs, opset=19)


@pytest.mark.parametrize("policy", ["not_larger", "not_smaller"])
@pytest.mark.parametrize("axes", [None, [2, 3], [3, 2]])
def test_resize_keep_aspect_ratio(policy, axes):
    # Without axes the policy scales N and C too, which ORT's linear kernel rejects: use nearest.
    sizes = i64(7, 9) if axes else i64(1, 2, 7, 9)
    attrs = {"mode": "linear" if axes else "nearest", "keep_aspect_ratio_policy": policy}
    if axes:
        attrs["axes"] = axes
    check("Resize", [("x", rand((1, 2, 5, 4)), "feed"), None, None, ("z", sizes, "init")], attrs, opset=19)


def test_resize_axes_scales():
    attrs = {"mode": "nearest", "axes": [3, 2]}
    check("Resize", [("x", rand((1, 2, 4, 5)), "feed"), None, ("s", f32(2.0, 1.5), "init")], attrs, opset=19)


@pytest.mark.parametrize("shape,scales,mode", [
    ((6,), f32(1.5), "nearest"), ((4, 5), f32(2, 0.5), "linear"), ((4, 5), f32(1.6, 2.2), "cubic"),
    ((2, 3, 4), f32(1, 2, 0.7), "linear"), ((1, 2, 3, 4, 5), f32(1, 1, 2, 0.5, 1.5), "linear"),
    ((1, 4, 5, 3), f32(1, 2, 0.6, 1), "linear"),
])
def test_resize_ranks(shape, scales, mode):
    check("Resize", [("x", rand(shape), "feed"), None, ("s", scales, "init")], {"mode": mode}, opset=19)


@pytest.mark.parametrize("dtype", [np.int32, np.int8, np.uint8])
def test_resize_nearest_ints(dtype):
    x = (rand((1, 2, 4, 5)) * 20).astype(dtype)
    check("Resize", [("x", x, "feed"), None, ("s", f32(1, 1, 2, 1.5), "init")], {"mode": "nearest"}, opset=19)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_float16(mode):
    check("Resize", [("x", rand((1, 2, 5, 6), np.float16), "feed"), None, ("s", f32(1, 1, 1.5, 0.5), "init")],
          {"mode": mode}, opset=19)


@pytest.mark.parametrize("opset", [11, 13, 18])
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_opsets(opset, mode):
    check("Resize", [("x", rand((1, 2, 5, 6)), "feed"), ("r", np.zeros(0, np.float32), "init"),
                     ("s", f32(1, 1, 1.5, 0.5), "init")], {"mode": mode}, opset=opset)


def test_resize_tf_half_pixel_for_nn():
    attrs = {"mode": "nearest", "coordinate_transformation_mode": "tf_half_pixel_for_nn"}
    check("Resize", [("x", rand((1, 2, 5, 6)), "feed"), ("r", np.zeros(0, np.float32), "init"),
                     ("s", f32(1, 1, 1.5, 0.5), "init")], attrs, opset=11)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("scales", [f32(1, 1, 2, 3), f32(1, 1, 0.5, 0.6)])
def test_resize_opset10(mode, scales):
    check("Resize", [("x", rand((1, 2, 5, 6)), "feed"), ("s", scales, "init")], {"mode": mode}, opset=10)


def test_resize_scales_runtime():
    check("Resize", [("x", rand((1, 2, 5, 6)), "feed"), ("r", np.zeros(0, np.float32), "init"),
                     ("s", f32(1, 1, 1.5, 2.0), "feed")], {"mode": "linear"}, opset=13)


def test_resize_same_shape():
    check("Resize", [("x", rand((1, 2, 5, 6)), "feed"), None, ("s", f32(1, 1, 1.1, 1.1), "init")],
          {"mode": "linear"}, opset=19)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample(mode):
    x = rand((1, 2, 3, 4))
    check("Upsample", [("x", x, "feed")], {"mode": mode, "scales": [1.0, 1.0, 2.0, 1.5]}, opset=7)
    check("Upsample", [("x", x, "feed"), ("s", f32(1, 1, 3, 2.5), "init")], {"mode": mode}, opset=9)


# ---- GridSample ---------------------------------------------------------------------------------

def grid(shape, seed=1, spread=1.3):
    return (np.random.default_rng(seed).uniform(-spread, spread, shape)).astype(np.float32)


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_2d(mode, padding, align):
    attrs = {"mode": mode, "padding_mode": padding, "align_corners": align}
    check("GridSample", [("x", rand((2, 3, 5, 6)), "feed"), ("g", grid((2, 4, 7, 2)), "feed")], attrs, opset=16,
          rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["linear", "nearest"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_3d(mode, padding, align):
    attrs = {"mode": mode, "padding_mode": padding, "align_corners": align}
    check("GridSample", [("x", rand((1, 2, 4, 5, 3)), "feed"), ("g", grid((1, 3, 2, 4, 3)), "feed")], attrs,
          opset=20, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_grid_sample_far_outside(padding):
    g = grid((1, 5, 5, 2), spread=6.0)
    g[0, 0, 0] = [1e9, -1e9]
    attrs = {"mode": "linear", "padding_mode": padding}
    check("GridSample", [("x", rand((1, 2, 4, 5)), "feed"), ("g", g, "feed")], attrs, opset=20, rtol=1e-4, atol=1e-5)


def test_grid_sample_float64():
    check("GridSample", [("x", rand((1, 2, 4, 5), np.float64), "feed"), ("g", grid((1, 3, 3, 2)).astype(np.float64), "feed")],
          {"mode": "cubic"}, opset=20)


# ---- AffineGrid ---------------------------------------------------------------------------------

@pytest.mark.parametrize("size", [i64(2, 3, 4, 5), i64(1, 1, 1, 3), i64(2, 3, 3, 4, 5)])
@pytest.mark.parametrize("align", [0, 1])
def test_affine_grid(size, align):
    n, nsp = size[0], len(size) - 2
    theta = rand((n, nsp, nsp + 1))
    check("AffineGrid", [("t", theta, "feed"), ("s", size, "init")], {"align_corners": align}, opset=20)


# ---- Col2Im -------------------------------------------------------------------------------------

@pytest.mark.parametrize("img,blk,attrs", [
    ([5, 5], [2, 2], {}),
    ([6, 7], [3, 2], {"strides": [2, 1], "pads": [1, 0, 1, 1]}),
    ([7, 6], [2, 3], {"dilations": [2, 1], "strides": [1, 2], "pads": [0, 1, 1, 0]}),
    ([9], [3], {"strides": [2]}),
    ([4, 5, 4], [2, 2, 2], {}),
])
def test_col2im(img, blk, attrs):
    nsp = len(img)
    dil = attrs.get("dilations", [1] * nsp)
    st = attrs.get("strides", [1] * nsp)
    pads = attrs.get("pads", [0] * 2 * nsp)
    L = 1
    for i in range(nsp):
        L *= (img[i] + pads[i] + pads[i + nsp] - (dil[i] * (blk[i] - 1) + 1)) // st[i] + 1
    x = rand((2, 3 * int(np.prod(blk)), L))
    check("Col2Im", [("x", x, "feed"), ("i", np.array(img, np.int64), "init"), ("b", np.array(blk, np.int64), "init")],
          attrs, opset=18)


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


# ---- CenterCropPad ------------------------------------------------------------------------------

@pytest.mark.parametrize("shape,target,axes", [
    ((5, 6), [3, 8], None), ((4, 7, 3), [6, 4], [0, 1]), ((4, 7, 3), [5, 2], [-1, 1]), ((3, 3), [3, 3], None),
])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_center_crop_pad(shape, target, axes, dtype):
    x = (rand(shape) * 10).astype(dtype)
    attrs = {"axes": axes} if axes else {}
    check("CenterCropPad", [("x", x, "feed"), ("s", np.array(target, np.int64), "init")], attrs, opset=18)


# ---- edge cases ---------------------------------------------------------------------------------

def test_resize_empty_batch():
    check("Resize", [("x", np.zeros((0, 2, 3, 4), np.float32), "feed"), None, ("s", f32(1, 1, 2, 2), "init")],
          {"mode": "linear"}, opset=19)


def test_grid_sample_empty_batch():
    check("GridSample", [("x", np.zeros((0, 2, 3, 4), np.float32), "feed"), ("g", np.zeros((0, 2, 2, 2), np.float32), "feed")],
          {}, opset=20)


def test_grid_sample_nan_grid_does_not_crash():
    node = helper.make_node("GridSample", ["x", "g"], ["y"], padding_mode="border")
    model = make_model([node], [("x", TensorProto.FLOAT, [1, 1, 3, 3]), ("g", TensorProto.FLOAT, [1, 1, 3, 2])],
                       [("y", TensorProto.FLOAT, None)], opset=20)
    g = np.array([[[[np.nan, 0], [np.inf, -np.inf], [1e30, -1e30]]]], np.float32)
    run_mlx(model, {"x": rand((1, 1, 3, 3)), "g": g})


def test_roi_align_bad_batch_index_fails_cleanly():
    node = helper.make_node("RoiAlign", ["x", "r", "b"], ["y"])
    model = make_model([node], [("x", TensorProto.FLOAT, [1, 1, 4, 4]), ("r", TensorProto.FLOAT, [1, 4]),
                                ("b", TensorProto.INT64, [1])], [("y", TensorProto.FLOAT, None)], opset=16)
    with pytest.raises(Exception, match="batch index"):
        run_mlx(model, {"x": rand((1, 1, 4, 4)), "r": f32(0, 0, 2, 2).reshape(1, 4), "b": i64(7)})
