"""The memory_limit option: MLX's process-wide memory limit, below which data-derived sizes are
refused. A small limit is set in a child process so the rest of the suite keeps MLX's default."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto

from hostile import node_model
import onnxruntime_ep_mlx as mlx_ep

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = r"""
import sys
sys.path[:0] = [{tests!r}, {hostile!r}, {python!r}]
import numpy as np
from onnx import TensorProto
from hostile import node_model
import onnxruntime_ep_mlx as mlx_ep
x = np.ones(1, np.float32)
model = node_model("Expand", [("x", x), ("s", np.array([1], np.int64))], [TensorProto.FLOAT])
sess = mlx_ep.session(model, options={{"memory_limit": str(1 << 24)}}, strict=True)
assert sess.run(None, {{"x": x, "s": np.array([1 << 20], np.int64)}})[0].shape == (1 << 20,)
try:
    sess.run(None, {{"x": x, "s": np.array([1 << 23], np.int64)}})
    print("accepted")
except Exception as e:
    print("refused:", e)
print(sess.run(None, {{"x": x, "s": np.array([3], np.int64)}})[0].shape)
"""


def test_memory_limit_option_refuses_large_outputs():
    root = os.path.dirname(os.path.dirname(HERE))
    code = CHILD.format(tests=os.path.join(root, "tests"), hostile=HERE, python=os.path.join(root, "python"))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "refused:" in r.stdout and "33554432 bytes, more than the memory limit (16777216 bytes)" in r.stdout
    assert r.stdout.strip().endswith("(3,)")


@pytest.mark.parametrize("value", ["12", "-5", "lots"])
def test_memory_limit_option_invalid(value):
    x = np.ones(1, np.float32)
    model = node_model("Expand", [("x", x), ("s", np.array([1], np.int64))], [TensorProto.FLOAT])
    with pytest.raises(Exception, match="memory_limit"):
        mlx_ep.session(model, options={"memory_limit": value}, strict=True)
