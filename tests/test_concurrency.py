"""Concurrent Run() on one shared session: 8 threads x 200 Runs give outputs identical to a
single-threaded Run (plans are immutable; each Run builds and evaluates its MLX graph on the
calling thread; the signature cache is locked)."""
import os
import sys
import threading

import numpy as np
import onnxruntime as ort

import onnxruntime_ep_mlx as mlx_ep

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
from transformer import make_encoder_block, make_inputs  # noqa: E402

THREADS, RUNS = 8, 200


def run_concurrently(sess, feeds_per_thread, runs):
    results = [None] * len(feeds_per_thread)
    errors = []

    def work(i):
        try:
            outs = []
            for r in range(runs):
                outs.append(sess.run(None, feeds_per_thread[i][r % len(feeds_per_thread[i])])[0])
            results[i] = outs
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(feeds_per_thread))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    return results


def steady(sess, feeds):
    """The outputs of a signature's steady state: its first Run is eager, the second traces and
    later Runs replay the compiled program (on a GPU, MLX's fused kernels may round differently
    from the eager graph, so the reference must come from the same path the threads take)."""
    for _ in range(2):
        sess.run(None, feeds)
    return sess.run(None, feeds)


def test_encoder_shared_session_8_threads():
    model = make_encoder_block(hidden=32, heads=2, ffn=64, layers=1)
    sess = mlx_ep.session(model, strict=True)
    # Each thread alternates two sequence lengths, so signature-cache lookups and inserts race too.
    feeds = [[make_inputs(1, 4 + t % 3, 32, seed=t), make_inputs(2, 3, 32, seed=100 + t)] for t in range(THREADS)]
    want = [[steady(sess, f)[0] for f in fs] for fs in feeds]
    got = run_concurrently(sess, feeds, RUNS)
    for t in range(THREADS):
        for r, out in enumerate(got[t]):
            np.testing.assert_array_equal(out, want[t][r % 2], err_msg=f"thread {t} run {r}")
    cpu = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(want[0][0], cpu.run(None, feeds[0][0])[0], rtol=1e-4, atol=1e-4)


def test_decoder_shared_session_8_threads():
    from llm import TINY, empty_past, make_llm, next_past, step_feeds
    model = make_llm(TINY, weights="int4", block_size=32)
    sess = mlx_ep.session(model, strict=True)
    rng = np.random.default_rng(0)
    # Per thread: a prefill and the decode step that follows it (different past lengths).
    feeds = []
    for t in range(THREADS):
        prefill = step_feeds(TINY, rng.integers(0, TINY.vocab, (1, 3 + t % 4)), empty_past(TINY))
        outs = sess.run(None, prefill)
        decode = step_feeds(TINY, outs[0][:, -1:].argmax(-1), next_past(TINY, outs))
        feeds.append([prefill, decode])
    want = [[steady(sess, f) for f in fs] for fs in feeds]
    errors = []

    def work(t):
        try:
            for r in range(RUNS):
                got = sess.run(None, feeds[t][r % 2])
                for g, w in zip(got, want[t][r % 2]):
                    np.testing.assert_array_equal(g, w, err_msg=f"thread {t} run {r}")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[0]
