"""The decode step's CPU primitives (src/mlx/bridge_cpu_decode.cpp: decode attention, the KV append
and the RMS norm, the CUDA kernels' arithmetic on MLX's CPU stream) and the composed forms they
replace (ORT_EP_MLX_CPU_DECODE=0), each checked against ORT's CPU EP by the parity tests of
GroupQueryAttention decode steps and of the (Skip)SimplifiedLayerNormalization family, run in a fresh
process per switch: which form ran is read from the op histogram (and that the prompts' attention
ran its softmax as EpCpuSoftmax: the plain form through mlxb_sdpa's CPU composition, the others
through the softmax itself). tests/c/test_bridge.c checks the
primitives' clamping of hostile lengths and positions against a reference of its own."""
from __future__ import annotations

import functools
import os
import subprocess
import sys

import pytest

from parity import child_pythonpath

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SELECTION = ["tests/test_ops_attention.py", "tests/test_ops_contrib_norm.py", "-k",
             "gqa_decode or gqa_rotary or gqa_attributes or gqa_packed or simplified_layer_norm or skip_layer_norm"]
PRIMITIVES = ("EpCpuDecodeAttention", "EpCpuKvAppend", "EpCpuRmsNorm")


@functools.lru_cache(maxsize=None)
def default_device_is_cpu() -> bool:
    """The parity tests run on the EP's default device: MLX's GPU where there is one (the CUDA kernels
    run there instead, scripts/gpu_check.sh)."""
    out = subprocess.run([sys.executable, "-c", "import mlx.core as mx; print(mx.default_device() == mx.cpu)"],
                         capture_output=True, text=True, timeout=120)
    return out.stdout.strip() == "True"


def run_selection(switch: str) -> str:
    env = dict(os.environ, ORT_EP_MLX_OP_HISTOGRAM="1", ORT_EP_MLX_CPU_DECODE=switch,
               PYTHONPATH=child_pythonpath())
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", *SELECTION],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    return out.stdout + out.stderr


@pytest.mark.skipif(not default_device_is_cpu(), reason="the EP's default device is MLX's GPU here")
@pytest.mark.parametrize("switch", ["1", "0"])
def test_decode_forms_match_ort(switch):
    log = run_selection(switch)
    for name in PRIMITIVES:
        if switch == "1":
            assert f"{name}=" in log, f"{name} never ran"
        else:
            assert name not in log, f"{name} ran with ORT_EP_MLX_CPU_DECODE=0"
    # a prompt's attention: softmax by our primitive (the plain form: mlxb_sdpa's CPU composition)
    assert "EpCpuSoftmax=" in log, "the prompts' attention took no EpCpuSoftmax"
