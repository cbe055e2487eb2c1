"""Tests of the ONNX node-test conformance runner itself (tests/conformance/run.py): its output
comparison, its classification of strict-mode failures, its --check rules, and its handling of a
worker that crashes or hangs."""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

RUN_PY = Path(__file__).resolve().parent / "conformance" / "run.py"
_spec = importlib.util.spec_from_file_location("conformance_run", RUN_PY)
run = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = run
_spec.loader.exec_module(run)


def test_floats_use_onnx_tolerances():
    want = np.array([1.0, 2.0, 0.0], np.float32)
    assert run.compare_value(want, want * (1 + 5e-4)) is None
    reason = run.compare_value(want, np.array([1.0, 2.01, 0.0], np.float32))
    assert reason and "1/3 values differ" in reason and "max abs err 0.01" in reason
    assert run.compare_value(np.float32([0.0]), np.float32([1e-6])) is not None  # atol 1e-7


def test_nan_equals_nan_but_not_a_number():
    want = np.array([np.nan, 1.0], np.float32)
    assert run.compare_value(want, want.copy()) is None
    assert run.compare_value(want, np.array([0.0, 1.0], np.float32)) is not None
    assert run.compare_value(np.float32([np.inf]), np.float32([np.inf])) is None
    assert run.compare_value(np.float32([np.inf]), np.float32([-np.inf])) is not None


def test_integers_bools_strings_are_exact():
    assert run.compare_value(np.int64([1, 2]), np.int64([1, 3])).startswith("output: 1/2 values differ")
    assert run.compare_value(np.array([True]), np.array([False])) is not None
    assert run.compare_value(np.array([b"a", b"b"], object), np.array(["a", "b"], object)) is None
    assert "strings differ" in run.compare_value(np.array(["a"], object), np.array(["A"], object))


def test_shape_dtype_and_structure_mismatches():
    assert "shape" in run.compare_value(np.zeros((2, 3), np.float32), np.zeros((3, 2), np.float32))
    assert "dtype" in run.compare_value(np.zeros(2, np.float32), np.zeros(2, np.float64))
    seq = [np.int32([1]), np.int32([2])]
    assert run.compare_value(seq, [np.int32([1]), np.int32([2])]) is None
    assert "sequence length" in run.compare_value(seq, seq[:1])
    assert run.compare_value(None, None) is None
    assert run.compare_value(None, np.int32([1])) is not None
    assert run.compare_outputs([np.int32([1])], []) == "0 outputs, want 1"


def test_narrow_types():
    want = np.array([1.0, 2.0], ml_dtypes.bfloat16)
    assert run.compare_value(want, np.array([1.0, 2.015625], ml_dtypes.bfloat16)) is None  # 1 ULP
    assert run.compare_value(np.array([-8, 7], ml_dtypes.int4), np.array([-8, 6], ml_dtypes.int4))


@pytest.mark.parametrize("elem_type, dtype, values", [
    (22, ml_dtypes.int4, [-8, -1, 0, 7, 3]), (21, ml_dtypes.uint4, [0, 15, 9]),
    (26, ml_dtypes.int2, [-2, -1, 0, 1, 1]), (16, ml_dtypes.bfloat16, [1.5, -2.0]),
    (17, ml_dtypes.float8_e4m3fn, [0.5, -448.0])])
def test_raw_bits_round_trip_through_ortvalue(elem_type, dtype, values):
    ort = pytest.importorskip("onnxruntime")
    arr = np.array(values, dtype).reshape(1, -1)
    back = run._ortvalue_to_raw(run._raw_to_ortvalue(ort, arr, elem_type), elem_type)
    assert back.dtype == arr.dtype and back.shape == arr.shape
    assert np.array_equal(back.astype(np.float64), arr.astype(np.float64))


def test_strict_session_errors():
    msg = ("[ONNXRuntimeError] : 1 : FAIL : This session contains graph nodes that are assigned to "
           "the default CPU EP, but fallback to CPU EP has been explicitly disabled by the user.")
    assert run.classify_strict_session_error(msg) == "declined"
    assert run.classify_strict_session_error("Could not find an implementation for X") == "error"
    memcpy = ("Exception during initialization: /onnxruntime_src/onnxruntime/core/optimizer/transformer_memcpy.cc:253 "
              "bool onnxruntime::TransformerMemcpyImpl::IsNodeCompatibleWithProvider(const onnxruntime::Node&) const")
    assert run.classify_strict_session_error(memcpy) == "declined"
    assert run.short_message(RuntimeError(msg)).startswith("This session contains")
    ep_msg = ("[ONNXRuntimeError] : 1 : FAIL : Non-zero status code returned while running "
              "MLXExecutionProvider_622_7 node. Name:'MLXExecutionProvider_MLXExecutionProvider_622_7_7' "
              "Status Message: MLXExecutionProvider: MLXExecutionProvider_MLXExecutionProvider_96_1_1: "
              "input has rank 3")
    assert run.short_message(ep_msg) == "MLXExecutionProvider: fused node: input has rank 3"


def _res(strict, fallback="pass", cpu="pass", cpu_ops=None):
    rec = lambda o: {"outcome": o, "reason": "why" if o != "pass" else "", "seconds": 0.0}
    fb = rec(fallback)
    if cpu_ops is not None:
        fb["cpu_ops"] = cpu_ops
    return {"strict": rec(strict), "fallback": fb, "cpu": rec(cpu)}


def test_check_rules():
    results = {"t_lost": _res("fail"), "t_crash": _res("pass", fallback="crash"),
               "t_regress": _res("declined", fallback="fail"),
               "t_ort_broken": _res("declined", fallback="fail", cpu="fail"),
               "t_ok": _res("pass")}
    problems = run.check_problems(results, {"t_lost", "t_ok"})
    assert [p.split(":")[0] for p in problems["lost strict pass"]] == ["t_lost"]
    assert [p.split(" ")[0] for p in problems["crash"]] == ["t_crash"]
    # a crash is listed once, as a crash, not again as a fallback regression
    assert [p.split(":")[0] for p in problems["fallback regression"]] == ["t_regress"]


def test_declines_are_blamed_on_ops_left_on_cpu():
    assert run.declined_ops(["Add", "Erf"], _res("declined", cpu_ops=["Erf"])) == ["Erf"]
    assert run.declined_ops(["Add", "Erf"], _res("declined")) == ["Add", "Erf"]


def test_render_doc():
    results = {"test_a": _res("pass"), "test_b": _res("declined", cpu_ops=["Erf"]),
               "test_c": _res("fail"), "test_d": _res("error", cpu="error")}
    ops = {"test_a": ["Add"], "test_b": ["Add", "Erf"], "test_c": ["Erf"], "test_d": ["Erf"]}
    doc = run.render_doc(results, ops, "1.0")
    assert "| Add | 2 | 1 | 0 | 1 | 0 | 0 | 2 | 2 |  |" in doc
    assert "| Erf | 3 | 0 | 1 | 0 | 1 | 1 | 3 | 2 | `test_c` (fail) |" in doc
    assert "- `test_c` (Erf): fail — why" in doc
    assert "- `test_d` (Erf): error — why" in doc.split("## CPU EP baseline")[1]


def test_gpu_column(monkeypatch):
    """A GPU run's summary (--device-summary there) against this run: totals side by side and every
    test that passes strict here but not on the GPU, with the GPU's reason."""
    gpu = {"test_a": _res("pass"), "test_b": _res("declined"), "test_c": _res("fail"), "test_e": _res("pass")}
    monkeypatch.setattr(run, "time", type("T", (), {"strftime": staticmethod(lambda f: "2026-12-03")}))
    summary = json.loads(json.dumps(run.device_summary(gpu, run.MODES)))
    assert summary["totals"]["strict"] == {"pass": 2, "declined": 1, "fail": 1}
    assert set(summary["not_passing"]) == {"test_b", "test_c"}
    here = {"test_a": _res("pass"), "test_b": _res("pass"), "test_c": _res("fail"), "test_e": _res("pass")}
    lines = run.render_gpu_column(here, summary)
    assert "| strict | 3 | 2 | 1 | 1 | 0 | 0 | 0 |" in lines
    assert "- `test_b`: declined — why" in lines
    assert not any("`test_c`" in line for line in lines)  # fails on the CPU too: not a GPU difference
    halves = [run.device_summary({k: gpu[k] for k in keys}, run.MODES) for keys in (("test_a", "test_b"),
                                                                                  ("test_c", "test_e"))]
    assert run.merge_summaries(halves)["totals"] == summary["totals"]
    assert run.merge_summaries(halves)["not_passing"] == summary["not_passing"]


@pytest.mark.skipif(not run.DATA_DIR.is_dir(), reason="ONNX node test data not fetched")
def test_worker_crash_and_hang_are_isolated(tmp_path):
    out = tmp_path / "results.json"
    env = dict(os.environ, CONFORMANCE_INJECT="test_abs:cpu:crash,test_acos:cpu:hang,"
                                              "test_add:cpu:crash-late")
    proc = subprocess.run([sys.executable, str(RUN_PY), "-k", "^test_a(bs|cos|cosh|dd)$", "-j", "1",
                           "--modes", "cpu", "--timeout", "8", "--json", str(out)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    results = json.loads(out.read_text())
    outcomes = {name: r["cpu"]["outcome"] for name, r in results.items()}
    assert outcomes == {"test_abs": "crash", "test_acos": "timeout", "test_acosh": "pass",
                        "test_add": "crash"}
    assert "SIGSEGV" in results["test_abs"]["cpu"]["reason"]
    assert "after other tests; alone: pass" in results["test_add"]["cpu"]["reason"]
