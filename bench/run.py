#!/usr/bin/env python3
"""Benchmark harness (a program, not a test): for each workload, the median and spread of the
time per Run after warm-up for (1) ORT with MLXExecutionProvider, (2) ORT's CPU EP and (3) the
same computation written directly against MLX (bench/mlx_reference.py), their ratios, session
creation time, first-Run latency and peak memory. Each (workload, engine) pair runs in its own
process so peak memory is its own. Writes docs/PERFORMANCE.md.

    bench/run.py [--workloads a,b] [--runs N] [--warmup N] [--device cpu|gpu] [--out FILE]
                 [--decoder-config tiny|mid|qwen2.5-0.5b] [--verify]

--runs/--warmup default to 50/5, or to the workload's own counts (workloads.default_runs) for
the slow decoder workloads. The decoder workloads build examples/llm.py's int4 decoder in the
config named by --decoder-config (default `mid`; qwen2.5-0.5b is the real shape but takes MLX's
CPU backend over a minute per prefill). --verify runs each workload once per engine instead and checks
every output of the MLX EP and of MLX direct against ORT's CPU EP (max |difference| within 1e-3
of the reference's max |value|), one line per workload; the exit status says whether all passed.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
ENGINES = ["mlx_ep", "ort_cpu", "mlx_direct"]


def make_runner(model: bytes, feeds: dict, engine: str, device: str):
    """A callable running the model once on `engine` and returning its outputs."""
    if engine == "mlx_direct":
        import mlx.core as mx
        from mlx_reference import MlxReference
        mx.set_default_device(mx.gpu if device == "gpu" else mx.cpu)
        ref = MlxReference(model)
        return lambda: ref(feeds)
    import onnxruntime as ort
    if engine == "mlx_ep":
        import onnxruntime_ep_mlx as mlx_ep
        sess = mlx_ep.session(model, options={"device": device}, strict=False)
    else:
        sess = ort.InferenceSession(model, ort.SessionOptions(), providers=["CPUExecutionProvider"])
    return lambda: sess.run(None, feeds)


def measure(workload: str, engine: str, runs: int, warmup: int, device: str, decoder_config: str) -> dict:
    import numpy as np
    from workloads import load
    model, feeds = load(workload, decoder_config)
    t0 = time.perf_counter()
    run = make_runner(model, feeds, engine, device)
    create = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = run()
    first = time.perf_counter() - t0
    for _ in range(warmup):
        run()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    times.sort()
    q = lambda f: times[min(len(times) - 1, int(f * len(times)))]  # noqa: E731
    return {"median_ms": statistics.median(times) * 1e3, "p10_ms": q(0.1) * 1e3, "p90_ms": q(0.9) * 1e3,
            "create_ms": create * 1e3, "first_run_ms": first * 1e3,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "checksum": float(np.asarray(out[0], dtype=np.float64).sum())}


def verify(workload: str, device: str, decoder_config: str, tol: float = 1e-3) -> bool:
    """Runs the workload once per engine; prints one line comparing MLX EP and MLX direct with
    ORT's CPU EP (per output: max |a - ref| / max |ref|, the worst over the outputs)."""
    import numpy as np
    from workloads import load
    model, feeds = load(workload, decoder_config)
    ref = [np.asarray(o) for o in make_runner(model, feeds, "ort_cpu", device)()]
    ok, parts = True, []
    for engine in ("mlx_ep", "mlx_direct"):
        try:
            outs = make_runner(model, feeds, engine, device)()
        except Exception as e:  # noqa: BLE001 - reported, not raised: the other engine still runs
            ok = False
            parts.append(f"{engine} failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            continue
        worst = 0.0
        for o, r in zip(outs, ref):
            o = np.asarray(o)
            if o.shape != r.shape:
                worst = float("inf")
                break
            if r.size:
                worst = max(worst, float(np.abs(o.astype(np.float64) - r).max() / max(np.abs(r).max(), 1e-30)))
        good = len(outs) == len(ref) and worst <= tol
        ok &= good
        parts.append(f"{engine} {worst:.1e} {'ok' if good else 'FAIL'}")
    print(f"verify {workload_label(workload, decoder_config)} vs ORT CPU EP (max rel error, tolerance {tol:g}): "
          f"{', '.join(parts)}", flush=True)
    return ok


def workload_label(workload: str, decoder_config: str) -> str:
    from workloads import DECODER_WORKLOADS
    return f"{workload}[{decoder_config}]" if workload in DECODER_WORKLOADS else workload


def run_counts(workload: str, args) -> tuple[int, int]:
    from workloads import default_runs
    runs, warmup = default_runs(workload, args.decoder_config)
    return (args.runs if args.runs is not None else runs, args.warmup if args.warmup is not None else warmup)


def machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"


def versions() -> str:
    import mlx.core as mx
    import onnxruntime as ort
    import onnxruntime_ep_mlx as mlx_ep
    return f"onnxruntime {ort.__version__}, mlx {mx.__version__}, onnxruntime-ep-mlx {mlx_ep.version()}"


def render(results: dict, args) -> str:
    lines = ["# Performance", "",
             "Generated by `bench/run.py` (`make bench`). Times are per Run after warm-up: median, with the",
             "10th-90th percentile spread in brackets. `MLX direct` is the same computation written",
             "against Python `mlx.core` (bench/mlx_reference.py): the ceiling for any MLX EP.",
             "EP/MLX > 1 means the EP is slower than hand-written MLX.", "",
             f"- machine: {machine()}", f"- versions: {versions()}", f"- device: MLX {args.device}",
             f"- runs: {runs_line(results, args)}",
             f"- load average (1 min) at start / end: {args.load[0]:.2f} / {args.load[1]:.2f} "
             f"(the machine may be shared: numbers are noisy)",
             f"- bench wall time: {args.wall_s:.0f} s"]
    from workloads import DECODER_WORKLOADS, describe_decoder
    if any(w in DECODER_WORKLOADS for w in results):
        lines.append(f"- decoder `[{args.decoder_config}]`: {describe_decoder(args.decoder_config)}; "
                     "prefill = 128-token prompt, empty past; decode = 1 token after the prefill's KV (128 "
                     "positions, computed once by ORT's CPU EP)")
    lines += ["",
             "| workload | MLX EP ms | ORT CPU EP ms | MLX direct ms | EP/MLX | EP/CPU EP | EP session ms | EP first run ms | EP peak RSS MB |",
             "|---|---|---|---|---|---|---|---|---|"]
    for w, r in results.items():
        w = workload_label(w, args.decoder_config)
        if "error" in r:
            lines.append(f"| {w} | error: {r['error']} |  |  |  |  |  |  |  |")
            continue
        e, c, m = r["mlx_ep"], r["ort_cpu"], r["mlx_direct"]
        fmt = lambda x: f"{x['median_ms']:.3f} [{x['p10_ms']:.3f}-{x['p90_ms']:.3f}]"  # noqa: E731
        lines.append(f"| {w} | {fmt(e)} | {fmt(c)} | {fmt(m)} | {e['median_ms'] / m['median_ms']:.2f} | "
                     f"{e['median_ms'] / c['median_ms']:.2f} | {e['create_ms']:.1f} | {e['first_run_ms']:.1f} | "
                     f"{e['peak_rss_mb']:.0f} |")
    if "tiny_add" in results and "error" not in results["tiny_add"]:
        t = results["tiny_add"]
        over = (t["mlx_ep"]["median_ms"] - t["mlx_direct"]["median_ms"]) * 1e3
        lines += ["", f"Per-Run EP overhead on a one-node graph (MLX EP minus MLX direct, medians): {over:.1f} µs "
                      f"(ORT's own per-Run cost is in the MLX EP figure; ORT CPU EP alone: "
                      f"{t['ort_cpu']['median_ms'] * 1e3:.1f} µs)."]
    return "\n".join(lines) + "\n"


def runs_line(results: dict, args) -> str:
    counts = {}
    for w in results:
        counts.setdefault(run_counts(w, args), []).append(workload_label(w, args.decoder_config))
    items = sorted(counts.items(), key=lambda kv: -len(kv[1]))
    if len(items) == 1:
        return f"{items[0][0][0]} after {items[0][0][1]} warm-up runs"
    return "; ".join(f"{r} after {wu} warm-up runs ({', '.join(ws)})" for (r, wu), ws in items)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workloads", default=",".join(__import__("workloads").WORKLOADS))
    ap.add_argument("--runs", type=int, default=None, help="runs per measurement (default: per workload)")
    ap.add_argument("--warmup", type=int, default=None, help="warm-up runs (default: per workload)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--decoder-config", default="mid", choices=__import__("workloads").DECODER_CONFIGS,
                    help="decoder workloads' config (default: mid)")
    ap.add_argument("--verify", action="store_true",
                    help="check each engine's outputs against ORT's CPU EP instead of timing")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "PERFORMANCE.md"))
    ap.add_argument("--one", nargs=2, metavar=("WORKLOAD", "ENGINE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    workloads = args.workloads.split(",")
    unknown = [w for w in workloads if w not in __import__("workloads").WORKLOADS]
    if unknown:
        ap.error(f"unknown workload(s): {', '.join(unknown)}")
    if args.one:
        runs, warmup = run_counts(args.one[0], args)
        print(json.dumps(measure(args.one[0], args.one[1], runs, warmup, args.device, args.decoder_config)))
        return 0
    if args.verify:
        return 0 if all([verify(w, args.device, args.decoder_config) for w in workloads]) else 1
    start, load0 = time.perf_counter(), os.getloadavg()[0]
    results = {}
    for w in workloads:
        results[w] = {}
        runs, warmup = run_counts(w, args)
        for engine in ENGINES:
            cmd = [sys.executable, __file__, "--one", w, engine, "--runs", str(runs),
                   "--warmup", str(warmup), "--device", args.device, "--decoder-config", args.decoder_config]
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0:
                results[w] = {"error": f"{engine}: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else p.returncode}"}
                break
            results[w][engine] = json.loads(p.stdout.strip().splitlines()[-1])
            r = results[w][engine]
            print(f"{w:18s} {engine:10s} median {r['median_ms']:9.3f} ms  first {r['first_run_ms']:9.1f} ms  "
                  f"create {r['create_ms']:8.1f} ms  rss {r['peak_rss_mb']:6.0f} MB  checksum {r['checksum']:.6g}",
                  flush=True)
    args.wall_s, args.load = time.perf_counter() - start, (load0, os.getloadavg()[0])
    print(f"bench took {args.wall_s:.0f} s; load average {args.load[0]:.2f} at start, {args.load[1]:.2f} at end")
    text = render(results, args)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
