"""Parity tests of the resize family (src/ops/resize.c): Resize and Upsample on the MLX EP in strict
mode against ORT's CPU EP."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from parity import check_op as check, f32, i64, args_model, assert_parity, make_model, normal_data as rand, run_mlx




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


def test_resize_empty_batch():
    check("Resize", [("x", np.zeros((0, 2, 3, 4), np.float32), "feed"), None, ("s", f32(1, 1, 2, 2), "init")],
          {"mode": "linear"}, opset=19)
