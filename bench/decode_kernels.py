#!/usr/bin/env python3
"""Where a decode step's GPU time goes, kernel by kernel (NVIDIA machines; needs torch with CUDA).

Runs bench/decode_probe.py twice under torch.profiler (CUPTI records every CUDA kernel of the
process, MLX's included), with a short and a long decode loop, and prints the difference divided
by the extra steps: for each kernel name, launches and device microseconds per decode step.
Everything else (model build, prefill, traces, the first Runs' JIT) cancels out.

    bench/decode_kernels.py [--short 8] [--long 40] [--mode io|shared|direct|prefill|prefill_device|direct_prefill] [--top 30]

--mode prefill profiles the 128-token prompt Run instead (IOBinding, the logits bound to the host;
--short/--long count prefill Runs, every one after the first two replays the compiled program);
prefill_device the same with the logits left on the device (as the bench's prefill);
direct_prefill the same prompt in MLX direct.

--by-grid keys each kernel by its launch grid too (from the profiler's trace), so that one kernel
variant launched at several shapes (the quantized GEMM's o_proj, down_proj and lm_head) shows apart.

--mode direct profiles MLX direct's decode loop instead (bench/mlx_reference.py on the same
model and the prompt's KV from bench/workloads.py): the launches a hand-written MLX port needs.
With ORT_EP_MLX_LIBRARY and PYTHONPATH as for bench/run.py. One child process per profile.
"""
import argparse
import collections
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def mlx_direct(workload, config="qwen2.5-0.5b", dtype="float16"):
    """bench/mlx_reference.py's MLX port of the workload's model, its feeds, and bench/workloads.py."""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import workloads
    from mlx_reference import MlxReference
    model, feeds = workloads.load(workload, config, dtype)
    return MlxReference(model), feeds, workloads


def direct_loop(steps, config="qwen2.5-0.5b"):
    """A callable running MLX direct's greedy decode loop of `steps` steps from the prompt's KV."""
    ref, feeds, workloads = mlx_direct("decoder_decode_loop64", config)
    return lambda: workloads.decode_loop(ref.run_mx, feeds, config, steps)


def direct_prefills(runs):
    """A callable running MLX direct's 128-token prefill `runs` times."""
    import mlx.core as mx
    ref, feeds, _ = mlx_direct("decoder_prefill128")

    def run():
        for _ in range(runs):
            mx.eval(ref.run_mx(feeds))
    return run


def kernels_by_grid(trace_path):
    """{"name grid=[x, y, z]": [count, device_us]} of the kernels in a chrome trace torch.profiler
    exported (each kernel event's args carry its grid)."""
    with open(trace_path) as f:
        events = json.load(f).get("traceEvents", [])
    table = collections.defaultdict(lambda: [0, 0.0])
    for e in events:
        if e.get("cat") != "kernel" or "dur" not in e:
            continue
        key = f"{e.get('name', '?')} grid={e.get('args', {}).get('grid')}"
        table[key][0] += 1
        table[key][1] += float(e["dur"])
    return dict(table)


def profile_child(steps, mode, by_grid=False):
    """In the child: one probe run under the profiler; prints {kernel: [count, device_us]} as JSON.
    For the prefill modes `steps` counts prefill Runs (decode_probe --steps 0 --loops steps)."""
    import runpy

    import torch
    from torch.profiler import ProfilerActivity, profile
    prefill = mode in ("prefill", "prefill_device")
    probe_mode, loops, n_steps = ("io", steps, 0) if prefill else (mode, 1, steps)
    sys.argv = ["decode_probe.py", "--config", "qwen2.5-0.5b", "--dtype", "float16", "--steps", str(n_steps),
                "--mode", probe_mode, "--loops", str(loops)] + (["--logits-device"] if mode == "prefill_device" else [])
    loop = direct_loop(steps) if mode == "direct" else direct_prefills(steps) if mode == "direct_prefill" else None
    torch.zeros(1, device="cuda")  # CUDA context before the profiler starts
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        if loop:
            loop()
        else:
            runpy.run_path(os.path.join(ROOT, "bench", "decode_probe.py"), run_name="__main__")
    if by_grid:
        import tempfile
        fd, path = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        p.export_chrome_trace(path)
        table = kernels_by_grid(path)
        os.unlink(path)
    else:
        table = {k.key: [k.count, k.self_device_time_total] for k in p.key_averages() if k.self_device_time_total > 0}
    print("KERNELS " + json.dumps(table))


def run_profile(steps, mode, by_grid=False):
    out = subprocess.run([sys.executable, __file__, "--child", str(steps), "--mode", mode]
                         + (["--by-grid"] if by_grid else []), capture_output=True, text=True, check=True).stdout
    line = next(l for l in out.splitlines() if l.startswith("KERNELS "))
    return json.loads(line[len("KERNELS "):])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--short", type=int, default=8)
    ap.add_argument("--long", type=int, default=40)
    ap.add_argument("--mode", default="io")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--by-grid", action="store_true", help="key kernels by their launch grid too")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        return profile_child(args.child, args.mode, args.by_grid)
    a, b = run_profile(args.short, args.mode, args.by_grid), run_profile(args.long, args.mode, args.by_grid)
    steps = args.long - args.short
    per_step = collections.Counter()
    launches = {}
    for name in set(a) | set(b):
        ca, ta = a.get(name, [0, 0.0])
        cb, tb = b.get(name, [0, 0.0])
        if cb - ca > 0:
            per_step[name] = (tb - ta) / steps
            launches[name] = (cb - ca) / steps
    total_us, total_n = sum(per_step.values()), sum(launches.values())
    unit = "prefill Run" if "prefill" in args.mode else "decode step"
    print(f"per {unit} ({args.mode}, {steps} extra): {total_n:.0f} launches/copies, "
          f"{total_us:.0f} us of device time")
    for name, us in per_step.most_common(args.top):
        print(f"  {launches[name]:7.1f} x {us:9.1f} us  {name[:150] if args.by_grid else name[:120]}")


if __name__ == "__main__":
    main()
