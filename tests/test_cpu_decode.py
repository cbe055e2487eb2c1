"""The decode step's CPU primitives (src/mlx/bridge_cpu_decode.cpp: decode attention, the KV append
and the RMS norm, the CUDA kernels' arithmetic on MLX's CPU stream) and the composed forms they
replace (ORT_EP_MLX_CPU_DECODE=0), each checked against ORT's CPU EP by the parity tests of
GroupQueryAttention decode steps and of the (Skip)SimplifiedLayerNormalization family, run in a fresh
process per switch: which form ran is read from the op histogram (and that the prompts' attention
ran its softmax as EpCpuSoftmax: the plain form through mlxb_sdpa's CPU composition, the others
through the softmax itself). tests/c/test_bridge.c checks the
primitives' clamping of hostile lengths and positions against a reference of its own."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from parity import child_pythonpath, default_device_is_cpu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SELECTION = ["tests/test_ops_attention.py", "tests/test_ops_contrib_norm.py", "-k",
             "gqa_decode or gqa_rotary or gqa_attributes or gqa_packed or simplified_layer_norm or skip_layer_norm"]
PRIMITIVES = ("EpCpuDecodeAttention", "EpCpuKvAppend", "EpCpuRmsNorm")


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


def cluster_lines(log: str) -> list[str]:
    """The op histogram's line per evaluated graph (each test model is one GroupQueryAttention node)."""
    return [line for line in log.splitlines() if line.lstrip(".").startswith("[mlx ep] ") and " ops: " in line
            and (" eager: " in line or " program: " in line)]


@pytest.mark.skipif(not default_device_is_cpu(), reason="the EP's default device is MLX's GPU here")
@pytest.mark.parametrize("mode", ["all", "gpu"])
def test_prompt_rows_form_matches_ort(mode):
    """Prompts (S > 1 rows, separate q/k/v, no bias, sink or snapshot) through the decode kernels' many-row
    form: CPU scopes take it only with ORT_EP_MLX_ROWS_ATTENTION=all (MLX's CUDA backend by default). Every
    prompt and continuation of the selection compared with ORT's CPU EP, and each graph's form read from the
    op histogram: the two primitives and no softmax, or the composed softmax."""
    env = dict(os.environ, ORT_EP_MLX_OP_HISTOGRAM="1", ORT_EP_MLX_ROWS_ATTENTION=mode,
               PYTHONPATH=child_pythonpath())
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                          "tests/test_ops_attention.py", "-k", "gqa_prompt or gqa_chunked_prefill or gqa_rotary"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    lines = cluster_lines(out.stdout + out.stderr)
    kernels = [line for line in lines if "EpCpuDecodeAttention=" in line and "EpCpuKvAppend=" in line]
    composed = [line for line in lines if "Softmax" in line]
    assert len(lines) >= 30, f"only {len(lines)} graphs evaluated"
    # test_gqa_rotary's packed prompts keep the composed form either way (the kernels take separate q, k, v)
    assert composed, "no prompt kept the composed form"
    if mode == "all":
        assert len(kernels) > len(composed), f"{len(kernels)} graphs took the kernels, {len(composed)} composed"
        assert all("Softmax" not in line for line in kernels)
    else:  # only the one-token steps of test_gqa_rotary take the kernels on a CPU scope by default
        assert len(kernels) < len(composed), f"{len(kernels)} graphs took the kernels, {len(composed)} composed"


@pytest.mark.skipif(not default_device_is_cpu(), reason="the EP's default device is MLX's GPU here")
def test_prompt_rows_form_refuses_hostile_lengths_and_positions():
    """The hostile GroupQueryAttention cases (seqlens_k and position_ids past their ranges, prompts and
    decode steps) with the many-row primitives on CPU scopes: refused as ORT refuses them, nothing read
    outside a tensor (the kernels clamp as well)."""
    env = dict(os.environ, ORT_EP_MLX_ROWS_ATTENTION="all", PYTHONPATH=child_pythonpath())
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "tests/hostile/test_hostile_transformer.py", "-k", "gqa"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    assert " passed" in out.stdout and "failed" not in out.stdout, out.stdout[-2000:]
