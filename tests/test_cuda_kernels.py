"""The EP's own CUDA kernels compile for sm_90 as MLX wraps them (tools/check_cuda_kernels.py), on
any machine with nvcc: a kernel that does not compile would otherwise show only on the GPU."""
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NVCC = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"


@pytest.mark.skipif(not os.path.exists(NVCC), reason="no nvcc on this machine")
def test_cuda_kernels_compile():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "check_cuda_kernels.py"), "--nvcc", NVCC],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "FAIL" not in r.stdout and "ok " in r.stdout, r.stdout
