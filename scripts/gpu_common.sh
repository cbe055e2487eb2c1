# Sourced by scripts/gpu_check.sh and scripts/gpu_runbook.sh (bash, run from the repository root).

# save_ptx_cache DIR: hands MLX's PTX cache (the kernels MLX and the EP compiled with NVRTC on this
# machine) back in $OUT, in parts of 15 MB (a device call hands back files of up to 16 MB, 8 at
# most, 64 MB in all), for the next machine to be given as ptxcache.tar.xz.part.*. Saved when the
# work that compiles is over: a runbook saves after its steps, not when its build (gpu_check.sh
# with GPU_BUILD_ONLY=1) returns. A whole suite's kernels may not fit in four parts: the EP's own
# cubins go first and the parts past the fourth are dropped, and loading the cut archive restores
# every file before the cut. xz -3, not -9: on 2026-12-05 packing took longer than what two calls
# left after their steps, and their outer timeouts cut it (nothing came back).
save_ptx_cache() {
  [ -n "${OUT:-}" ] && [ -d "$1" ] || return 0
  rm -f "$OUT"/ptxcache.tar.xz.part.*
  (cd "$1" && { ls | grep '^ort_ep_mlx_' || true; ls | grep -v '^ort_ep_mlx_' || true; } | tar c -T -) | xz -T0 -3 \
    | split -b 15M -d - "$OUT/ptxcache.tar.xz.part." || return 0
  rm -f "$OUT"/ptxcache.tar.xz.part.0[4-9] "$OUT"/ptxcache.tar.xz.part.[1-9]?
}

# suite_chunk I/N: the test files whose index in sorted order is I mod N (the suite over N device
# calls, each under the 10-minute limit), one per line
suite_chunk() {
  ls tests/test_*.py tests/*/test_*.py | sort | awk -v i="${1%%/*}" -v n="${1##*/}" '(NR - 1) % n == i'
}
