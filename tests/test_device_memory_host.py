"""CI's run of the device-memory path (tests/test_device_memory.py and op families) on MLX's CPU
backend: with ORT_EP_MLX_DEVICE_MEMORY=host the EP lends host memory as if it were MLX's GPU memory,
so ORT's allocator and data-transfer calls, IOBinding, in-place binding, decode-bucket padding of
device inputs and the trimmed copies all run here. The variable is read once per process (at
registration), hence the child process. On a machine with real device memory
(MLX's CUDA backend: scripts/gpu_check.sh) the tests run directly instead."""
import os
import subprocess
import sys

import pytest

from parity import device_memory_info

HERE = os.path.dirname(os.path.abspath(__file__))
# device memory already chosen for this run: named in the environment, or MLX's GPU memory lent by
# default (its CUDA backend), where host memory standing in would be no memory its kernels can read
CHOSEN = bool(os.environ.get("ORT_EP_MLX_DEVICE_MEMORY")) or device_memory_info() is not None


@pytest.mark.skipif(CHOSEN, reason="device memory already chosen for this run")
@pytest.mark.parametrize("copy_in_program", ["default", "0"])
def test_device_memory_path_with_host_memory(copy_in_program):
    """Both ways outputs reach device buffers: copied by the program's own eval (the default here)
    and queued after it (ORT_EP_MLX_COPY_IN_PROGRAM=0, CUDA's default until measured there)."""
    env = dict(os.environ, ORT_EP_MLX_DEVICE_MEMORY="host")
    env.pop("ORT_EP_MLX_COPY_IN_PROGRAM", None)
    if copy_in_program != "default":
        env["ORT_EP_MLX_COPY_IN_PROGRAM"] = copy_in_program
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        os.path.join(HERE, "test_device_memory.py")], cwd=HERE, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "7 passed" in r.stdout, r.stdout[-2000:]


@pytest.mark.skipif(CHOSEN, reason="device memory already chosen for this run")
def test_op_families_with_host_memory():
    """The fuzzer's tests and the op files where the device-memory path once differed (a lowering's
    pad of a device input read unfilled: LinearAttention; outputs asked of ORT ahead with shapes
    that followed data: Slice's fed bounds, If's branches) with every input in the EP's memory."""
    env = dict(os.environ, ORT_EP_MLX_DEVICE_MEMORY="host")
    files = [os.path.join(HERE, f) for f in ("fuzz", "test_ops_control.py", "test_ops_linear_attention.py")]
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *files], cwd=HERE, env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert " failed" not in r.stdout and " passed" in r.stdout, r.stdout[-2000:]
