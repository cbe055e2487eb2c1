"""A voice-activity-detector-shaped model, streamed: an STFT as a strided Conv (real and imaginary
filters), magnitude, a Conv encoder, then an If on the sample-rate input whose branches each run two
LSTM layers (16 kHz weights from outer-scope initializers, 8 kHz weights held by the branch itself)
from the recurrent state fed in, and a sigmoid decoder. 100 Runs carry the state from one Run into
the next on both sides; every node runs on MLX (strict mode), every Run matches ORT's CPU EP, and
the cluster traces once (the If's condition is data, so the compiled program holds both branches
and selects; alternating sample rates keep that one trace)."""
from __future__ import annotations

import re

import numpy as np
from onnx import TensorProto as TP, helper, numpy_helper

import onnxruntime_ep_mlx as mlx_ep
from parity import make_model, run_cpu
import onnxruntime as ort

F = TP.FLOAT
CHUNK, WIN, HOP, BINS, ENC, HID = 512, 64, 32, 33, 32, 64
TOL = dict(rtol=1e-4, atol=2e-5)


def vi(name, dtype=F, shape=None):
    return helper.make_tensor_value_info(name, dtype, shape)


def stft_filters():
    """Real and imaginary DFT filters of a Hann window, [2 * BINS, 1, WIN]."""
    n = np.arange(WIN)
    k = np.arange(BINS)[:, None]
    window = 0.5 - 0.5 * np.cos(2 * np.pi * n / WIN)
    re_f = np.cos(2 * np.pi * k * n / WIN) * window
    im_f = -np.sin(2 * np.pi * k * n / WIN) * window
    return np.concatenate([re_f, im_f])[:, None, :].astype(np.float32)


def lstm_weights(rng, prefix, inputs):
    scale = 0.8 / np.sqrt(HID)
    return {f"{prefix}_W": (rng.standard_normal((1, 4 * HID, inputs)) * scale).astype(np.float32),
            f"{prefix}_R": (rng.standard_normal((1, 4 * HID, HID)) * scale).astype(np.float32),
            f"{prefix}_B": (rng.standard_normal((1, 8 * HID)) * 0.1).astype(np.float32)}


def branch(name, rate, inner_inits):
    """Two LSTM layers over enc [T, 1, ENC] from state h, c [2, 1, HID] -> y [T, 1, HID], hn, cn."""
    p = f"w{rate}"
    nodes = []
    for layer, x in ((0, "enc"), (1, f"{name}_y0")):
        lo, hi = f"{name}_lo{layer}", f"{name}_hi{layer}"
        nodes += [helper.make_node("Slice", ["h", lo, hi, "ax0"], [f"{name}_h{layer}"]),
                  helper.make_node("Slice", ["c", lo, hi, "ax0"], [f"{name}_c{layer}"]),
                  helper.make_node("LSTM", [x, f"{p}_l{layer}_W", f"{p}_l{layer}_R", f"{p}_l{layer}_B", "",
                                            f"{name}_h{layer}", f"{name}_c{layer}"],
                                   [f"{name}_Y{layer}", f"{name}_hn{layer}", f"{name}_cn{layer}"], hidden_size=HID),
                  helper.make_node("Squeeze", [f"{name}_Y{layer}", "ax1"], [f"{name}_y{layer}"])]
    nodes += [helper.make_node("Concat", [f"{name}_hn0", f"{name}_hn1"], [f"{name}_hn"], axis=0),
              helper.make_node("Concat", [f"{name}_cn0", f"{name}_cn1"], [f"{name}_cn"], axis=0)]
    inits = [numpy_helper.from_array(np.array([layer], np.int64), f"{name}_lo{layer}") for layer in (0, 1)]
    inits += [numpy_helper.from_array(np.array([layer + 1], np.int64), f"{name}_hi{layer}") for layer in (0, 1)]
    inits += [numpy_helper.from_array(v, k) for k, v in inner_inits.items()]
    outs = [vi(f"{name}_y1", F, ["T", 1, HID]), vi(f"{name}_hn", F, [2, 1, HID]), vi(f"{name}_cn", F, [2, 1, HID])]
    return helper.make_graph(nodes, name, [], outs, initializer=inits)


def vad_model(seed=0):
    rng = np.random.default_rng(seed)
    w16 = {**lstm_weights(rng, "w16000_l0", ENC), **lstm_weights(rng, "w16000_l1", HID)}
    w8 = {**lstm_weights(rng, "w8000_l0", ENC), **lstm_weights(rng, "w8000_l1", HID)}
    inits = {"stft": stft_filters(), "enc_W": (rng.standard_normal((ENC, BINS, 3)) * 0.05).astype(np.float32),
             "enc_B": np.zeros(ENC, np.float32), "eps": np.array(1e-6, np.float32),
             "dec_W": (rng.standard_normal((HID, 1)) * 0.3).astype(np.float32), "dec_B": np.zeros(1, np.float32),
             "ax0": np.array([0], np.int64), "ax1": np.array([1], np.int64), "sr16k": np.array(16000, np.int64),
             "re_lo": np.array([0], np.int64), "re_hi": np.array([BINS], np.int64),
             "im_hi": np.array([2 * BINS], np.int64), **w16}
    nodes = [
        helper.make_node("Unsqueeze", ["input", "ax1"], ["x3"]),
        helper.make_node("Conv", ["x3", "stft"], ["spec"], strides=[HOP]),
        helper.make_node("Slice", ["spec", "re_lo", "re_hi", "ax1"], ["re"]),
        helper.make_node("Slice", ["spec", "re_hi", "im_hi", "ax1"], ["im"]),
        helper.make_node("Mul", ["re", "re"], ["re2"]), helper.make_node("Mul", ["im", "im"], ["im2"]),
        helper.make_node("Add", ["re2", "im2"], ["pow"]), helper.make_node("Add", ["pow", "eps"], ["pow_e"]),
        helper.make_node("Sqrt", ["pow_e"], ["mag"]),
        helper.make_node("Conv", ["mag", "enc_W", "enc_B"], ["enc_c"], pads=[1, 1]),
        helper.make_node("Relu", ["enc_c"], ["enc_r"]),
        helper.make_node("Transpose", ["enc_r"], ["enc"], perm=[2, 0, 1]),
        helper.make_node("Equal", ["sr", "sr16k"], ["is16k"]),
        helper.make_node("If", ["is16k"], ["y", "hn", "cn"], name="rate",
                         then_branch=branch("b16k", 16000, {}), else_branch=branch("b8k", 8000, w8)),
        helper.make_node("ReduceMean", ["y"], ["pooled"], axes=[0], keepdims=0),
        helper.make_node("MatMul", ["pooled", "dec_W"], ["logit0"]),
        helper.make_node("Add", ["logit0", "dec_B"], ["logit"]),
        helper.make_node("Sigmoid", ["logit"], ["prob"]),
    ]
    ins = [("input", F, [1, CHUNK]), ("sr", TP.INT64, []), ("h", F, [2, 1, HID]), ("c", F, [2, 1, HID])]
    outs = [("prob", F, [1, 1]), ("hn", F, [2, 1, HID]), ("cn", F, [2, 1, HID])]
    return make_model(nodes, ins, outs, inits.items(), opset=17)


def audio(rng, run):
    t = (np.arange(CHUNK) + run * CHUNK) / 16000.0
    tone = np.sin(2 * np.pi * 440 * t) * (0.5 if (run // 10) % 2 else 0.0)
    return (tone + rng.standard_normal(CHUNK) * 0.05).astype(np.float32)[None, :]


def stream(sess, rates, seed=1):
    rng = np.random.default_rng(seed)
    h = np.zeros((2, 1, HID), np.float32)
    c = np.zeros((2, 1, HID), np.float32)
    results = []
    for run, rate in enumerate(rates):
        prob, h, c = sess.run(None, {"input": audio(rng, run), "sr": np.array(rate, np.int64), "h": h, "c": c})
        results.append((prob, h, c))
    return results


def test_vad_streams_on_mlx_with_one_trace(tmp_path):
    model = vad_model()
    rates = [16000] * 100
    report = tmp_path / "report.txt"
    sess = mlx_ep.session(model, options={"report": str(report)}, strict=True)  # strict: every node on MLX
    got = stream(sess, rates)
    want = stream(ort.InferenceSession(model, providers=["CPUExecutionProvider"]), rates)
    for run, (g, w) in enumerate(zip(got, want)):
        for k in range(3):
            np.testing.assert_allclose(g[k], w[k], err_msg=f"run {run}, output {k}", **TOL)
    del sess
    text = report.read_text()
    main = text.split("claim report: graph 'g'")[1].split("MLXExecutionProvider")[0]
    assert "declined: 0, clusters: 1" in main and "claimed  If x1" in main and "claimed  LSTM" not in main, main
    stats = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", text.split("run report:")[1])}
    assert stats["runs"] == 100 and stats["traces"] == 1 and stats["trace_failures"] == 0
    assert stats["compiled_runs"] == 99


def test_vad_both_rates_in_one_session(tmp_path):
    model = vad_model()
    rates = [16000, 8000, 8000, 16000, 8000, 16000]
    got = stream(mlx_ep.session(model, strict=True), rates)
    want = stream(ort.InferenceSession(model, providers=["CPUExecutionProvider"]), rates)
    for run, (g, w) in enumerate(zip(got, want)):
        for k in range(3):
            np.testing.assert_allclose(g[k], w[k], err_msg=f"run {run}, output {k}", **TOL)
