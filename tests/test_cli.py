"""The command line (python -m onnxruntime_ep_mlx): inspect prints the claim report, run checks
parity against ORT's CPU EP, bench prints medians; a bad EP option fails with the EP's message."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper

from parity import child_pythonpath, make_model

ROOT = Path(__file__).resolve().parent.parent
F = TensorProto.FLOAT


def cli(*args, check=True) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": child_pythonpath()}
    out = subprocess.run([sys.executable, "-m", "onnxruntime_ep_mlx", *map(str, args)], capture_output=True,
                         text=True, env=env)
    if check:
        assert out.returncode == 0, out.stdout + out.stderr
    return out


def split_model(tmp_path) -> Path:
    """Add -> Inverse (no row claims it) -> Mul, with a symbolic batch dimension."""
    nodes = [helper.make_node("Add", ["x", "x"], ["s"]),
             helper.make_node("Inverse", ["s"], ["d"], domain="com.microsoft"),
             helper.make_node("Mul", ["d", "c"], ["y"])]
    path = tmp_path / "split.onnx"
    path.write_bytes(make_model(nodes, [("x", F, ["batch", 3, 3])], [("y", F, None)],
                                initializers={"c": np.array([1.5, -2.0, 0.5], np.float32)},
                                domains=[("com.microsoft", 1)]))
    return path


def test_inspect(tmp_path):
    out = cli("inspect", split_model(tmp_path)).stdout
    assert "claim report" in out and "claimed: 2, declined: 1, clusters: 2" in out, out
    assert "declined com.microsoft::Inverse x1: no MLX lowering" in out, out
    assert "session providers: MLXExecutionProvider, CPUExecutionProvider" in out, out


def test_run_and_bench(tmp_path):
    model = split_model(tmp_path)
    out = cli("run", model, "--dim", "batch=2", "--runs", "3", "-o", "compile=off").stdout
    assert "inputs: x[2, 3, 3] float32" in out and "parity: OK" in out, out
    assert "MLX's CPU BLAS: " in out, out  # which BLAS the timings below ran on
    np.save(tmp_path / "x.npy", np.eye(3, dtype=np.float32)[None].repeat(4, axis=0))
    out = cli("run", model, "--input", f"x={tmp_path / 'x.npy'}", "--runs", "2").stdout
    assert "inputs: x[4, 3, 3] float32" in out and "parity: OK" in out, out
    out = cli("bench", ROOT / "tests" / "data" / "add_relu.onnx", "--runs", "5", "--warmup", "1", "--strict").stdout
    assert "MLXExecutionProvider" in out and "EP / CPU EP" in out, out


def test_bad_option(tmp_path):
    out = cli("inspect", split_model(tmp_path), "-o", "devcie=gpu", check=False)
    assert out.returncode != 0 and "unknown option 'devcie'" in out.stderr, out.stderr
