"""Chains of the EP's CPU tasks (src/mlx/bridge_cpu_chain.cpp): after a CPU program is traced, runs
of the EP's CPU primitives become one MLX operation whose one task runs their work in order. The
same work in the same order: a decode loop's logits are bit for bit those without chains, and
ORT's CPU EP's within the decoder tests' tolerance. The op histogram still names the chained
operations (test_cpu_gemm's kernel checks read it)."""
import os
import re
import subprocess
import sys

import numpy as np
import onnxruntime as ort
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))

from llm import TINY, empty_past, make_llm, next_past, step_feeds  # noqa: E402

SCRIPT = r"""
import os, sys
import numpy as np
sys.path[:0] = sys.argv[3].split(os.pathsep)
import onnxruntime_ep_mlx as mlx_ep
from llm import TINY, empty_past, make_llm, next_past, step_feeds
sess = mlx_ep.session(make_llm(TINY, weights="int4", block_size=32), options={"device": "cpu"}, strict=True)
tokens = np.load(sys.argv[2])  # the prompt, then the token each step feeds (ORT's CPU EP's greedy path)
feeds, logits = step_feeds(TINY, tokens[:, :5], empty_past(TINY)), []
for step in range(tokens.shape[1] - 5):
    out = sess.run(None, feeds)
    logits.append(out[0][:, -1])
    mask = np.ones((1, feeds["attention_mask"].shape[1] + 1), np.int64)
    feeds = step_feeds(TINY, tokens[:, 5 + step:6 + step], next_past(TINY, out), mask)
np.save(sys.argv[1], np.stack(logits))
"""


@pytest.mark.skipif(os.environ.get("ORT_EP_MLX_CPU_CHAINS") == "0", reason="CPU chains turned off for this run")
def test_cpu_chains_change_no_result(tmp_path):
    """A decode loop on the CPU with chains (the default) and without (each a process of its own:
    the switch is read once): the chains engage (ORT_EP_MLX_LOG_CHAINS) and change no bit."""
    path = os.pathsep.join([os.path.join(ROOT, "python"), os.path.join(ROOT, "examples")])
    cpu = ort.InferenceSession(make_llm(TINY, weights="int4", block_size=32), providers=["CPUExecutionProvider"])
    tokens = np.array([[3, 7, 11, 19, 23]], np.int64)
    feeds, ref_logits = step_feeds(TINY, tokens, empty_past(TINY)), []
    for _ in range(12):
        ref = cpu.run(None, feeds)
        ref_logits.append(ref[0][:, -1])
        tokens = np.concatenate([tokens, ref[0][:, -1].argmax(-1).reshape(1, 1)], axis=1)
        mask = np.ones((1, feeds["attention_mask"].shape[1] + 1), np.int64)
        feeds = step_feeds(TINY, tokens[:, -1:], next_past(TINY, ref), mask)
    np.save(tmp_path / "tokens.npy", tokens)
    runs = {}
    for chains in ("1", "0"):
        env = dict(os.environ, ORT_EP_MLX_CPU_CHAINS=chains, ORT_EP_MLX_LOG_CHAINS="1")
        out = tmp_path / f"chains{chains}.npy"
        p = subprocess.run([sys.executable, "-c", SCRIPT, str(out), str(tmp_path / "tokens.npy"), path],
                           env=env, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-2000:]
        chained = [int(m) for m in re.findall(r"CPU task chains: (\d+) CPU tasks in \d+ chains", p.stderr)]
        assert (max(chained, default=0) >= 2) == (chains == "1"), p.stderr[-2000:]
        runs[chains] = np.load(out)
    np.testing.assert_array_equal(runs["1"], runs["0"])
    np.testing.assert_allclose(runs["1"], np.stack(ref_logits), rtol=2e-3, atol=2e-3)
