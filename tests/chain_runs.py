"""What the chain tests share (test_cpu_chains.py, test_device_memory.py): ORT's CPU EP's greedy path
through the tiny int4 decoder of examples/llm.py, and the same tokens fed to the MLX EP in a process
of its own (the chain switches are read once a process), its logits and its stderr."""
import os
import subprocess
import sys

import numpy as np
import onnxruntime as ort

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))

from llm import TINY, empty_past, make_llm, next_past, step_feeds  # noqa: E402

PROMPT = 5

SCRIPT = r"""
import json, os, sys
import numpy as np
sys.path[:0] = sys.argv[3].split(os.pathsep)
import onnxruntime_ep_mlx as mlx_ep
from llm import TINY, empty_past, make_llm, next_past, step_feeds
sess = mlx_ep.session(make_llm(TINY, weights="int4", block_size=32), options=json.loads(sys.argv[4]) or None,
                      strict=True)
tokens = np.load(sys.argv[2])  # the prompt, then the token each step feeds (ORT's CPU EP's greedy path)
feeds, logits = step_feeds(TINY, tokens[:, :5], empty_past(TINY)), []
for step in range(tokens.shape[1] - 5):
    out = sess.run(None, feeds)
    logits.append(out[0][:, -1])
    mask = np.ones((1, feeds["attention_mask"].shape[1] + 1), np.int64)
    feeds = step_feeds(TINY, tokens[:, 5 + step:6 + step], next_past(TINY, out), mask)
np.save(sys.argv[1], np.stack(logits))
"""


def greedy_reference(tmp_path, steps=12):
    """ORT's CPU EP's greedy decode from a 5-token prompt: the tokens' file and each step's logits."""
    cpu = ort.InferenceSession(make_llm(TINY, weights="int4", block_size=32), providers=["CPUExecutionProvider"])
    tokens = np.array([[3, 7, 11, 19, 23]], np.int64)
    assert tokens.shape[1] == PROMPT
    feeds, logits = step_feeds(TINY, tokens, empty_past(TINY)), []
    for _ in range(steps):
        ref = cpu.run(None, feeds)
        logits.append(ref[0][:, -1])
        tokens = np.concatenate([tokens, ref[0][:, -1].argmax(-1).reshape(1, 1)], axis=1)
        mask = np.ones((1, feeds["attention_mask"].shape[1] + 1), np.int64)
        feeds = step_feeds(TINY, tokens[:, -1:], next_past(TINY, ref), mask)
    path = tmp_path / "tokens.npy"
    np.save(path, tokens)
    return path, np.stack(logits)


def decode_in_child(tokens_path, out_path, env_switches, options=None):
    """The MLX EP's logits along those tokens in a child process with env_switches set: (logits, stderr)."""
    import json
    path = os.pathsep.join([os.path.join(ROOT, "python"), os.path.join(ROOT, "examples")])
    env = dict(os.environ, **env_switches)
    p = subprocess.run([sys.executable, "-c", SCRIPT, str(out_path), str(tokens_path), path, json.dumps(options or {})],
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return np.load(out_path), p.stderr
