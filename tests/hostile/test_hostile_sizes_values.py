"""Hostile scales, sizes and values: Resize scales 0/negative/NaN/inf/1e10 and sizes 0/negative/huge,
Range counts past memory or int64 and NaN/inf bounds, com.microsoft Attention mask_index past T or
negative, DeformConv offsets far outside the image (against ORT's CPU EP); DeformConv's NaN offset
(NaN at its position, where ORT's conversion is undefined); Unique with NaN and integer Pow overflow / 0^-n (against the
documented rules, NumPy's and wraparound, where ORT's answer is wrong or platform-dependent)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from hostile import MS, check_hostile, check_refused, node_model
from parity import make_model
import onnxruntime_ep_mlx as mlx_ep

F = TensorProto.FLOAT
HUGE = r"more than the memory limit|too large"
X = np.arange(8, dtype=np.float32).reshape(1, 1, 2, 4)


@pytest.mark.parametrize("scale,match", [(0.0, r"scale value should be greater than 0"),
                                         (-1.0, r"scale value should be greater than 0"),
                                         (np.nan, r"scale value must be finite"), (np.inf, r"scale value must be finite"),
                                         (-np.inf, r"scale value must be finite"), (1e30, HUGE)])
def test_resize_scales(scale, match):
    _check_resize_scale(scale, match)


def test_resize_scale_beyond_memory():
    """ORT's CPU EP, the reference, tries to allocate the terabyte (so `make sanitize` leaves it out;
    on the H200 host it killed the test worker, so it runs in a child process)."""
    _check_resize_scale(1e10, HUGE, reference_in_child=True)


def _check_resize_scale(scale, match, reference_in_child=False):
    model = node_model("Resize", [("x", X), ("roi", None), ("s", np.ones(4, np.float32))], [F],
                       attrs={"mode": "nearest"}, opset=19)
    check_hostile(model, {"x": X, "s": np.array([1, 1, scale, 2], np.float32)},
                  {"x": X, "s": np.array([1, 1, 2, 2], np.float32)}, match, reference_in_child=reference_in_child)


@pytest.mark.parametrize("scale", [0.3, 1e-10])
def test_resize_scales_to_empty_accepted(scale):
    model = node_model("Resize", [("x", X), ("roi", None), ("s", np.ones(4, np.float32))], [F],
                       attrs={"mode": "linear"}, opset=19)
    check_hostile(model, {"x": X, "s": np.array([1, 1, scale, 2], np.float32)},
                  {"x": X, "s": np.array([1, 1, 2, 2], np.float32)}, None)


@pytest.mark.parametrize("size,match", [(0, r"scale value should be greater than 0"),
                                        (-1, r"scale value should be greater than 0"),
                                        (-(2**40), r"scale value should be greater than 0"),
                                        (2**62, HUGE)])
def test_resize_sizes(size, match):
    _check_resize_size(size, match)


def test_resize_size_beyond_memory():
    """ORT's CPU EP, the reference, tries to allocate the 16 TB (so `make sanitize` leaves it out;
    on the H200 host it killed the test worker, so it runs in a child process)."""
    _check_resize_size(2**40, HUGE, reference_in_child=True)


def _check_resize_size(size, match, reference_in_child=False):
    model = node_model("Resize", [("x", X), ("roi", None), ("s", None), ("z", np.ones(4, np.int64))], [F],
                       attrs={"mode": "nearest"}, opset=19)
    check_hostile(model, {"x": X, "z": np.array([1, 1, size, 4], np.int64)},
                  {"x": X, "z": np.array([1, 1, 3, 4], np.int64)}, match, reference_in_child=reference_in_child)


def _range(dtype, onnx_type):
    z = np.array(0, dtype)
    return node_model("Range", [("a", z), ("b", z), ("d", z)], [onnx_type])


def test_range_int_count_out_of_range():
    _check_range_count(-(2**63), 2**63 - 1, 1, r"exceeds the supported range")


@pytest.mark.parametrize("a,b,d", [(0, 10**13, 1), (0, 2**62, 3)])
def test_range_int_count_beyond_memory(a, b, d):
    """ORT's CPU EP, the reference, tries to allocate the elements (so `make sanitize` leaves it out;
    on the H200 host it killed the test worker, so it runs in a child process)."""
    _check_range_count(a, b, d, HUGE, reference_in_child=True)


def _check_range_count(a, b, d, match, reference_in_child=False):
    model = _range(np.int64, TensorProto.INT64)
    feeds = {"a": np.array(a, np.int64), "b": np.array(b, np.int64), "d": np.array(d, np.int64)}
    check_refused(model, feeds, match, reference_in_child=reference_in_child)


def test_range_long_integer_accepted():
    """Past the host-built length the integer range is built in the graph; values wrap like ORT."""
    model = _range(np.int64, TensorProto.INT64)
    check_hostile(model, {"a": np.array(-5, np.int64), "b": np.array(10**5, np.int64), "d": np.array(7, np.int64)},
                  {"a": np.array(0, np.int64), "b": np.array(5, np.int64), "d": np.array(1, np.int64)}, None)
    model = _range(np.int32, TensorProto.INT32)
    check_hostile(model, {"a": np.array(3, np.int32), "b": np.array(-(10**5), np.int32), "d": np.array(-3, np.int32)},
                  {"a": np.array(0, np.int32), "b": np.array(5, np.int32), "d": np.array(1, np.int32)}, None)


NAN, INF = np.nan, np.inf


@pytest.mark.parametrize("a,b,d", [(NAN, 1, 1), (0, NAN, 1), (0, 1, NAN), (0, INF, 1), (-INF, 0, 1), (INF, INF, 1),
                                   (0, -INF, -1), (0, 1, INF), (0, 1, -INF)])
def test_range_float_bounds(a, b, d):
    _check_range_float(a, b, d)


@pytest.mark.parametrize("a,b,d", [(0, 1e13, 1), (0, 1, 1e-13)])
def test_range_float_count_beyond_memory(a, b, d):
    """ORT's CPU EP, the reference, tries to allocate the elements (so `make sanitize` leaves it
    out); on the H200 host that killed the test worker, so it runs in a child process."""
    _check_range_float(a, b, d, reference_in_child=True)


def _check_range_float(a, b, d, reference_in_child=False):
    model = _range(np.float32, F)
    check_hostile(model, {"a": np.array(a, np.float32), "b": np.array(b, np.float32), "d": np.array(d, np.float32)},
                  {"a": np.array(0, np.float32), "b": np.array(3, np.float32), "d": np.array(1, np.float32)},
                  r"not a finite value|" + HUGE, reference_in_child=reference_in_child)


UNIQUE_X = [np.array([2, np.nan, 1, np.nan, 2, 3], np.float32), np.array([np.nan, np.nan], np.float32),
            np.array([np.nan, -0.0, 0.0, np.inf, np.nan, -np.inf], np.float32), np.array([5, 4], np.float32)]


@pytest.mark.parametrize("x", UNIQUE_X)
@pytest.mark.parametrize("sorted_", [1, 0])
def test_unique_nan_follows_numpy(x, sorted_):
    """NumPy (equal_nan=True) and the ONNX reference: all NaNs are one value, sorted last; sorted=0
    orders the values by first occurrence as the reference does. ORT's own answer differs."""
    model = node_model("Unique", [("x", x)], [F] + [TensorProto.INT64] * 3, attrs={"sorted": sorted_})
    y, idx, inv, cnt = np.unique(x, return_index=True, return_inverse=True, return_counts=True)
    if not sorted_:
        order = np.argsort(idx, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        y, idx, cnt, inv = y[order], idx[order], cnt[order], rank[inv]
    sess = mlx_ep.session(model, strict=True)
    for _ in range(3):
        got = sess.run(None, {"x": x})
        np.testing.assert_array_equal(got[0], y)
        for g, w in zip(got[1:], (idx, inv.reshape(-1), cnt)):
            np.testing.assert_array_equal(g, w.astype(np.int64))


def _wrap_pow(a, b, bits):
    """The documented rule: repeated multiplication wrapping in the type; negative exponents give
    ORT's truncated answers (1 and -1 keep their power, every other base, 0 included, gives 0)."""
    if b < 0:
        return 1 if a == 1 else (-1) ** (-b) if a == -1 else 0
    v = (a**b) % 2**bits
    return v - 2**bits if v >= 2 ** (bits - 1) else v


@pytest.mark.parametrize("dtype,onnx_type,bits", [(np.int32, TensorProto.INT32, 32), (np.int64, TensorProto.INT64, 64)])
def test_integer_pow_overflow_and_zero_negative(dtype, onnx_type, bits):
    a = np.array([0, 0, 2, 3, -2, 10, 7, 1, -1, -1, 2, -3, 5], dtype)
    b = np.array([-1, -2, 40, 50, -1, 30, 100, -7, -3, 4, 62, 41, 0], dtype)
    model = node_model("Pow", [("a", a), ("b", b)], [onnx_type])
    want = np.array([_wrap_pow(int(x), int(y), bits) for x, y in zip(a, b)], dtype)
    sess = mlx_ep.session(model, strict=True)
    for _ in range(3):
        np.testing.assert_array_equal(sess.run(None, {"a": a, "b": b})[0], want)


R = np.random.default_rng(0)
AX = R.standard_normal((2, 3, 8)).astype(np.float32)
AW = R.standard_normal((8, 24)).astype(np.float32)
AB = np.zeros(24, np.float32)


@pytest.mark.parametrize("mi", [[3, 4], [5, 10**9], [0, 2**31 - 1], [-1, 2], [2, -(2**31)],
                                [3, 10**9, 0, 1], [1, 4, 2, -1], [-1, 2, 0, 0]])
def test_attention_mask_index(mi):
    """End positions past T show every key (ORT accepts); negative end positions are refused."""
    mi = np.array(mi, np.int32)
    model = node_model("Attention", [("x", AX), ("w", AW), ("b", AB), ("mi", np.zeros(len(mi), np.int32))], [F],
                       attrs={"num_heads": 2}, domain=MS, consts={"w", "b"})
    good = np.array([3, 2] if len(mi) == 2 else [3, 2, 0, 1], np.int32)
    check_hostile(model, {"x": AX, "mi": mi}, {"x": AX, "mi": good}, r"mask_index value -?\d+ is negative",
                  tol=(1e-4, 1e-4))


def _deform_model():
    x = np.arange(2 * 5 * 5, dtype=np.float32).reshape(1, 2, 5, 5) / 10
    w = np.linspace(-1, 1, 3 * 2 * 3 * 3, dtype=np.float32).reshape(3, 2, 3, 3)
    off = np.zeros((1, 18, 3, 3), np.float32)
    return node_model("DeformConv", [("x", x), ("w", w), ("off", off)], [F], opset=22, consts=("w",)), x


@pytest.mark.parametrize("value", [np.inf, -np.inf, 1e30, -1e30, 3e9, -2.5e9])
def test_deform_conv_offsets_far_outside(value):
    """Offsets far outside the image (and past int32 once floored): ORT reads 0 for such taps."""
    model, x = _deform_model()
    off = np.random.default_rng(0).standard_normal((1, 18, 3, 3)).astype(np.float32)
    off[0, 0, 1, 1], off[0, 7, 2, 0] = value, value
    check_hostile(model, {"x": x, "off": off}, {"x": x, "off": np.zeros_like(off)}, None)


def test_deform_conv_nan_offset_gives_nan():
    """A NaN offset: ORT converts floor(NaN) to an int (undefined; on x86 it then reads outside the
    image). The EP gives NaN at that output position and reads nothing outside; every other
    position equals ORT's answer with that offset 0."""
    model, x = _deform_model()
    off = np.random.default_rng(1).standard_normal((1, 18, 3, 3)).astype(np.float32)
    sess = mlx_ep.session(model, strict=True)
    clean = off.copy()
    clean[0, 4, 1, 2] = 0.0
    import onnxruntime as ort
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x, "off": clean})[0]
    off[0, 4, 1, 2] = np.nan
    for _ in range(3):  # eager, traced, replayed
        got = sess.run(None, {"x": x, "off": off})[0]
        assert np.isnan(got[0, :, 1, 2]).all()
        keep = np.ones(got.shape, bool)
        keep[0, :, 1, 2] = False
        np.testing.assert_allclose(got[keep], want[keep], rtol=1e-5, atol=1e-5)


# ---- sizes and axes read from data by the contrib forms and the ops added on 2026-12-04 ------------

PAD_X = np.arange(12, dtype=np.float32).reshape(3, 4)


@pytest.mark.parametrize("domain", ["", MS])
@pytest.mark.parametrize("pads,match", [([0, 2**40, 0, 0], HUGE), ([0, 0, 0, 2**62], HUGE),
                                        ([-5, 0, 0, 0], r"crop axis 0 below zero"),
                                        ([0, -(2**63), 0, 0], r"crop axis 1 below zero")])
def test_pad_sizes_from_data(domain, pads, match):
    """Pads fed as data (ai.onnx Pad 18 and the contrib Pad): past memory or cropping below zero."""
    model = node_model("Pad", [("x", PAD_X), ("p", np.zeros(4, np.int64))], [F], domain=domain,
                       opset=18 if not domain else 21)
    check_hostile(model, {"x": PAD_X, "p": np.array(pads, np.int64)}, {"x": PAD_X, "p": np.array([0, 1, 1, 0], np.int64)},
                  match, reference_in_child=True)


@pytest.mark.parametrize("mode", ["edge", "reflect", "wrap"])
def test_pad_crop_to_nothing(mode):
    """A non-empty input cropped to nothing along an axis leaves edge, reflect and wrap nothing to pad
    from: ORT fails even when nothing grows (found by tools/fuzz's data pool)."""
    model = node_model("Pad", [("x", PAD_X), ("p", np.zeros(4, np.int64))], [F], attrs={"mode": mode})
    for bad in ([1, 0, 0, -4], [0, 0, 0, -4], [-3, 1, 0, 0]):
        check_hostile(model, {"x": PAD_X, "p": np.array(bad, np.int64)}, {"x": PAD_X, "p": np.array([0, 0, 0, -1], np.int64)},
                      r"crop axis \d to nothing")


@pytest.mark.parametrize("mode", ["edge", "reflect"])
def test_pad_empty_input(mode):
    """An empty input: edge and reflect may give an empty output, but not grow an axis of size 0."""
    x = np.zeros((2, 0), np.float32)
    model = node_model("Pad", [("x", x), ("p", np.zeros(4, np.int64))], [F], attrs={"mode": mode})
    check_hostile(model, {"x": x, "p": np.array([0, 1, 0, 0], np.int64)}, {"x": x, "p": np.array([1, 0, 0, 0], np.int64)},
                  r"cannot pad axis 1 of size 0")
    x3 = np.zeros((8, 0, 2), np.float32)
    model = node_model("Pad", [("x", x3), ("p", np.zeros(6, np.int64))], [F], attrs={"mode": mode})
    check_hostile(model, {"x": x3, "p": np.array([-7, 0, 3, 9, 0, 1], np.int64)},
                  {"x": x3, "p": np.array([1, 0, 0, 0, 0, 0], np.int64)}, None)


@pytest.mark.parametrize("mode", ["edge", "reflect", "wrap"])
def test_pad_extent_overflows(mode):
    """Pads whose sum with the extent overflows int64, in the modes with nothing-to-pad-from rules
    (found by UBSan under tools/fuzz's data pool)."""
    model = node_model("Pad", [("x", PAD_X), ("p", np.zeros(4, np.int64))], [F], attrs={"mode": mode})
    check_hostile(model, {"x": PAD_X, "p": np.array([0, 2**63 - 1, 0, 5], np.int64)},
                  {"x": PAD_X, "p": np.array([0, 1, 0, 1], np.int64)}, r"too large|more than the memory limit|exceed",
                  reference_in_child=True)


def test_pad_wrap_empty_input():
    x = np.zeros((2, 0), np.float32)
    model = node_model("Pad", [("x", x), ("p", np.zeros(4, np.int64))], [F], attrs={"mode": "wrap"})
    check_refused(model, {"x": x, "p": np.array([1, 0, 0, 0], np.int64)}, r"wrap mode cannot pad an empty input")


@pytest.mark.parametrize("size", [[2, 1, 4, 0], [2, 1, 0, 3], [2, 1, -1, 3], [2, 1, 4, -(2**63)]])
def test_affine_grid_size_not_positive(size):
    """ORT refuses a spatial size of 0 or less, an empty grid included (found by tools/fuzz's data pool)."""
    theta = np.zeros((2, 2, 3), np.float32)
    model = node_model("AffineGrid", [("t", theta), ("s", np.zeros(4, np.int64))], [F])
    check_hostile(model, {"t": theta, "s": np.array(size, np.int64)}, {"t": theta, "s": np.array([2, 1, 4, 3], np.int64)},
                  r"must be positive")


@pytest.mark.parametrize("shape", [[2**63 - 1, 2], [2, -1, 2**63 - 1], [2**32, 2**32, 0, 0], [2**62, 4, -1]])
def test_reshape_shape_overflowing(shape):
    """A shape whose known dims overflow int64 as they multiply (found by UBSan under tools/fuzz's data
    pool; [2^32, 2^32, 0, 0] fails first on its 0s, which copy dims the input lacks)."""
    x = np.arange(6, dtype=np.float32)
    model = node_model("Reshape", [("x", x), ("s", np.zeros(len(shape), np.int64))], [F])
    check_hostile(model, {"x": x, "s": np.array(shape, np.int64)}, {"x": x, "s": np.array([6] + [1] * (len(shape) - 1),
                                                                                          np.int64)},
                  r"cannot reshape|cannot infer|copies a dimension")


@pytest.mark.parametrize("sizes", [[2**63 - 1, 3], [3, 2**63 - 1], [-1, 6], [2**62, 2**62]])
def test_split_sizes_from_data(sizes):
    """Split sizes that overflow int64 as they add up (found by UBSan under tools/fuzz's data pool)."""
    x = np.arange(5, dtype=np.float32)
    node = helper.make_node("Split", ["x", "s"], ["a", "b"], axis=0)
    model = make_model([node], [("x", F, [5]), ("s", TensorProto.INT64, [2])], [("a", F, None), ("b", F, None)])
    check_hostile(model, {"x": x, "s": np.array(sizes, np.int64)}, {"x": x, "s": np.array([2, 3], np.int64)},
                  r"split size|add to")


@pytest.mark.parametrize("axis", [3, -4, 2**31 - 1, -(2**31)])
def test_expand_dims_axis_from_data(axis):
    model = node_model("ExpandDims", [("x", PAD_X), ("a", np.array(0, np.int32))], [F], domain=MS)
    check_hostile(model, {"x": PAD_X, "a": np.array(axis, np.int32)}, {"x": PAD_X, "a": np.array(-1, np.int32)},
                  r"outside \[-3, 2\]")


CROP_X = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)


def _crop_feeds(size, index=0):
    return {"x": CROP_X, "r": np.array([[0.1, 0.2, 0.9, 0.8]], np.float32), "b": np.array([index], np.int32),
            "s": np.array(size, np.int32)}


@pytest.mark.parametrize("size,index,match", [([2**31 - 1, 2**31 - 1], 0, HUGE),
                                              ([-3, 2], 0, r"crop_size must not be negative"),
                                              ([2, 2], 2**31 - 1, r"batch index"), ([2, 2], -(2**31), r"batch index")])
def test_crop_and_resize_sizes_and_indices(size, index, match):
    model = node_model("CropAndResize", [("x", CROP_X), ("r", np.zeros((1, 4), np.float32)), ("b", np.zeros(1, np.int32)),
                                         ("s", np.zeros(2, np.int32))], [F], domain=MS)
    check_hostile(model, _crop_feeds(size, index), _crop_feeds([2, 3]), match, reference_in_child=True)


def test_contrib_range_count_beyond_memory():
    """The contrib Range (no delta: 1) takes ai.onnx Range's count checks."""
    z = np.array(0, np.int64)
    model = node_model("Range", [("a", z), ("b", z)], [TensorProto.INT64], domain=MS)
    check_refused(model, {"a": z, "b": np.array(10**13, np.int64)}, HUGE, reference_in_child=True)


# ---- found by an audit of the sizes read at Run (2026-12-04): heap overflow, division by zero and
# signed overflow before any check ---------------------------------------------------------------

@pytest.mark.parametrize("x_shape,img,blk", [((1, 4, 1), [2**32, 2**32], [2**32, 2**32]),  # K wrapped to 0: SIGFPE
                                             ((1, 0, 0), [1, 2**60], [2, 1]),  # table bytes wrapped: heap overflow
                                             ((1, 4, 1), [2**62, 2**62], [2, 2])])
def test_col2im_shapes_from_data(x_shape, img, blk):
    x = np.zeros(x_shape, np.float32)
    good_x = np.zeros((1, 4, 9), np.float32)
    node = helper.make_node("Col2Im", ["x", "i", "b"], ["y"])
    model = make_model([node], [("x", F, [None, None, None]), ("i", TensorProto.INT64, [2]), ("b", TensorProto.INT64, [2])],
                       [("y", F, None)], opset=18)
    bad = {"x": x, "i": np.array(img, np.int64), "b": np.array(blk, np.int64)}
    good = {"x": good_x, "i": np.array([4, 4], np.int64), "b": np.array([2, 2], np.int64)}
    sess = mlx_ep.session(model, strict=True)
    for feeds in (good, bad, good, bad):
        if feeds is bad:
            with pytest.raises(Exception, match=r"overflow|memory limit|input must be|MLX dimension|does not fit"):
                sess.run(None, feeds)
        else:
            sess.run(None, feeds)


@pytest.mark.parametrize("size", [[1, 1, 2**62 + 1, 1], [1, 1, 2**31, 2], [1, 1, 2**20, 2**20]])
def test_affine_grid_size_too_large(size):
    """size[2] = 2^62 + 1 wrapped its base table's bytes: a heap overflow before."""
    theta = np.zeros((1, 2, 3), np.float32)
    model = node_model("AffineGrid", [("t", theta), ("s", np.zeros(4, np.int64))], [F])
    check_hostile(model, {"t": theta, "s": np.array(size, np.int64)}, {"t": theta, "s": np.array([1, 1, 3, 4], np.int64)},
                  r"MLX dimension|memory limit", reference_in_child=True)


def test_split_to_sequence_sizes_overflow():
    x = np.zeros(4, np.float32)
    n1 = helper.make_node("SplitToSequence", ["x", "s"], ["q"])
    n2 = helper.make_node("SequenceLength", ["q"], ["y"])
    model = make_model([n1, n2], [("x", F, [4]), ("s", TensorProto.INT64, [2])], [("y", TensorProto.INT64, [])])
    check_hostile(model, {"x": x, "s": np.array([1, 2**63 - 1], np.int64)}, {"x": x, "s": np.array([1, 3], np.int64)},
                  r"sum to more than")


@pytest.mark.parametrize("sizes,policy", [([0, 2**62], None), ([2**62, 4], "not_smaller"), ([3, 2**31], None)])
def test_resize_sizes_too_large(sizes, policy):
    """An empty axis no longer switches the size check off for the others (their tables were built);
    keep_aspect_ratio_policy's product is checked before its conversion."""
    x = np.zeros((0, 2) if sizes[0] == 0 else (1, 4), np.float32)
    attrs = {"mode": "cubic"} if policy is None else {"keep_aspect_ratio_policy": policy}
    model = node_model("Resize", [("x", x), ("r", None), ("c", None), ("s", np.zeros(2, np.int64))], [F], attrs=attrs,
                       opset=19)
    good = np.array([0, 4] if sizes[0] == 0 else [2, 8], np.int64)
    check_hostile(model, {"x": x, "s": np.array(sizes, np.int64)}, {"x": x, "s": good},
                  r"MLX dimension|too large|memory limit", reference_in_child=True)


def test_roi_align_scaled_roi_not_finite():
    """rois finite in float32 become inf - inf = NaN once scaled: refused before any conversion."""
    x = np.zeros((1, 1, 4, 4), np.float32)
    b = np.zeros(1, np.int64)
    model = node_model("RoiAlign", [("x", x), ("r", np.zeros((1, 4), np.float32)), ("b", b)], [F],
                       attrs={"spatial_scale": 2.0}, opset=16)
    sess = mlx_ep.session(model, strict=True)
    with pytest.raises(Exception, match=r"past int64|finite"):
        sess.run(None, {"x": x, "r": np.array([[3e38, 0, 3e38, 1]], np.float32), "b": b})
    sess.run(None, {"x": x, "r": np.array([[0, 0, 2, 2]], np.float32), "b": b})


NORMS = [("LayerNormalization", 17), ("RMSNormalization", 23)]


@pytest.mark.parametrize("op,opset", NORMS)
@pytest.mark.parametrize("x_shape,scale_shape,axis", [([1, 3], [3, 1], -2), ([1], [0], 0), ([2, 4], [1, 2, 4], 1)])
def test_norm_scale_not_broadcastable_to_x(op, opset, x_shape, scale_shape, axis):
    """LayerNormalization's and RMSNormalization's Scale must broadcast one way to X (ORT 1.31's CPU
    kernels: no higher in rank, every dimension 1 or X's); ORT refuses the rest and so does the EP,
    where MLX's two-way broadcast would have given Y another shape than X's (found by the fuzzer,
    seeds 792108 and 792943)."""
    x = np.linspace(-1, 1, int(np.prod(x_shape)), dtype=np.float32).reshape(x_shape)
    scale = np.full(scale_shape, 0.5, np.float32)
    node = helper.make_node(op, ["x", "s"], ["y"], axis=axis)
    model = make_model([node], [("x", F, x_shape), ("s", F, scale_shape)], [("y", F, None)], opset=opset)
    check_refused(model, {"x": x, "s": scale}, op + r".*must match X.shape\[axis:\] or be NumPy-broadcastable")


@pytest.mark.parametrize("op,opset", NORMS)
def test_norm_scale_per_row(op, opset):
    """A Scale that varies over the rows before the normalized axis, which ORT 1.31 accepts (one way to X)."""
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    good = {"x": x, "s": np.array([[0.5], [2.0]], np.float32)}
    node = helper.make_node(op, ["x", "s"], ["y"], axis=1)
    model = make_model([node], [("x", F, [2, 4]), ("s", F, [2, 1])], [("y", F, None)], opset=opset)
    check_hostile(model, good, good, None)
