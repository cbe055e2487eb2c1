"""Clustering: convexity (no unclaimed node between two members of one fused node) and merging
(a branch starting at another graph input joins the main cluster). Counts come from the claim
report; values are checked against ORT's CPU EP."""
import re

import numpy as np
from onnx import TensorProto, helper

import onnxruntime_ep_mlx as mlx_ep
from parity import make_model, run_cpu

F = TensorProto.FLOAT


def clusters_and_outputs(tmp_path, model, feeds, strict=False):
    report = tmp_path / "report.txt"
    sess = mlx_ep.session(model, options={"report": str(report)}, strict=strict)
    outs = sess.run(None, feeds)
    m = re.search(r"claimed: (\d+), declined: (\d+), clusters: (\d+)", report.read_text())
    return tuple(int(g) for g in m.groups()), outs


def test_unclaimed_node_between_members_splits_the_cluster(tmp_path):
    # a = x + x feeds both Inverse (unclaimed) and the final Mul: {a, Mul} in one fused node would
    # need Inverse's output inside it and its input outside it, a cycle. Expect two clusters.
    nodes = [helper.make_node("Add", ["x", "x"], ["a"]),
             helper.make_node("Inverse", ["a"], ["u"], domain="com.microsoft"),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Mul", ["u", "r"], ["y"])]
    model = make_model(nodes, [("x", F, [2, 3, 3])], [("y", F, [2, 3, 3])], domains=[("com.microsoft", 1)])
    x = np.random.default_rng(0).standard_normal((2, 3, 3)).astype(np.float32) + 3 * np.eye(3, dtype=np.float32)
    (claimed, declined, clusters), outs = clusters_and_outputs(tmp_path, model, {"x": x})
    assert (claimed, declined, clusters) == (3, 1, 2)
    np.testing.assert_allclose(outs[0], run_cpu(model, {"x": x})[0], rtol=1e-4, atol=1e-5)


def test_branch_from_another_input_joins_the_main_cluster(tmp_path):
    # The mask chain starts at its own graph input; the main chain's Add consumes it.
    nodes = [helper.make_node("Sub", ["one", "mask"], ["inv"]),
             helper.make_node("Mul", ["inv", "big"], ["bias"]),
             helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Add", ["h", "bias"], ["s"]),
             helper.make_node("Softmax", ["s"], ["y"], axis=-1)]
    rng = np.random.default_rng(1)
    inits = {"one": np.array(1.0, np.float32), "big": np.array(-1e4, np.float32),
             "w": rng.standard_normal((4, 5)).astype(np.float32)}
    model = make_model(nodes, [("x", F, [3, 4]), ("mask", F, [3, 5])], [("y", F, [3, 5])], initializers=inits)
    feeds = {"x": rng.standard_normal((3, 4)).astype(np.float32),
             "mask": (rng.random((3, 5)) > 0.3).astype(np.float32)}
    (claimed, declined, clusters), outs = clusters_and_outputs(tmp_path, model, feeds, strict=True)
    assert (declined, clusters) == (0, 1)  # ORT may fuse MatMul+Add first: count no nodes
    np.testing.assert_allclose(outs[0], run_cpu(model, feeds)[0], rtol=1e-5, atol=1e-6)
