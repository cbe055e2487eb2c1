#!/usr/bin/env python3
"""Session creation time on wide graphs (a program, not a test): for each size, the median time
to create an InferenceSession with the MLX EP and with ORT's CPU EP, the MLX EP's cluster count
(from its claim report) and the time of its first and of a later Run.

    bench/session_creation.py [--nodes 500,1000,2000,10000] [--shape wide_sum|add_chain]
                              [--reps N] [--device cpu|gpu] [--write]

Shapes (x is a [2, 4] float input, c_i a distinct scalar constant per branch, so that ORT's
common-subexpression elimination keeps every branch):
  wide_sum   x -> [Mul(x, c_i) -> Relu] for i in 1..B -> one Sum of the B branches (2B + 1 nodes)
  add_chain  the same branches folded by a chain of Adds instead of one Sum (3B - 1 nodes)
B is chosen so that the graph has about --nodes nodes. --write replaces the "## Session
creation" section of docs/PERFORMANCE.md with the table (bench/run.py keeps that section).
"""
from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
SECTION = "## Session creation"

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import onnxruntime_ep_mlx as mlx_ep  # noqa: E402


def branches_for(shape: str, nodes: int) -> int:
    return max(2, (nodes - 1) // 2 if shape == "wide_sum" else (nodes + 1) // 3)


def wide_model(shape: str, branches: int) -> bytes:
    """The model described in the module docstring."""
    nodes, inits, outs = [], [], []
    for i in range(branches):
        inits.append(numpy_helper.from_array(np.array(1.0 + i / branches, np.float32), f"c{i}"))
        nodes += [helper.make_node("Mul", ["x", f"c{i}"], [f"m{i}"]), helper.make_node("Relu", [f"m{i}"], [f"r{i}"])]
        outs.append(f"r{i}")
    if shape == "wide_sum":
        nodes.append(helper.make_node("Sum", outs, ["y"]))
    else:
        acc = outs[0]
        for i, r in enumerate(outs[1:]):
            name = "y" if i == len(outs) - 2 else f"s{i}"
            nodes.append(helper.make_node("Add", [acc, r], [name]))
            acc = name
    g = helper.make_graph(nodes, shape, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    return m.SerializeToString()


def create(model: bytes, engine: str, device: str, report: str | None = None):
    """(session, seconds to create it)."""
    t0 = time.perf_counter()
    if engine == "mlx_ep":
        options = {"device": device, **({"report": report} if report else {})}
        sess = mlx_ep.session(model, options=options, strict=True)
    else:
        sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return sess, time.perf_counter() - t0


def clusters_of(report: str) -> int:
    with open(report) as f:
        counts = re.findall(r"clusters: (\d+)", f.read())
    return int(counts[-1]) if counts else -1


def measure(shape: str, nodes: int, reps: int, device: str) -> dict:
    branches = branches_for(shape, nodes)
    model = wide_model(shape, branches)
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    row = {"shape": shape, "branches": branches, "nodes": 2 * branches + 1 if shape == "wide_sum" else 3 * branches - 1}
    for engine in ("mlx_ep", "ort_cpu"):
        times = []
        for _ in range(reps):
            sess, dt = create(model, engine, device)
            times.append(dt)
            del sess
        row[engine] = statistics.median(times)
    fd, report = tempfile.mkstemp(prefix="session-creation-", suffix=".txt")
    os.close(fd)
    sess, _ = create(model, "mlx_ep", device, report)
    row["clusters"] = clusters_of(report)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    t0 = time.perf_counter()
    got = sess.run(None, {"x": x})[0]
    row["first_run"] = time.perf_counter() - t0
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        sess.run(None, {"x": x})
        runs.append(time.perf_counter() - t0)
    row["run"] = statistics.median(runs)
    row["max_diff"] = float(np.max(np.abs(got - want)))
    del sess
    os.unlink(report)
    return row


def mlx_version() -> str:
    import mlx.core as mx
    return mx.__version__


def cpu_name() -> str:
    """The CPU's model name (Linux), else the machine type."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def table(rows: list[dict], reps: int, device: str) -> str:
    lines = [
        SECTION, "",
        "Generated by `bench/session_creation.py --write`. Session creation time on wide graphs: "
        "x -> B branches [Mul(x, c_i) -> Relu] -> one Sum (`wide_sum`) or a chain of Adds (`add_chain`), "
        f"on a [2, 4] input; the median of {reps} creations per engine, the MLX EP in strict mode "
        "(session.disable_cpu_ep_fallback=1). `clusters` is the MLX EP's claim report; `run` the median "
        "of 5 Runs after the first.", "",
        f"- machine: {cpu_name()}, {os.cpu_count()} cores, "
        f"{platform.system()} {platform.release()}",
        f"- versions: onnxruntime {ort.__version__}, mlx {mlx_version()}, onnxruntime-ep-mlx {mlx_ep.version()}",
        f"- device: MLX {device}; load average (1 min) at end: {os.getloadavg()[0]:.2f}", "",
        "Before the linear clustering (commit cd4080b: a bitset pass, then a merge pass joining one pair "
        "of clusters per pass, at most 64 passes), same machine, one creation each: wide_sum 499 / 999 / 1999 "
        "nodes took 138 / 1247 / 11711 ms (185 / 435 / 935 clusters) against ORT's CPU EP 25 / 86 / 397 ms; "
        "add_chain 500 / 998 / 2000 nodes 53 / 444 / 4104 ms (103 / 269 / 603 clusters); 10,000 nodes was "
        "not measured (growth roughly cubic: tens of minutes).", "",
        "A Run of these graphs costs what MLX's CPU backend takes per primitive (tens of µs per node, "
        "eager or compiled alike): MLX direct in Python, eager, takes 110-120 ms on 1999 branches, the MLX EP "
        "50-100 ms; the EP's own lowering (src/runtime/execute.c) does not show in a profile of those Runs.", "",
        "Session creation is ORT's own cost when the EP returns many clusters: ORT checks every fused node "
        "with utils::CreateSupportedPartitions over the whole graph, so a 2000-node chain that alternates "
        "a claimed Add with an unclaimed Inverse (1000 clusters, which no partition can avoid) takes 30 s "
        "to create against 0.09 s on ORT's CPU EP, with the EP's library under 0.2% of the profile.", "",
        "| shape | nodes | branches | MLX EP session ms | ORT CPU EP session ms | EP/CPU EP | clusters "
        "| EP first run ms | EP run ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['shape']} | {r['nodes']} | {r['branches']} | {r['mlx_ep'] * 1e3:.1f} | "
                     f"{r['ort_cpu'] * 1e3:.1f} | {r['mlx_ep'] / r['ort_cpu']:.2f} | {r['clusters']} | "
                     f"{r['first_run'] * 1e3:.1f} | {r['run'] * 1e3:.2f} |")
    return "\n".join(lines) + "\n"


def write_section(text: str, path: str) -> None:
    with open(path) as f:
        doc = f.read()
    head = doc.split("\n" + SECTION, 1)[0].rstrip("\n")
    with open(path, "w") as f:
        f.write(head + "\n\n" + text)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", default="500,1000,2000,10000")
    ap.add_argument("--shape", default="wide_sum,add_chain")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--device", default="cpu", choices=["cpu", "gpu"])
    ap.add_argument("--write", action="store_true", help="replace the section in docs/PERFORMANCE.md")
    args = ap.parse_args()
    mlx_ep.register_execution_provider_library(ort)
    create(wide_model("wide_sum", 2), "mlx_ep", args.device)  # loads MLX before anything is timed
    rows = []
    for shape in args.shape.split(","):
        for n in (int(s) for s in args.nodes.split(",")):
            r = measure(shape, n, args.reps, args.device)
            print(f"{r['shape']:9s} nodes={r['nodes']:6d} mlx_ep={r['mlx_ep'] * 1e3:9.1f} ms "
                  f"ort_cpu={r['ort_cpu'] * 1e3:8.1f} ms ratio={r['mlx_ep'] / r['ort_cpu']:5.2f} "
                  f"clusters={r['clusters']} first_run={r['first_run'] * 1e3:.1f} ms run={r['run'] * 1e3:.2f} ms "
                  f"max|diff|={r['max_diff']:.2g}", flush=True)
            rows.append(r)
    text = table(rows, args.reps, args.device)
    if args.write:
        write_section(text, os.path.join(ROOT, "docs", "PERFORMANCE.md"))
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
