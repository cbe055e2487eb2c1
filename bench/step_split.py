#!/usr/bin/env python3
"""Where a decode step's wall time goes, on the MLX EP or on ORT's CUDA EP, in the flow a GPU user
runs (IOBinding: the token and the mask bound from NumPy, the presents left on the device and fed
back as the next past, the logits bound to the host): per step, the Python side's binding (ORT
copies the NumPy inputs to the device here), `run_with_iobinding`, fetching the outputs, the logits
as NumPy and their argmax; for the MLX EP also its own Run (its trace option) and the time between
two of its Runs. Medians over the last loop's steps after the first two. With tools/sampler
preloaded (SAMPLER_WAIT=1) only those steps are sampled.

    bench/step_split.py --engine mlx|ort_cuda [--config qwen2.5-0.5b] [--dtype float16] [--steps 64] [--loops 2]

The same decoder file as the bench (examples/llm.py's genai layout, int4, block 32), cached under
the bench's cache directory. On a CPU machine `--engine mlx --io-device cpu` with
ORT_EP_MLX_DEVICE_MEMORY=host runs the same flow on the host stand-in.
"""
import argparse
import ctypes
import gc
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for folder in ("python", "bench", "examples"):
    sys.path.insert(0, os.path.join(ROOT, folder))

import onnxruntime as ort  # noqa: E402

from decode_probe import bind_step  # noqa: E402
from llm import empty_past, make_llm, step_feeds  # noqa: E402
from workloads import CACHE, accuracy_level, decoder_config  # noqa: E402

COLUMNS = ("bind", "run", "outputs", "numpy", "argmax", "step")


def sampler(name):
    fn = getattr(ctypes.CDLL(None), name, None)
    return fn if fn is not None else (lambda: None)


def model_bytes(config: str, dtype: str) -> bytes:
    path = os.path.join(CACHE, f"step_split_{config}_{dtype}.onnx")
    if os.path.exists(path):
        with open(path, "rb") as f:
            return f.read()
    model = make_llm(decoder_config(config), weights="int4", io_dtype=dtype, block_size=32,
                     accuracy_level=accuracy_level(config))
    os.makedirs(CACHE, exist_ok=True)
    with open(path, "wb") as f:
        f.write(model)
    return model


def open_session(engine: str, model: bytes, trace: str | None):
    if engine == "mlx":
        import onnxruntime_ep_mlx as mlx_ep
        return mlx_ep.session(model, options={"trace": trace}, strict=False)
    ort.preload_dlls()
    return ort.InferenceSession(model, ort.SessionOptions(), providers=["CUDAExecutionProvider"])


def timed_loop(sess, cfg, dtype, device, steps, record, start, stop):
    """One prompt and `steps` greedy decode steps; appends each step's split to `record` when given."""
    names = [o.name for o in sess.get_outputs()]
    past_names = [n.replace("present", "past_key_values") for n in names[1:]]
    prompt = np.random.default_rng(1).integers(0, cfg.vocab, size=(1, 128), dtype=np.int64)
    feeds = step_feeds(cfg, prompt, empty_past(cfg, io_dtype=dtype))
    past = None
    for step in range(steps + 1):
        if record is not None and step == 2:
            start()
        t0 = time.perf_counter()
        io = bind_step(sess, feeds, past, past_names, names, "cpu", device)
        t1 = time.perf_counter()
        sess.run_with_iobinding(io)
        t2 = time.perf_counter()
        outs = io.get_outputs()
        past = dict(zip(past_names, outs[1:]))
        t3 = time.perf_counter()
        logits = outs[0].numpy()
        t4 = time.perf_counter()
        token = logits[:, -1].argmax(-1).reshape(-1, 1).astype(np.int64)
        t5 = time.perf_counter()
        feeds = {"input_ids": token, "attention_mask": np.ones((1, feeds["attention_mask"].shape[1] + 1), np.int64)}
        if record is not None and step >= 2:
            for k, v in zip(COLUMNS, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t5 - t0)):
                record[k].append(v * 1e3)
    stop()


def ep_runs(trace: str, n: int) -> str:
    """The MLX EP's last n Runs from its trace: their median and the median gap between two."""
    with open(trace) as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    runs = sorted((e for e in events if e["name"] == "Run"), key=lambda e: e["ts"])[-n:]
    gaps = [b["ts"] - (a["ts"] + a["dur"]) for a, b in zip(runs, runs[1:])]
    return (f"EP Run {statistics.median(r['dur'] for r in runs) / 1e3:.3f} ms, "
            f"between EP Runs {statistics.median(gaps) / 1e3:.3f} ms")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engine", choices=("mlx", "ort_cuda"), required=True)
    ap.add_argument("--config", default="qwen2.5-0.5b")
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--loops", type=int, default=2)
    ap.add_argument("--io-device", default="cuda", help="where the presents are bound (the EP's device: cuda)")
    args = ap.parse_args()
    cfg = decoder_config(args.config)
    trace = tempfile.mkstemp(suffix=".json")[1] if args.engine == "mlx" else None
    sess = open_session(args.engine, model_bytes(args.config, args.dtype), trace)
    record = {k: [] for k in COLUMNS}
    start, stop = sampler("sampler_start"), sampler("sampler_stop")
    for rep in range(args.loops):
        last = rep == args.loops - 1
        timed_loop(sess, cfg, args.dtype, args.io_device, args.steps, record if last else None, start, stop)
    steps = record["step"]
    print(f"{args.engine} {args.config} {args.dtype}, medians of {len(steps)} steps (ms): "
          + ", ".join(f"{k} {statistics.median(v):.3f}" for k, v in record.items())
          + f"; step p90 {sorted(steps)[int(0.9 * len(steps))]:.3f}", flush=True)
    if trace:
        del sess
        gc.collect()  # the session writes its trace when it is released
        print("  " + ep_runs(trace, len(steps)))
        os.unlink(trace)


if __name__ == "__main__":
    main()
