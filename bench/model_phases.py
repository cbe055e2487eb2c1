#!/usr/bin/env python3
"""Where a plain Run of a non-decoder workload (bench/workloads.py: bert_layer_s128, squeezenet, ...)
goes on the MLX EP: the wall time per Run, the EP's own phases inside it (its `trace` option: bind,
graph, eval, copy out; bench/decode_probe.py's phase_medians) and the time outside the EP's Run
(ORT's and Python's share), medians over the Runs after the warm-up. With ORT_EP_MLX_OP_HISTOGRAM=1
the compiled program's MLX operations go to stderr for tools/op_histogram.py.

    bench/model_phases.py --workload bert_layer_s128 [--device gpu] [--runs 200] [--warmup 20]
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for folder in ("python", "bench"):
    sys.path.insert(0, os.path.join(ROOT, folder))

import onnxruntime_ep_mlx as mlx_ep  # noqa: E402

from decode_probe import phase_medians  # noqa: E402
import workloads  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", required=True, choices=sorted(workloads.WORKLOADS))
    ap.add_argument("--device", default="cpu", choices=("cpu", "gpu"))
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    args = ap.parse_args()

    model, feeds = workloads.load(args.workload)[:2]
    trace = tempfile.mkstemp(suffix=".json")[1]
    sess = mlx_ep.session(model, options={"device": args.device, "trace": trace}, strict=False)
    for _ in range(args.warmup):
        sess.run(None, feeds)
    times = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        times.append(time.perf_counter() - t0)
    del sess  # the trace is written when the session's EP goes
    print(f"{args.workload} on {args.device}: wall {statistics.median(times) * 1e3:.3f} ms a Run "
          f"(median of {args.runs}); EP: {phase_medians(trace, skip=args.warmup)}", flush=True)
    os.unlink(trace)
    return 0


if __name__ == "__main__":
    sys.exit(main())
