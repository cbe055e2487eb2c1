"""Decode buckets (src/runtime/buckets.c): inputs whose sequence axis grows every decode step are
padded with zero rows to a multiple of `decode_bucket`, so a decode loop keeps one input
signature and replays one compiled program. Every test compares against ORT's CPU EP (or NumPy)
in strict mode and reads the run report for traces and padded Runs."""
import os
import re
import sys

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnxruntime_ep_mlx as mlx_ep
from parity import make_model

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
from llm import TINY, empty_past, make_llm, next_past, step_feeds  # noqa: E402

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def report_stats(text):
    line = text.split("run report:")[1]
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line)}


def run_with_report(tmp_path, model, options, feeds_list):
    report = tmp_path / "report.txt"
    sess = mlx_ep.session(model, options={**options, "report": str(report)}, strict=True)
    outs = [sess.run(None, f) for f in feeds_list]
    del sess  # the run report is written when the session releases its clusters
    text = report.read_text()
    return outs, report_stats(text), text


def compared_step(sess, cpu, feeds):
    """One step on both sessions: the CPU EP's outputs and the worst relative difference."""
    ours, ref = sess.run(None, feeds), cpu.run(None, feeds)
    worst = 0.0
    for a, b in zip(ours, ref):
        assert a.shape == b.shape and a.dtype == b.dtype
        worst = max(worst, float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-6)))
    return ref, worst


def decode_loop(model, options, tmp_path, prompt, steps, batch=1):
    """Greedy decode with the MLX EP, teacher-forced by ORT's CPU EP: both get the CPU EP's
    token, the CPU EP's KV cache feeds the next step. Returns the worst relative difference of
    every output over all steps and the run report."""
    report = tmp_path / "report.txt"
    sess = mlx_ep.session(model, options={**options, "report": str(report)}, strict=True)
    cpu = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    feeds = step_feeds(TINY, np.tile(np.asarray([prompt], np.int64), (batch, 1)), empty_past(TINY, batch))
    worst = 0.0
    for _ in range(steps + 1):
        ref, diff = compared_step(sess, cpu, feeds)
        worst = max(worst, diff)
        token = ref[0][:, -1:].argmax(-1)
        feeds = step_feeds(TINY, token, next_past(TINY, ref))
    del sess
    text = report.read_text()
    return worst, report_stats(text), text


@pytest.mark.parametrize("compile_mode", ["1", "0"])
@pytest.mark.parametrize("bucket,prompt", [("256", 4), ("auto", 64)])
def test_decode_loop_traces_once(tmp_path, compile_mode, bucket, prompt):
    """64 decode steps: past lengths 4..67 share a bucket of 256, and 64..127 the CPU's default
    bucket of 64 (capacity 128), so the compiled path traces once for the whole loop (the
    prefill's signature is seen once and runs eagerly); every present/logits output equals the
    CPU EP's."""
    model = make_llm(TINY, weights="float")
    worst, st, text = decode_loop(model, {"compile": compile_mode, "decode_bucket": bucket}, tmp_path,
                                  list(range(1, prompt + 1)), 64)
    assert worst < 1e-4
    assert st["runs"] == 65 and st["padded_runs"] == 64
    assert st["sig_misses"] == 2  # the prefill and the bucket
    assert "decode buckets pad: attention_mask[1]" in text and "past_key_values.0.key[2]" in text
    if compile_mode == "1":
        assert st["traces"] == 1 and st["compiled_runs"] == 63
    else:
        # total_sequence_length (Shape(attention_mask) -> Gather -> Cast) is computed on the host
        # when the graph is built: no Run evaluates anything to read it
        assert st["traces"] == 0 and st["host_reads"] == 0


def test_decode_crossing_buckets_int4_batch2(tmp_path):
    """A small bucket (8) makes the loop cross buckets: one trace per bucket, outputs exact at
    the boundaries; int4 weights and batch 2."""
    model = make_llm(TINY, weights="int4")
    worst, st, _ = decode_loop(model, {"compile": "1", "decode_bucket": "8"}, tmp_path, [5, 6, 7], 20, batch=2)
    assert worst < 1e-3
    # past 3..22 -> capacities 8, 16, 24: three buckets, each traced once
    assert st["padded_runs"] == 20 and st["traces"] == 3


def test_bucket_option_off(tmp_path):
    model = make_llm(TINY, weights="float")
    worst, st, text = decode_loop(model, {"compile": "0", "decode_bucket": "0"}, tmp_path, [1, 2], 6)
    assert worst < 1e-4
    assert st["padded_runs"] == 0 and st["sig_misses"] == 7 and "decode buckets" not in text


@pytest.mark.parametrize("bad", ["-1", "x", "", "64k"])
def test_bucket_option_invalid(bad):
    with pytest.raises(Exception, match="decode_bucket"):
        mlx_ep.session(make_llm(TINY, weights="float"), options={"decode_bucket": bad})


def identity_model():
    return make_model([helper.make_node("Identity", ["x"], ["y"])], [("x", F, [2, "N"])], [("y", F, None)])


def test_padded_output_is_trimmed(tmp_path):
    """y = Identity(x): once x's length changes between Runs its dynamic axis is padded (the
    first Run has nothing to compare with and runs unpadded); y comes back trimmed."""
    feeds = [{"x": np.arange(2 * n, dtype=np.float32).reshape(2, n)} for n in (3, 4, 9, 5)]
    outs, st, _ = run_with_report(tmp_path, identity_model(), {"compile": "1", "decode_bucket": "16"}, feeds)
    for f, (y,) in zip(feeds, outs):
        np.testing.assert_array_equal(y, f["x"])
    assert st["padded_runs"] == 3 and st["sig_misses"] == 2 and st["traces"] == 1


def test_repeated_length_is_not_padded(tmp_path):
    # Runs that repeat one length keep their exact shapes: no padding, one signature.
    feeds = [{"x": np.full((2, 7), k, np.float32)} for k in range(4)]
    outs, st, _ = run_with_report(tmp_path, identity_model(), {"compile": "1", "decode_bucket": "16"}, feeds)
    for f, (y,) in zip(feeds, outs):
        np.testing.assert_array_equal(y, f["x"])
    assert st["padded_runs"] == 0 and st["sig_misses"] == 1 and st["traces"] == 1


def test_integer_sum_over_padding(tmp_path):
    # ReduceSum over the padded axis of an int64 mask adds zeros only.
    nodes = [helper.make_node("ReduceSum", ["m", "axes"], ["y"], keepdims=0)]
    model = make_model(nodes, [("m", I64, [1, "T"])], [("y", I64, None)], {"axes": np.array([1], np.int64)}.items())
    feeds = [{"m": np.arange(n, dtype=np.int64).reshape(1, n)} for n in (2, 3, 7)]
    outs, st, _ = run_with_report(tmp_path, model, {"decode_bucket": "8"}, feeds)
    for f, (y,) in zip(feeds, outs):
        np.testing.assert_array_equal(y, f["m"].sum(1))
    assert st["padded_runs"] == 2 and st["sig_misses"] == 2


def test_refusals_leave_inputs_unpadded(tmp_path):
    """A padded length reaching an output (Shape -> Gather) and a float sum over the padded axis
    (rounding order) are refused: nothing is padded and the results are exact."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "one"], ["n"], axis=0),
             helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)]
    inits = {"one": np.array(1, np.int64), "axes": np.array([1], np.int64)}
    model = make_model(nodes, [("x", F, [1, "T"])], [("n", I64, None), ("y", F, None)], inits.items())
    feeds = [{"x": np.linspace(0, 1, n, dtype=np.float32).reshape(1, n)} for n in (3, 5)]
    outs, st, text = run_with_report(tmp_path, model, {"decode_bucket": "8"}, feeds)
    for f, (n, y) in zip(feeds, outs):
        assert int(n) == f["x"].shape[1]
        np.testing.assert_allclose(y, f["x"].sum(1), rtol=1e-6)
    assert st["padded_runs"] == 0 and "decode buckets" not in text


def shared_buffer_loop(tmp_path, options, model, prompt, steps, max_len):
    """onnxruntime-genai's shared KV buffer (past_present_share_buffer): past and present are one
    buffer of max_len rows; only the attention mask grows. Every step is checked against ORT's
    CPU EP fed the same buffer; returns the worst relative difference and the run report."""
    report = tmp_path / "report.txt"
    sess = mlx_ep.session(model, options={**options, "report": str(report)}, strict=True)
    cpu = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    past = {k: np.zeros((1, TINY.kv_heads, max_len, TINY.head_dim), np.float32) for k in empty_past(TINY)}
    feeds = step_feeds(TINY, np.asarray([prompt], np.int64), past, np.ones((1, len(prompt)), np.int64))
    worst = 0.0
    for _ in range(steps + 1):
        ref, diff = compared_step(sess, cpu, feeds)
        worst = max(worst, diff)
        token = ref[0][:, -1:].argmax(-1)
        mask = np.ones((1, feeds["attention_mask"].shape[1] + 1), np.int64)
        feeds = step_feeds(TINY, token, next_past(TINY, ref), mask)
    del sess
    text = report.read_text()
    return worst, report_stats(text), text


def test_shared_kv_buffer_keeps_one_signature(tmp_path):
    """With a fixed-size KV buffer only the mask grows: decode buckets pad the mask alone (the
    buffer is longer than the padded total, the bound GroupQueryAttention's rule asks), so the
    decode loop has one signature and one trace; outputs equal the CPU EP's at every step."""
    model = make_llm(TINY, weights="int4")
    worst, st, text = shared_buffer_loop(tmp_path, {"compile": "1", "decode_bucket": "32"}, model,
                                         [3, 1, 4, 1, 5], 24, max_len=64)
    assert worst < 1e-3
    assert st["runs"] == 25 and st["padded_runs"] == 24
    assert st["sig_misses"] == 2 and st["traces"] == 1  # the prompt, and the decode bucket
    assert "when only these grow: attention_mask[1]" in text


def test_shared_kv_buffer_bound_caps_padding(tmp_path):
    """When the next bucket would pass the buffer's length, the mask is padded only up to that
    length (the present keeps the buffer's shape): exact outputs, one decode signature."""
    model = make_llm(TINY, weights="int4")
    worst, st, _ = shared_buffer_loop(tmp_path, {"compile": "1", "decode_bucket": "32"}, model,
                                      [3, 1, 4, 1, 5], 12, max_len=20)
    assert worst < 1e-3
    assert st["padded_runs"] == 12 and st["sig_misses"] == 2 and st["traces"] == 1


def test_shared_kv_buffer_full_is_not_padded(tmp_path):
    """A mask as long as the buffer leaves no room to pad: those Runs keep their exact shapes."""
    model = make_llm(TINY, weights="int4")
    worst, st, _ = shared_buffer_loop(tmp_path, {"compile": "1", "decode_bucket": "32"}, model,
                                      [3, 1, 4, 1, 5], 1, max_len=6)
    assert worst < 1e-3
    assert st["runs"] == 2 and st["padded_runs"] == 0  # the step's mask (6) fills the buffer (6)
