"""Parity tests of the vision family (src/ops/vision.c): GridSample, AffineGrid, Col2Im and
CenterCropPad (Resize is test_ops_resize.py, RoiAlign test_ops_detection.py) on the MLX EP in strict mode against ORT's CPU EP."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from parity import check_op as check, f32, i64, args_model, assert_parity, make_model, normal_data as rand, run_cpu, \
    run_mlx_each




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


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_contrib_grid_sample(mode, padding, align):
    """com.microsoft GridSample: ai.onnx GridSample 16's operator in the contrib domain."""
    node = helper.make_node("GridSample", ["x", "g"], ["y"], domain="com.microsoft", mode=mode, padding_mode=padding,
                            align_corners=align)
    model = make_model([node], [("x", TensorProto.FLOAT, [2, 3, 5, 6]), ("g", TensorProto.FLOAT, [2, 4, 7, 2])],
                       [("y", TensorProto.FLOAT, None)], domains=[("com.microsoft", 1)])
    assert_parity(model, {"x": rand((2, 3, 5, 6)), "g": grid((2, 4, 7, 2))}, rtol=1e-4, atol=1e-5)


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


# ---- CenterCropPad ------------------------------------------------------------------------------

@pytest.mark.parametrize("shape,target,axes", [
    ((5, 6), [3, 8], None), ((4, 7, 3), [6, 4], [0, 1]), ((4, 7, 3), [5, 2], [-1, 1]), ((3, 3), [3, 3], None),
])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_center_crop_pad(shape, target, axes, dtype):
    x = (rand(shape) * 10).astype(dtype)
    attrs = {"axes": axes} if axes else {}
    check("CenterCropPad", [("x", x, "feed"), ("s", np.array(target, np.int64), "init")], attrs, opset=18)


@pytest.mark.parametrize("target", [-1, -2, -5, -(2**62), -(2**63)])
@pytest.mark.parametrize("n", [0, 2, 5])
def test_center_crop_pad_negative_target(target, n):
    """ORT runs ONNX's function body: a negative size slices from (n - t) / 2 to there plus t, in
    wrapping int64 (found by tools/fuzz's data pool; the EP used to refuse it)."""
    check("CenterCropPad", [("x", np.arange(n, dtype=np.float32), "feed"), ("s", np.array([target], np.int64), "feed")],
          {}, opset=18)


# ---- edge cases ---------------------------------------------------------------------------------


def test_grid_sample_empty_batch():
    check("GridSample", [("x", np.zeros((0, 2, 3, 4), np.float32), "feed"), ("g", np.zeros((0, 2, 2, 2), np.float32), "feed")],
          {}, opset=20)


@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_grid_sample_extreme_grid(mode, padding):
    """Grid row 0 holds NaN, infinities and 1e30, row 1 finite far-away points. Row 1 is compared
    with ORT's CPU EP in every Run. Row 0 has no reference: ORT converts such coordinates to an
    integer index (undefined in C++; x86 gives INT64_MIN, which ORT then clamps), so there the
    EP must only stay inside the input (its indices are clamped before the conversion)."""
    node = helper.make_node("GridSample", ["x", "g"], ["y"], mode=mode, padding_mode=padding)
    model = make_model([node], [("x", TensorProto.FLOAT, [1, 1, 3, 3]), ("g", TensorProto.FLOAT, [1, 2, 3, 2])],
                       [("y", TensorProto.FLOAT, None)], opset=20)
    g = np.array([[[[np.nan, 0], [np.inf, -np.inf], [1e30, -1e30]],
                   [[0.3, -0.2], [1e6, -1e6], [-3e5, 40.0]]]], np.float32)
    feeds = {"x": rand((1, 1, 3, 3)), "g": g}
    (want,) = run_cpu(model, feeds)
    for run, (got,) in enumerate(run_mlx_each(model, feeds)):
        assert got.shape == want.shape == (1, 1, 2, 3), f"run {run + 1}"
        np.testing.assert_allclose(got[:, :, 1], want[:, :, 1], rtol=1e-5, atol=1e-6, err_msg=f"run {run + 1}")
