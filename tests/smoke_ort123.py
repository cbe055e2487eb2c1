"""Smoke test of the EP on the oldest ONNX Runtime we support (1.23.x) and a middle one (1.27.x), each
run with its own virtualenv:

    .venv-ort123/bin/python tests/smoke_ort123.py build/libonnxruntime_ep_mlx.so

Registers the plugin library, runs a small Add/Mul/Relu/MatMul/Softmax model with the EP in strict
mode (no CPU fallback) and compares it with ORT's CPU EP. Prints OK; exits 1 on any problem."""
from __future__ import annotations

import os
import sys
import traceback

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

EP_NAME = "MLXExecutionProvider"


def make_model() -> bytes:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 5)).astype(np.float32), "w")
    scale = numpy_helper.from_array(np.array([0.5, -1.0, 2.0, 1.5], np.float32), "scale")
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["sum"]),
         helper.make_node("Mul", ["sum", "scale"], ["scaled"]),
         helper.make_node("Relu", ["scaled"], ["relu"]),
         helper.make_node("MatMul", ["relu", "w"], ["logits"]),
         helper.make_node("Softmax", ["logits"], ["y"], axis=-1)],
        "smoke",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n", 4]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 5])],
        initializer=[w, scale])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def mlx_session(model: bytes) -> ort.InferenceSession:
    devices = [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]
    if not devices:
        raise RuntimeError(f"no OrtEpDevice named {EP_NAME} after registration")
    so = ort.SessionOptions()
    so.add_provider_for_devices(devices, {})
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    # enable_fallback=0: an EP error must fail here, not be retried on the CPU EP alone.
    return ort.InferenceSession(model, sess_options=so, enable_fallback=0)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: {argv[0]} <libonnxruntime_ep_mlx.so>", file=sys.stderr)
        return 1
    if not ort.__version__.startswith(("1.23", "1.27")):
        print(f"smoke_ort123: expected onnxruntime 1.23.x or 1.27.x, got {ort.__version__}", file=sys.stderr)
        return 1
    # Absolute: ORT resolves a relative library path against its own folder.
    ort.register_execution_provider_library(EP_NAME, os.path.abspath(argv[1]))
    model = make_model()
    rng = np.random.default_rng(1)
    cpu = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    mlx = mlx_session(model)
    if mlx.get_providers()[0] != EP_NAME:
        raise RuntimeError(f"session providers are {mlx.get_providers()}")
    for n in (3, 7):
        feeds = {k: rng.standard_normal((n, 4)).astype(np.float32) for k in ("a", "b")}
        want = cpu.run(None, feeds)[0]
        got = mlx.run(None, feeds)[0]
        if got.dtype != want.dtype or got.shape != want.shape:
            raise RuntimeError(f"n={n}: got {got.dtype}{got.shape}, want {want.dtype}{want.shape}")
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"n={n}")
    del mlx
    print(f"smoke_ort123: OK (onnxruntime {ort.__version__})")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except Exception:  # any failure, including an ORT error, is a failed smoke test
        traceback.print_exc()
        print("smoke_ort123: FAILED", file=sys.stderr)
        sys.exit(1)
