"""The generated transformer encoder block (examples/transformer.py) runs entirely on MLX (strict
mode: no node may fall back to the CPU EP) and matches ORT's CPU EP within 1e-4 in float32, for
several sequence lengths and batch sizes through one session."""
from __future__ import annotations

import os
import re
import sys

import numpy as np
import onnxruntime as ort
import pytest

import onnxruntime_ep_mlx as mlx_ep

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
from transformer import make_encoder_block, make_inputs  # noqa: E402

HIDDEN, HEADS, FFN = 64, 4, 128


@pytest.fixture(scope="module")
def encoder():
    return make_encoder_block(hidden=HIDDEN, heads=HEADS, ffn=FFN, layers=2, seed=0)


def test_encoder_strict_parity(encoder):
    mlx = mlx_ep.session(encoder, strict=True)
    cpu = ort.InferenceSession(encoder, providers=["CPUExecutionProvider"])
    assert mlx.get_providers()[0] == mlx_ep.ep_name()
    for batch, seq, masked in [(1, 16, 3), (2, 7, 0), (1, 16, 0)]:
        feeds = make_inputs(batch=batch, seq=seq, hidden=HIDDEN, seed=seq, masked_tail=masked)
        got = mlx.run(None, feeds)[0]
        want = cpu.run(None, feeds)[0]
        assert got.shape == want.shape == (batch, seq, HIDDEN)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"batch {batch}, seq {seq}")


def test_encoder_claims_every_node(encoder, tmp_path):
    report = tmp_path / "report.txt"
    mlx_ep.session(encoder, options={"report": str(report)}, strict=True)
    assert report.exists(), "the EP wrote no claim report"
    text = report.read_text()
    # Every node claimed, and the whole graph is one cluster (one MLX graph per run).
    assert re.search(r"declined:\s*0\b", text) and re.search(r"clusters:\s*1\b", text), text
