#!/usr/bin/env python3
"""How a prompt's int4 matmuls should run on MLX's GPU: the ways MatMulNBits could lower for many
rows, timed per weight shape of a decoder and checked against a float64 reference.

    bench/prefill_matmul.py [--config qwen2.5-0.5b] [--rows 128] [--iters 30]

Ways (x is the float16 activation, W int4 in blocks of 32 with float16 scales and biases):
  f32_dequant  x and W dequantized to float32, one float32 GEMM (the EP's lowering for >= 32 rows)
  hilo_f16     W dequantized to float32 and split into two float16 halves, one float16 GEMM over 2K
  f16_dequant  W dequantized to float16, one float16 GEMM (cuBLAS accumulates in float32)
  qmm_f16      MLX's quantized matmul on float16 x
  qmm_f32      MLX's quantized matmul on float32 x
Float32 GEMMs on MLX's CUDA backend use TF32 unless MLX_ENABLE_TF32=0: run it both ways. Prints
per shape the median ms of each way, the decoder's total per prompt (shapes weighted by how often a
prompt runs them) and each way's largest error (its result rounded to the float16 output) relative to the float64
reference's largest value; then f32_dequant's dequantization and GEMM apart (the bandwidth MLX's
float32 dequantization reaches: a kernel of our own would have to beat it).
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import mlx.core as mx  # noqa: E402

from workloads import decoder_config  # noqa: E402

GROUP, BITS = 32, 4


def shapes(cfg):
    """(name, K, N, uses per prompt) of the decoder's MatMulNBits weights."""
    h, kv = cfg.hidden, cfg.kv_heads * cfg.head_dim
    layers = cfg.layers
    return [("q/o", h, cfg.heads * cfg.head_dim, 2 * layers), ("k/v", h, kv, 2 * layers),
            ("gate/up", h, cfg.intermediate, 2 * layers), ("down", cfg.intermediate, h, layers),
            ("lm_head", h, cfg.vocab, 1)]


def hilo_matmul(x16, w, s32, b32):
    """x times float32 weights as two float16 halves in one float16 GEMM over 2K: w = hi + lo with
    hi = float16(w) and lo = float16(w - hi), both exact for |w| >= 2^-10 (a dequantized int4 weight
    has at most 15 significant bits); with float32 accumulation every product is exact, so the sum
    is the float32 GEMM's up to order."""
    dense = mx.dequantize(w, s32, b32, GROUP, BITS)
    hi = dense.astype(mx.float16)
    lo = (dense - hi.astype(mx.float32)).astype(mx.float16)
    return mx.matmul(mx.concatenate([x16, x16], axis=-1), mx.concatenate([hi, lo], axis=-1).T)


def ways(x16, w, scales, biases):
    x32 = x16.astype(mx.float32)
    s32, b32 = scales.astype(mx.float32), biases.astype(mx.float32)
    return {
        "f32_dequant": lambda: mx.matmul(x32, mx.dequantize(w, s32, b32, GROUP, BITS).T),
        "hilo_f16": lambda: hilo_matmul(x16, w, s32, b32),
        "f16_dequant": lambda: mx.matmul(x16, mx.dequantize(w, scales, biases, GROUP, BITS).T),
        "qmm_f16": lambda: mx.quantized_matmul(x16, w, scales, biases, True, GROUP, BITS),
        "qmm_f32": lambda: mx.quantized_matmul(x32, w, s32, b32, True, GROUP, BITS),
    }


def median_ms(fn, iters):
    for _ in range(3):
        mx.eval(fn())
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        mx.eval(fn())
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="qwen2.5-0.5b")
    ap.add_argument("--rows", type=int, default=128)
    ap.add_argument("--iters", type=int, default=30)
    args = ap.parse_args()
    cfg = decoder_config(args.config)
    rng = np.random.default_rng(0)
    print(f"MLX {mx.__version__}, {mx.default_device()}, MLX_ENABLE_TF32={os.environ.get('MLX_ENABLE_TF32', '(unset: on)')}, "
          f"{args.rows} rows")
    totals, worst = {}, {}
    for name, k, n, uses in shapes(cfg):
        x16 = mx.array(rng.standard_normal((args.rows, k)).astype(np.float16))
        w, scales, biases = mx.quantize(mx.array(rng.standard_normal((n, k)).astype(np.float16) * 0.05), GROUP, BITS)
        dense = np.asarray(mx.dequantize(w, scales.astype(mx.float32), biases.astype(mx.float32), GROUP, BITS),
                           dtype=np.float64)
        ref = np.asarray(x16, dtype=np.float64) @ dense.T
        scale = np.abs(ref).max()
        row = []
        for way, fn in ways(x16, w, scales, biases).items():
            ms = median_ms(fn, args.iters)
            err = float(np.abs(np.asarray(fn().astype(mx.float16), dtype=np.float64) - ref).max() / scale)  # the op writes float16
            totals[way] = totals.get(way, 0.0) + ms * uses
            worst[way] = max(worst.get(way, 0.0), err)
            row.append(f"{way} {ms:.3f}")
        print(f"  {name:8s} K {k:5d} N {n:6d} x{uses:3d}: " + ", ".join(row))
    print("per prompt (ms, shapes weighted by use): " + ", ".join(f"{w} {t:.2f}" for w, t in totals.items()))
    print("largest error / reference max: " + ", ".join(f"{w} {e:.1e}" for w, e in worst.items()))
    split_f32_dequant(cfg, args, rng)


def split_f32_dequant(cfg, args, rng):
    """f32_dequant's two parts apart, each shape's uses in one eval (so one eval's fixed cost is
    shared as in a prompt's graph): MLX's dequantization (and the bandwidth its float32 writes
    reach) and the float32 GEMM over weights dequantized beforehand."""
    print("f32_dequant split (ms per op, all of a shape's uses in one eval):")
    for name, k, n, uses in shapes(cfg):
        x32 = mx.array(rng.standard_normal((args.rows, k)).astype(np.float32))
        w, scales, biases = mx.quantize(mx.array(rng.standard_normal((n, k)).astype(np.float16) * 0.05), GROUP, BITS)
        s32, b32 = scales.astype(mx.float32), biases.astype(mx.float32)
        dense_t = mx.dequantize(w, s32, b32, GROUP, BITS).T
        mx.eval(dense_t, s32, b32)
        deq = median_ms(lambda: [mx.dequantize(w, s32, b32, GROUP, BITS) for _ in range(uses)], args.iters) / uses
        gemm = median_ms(lambda: [mx.matmul(x32, dense_t) for _ in range(uses)], args.iters) / uses
        gbs = n * k * 4 / (deq * 1e-3) / 1e9
        print(f"  {name:8s} dequantize {deq:.3f} ({gbs:.1f} GB/s written), GEMM {gemm:.3f}")


if __name__ == "__main__":
    main()
