#!/usr/bin/env bash
# Builds the EP against MLX's CUDA wheel and runs the test suite on the GPU, on a machine that
# has CUDA, a Python with onnxruntime/onnx/numpy/pytest and the nvidia-* wheels MLX needs
# (the lent H200 image), but no internet. Wheels are handed over in WHEEL_DIR (mlx and
# mlx_cuda_13, the latter possibly split as cuda13.part.* because of transfer limits).
#   scripts/gpu_check.sh WHEEL_DIR [pytest args...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
wheels=$1; shift
site=/tmp/mlx-site
if [ ! -f "$site/mlx/lib/libmlx.so" ]; then
  if ls "$wheels"/cuda13.part.* >/dev/null 2>&1; then
    cat "$wheels"/cuda13.part.* > /tmp/mlx_cuda_13-0.32.4-py3-none-manylinux_2_35_x86_64.whl
  else
    cp "$wheels"/mlx_cuda_13-*.whl /tmp/
  fi
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" \
    "$wheels"/mlx-0.32.4-*.whl /tmp/mlx_cuda_13-*.whl
  # libmlx.so finds cuBLAS/cuDNN/NVRTC and the CUDA headers at $ORIGIN/../../nvidia.
  sp=$(python3 -c 'import sys; print([p for p in sys.path if p.endswith("site-packages")][0])')
  ln -sfn "$sp/nvidia" "$site/nvidia"
fi
export PYTHONPATH=$site
python3 -c 'import mlx.core as mx; print("mlx", mx.__version__, "default device", mx.default_device())'
cmake -S "$root" -B "$root/build-gpu" -DCMAKE_BUILD_TYPE=Release \
  -DMLX_LIBRARY_FILE="$site/mlx/lib/libmlx.so" -DMLX_HEADERS_DIR="$site/mlx/include" \
  -DORT_INCLUDE_DIR="$root/third_party/root/usr/include/onnxruntime" >/dev/null
cmake --build "$root/build-gpu" -j "$(nproc)" --target onnxruntime_ep_mlx ep_mlx_oplist >/dev/null
export ORT_EP_MLX_LIBRARY=$root/build-gpu/libonnxruntime_ep_mlx.so
cd "$root"
python3 -c 'import onnxruntime as o; print("onnxruntime", o.__version__)'
python3 -m pytest -q -p no:cacheprovider "$@"
