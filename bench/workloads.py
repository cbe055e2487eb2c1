"""Benchmark workloads: each returns (model bytes, feeds). Weights are random with fixed seeds."""
from __future__ import annotations

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))
LIGHT = os.path.join(ROOT, "third_party/root/usr/share/libonnx-testdata/data/light")


def tiny():
    """One Add on 4 floats: measures per-Run overhead."""
    g = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"])], "tiny",
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4]) for n in "ab"],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    feeds = {"a": np.ones(4, np.float32), "b": np.arange(4, dtype=np.float32)}
    return m.SerializeToString(), feeds


def mlp10(hidden=64):
    """A 10-node MLP, (MatMul, Add, Relu) x 3 + MatMul, batch 1: overhead-bound."""
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(3):
        w, b = f"w{i}", f"b{i}"
        inits += [numpy_helper.from_array((rng.standard_normal((hidden, hidden)) / 8).astype(np.float32), w),
                  numpy_helper.from_array(rng.standard_normal(hidden).astype(np.float32), b)]
        nodes += [helper.make_node("MatMul", [x, w], [f"m{i}"]), helper.make_node("Add", [f"m{i}", b], [f"a{i}"]),
                  helper.make_node("Relu", [f"a{i}"], [f"r{i}"])]
        x = f"r{i}"
    inits.append(numpy_helper.from_array((rng.standard_normal((hidden, 10)) / 8).astype(np.float32), "wout"))
    nodes.append(helper.make_node("MatMul", [x, "wout"], ["y"]))
    g = helper.make_graph(nodes, "mlp10", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, hidden])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    return m.SerializeToString(), {"x": rng.standard_normal((1, hidden)).astype(np.float32)}


def bert_layer(seq=128):
    """One BERT-base encoder layer (hidden 768, 12 heads, FFN 3072) at sequence 128."""
    from transformer import make_encoder_block, make_inputs
    return make_encoder_block(hidden=768, heads=12, ffn=3072, layers=1), make_inputs(1, seq, 768)


def light_cnn(name="squeezenet"):
    """A libonnx-testdata `light` CNN with its ConstantOfShape weights replaced by random ones."""
    m = onnx.load(os.path.join(LIGHT, f"light_{name}.onnx"))
    rng = np.random.default_rng(0)
    shapes = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    keep_nodes, inits = [], [t for t in m.graph.initializer if not t.name.endswith("__SHAPE")]
    for n in m.graph.node:
        if n.op_type == "ConstantOfShape" and n.input[0] in shapes:
            shape = tuple(int(s) for s in shapes[n.input[0]])
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
            w = (rng.standard_normal(shape) / np.sqrt(max(fan_in, 1))).astype(np.float32)
            inits.append(numpy_helper.from_array(w, n.output[0]))
        else:
            keep_nodes.append(n)
    del m.graph.node[:]
    m.graph.node.extend(keep_nodes)
    del m.graph.initializer[:]
    m.graph.initializer.extend(inits)
    names = {t.name for t in inits}
    inputs = [i for i in m.graph.input if i.name not in names and not i.name.endswith("__SHAPE")]
    del m.graph.input[:]
    m.graph.input.extend(inputs)
    x = inputs[0]
    shape = [d.dim_value or 1 for d in x.type.tensor_type.shape.dim]
    return m.SerializeToString(), {x.name: rng.standard_normal(shape).astype(np.float32)}


WORKLOADS = {
    "tiny_add": tiny,
    "mlp10": mlp10,
    "bert_layer_s128": bert_layer,
    "squeezenet": lambda: light_cnn("squeezenet"),
}
