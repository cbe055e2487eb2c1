#!/usr/bin/env python3
"""Sums the per-node MLX operation histograms the EP prints with ORT_EP_MLX_OP_HISTOGRAM=1 (one
line per node while a signature is traced) by ONNX op type: which op types put the most MLX
operations into a compiled program. Every operation costs host time when the program replays,
whether or not it launches a kernel, so this is the first look when a step's wall time is far
above its device time.

    ORT_EP_MLX_OP_HISTOGRAM=1 python3 bench/decode_probe.py ... 2> hist.txt
    tools/op_histogram.py hist.txt [--top 8]
"""
import argparse
import collections
import re

NODE = re.compile(r"\[mlx ep\] node (.*) \((\w+)\): (\d+) ops: ?(.*)")
PROGRAM = re.compile(r"\[mlx ep\] (\S+) (eager|program): (\d+) ops")


def summarize(lines, top):
    ops, nodes = collections.Counter(), collections.Counter()
    kinds = collections.defaultdict(collections.Counter)
    for line in lines:
        m = PROGRAM.match(line)
        if m:
            print(f"{m.group(2):8s} {m.group(3):>6s} ops  {m.group(1)}")
            continue
        m = NODE.match(line)
        if not m:
            continue
        op = m.group(2)
        ops[op] += int(m.group(3))
        nodes[op] += 1
        for item in m.group(4).split():
            name, count = item.split("=")
            kinds[op][name] += int(count)
    print(f"traced nodes: {sum(nodes.values())}, their operations: {sum(ops.values())}")
    for op, n in ops.most_common():
        common = " ".join(f"{k}={v}" for k, v in kinds[op].most_common(top))
        print(f"{op:34s} {nodes[op]:4d} nodes {n:6d} ops ({n / nodes[op]:6.1f}/node)  {common}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("log")
    ap.add_argument("--top", type=int, default=8)
    args = ap.parse_args()
    with open(args.log, errors="replace") as f:
        summarize(f, args.top)


if __name__ == "__main__":
    main()
