"""Hostile divisors, loss targets and data-derived sizes: integer Div/Mod by zero, NLL/softmax
cross-entropy targets outside [0, C), and Expand/ConstantOfShape/Tile/Range sizes far beyond
memory, against ORT's CPU EP."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from hostile import I32_MIN, check_hostile, check_refused, node_model

F = TensorProto.FLOAT


@pytest.mark.parametrize("op,attrs,what", [("Div", {}, "division"), ("Mod", {}, "modulo"),
                                            ("Mod", {"fmod": 1}, "modulo")])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8])
def test_integer_divisor_zero(op, attrs, what, dtype):
    a = np.array([7, 5, 9], dtype)
    model = node_model(op, [("a", a), ("b", a)], [{np.int32: TensorProto.INT32, np.int64: TensorProto.INT64,
                                                    np.uint8: TensorProto.UINT8}[dtype]], attrs=attrs)
    check_hostile(model, {"a": a, "b": np.array([1, 0, 2], dtype)}, {"a": a, "b": np.array([1, 3, 2], dtype)},
                  rf"integer {what} by zero")


def test_integer_div_negative_accepted():
    a = np.array([7, -7, I32_MIN + 1], np.int32)
    model = node_model("Div", [("a", a), ("b", a)], [TensorProto.INT32])
    check_hostile(model, {"a": a, "b": np.array([-2, 2, -1], np.int32)}, {"a": a, "b": np.ones(3, np.int32)}, None)


LOGP = np.log(np.full((3, 4), 0.25, np.float32))


@pytest.mark.parametrize("target", [4, -1, 10**9, np.iinfo(np.int64).min])
@pytest.mark.parametrize("op", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
def test_loss_target_out_of_range(op, target):
    model = node_model(op, [("x", LOGP), ("t", np.zeros(3, np.int64))], [F])
    check_hostile(model, {"x": LOGP, "t": np.array([0, target, 3], np.int64)},
                  {"x": LOGP, "t": np.array([0, 1, 3], np.int64)}, rf"target {target} out of range \[0, 4\)")


@pytest.mark.parametrize("op", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
def test_loss_ignore_index_accepted(op):
    model = node_model(op, [("x", LOGP), ("t", np.zeros(3, np.int64))], [F], attrs={"ignore_index": -100})
    check_hostile(model, {"x": LOGP, "t": np.array([0, -100, 3], np.int64)},
                  {"x": LOGP, "t": np.array([0, 1, 3], np.int64)}, None)


HUGE = r"more than the memory limit|too large|does not fit"


def test_expand_beyond_memory():
    x = np.ones(1, np.float32)
    model = node_model("Expand", [("x", x), ("s", np.array([1, 1], np.int64))], [F])
    check_hostile(model, {"x": x, "s": np.array([2**20, 2**20], np.int64)}, {"x": x, "s": np.array([2, 3], np.int64)},
                  HUGE)


def test_constant_of_shape_beyond_memory():
    s = np.array([2**20, 2**20], np.int64)
    model = node_model("ConstantOfShape", [("s", s)], [F])
    check_hostile(model, {"s": s}, {"s": np.array([3, 2], np.int64)}, HUGE)


@pytest.mark.parametrize("shape", [[2**32, 2**32], [2**62, 5], [3, 2**63 - 1]])
def test_constant_of_shape_int_value_overflowing_count(shape):
    """An int64 value takes a host path for small counts: a count that overflows int64 (2^32 x 2^32
    wrapped to 0) must not look small (found by UBSan under tools/fuzz's data pool)."""
    s = np.array(shape, np.int64)
    model = node_model("ConstantOfShape", [("s", s)], [TensorProto.INT64],
                       attrs={"value": helper.make_tensor("value", TensorProto.INT64, [1], [7])})
    check_hostile(model, {"s": s}, {"s": np.array([3, 2], np.int64)}, HUGE, reference_in_child=True)


def test_tile_beyond_memory():
    x = np.ones((2, 2), np.float32)
    model = node_model("Tile", [("x", x), ("r", np.array([1, 1], np.int64))], [F])
    check_hostile(model, {"x": x, "r": np.array([2**19, 2**19], np.int64)}, {"x": x, "r": np.array([2, 1], np.int64)},
                  HUGE)


@pytest.mark.parametrize("reps", [[2**29, 3], [2**29 + 1, 3], [2**40, 3], [3, 2**62], [1, 2**40]])
def test_tile_of_empty_input(reps):
    """Nothing to repeat: an empty result, which ORT still refuses when the output's nonzero dims
    multiply past 4 GiB (found by tools/fuzz's data pool)."""
    x = np.ones((2, 0), np.float32)
    model = node_model("Tile", [("x", x), ("r", np.array([1, 1], np.int64))], [F])
    check_hostile(model, {"x": x, "r": np.array(reps, np.int64)}, {"x": x, "r": np.array([2, 1], np.int64)},
                  r"more than 4294967296 bytes")


def test_range_beyond_memory():
    a, d = np.array(0, np.int64), np.array(1, np.int64)
    model = node_model("Range", [("a", a), ("b", a), ("d", d)], [TensorProto.INT64])
    check_refused(model, {"a": a, "b": np.array(10**13, np.int64), "d": d}, HUGE, reference_in_child=True)


def test_session_lives_after_refusals():
    """After every kind of refusal the same session answers the next Run."""
    x = np.ones(1, np.float32)
    model = node_model("Expand", [("x", x), ("s", np.array([1, 1], np.int64))], [F])
    import onnxruntime_ep_mlx as mlx_ep
    sess = mlx_ep.session(model, strict=True)
    for _ in range(3):
        with pytest.raises(Exception, match=HUGE):
            sess.run(None, {"x": x, "s": np.array([2**30, 2**30], np.int64)})
        assert sess.run(None, {"x": x, "s": np.array([2, 2], np.int64)})[0].shape == (2, 2)
