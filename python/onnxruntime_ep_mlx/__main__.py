"""Command line: python -m onnxruntime_ep_mlx (or the onnxruntime-ep-mlx console script).

    inspect MODEL   the claim report: which nodes the EP claims, which it declines and why, clusters
    run MODEL       one Run with the EP and with ORT's CPU EP on random (or given) inputs: parity, timing
    bench MODEL     median Run times, EP vs ORT's CPU EP

EP options are given as -o key=value (repeatable), e.g. -o device=cpu -o compile=off.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import onnxruntime_ep_mlx as mlx_ep

# ONNX tensor type strings -> numpy dtype names.
_DTYPES = {"float": "float32", "float16": "float16", "double": "float64", "bfloat16": None,
           "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64", "uint8": "uint8",
           "uint16": "uint16", "uint32": "uint32", "uint64": "uint64", "bool": "bool"}


def _options(pairs: list[str]) -> dict:
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"option '{pair}' is not key=value")
        options[key] = value
    return options


def _dims(pairs: list[str]) -> dict:
    return {k: int(v) for k, v in _options(pairs).items()}


def _session(model: str, options: dict, strict: bool):
    return mlx_ep.session(model, options=options, strict=strict)


def _inputs(sess, args) -> dict:
    """Inputs given as --input NAME=FILE.npy, random values (seeded) for the others."""
    import numpy as np
    feeds = {name: np.load(path) for name, path in _options(args.input).items()}
    known = {arg.name for arg in sess.get_inputs()}
    for name in feeds:
        if name not in known:
            raise SystemExit(f"--input {name}: the model has no input '{name}' (inputs: {', '.join(sorted(known))})")
    return _random_inputs(sess, _dims(args.dim), args.seed, feeds)


def _random_inputs(sess, dims: dict, seed: int, feeds: dict) -> dict:
    import numpy as np
    rng = np.random.default_rng(seed)
    for arg in sess.get_inputs():
        if arg.name in feeds:
            continue
        kind = arg.type[len("tensor("):-1] if arg.type.startswith("tensor(") else None
        dtype = _DTYPES.get(kind)
        if dtype is None:
            raise SystemExit(f"input '{arg.name}' has type {arg.type}, which `run` cannot make up")
        shape = [d if isinstance(d, int) else dims.get(str(d), 1) for d in arg.shape]
        if dtype == "bool":
            feeds[arg.name] = rng.integers(0, 2, shape).astype(bool)
        elif dtype.startswith(("int", "uint")):
            feeds[arg.name] = rng.integers(0, 8, shape).astype(dtype)
        else:
            feeds[arg.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def _time_runs(sess, feeds: dict, warmup: int, runs: int) -> list[float]:
    for _ in range(warmup):
        sess.run(None, feeds)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - start) * 1e3)
    return times


def cmd_inspect(args) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "report.txt")
        sess = _session(args.model, {**_options(args.option), "report": path}, strict=False)
        with open(path) as f:
            print(f.read().rstrip())  # the claim report; the run report comes at session end
        print(f"session providers: {', '.join(sess.get_providers())}")
        del sess
    return 0


def cmd_run(args) -> int:
    import numpy as np
    import onnxruntime as ort
    sess = _session(args.model, _options(args.option), strict=args.strict)
    feeds = _inputs(sess, args)
    start = time.perf_counter()
    got = sess.run(None, feeds)
    first = (time.perf_counter() - start) * 1e3
    steady = statistics.median(_time_runs(sess, feeds, 1, args.runs))
    cpu = ort.InferenceSession(args.model, providers=["CPUExecutionProvider"])
    want = cpu.run(None, feeds)
    cpu_ms = statistics.median(_time_runs(cpu, feeds, 1, args.runs))
    print(f"{mlx_ep.EP_NAME} {mlx_ep.version()}, onnxruntime {ort.__version__}; MLX's CPU BLAS: {mlx_ep.cpu_blas()}")
    print("inputs: " + ", ".join(f"{k}{list(v.shape)} {v.dtype}" for k, v in feeds.items()))
    worst = 0.0
    for meta, g, w in zip(sess.get_outputs(), got, want):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape:
            print(f"output {meta.name}: shape {list(g.shape)} vs CPU EP {list(w.shape)}  MISMATCH")
            worst = float("inf")
            continue
        diff = float(np.max(np.abs(g.astype(np.float64) - w.astype(np.float64)))) if g.size else 0.0
        scale = float(np.max(np.abs(w.astype(np.float64)))) if w.size else 0.0
        worst = max(worst, diff / max(scale, 1e-30) if diff else 0.0)
        print(f"output {meta.name}{list(g.shape)} {g.dtype}: max |diff| {diff:.3g} (max |cpu| {scale:.3g})")
    print(f"time: first Run {first:.2f} ms, median {steady:.3f} ms ({args.runs} Runs); CPU EP median {cpu_ms:.3f} ms")
    ok = worst <= args.rtol
    print("parity: OK" if ok else f"parity: FAILED (worst relative difference {worst:.3g} > {args.rtol})")
    return 0 if ok else 1


def cmd_bench(args) -> int:
    import onnxruntime as ort
    sess = _session(args.model, _options(args.option), strict=args.strict)
    feeds = _inputs(sess, args)
    ep = _time_runs(sess, feeds, args.warmup, args.runs)
    cpu = _time_runs(ort.InferenceSession(args.model, providers=["CPUExecutionProvider"]), feeds,
                     args.warmup, args.runs)
    ep_ms, cpu_ms = statistics.median(ep), statistics.median(cpu)
    print(f"{'engine':<22} {'median ms':>10} {'min ms':>10}")
    print(f"{mlx_ep.EP_NAME:<22} {ep_ms:>10.3f} {min(ep):>10.3f}")
    print(f"{'CPUExecutionProvider':<22} {cpu_ms:>10.3f} {min(cpu):>10.3f}")
    print(f"EP / CPU EP: {ep_ms / cpu_ms:.2f}x ({args.runs} Runs after {args.warmup} warm-up)")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="onnxruntime-ep-mlx", description=__doc__.split("\n\n")[0])
    ap.add_argument("--version", action="version", version=f"%(prog)s {mlx_ep.__version__}")
    sub = ap.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("model", help="ONNX model file")
    common.add_argument("-o", "--option", action="append", default=[], metavar="KEY=VALUE", help="EP option")
    runs = argparse.ArgumentParser(add_help=False)
    runs.add_argument("--dim", action="append", default=[], metavar="NAME=N",
                      help="value of a symbolic input dimension (default 1)")
    runs.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                      help="an input's value (the others are random)")
    runs.add_argument("--seed", type=int, default=0)
    runs.add_argument("--strict", action="store_true", help="fail unless every node runs on the EP")
    sub.add_parser("inspect", parents=[common], help="print the claim report").set_defaults(fn=cmd_inspect)
    p = sub.add_parser("run", parents=[common, runs], help="parity against ORT's CPU EP and timing")
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--rtol", type=float, default=1e-3, help="largest relative difference accepted")
    p.set_defaults(fn=cmd_run)
    p = sub.add_parser("bench", parents=[common, runs], help="median Run times, EP vs CPU EP")
    p.add_argument("--runs", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.set_defaults(fn=cmd_bench)
    args = ap.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
