"""Parity tests of the conv family (src/ops/conv.c): Conv, ConvTranspose, ConvInteger,
QLinearConv and DeformConv on the MLX EP in strict mode against ORT's CPU EP. Weights are fed both as
initializers and as graph inputs; float16 cases compare with float16 tolerances, and float64
(which ORT's CPU EP lacks for convolutions) is checked against the float32 CPU result."""
from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import TensorProto, helper

from parity import args_model, assert_parity, make_model, normal_data as rand, run_cpu, run_mlx


def build(op, args, attrs=None, out_dtype=None, opset=21):
    """args: (name, array, 'feed'|'init') or None for an absent optional input."""
    return args_model(op, args, attrs, out_dtypes=[out_dtype] if out_dtype else None, opset=opset)


def check(op, args, attrs=None, rtol=None, atol=None, **kw):
    model, feeds = build(op, args, attrs, **kw)
    return assert_parity(model, feeds, rtol=rtol, atol=atol)


# ---- Conv ---------------------------------------------------------------------------------------

CONV_CASES = [
    # (x shape, w shape, attrs)
    ((1, 3, 7), (4, 3, 3), {}),
    ((2, 4, 9), (6, 2, 3), {"group": 2, "strides": [2], "pads": [1, 2], "dilations": [2]}),
    ((1, 3, 8, 8), (5, 3, 3, 3), {}),
    ((2, 3, 9, 7), (4, 3, 3, 2), {"strides": [2, 1], "pads": [1, 0, 2, 1]}),
    ((1, 4, 10, 10), (4, 1, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]}),  # depthwise
    ((1, 6, 11, 9), (6, 3, 3, 3), {"group": 2, "dilations": [2, 3], "strides": [3, 2]}),
    ((1, 2, 7, 7), (3, 2, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 2, 8, 7), (3, 2, 4, 2), {"auto_pad": "SAME_LOWER", "strides": [3, 2]}),
    ((1, 2, 8, 7), (3, 2, 4, 2), {"auto_pad": "SAME_UPPER"}),
    ((1, 2, 7, 7), (3, 2, 3, 3), {"auto_pad": "VALID", "strides": [2, 2]}),
    ((1, 2, 5, 5), (3, 2, 1, 1), {"strides": [4, 4]}),
    ((1, 2, 7, 6), (3, 2, 1, 1), {"auto_pad": "SAME_UPPER", "strides": [4, 4]}),  # negative pads crop
    ((1, 2, 7, 6), (3, 2, 1, 2), {"auto_pad": "SAME_LOWER", "strides": [4, 5]}),
    ((1, 2, 5, 6, 7), (3, 2, 3, 2, 3), {"pads": [1, 0, 1, 1, 2, 0], "strides": [1, 2, 2]}),
    ((2, 4, 5, 6, 5), (6, 2, 2, 3, 2), {"group": 2, "dilations": [2, 1, 2]}),
    ((1, 3, 6, 6), (2, 3, 3, 3), {"kernel_shape": [3, 3], "pads": [2, 2, 2, 2]}),
    # one tap, one group, no padding: on the CPU a product of the channels-last input
    ((2, 4, 5, 6), (3, 4, 1, 1), {}),
    ((2, 4, 5, 6), (3, 4, 1, 1), {"strides": [2, 3], "dilations": [3, 2]}),
    ((1, 3, 7), (5, 3, 1), {"strides": [2]}),
    ((1, 2, 3, 4, 5), (4, 2, 1, 1, 1), {"strides": [1, 2, 2]}),
    ((1, 4, 5, 6), (6, 2, 1, 1), {"group": 2}),  # grouped: MLX's convolution
    ((1, 4, 5, 6), (3, 4, 1, 1), {"pads": [1, 0, 0, 1]}),  # padded: MLX's convolution
]


@pytest.mark.parametrize("xs,ws,attrs", CONV_CASES)
@pytest.mark.parametrize("kind", ["init", "feed"])
@pytest.mark.parametrize("bias", [False, True])
def test_conv(xs, ws, attrs, kind, bias):
    args = [("x", rand(xs), "feed"), ("w", rand(ws, seed=1), kind)]
    if bias:
        args.append(("b", rand((ws[0],), seed=2), kind))
    check("Conv", args, attrs, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("xs,ws,attrs", [
    ((1, 3, 2, 5), (2, 3, 2, 1), {"strides": [1, 2147483647]}),  # attribute fuzz pool, seed 451463
    ((1, 3, 4, 5), (2, 3, 3, 3), {"strides": [2147483647, 2], "pads": [1, 1, 1, 1]}),
    ((1, 2, 4, 5), (2, 2, 1, 2), {"dilations": [2147483647, 1]}),  # one tap on that axis
])
def test_conv_int32_max_stride_and_dilation(xs, ws, attrs):
    """A stride of INT32_MAX leaves one window per axis and a one-tap axis reads the same with any
    dilation: ORT computes both, so does the EP (it had refused them as past 32 bits)."""
    check("Conv", [("x", rand(xs), "feed"), ("w", rand(ws, seed=1), "init")], attrs, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("xs,ws,attrs", [
    ((2, 1, 3), (2, 1, 2), {"strides": [2147483647], "pads": [0, 2147483647]}),  # attribute fuzz pool, seed 761596
    ((1, 2, 5, 4), (3, 2, 3, 3), {"strides": [2147483647, 1], "pads": [1, 0, 2147483642, 1]}),
    ((1, 2, 7), (2, 2, 3), {"strides": [(1 << 30) + 3], "dilations": [2], "pads": [0, 2147483647]}),
    ((1, 2, 7), (2, 2, 2), {"strides": [2147483647], "pads": [2147483647, 0]}),  # the head pad's window
    ((1, 2, 3), (2, 2, 1), {"strides": [(1 << 30) + 7], "pads": [5, (1 << 30) + 1]}),  # every window in padding
    ((1, 2, 4, 3), (3, 2, 2, 2), {"strides": [2147483647, 2147483647], "pads": [(1 << 30) + 3, 0, 4, 2147483647]}),
])
def test_conv_windows_past_the_input_in_a_huge_pad(xs, ws, attrs):
    """Pads past MLX's 32-bit padding (ORT answers): the windows that lie wholly in them read only
    zeros, so they give the bias; the others are convolved with the pads they need. (A sweep of 476
    such 1-D forms, pads and strides up to 2^31 - 1, agreed with ORT when this was written.)"""
    args = [("x", rand(xs), "feed"), ("w", rand(ws, seed=1), "init"), ("b", rand((ws[0],), seed=2), "init")]
    check("Conv", args, attrs, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("xs,ws,attrs", CONV_CASES[:6])
def test_conv_float16(xs, ws, attrs):
    args = [("x", rand(xs, np.float16), "feed"), ("w", rand(ws, np.float16, 1), "init"),
            ("b", rand((ws[0],), np.float16, 2), "init")]
    check("Conv", args, attrs)


def test_conv_float64():
    x, w, b = rand((1, 3, 8, 8)), rand((4, 3, 3, 3), seed=1), rand((4,), seed=2)
    attrs = {"pads": [1, 1, 1, 1], "strides": [2, 1]}
    m32, f32 = build("Conv", [("x", x, "feed"), ("w", w, "init"), ("b", b, "init")], attrs)
    m64, f64 = build("Conv", [("x", x.astype(np.float64), "feed"), ("w", w.astype(np.float64), "init"),
                              ("b", b.astype(np.float64), "init")], attrs)
    got = run_mlx(m64, f64)[0]
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, run_cpu(m32, f32)[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("opset", [1, 11])
def test_conv_old_opset(opset):
    check("Conv", [("x", rand((1, 2, 6, 6)), "feed"), ("w", rand((3, 2, 3, 3), seed=1), "init")],
          {"pads": [1, 1, 1, 1]}, opset=opset, rtol=1e-4, atol=1e-4)


# ---- ConvTranspose ------------------------------------------------------------------------------

CONVT_CASES = [
    ((1, 3, 5), (3, 2, 3), {}),
    ((1, 4, 6), (4, 2, 3), {"group": 2, "strides": [2], "pads": [1, 0], "output_padding": [1]}),
    ((1, 3, 4, 4), (3, 2, 3, 3), {}),
    ((2, 2, 5, 4), (2, 3, 3, 2), {"strides": [2, 3], "pads": [1, 0, 1, 2]}),
    ((1, 2, 4, 5), (2, 3, 3, 3), {"strides": [3, 2], "output_padding": [1, 1]}),
    ((1, 2, 4, 5), (2, 3, 3, 3), {"strides": [2, 2], "dilations": [2, 2], "pads": [2, 1, 0, 3]}),
    ((1, 4, 3, 3), (4, 1, 3, 3), {"group": 4, "strides": [2, 2]}),
    ((1, 6, 3, 4), (6, 2, 2, 3), {"group": 3, "strides": [2, 1], "dilations": [1, 2]}),
    ((1, 2, 3, 3), (2, 3, 3, 3), {"strides": [3, 2], "output_shape": [10, 8]}),
    ((1, 2, 3, 3), (2, 3, 3, 3), {"strides": [3, 2], "output_shape": [9, 6], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 3, 3), (2, 3, 3, 3), {"strides": [2, 2], "output_shape": [6, 7]}),
    ((1, 2, 3, 3), (2, 3, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 3, 4), (2, 3, 4, 3), {"strides": [2, 3], "auto_pad": "SAME_LOWER"}),
    ((1, 2, 3, 3), (2, 3, 3, 3), {"strides": [2, 2], "auto_pad": "VALID"}),
    ((1, 2, 3, 3), (2, 3, 2, 2), {"pads": [3, 3, 3, 3], "strides": [4, 4]}),  # crops past d*(k-1)
    ((1, 2, 3, 4, 3), (2, 2, 2, 3, 2), {"strides": [2, 1, 2], "pads": [0, 1, 0, 1, 0, 1]}),
    ((1, 4, 3, 3, 3), (4, 1, 2, 2, 2), {"group": 2, "strides": [2, 2, 2], "output_padding": [1, 0, 1]}),
]


@pytest.mark.parametrize("xs,ws,attrs", CONVT_CASES)
@pytest.mark.parametrize("kind", ["init", "feed"])
@pytest.mark.parametrize("bias", [False, True])
def test_conv_transpose(xs, ws, attrs, kind, bias):
    args = [("x", rand(xs), "feed"), ("w", rand(ws, seed=1), kind)]
    if bias:
        args.append(("b", rand((ws[1] * attrs.get("group", 1),), seed=2), kind))
    check("ConvTranspose", args, attrs, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("attrs", [{"output_padding": [0, 1]}, {"strides": [2, 2], "output_padding": [2, 0]},
                                   {"strides": [2, 2], "output_padding": [0, 2], "output_shape": [7, 8]}])
def test_conv_transpose_output_padding_past_stride(attrs):
    """ORT refuses an output_padding of max(stride, dilation) or more (output_shape or not): so does the
    EP, naming the node's op and the axis (found by the attribute fuzz pool, seed 440637)."""
    model, feeds = build("ConvTranspose", [("x", rand((1, 2, 3, 3)), "feed"), ("w", rand((2, 3, 2, 2), seed=1), "init")],
                         attrs)
    with pytest.raises(Exception, match=r"output_padding"):
        run_cpu(model, feeds)
    with pytest.raises(Exception, match=r"\(ConvTranspose\): output_padding\[\d\] \(\d\) must be less than max\(stride, dilation\)"):
        run_mlx(model, feeds)


@pytest.mark.parametrize("xs,ws,attrs", CONVT_CASES[2:5])
def test_conv_transpose_float16(xs, ws, attrs):
    args = [("x", rand(xs, np.float16), "feed"), ("w", rand(ws, np.float16, 1), "init")]
    check("ConvTranspose", args, attrs)


# ---- ConvInteger / QLinearConv ------------------------------------------------------------------

def qrand(shape, dtype, seed=0):
    info = np.iinfo(dtype)
    return np.random.default_rng(seed).integers(info.min, info.max + 1, size=shape).astype(dtype)


@pytest.mark.parametrize("xt,wt", [(np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.int8)])
@pytest.mark.parametrize("attrs", [{}, {"pads": [1, 1, 1, 1], "strides": [2, 1]}, {"group": 2}])
def test_conv_integer(xt, wt, attrs):
    x, w = qrand((1, 4, 6, 6), xt), qrand((4, 4 // attrs.get("group", 1), 3, 3), wt, 1)
    args = [("x", x, "feed"), ("w", w, "init"), ("xz", np.array(xt(3)), "init"), ("wz", np.array(wt(5)), "init")]
    check("ConvInteger", args, attrs, out_dtype=TensorProto.INT32, opset=10)


def test_conv_integer_no_zero_points():
    x, w = qrand((1, 2, 5, 5), np.uint8), qrand((3, 2, 2, 2), np.uint8, 1)
    check("ConvInteger", [("x", x, "feed"), ("w", w, "feed")], out_dtype=TensorProto.INT32, opset=10)


@pytest.mark.parametrize("xt,wt", [(np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.int8)])
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_qlinear_conv(xt, wt, per_channel, bias):
    m = 4
    x, w = qrand((1, 3, 7, 7), xt), qrand((m, 3, 3, 3), wt, 1)
    if xt == np.uint8 and wt == np.int8:
        # ORT's AVX2 u8s8 kernel saturates int16 pair sums of 8-bit weights; we are exact. Keep
        # weights to 7 bits so both agree.
        w = (w // 2).astype(np.int8)
    wscale = (np.linspace(0.01, 0.03, m) if per_channel else np.array(0.02)).astype(np.float32)
    wzero = np.zeros(m, wt) if per_channel else np.array(wt(0) if wt == np.int8 else wt(7))
    args = [("x", x, "feed"), ("xs", np.array(0.05, np.float32), "init"), ("xz", np.array(xt(3)), "init"),
            ("w", w, "init"), ("ws", wscale, "init"), ("wz", wzero, "init"),
            ("ys", np.array(0.7, np.float32), "init"), ("yz", np.array(xt(5)), "init")]
    if bias:
        args.append(("b", np.random.default_rng(3).integers(-500, 500, m).astype(np.int32), "init"))
    check("QLinearConv", args, {"pads": [1, 1, 1, 1]}, opset=10)


# ---- edge cases ---------------------------------------------------------------------------------

@pytest.mark.parametrize("op,ws", [("Conv", (3, 2, 3, 3)), ("ConvTranspose", (2, 3, 3, 3))])
def test_empty_batch(op, ws):
    check(op, [("x", np.zeros((0, 2, 5, 5), np.float32), "feed"), ("w", rand(ws), "init")], {"pads": [1, 1, 1, 1]})


def test_conv_dynamic_shapes():
    """Symbolic dims: the geometry is computed from the concrete shapes of each Run."""
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], strides=[2, 2])
    model = make_model([node], [("x", TensorProto.FLOAT, ["n", 3, "h", "w"])], [("y", TensorProto.FLOAT, None)],
                       [("w", rand((4, 3, 3, 3), seed=1))])
    for shape in [(1, 3, 8, 8), (2, 3, 5, 9)]:
        assert_parity(model, {"x": rand(shape)}, rtol=1e-4, atol=1e-4)


# ---- DeformConv ---------------------------------------------------------------------------------

DEFORM_CASES = [
    # (x shape, w shape, attrs, offset scale)
    ((1, 2, 5, 5), (3, 2, 3, 3), {}, 1.0),
    ((2, 4, 6, 7), (4, 2, 3, 2), {"group": 2, "offset_group": 2, "pads": [1, 0, 1, 2], "strides": [2, 1]}, 1.5),
    ((1, 6, 8, 8), (6, 3, 3, 3), {"group": 2, "offset_group": 3, "dilations": [2, 1], "pads": [2, 1, 2, 1]}, 3.0),
    ((1, 3, 7, 5), (2, 3, 1, 1), {"strides": [3, 2]}, 0.5),
    ((1, 2, 4, 4), (2, 2, 2, 2), {"kernel_shape": [2, 2], "pads": [1, 1, 1, 1]}, 6.0),  # many taps outside
]


def deform_args(xs, ws, attrs, scale, dtype=np.float32, mask=False, bias=False, seed=0, w_kind="init"):
    n, c, h, w_in = xs
    m, _, kh, kw = ws
    pads, strides, dil = attrs.get("pads", [0, 0, 0, 0]), attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1])
    oh = (h + pads[0] + pads[2] - dil[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (w_in + pads[1] + pads[3] - dil[1] * (kw - 1) - 1) // strides[1] + 1
    og = attrs.get("offset_group", 1)
    rng = np.random.default_rng(seed)
    args = [("x", rand(xs, seed=seed).astype(dtype), "feed"), ("w", rand(ws, seed=seed + 1).astype(dtype), w_kind),
            ("off", (rng.standard_normal((n, og * 2 * kh * kw, oh, ow)) * scale).astype(dtype), "feed"),
            ("b", rand((m,), seed=seed + 2).astype(dtype), "init") if bias else None]
    if mask:
        args.append(("mask", rng.uniform(-0.5, 1.5, (n, og * kh * kw, oh, ow)).astype(dtype), "feed"))
    while args[-1] is None:
        args.pop()
    return args


@pytest.mark.parametrize("xs,ws,attrs,scale", DEFORM_CASES)
@pytest.mark.parametrize("mask,bias", [(False, False), (True, True), (True, False)])
def test_deform_conv(xs, ws, attrs, scale, mask, bias):
    check("DeformConv", deform_args(xs, ws, attrs, scale, mask=mask, bias=bias), attrs, rtol=1e-5, atol=1e-5, opset=22)


@pytest.mark.parametrize("opset", [19, 22])
def test_deform_conv_float64_and_runtime_weights(opset):
    xs, ws, attrs, scale = DEFORM_CASES[1]
    check("DeformConv", deform_args(xs, ws, attrs, scale, dtype=np.float64, mask=True, bias=True, w_kind="feed"), attrs,
          rtol=1e-12, atol=1e-12, opset=opset)


def test_deform_conv_integral_offsets_and_zero_mask():
    """Offsets landing on whole pixels and on the -1 / H borders, a mask with zeros (and -0.0): the
    taps ORT skips or zeroes."""
    args = deform_args((1, 2, 5, 5), (2, 2, 3, 3), {}, 1.0, mask=True)
    off = np.round(args[2][1] * 2)
    off[0, 0, 0, 0], off[0, 1, 1, 1] = -1.0, 5.0  # the first tap at row -1, another past the last column
    mask = args[4][1]
    mask[0, :, 0, :] = 0.0
    mask[0, 0, 1, 1] = -0.0
    args[2], args[4] = ("off", off.astype(np.float32), "feed"), ("mask", mask, "feed")
    check("DeformConv", args, {}, rtol=1e-5, atol=1e-5, opset=22)


def test_deform_conv_empty_batch():
    xs, ws, attrs, scale = DEFORM_CASES[0]
    args = deform_args(xs, ws, attrs, scale)
    args = [(n, a[:0] if n in ("x", "off") else a, k) for n, a, k in args]
    check("DeformConv", args, attrs, opset=22)


def test_deform_conv_declines_float16(tmp_path):
    """ORT's CPU EP has no float16 DeformConv kernel to compare with: the node is declined."""
    from parity import claim_report
    args = deform_args((1, 2, 5, 5), (2, 2, 3, 3), {}, 1.0, dtype=np.float16)
    model, _ = build("DeformConv", args, {}, opset=22)
    text = claim_report(model, tmp_path, session_may_fail=True)
    assert re.search(r"DeformConv.*float16", text), text


# ---- FusedConv (com.microsoft) ------------------------------------------------------------------

FUSED_ACTS = [("Relu", None), ("LeakyRelu", [0.15]), ("Tanh", None), ("Sigmoid", None), ("Clip", [-0.4, 0.6]),
              ("HardSigmoid", [0.3, 0.45]), ("HardSwish", None)]


def fused_conv_model(xs, ws, dtype, act, params, attrs, bias, z):
    t = TensorProto.FLOAT if dtype == np.float32 else TensorProto.FLOAT16
    names = ["x", "w", "b" if bias or z else "", "z" if z else ""]
    while names[-1] == "":
        names.pop()
    kw = {"activation": act, **attrs}
    if params:
        kw["activation_params"] = params
    node = helper.make_node("FusedConv", names, ["y"], domain="com.microsoft", **kw)
    ins = [("x", t, list(xs)), ("w", t, list(ws))]
    return node, ins, t


@pytest.mark.parametrize("act,params", FUSED_ACTS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("with_z", [False, True])
def test_fused_conv(act, params, dtype, with_z):
    xs, ws, attrs = (1, 3, 7, 6), (4, 3, 3, 3), {"pads": [1, 1, 1, 0], "strides": [1, 2]}
    node, ins, t = fused_conv_model(xs, ws, dtype, act, params, attrs, bias=True, z=with_z)
    x, w = rand(xs, seed=1).astype(dtype), rand(ws, seed=2).astype(dtype)
    feeds, inits = {"x": x, "w": w}, [("b", rand((4,), seed=3).astype(dtype))]
    if with_z:
        ins.append(("z", t, [1, 4, 7, 3]))
        feeds["z"] = rand((1, 4, 7, 3), seed=4).astype(dtype)
    ins = [i for i in ins if i[0] != "w"]
    inits.append(("w", w))
    del feeds["w"]
    model = make_model([node], ins, [("y", t, None)], inits, domains=[("com.microsoft", 1)])
    tol = 2e-2 if dtype == np.float16 else 1e-5
    assert_parity(model, feeds, rtol=tol, atol=tol)


def test_fused_conv_1d_group_no_bias():
    node = helper.make_node("FusedConv", ["x", "w"], ["y"], domain="com.microsoft", activation="Relu", group=2)
    model = make_model([node], [("x", TensorProto.FLOAT, [2, 4, 9])], [("y", TensorProto.FLOAT, None)],
                       [("w", rand((6, 2, 3), seed=5))], domains=[("com.microsoft", 1)])
    assert_parity(model, {"x": rand((2, 4, 9), seed=6)}, rtol=1e-5, atol=1e-5)


def test_fused_conv_declines_unknown_activation(tmp_path):
    from parity import claim_report
    node = helper.make_node("FusedConv", ["x", "w"], ["y"], domain="com.microsoft", activation="Elu")
    model = make_model([node], [("x", TensorProto.FLOAT, [1, 2, 5, 5])], [("y", TensorProto.FLOAT, None)],
                       [("w", rand((3, 2, 3, 3), seed=5))], domains=[("com.microsoft", 1)])
    assert "activation 'Elu'" in claim_report(model, tmp_path, session_may_fail=True)


# ---- CausalConvWithState (com.microsoft) -------------------------------------------------------

CAUSAL_CASES = [  # (batch, channels, length, k, dilation, activation, past, bias)
    (2, 4, 5, 3, 1, "silu", True, True),
    (1, 3, 1, 4, 1, "none", True, True),  # one decode step
    (2, 4, 2, 4, 2, "swish", True, False),  # the state longer than the input
    (1, 2, 6, 3, 1, "none", False, False),  # a prompt without state
    (3, 8, 7, 2, 3, "silu", False, True),
]


@pytest.mark.parametrize("b,ch,length,k,dil,act,past,bias", CAUSAL_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_causal_conv_with_state(b, ch, length, k, dil, act, past, bias, dtype):
    t = TensorProto.FLOAT if dtype == np.float32 else TensorProto.FLOAT16
    names = ["x", "w", "b" if bias else "", "p" if past else ""]
    while names[-1] == "":
        names.pop()
    node = helper.make_node("CausalConvWithState", names, ["y", "state"], domain="com.microsoft", activation=act,
                            dilation=dil)
    state = (k - 1) * dil
    ins = [("x", t, [b, ch, length]), ("w", t, [ch, 1, k])] + ([("b", t, [ch])] if bias else []) \
        + ([("p", t, [b, ch, state])] if past else [])
    model = make_model([node], ins, [("y", t, None), ("state", t, None)], domains=[("com.microsoft", 1)])
    feeds = {name: rand(tuple(shape), seed=i).astype(dtype) for i, (name, _, shape) in enumerate(ins)}
    tol = 1e-2 if dtype == np.float16 else 1e-5
    assert_parity(model, feeds, rtol=tol, atol=tol)


def test_causal_conv_streaming_matches_one_pass():
    """Chunks fed with the carried state give the one-pass result over the whole sequence."""
    from parity import run_mlx
    b, ch, k = 1, 4, 4
    node = helper.make_node("CausalConvWithState", ["x", "w", "", "p"], ["y", "state"], domain="com.microsoft",
                            activation="silu")
    model = make_model([node], [("x", TensorProto.FLOAT, [b, ch, "t"]), ("p", TensorProto.FLOAT, [b, ch, k - 1])],
                       [("y", TensorProto.FLOAT, None), ("state", TensorProto.FLOAT, None)], [("w", rand((ch, 1, k), seed=2))],
                       domains=[("com.microsoft", 1)])
    x = rand((b, ch, 9), seed=3)
    whole = run_mlx(model, {"x": x, "p": np.zeros((b, ch, k - 1), np.float32)})[0]
    state, parts = np.zeros((b, ch, k - 1), np.float32), []
    for lo, hi in [(0, 4), (4, 5), (5, 9)]:
        y, state = run_mlx(model, {"x": x[:, :, lo:hi], "p": state})
        parts.append(y)
    np.testing.assert_allclose(np.concatenate(parts, axis=2), whole, rtol=1e-6, atol=1e-6)
