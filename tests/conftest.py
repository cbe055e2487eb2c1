import os
import sys

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


def pytest_runtest_logreport(report):
    """With ORT_EP_MLX_FAILLOG=PATH, every failing test's report is appended to PATH as it happens
    (in the controlling process under pytest-xdist, which also reports a crashed worker's test), so a
    run cut short by a time limit still leaves its failures: how scripts/gpu_check.sh keeps them.
    ORT_EP_MLX_TESTLOG=PATH does the same for every test (seconds, outcome, id): what such a run
    reached and where its time went."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    done = os.environ.get("ORT_EP_MLX_TESTLOG")
    if done and (report.when == "call" or (report.when == "setup" and not report.passed)):
        with open(done, "a") as f:  # ORT_EP_MLX_TESTLOG=PATH: each test's seconds and outcome as it ends
            f.write(f"{report.duration:.2f} {report.outcome} {report.nodeid}\n")
    path = os.environ.get("ORT_EP_MLX_FAILLOG")
    if not path or not report.failed:
        return
    with open(path, "a") as f:
        f.write(f"=== {report.nodeid} ({report.when})\n{report.longreprtext[-3000:]}\n")
