"""Diagnostics: the Chrome-trace (Perfetto) file of option `trace`, the run report's time
counters, and the EP's messages through ORT's logger."""
import json
import re

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnxruntime_ep_mlx as mlx_ep
from parity import device_memory_info, make_model

F = TensorProto.FLOAT


def add_relu():
    return make_model([helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Relu", ["s"], ["y"])],
                      [("a", F, [2, 3]), ("b", F, [2, 3])], [("y", F, [2, 3])])


def feeds():
    rng = np.random.default_rng(0)
    return {"a": rng.standard_normal((2, 3)).astype(np.float32), "b": rng.standard_normal((2, 3)).astype(np.float32)}


def test_trace_file_is_chrome_trace_json(tmp_path):
    path = tmp_path / "trace.json"
    sess = mlx_ep.session(add_relu(), options={"trace": str(path)}, strict=True)
    f = feeds()
    for _ in range(3):
        np.testing.assert_allclose(sess.run(None, f)[0], np.maximum(f["a"] + f["b"], 0), rtol=1e-6)
    del sess  # written when the session ends
    doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    assert doc["otherData"]["dropped"] == 0
    for e in events:
        assert e["ph"] == "X" and e["cat"] == "MLXExecutionProvider"
        assert isinstance(e["ts"], int) and isinstance(e["dur"], int) and e["dur"] >= 0
        assert e["args"]["cluster"].startswith("MLXExecutionProvider")
    names = [e["name"] for e in events]
    assert names.count("Run") == 3
    for phase in ("bind", "graph", "eval", "copy out"):
        assert names.count(phase) == 3, phase
    runs = [e for e in events if e["name"] == "Run"]
    phases = [e for e in events if e["name"] != "Run"]
    # every phase lies inside a Run of its thread
    for p in phases:
        assert any(r["tid"] == p["tid"] and r["ts"] <= p["ts"] and p["ts"] + p["dur"] <= r["ts"] + r["dur"] + 1
                   for r in runs), p
    details = [e["args"]["detail"] for e in events if e["name"] == "graph"]
    assert details == ["lowered (eager)", "compiled program", "compiled program"]


def test_trace_path_that_cannot_be_created_is_an_error(tmp_path):
    with pytest.raises(Exception, match=r"option trace: cannot open '.*/missing/t.json' for writing"):
        mlx_ep.session(add_relu(), options={"trace": str(tmp_path / "missing" / "t.json")})


def test_run_report_counts_time_and_io(tmp_path):
    report = tmp_path / "r.txt"
    sess = mlx_ep.session(add_relu(), options={"report": str(report)}, strict=True)
    for _ in range(2):
        sess.run(None, feeds())
    del sess
    line = report.read_text().split("run report:")[1]
    stats = dict(re.findall(r"(\w+)=([\d.]+)", line))
    # ORT hands the EP host tensors, or device tensors where the EP registered device memory (a GPU
    # on MLX's CUDA backend): every input and output is counted once, on one side
    on_device = "device" if device_memory_info() is not None else "host"
    off_device = "host" if on_device == "device" else "device"
    assert int(stats[f"{on_device}_inputs"]) == 4 and int(stats[f"{on_device}_outputs"]) == 2
    assert int(stats[f"{off_device}_inputs"]) == 0 and int(stats[f"{off_device}_outputs"]) == 0
    for key in ("first_run_ms", "trace_runs_ms", "bind_ms", "graph_ms", "eval_ms", "copy_ms"):
        assert float(stats[key]) >= 0.0
    assert float(stats["first_run_ms"]) > 0.0


def test_messages_go_through_ort_logger(capfd):
    """With the session's log severity at VERBOSE, ORT's logger prints the EP's claim summary."""
    mlx_ep.register_execution_provider_library()
    so = ort.SessionOptions()
    so.log_severity_level = 0
    mlx_ep.append_to_session_options(so)
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    ort.InferenceSession(add_relu(), sess_options=so)
    err = capfd.readouterr().err
    assert re.search(r"2 of 2 nodes claimed, 1 cluster\(s\)", err), err[-2000:]
