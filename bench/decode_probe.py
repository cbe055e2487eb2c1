#!/usr/bin/env python3
"""Where a decode step's time goes on one engine, quickly (a probe, not the bench): the genai
decoder of examples/llm.py at a given config and dtype, a prompt, then a greedy loop of decode
steps with the MLX EP, fed either plainly (NumPy in, NumPy out: the KV cache crosses host memory)
or through an IOBinding (present.* bound to the EP's device memory and fed back as past). Prints
per-step medians, the first Run and the EP's run report.

    bench/decode_probe.py [--config qwen2.5-0.5b] [--dtype float16] [--steps 64] [--mode plain|io|shared|both|all]

--steps 0 runs the prompt alone in every loop (prefill Runs only; with --phases, their phases).

"shared" is onnxruntime-genai's past_present_share_buffer: one device buffer per KV pair of
--max-len rows bound as both input and output (needs the EP's device memory: a CUDA GPU).
"""
import argparse
import ctypes
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "examples"))

import onnxruntime as ort  # noqa: E402

import onnxruntime_ep_mlx as mlx_ep  # noqa: E402
from llm import empty_past, make_llm, step_feeds  # noqa: E402
from workloads import accuracy_level, decoder_config  # noqa: E402


def _sampler(name):
    """tools/sampler's window control when it is preloaded (SAMPLER_WAIT=1): the decode steps only."""
    fn = getattr(ctypes.CDLL(None), name, None)
    return fn if fn is not None else (lambda: None)


SAMPLER_START, SAMPLER_STOP = _sampler("sampler_start"), _sampler("sampler_stop")


def shared_loop(sess, cfg, dtype, prompt, steps, max_len):
    """onnxruntime-genai's shared KV buffer: one device buffer per past/present pair of max_len
    rows, bound as both the input and the output of every step; only the mask grows."""
    names = [o.name for o in sess.get_outputs()]
    past_names = [n.replace("present", "past_key_values") for n in names[1:]]
    devices = [d for d in ort.get_ep_devices() if d.ep_name == mlx_ep.ep_name()]
    mi = devices[0].memory_info(ort.OrtDeviceMemoryType.DEFAULT)
    shape = (prompt.shape[0], cfg.kv_heads, max_len, cfg.head_dim)
    zeros = np.zeros(shape, dtype)
    bufs = {}
    for k in past_names:
        if mi is None:  # no device memory (MLX's CPU): host buffers
            bufs[k] = ort.OrtValue.ortvalue_from_numpy(np.zeros(shape, dtype))
            continue
        bufs[k] = ort.OrtValue.ortvalue_from_shape_and_type(shape, zeros.dtype, memory_info=mi)
        ort.copy_tensors([ort.OrtValue.ortvalue_from_numpy(zeros)], [bufs[k]])
    ids, mask = prompt, np.ones(prompt.shape, np.int64)
    times = []
    t0 = time.perf_counter()
    for step in range(steps + 1):
        if step == 2:  # after the prefill and the first step (its trace and compile)
            SAMPLER_START()
        s0 = time.perf_counter()
        io = sess.io_binding()
        io.bind_cpu_input("input_ids", ids)
        io.bind_cpu_input("attention_mask", mask)
        for k in past_names:
            io.bind_ortvalue_input(k, bufs[k])
        io.bind_output("logits", "cpu")
        for n, k in zip(names[1:], past_names):
            io.bind_ortvalue_output(n, bufs[k])
        sess.run_with_iobinding(io)
        logits = io.get_outputs()[0].numpy()
        ids = logits[:, -1].argmax(-1).reshape(-1, 1).astype(np.int64)
        mask = np.ones((1, mask.shape[1] + 1), np.int64)
        times.append(time.perf_counter() - s0)
    SAMPLER_STOP()
    return times, time.perf_counter() - t0


def bind_step(sess, feeds, past, past_names, names, logits_to, presents_to):
    """A decode step's IOBinding: the token and the mask (and, on the first step, the past) bound
    from NumPy, the previous step's presents (past, OrtValues) as they are; the logits bound to
    logits_to, the presents to presents_to."""
    io = sess.io_binding()
    io.bind_cpu_input("input_ids", feeds["input_ids"])
    io.bind_cpu_input("attention_mask", feeds["attention_mask"])
    for k in past_names:
        if past is None:
            io.bind_cpu_input(k, feeds[k])
        else:
            io.bind_ortvalue_input(k, past[k])
    io.bind_output(names[0], logits_to)
    for n in names[1:]:
        io.bind_output(n, presents_to)
    return io


def loop(sess, cfg, dtype, prompt, steps, io_device, logits_device=False, sample_at=2, gap_s=0.0):
    """A prompt and `steps` greedy decode steps; the sampler (tools/sampler) runs from step
    sample_at (None: not in this loop). logits_device: with IOBinding the logits stay on the device
    as the bench's prefill leaves them (bench/run.py's IoBound), not bound to the host. gap_s: the
    process sleeps that long before each Run (untimed), as a bench worker does between its turns."""
    names = [o.name for o in sess.get_outputs()]
    past_names = [n.replace("present", "past_key_values") for n in names[1:]]
    feeds = step_feeds(cfg, prompt, empty_past(cfg, io_dtype=dtype))
    times, past = [], None
    t0 = time.perf_counter()
    for step in range(steps + 1):
        if step == sample_at:  # after the prefill and the first step (their trace and compile)
            SAMPLER_START()
        if gap_s > 0:
            time.sleep(gap_s)
        s0 = time.perf_counter()
        if io_device is None:
            outs = sess.run(None, feeds)
            logits, past = outs[0], dict(zip(past_names, outs[1:]))
        else:
            io = bind_step(sess, feeds, past, past_names, names, io_device if logits_device else "cpu", io_device)
            sess.run_with_iobinding(io)
            outs = io.get_outputs()
            past = dict(zip(past_names, outs[1:]))
            if logits_device:  # the timed step ends with the Run; the next token is read outside it
                times.append(time.perf_counter() - s0)
                s0 = None
                if step == steps:  # no next token to read
                    break
                logits = io.copy_outputs_to_cpu()[0]
            else:
                logits = outs[0].numpy()
        token = logits[:, -1].argmax(-1).reshape(-1, 1).astype(np.int64)
        mask = np.ones((1, feeds["attention_mask"].shape[1] + 1), np.int64)
        feeds = {"input_ids": token, "attention_mask": mask,
                 **({k: v for k, v in past.items()} if io_device is None else {})}
        if s0 is not None:
            times.append(time.perf_counter() - s0)
    SAMPLER_STOP()
    return times, time.perf_counter() - t0


def phase_medians(trace_path: str, skip: int) -> str:
    """The EP's phases per Run (its `trace` option's Chrome-trace events: bind, graph, eval, copy
    out inside each Run), as medians in ms over the Runs after the first `skip` (the prefill and
    the first decode steps, which trace and compile)."""
    with open(trace_path) as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    runs = sorted((e for e in events if e["name"] == "Run"), key=lambda e: e["ts"])[skip:]
    if not runs:
        return "no Runs after the first ones"
    per_phase = {}
    for run in runs:
        end = run["ts"] + run["dur"]
        totals = {"Run": run["dur"]}
        for e in events:
            if e["name"] != "Run" and run["ts"] <= e["ts"] <= end:
                totals[e["name"]] = totals.get(e["name"], 0) + e["dur"]
        for name, us in totals.items():
            per_phase.setdefault(name, []).append(us)
    order = ["Run", "bind", "graph", "eval", "copy out"]
    names = order + sorted(set(per_phase) - set(order))
    return ", ".join(f"{n} {statistics.median(per_phase[n]) / 1e3:.2f}" for n in names if n in per_phase) + \
        f" (medians in ms over {len(runs)} Runs)"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="qwen2.5-0.5b")
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--mode", default="both")
    ap.add_argument("--io-device", default="cuda")
    ap.add_argument("--loops", type=int, default=2)
    ap.add_argument("--max-len", type=int, default=1024, help="shared mode: the KV buffer's rows")
    ap.add_argument("--prompt-tokens", type=int, default=128,
                    help="the prompt's length: the context the decode steps attend over starts there")
    ap.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="an EP option (repeatable)")
    ap.add_argument("--logits-device", action="store_true",
                    help="IOBinding: the logits stay on the device (as the bench's prefill), read after the timed Run")
    ap.add_argument("--gap-ms", type=float, default=0.0,
                    help="sleep this long before every Run (untimed): a Run after idling, as in the bench's rounds")
    ap.add_argument("--phases", action="store_true",
                    help="also print the EP's phases per decode Run (bind, graph, eval, copy out) from its trace")
    args = ap.parse_args()
    extra_options = dict(o.split("=", 1) for o in args.option)
    cfg = decoder_config(args.config)
    t0 = time.perf_counter()
    model = make_llm(cfg, weights="int4", io_dtype=args.dtype, block_size=32, accuracy_level=accuracy_level(args.config))
    print(f"model built in {time.perf_counter() - t0:.1f} s ({len(model) / 1e6:.0f} MB)", flush=True)
    prompt = np.random.default_rng(1).integers(0, cfg.vocab, size=(1, args.prompt_tokens), dtype=np.int64)
    modes = ["plain", "io", "shared"] if args.mode == "all" else ["plain", "io"] if args.mode == "both" else [args.mode]
    for mode in modes:
        fd, report = tempfile.mkstemp(suffix=".txt")
        os.close(fd)
        t0 = time.perf_counter()
        trace = tempfile.mkstemp(suffix=".json")[1] if args.phases else None
        options = {"report": report, **({"trace": trace} if trace else {}), **extra_options}
        sess = mlx_ep.session(model, options=options, strict=False)
        create = time.perf_counter() - t0
        for rep in range(args.loops):
            if mode == "shared":
                times, total = shared_loop(sess, cfg, args.dtype, prompt, args.steps, args.max_len)
            else:
                sample_at = 2 if args.steps > 0 else (0 if rep > 0 else None)
                times, total = loop(sess, cfg, args.dtype, prompt, args.steps, None if mode == "plain" else args.io_device,
                                    args.logits_device, sample_at, args.gap_ms / 1e3)
            dec = times[1:]
            steps_part = (f"decode median {statistics.median(dec) * 1e3:.2f} ms ({len(dec) / sum(dec):.1f} tok/s), "
                          f"first decode {dec[0] * 1e3:.1f} ms, " if dec else "")
            print(f"{mode} loop {rep}: prefill {times[0] * 1e3:.1f} ms, {steps_part}loop {total:.2f} s; "
                  f"session {create:.2f} s", flush=True)
        del sess
        with open(report) as f:
            for line in f:
                if "run report" in line or "decode buckets" in line:
                    print("  " + line.strip())
        os.unlink(report)
        if trace:
            print(f"  {mode} phases: {phase_medians(trace, skip=3)}", flush=True)
            os.unlink(trace)


if __name__ == "__main__":
    main()
