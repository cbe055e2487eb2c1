"""The runtime's signature cache and compile path: traces happen once per input signature,
data-dependent host reads never bake a stale value into a compiled program, the LRU evicts,
and the run report counts all of it. CPU traces build no fused kernel (no g++ at run time), a
failed trace frees the process-wide trace lock, and a freed program leaves no trace behind in
any thread."""
import os
import queue
import re
import subprocess
import sys
import threading

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxruntime_ep_mlx as mlx_ep
from parity import child_pythonpath, default_device_is_cpu, make_model

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def run_report(tmp_path, model, options, feeds_list):
    report = tmp_path / "report.txt"
    sess = mlx_ep.session(model, options={**options, "report": str(report)}, strict=True)
    outs = [sess.run(None, f)[0] for f in feeds_list]
    del sess  # the run report is written when the session releases its clusters
    text = report.read_text()
    stats = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", text.split("run report:")[1])}
    return outs, stats


def shape_chain_model():
    # y = Reshape(Relu(a + b), Shape(a)): a shape-derived host value feeding Reshape.
    nodes = [helper.make_node("Add", ["a", "b"], ["c"]), helper.make_node("Relu", ["c"], ["d"]),
             helper.make_node("Shape", ["a"], ["s"]), helper.make_node("Reshape", ["d", "s"], ["y"])]
    return make_model(nodes, [("a", F, ["N", 3]), ("b", F, [3])], [("y", F, None)])


@pytest.mark.parametrize("compile_mode", ["0", "1"])
def test_signature_cache_and_traces(tmp_path, compile_mode):
    rng = np.random.default_rng(0)
    feeds = [{"a": rng.standard_normal((n, 3)).astype(np.float32), "b": rng.standard_normal(3).astype(np.float32)}
             for n in (2, 5, 2, 2, 5, 2)]
    outs, st = run_report(tmp_path, shape_chain_model(), {"compile": compile_mode}, feeds)
    for f, y in zip(feeds, outs):
        np.testing.assert_allclose(y, np.maximum(f["a"] + f["b"], 0), rtol=1e-6)
    assert st["runs"] == 6 and st["sig_misses"] == 2 and st["sig_hits"] == 4
    assert st["host_reads"] == 0  # Shape's values are known without evaluation
    if compile_mode == "1":
        assert st["traces"] == 2 and st["compiled_runs"] == 4 and st["trace_failures"] == 0  # one per signature
    else:
        assert st["traces"] == 0 and st["eager_runs"] == 6


def shape_arithmetic_model():
    # y = Relu(Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1, 2]))), t = that Concat: the
    # exporters' classic reshape target, every value known from x's shape.
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "axes"], ["u"]), helper.make_node("Concat", ["u", "rest"], ["t"], axis=0),
             helper.make_node("Reshape", ["x", "t"], ["r"]), helper.make_node("Relu", ["r"], ["y"]),
             # a 2-D Concat along axis 1 of known values: [[N, 7, 8], [6, 9, 10]]
             helper.make_node("Unsqueeze", ["s", "axis1"], ["col"]),
             helper.make_node("Concat", ["col", "table"], ["t2"], axis=1)]
    inits = [("zero", np.array(0, np.int64)), ("axes", np.array([0], np.int64)), ("rest", np.array([-1, 2], np.int64)),
             ("axis1", np.array([1], np.int64)), ("table", np.array([[7, 8], [9, 10]], np.int64))]
    return make_model(nodes, [("x", F, ["N", 6])], [("y", F, None), ("t", I64, None), ("t2", I64, None)], inits)


@pytest.mark.parametrize("compile_mode", ["0", "1"])
def test_shape_arithmetic_stays_on_the_host(tmp_path, compile_mode):
    """Gather, Unsqueeze and Concat of shape-derived integers are computed when the graph is built:
    no Run evaluates anything to read the Reshape's target (ORT's own fusions off, so that the
    pattern reaches the EP), and the values equal numpy's."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    report = tmp_path / "report.txt"
    sess = mlx_ep.session(shape_arithmetic_model(), options={"compile": compile_mode, "report": str(report)},
                          strict=True, sess_options=so)
    rng = np.random.default_rng(0)
    for n in (2, 5, 2, 2):
        x = rng.standard_normal((n, 6)).astype(np.float32)
        y, t, t2 = sess.run(None, {"x": x})
        np.testing.assert_array_equal(t, np.array([n, -1, 2], np.int64))
        np.testing.assert_array_equal(t2, np.array([[n, 7, 8], [6, 9, 10]], np.int64))
        np.testing.assert_array_equal(y, np.maximum(x, 0).reshape(n, 3, 2))
    del sess
    stats = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", report.read_text().split("run report:")[1])}
    assert stats["runs"] == 4 and stats["host_reads"] == 0


def test_data_dependent_reshape_is_never_baked(tmp_path):
    # The Reshape target comes from data: a compile trace must not capture it.
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Reshape", ["r", "shape"], ["y"])]
    model = make_model(nodes, [("x", F, [6]), ("shape", I64, [2])], [("y", F, None)])
    x = np.arange(6, dtype=np.float32) - 2
    feeds = [{"x": x, "shape": np.array(s, np.int64)} for s in ([2, 3], [3, 2], [2, 3], [6, 1], [1, 6])]
    outs, st = run_report(tmp_path, model, {"compile": "1"}, feeds)
    for f, y in zip(feeds, outs):
        np.testing.assert_array_equal(y, np.maximum(x, 0).reshape(f["shape"]))
    assert st["compiled_runs"] == 0 and st["eager_runs"] == 5 and st["host_reads"] == 5
    # The signature traced once, failed and runs eagerly: counted, and the reason is reported. The
    # failure is by design (Reshape refuses to read data in a trace: op_trace_refuse), so it falls back
    # in every build; only other trace failures count as unexpected (a debug build fails the Run on those).
    assert st["trace_failures"] == 1 and st["unexpected_trace_failures"] == 0
    text = (tmp_path / "report.txt").read_text()
    assert "first trace failure (that signature runs eagerly): by design: " in text
    assert "input 1 is read on the host but depends on data" in text


def test_lru_evicts(tmp_path):
    feeds = [{"a": np.ones((n, 3), np.float32), "b": np.ones(3, np.float32)} for n in (1, 2, 3, 1)]
    _, st = run_report(tmp_path, shape_chain_model(), {"cache_size": "2"}, feeds)
    assert st["sig_misses"] == 4 and st["evictions"] == 2


@pytest.mark.parametrize("bad", [{"compile": "maybe"}, {"cache_size": "0"}, {"device": "abacus"}])
def test_invalid_options_fail_session_creation(bad):
    with pytest.raises(Exception, match=list(bad)[0]):
        mlx_ep.session(shape_chain_model(), options=bad)


def test_decode_loop_traces(tmp_path):
    """64 greedy decode steps of the generated decoder with the default options (compile=auto:
    on, on every device): the prompt's signature runs eagerly once, the decode steps share one
    decode bucket, so one trace serves 63 replays (docs/ARCHITECTURE.md has the policy)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
    from llm import TINY, empty_past, make_llm, next_past, step_feeds
    report = tmp_path / "report.txt"
    sess = mlx_ep.session(make_llm(TINY, weights="int4"), options={"report": str(report)}, strict=True)
    outs = sess.run(None, step_feeds(TINY, np.arange(1, 65)[None], empty_past(TINY)))
    for _ in range(64):  # past 64..127: one bucket whether it is 64 (CPU) or 256 (GPU) long
        token = outs[0][:, -1:].argmax(-1)
        outs = sess.run(None, step_feeds(TINY, token, next_past(TINY, outs)))
    del sess
    st = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", report.read_text().split("run report:")[1])}
    assert st["runs"] == 65 and st["traces"] == 1 and st["compiled_runs"] == 63 and st["eager_runs"] == 2


def elementwise_chain_model():
    # Seven elementwise nodes and a scalar constant: MLX's kernel fusion would make them one
    # "Compiled" kernel, JIT-built with g++ on the CPU.
    nodes = [helper.make_node("Add", ["a", "b"], ["c"]), helper.make_node("Mul", ["c", "a"], ["d"]),
             helper.make_node("Relu", ["d"], ["e"]), helper.make_node("Sub", ["e", "b"], ["f"]),
             helper.make_node("Mul", ["f", "half"], ["g"]), helper.make_node("Abs", ["g"], ["h"]),
             helper.make_node("Neg", ["h"], ["i"]), helper.make_node("Tanh", ["i"], ["y"])]
    return make_model(nodes, [("a", F, [4, 8]), ("b", F, [4, 8])], [("y", F, [4, 8])],
                      initializers={"half": np.array(0.5, np.float32)})


def elementwise_chain_reference(f):
    return np.tanh(-np.abs((np.maximum((f["a"] + f["b"]) * f["a"], 0) - f["b"]) * 0.5))


def chain_feeds(n):
    rng = np.random.default_rng(1)
    return [{k: rng.standard_normal((4, 8)).astype(np.float32) for k in "ab"} for _ in range(n)]


JIT_PROBE = """
import onnxruntime_ep_mlx as mlx_ep
from test_runtime import chain_feeds, elementwise_chain_model
sess = mlx_ep.session(elementwise_chain_model(), options={"device": "cpu", "compile": "1"}, strict=True)
for f in chain_feeds(3):
    sess.run(None, f)
"""


def test_cpu_compile_traces_without_fusion(tmp_path):
    """compile=1 on the CPU: one trace, later Runs replay it, and no fused kernel is JIT-built
    (MLX's CPU fusion would run g++ here, seconds per kernel)."""
    feeds = chain_feeds(4)
    outs, st = run_report(tmp_path, elementwise_chain_model(), {"device": "cpu", "compile": "1"}, feeds)
    for f, y in zip(feeds, outs):
        np.testing.assert_allclose(y, elementwise_chain_reference(f), rtol=1e-5, atol=1e-6)
    assert st["traces"] == 1 and st["compiled_runs"] == 3 and st["eager_runs"] == 1
    # MLX's CPU backend writes the kernels it JIT-builds under $TMPDIR/mlx/: a process of its
    # own with a fresh TMPDIR shows whether the same session built any.
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": child_pythonpath()}
    subprocess.run([sys.executable, "-c", JIT_PROBE], env=env, check=True, timeout=300)
    assert not (tmp_path / "mlx").exists(), sorted(p.name for p in (tmp_path / "mlx").rglob("*"))


def test_hot_gpu_program_traced_again_with_fusion(tmp_path):
    """On a GPU a program traces without MLX's fusion (each fused kernel costs an NVRTC compile of
    seconds on a machine's first use, which a program run a few times never earns back) and once more
    with it on its ORT_EP_MLX_GPU_FUSE_AFTER-th call (default 8): the same results, and the run report
    counts that second trace apart. CPU programs never fuse."""
    feeds = chain_feeds(12)
    outs, st = run_report(tmp_path, elementwise_chain_model(), {"compile": "1"}, feeds)
    for f, y in zip(feeds, outs):
        np.testing.assert_allclose(y, elementwise_chain_reference(f), rtol=1e-5, atol=1e-6)
    after = int(os.environ.get("ORT_EP_MLX_GPU_FUSE_AFTER") or 8)
    retraced = (not default_device_is_cpu() and os.environ.get("ORT_EP_MLX_GPU_FUSE") not in ("0", "off")
                and 1 < after <= 11)
    assert st["traces"] == 1 and st["compiled_runs"] == 11 and st["eager_runs"] == 1, st
    assert st["fusion_traces"] == (1 if retraced else 0), st


def test_one_trace_per_thread(tmp_path):
    """Each thread that runs a signature traces it once (MLX's compile cache is per thread): four more
    threads after the first, four more traces, and every thread's results right."""
    report = tmp_path / "report.txt"
    sess = mlx_ep.session(elementwise_chain_model(), options={"device": "cpu", "compile": "1", "report": str(report)},
                          strict=True)
    feeds = chain_feeds(5)
    errors = []

    def run():
        try:
            for f in feeds:
                np.testing.assert_allclose(sess.run(None, f)[0], elementwise_chain_reference(f), rtol=1e-5, atol=1e-6)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    run()
    for _ in range(4):
        t = threading.Thread(target=run)
        t.start()
        t.join()
    del sess
    assert not errors, errors
    st = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", report.read_text().split("run report:")[1])}
    assert st["runs"] == 25 and st["eager_runs"] == 1 and st["traces"] == 1 + 4, st


RETRACE_PROBE = """
import sys, threading
import numpy as np
import onnxruntime_ep_mlx as mlx_ep
from test_runtime import chain_feeds, elementwise_chain_model, elementwise_chain_reference
sess = mlx_ep.session(elementwise_chain_model(), options={"device": "cpu", "compile": "1", "report": sys.argv[1]},
                      strict=True)
feeds = chain_feeds(12)
def run(feeds):
    for f in feeds:
        np.testing.assert_allclose(sess.run(None, f)[0], elementwise_chain_reference(f), rtol=1e-5, atol=1e-6)
run(feeds)  # the second trace on the 8th call
threads = [threading.Thread(target=run, args=(feeds,)) for _ in range(4)]  # each thread traces for itself
for t in threads: t.start()
for t in threads: t.join()
del sess
"""


def test_hot_program_second_trace_on_the_cpu(tmp_path):
    """The hot program's second trace (what a GPU program takes to fuse) exercised on the CPU
    (ORT_EP_MLX_RETRACE_CPU=1, where it still fuses nothing): the same results on the calling thread
    and on four more, one first trace counted, the fused traces apart, every trace dropped with the
    session (the child process exits cleanly)."""
    report = tmp_path / "report.txt"
    env = {**os.environ, "ORT_EP_MLX_RETRACE_CPU": "1", "ORT_EP_MLX_GPU_FUSE_AFTER": "8",
           "PYTHONPATH": child_pythonpath()}
    subprocess.run([sys.executable, "-c", RETRACE_PROBE, str(report)], env=env, check=True, timeout=300)
    st = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", report.read_text().split("run report:")[1])}
    # the calling thread: eager, then trace, replays, the second trace at call 8; four threads later:
    # the program is hot already, so each traces its fused function once (MLX caches per thread)
    assert st["runs"] == 60 and st["eager_runs"] == 1 and st["compiled_runs"] == 59, st
    assert st["traces"] == 1 and st["fusion_traces"] == 1 + 4, st


def test_failed_trace_releases_the_trace_lock(tmp_path):
    """A trace that fails (a Reshape fed by data) must not keep the process-wide trace lock:
    another thread traces afterwards, and this thread again."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Reshape", ["r", "shape"], ["y"])]
    failing = mlx_ep.session(make_model(nodes, [("x", F, [6]), ("shape", I64, [2])], [("y", F, None)]),
                             options={"device": "cpu", "compile": "1"}, strict=True)
    for _ in range(3):  # the second Run traces, fails, and runs eagerly
        failing.run(None, {"x": np.arange(6, dtype=np.float32), "shape": np.array([2, 3], np.int64)})
    feeds = chain_feeds(3)
    results = {}

    def traced_elsewhere():
        results["other"] = run_report(tmp_path / "other", elementwise_chain_model(), {"device": "cpu", "compile": "1"},
                                      feeds)

    (tmp_path / "other").mkdir()
    worker = threading.Thread(target=traced_elsewhere, daemon=True)
    worker.start()
    worker.join(timeout=120)
    assert not worker.is_alive(), "a trace on another thread waited for the lock of a failed trace"
    _, st = results["other"]
    assert st["traces"] == 1 and st["compiled_runs"] == 2
    outs, st = run_report(tmp_path, elementwise_chain_model(), {"device": "cpu", "compile": "1"}, feeds)
    assert st["traces"] == 1 and st["compiled_runs"] == 2
    for f, y in zip(feeds, outs):
        np.testing.assert_allclose(y, elementwise_chain_reference(f), rtol=1e-5, atol=1e-6)


def test_freed_programs_leave_no_trace_in_other_threads(tmp_path):
    """MLX keeps traces in a cache per thread and, left alone, forgets a freed program only in
    the cache of the thread that compiled it. A session compiled and traced here and traced
    again by a worker thread, then freed, must release its 4 MiB weight from both caches."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((1024, 1024)).astype(np.float32)
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", F, [1, 1024])],
                       [("y", F, [1, 1024])], initializers={"w": w})
    feeds = {"x": rng.standard_normal((1, 1024)).astype(np.float32)}
    todo, done = queue.Queue(), queue.Queue()

    def worker():
        while (sess := todo.get()) is not None:
            done.put(sess.run(None, feeds)[0])

    def rss_mib():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    try:
        for i in range(25):
            if i == 5:
                start = rss_mib()
            sess = mlx_ep.session(model, options={"device": "cpu", "compile": "1"}, strict=True)
            sess.run(None, feeds)
            sess.run(None, feeds)  # compiled and traced on this thread
            todo.put(sess)
            np.testing.assert_allclose(done.get(timeout=120), feeds["x"] @ w, rtol=1e-4, atol=1e-4)
            del sess
        grown = rss_mib() - start
    finally:
        todo.put(None)
        thread.join(timeout=120)
    assert grown < 40, f"{grown:.0f} MiB kept by 20 freed sessions (80 MiB when traces outlive them)"
