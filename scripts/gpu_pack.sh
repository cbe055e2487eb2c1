#!/usr/bin/env bash
# Packs what a GPU machine without internet needs for scripts/gpu_check.sh into folders of at most
# 60 MB each (one device call carries one folder):
#   scripts/gpu_pack.sh WHEEL_DIR OUT_DIR
# WHEEL_DIR holds the cp312 wheels mlx-0.32.4 and mlx_cuda_13-0.32.4 (pip download ... --platform
# manylinux_2_35_x86_64); OUT_DIR/p0, p1, ... get mlxsite.tar.xz.part.NN, and p0 the ONNX node
# tests as nodetests.tar.xz. When WHEEL_DIR also holds onnxruntime_gpu-*.whl (ORT's CUDA EP, for
# the bench's peers), it is unpacked and packed the same way into OUT_DIR/g0, g1, ... (about four
# folders). On the machine, copy every folder's files into one folder, one device call after
# another within the machine's warm time, and pass it as WHEEL_DIR.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
wheels=$(cd "$1" && pwd) out=$(mkdir -p "$2" && cd "$2" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/site" "$out"
for w in "$wheels"/mlx-0.32.4-*.whl "$wheels"/mlx_cuda_13-0.32.4-*.whl; do
  (cd "$work/site" && python3 -m zipfile -e "$w" .)
done
tar c -C "$work/site" . | xz -T0 -6 > "$work/mlxsite.tar.xz"
(cd "$work" && split -b 58M -d mlxsite.tar.xz mlxsite.tar.xz.part.)
i=0
for part in "$work"/mlxsite.tar.xz.part.*; do
  mkdir -p "$out/p$i" && mv "$part" "$out/p$i/"
  i=$((i + 1))
done
tar c -C "$root/third_party/root/usr/share/libonnx-testdata/data" node | xz -T0 -6 > "$out/p0/nodetests.tar.xz"
for w in "$wheels"/onnxruntime_gpu-*.whl; do
  [ -f "$w" ] || continue
  mkdir -p "$work/ortgpu"
  (cd "$work/ortgpu" && python3 -m zipfile -e "$w" .)
  tar c -C "$work/ortgpu" . | xz -T0 -6 > "$work/ortgpu.tar.xz"
  (cd "$work" && split -b 56M -d ortgpu.tar.xz ortgpu.tar.xz.part.)
  i=0
  for part in "$work"/ortgpu.tar.xz.part.*; do
    mkdir -p "$out/g$i" && mv "$part" "$out/g$i/"
    i=$((i + 1))
  done
done
ls -l "$out"/p* "$out"/g* 2>/dev/null || true
