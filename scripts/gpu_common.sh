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

# sources_digest: a digest of the sources a run builds and tests (src, python, tests, tools, scripts,
# the build files). The device machine's copy of the working tree carries a .git of its own that
# can be older than the tree (on 2026-12-06 it named the previous session's last commit for every
# call), so a run names what it ran by this digest; `scripts/gpu_common.sh`'s function run here on a
# checkout gives the same digest for the same files.
sources_digest() {
  git ls-files -co --exclude-standard -- src python tests tools scripts CMakeLists.txt Makefile | LC_ALL=C sort -u \
    | while read -r f; do [ -f "$f" ] && echo "$f"; done | xargs sha1sum | sha1sum | cut -c1-12
}

# suite_chunk I/N: the test files whose index in sorted order is I mod N (the suite over N device
# calls, each under the 10-minute limit), one per line
suite_chunk() {
  ls tests/test_*.py tests/*/test_*.py | LC_ALL=C sort | awk -v i="${1%%/*}" -v n="${1##*/}" '(NR - 1) % n == i'
}

# descendants PID: every process below PID, one per line
descendants() {
  local child
  for child in $(pgrep -P "$1"); do echo "$child"; descendants "$child"; done
}

# watch_quiet_suite PID TESTLOG QUIET STACKS: while the pytest run PID lives, each time TESTLOG (a line
# per finished test) has not grown for QUIET seconds, every process of the run: its state, then (the
# first time only) the Python stacks of pytest and its xdist workers (SIGUSR1: tests/conftest.py
# registers faulthandler when the test log is on: TESTLOG.stacks-*; a test's own child
# processes are not signalled, SIGUSR1 would kill them) and every process's native stacks (cuda-gdb,
# which attaches on these machines), into STACKS. What earlier GPU suite runs left unexplained:
# whether a run stalls on a test, or after its last one, in a worker's exit.
watch_quiet_suite() {
  local pid=$1 testlog=$2 quiet=$3 stacks=$4 last=$SECONDS size=-1 dumped= now p
  while kill -0 "$pid" 2> /dev/null; do
    sleep 5
    now=$(stat -c %s "$testlog" 2> /dev/null || echo 0)
    [ "$now" != "$size" ] && { size=$now last=$SECONDS; continue; }
    [ $((SECONDS - last)) -lt "$quiet" ] && continue
    {
      echo "== no test finished for $((SECONDS - last)) s ($(date +%T))"
      ps -o pid,ppid,etimes,stat,rss,wchan:20,args -p "$(descendants "$pid" | paste -sd,)"
      for p in $([ -n "$dumped" ] || descendants "$pid"); do
        ps -o args= -p "$p" | grep -q -e pytest -e 'sys.stdin.readline' && kill -USR1 "$p" 2> /dev/null
        command -v cuda-gdb > /dev/null || continue
        echo "== native stacks of $p"
        timeout 60 cuda-gdb -batch -p "$p" -ex "thread apply all bt 24" 2>&1 | grep -E '^(Thread|#)' | head -200
      done
    } >> "$stacks" 2>&1
    last=$SECONDS dumped=1
  done
}
