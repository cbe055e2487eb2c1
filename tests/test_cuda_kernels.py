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


def _emulator_toolchain() -> bool:
    """g++ with C++20's std::barrier and _Float16 (what tools/cuda_emu needs)."""
    cxx = shutil.which(os.environ.get("CXX", "g++"))
    if not cxx:
        return False
    probe = "#include <barrier>\nint main() { std::barrier<> b(1); _Float16 h = 1.0f; b.arrive_and_wait(); return (int)(float)h - 1; }\n"
    r = subprocess.run([cxx, "-std=c++20", "-x", "c++", "-", "-o", os.devnull, "-pthread"], input=probe,
                       capture_output=True, text=True)
    return r.returncode == 0


@pytest.mark.skipif(not _emulator_toolchain(), reason="no g++ with C++20 barriers and _Float16 here")
def test_cuda_kernels_compute_on_cpu():
    """The kernels themselves (the many-row attention, the many-row RMS norm, the tensor-core GEMM with
    weight sets and its reduction, the KV append of several rows, the batched copy with zero tails) run on
    the CPU through tools/cuda_emu against references of their own: their indexing and bounds are checked
    before any device time is spent."""
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "cuda_emu", "run.py")], capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert " 0 failures" in r.stdout and "checks" in r.stdout, r.stdout
