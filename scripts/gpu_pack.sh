#!/usr/bin/env bash
# Packs what a GPU machine without internet needs for scripts/gpu_check.sh into folders of at most
# 60 MB each (one device call carries one folder):
#   scripts/gpu_pack.sh WHEEL_DIR OUT_DIR
# WHEEL_DIR holds the cp312 wheels mlx-0.32.4 and mlx_cuda_13-0.32.4 (pip download ... --platform
# manylinux_2_35_x86_64); OUT_DIR/p0, p1, ... get mlxsite.tar.xz.part.NN, and p0 the ONNX node
# tests and light models as nodetests.tar.xz; p1 also gets the onnxruntime (CPU), onnxruntime_genai and
# scipy_openblas32 wheels found in WHEEL_DIR. When WHEEL_DIR also holds onnxruntime_gpu-*.whl (ORT's CUDA EP, for
# the bench's peers), it is unpacked and packed the same way into OUT_DIR/g0, g1, ... (about four
# folders). On the machine, copy every folder's files into one folder, one device call after
# another within the machine's warm time, and pass it as WHEEL_DIR.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
wheels=$(cd "$1" && pwd) out=$(mkdir -p "$2" && cd "$2" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
# pack NAME PREFIX SIZE FILES...: unpacks the wheels FILES into one tree, xz-compresses it and
# splits it into NAME.tar.xz.part.NN of SIZE, one part per folder OUT_DIR/PREFIX0, PREFIX1, ...
pack() {
  local name=$1 prefix=$2 size=$3 i=0 w part
  shift 3
  mkdir -p "$work/$name"
  for w in "$@"; do (cd "$work/$name" && python3 -m zipfile -e "$w" .); done
  tar c -C "$work/$name" . | xz -T0 -6 > "$work/$name.tar.xz"
  (cd "$work" && split -b "$size" -d "$name.tar.xz" "$name.tar.xz.part.")
  for part in "$work/$name".tar.xz.part.*; do
    mkdir -p "$out/$prefix$i" && mv "$part" "$out/$prefix$i/"
    i=$((i + 1))
  done
}
pack mlxsite p 58M "$wheels"/mlx-0.32.4-*.whl "$wheels"/mlx_cuda_13-0.32.4-*.whl
# the node tests and the `light` models (the bench's CNN, squeezenet) ride with the first MLX part
tar c -C "$root/third_party/root/usr/share/libonnx-testdata/data" node light | xz -T0 -6 > "$out/p0/nodetests.tar.xz"
# the CPU onnxruntime, onnxruntime-genai and scipy-openblas32 (the BLAS the EP gives MLX's CPU
# products) wheels ride along with the last MLX part (p1)
for w in "$wheels"/onnxruntime-[0-9]*.whl "$wheels"/onnxruntime_genai-*.whl "$wheels"/scipy_openblas32-*.whl; do
  [ -f "$w" ] && cp "$w" "$out/p1/"
done
ortgpu=$(ls "$wheels"/onnxruntime_gpu-*.whl 2>/dev/null | head -1)
[ -z "$ortgpu" ] || pack ortgpu g 56M "$ortgpu"
ls -l "$out"/p* "$out"/g* 2>/dev/null || true
