"""Benchmark workloads: each returns (model bytes, feeds). Weights are random with fixed seeds.

`load(name, decoder_config, io_dtype)` builds one; the decoder workloads take the decoder config by
name (DECODER_CONFIGS) and the dtype of their activations, KV cache and norms (IO_DTYPES: float32,
or float16 as GPU deployments run them). `default_runs` gives per-workload default (runs, warm-up) counts.

A loop workload (LOOPS: decoder_decode_loop64) is one "Run" of many model runs: `load` gives the
first step's feeds and `decode_loop` drives the steps, each feeding the previous step's present.*
back as past_key_values.* with the attention mask one longer.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))
LIGHT = os.path.join(ROOT, "third_party/root/usr/share/libonnx-testdata/data/light")


def tiny():
    """One Add on 4 floats: measures per-Run overhead."""
    g = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"])], "tiny",
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4]) for n in "ab"],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    feeds = {"a": np.ones(4, np.float32), "b": np.arange(4, dtype=np.float32)}
    return m.SerializeToString(), feeds


def lstm(steps=64, hidden=256, inputs=128):
    """One forward LSTM layer (ONNX LSTM, batch 1, Y and the final states): the recurrence's cost."""
    rng = np.random.default_rng(0)
    g = 4 * hidden
    consts = [numpy_helper.from_array((rng.standard_normal((1, g, inputs)) * 0.1).astype(np.float32), "W"),
              numpy_helper.from_array((rng.standard_normal((1, g, hidden)) * 0.1).astype(np.float32), "R"),
              numpy_helper.from_array((rng.standard_normal((1, 2 * g)) * 0.1).astype(np.float32), "B")]
    node = helper.make_node("LSTM", ["x", "W", "R", "B"], ["y", "y_h", "y_c"], hidden_size=hidden)
    graph = helper.make_graph([node], "lstm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [steps, 1, inputs])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "y_h", "y_c")],
                              consts)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    return m.SerializeToString(), {"x": rng.standard_normal((steps, 1, inputs)).astype(np.float32)}


def mlp10(hidden=64):
    """A 10-node MLP, (MatMul, Add, Relu) x 3 + MatMul, batch 1: overhead-bound."""
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(3):
        w, b = f"w{i}", f"b{i}"
        inits += [numpy_helper.from_array((rng.standard_normal((hidden, hidden)) / 8).astype(np.float32), w),
                  numpy_helper.from_array(rng.standard_normal(hidden).astype(np.float32), b)]
        nodes += [helper.make_node("MatMul", [x, w], [f"m{i}"]), helper.make_node("Add", [f"m{i}", b], [f"a{i}"]),
                  helper.make_node("Relu", [f"a{i}"], [f"r{i}"])]
        x = f"r{i}"
    inits.append(numpy_helper.from_array((rng.standard_normal((hidden, 10)) / 8).astype(np.float32), "wout"))
    nodes.append(helper.make_node("MatMul", [x, "wout"], ["y"]))
    g = helper.make_graph(nodes, "mlp10", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, hidden])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    return m.SerializeToString(), {"x": rng.standard_normal((1, hidden)).astype(np.float32)}


def bert_layer(seq=128):
    """One BERT-base encoder layer (hidden 768, 12 heads, FFN 3072) at sequence 128."""
    from transformer import make_encoder_block, make_inputs
    return make_encoder_block(hidden=768, heads=12, ffn=3072, layers=1), make_inputs(1, seq, 768)


def light_cnn(name="squeezenet"):
    """A libonnx-testdata `light` CNN with its ConstantOfShape weights replaced by random ones."""
    m = onnx.load(os.path.join(LIGHT, f"light_{name}.onnx"))
    rng = np.random.default_rng(0)
    shapes = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    keep_nodes, inits = [], [t for t in m.graph.initializer if not t.name.endswith("__SHAPE")]
    for n in m.graph.node:
        if n.op_type == "ConstantOfShape" and n.input[0] in shapes:
            shape = tuple(int(s) for s in shapes[n.input[0]])
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
            w = (rng.standard_normal(shape) / np.sqrt(max(fan_in, 1))).astype(np.float32)
            inits.append(numpy_helper.from_array(w, n.output[0]))
        else:
            keep_nodes.append(n)
    del m.graph.node[:]
    m.graph.node.extend(keep_nodes)
    del m.graph.initializer[:]
    m.graph.initializer.extend(inits)
    names = {t.name for t in inits}
    inputs = [i for i in m.graph.input if i.name not in names and not i.name.endswith("__SHAPE")]
    del m.graph.input[:]
    m.graph.input.extend(inputs)
    x = inputs[0]
    shape = [d.dim_value or 1 for d in x.type.tensor_type.shape.dim]
    return m.SerializeToString(), {x.name: rng.standard_normal(shape).astype(np.float32)}


# ---- decoder (examples/llm.py, genai layout, int4 weights with block 32) ------------------------

def _decoder_configs() -> dict:
    from llm import QWEN25_05B, TINY, LLMConfig
    # `mid`: a small Qwen2-style decoder MLX's CPU backend gets through in seconds on 2 cores.
    mid = LLMConfig(hidden=512, layers=8, heads=8, kv_heads=2, intermediate=1408, vocab=32000, context=2048,
                    rope_theta=1000000.0, qkv_bias=True)
    # `mid-acc4`: the same with MatMulNBits' accuracy_level 4, what onnxruntime-genai's builder writes
    # for CPU (ORT's CPU EP quantizes the activations to int8 per block and takes integer products)
    return {"tiny": TINY, "mid": mid, "mid-acc4": mid, "qwen2.5-0.5b": QWEN25_05B}


DECODER_CONFIGS = ("tiny", "mid", "mid-acc4", "qwen2.5-0.5b")
PROMPT = 128
LONG_PROMPT = 2048
CACHE = os.environ.get("ORT_EP_MLX_BENCH_CACHE", os.path.join(tempfile.gettempdir(), "onnxruntime-ep-mlx-bench"))


def decoder_config(name: str):
    return _decoder_configs()[name]


def accuracy_level(name: str) -> int:
    """MatMulNBits' accuracy_level of a decoder config's model: 4 for the -acc4 ones, else unset."""
    return 4 if name.endswith("-acc4") else 0


def describe_decoder(name: str) -> str:
    c = decoder_config(name)
    acc = f", accuracy_level {accuracy_level(name)}" if accuracy_level(name) else ""
    return (f"hidden {c.hidden}, {c.layers} layers, {c.heads} heads, {c.kv_heads} KV heads, "
            f"intermediate {c.intermediate}, vocab {c.vocab}; int4 MatMulNBits/GatherBlockQuantized, block 32{acc}")


IO_DTYPES = ("float32", "float16")


def _decoder_model(name: str, io_dtype: str = "float32") -> bytes:
    """The decoder's model bytes, generated once per config, io dtype (and version of
    examples/llm.py) and kept in CACHE: the bigger configs take seconds to draw."""
    from llm import make_llm
    os.makedirs(CACHE, exist_ok=True)
    cfg = decoder_config(name)
    with open(os.path.join(ROOT, "examples", "llm.py"), "rb") as f:  # a changed generator draws anew
        key = hashlib.sha1(repr(cfg).encode() + f.read()).hexdigest()[:12]
    suffix = "" if io_dtype == "float32" else f"-{io_dtype}"  # float32 keeps its old file name
    path = os.path.join(CACHE, f"decoder-{name}-{key}{suffix}.onnx")
    if os.path.exists(path):
        with open(path, "rb") as f:
            return f.read()
    model = make_llm(cfg, weights="int4", io_dtype=io_dtype, block_size=32, accuracy_level=accuracy_level(name))
    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(model)
    os.replace(tmp, path)
    return model


def _prompt(cfg, length: int = PROMPT) -> np.ndarray:
    return np.random.default_rng(1).integers(0, cfg.vocab, size=(1, length + 1), dtype=np.int64)


def decoder_prefill(name: str = "mid", io_dtype: str = "float32", prompt: int = PROMPT):
    """The decoder on a 128-token prompt with an empty past."""
    from llm import empty_past, step_feeds
    cfg = decoder_config(name)
    return (_decoder_model(name, io_dtype),
            step_feeds(cfg, _prompt(cfg, prompt)[:, :prompt], empty_past(cfg, io_dtype=io_dtype)))


def _make_past(name: str, path: str, io_dtype: str = "float32", prompt: str = str(PROMPT)) -> None:
    """Runs the prefill through ORT's CPU EP and saves present.* as the next step's past."""
    import onnxruntime as ort
    from llm import next_past
    model, feeds = decoder_prefill(name, io_dtype, int(prompt))
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    past = next_past(decoder_config(name), sess.run(None, feeds))
    tmp = f"{path}.{os.getpid()}.npz"
    np.savez(tmp, **past)
    os.replace(tmp, path)


def decoder_decode(name: str = "mid", io_dtype: str = "float32", prompt: int = PROMPT):
    """One token after a `prompt`-token past (128 by default). The past is the prefill's present.*
    from ORT's CPU EP, computed once (in a child process, so it adds nothing to this process's
    peak memory) and kept in CACHE, so every engine gets identical feeds."""
    from llm import step_feeds
    cfg = decoder_config(name)
    model = _decoder_model(name, io_dtype)
    key = hashlib.sha1(model).hexdigest()[:12]  # the model's hash: the io dtype is in it
    path = os.path.join(CACHE, f"decoder-{name}-{key}-past{prompt}.npz")
    if not os.path.exists(path):
        subprocess.run([sys.executable, os.path.abspath(__file__), "--make-past", name, path, io_dtype, str(prompt)],
                       check=True)
    with np.load(path) as z:
        past = {k: z[k] for k in z.files}
    return model, step_feeds(cfg, _prompt(cfg, prompt)[:, prompt:], past)


def decode_loop(step, feeds: dict, name: str, steps: int, tokens=None):
    """A greedy decode loop of `steps` model runs from `feeds` (a decode step's feeds: one new
    token after the prompt's KV). `step(feeds)` runs the model once and returns its outputs in
    graph order (logits, present.*), as NumPy arrays or anything NumPy can read (MLX direct keeps
    its KV cache as mx arrays: a hand-written port does not copy its cache to the host). Each step
    feeds the argmax of the last logits back, or tokens[i] when `tokens` is given (so that --verify
    compares every engine on the reference's token sequence), and the step's present.* as the
    next past. Returns (outputs, argmax tokens): outputs are the logits of every step followed by
    the last step's present.*."""
    from llm import next_past, step_feeds
    cfg = decoder_config(name)
    logits, chosen, outs = [], [], []
    for i in range(steps):
        outs = step(feeds)
        last = np.asarray(outs[0])
        logits.append(last)
        chosen.append(last[:, -1].argmax(-1))
        if i + 1 == steps:
            break
        token = chosen[-1] if tokens is None else np.asarray(tokens[i])
        mask = np.ones((feeds["attention_mask"].shape[0], feeds["attention_mask"].shape[1] + 1), np.int64)
        feeds = step_feeds(cfg, np.asarray(token, np.int64).reshape(-1, 1), next_past(cfg, outs), mask)
    return logits + list(outs[1:]), chosen


WORKLOADS = {
    "tiny_add": tiny,
    "mlp10": mlp10,
    "bert_layer_s128": bert_layer,
    "squeezenet": lambda: light_cnn("squeezenet"),
    "lstm_s64": lstm,
    "decoder_prefill128": decoder_prefill,
    "decoder_decode_after128": decoder_decode,
    "decoder_decode_loop64": decoder_decode,  # the first step's feeds; decode_loop runs the rest
    # one token after 2048: what a long context costs a step (a decoder config with at least 2049
    # positions: qwen2.5-0.5b; bench/gpu_session.sh's longctx step)
    "decoder_decode_after2048": lambda name="mid", io_dtype="float32": decoder_decode(name, io_dtype, LONG_PROMPT),
}
DECODER_WORKLOADS = ("decoder_prefill128", "decoder_decode_after128", "decoder_decode_loop64",
                     "decoder_decode_after2048")
# bench/run.py's default list: the long context needs a decoder config with the positions for it
DEFAULT_WORKLOADS = tuple(w for w in WORKLOADS if w != "decoder_decode_after2048")
LOOPS = {"decoder_decode_loop64": 64}  # workload -> model runs per timed Run (decode_loop)

# (runs, warm-up) when --runs/--warmup are not given: sized so a full bench/run.py stays within
# ~6-7 minutes on a 2-core CPU with the `mid` decoder (MLX's CPU backend takes ~6 s per prefill
# there, ~55 ms per decode step so ~3.5 s per 64-step loop, and over a minute per prefill of
# qwen2.5-0.5b). The overhead probes take well under a millisecond per Run: many runs cost
# nothing and steady their medians.
RUNS = {"tiny_add": (2000, 100), "mlp10": (2000, 100)}
RUNS_DECODER = {"decoder_prefill128": (5, 1), "decoder_decode_after128": (60, 3), "decoder_decode_loop64": (5, 1),
                "decoder_decode_after2048": (20, 2)}
RUNS_DECODER_QWEN = {"decoder_prefill128": (3, 0), "decoder_decode_after128": (10, 1),
                     "decoder_decode_loop64": (1, 0), "decoder_decode_after2048": (5, 1)}
# On the GPU (--device gpu, any decoder config): a few minutes for all engines at Qwen2.5-0.5B
# shapes, where each MLX EP worker's first Run may take tens of seconds. A prompt is 5-30 ms
# there: 20 runs cost nothing, and three warm-up runs leave a warmed-up Run for bench/run.py's
# priming rule to read (with one, no engine's second Run was under 10 ms: prompts were never primed).
RUNS_DECODER_GPU = {"decoder_prefill128": (20, 3), "decoder_decode_after128": (20, 2),
                    "decoder_decode_loop64": (3, 1), "decoder_decode_after2048": (20, 2)}
RUNS_DEFAULT = (50, 5)


def default_runs(name: str, decoder_config: str = "mid", device: str = "cpu") -> tuple[int, int]:
    decoder = RUNS_DECODER_QWEN if decoder_config == "qwen2.5-0.5b" else RUNS_DECODER
    if device == "gpu":
        decoder = RUNS_DECODER_GPU
    return {**RUNS, **decoder}.get(name, RUNS_DEFAULT)


def load(name: str, decoder_config: str = "mid", io_dtype: str = "float32"):
    """(model bytes, feeds) of a workload (io_dtype: the decoder workloads' activations)."""
    if name in DECODER_WORKLOADS:
        return WORKLOADS[name](decoder_config, io_dtype)
    return WORKLOADS[name]()


if __name__ == "__main__":
    if len(sys.argv) in (4, 5, 6) and sys.argv[1] == "--make-past":
        _make_past(*sys.argv[2:])
    else:
        sys.exit("usage: workloads.py --make-past CONFIG OUT.npz [IO_DTYPE [PROMPT]] (used by decoder_decode)")
