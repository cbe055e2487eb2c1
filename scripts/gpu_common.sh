# Sourced by scripts/gpu_check.sh and scripts/gpu_runbook.sh (bash, run from the repository root).

# save_ptx_cache DIR: hands MLX's PTX cache (the kernels MLX and the EP compiled with NVRTC on this
# machine) back in $OUT, in parts of 15 MB (a device call hands back files of up to 16 MB, 8 at
# most), for the next machine to be given as ptxcache.tar.xz.part.*. Saved when the work that
# compiles is over: a runbook saves after its steps, not when its build (gpu_check.sh with
# GPU_BUILD_ONLY=1) returns.
save_ptx_cache() {
  [ -n "${OUT:-}" ] && [ -d "$1" ] || return 0
  rm -f "$OUT"/ptxcache.tar.xz.part.*
  tar c -C "$1" . | xz -T0 -3 | split -b 15M -d - "$OUT/ptxcache.tar.xz.part." || return 0
  [ "$(ls "$OUT"/ptxcache.tar.xz.part.* | wc -l)" -le 4 ] || rm -f "$OUT"/ptxcache.tar.xz.part.*
}

# suite_chunk I/N: the test files whose index in sorted order is I mod N (the suite over N device
# calls, each under the 10-minute limit), one per line
suite_chunk() {
  ls tests/test_*.py tests/*/test_*.py | sort | awk -v i="${1%%/*}" -v n="${1##*/}" '(NR - 1) % n == i'
}
