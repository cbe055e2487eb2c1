"""The demo behind `make demo`: a 2-layer transformer encoder run by the MLX execution provider.

Builds the encoder (examples/transformer.py), registers the EP, prints its claim report (which
nodes it took, which it declined and why, the clusters it formed), runs the model with the MLX EP
in strict mode (no CPU fallback) and with ORT's CPU EP, and prints the difference between the two
and the median time per run. Exits non-zero when the outputs differ by more than 1e-4."""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402

import onnxruntime_ep_mlx as mlx_ep  # noqa: E402
from transformer import make_encoder_block, make_inputs  # noqa: E402

TOLERANCE = 1e-4


def time_runs(sess: ort.InferenceSession, feeds: dict, warmup: int, runs: int) -> float:
    """Median wall time of one run in milliseconds."""
    for _ in range(warmup):
        sess.run(None, feeds)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        sess.run(None, feeds)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def mlx_session_with_report(model: bytes, device: str | None) -> tuple[ort.InferenceSession, str]:
    """A strict MLX session and the claim report the EP wrote while creating it."""
    fd, path = tempfile.mkstemp(prefix="ep_mlx_report_", suffix=".txt")
    os.close(fd)
    old = os.environ.get("ORT_EP_MLX_REPORT")
    os.environ["ORT_EP_MLX_REPORT"] = path
    try:
        sess = mlx_ep.session(model, options={"device": device} if device else None, strict=True)
        with open(path, encoding="utf-8", errors="replace") as f:
            report = f.read()
    finally:
        if old is None:
            os.environ.pop("ORT_EP_MLX_REPORT", None)
        else:
            os.environ["ORT_EP_MLX_REPORT"] = old
        os.unlink(path)
    return sess, report


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=1024)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--device", default=None, help="MLX device: cpu or gpu (default: the EP's)")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()

    model = make_encoder_block(hidden=args.hidden, heads=args.heads, ffn=args.ffn,
                               layers=args.layers, seed=0)
    feeds = make_inputs(batch=args.batch, seq=args.seq, hidden=args.hidden, seed=1,
                        masked_tail=args.seq // 8)
    print(f"onnxruntime {ort.__version__}, onnxruntime-ep-mlx {mlx_ep.version()}, "
          f"library {mlx_ep.library_path()}")
    print(f"model: {args.layers}-layer transformer encoder, hidden {args.hidden}, heads {args.heads}, "
          f"ffn {args.ffn}; input x[{args.batch}, {args.seq}, {args.hidden}]")

    mlx_ep.register_execution_provider_library()
    mlx_sess, report = mlx_session_with_report(model, args.device)
    print("\n== claim report ==")
    if report.strip():
        print(report.rstrip())
    else:
        print(f"(no report written) session providers: {mlx_sess.get_providers()}")

    cpu_sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    want = cpu_sess.run(None, feeds)[0]
    got = mlx_sess.run(None, feeds)[0]
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    max_abs = float(diff.max())
    max_rel = max_abs / max(float(np.abs(want).max()), 1e-30)  # relative to the output's scale
    ok = got.shape == want.shape and bool(np.allclose(got, want, rtol=TOLERANCE, atol=TOLERANCE))
    print("\n== parity (MLX EP strict vs ORT CPU EP) ==")
    print(f"output shape {got.shape}; max abs diff {max_abs:.3e}; max abs diff / max |CPU output| {max_rel:.3e}; "
          f"{'PASS' if ok else 'FAIL'} (tolerance {TOLERANCE:g})")

    print(f"\n== median time per run ({args.warmup} warm-up, {args.runs} runs) ==")
    t_mlx = time_runs(mlx_sess, feeds, args.warmup, args.runs)
    t_cpu = time_runs(cpu_sess, feeds, args.warmup, args.runs)
    print(f"MLXExecutionProvider: {t_mlx:8.2f} ms")
    print(f"CPUExecutionProvider: {t_cpu:8.2f} ms")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
