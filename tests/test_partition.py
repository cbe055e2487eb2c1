"""Clustering: convexity (no unclaimed node between two members of one fused node) and merging
(a branch starting at another graph input joins the main cluster), on small graphs, on wide ones
(thousands of parallel branches form one cluster) and on random DAGs. Counts come from the claim
report; values are checked against ORT's CPU EP."""
import gc
import re

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxruntime_ep_mlx as mlx_ep
from parity import make_model, run_cpu

F = TensorProto.FLOAT


def clusters_and_outputs(tmp_path, model, feeds, strict=False):
    """((claimed, declined, clusters) of the last claim report, outputs of one Run). Also checks
    that ORT compiled every cluster, with all the claimed nodes (ORT drops, with only a logged
    error, a fused node whose members have an outside node on a path between them)."""
    report = tmp_path / "report.txt"
    sess = mlx_ep.session(model, options={"report": str(report)}, strict=strict)
    outs = sess.run(None, feeds)
    del sess  # the run report is written when the session releases its clusters
    gc.collect()
    text = report.read_text()
    counts = tuple(int(g) for g in re.findall(r"claimed: (\d+), declined: (\d+), clusters: (\d+)", text)[-1])
    compiled = [int(n) for n in re.findall(r"run report: cluster '[^']*' \((\d+) nodes\)", text)]
    assert (len(compiled), sum(compiled)) == (counts[2], counts[0]), text
    return counts, outs


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


# ---- wide graphs: many parallel branches -------------------------------------------------------

def wide_nodes(branches, combine, broken=None):
    """x -> [Mul(x, c_i) -> Relu] for each branch, joined by one Sum or a chain of Adds. c_i differ,
    so that ORT's common-subexpression elimination keeps every branch. broken: a branch whose Mul
    and Relu get an Inverse (unclaimed) between them."""
    nodes, outs, inits = [], [], {}
    for i in range(branches):
        inits[f"c{i}"] = np.array(1.0 + i / branches, np.float32)
        mid = f"m{i}"
        nodes.append(helper.make_node("Mul", ["x", f"c{i}"], [mid]))
        if i == broken:
            nodes.append(helper.make_node("Inverse", [mid], [f"v{i}"], domain="com.microsoft"))
            mid = f"v{i}"
        nodes.append(helper.make_node("Relu", [mid], [f"r{i}"]))
        outs.append(f"r{i}")
    if combine == "sum":
        nodes.append(helper.make_node("Sum", outs, ["y"]))
    else:
        acc = outs[0]
        for i, r in enumerate(outs[1:]):
            name = "y" if i == len(outs) - 2 else f"s{i}"
            nodes.append(helper.make_node("Add", [acc, r], [name]))
            acc = name
    return nodes, inits


@pytest.mark.parametrize("combine", ["sum", "add_chain"])
def test_wide_graph_forms_one_cluster(tmp_path, combine):
    # 1000 branches used to become ~936 clusters (merged one pair per pass, at most 64 passes).
    nodes, inits = wide_nodes(1000, combine)
    model = make_model(nodes, [("x", F, [2, 4])], [("y", F, [2, 4])], initializers=inits)
    feeds = {"x": np.random.default_rng(2).standard_normal((2, 4)).astype(np.float32)}
    (claimed, declined, clusters), outs = clusters_and_outputs(tmp_path, model, feeds, strict=True)
    assert (claimed, declined, clusters) == (len(nodes), 0, 1)
    np.testing.assert_allclose(outs[0], run_cpu(model, feeds)[0], rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("combine", ["sum", "add_chain"])
def test_wide_graph_with_an_unclaimed_node_in_one_branch(tmp_path, combine):
    # Branch 3 is Mul -> Inverse (unclaimed) -> Relu. Its Mul cannot join the others: the path
    # Mul -> Inverse -> Relu -> (Sum or Adds) would leave the fused node and come back. Everything
    # else, its Relu included, forms one cluster: two in all.
    nodes, inits = wide_nodes(200, combine, broken=3)
    model = make_model(nodes, [("x", F, [2, 3, 3])], [("y", F, [2, 3, 3])], initializers=inits,
                       domains=[("com.microsoft", 1)])
    rng = np.random.default_rng(3)
    feeds = {"x": (rng.standard_normal((2, 3, 3)) / 4 + np.eye(3)).astype(np.float32)}
    (claimed, declined, clusters), outs = clusters_and_outputs(tmp_path, model, feeds)
    assert (claimed, declined, clusters) == (len(nodes) - 1, 1, 2)
    np.testing.assert_allclose(outs[0], run_cpu(model, feeds)[0], rtol=1e-4, atol=1e-3)


def test_unclaimed_node_in_the_middle_of_a_path(tmp_path):
    # x -> Add a -> Inverse -> Relu b -> Mul(b, a) -> Tanh: {Add} and {Relu, Mul, Tanh}; Add cannot
    # join the second cluster (a -> Inverse -> b would leave it and come back).
    nodes = [helper.make_node("Add", ["x", "x"], ["a"]),
             helper.make_node("Inverse", ["a"], ["u"], domain="com.microsoft"),
             helper.make_node("Relu", ["u"], ["b"]),
             helper.make_node("Mul", ["b", "a"], ["m"]),
             helper.make_node("Tanh", ["m"], ["y"])]
    model = make_model(nodes, [("x", F, [2, 3, 3])], [("y", F, [2, 3, 3])], domains=[("com.microsoft", 1)])
    x = np.random.default_rng(4).standard_normal((2, 3, 3)).astype(np.float32) + 3 * np.eye(3, dtype=np.float32)
    (claimed, declined, clusters), outs = clusters_and_outputs(tmp_path, model, {"x": x})
    assert (claimed, declined, clusters) == (4, 1, 2)
    np.testing.assert_allclose(outs[0], run_cpu(model, {"x": x})[0], rtol=1e-4, atol=1e-5)


def test_branch_from_another_input_joins_past_an_unclaimed_node(tmp_path):
    # The main chain has an unclaimed Inverse before the Add that consumes the mask chain. The mask
    # chain (its own graph input) only feeds that Add, so it joins the Add's cluster instead of
    # forming a third one: {Add a} and {Sub, Mul, Relu, Add}.
    nodes = [helper.make_node("Add", ["x", "x"], ["a"]),
             helper.make_node("Inverse", ["a"], ["u"], domain="com.microsoft"),
             helper.make_node("Relu", ["u"], ["r"]),
             helper.make_node("Sub", ["one", "mask"], ["inv"]),
             helper.make_node("Mul", ["inv", "big"], ["bias"]),
             helper.make_node("Add", ["r", "bias"], ["y"])]
    rng = np.random.default_rng(5)
    model = make_model(nodes, [("x", F, [2, 3, 3]), ("mask", F, [2, 3, 3])], [("y", F, [2, 3, 3])],
                       initializers={"one": np.array(1.0, np.float32), "big": np.array(-1e4, np.float32)},
                       domains=[("com.microsoft", 1)])
    feeds = {"x": (rng.standard_normal((2, 3, 3)) + 3 * np.eye(3)).astype(np.float32),
             "mask": (rng.random((2, 3, 3)) > 0.3).astype(np.float32)}
    (claimed, declined, clusters), outs = clusters_and_outputs(tmp_path, model, feeds)
    assert (claimed, declined, clusters) == (5, 1, 2)
    np.testing.assert_allclose(outs[0], run_cpu(model, feeds)[0], rtol=1e-5, atol=1e-4)


# ---- random DAGs: fused nodes never put ORT's graph on a cycle -----------------------------------

def random_dag(seed, n_steps=40):
    """Random DAG over [2, 3, 3] values bounded by 1: Mean, Mul, Tanh, Sin (claimed) and, one step
    in five, Inverse(a + 4I) (Inverse unclaimed; a + 4I is diagonally dominant, so well
    conditioned). Every value no node reads is a graph output."""
    rng = np.random.default_rng(seed)
    nodes, values, read = [], ["x"], set()
    for i in range(n_steps):
        a, b = (values[int(k)] for k in rng.integers(0, len(values), 2))
        kind = rng.choice(["Mean", "Mul", "Tanh", "Sin", "Inverse"], p=[0.25, 0.2, 0.2, 0.15, 0.2])
        out = f"v{i}"
        if kind == "Inverse":
            nodes += [helper.make_node("Add", [a, "eye4"], [f"d{i}"]),
                      helper.make_node("Inverse", [f"d{i}"], [out], domain="com.microsoft")]
            read.add(a)
        elif kind in ("Mean", "Mul"):
            nodes.append(helper.make_node(kind, [a, b], [out]))
            read.update((a, b))
        else:
            nodes.append(helper.make_node(kind, [a], [out]))
            read.add(a)
        values.append(out)
    outputs = [(v, F, [2, 3, 3]) for v in values[1:] if v not in read]
    model = make_model(nodes, [("x", F, [2, 3, 3])], outputs,
                       initializers={"eye4": 4 * np.eye(3, dtype=np.float32)}, domains=[("com.microsoft", 1)])
    return model, nodes


@pytest.mark.parametrize("seed", range(12))
def test_random_dag_clusters_are_convex(tmp_path, seed):
    # ORT refuses a session whose fused nodes form a cycle (a fused node not convex); the values
    # must match ORT's CPU EP.
    model, nodes = random_dag(seed)
    feeds = {"x": np.random.default_rng(100 + seed).uniform(-1, 1, (2, 3, 3)).astype(np.float32)}
    (claimed, declined, clusters), outs = clusters_and_outputs(tmp_path, model, feeds)
    # ORT's common-subexpression elimination may drop repeated nodes before the EP sees them
    assert declined >= 1 and claimed + declined <= len(nodes) and clusters >= 1
    for got, want in zip(outs, run_cpu(model, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
