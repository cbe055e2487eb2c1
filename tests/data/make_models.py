"""Writes the small ONNX models kept in tests/data/ (run it again after changing a model here):
add_relu.onnx, which the C API test program (tests/c/test_c_api.c) loads: y = Relu(a + b) with
a, b, y float[2, 3]."""
from __future__ import annotations

import os

import onnx
from onnx import TensorProto, helper

HERE = os.path.dirname(os.path.abspath(__file__))


def make_add_relu() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["sum"], name="add"),
         helper.make_node("Relu", ["sum"], ["y"], name="relu")],
        "add_relu",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    # IR 8 / opset 17: old enough for every ORT release with plugin EPs (1.22+).
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="onnxruntime-ep-mlx tests/data/make_models.py")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


MODELS = {"add_relu.onnx": make_add_relu}


def main() -> None:
    for name, make in MODELS.items():
        path = os.path.join(HERE, name)
        onnx.save(make(), path)
        print(f"wrote {os.path.relpath(path)}")


if __name__ == "__main__":
    main()
