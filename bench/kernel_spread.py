#!/usr/bin/env python3
"""Each GPU kernel's launches in one decode loop, with their spread (NVIDIA machines; needs torch
with CUDA): bench/decode_probe.py runs once under torch.profiler (CUPTI sees MLX's kernels and ours)
and every kernel name, memcpy and memset gets its count, total, minimum, median, 90th percentile and
maximum duration in microseconds. Where bench/decode_kernels.py says what a step costs on average,
this says whether a kernel is slow every time (its median) or now and then (page faults, waits: its
tail), which tells a kernel's own cost from where its memory lives.

    bench/kernel_spread.py [--mode io|shared|plain] [--steps 48] [--rows 24]

With ORT_EP_MLX_LIBRARY and PYTHONPATH as for bench/run.py. The loop includes the session's prompt
and first Runs: a per-step view is the count divided by the steps for kernels a step launches.
"""
import argparse
import collections
import json
import os
import runpy
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def durations(trace_path):
    """{(category, name): [microseconds, ...]} of the kernels, copies and fills in a chrome trace."""
    with open(trace_path) as f:
        events = json.load(f).get("traceEvents", [])
    table = collections.defaultdict(list)
    for e in events:
        if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset") or "dur" not in e:
            continue
        name = e.get("name", "?")
        name = name.split("_sm_")[0] if name.startswith("ort_ep_mlx") else name[:70]
        table[(e["cat"], name)].append(float(e["dur"]))
    return table


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", default="io")
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--rows", type=int, default=24)
    args = ap.parse_args()
    import torch
    from torch.profiler import ProfilerActivity, profile
    sys.argv = ["decode_probe.py", "--steps", str(args.steps), "--mode", args.mode, "--loops", "1"]
    torch.zeros(1, device="cuda")  # CUDA context before the profiler starts
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        runpy.run_path(os.path.join(ROOT, "bench", "decode_probe.py"), run_name="__main__")
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        p.export_chrome_trace(path)
        table = durations(path)
    finally:
        os.unlink(path)
    print(f"kernels of a {args.mode} loop of {args.steps} steps: category, name, count, total, min, median, p90, max (us)")
    for (cat, name), d in sorted(table.items(), key=lambda kv: -sum(kv[1]))[:args.rows]:
        d.sort()
        p90 = d[int(0.9 * (len(d) - 1))]
        print(f"{cat[:10]:10s} {name[:60]:60s} {len(d):6d} {sum(d):9.0f} {d[0]:7.1f} "
              f"{statistics.median(d):7.1f} {p90:7.1f} {d[-1]:8.1f}")


if __name__ == "__main__":
    main()
