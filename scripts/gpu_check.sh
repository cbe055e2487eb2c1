#!/usr/bin/env bash
# Builds the EP against MLX's CUDA backend and runs the test suite on the GPU, on a machine that
# has CUDA, a Python with onnxruntime/onnx/numpy/pytest and the nvidia-* wheels MLX needs
# (the lent H200 image), but no internet. MLX is handed over in WHEEL_DIR as either
#   - the wheels (mlx and mlx_cuda_13, the latter possibly split as cuda13.part.*), or
#   - mlxsite.tar.xz.part.* : an xz tarball of both wheels unpacked (smaller; transfer limits),
# possibly spread over several folders given as WHEEL_DIR:WHEEL_DIR2 (or copied into one).
#   scripts/gpu_check.sh WHEEL_DIR [pytest args...]      (no pytest args: the whole suite)
#   GPU_BUILD_ONLY=1 scripts/gpu_check.sh WHEEL_DIR      (set up and build; print the exports)
#   GPU_TIMEOUT=S scripts/gpu_check.sh WHEEL_DIR -n 12 tests   (pytest-xdist, when handed over)
#   GPU_CHUNK=I/N scripts/gpu_check.sh WHEEL_DIR         (the test files whose index is I mod N: the
#                                                        suite over N device calls, each < 10 min)
#   GPU_CONFORMANCE=I/N scripts/gpu_check.sh WHEEL_DIR   (shard I of N of the ONNX node tests in the
#                                                        three modes; writes $OUT/gpu_summary_I.json:
#                                                        merge here with tests/conformance/run.py
#                                                        --merge-summaries, then `make conformance`)
# Other wheels in WHEEL_DIR (onnxruntime, pytest-xdist, execnet) are installed first on the path, and
# ortgpu.tar.xz.part.* (ORT's CUDA EP, onnxruntime-gpu unpacked; scripts/gpu_pack.sh) ahead of them;
# ptxcache.tar.xz.part.* there seed MLX's kernel cache, and $OUT/ptxcache.tar.xz.part.* hand it back.
# The node tests travel as nodetests.tar.xz in a WHEEL_DIR folder (scripts/gpu_pack.sh makes it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
wheels=$1; shift
# pack_parts NAME: the parts NAME.tar.xz.part.NN in the WHEEL_DIR folders, in part order; nothing
# (and no failure under set -e and pipefail) for a pack that was not carried
pack_parts() {
  local d f
  for d in ${wheels//:/ }; do
    for f in "$d/$1".tar.xz.part.*; do
      if [ -f "$f" ]; then echo "${f##*.} $f"; fi
    done
  done | sort | cut -d' ' -f2
}
site=/tmp/mlx-site
if [ ! -f "$site/mlx/lib/libmlx.so" ]; then
  mkdir -p "$site"
  parts=$(pack_parts mlxsite)
  if [ -n "$parts" ]; then
    cat $parts | xz -d | tar x -C "$site"
  else
    if ls "$wheels"/cuda13.part.* >/dev/null 2>&1; then
      cat "$wheels"/cuda13.part.* > /tmp/mlx_cuda_13-0.32.4-py3-none-manylinux_2_35_x86_64.whl
    else
      cp "$wheels"/mlx_cuda_13-*.whl /tmp/
    fi
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" \
      "$wheels"/mlx-0.32.4-*.whl /tmp/mlx_cuda_13-*.whl
  fi
  # libmlx.so finds cuBLAS/cuDNN/NVRTC and the CUDA headers at $ORIGIN/../../nvidia.
  sp=$(python3 -c 'import sys; print([p for p in sys.path if p.endswith("site-packages")][0])')
  ln -sfn "$sp/nvidia" "$site/nvidia"
fi
export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
# Other wheels handed over beside MLX's (onnxruntime, pytest-xdist, ...) go first on the path, so a
# carried onnxruntime wins over the image's.
extra=/tmp/gpu-extra-site
for d in ${wheels//:/ }; do
  for w in "$d"/*.whl; do
    case "$w" in */mlx-*|*/mlx_cuda*|*/onnxruntime_gpu*|*'/*.whl') continue ;; esac
    # OpenBLAS goes beside MLX: the EP looks for it in the site-packages that holds MLX's backend
    case "$w" in */scipy_openblas32-*) target=$site ;; *) target=$extra ;; esac
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$target" "$w"
  done
done
[ -d "$extra" ] && export PYTHONPATH=$extra:$PYTHONPATH
# ORT's CUDA EP (onnxruntime-gpu, a 255 MB wheel) travels unpacked as ortgpu.tar.xz.part.*, one part
# per device call (scripts/gpu_pack.sh); it goes first on the path, ahead of a CPU onnxruntime: its
# CPU EP and plugin-EP support are the same runtime's, so the MLX EP runs on it as well.
ortgpu=/tmp/ort-gpu-site
if [ ! -d "$ortgpu/onnxruntime" ]; then
  parts=$(pack_parts ortgpu)
  if [ -n "$parts" ]; then mkdir -p "$ortgpu" && cat $parts | xz -d | tar x -C "$ortgpu"; fi
fi
[ -d "$ortgpu/onnxruntime" ] && export PYTHONPATH=$ortgpu:$PYTHONPATH
# MLX JIT-compiles every CUDA kernel with NVRTC at first use and keeps the result in its PTX cache:
# a cache handed over as ptxcache.tar.xz.part.* saves those compiles, and the cache is handed back
# in $OUT the same way at the end (when it fits the transfer limit) for the next machine.
ptx=${MLX_PTX_CACHE_DIR:-/tmp/mlx-ptx-cache}
export MLX_PTX_CACHE_DIR=$ptx
mkdir -p "$ptx"
cached=$(pack_parts ptxcache)
if [ -n "$cached" ]; then cat $cached | xz -d | tar x -C "$ptx" || true; fi
. "$root/scripts/gpu_common.sh"
[ -n "${GPU_BUILD_ONLY:-}" ] || trap 'save_ptx_cache "$ptx"' EXIT # a build-only caller saves after its work
nodes=$root/third_party/root/usr/share/libonnx-testdata/data
if [ ! -d "$nodes/node" ]; then
  for d in ${wheels//:/ }; do
    if [ -f "$d/nodetests.tar.xz" ]; then mkdir -p "$nodes" && xz -dc "$d/nodetests.tar.xz" | tar x -C "$nodes"; fi
  done
fi
python3 -c 'import mlx.core as mx; print("mlx", mx.__version__, "default device", mx.default_device())'
cmake -S "$root" -B "$root/build-gpu" -DCMAKE_BUILD_TYPE=Release \
  -DMLX_LIBRARY_FILE="$site/mlx/lib/libmlx.so" -DMLX_HEADERS_DIR="$site/mlx/include" \
  -DORT_INCLUDE_DIR="$root/third_party/root/usr/include/onnxruntime" >/dev/null
cmake --build "$root/build-gpu" -j "$(nproc)" --target onnxruntime_ep_mlx ep_mlx_oplist >/dev/null
export ORT_EP_MLX_LIBRARY=$root/build-gpu/libonnxruntime_ep_mlx.so
# The GPU suite runs with the EP's device memory (opt-in elsewhere) and the per-machine kernel
# cache (the default; ORT_EP_MLX_KERNEL_CACHE=0 from the caller runs MLX's JIT instead).
export ORT_EP_MLX_DEVICE_MEMORY=${ORT_EP_MLX_DEVICE_MEMORY:-1} ORT_EP_MLX_KERNEL_CACHE=${ORT_EP_MLX_KERNEL_CACHE:-1}
cd "$root"
python3 -c 'import onnxruntime as o; print("onnxruntime", o.__version__)'
if [ -n "${GPU_BUILD_ONLY:-}" ]; then
  echo "export PYTHONPATH=$PYTHONPATH ORT_EP_MLX_LIBRARY=$ORT_EP_MLX_LIBRARY ORT_EP_MLX_KERNEL_CACHE=$ORT_EP_MLX_KERNEL_CACHE"
  exit 0
fi
out=${OUT:-/tmp}
if [ -n "${GPU_CONFORMANCE:-}" ]; then
  export GPU_NAME=${GPU_NAME:-$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)}
  export EP_COMMIT=${EP_COMMIT:-$(git -C "$root" rev-parse --short HEAD 2>/dev/null || true)}
  python3 tests/conformance/run.py -j "${GPU_JOBS:-8}" --shard "$GPU_CONFORMANCE" \
    --device-summary "$out/gpu_summary_${GPU_CONFORMANCE%%/*}.json"
  exit 0
fi
if [ -n "${GPU_CHUNK:-}" ] && [ $# -eq 0 ]; then
  mapfile -t files < <(cd "$root" && suite_chunk "$GPU_CHUNK")
  set -- "${files[@]}"
fi
# Failures are logged as they happen (tests/conftest.py), so a run cut short still names them.
export ORT_EP_MLX_FAILLOG=${ORT_EP_MLX_FAILLOG:-$out/faillog.txt}
# GPU_TIMEOUT=SECONDS stops the suite in time for the EXIT trap to hand the kernel cache back.
${GPU_TIMEOUT:+timeout "$GPU_TIMEOUT"} python3 -m pytest -q -p no:cacheprovider "$@"
