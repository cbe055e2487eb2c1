#!/usr/bin/env python3
"""A prompt through com.microsoft LinearAttention (a Gated DeltaNet layer's recurrence): the MLX EP's
chunked form against ORT's CPU EP, on one layer's shapes.

    bench/linear_attention_prefill.py [--tokens 512 2048] [--heads 16] [--dim 128] [--iters 5]
                                      [--rule gated_delta] [--decay head|dim]

Prints per prompt length, for each EP, the ms of the first and second Run of that shape (the MLX EP's
first Run builds its graph eagerly, the second traces it into a program: what a graph of many
operations costs shows there) and the median of the Runs after (the MLX EP replays its program), the
ratio of the medians, and the largest difference between the two EPs' outputs. Not a test.
"""
import argparse
import os
import statistics
import sys
import time

import mlx.core as mx
import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

import onnxruntime_ep_mlx as mlx_ep  # noqa: E402


def model(rule, heads, dim, decay):
    """One LinearAttention node over graph inputs q, k, v, past_state, decay, beta (float32)."""
    names = ["q", "k", "v", "st", "g", "b"]
    node = helper.make_node("LinearAttention", names, ["y", "state"], domain="com.microsoft", q_num_heads=heads,
                            kv_num_heads=heads, update_rule=rule)
    gate = heads * (dim if decay == "dim" else 1)
    shapes = {"q": [1, "T", heads * dim], "k": [1, "T", heads * dim], "v": [1, "T", heads * dim],
              "st": [1, heads, dim, dim], "g": [1, "T", gate], "b": [1, "T", heads]}
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shapes[n]) for n in names]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "state")]
    graph = helper.make_graph([node], "la", ins, outs)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 10
    return m.SerializeToString()


def feeds(tokens, heads, dim, decay, seed=0):
    """Gated DeltaNet-like data: L2-normalized keys, beta in (0, 1), log decay in (-1, 0)."""
    rng = np.random.default_rng(seed)
    k = rng.standard_normal((1, tokens, heads, dim))
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    gate = heads * (dim if decay == "dim" else 1)
    f = {"q": rng.standard_normal((1, tokens, heads * dim)) / np.sqrt(dim), "k": k.reshape(1, tokens, heads * dim),
         "v": rng.standard_normal((1, tokens, heads * dim)), "st": rng.standard_normal((1, heads, dim, dim)) * 0.1,
         "g": -rng.random((1, tokens, gate)), "b": rng.random((1, tokens, heads))}
    return {n: a.astype(np.float32) for n, a in f.items()}


def timed_runs(sess, f, iters):
    """ms of the first and second Run, the median ms of `iters` Runs after them, the outputs."""
    times = []
    for _ in range(2 + iters):
        t0 = time.perf_counter()
        out = sess.run(None, f)
        times.append((time.perf_counter() - t0) * 1e3)
    return times[0], times[1], statistics.median(times[2:]), out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, nargs="+", default=[512, 2048])
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--rule", default="gated_delta", choices=["linear", "gated", "delta", "gated_delta"])
    ap.add_argument("--decay", default="head", choices=["head", "dim"])
    a = ap.parse_args()
    m = model(a.rule, a.heads, a.dim, a.decay)
    cpu = ort.InferenceSession(m, providers=["CPUExecutionProvider"])
    mlx = mlx_ep.session(m, strict=True)
    print(f"LinearAttention {a.rule}, decay per {a.decay}, B=1, {a.heads} heads, d_k = d_v = {a.dim}, float32")
    print(f"MLX on {mx.default_device()}; ms per Run: first / second / median of {a.iters} after")
    print(f"{'T':>6} {'ORT CPU EP':>22} {'MLX EP':>22} {'CPU/MLX':>8} {'max |diff|':>11}")
    for t in a.tokens:
        f = feeds(t, a.heads, a.dim, a.decay)
        *cpu_ms, want = timed_runs(cpu, f, a.iters)
        *mlx_ms, got = timed_runs(mlx, f, a.iters)
        diff = max(float(np.abs(g - w).max()) for g, w in zip(got, want))
        fmt = lambda ms: " / ".join(f"{x:.1f}" for x in ms)  # noqa: E731
        print(f"{t:>6} {fmt(cpu_ms):>22} {fmt(mlx_ms):>22} {cpu_ms[2] / mlx_ms[2]:>8.2f} {diff:>11.2e}")


if __name__ == "__main__":
    main()
