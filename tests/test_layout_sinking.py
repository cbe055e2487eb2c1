"""Transposes sunk through elementwise work on CPU scopes (src/mlx/bridge.cpp, "transposes sunk"):
an elementwise op, a slice, a concatenation, a reduction or a transpose of a transposed view is done
on the view's source and transposed after. Each graph here puts a Transpose node (or a Conv, which hands back a
channels-first view of its channels-last result) before the op, in the forms the rewrite takes and
the ones it must leave (operands of other permutations, large operands, lower-rank operands that
broadcast), and compares every output with ORT's CPU EP exactly (the rewrite moves no arithmetic:
the same values element for element) on the eager graph, the trace and the replay. The op histogram
shows a Conv -> Relu -> Conv chain keeping no transpose between the convolutions."""
from __future__ import annotations


import numpy as np
import pytest
from onnx import TensorProto, helper

from parity import assert_parity, histogram_probe, make_model, run_mlx_each

F = TensorProto.FLOAT
PERM = [0, 2, 3, 1]  # NCHW -> NHWC
EXACT = dict(rtol=0, atol=0)


def rnd(shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def transposed_then(nodes, inputs, inits=(), outputs=("y",)):
    """x [2, 3, 4, 5] -> Transpose(PERM) -> t, then `nodes` reading t; every output y* checked."""
    graph_nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=PERM)] + nodes
    ins = [("x", F, [2, 3, 4, 5])] + [(n, F, list(v.shape)) for n, v in inputs.items()]
    model = make_model(graph_nodes, ins, [(o, F, None) for o in outputs], list(inits))
    return model, {"x": rnd((2, 3, 4, 5)), **inputs}


@pytest.mark.parametrize("op", ["Relu", "Neg", "Abs"])
def test_unary(op):
    model, feeds = transposed_then([helper.make_node(op, ["t"], ["y"])], {})
    assert_parity(model, feeds, **EXACT)


@pytest.mark.parametrize("op", ["Exp", "Sigmoid", "Tanh"])
def test_unary_transcendental(op):
    # ORT's approximations differ from MLX's: within float32 tolerances of ORT, and bit for bit the
    # EP's own values for the op before the Transpose (the sunk form computed directly)
    model, feeds = transposed_then([helper.make_node(op, ["t"], ["y"])], {})
    (sunk,) = assert_parity(model, feeds, rtol=1e-5, atol=1e-6)
    direct = make_model([helper.make_node(op, ["x"], ["o"]), helper.make_node("Transpose", ["o"], ["y"], perm=PERM)],
                        [("x", F, [2, 3, 4, 5])], [("y", F, None)])
    for (got,) in run_mlx_each(direct, feeds):
        np.testing.assert_array_equal(got, sunk)


@pytest.mark.parametrize("shape", [[3], [4, 1, 3], [5, 3], [1, 1, 1, 3], [2, 4, 5, 3], [], [4, 1, 1]])
@pytest.mark.parametrize("op", ["Add", "Mul", "Max", "Sub"])
def test_binary_with_operand(op, shape):
    # t is [2, 4, 5, 3]: operands that broadcast against it, small (sunk) and as large as t (left)
    b = rnd(shape, 1)
    model, feeds = transposed_then([helper.make_node(op, ["t", "b"], ["y"]), helper.make_node(op, ["b", "t"], ["y2"])],
                                   {"b": b}, outputs=("y", "y2"))
    assert_parity(model, feeds, **EXACT)


def test_binary_both_transposed():
    # the same permutation (sunk) and another one (left)
    nodes = [helper.make_node("Transpose", ["z"], ["u"], perm=PERM), helper.make_node("Add", ["t", "u"], ["y"]),
             helper.make_node("Transpose", ["w"], ["v"], perm=[0, 3, 1, 2]), helper.make_node("Mul", ["t", "v"], ["y2"]),
             helper.make_node("Greater", ["t", "u"], ["y3"])]
    graph = [helper.make_node("Transpose", ["x"], ["t"], perm=PERM)] + nodes
    ins = [("x", F, [2, 3, 4, 5]), ("z", F, [2, 3, 4, 5]), ("w", F, [2, 5, 3, 4])]
    model = make_model(graph, ins, [("y", F, None), ("y2", F, None), ("y3", TensorProto.BOOL, None)])
    assert_parity(model, {"x": rnd((2, 3, 4, 5)), "z": rnd((2, 3, 4, 5), 2), "w": rnd((2, 5, 3, 4), 3)}, **EXACT)


@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1, -3])
def test_concat(axis):
    nodes = [helper.make_node("Transpose", ["z"], ["u"], perm=PERM), helper.make_node("Concat", ["t", "u"], ["y"], axis=axis),
             helper.make_node("Concat", ["t", "x2"], ["y2"], axis=axis)]  # a plain part: left
    graph = [helper.make_node("Transpose", ["x"], ["t"], perm=PERM)] + nodes
    model = make_model(graph, [("x", F, [2, 3, 4, 5]), ("z", F, [2, 3, 4, 5]), ("x2", F, [2, 4, 5, 3])],
                       [("y", F, None), ("y2", F, None)])
    assert_parity(model, {"x": rnd((2, 3, 4, 5)), "z": rnd((2, 3, 4, 5), 2), "x2": rnd((2, 4, 5, 3), 3)}, **EXACT)


@pytest.mark.parametrize("starts,ends,axes,steps", [
    ([1, 0], [3, 2], [1, 3], [1, 1]),
    ([-1, 4], [-100, 0], [2, 1], [-1, -2]),  # negative steps: flipped axes on the source
    ([0, 1, 0, 2], [2, 4, 5, 3], [0, 1, 2, 3], [1, 2, 3, 1]),
])
def test_slice(starts, ends, axes, steps):
    consts = {"s": np.array(starts, np.int64), "e": np.array(ends, np.int64), "a": np.array(axes, np.int64),
              "p": np.array(steps, np.int64)}
    model, feeds = transposed_then([helper.make_node("Slice", ["t", "s", "e", "a", "p"], ["y"])], {}, consts.items())
    assert_parity(model, feeds, **EXACT)


def conv_then(nodes, seed=4):
    """x [2, 6, 13, 11] -> Conv (3x3, 40 channels, padded) -> c, then `nodes` reading c (a channels-last
    result seen channels-first: ORT's own transpose optimizer does not move the view, as it moves a
    Transpose node through a reduction before the EP sees it)."""
    rng = np.random.default_rng(seed)
    graph = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1])] + nodes
    consts = {"w": (rng.standard_normal((40, 6, 3, 3)) * 0.2).astype(np.float32)}
    return graph, consts, {"x": rnd((2, 6, 13, 11), seed)}


@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("axes", [[2, 3], [1], [0, 1], [-1, -2], [3, 2], [0, 1, 2, 3], None])
@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceLogSumExp"])
def test_reduce_of_convolution(op, axes, keepdims):
    """A reduction of the view done on its source, then transposed back (mlxb_reduce): the same
    elements in the same order along each reduced axis."""
    node = helper.make_node(op, ["c", "a"] if axes is not None else ["c"], ["y"], keepdims=keepdims)
    graph, consts, feeds = conv_then([node])
    if axes is not None:
        consts["a"] = np.array(axes, np.int64)
    model = make_model(graph, [("x", F, [2, 6, 13, 11])], [("y", F, None)], consts.items())
    assert_parity(model, feeds, rtol=1e-5, atol=1e-5, options={"device": "cpu"})


@pytest.mark.parametrize("pool", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pool_of_convolution(pool):
    """squeezenet's head: a convolution's output pooled over its positions."""
    graph, consts, feeds = conv_then([helper.make_node("Relu", ["c"], ["r"]), helper.make_node(pool, ["r"], ["y"])])
    model = make_model(graph, [("x", F, [2, 6, 13, 11])], [("y", F, None)], consts.items())
    assert_parity(model, feeds, rtol=1e-5, atol=1e-5, options={"device": "cpu"})


@pytest.mark.parametrize("perm", [[0, 3, 1, 2], [3, 2, 1, 0], [0, 2, 3, 1]])
def test_transpose_of_transpose(perm):
    # [0, 3, 1, 2] undoes PERM (the source itself); the others compose into one transpose
    model, feeds = transposed_then([helper.make_node("Transpose", ["t"], ["y"], perm=perm),
                                    helper.make_node("Relu", ["y"], ["y2"])], {}, outputs=("y", "y2"))
    assert_parity(model, feeds, **EXACT)


def conv_chain():
    w1, w2 = rnd((6, 3, 3, 3), 4) * 0.3, rnd((4, 6, 1, 1), 5) * 0.3
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"]), helper.make_node("Relu", ["c2"], ["y"])]
    return make_model(nodes, [("x", F, [1, 3, 8, 8])], [("y", F, None)],
                      [("w1", w1), ("b1", rnd((6,), 6)), ("w2", w2)]), {"x": rnd((1, 3, 8, 8))}


def test_conv_chain_matches():
    model, feeds = conv_chain()
    assert_parity(model, feeds, rtol=1e-5, atol=1e-5)  # the convolutions' sums: BLAS's order


PROBE = r"""
import sys
sys.path.insert(0, sys.argv[1])
from test_layout_sinking import conv_chain
from parity import run_mlx_each
model, feeds = conv_chain()
run_mlx_each(model, feeds, options={"device": "cpu"})
"""


def chain_program(switch: str) -> str:
    return histogram_probe(PROBE, ORT_EP_MLX_SINK_TRANSPOSES=switch)[1][0]


def test_conv_chain_keeps_channels_last():
    # x to channels-last and the result back: two transposes; none around the Relu or the second Conv
    program = chain_program("1")  # the second Conv (one tap) is a product of the channels-last input
    # the convolutions: MLX's, or the EP's packed GEMM where the CPU has AVX-512 (test_cpu_gemm.py)
    assert "Transpose=2 " in program + " ", program
    assert "Convolution=1" in program or "EpCpuConvPacked=1" in program, program
    assert "Matmul=1" in program or "EpCpuGemmPacked=1" in program, program
    program = chain_program("0")  # without the rewrite: the second Conv's input goes back and forth
    assert "Transpose=4 " in program + " ", program


def test_node_lines_count_each_operation_once():
    # ORT_EP_MLX_OP_HISTOGRAM's node lines (tools/op_histogram.py sums them by op type): the second
    # Conv reads the first's kept channels-last array, not its NCHW input, so a walk stopped at the
    # node's inputs counted the first convolution again in every later node's line
    out, programs = histogram_probe(PROBE, ORT_EP_MLX_SINK_TRANSPOSES="1")
    nodes = [line for line in out.stderr.splitlines() if "] node " in line]
    assert [line.split("(")[1].split(")")[0] for line in nodes] == ["Conv", "Relu", "Conv", "Relu"], nodes
    convolutions = [line for line in nodes if "Convolution=" in line or "EpCpuConvPacked=" in line]
    assert len(convolutions) == 1 and "(Conv)" in convolutions[0], nodes
    counted = sum(int(line.split("): ")[1].split(" ops")[0]) for line in nodes)
    assert counted >= int(programs[0].split(" program: ")[1].split(" ops")[0]), (nodes, programs)
