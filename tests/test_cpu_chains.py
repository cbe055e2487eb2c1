"""Chains of the EP's CPU tasks (src/mlx/bridge_cpu_chain.cpp): after a CPU program is traced, runs
of the EP's CPU primitives become one MLX operation whose one task runs their work in order. The
same work in the same order: a decode loop's logits are bit for bit those without chains, and
ORT's CPU EP's within the decoder tests' tolerance. The op histogram still names the chained
operations (test_cpu_gemm's kernel checks read it)."""
import os
import re

import numpy as np
import pytest

from chain_runs import decode_in_child, greedy_reference


@pytest.mark.skipif(os.environ.get("ORT_EP_MLX_CPU_CHAINS") == "0", reason="CPU chains turned off for this run")
def test_cpu_chains_change_no_result(tmp_path):
    """A decode loop on the CPU with chains (the default) and without (each a process of its own:
    the switch is read once): the chains engage (ORT_EP_MLX_LOG_CHAINS) and change no bit."""
    tokens, ref_logits = greedy_reference(tmp_path)
    runs = {}
    for chains in ("1", "0"):
        runs[chains], stderr = decode_in_child(tokens, tmp_path / f"chains{chains}.npy",
                                               {"ORT_EP_MLX_CPU_CHAINS": chains, "ORT_EP_MLX_LOG_CHAINS": "1"},
                                               options={"device": "cpu"})
        chained = [int(m) for m in re.findall(r"CPU task chains: (\d+) CPU tasks in \d+ chains", stderr)]
        assert (max(chained, default=0) >= 2) == (chains == "1"), stderr[-2000:]
    np.testing.assert_array_equal(runs["1"], runs["0"])
    np.testing.assert_allclose(runs["1"], ref_logits, rtol=2e-3, atol=2e-3)
