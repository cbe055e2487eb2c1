#!/usr/bin/env bash
# Issue 9 item 0 on an NVIDIA machine: the MLX EP beside its peers (ORT's CUDA EP plain and with
# IOBinding, MLX direct, PyTorch eager) on the same files. Run from anywhere, on the GPU machine:
#
#   ORT_EP_MLX_LIBRARY=/path/libonnxruntime_ep_mlx.so PYTHONPATH=/path/site bench/gpu_session.sh
#
# Needs python3 with numpy, onnx, torch, and on PYTHONPATH mlx + mlx-cuda-13 and onnxruntime-gpu
# (an engine whose package is missing shows as n/a). Writes everything under $OUT (default
# /tmp/bench-gpu): env.txt, verify.txt, the two reports (PERFORMANCE_GPU_decoder.md,
# PERFORMANCE_GPU_models.md) and their logs. About 5 minutes; each step has a time limit and the
# three add up to under 10 minutes. STEPS (default "verify decoder models") runs some of them, so
# that the session can be split over two commands.
# ENGINES picks the decoder run's engines (ORT's CPU EP is left out there: float16 Qwen on the CPU
# is slow); ORT_EP_MLX_BENCH_IO_DEVICE changes the device name the MLX EP's outputs are bound to.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/bench-gpu}
PY=${PYTHON:-python3}
ENGINES=${ENGINES:-mlx_ep,mlx_ep_io,mlx_ep_shared,ort_cuda,ort_cuda_io,ort_cuda_shared,mlx_direct,torch}
STEPS=${STEPS:-verify decoder models}
step() { case " $STEPS " in *" $1 "*) return 0 ;; esac; return 1; }
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"

{
  date; nvidia-smi -L 2>&1; echo "ORT_EP_MLX_LIBRARY=${ORT_EP_MLX_LIBRARY:-}"
  $PY -c 'import sys, numpy, onnx; print(sys.version); print("numpy", numpy.__version__, "onnx", onnx.__version__)'
  $PY -c 'import onnxruntime as o; print("onnxruntime", o.__version__, o.__file__, o.get_available_providers())'
  $PY -c 'import mlx.core as mx; print("mlx", mx.__version__, mx.default_device())'
  $PY -c 'import torch; print("torch", torch.__version__, torch.version.cuda, torch.cuda.is_available())'
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

# 1. Every engine against ORT's CPU EP on the tiny float16 decoder (cheap: checks the IOBinding
#    flows keep working with outputs in device memory). Tolerance 2e-2 of the logits' range.
step verify && timeout 100 $PY bench/run.py --verify --device gpu --io-dtype float16 --decoder-config tiny \
  --workloads decoder_prefill128,decoder_decode_loop64 2>&1 | tee "$OUT/verify.txt"

# 2. The decoder at Qwen2.5-0.5B shapes, int4, float16: prefill 20 runs, decode step 20, loop 3
#    (bench/workloads.py RUNS_DECODER_GPU); the MLX EP's workers from an empty kernel cache each
#    (--cold-ep: their first Run is a fresh machine's, as issue 9's criterion asks).
step decoder && timeout 330 $PY bench/run.py --device gpu --io-dtype float16 --decoder-config qwen2.5-0.5b --cold-ep --engines "$ENGINES" \
  --workloads decoder_prefill128,decoder_decode_after128,decoder_decode_loop64 \
  --out "$OUT/PERFORMANCE_GPU_decoder.md" 2>&1 | tee "$OUT/bench_decoder.log"

# 2b. One decode step after a 2048-token past, every decoder engine: what a long context costs a
#    step (not in the default STEPS; the runbook's longctx step runs it).
step longctx && timeout 300 $PY bench/run.py --device gpu --io-dtype float16 --decoder-config qwen2.5-0.5b \
  --engines "$ENGINES" --workloads decoder_decode_after2048 \
  --out "$OUT/PERFORMANCE_GPU_longctx.md" 2>&1 | tee "$OUT/bench_longctx.log"

# 3. The BERT layer and the CNN, every engine (torch: n/a, decoder workloads only).
step models && timeout 130 $PY bench/run.py --device gpu --workloads bert_layer_s128,squeezenet \
  --out "$OUT/PERFORMANCE_GPU_models.md" 2>&1 | tee "$OUT/bench_models.log"
ls -l "$OUT"
