"""Hostile indices for the indexing ops (Gather, GatherElements, GatherND, ScatterND,
ScatterElements with every reduction, OneHot): values past either end, 1e9, 2^40, INT64_MIN and
INT32_MIN, against ORT's CPU EP on the eager, traced and replayed paths."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from hostile import I32_MIN, I64_MAX, I64_MIN, check_hostile, check_refused, node_model

F = TensorProto.FLOAT
X = np.arange(10, dtype=np.float32).reshape(5, 2)
OOR = r"index -?\d+ out of range \[-\d+, \d+\)"


@pytest.mark.parametrize("idx", [5, 100, 10**9, 2**40, I64_MIN, I64_MAX, -6, -(10**9)])
def test_gather_int64_out_of_range(idx):
    model = node_model("Gather", [("x", X), ("i", np.array([0, 0], np.int64))], [F])
    check_hostile(model, {"x": X, "i": np.array([1, idx], np.int64)}, {"x": X, "i": np.array([1, 0], np.int64)},
                  rf"Gather\): index {idx} out of range \[-5, 5\)")


@pytest.mark.parametrize("idx", [5, I32_MIN, 2**31 - 1])
def test_gather_int32_out_of_range(idx):
    model = node_model("Gather", [("x", X), ("i", np.array([0], np.int32))], [F])
    check_hostile(model, {"x": X, "i": np.array([idx], np.int32)}, {"x": X, "i": np.array([2], np.int32)}, OOR)


@pytest.mark.parametrize("idx", [-5, -1, 4])
def test_gather_edges_accepted(idx):
    model = node_model("Gather", [("x", X), ("i", np.array([0], np.int64))], [F])
    check_hostile(model, {"x": X, "i": np.array([idx], np.int64)}, {"x": X, "i": np.array([0], np.int64)}, None)


def test_gather_axis1_out_of_range():
    model = node_model("Gather", [("x", X), ("i", np.array([0], np.int64))], [F], attrs={"axis": 1})
    check_hostile(model, {"x": X, "i": np.array([2], np.int64)}, {"x": X, "i": np.array([1], np.int64)},
                  r"index 2 out of range \[-2, 2\)")


def test_gather_constant_out_of_range_index():
    """A bad index in an initializer: ORT refuses it at Run; so does the EP."""
    model = node_model("Gather", [("x", X), ("i", np.array([7], np.int64))], [F], consts={"i"})
    check_refused(model, {"x": X}, r"index 7 out of range \[-5, 5\)")


@pytest.mark.parametrize("idx", [5, -6, 10**9, I64_MIN])
def test_gather_elements_out_of_range(idx):
    model = node_model("GatherElements", [("x", X), ("i", np.zeros((2, 2), np.int64))], [F])
    bad = np.array([[0, idx], [1, 1]], np.int64)
    check_hostile(model, {"x": X, "i": bad}, {"x": X, "i": np.array([[0, 4], [-5, 1]], np.int64)}, OOR)


def test_gather_elements_negative_accepted():
    model = node_model("GatherElements", [("x", X), ("i", np.zeros((2, 2), np.int64))], [F], attrs={"axis": 1})
    check_hostile(model, {"x": X, "i": np.array([[-1, -2], [1, 0]], np.int64)},
                  {"x": X, "i": np.zeros((2, 2), np.int64)}, None)


@pytest.mark.parametrize("row", [[5, 0], [0, 2], [-6, 0], [2**40, 0], [0, I64_MIN]])
def test_gather_nd_out_of_range(row):
    model = node_model("GatherND", [("x", X), ("i", np.zeros((2, 2), np.int64))], [F])
    check_hostile(model, {"x": X, "i": np.array([[1, 1], row], np.int64)},
                  {"x": X, "i": np.array([[1, 1], [-1, -1]], np.int64)}, OOR)


@pytest.mark.parametrize("row", [[5, 0], [0, 2], [-6, 0], [I64_MAX, 0]])
def test_contrib_gather_nd_out_of_range(row):
    """com.microsoft GatherND takes the same index rules."""
    model = node_model("GatherND", [("x", X), ("i", np.zeros((2, 2), np.int64))], [F], domain="com.microsoft")
    check_hostile(model, {"x": X, "i": np.array([[1, 1], row], np.int64)},
                  {"x": X, "i": np.array([[1, 1], [-1, -1]], np.int64)}, OOR)


def test_gather_nd_batch_dims_out_of_range():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    model = node_model("GatherND", [("x", x), ("i", np.zeros((2, 1), np.int64))], [F], attrs={"batch_dims": 1})
    check_hostile(model, {"x": x, "i": np.array([[1], [3]], np.int64)}, {"x": x, "i": np.array([[1], [-3]], np.int64)},
                  r"index 3 out of range \[-3, 3\)")


U = np.ones((2, 2), np.float32)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("idx", [5, -6, 10**9])
def test_scatter_nd_out_of_range(reduction, idx):
    model = node_model("ScatterND", [("x", X), ("i", np.zeros((2, 1), np.int64)), ("u", U)], [F],
                       attrs={} if reduction == "none" else {"reduction": reduction})
    check_hostile(model, {"x": X, "i": np.array([[0], [idx]], np.int64), "u": U},
                  {"x": X, "i": np.array([[0], [-1]], np.int64), "u": U}, OOR)


@pytest.mark.parametrize("reduction", ["none", "add", "max"])
@pytest.mark.parametrize("idx", [5, -6, I64_MIN])
def test_scatter_elements_out_of_range(reduction, idx):
    model = node_model("ScatterElements", [("x", X), ("i", np.zeros((1, 2), np.int64)), ("u", U[:1])], [F],
                       attrs={} if reduction == "none" else {"reduction": reduction})
    check_hostile(model, {"x": X, "i": np.array([[idx, 0]], np.int64), "u": U[:1]},
                  {"x": X, "i": np.array([[-5, 4]], np.int64), "u": U[:1]}, OOR)


@pytest.mark.parametrize("idx", [7, -8, 10**9, I64_MIN])
def test_one_hot_out_of_range_gives_off(idx):
    """ORT's CPU EP gives all-off rows for indices outside [-depth, depth); so does the EP."""
    model = node_model("OneHot", [("i", np.zeros(3, np.int64)), ("d", np.array(4, np.int64)),
                                  ("v", np.array([0, 1], np.float32))], [F], consts={"d", "v"})
    check_hostile(model, {"i": np.array([1, idx, -1], np.int64)}, {"i": np.array([0, 1, 2], np.int64)}, None)


# ---- MaxUnpool / ReverseSequence (found by tools/fuzz's data pool: both used to answer where ORT
# refuses, MaxUnpool dropping the position, ReverseSequence clipping the length) -----------------

@pytest.mark.parametrize("idx", [16, -1, 10**12, I64_MIN, I64_MAX])
def test_max_unpool_index_out_of_range(idx):
    x = np.arange(1, 5, dtype=np.float32).reshape(1, 1, 2, 2)
    model = node_model("MaxUnpool", [("x", x), ("i", np.zeros((1, 1, 2, 2), np.int64))], [F],
                       attrs={"kernel_shape": [2, 2], "strides": [2, 2]})
    check_hostile(model, {"x": x, "i": np.array([[[[0, idx], [5, 15]]]], np.int64)},
                  {"x": x, "i": np.array([[[[0, 2], [5, 15]]]], np.int64)}, r"index -?\d+ out of range \[0, 16\)")


@pytest.mark.parametrize("length", [4, -1, 2**40, I64_MIN])
@pytest.mark.parametrize("axes", [(0, 1), (1, 0)])
def test_reverse_sequence_length_out_of_range(length, axes):
    t_axis, b_axis = axes
    x = np.arange(6, dtype=np.float32).reshape((3, 2) if t_axis == 0 else (2, 3))
    model = node_model("ReverseSequence", [("x", x), ("l", np.zeros(2, np.int64))], [F],
                       attrs={"time_axis": t_axis, "batch_axis": b_axis})
    check_hostile(model, {"x": x, "l": np.array([length, 2], np.int64)}, {"x": x, "l": np.array([3, 1], np.int64)},
                  r"sequence length -?\d+ out of range \[0, 4\)")


@pytest.mark.parametrize("shape", [[1, 1, 2**40, 2**40], [1, 1, 2**32, 2**32], [1, 1, 2**62, 8]])
def test_max_unpool_output_shape_from_data(shape):
    """output_shape read from data, its element count past an MLX axis or overflowing int64 (the
    count saturates; found by UBSan's audit after tools/fuzz's data pool)."""
    x = np.arange(1, 5, dtype=np.float32).reshape(1, 1, 2, 2)
    i = np.array([[[[0, 2], [5, 15]]]], np.int64)
    model = node_model("MaxUnpool", [("x", x), ("i", i), ("s", np.zeros(4, np.int64))], [F],
                       attrs={"kernel_shape": [2, 2], "strides": [2, 2]})
    check_hostile(model, {"x": x, "i": i, "s": np.array(shape, np.int64)},
                  {"x": x, "i": i, "s": np.array([1, 1, 4, 4], np.int64)}, r"more than one MLX axis", reference_in_child=True)
