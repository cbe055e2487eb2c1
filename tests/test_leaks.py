"""The C program (register, session, Run, release, unregister) under valgrind: no memory the EP
allocates may be lost. Skipped where valgrind is missing."""
import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind not installed")
def test_c_program_leaks_nothing():
    exe = os.path.join(ROOT, "build", "test_c_api")
    lib = os.path.join(ROOT, "build", "libonnxruntime_ep_mlx.so")
    model = os.path.join(ROOT, "tests", "data", "add_relu.onnx")
    p = subprocess.run(["valgrind", "--leak-check=full", "--show-leak-kinds=definite,indirect", exe, lib, model],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr[-4000:]
    assert "test_c_api: OK" in p.stdout
    lost = {k: int(v.replace(",", "")) for k, v in re.findall(r"(definitely|indirectly) lost: ([\d,]+) bytes", p.stderr)}
    assert lost == {"definitely": 0, "indirectly": 0}, p.stderr[-4000:]
