import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "tests"))

# The EP's library loads libmlx before any test imports mlx.core, so the whole suite runs on the BLAS
# a user of the EP gets under MLX's CPU products (src/mlx/cpu_blas.c), not on MLX's own.
import onnxruntime_ep_mlx  # noqa: E402

try:
    onnxruntime_ep_mlx.register_execution_provider_library()
except FileNotFoundError:  # not built yet: the tests that need the library say so themselves
    pass


if os.environ.get("ORT_EP_MLX_TESTLOG"):
    # a run that logs its tests can be asked for every thread's Python stack, each process's into
    # TESTLOG.stacks-WORKER (scripts/gpu_common.sh's watch_quiet_suite sends SIGUSR1 when no test has
    # finished for a while)
    import faulthandler
    import signal

    _stacks_file = open(
        f"{os.environ['ORT_EP_MLX_TESTLOG']}.stacks-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}", "a"
    )
    faulthandler.register(signal.SIGUSR1, file=_stacks_file, all_threads=True)

_setup_seconds = {}  # nodeid -> its setup's seconds, until its call is reported
_log_start = time.monotonic()


def log_test_phases(path, report):
    """ORT_EP_MLX_TESTLOG=PATH: a line per test as its call ends (or its setup, where it never gets
    a call): the seconds of its setup and call (a module's fixtures are paid in its first test's
    setup), its outcome and id, then the setup's seconds apart; a teardown of 0.1 s or more, or one
    that fails, gets a line of its own. Each line ends with the seconds since the controller began
    and the xdist worker that ran it: when a run's last test ended, and which worker was busy."""
    line = None
    if report.when == "setup":
        if report.passed:
            _setup_seconds[report.nodeid] = report.duration
        else:
            line = f"{report.duration:.2f} {report.outcome} {report.nodeid} setup={report.duration:.2f}"
    elif report.when == "call":
        setup = _setup_seconds.pop(report.nodeid, 0.0)
        line = f"{setup + report.duration:.2f} {report.outcome} {report.nodeid} setup={setup:.2f}"
    elif report.duration >= 0.1 or not report.passed:
        line = f"{report.duration:.2f} teardown-{report.outcome} {report.nodeid}"
    if line:
        worker = getattr(getattr(report, "node", None), "gateway", None)
        line += f" at={time.monotonic() - _log_start:.1f} {getattr(worker, 'id', 'main')}"
        with open(path, "a") as f:
            f.write(line + "\n")


def pytest_runtest_logreport(report):
    """With ORT_EP_MLX_FAILLOG=PATH, every failing test's report is appended to PATH as it happens
    (in the controlling process under pytest-xdist, which also reports a crashed worker's test), so a
    run cut short by a time limit still leaves its failures: how scripts/gpu_check.sh keeps them.
    ORT_EP_MLX_TESTLOG=PATH does the same for every test (seconds, outcome, id): what such a run
    reached and where its time went."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    done = os.environ.get("ORT_EP_MLX_TESTLOG")
    if done:
        log_test_phases(done, report)
    path = os.environ.get("ORT_EP_MLX_FAILLOG")
    if not path or not report.failed:
        return
    with open(path, "a") as f:
        f.write(f"=== {report.nodeid} ({report.when})\n{report.longreprtext[-3000:]}\n")
