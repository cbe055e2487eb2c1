#!/usr/bin/env python3
"""ONNX node-test conformance runner: runs every test of ONNX's node test suite in three modes (MLX EP
strict, MLX EP with CPU fallback, ORT's CPU EP alone) in crash-isolated worker processes, then checks
the results against tests/conformance/expected_strict.txt (--check) or regenerates that file and
docs/CONFORMANCE.md (--write)."""
from __future__ import annotations

import argparse
import collections
import ctypes
import gzip
import itertools
import json
import multiprocessing
import multiprocessing.connection
import os
import re
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

DATA_DIR = ROOT / "third_party/root/usr/share/libonnx-testdata/data/node"
DATA_CHANGELOG = ROOT / "third_party/root/usr/share/doc/libonnx-testdata/changelog.Debian.gz"
EXPECTED_STRICT = ROOT / "tests/conformance/expected_strict.txt"
# The last run on a GPU (`--device-summary` there, copied here): rendered as the GPU column.
GPU_SUMMARY = ROOT / "tests/conformance/gpu_summary.json"
DOC = ROOT / "docs/CONFORMANCE.md"

MODES = ("cpu", "strict", "fallback")  # run in this order within a worker
MODE_TITLES = {"strict": "strict (MLX EP, CPU fallback disabled)",
               "fallback": "fallback (MLX EP, CPU fallback allowed)",
               "cpu": "ORT CPU EP alone"}
OUTCOMES = ("pass", "declined", "fail", "error", "crash", "timeout", "unsupported-io")
SETUP_TIMEOUT = 120.0  # seconds a worker may take to import ORT and register the EP
NOT_PASSING = ("fail", "error", "crash", "timeout")  # outcomes that are a wrong answer or worse

# ONNX's backend test runner compares floats with rtol=1e-3, atol=1e-7 (onnx/backend/test/loader);
# integers, bools and strings must match exactly; NaN equals NaN.
RTOL, ATOL = 1e-3, 1e-7
STRICT_RUNS = 3  # eager, trace, replay (see run_mode)
# Per-test (rtol, atol) overrides; each entry says why the default is too tight for that test.
TOLERANCE_OVERRIDES: dict[str, tuple[float, float]] = {
    # DFT/STFT in float32: bins that are exactly 0 in the float64 reference come out at about
    # float32 epsilon times the signal's magnitude (outputs reach ~2e3, errors ~2e-4). ORT's own
    # backend tests relax test_dft and test_dft_axis the same way (atol 1e-4).
    **{name: (RTOL, 1e-3) for name in (
        "test_dft", "test_dft_axis", "test_dft_inverse", "test_dft_opset19", "test_dft_axis_opset19",
        "test_dft_inverse_opset19", "test_stft", "test_stft_with_window")},
}

# Why tests ORT's CPU EP passes are declined in strict mode, where the claim report alone does not
# say it in a line: rendered into docs/CONFORMANCE.md ("Declined by design") for the tests that are
# declined. A compiled plugin-EP node cannot return a sequence or an optional: ORT allocates each
# output from the kernel context (KernelContext_GetOutput makes a tensor of given dims; for a
# sequence-typed output an empty TensorSeq that the C API offers no way to fill), so every node
# that makes a value leaving the graph as a sequence or optional stays on ORT's CPU EP.
_SEQ_OUT = ("its output is a sequence (a graph output): ORT's plugin-EP interface cannot return a "
            "sequence from a compiled node (KernelContext_GetOutput allocates tensors only)")
_SEQ_IN = ("its input is a sequence (a graph input), and so is its output: a sequence cannot be "
           "returned from a compiled node")
_OPT = ("an optional value at the graph boundary: ORT's plugin-EP interface has no optional "
        "OrtValue output (nor a way to say 'none')")
DECLINE_NOTES: dict[str, str] = {
    "test_if_seq": "If whose branches return a sequence that is the graph output; " + _SEQ_OUT,
    "test_if_opt": "If whose branches return optional(sequence), the graph output; " + _OPT,
    "test_loop13_seq": "Loop carrying a sequence from a graph input to the graph output; " + _SEQ_IN
                       + "; a Loop-carried sequence is also a body input, which bodies do not take yet",
    "test_loop16_seq_none": "Loop carrying optional(sequence) from a graph input; " + _OPT,
    "test_identity_sequence": "Identity of a sequence graph input; " + _SEQ_IN,
    "test_optional_get_element_sequence": "OptionalGetElement of a sequence graph input; " + _SEQ_IN,
    "test_sequence_insert_at_back": "SequenceInsert on a sequence graph input; " + _SEQ_IN,
    "test_sequence_insert_at_front": "SequenceInsert on a sequence graph input; " + _SEQ_IN,
    "test_split_to_sequence_1": "SplitToSequence whose sequence is the graph output; " + _SEQ_OUT,
    "test_split_to_sequence_2": "SplitToSequence whose sequence is the graph output; " + _SEQ_OUT,
    "test_split_to_sequence_nokeepdims": "SplitToSequence whose sequence is the graph output; " + _SEQ_OUT,
    **{f"test_sequence_map_{t}{x}": "SequenceMap over sequence graph inputs to sequence graph outputs"
       + (" (expanded: a Loop building the output with SequenceInsert, a body input)" if x else "")
       + "; " + _SEQ_IN
       for t in ("add_1_sequence_1_tensor", "add_2_sequences", "extract_shapes", "identity_1_sequence",
                 "identity_1_sequence_1_tensor", "identity_2_sequences") for x in ("", "_expanded")},
    "test_optional_get_element_optional_sequence": "OptionalGetElement of optional(sequence) to a sequence graph "
                                                   "output; " + _OPT,
    **{f"test_optional_{t}": ("An optional-typed graph input read to a tensor: not supported yet (the EP has no "
                              "optional values; ORT would hand the input as an optional OrtValue the EP could read "
                              "with HasValue, which is not done)") for t in (
        "get_element_optional_tensor", "has_element_empty_optional_input", "has_element_optional_input",
        "has_element_tensor_input")},
}

# Tensor element types numpy/ORT's Python binding cannot carry directly: fed and fetched as raw bits
# through OrtValue (onnx type -> bits per element).
RAW_BITS = {16: 16,                                   # BFLOAT16
            17: 8, 18: 8, 19: 8, 20: 8, 24: 8,        # FLOAT8E4M3FN/FNUZ, E5M2/FNUZ, E8M0
            21: 4, 22: 4, 23: 4,                      # UINT4, INT4, FLOAT4E2M1
            25: 2, 26: 2}                             # UINT2, INT2
ML_FLOATS = {"bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
             "float8_e8m0fnu", "float4_e2m1fn"}


class UnsupportedIO(Exception):
    """A test input or output of a kind ORT's Python binding cannot feed or fetch."""


# ---------------------------------------------------------------------------------------------
# Comparison (pure functions; tests/test_conformance_runner.py exercises them)

def _is_float(dtype: np.dtype) -> bool:
    return dtype.kind in "fc" or dtype.name in ML_FLOATS


def _as_text(a: np.ndarray) -> np.ndarray:
    return np.vectorize(lambda s: s.decode("utf-8", "replace") if isinstance(s, bytes) else str(s),
                        otypes=[object])(a) if a.size else a.astype(object)


def _compare_floats(got: np.ndarray, want: np.ndarray, rtol: float, atol: float, where: str):
    if want.dtype.name == "bfloat16":
        rtol = max(rtol, 2 ** -6)  # two bfloat16 ULPs, as ONNX's runner does
    wide = np.complex128 if want.dtype.kind == "c" else np.float64
    g, w = got.astype(wide), want.astype(wide)
    ok = np.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
    if ok.all():
        return None
    bad = np.flatnonzero(~ok.reshape(-1))
    first = int(bad[0])
    gf, wf = g.reshape(-1), w.reshape(-1)
    finite = np.isfinite(gf) & np.isfinite(wf) & ~ok.reshape(-1)
    diff = np.abs(gf[finite] - wf[finite])
    max_abs = float(diff.max()) if diff.size else float("nan")
    denom = np.abs(wf[finite])
    rel = diff[denom > 0] / denom[denom > 0]
    max_rel = float(rel.max()) if rel.size else float("nan")
    return (f"{where}: {bad.size}/{ok.size} values differ, max abs err {max_abs:.3g}, "
            f"max rel err {max_rel:.3g} (first at flat index {first}: got {gf[first]:.6g}, "
            f"want {wf[first]:.6g})")


def compare_value(want, got, rtol: float = RTOL, atol: float = ATOL, where: str = "output"):
    """None when ``got`` matches ``want`` (tensor, sequence list or None for an empty optional),
    otherwise a one-line reason."""
    if want is None or got is None:
        if want is None and got is None:
            return None
        return f"{where}: expected {'no value' if want is None else 'a value'}, got " \
               f"{'no value' if got is None else type(got).__name__}"
    if isinstance(want, list):
        if not isinstance(got, (list, tuple)):
            return f"{where}: expected a sequence, got {type(got).__name__}"
        if len(got) != len(want):
            return f"{where}: sequence length {len(got)}, want {len(want)}"
        for i, (w, g) in enumerate(zip(want, got)):
            reason = compare_value(w, g, rtol, atol, f"{where}[{i}]")
            if reason:
                return reason
        return None
    want, got = np.asarray(want), np.asarray(got)
    if got.shape != want.shape:
        return f"{where}: shape {list(got.shape)}, want {list(want.shape)}"
    if want.dtype.kind in "OSU" or got.dtype.kind in "OSU":
        if want.dtype.kind not in "OSU" or got.dtype.kind not in "OSU":
            return f"{where}: dtype {got.dtype}, want {want.dtype}"
        eq = _as_text(got) == _as_text(want)
        if np.all(eq):
            return None
        idx = int(np.flatnonzero(~np.asarray(eq).reshape(-1))[0])
        return (f"{where}: strings differ at flat index {idx}: got {_as_text(got).reshape(-1)[idx]!r}, "
                f"want {_as_text(want).reshape(-1)[idx]!r}")
    if got.dtype != want.dtype:
        return f"{where}: dtype {got.dtype}, want {want.dtype}"
    if _is_float(want.dtype):
        return _compare_floats(got, want, rtol, atol, where)
    if want.dtype.kind == "V":  # int4/uint4/int2/uint2 (ml_dtypes): compare as integers
        got, want = got.astype(np.int64), want.astype(np.int64)
    neq = got != want
    if not np.any(neq):
        return None
    idx = int(np.flatnonzero(neq.reshape(-1))[0])
    return (f"{where}: {int(neq.sum())}/{neq.size} values differ (first at flat index {idx}: "
            f"got {got.reshape(-1)[idx]}, want {want.reshape(-1)[idx]})")


def compare_outputs(want: list, got: list, rtol: float = RTOL, atol: float = ATOL):
    """None when every output matches, otherwise the first mismatch's reason."""
    if len(got) != len(want):
        return f"{len(got)} outputs, want {len(want)}"
    for i, (w, g) in enumerate(zip(want, got)):
        reason = compare_value(w, g, rtol, atol, f"output {i}")
        if reason:
            return reason
    return None


def classify_strict_session_error(message: str) -> str:
    """A strict-mode session that cannot be created because some node would run on ORT's CPU EP
    was declined by the MLX EP; any other failure is an error."""
    text = message.lower()
    if "fallback" in text or "assigned to the default cpu ep" in text:
        return "declined"
    # With the EP's device memory (the GPU runs), ORT's copy-placement pass meets a node no EP took
    # before the fallback check does, and names that instead.
    if "isnodecompatiblewithprovider" in text:
        return "declined"
    return "error"


def short_message(exc: BaseException | str, limit: int = 200) -> str:
    """First meaningful line of an exception, without ORT's '[ONNXRuntimeError] : 1 : FAIL :' prefix."""
    text = str(exc).strip() or type(exc).__name__
    text = re.sub(r"^\[ONNXRuntimeError\]\s*:\s*\d+\s*:\s*\w+\s*:\s*", "", text)
    # "Non-zero status code returned while running <node type> node. Name:'..' Status Message: why":
    # keep the why; the EP's fused node names carry a hash that changes with the model.
    text = re.sub(r"Non-zero status code returned while running (\S+) node\. Name:'[^']*' "
                  r"Status Message: ",
                  lambda m: "" if m.group(1).startswith("MLXExecutionProvider") else m.group(1) + ": ",
                  text)
    text = re.sub(r"MLXExecutionProvider(?:_MLXExecutionProvider)?_\d+(?:_\d+)+", "fused node", text)
    # ORT's graph check names the whole node spec before saying what is wrong with it.
    text = re.sub(r"This is an invalid model\. In Node, .*?\) , Error ", "invalid model: ", text)
    line = text.splitlines()[0].strip() if text else ""
    return line if len(line) <= limit else line[:limit - 3] + "..."


# ---------------------------------------------------------------------------------------------
# Test data

def op_name(node) -> str:
    """An op's name for reports: plain for the default ONNX domain, 'domain:Op' otherwise."""
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}:{node.op_type}"


def test_ops(model_path: Path) -> list[str]:
    """Op types of a test model's top-level nodes (the test name's prefix is unreliable)."""
    import onnx
    model = onnx.load(str(model_path), load_external_data=False)
    return sorted({op_name(n) for n in model.graph.node})


def _load_proto(path: Path, type_proto):
    import onnx
    from onnx import numpy_helper
    kind = type_proto.WhichOneof("value")
    data = path.read_bytes()
    if kind == "tensor_type":
        proto = onnx.TensorProto()
        proto.ParseFromString(data)
        return numpy_helper.to_array(proto)
    if kind == "sequence_type":
        proto = onnx.SequenceProto()
        proto.ParseFromString(data)
        return numpy_helper.to_list(proto)
    if kind == "optional_type":
        proto = onnx.OptionalProto()
        proto.ParseFromString(data)
        return numpy_helper.to_optional(proto)
    raise UnsupportedIO(f"{path.name}: {kind} values are not supported")


def _uses_raw_bits(type_proto) -> bool:
    kind = type_proto.WhichOneof("value")
    if kind == "tensor_type":
        return type_proto.tensor_type.elem_type in RAW_BITS
    if kind == "sequence_type":
        return _uses_raw_bits(type_proto.sequence_type.elem_type)
    if kind == "optional_type":
        return _uses_raw_bits(type_proto.optional_type.elem_type)
    return False


@dataclass
class Case:
    name: str
    model: bytes                                   # serialized model
    input_types: dict = field(default_factory=dict)  # input name -> onnx elem type (tensors only)
    output_names: list = field(default_factory=list)
    output_types: list = field(default_factory=list)  # onnx elem type per output, 0 if not a tensor
    raw_bits: bool = False                         # some tensor goes through OrtValue as raw bits
    data_sets: list = field(default_factory=list)  # [(feeds dict, expected outputs list)]


def load_case(test_dir: Path) -> Case:
    """Reads a test's model and its data sets; raises UnsupportedIO for values ORT cannot take."""
    import onnx
    model_bytes = (test_dir / "model.onnx").read_bytes()
    model = onnx.load_from_string(model_bytes)
    graph = model.graph
    case = Case(test_dir.name, model_bytes)
    types = [v.type for v in graph.input] + [v.type for v in graph.output]
    case.raw_bits = any(_uses_raw_bits(t) for t in types)
    if case.raw_bits and any(t.WhichOneof("value") != "tensor_type" for t in types):
        raise UnsupportedIO("sequence/optional of a type numpy cannot hold")
    for ds in sorted(test_dir.glob("test_data_set_*")):
        n_in = len(list(ds.glob("input_*.pb")))
        n_out = len(list(ds.glob("output_*.pb")))
        if n_in > len(graph.input) or n_out > len(graph.output):
            raise UnsupportedIO(f"{ds.name}: more data files than graph inputs/outputs")
        feeds = {graph.input[i].name: _load_proto(ds / f"input_{i}.pb", graph.input[i].type)
                 for i in range(n_in)}
        expected = [_load_proto(ds / f"output_{i}.pb", graph.output[i].type) for i in range(n_out)]
        case.data_sets.append((feeds, expected))
        case.output_names = [graph.output[i].name for i in range(n_out)]
    case.input_types = {v.name: v.type.tensor_type.elem_type for v in graph.input
                        if v.type.WhichOneof("value") == "tensor_type"}
    case.output_types = [v.type.tensor_type.elem_type if v.type.WhichOneof("value") == "tensor_type"
                         else 0 for v in graph.output[:len(case.output_names)]]
    return case


# ---------------------------------------------------------------------------------------------
# Running one test in one mode (inside a worker process)

def _raw_to_ortvalue(ort, arr: np.ndarray, elem_type: int):
    """An OrtValue of an element type numpy cannot express, filled bit for bit from ``arr``
    (an ml_dtypes array with one element per byte or per two bytes)."""
    bits = RAW_BITS[elem_type]
    value = ort.OrtValue.ortvalue_from_shape_and_type(list(arr.shape), elem_type)
    if bits >= 8:
        data = np.ascontiguousarray(arr).view(np.uint8 if bits == 8 else np.uint16).tobytes()
    else:
        per_byte = 8 // bits
        codes = np.ascontiguousarray(arr).view(np.uint8).reshape(-1) & ((1 << bits) - 1)
        codes = np.concatenate([codes, np.zeros((-codes.size) % per_byte, np.uint8)])
        packed = np.zeros(codes.size // per_byte, np.uint8)
        for k in range(per_byte):  # element i sits in the low bits first (ONNX packing)
            packed |= (codes[k::per_byte] << (k * bits)).astype(np.uint8)
        data = packed.tobytes()
    if data:
        ctypes.memmove(value.data_ptr(), data, len(data))
    return value


def _ortvalue_to_raw(value, elem_type: int) -> np.ndarray:
    import onnx.helper
    bits = RAW_BITS[elem_type]
    shape = value.shape()
    count = int(np.prod(shape)) if shape else 1
    nbytes = (count * bits + 7) // 8
    raw = np.frombuffer(ctypes.string_at(value.data_ptr(), nbytes), np.uint8) if nbytes else \
        np.zeros(0, np.uint8)
    if bits == 16:
        codes = raw.view(np.uint16)
    elif bits == 8:
        codes = raw
    else:
        per_byte = 8 // bits
        codes = np.stack([(raw >> (k * bits)) & ((1 << bits) - 1) for k in range(per_byte)],
                         axis=1).reshape(-1)[:count]
    return codes.copy().view(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).reshape(shape)


def _run_once(ort, sess, case: Case, feeds: dict) -> list:
    if not case.raw_bits:
        return sess.run(case.output_names, feeds)
    values = {name: _raw_to_ortvalue(ort, arr, case.input_types[name])
              if case.input_types.get(name) in RAW_BITS else ort.OrtValue.ortvalue_from_numpy(arr)
              for name, arr in feeds.items()}
    outs = sess.run_with_ort_values(case.output_names, values)
    return [_ortvalue_to_raw(v, t) if t in RAW_BITS else v.numpy()
            for v, t in zip(outs, case.output_types)]


def _make_session(ort, mode: str, model: bytes):
    import onnxruntime_ep_mlx as mlx_ep
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1  # one worker per core
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    if mode == "cpu":
        return ort.InferenceSession(model, sess_options=so, providers=["CPUExecutionProvider"])
    if mode == "fallback":
        so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    return mlx_ep.session(model, strict=(mode == "strict"), sess_options=so, ort=ort)


def _ops_left_on_cpu(sess) -> list[str] | None:
    """Op names of the nodes the MLX EP did not take (fallback mode), or None if ORT cannot say."""
    import onnxruntime_ep_mlx as mlx_ep
    try:
        info = sess.get_provider_graph_assignment_info()
    except Exception:  # older ORT without graph assignment info
        return None
    left = set()
    for subgraph in info:
        if subgraph.ep_name != mlx_ep.ep_name():
            left.update(n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}:{n.op_type}"
                        for n in subgraph.get_nodes())
    return sorted(left)


def run_mode(ort, mode: str, case: Case, rtol: float, atol: float) -> dict:
    """One test in one mode: creates one session and runs every data set through it."""
    start = time.perf_counter()
    record = {"outcome": "pass", "reason": ""}
    try:
        sess = _make_session(ort, mode, case.model)
    except Exception as exc:
        outcome = classify_strict_session_error(str(exc)) if mode == "strict" else "error"
        record.update(outcome=outcome, reason=("session: " if outcome == "error" else "")
                      + short_message(exc))
        record["seconds"] = time.perf_counter() - start
        return record
    if mode == "fallback":
        record["cpu_ops"] = _ops_left_on_cpu(sess)
    # Strict mode runs every data set three times: the first Run of a signature builds the MLX
    # graph eagerly, the second traces the compiled program, the third replays it.
    runs = STRICT_RUNS if mode == "strict" else 1
    for feeds, expected in case.data_sets:
        for run in range(runs):
            try:
                got = _run_once(ort, sess, case, feeds)
            except Exception as exc:
                record.update(outcome="error", reason=f"run {run + 1}: " + short_message(exc))
                break
            reason = compare_outputs(expected, list(got), rtol, atol)
            if reason:
                record.update(outcome="fail", reason=(f"run {run + 1}: " if run else "") + reason)
                break
        if record["outcome"] != "pass":
            break
    record["seconds"] = time.perf_counter() - start
    return record


def _inject_fault(name: str, mode: str, tasks_before: int) -> None:
    """Test hook for the runner's own tests: CONFORMANCE_INJECT="test:mode:FAULT,..." makes the
    worker die (crash), hang (hang), or die only after other tests ran in it (crash-late), as a
    broken EP would."""
    for entry in filter(None, os.environ.get("CONFORMANCE_INJECT", "").split(",")):
        test, _, rest = entry.partition(":")
        step, _, fault = rest.partition(":")
        if test == name and step == mode:
            if fault == "crash" or (fault == "crash-late" and tasks_before):
                os.kill(os.getpid(), signal.SIGSEGV)
            if fault == "hang":
                time.sleep(3600)


def _worker_main(conn, data_dir: str, log_path: str, needs_ep: bool) -> None:
    """Worker process: takes (test, modes) tasks from the pipe and reports each mode's result; says
    "begin" before every step so the parent knows what was running if this process dies."""
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    try:
        import onnxruntime as ort
        ort.set_default_logger_severity(3)
        if needs_ep:
            import onnxruntime_ep_mlx as mlx_ep
            mlx_ep.register_execution_provider_library(ort=ort)
    except Exception as exc:
        conn.send(("fatal", f"worker setup failed: {short_message(exc, 500)}"))
        return
    conn.send(("ready",))
    for tasks_before in itertools.count():
        task = conn.recv()
        if task is None:
            return
        name, modes = task
        conn.send(("begin", name, "load"))
        try:
            case = load_case(Path(data_dir) / name)
            failure = None
        except UnsupportedIO as exc:
            case, failure = None, {"outcome": "unsupported-io", "reason": short_message(exc)}
        except Exception as exc:
            case, failure = None, {"outcome": "error", "reason": "load: " + short_message(exc)}
        rtol, atol = TOLERANCE_OVERRIDES.get(name, (RTOL, ATOL))
        for mode in modes:
            conn.send(("begin", name, mode))
            _inject_fault(name, mode, tasks_before)
            record = dict(failure, seconds=0.0) if failure else run_mode(ort, mode, case, rtol, atol)
            conn.send(("result", name, mode, record))
        conn.send(("done", name))


# ---------------------------------------------------------------------------------------------
# Scheduling tests over worker processes

@dataclass
class _Worker:
    proc: multiprocessing.Process
    conn: object
    log_path: str
    isolated: bool                 # runs one task alone, then exits
    ready: bool = False            # finished its setup (imports, EP registration)
    task: tuple | None = None      # (test, modes) being run
    step: str | None = None        # "load" or the mode being run
    step_start: float = 0.0
    log_offset: int = 0            # size of the log when the current step began
    done_modes: list = field(default_factory=list)


def _death_reason(worker: _Worker) -> str:
    code = worker.proc.exitcode
    if code is not None and code < 0:
        try:
            how = signal.Signals(-code).name
        except ValueError:
            how = f"signal {-code}"
    else:
        how = f"exit code {code}"
    tail = ""
    try:
        with open(worker.log_path, "rb") as log:  # only what the dying step wrote
            log.seek(worker.log_offset)
            text = log.read().decode("utf-8", "replace")
        text = re.sub(r"\x1b\[[0-9;]*m", "", text)  # ORT colours its log lines
        lines = [re.sub(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ ", "", ln.strip())
                 for ln in text.splitlines() if ln.strip()]
        tail = lines[-1] if lines else ""
    except OSError:
        pass
    return f"worker died ({how})" + (f": {tail[:160]}" if tail else "")


class Scheduler:
    """Runs (test, modes) tasks on ``jobs`` worker processes. A test whose worker dies is re-run
    alone in a fresh process to pinpoint the crash; a step running past ``timeout`` seconds is
    killed and marked "timeout"."""

    def __init__(self, data_dir: Path, jobs: int, timeout: float, needs_ep: bool, progress=None):
        self.data_dir = str(data_dir)
        self.needs_ep = needs_ep
        self.jobs = max(1, jobs)
        self.timeout = timeout
        self.progress = progress
        self.ctx = multiprocessing.get_context("spawn")
        self.logdir = tempfile.mkdtemp(prefix="conformance-")
        self.results: dict[str, dict[str, dict]] = collections.defaultdict(dict)
        self.batch_deaths: dict[tuple[str, str], str] = {}
        self.spawned = 0

    def _spawn(self, isolated: bool) -> _Worker:
        parent, child = self.ctx.Pipe()
        self.spawned += 1
        log_path = os.path.join(self.logdir, f"worker-{self.spawned}.log")
        proc = self.ctx.Process(target=_worker_main, args=(child, self.data_dir, log_path, self.needs_ep),
                                 daemon=True)
        proc.start()
        child.close()
        return _Worker(proc, parent, log_path, isolated)

    def _assign(self, worker: _Worker, task: tuple) -> None:
        worker.task, worker.step, worker.done_modes = task, None, []
        worker.step_start = time.monotonic()
        worker.conn.send(task)

    def _retire(self, worker: _Worker) -> None:
        try:
            worker.conn.send(None)
        except OSError:
            pass
        worker.proc.join(5)
        if worker.proc.is_alive():
            worker.proc.kill()
            worker.proc.join()

    def _record(self, name: str, mode: str, record: dict) -> None:
        batch_death = self.batch_deaths.pop((name, mode), None)
        if batch_death and record["outcome"] != "crash":
            record = dict(record, outcome="crash",
                          reason=f"{batch_death} (after other tests; alone: {record['outcome']})")
        self.results[name][mode] = record

    def _remaining(self, worker: _Worker) -> list[str]:
        name, modes = worker.task
        return [m for m in modes if m not in worker.done_modes]

    def _on_death(self, worker: _Worker, isolated_queue) -> None:
        if not worker.ready or worker.task is None:
            raise RuntimeError(f"conformance worker died {'while idle' if worker.ready else 'during setup'}"
                               f": {_death_reason(worker)}")
        name, _ = worker.task
        remaining = self._remaining(worker)
        reason = _death_reason(worker)
        if worker.step == "load" or worker.step is None:
            for mode in remaining:
                self._record(name, mode, {"outcome": "crash", "reason": reason + " (loading)",
                                          "seconds": 0.0})
            return
        if not worker.isolated:
            self.batch_deaths[(name, worker.step)] = reason
            isolated_queue.append((name, tuple(remaining)))
            return
        self.batch_deaths.pop((name, worker.step), None)
        self._record(name, worker.step, {"outcome": "crash", "reason": reason, "seconds":
                                         time.monotonic() - worker.step_start})
        rest = tuple(m for m in remaining if m != worker.step)
        if rest:
            isolated_queue.append((name, rest))

    def _on_timeout(self, worker: _Worker, queue) -> None:
        worker.proc.kill()
        worker.proc.join()
        name, _ = worker.task
        remaining = self._remaining(worker)
        if not worker.ready:
            raise RuntimeError(f"conformance worker setup took over {self._limit(worker):g} s")
        if worker.step in (None, "load"):
            for mode in remaining:
                self._record(name, mode, {"outcome": "timeout", "reason": "loading the test data "
                                          f"took over {self.timeout:g} s", "seconds": self.timeout})
            return
        self._record(name, worker.step, {"outcome": "timeout", "reason": f"over {self.timeout:g} s",
                                         "seconds": self.timeout})
        rest = tuple(m for m in remaining if m != worker.step)
        if rest:
            queue.appendleft((name, rest))

    def _limit(self, worker: _Worker) -> float:
        return self.timeout if worker.ready else max(self.timeout, SETUP_TIMEOUT)

    def _handle_message(self, worker: _Worker, message: tuple) -> bool:
        """Applies one worker message; returns True when the worker finished its task."""
        kind = message[0]
        if kind == "fatal":
            raise RuntimeError(message[1])
        if kind == "ready":
            worker.ready, worker.step_start = True, time.monotonic()  # setup time is not the test's
            return False
        if kind == "begin":
            worker.step, worker.step_start = message[2], time.monotonic()
            try:
                worker.log_offset = os.path.getsize(worker.log_path)
            except OSError:
                worker.log_offset = 0
            return False
        if kind == "result":
            _, name, mode, record = message
            worker.done_modes.append(mode)
            self._record(name, mode, record)
            return False
        if kind == "done":
            worker.task, worker.step = None, None
            if self.progress:
                self.progress(message[1])
            return True
        raise RuntimeError(f"unexpected worker message {message!r}")

    def run(self, tests: list[str], modes: tuple[str, ...]) -> dict[str, dict[str, dict]]:
        queue = collections.deque((name, modes) for name in tests)
        isolated_queue: collections.deque = collections.deque()
        slots: list[_Worker | None] = [None] * self.jobs
        try:
            while True:
                for i in range(self.jobs):  # give every free slot a task
                    worker = slots[i]
                    if worker is not None and worker.task is None and (isolated_queue or worker.isolated
                                                                        or not queue):
                        self._retire(worker)
                        slots[i] = worker = None
                    if worker is None and (isolated_queue or queue):
                        isolated = bool(isolated_queue)
                        slots[i] = worker = self._spawn(isolated)
                        self._assign(worker, (isolated_queue or queue).popleft())
                    elif worker is not None and worker.task is None and queue:
                        self._assign(worker, queue.popleft())
                busy = [w for w in slots if w is not None and w.task is not None]
                if not busy:
                    break
                now = time.monotonic()
                wait_s = max(0.0, min(w.step_start + self._limit(w) - now for w in busy))
                ready = multiprocessing.connection.wait(
                    [w.conn for w in busy] + [w.proc.sentinel for w in busy], timeout=wait_s + 0.05)
                for i, worker in enumerate(slots):
                    if worker is None or worker.task is None:
                        continue
                    died = False
                    try:
                        while worker.task is not None and worker.conn.poll():
                            self._handle_message(worker, worker.conn.recv())
                    except (EOFError, OSError):
                        died = True
                    if worker.task is None:
                        continue
                    if died or worker.proc.sentinel in ready and not worker.proc.is_alive():
                        worker.proc.join()
                        self._on_death(worker, isolated_queue)
                        slots[i] = None
                    elif time.monotonic() - worker.step_start > self._limit(worker):
                        self._on_timeout(worker, queue)
                        slots[i] = None
        finally:
            for worker in slots:
                if worker is not None:
                    if worker.proc.is_alive() and worker.task is None:
                        self._retire(worker)
                    elif worker.proc.is_alive():
                        worker.proc.kill()
                        worker.proc.join()
            for log in Path(self.logdir).glob("*.log"):
                log.unlink()
            os.rmdir(self.logdir)
        return dict(self.results)


# ---------------------------------------------------------------------------------------------
# Reports

def discover_tests(data_dir: Path, patterns: list[str] | None = None) -> list[str]:
    names = sorted(p.name for p in data_dir.iterdir() if (p / "model.onnx").is_file())
    if patterns:
        names = [n for n in names if any(re.search(p, n) for p in patterns)]
    return names


def data_version() -> str:
    try:
        with gzip.open(DATA_CHANGELOG, "rt") as f:
            match = re.match(r"\S+ \(([^)]+)\)", f.readline())
            return match.group(1) if match else "unknown"
    except OSError:
        return "unknown"


def read_expected(path: Path = EXPECTED_STRICT) -> set[str]:
    if not path.exists():
        return set()
    return {ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")}


def totals(results: dict, mode: str) -> collections.Counter:
    return collections.Counter(r[mode]["outcome"] for r in results.values() if mode in r)


def declined_ops(ops: list[str], result: dict) -> list[str]:
    """The ops a strict decline is blamed on: those the fallback session left on the CPU EP, or all
    of the test's ops when that is unknown or names none of them (e.g. a decomposed function)."""
    left = (result.get("fallback") or {}).get("cpu_ops")
    blamed = [op for op in ops if left and op in left]
    return blamed or list(ops)


def check_problems(results: dict, expected: set[str]) -> dict[str, list[str]]:
    """What makes --check fail: expected strict passes lost, crashes, fallback regressions."""
    problems = {"lost strict pass": [], "crash": [], "fallback regression": []}
    for name, res in sorted(results.items()):
        strict, fallback, cpu = res.get("strict"), res.get("fallback"), res.get("cpu")
        if name in expected and strict and strict["outcome"] != "pass":
            problems["lost strict pass"].append(f"{name}: {strict['outcome']}: {strict['reason']}")
        for mode in ("strict", "fallback"):
            if res.get(mode, {}).get("outcome") == "crash":
                problems["crash"].append(f"{name} [{mode}]: {res[mode]['reason']}")
        if fallback and cpu and cpu["outcome"] == "pass" and fallback["outcome"] in ("fail", "error",
                                                                                     "timeout"):
            problems["fallback regression"].append(
                f"{name}: {fallback['outcome']}: {fallback['reason']}")
    return problems


def _outcome(result: dict, mode: str) -> str | None:
    return (result.get(mode) or {}).get("outcome")


def strict_column(result: dict, op: str, ops: list[str]) -> str:
    """Which per-op column a test's strict result falls in, seen from one of its ops."""
    strict = _outcome(result, "strict")
    if strict == "pass":
        return "pass"
    if _outcome(result, "cpu") != "pass":
        return "cpu fails"
    if strict == "declined":
        return "declined" if op in declined_ops(ops, result) else "other op"
    return "fail"


def _op_list(ops: list[str], limit: int = 4) -> str:
    return ", ".join(ops[:limit]) + (f", +{len(ops) - limit} ops" if len(ops) > limit else "")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_doc(results: dict, ops_of: dict[str, list[str]], ort_version: str) -> str:
    tests = sorted(results)
    out = ["# ONNX node-test conformance", "",
           "Generated by `tests/conformance/run.py --write`; do not edit by hand. "
           f"ONNX node tests from Debian's libonnx-testdata {data_version()} ({len(tests)} tests), "
           f"ONNX Runtime {ort_version}.", "",
           "Each test runs in three modes: **strict**, the MLX EP with CPU fallback disabled "
           "(`session.disable_cpu_ep_fallback=1`; *declined* means session creation was refused "
           "because the EP did not claim every node; every data set is run "
           f"{STRICT_RUNS} times, so the eager graph, the compile trace and the compiled replay "
           "must all pass); **fallback**, the MLX EP with nodes it "
           "declines left to ORT's CPU EP; and ORT's **CPU EP** alone, as the baseline. Outputs "
           f"are compared with the test's expected outputs: floats with rtol={RTOL:g}, "
           f"atol={ATOL:g} (ONNX's backend-test defaults; NaN equals NaN), everything else exactly"
           + (f"; {len(TOLERANCE_OVERRIDES)} tests have their own tolerance (see `run.py`)"
              if TOLERANCE_OVERRIDES else "")
           + ". *unsupported-io* marks test data that ORT's Python binding cannot feed or fetch.",
           "", "## Totals", "",
           "| mode | " + " | ".join(OUTCOMES) + " |",
           "|---|" + "---:|" * len(OUTCOMES)]
    for mode in ("strict", "fallback", "cpu"):
        count = totals(results, mode)
        cells = [str(count.get(o, 0)) if (o != "declined" or mode == "strict") else "" for o in OUTCOMES]
        out.append(f"| {MODE_TITLES[mode]} | " + " | ".join(cells) + " |")

    out += ["", "## Per op", "",
            "A test counts under every op of its model's top-level graph, in one strict-mode column: "
            "*declined* when the decline is blamed on this op (the fallback session left it on the "
            "CPU EP), *other op* when it is blamed on another op of the test, *fail* for a wrong "
            "output, error, crash or timeout on a test ORT's CPU EP passes, and *CPU EP fails too* "
            "for any other non-pass on a test ORT's CPU EP does not pass either.", "",
            "| op | tests | strict pass | declined | other op | fail | CPU EP fails too | "
            "fallback pass | CPU EP pass | strict failures |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    by_op: dict[str, list[str]] = collections.defaultdict(list)
    for name in tests:
        for op in ops_of.get(name, []):
            by_op[op].append(name)
    for op in sorted(by_op, key=lambda o: (":" in o, o.lower())):
        row = collections.Counter()
        failures = []
        for name in by_op[op]:
            res = results[name]
            column = strict_column(res, op, ops_of.get(name, []))
            row[column] += 1
            row["fallback"] += _outcome(res, "fallback") == "pass"
            row["cpu"] += _outcome(res, "cpu") == "pass"
            if column == "fail":
                failures.append(f"`{name}` ({_outcome(res, 'strict')})")
        notes = ", ".join(failures[:3]) + (f", +{len(failures) - 3} more" if len(failures) > 3 else "")
        out.append(f"| {_cell(op)} | {len(by_op[op])} | {row['pass']} | {row['declined']} | "
                   f"{row['other op']} | {row['fail']} | {row['cpu fails']} | {row['fallback']} | "
                   f"{row['cpu']} | {notes} |")

    def listing(title: str, intro: str, mode: str, names: list[str]) -> None:
        out.extend(["", f"## {title}", "", intro, ""])
        out.extend([f"- `{n}` ({_op_list(ops_of.get(n, []))}): {results[n][mode]['outcome']} — "
                    f"{_cell(results[n][mode]['reason'])}" for n in names] or ["None."])

    cpu_passes = [n for n in tests if _outcome(results[n], "cpu") == "pass"]
    by_design = [n for n in cpu_passes if n in DECLINE_NOTES and _outcome(results[n], "strict") == "declined"]
    out.extend(["", "## Declined by design", "",
                "Tests ORT's CPU EP passes that strict mode declines for a reason of the plugin-EP "
                "interface rather than a missing lowering (sequences built and read inside a cluster "
                "are claimed: ONNX's simple tests test_sequence_model1..8 pass strict).", ""])
    out.extend([f"- `{n}`: {DECLINE_NOTES[n]}" for n in by_design] or ["None."])
    listing("Strict failures", "Tests ORT's CPU EP passes that the MLX EP claimed but got wrong, "
            "errored on, crashed on or timed out on.", "strict",
            [n for n in cpu_passes if _outcome(results[n], "strict") in NOT_PASSING])
    listing("Fallback regressions", "Tests ORT's CPU EP passes but the MLX EP with fallback does not.",
            "fallback", [n for n in cpu_passes if _outcome(results[n], "fallback") in NOT_PASSING])
    listing("CPU EP baseline", "Tests ORT's CPU EP itself does not pass; they are not counted against "
            "the MLX EP (strict and fallback results for them are in the per-op table).", "cpu",
            [n for n in tests if _outcome(results[n], "cpu") != "pass"])
    if GPU_SUMMARY.exists():
        out += render_gpu_column(results, json.loads(GPU_SUMMARY.read_text()))
    return "\n".join(out) + "\n"


def device_summary(results: dict, modes: tuple[str, ...]) -> dict:
    """What a run on another device (the GPU) brings back: its versions, its totals and every
    test's strict and fallback outcome that is not a pass, with the reason (compact: the CPU
    run's own results are compared with it at --write)."""
    import onnxruntime as ort
    info = {"date": time.strftime("%Y-%m-%d"), "onnxruntime": ort.__version__}
    try:
        import mlx.core as mx
        info["mlx"] = mx.__version__
        info["device"] = str(mx.default_device())
    except ImportError:
        pass
    info["gpu"] = os.environ.get("GPU_NAME", "")
    info["commit"] = os.environ.get("EP_COMMIT", "")
    return {"info": info,
            "totals": {m: dict(totals(results, m)) for m in modes},
            "not_passing": {n: {m: [r[m]["outcome"], r[m].get("reason", "")[:300]]
                                for m in modes if m != "cpu" and m in r and r[m]["outcome"] != "pass"}
                            for n, r in sorted(results.items())
                            if any(m in r and r[m]["outcome"] != "pass" for m in modes if m != "cpu")}}


def merge_summaries(parts: list[dict]) -> dict:
    """One summary from the shards of a run (their totals added, their test lists joined)."""
    merged = {"info": parts[0]["info"], "totals": {}, "not_passing": {}}
    for part in parts:
        for mode, count in part["totals"].items():
            into = merged["totals"].setdefault(mode, {})
            for outcome, n in count.items():
                into[outcome] = into.get(outcome, 0) + n
        merged["not_passing"].update(part["not_passing"])
    return merged


def render_gpu_column(results: dict, summary: dict) -> list[str]:
    """docs/CONFORMANCE.md's GPU section: the GPU run's totals beside this run's, and every test
    that passes strict here but not there, with its outcome and reason on the GPU."""
    info, totals_gpu, bad = summary["info"], summary["totals"], summary["not_passing"]
    out = ["", "## On the GPU", "",
           f"The last run on a GPU (`scripts/gpu_runbook.sh`'s conformance step or `scripts/gpu_check.sh` "
           f"with `GPU_CONFORMANCE=I/N`, which run this runner there with `--shard` and `--device-summary`; "
           f"the shards merged with `--merge-summaries` are kept in "
           f"`tests/conformance/gpu_summary.json`): {info.get('date', '?')}, {info.get('gpu') or 'GPU'}, "
           f"MLX {info.get('mlx', '?')} ({info.get('device', '?')}), onnxruntime {info.get('onnxruntime', '?')}"
           + (f", EP at {info['commit']}" if info.get("commit") else "") + ".", "",
           "| mode | this run (CPU) pass | GPU pass | GPU declined | GPU fail | GPU error | GPU crash | GPU timeout |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for mode in ("strict", "fallback"):
        here, there = totals(results, mode), totals_gpu.get(mode, {})
        out.append(f"| {mode} | {here.get('pass', 0)} | {there.get('pass', 0)} | {there.get('declined', 0)} | "
                   f"{there.get('fail', 0)} | {there.get('error', 0)} | {there.get('crash', 0)} | "
                   f"{there.get('timeout', 0)} |")
    lost = [n for n in sorted(results) if _outcome(results[n], "strict") == "pass" and n in bad and "strict" in bad[n]]
    out += ["", "Tests that pass strict on the CPU but not on the GPU (outcome and reason there):", ""]
    out += [f"- `{n}`: {bad[n]['strict'][0]} — {_cell(bad[n]['strict'][1])}" for n in lost] or ["None."]
    lost = [n for n in sorted(results) if _outcome(results[n], "fallback") == "pass" and n in bad and "fallback" in bad[n]]
    out += ["", "Tests that pass with CPU fallback here but not on the GPU:", ""]
    out += [f"- `{n}`: {bad[n]['fallback'][0]} — {_cell(bad[n]['fallback'][1])}" for n in lost] or ["None."]
    return out


def write_expected(results: dict, path: Path = EXPECTED_STRICT) -> list[str]:
    passing = sorted(n for n, r in results.items() if r.get("strict", {}).get("outcome") == "pass")
    path.write_text("# Tests passing in strict mode; generated by tests/conformance/run.py --write.\n"
                    + "".join(f"{n}\n" for n in passing))
    return passing


def print_summary(results: dict, modes: tuple[str, ...], seconds: dict[str, float], wall: float):
    print(f"{len(results)} tests, wall time {wall:.1f} s")
    for mode in modes:
        count = totals(results, mode)
        parts = ", ".join(f"{o} {count[o]}" for o in OUTCOMES if count.get(o))
        print(f"  {mode:8s} {parts}   ({seconds.get(mode, 0.0):.1f} s summed over tests)")


# ---------------------------------------------------------------------------------------------
# Command line

def _ep_library_available() -> bool:
    import onnxruntime_ep_mlx as mlx_ep
    try:
        return Path(mlx_ep.library_path()).exists()
    except FileNotFoundError:
        return False


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--write", action="store_true",
                        help="regenerate docs/CONFORMANCE.md and tests/conformance/expected_strict.txt")
    action.add_argument("--check", action="store_true",
                        help="fail on lost strict passes, crashes and fallback regressions")
    parser.add_argument("-k", dest="patterns", action="append", metavar="PATTERN",
                        help="only tests whose name matches this regular expression (repeatable)")
    parser.add_argument("--jobs", "-j", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--modes", default=None,
                        help="comma-separated subset of cpu,strict,fallback (default: all; only cpu "
                             "when the EP library is not built)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per test and mode")
    parser.add_argument("--data", type=Path, default=Path(os.environ.get("ONNX_NODE_TEST_DIR", DATA_DIR)),
                        help="directory of ONNX node tests")
    parser.add_argument("--json", type=Path, help="also write every result to this JSON file")
    parser.add_argument("--shard", default=None, metavar="I/N",
                        help="run only the tests whose index in name order is I modulo N (a GPU run "
                             "split over device calls; merge the summaries with --merge-summaries)")
    parser.add_argument("--merge-summaries", type=Path, nargs="+", metavar="SUMMARY",
                        help="merge the --device-summary files of a sharded run into "
                             "tests/conformance/gpu_summary.json, then exit")
    parser.add_argument("--device-summary", type=Path,
                        help="write the compact summary a GPU run brings back (versions, totals, every "
                             "non-pass with its reason); copied to tests/conformance/gpu_summary.json, "
                             "--write renders it as docs/CONFORMANCE.md's GPU section")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="print every result that is not a pass or a decline")
    args = parser.parse_args(argv)
    if args.merge_summaries:
        merged = merge_summaries([json.loads(p.read_text()) for p in args.merge_summaries])
        GPU_SUMMARY.write_text(json.dumps(merged, indent=1, sort_keys=True) + "\n")
        print(f"wrote {GPU_SUMMARY.relative_to(ROOT)} from {len(args.merge_summaries)} summaries")
        return 0

    have_ep = _ep_library_available()
    if args.modes:
        modes = tuple(m for m in MODES if m in args.modes.split(","))
        unknown = set(args.modes.split(",")) - set(MODES)
        if unknown or not modes:
            parser.error(f"unknown modes {sorted(unknown)}; choose from {','.join(MODES)}")
    else:
        modes = MODES if have_ep else ("cpu",)
        if not have_ep:
            print("libonnxruntime_ep_mlx.so not found: running ORT's CPU EP only", file=sys.stderr)
    if (args.write or args.check) and modes != MODES:
        print("--write and --check need all three modes (and the EP library built)", file=sys.stderr)
        return 2
    if args.write and args.patterns:
        print("--write runs every test; drop -k", file=sys.stderr)
        return 2
    if set(modes) - {"cpu"} and not have_ep:
        print("libonnxruntime_ep_mlx.so not found (build it or set ORT_EP_MLX_LIBRARY)", file=sys.stderr)
        return 2
    if not args.data.is_dir():
        print(f"no ONNX node tests at {args.data} (run `make` to fetch them)", file=sys.stderr)
        return 2

    tests = discover_tests(args.data, args.patterns)
    if args.shard:
        index, count = (int(v) for v in args.shard.split("/"))
        tests = [t for i, t in enumerate(sorted(tests)) if i % count == index]
    if not tests:
        print("no tests match", file=sys.stderr)
        return 2
    done = [0]
    step = max(1, len(tests) // 10)

    def progress(_name: str) -> None:
        done[0] += 1
        if done[0] % step == 0 and sys.stderr.isatty():
            print(f"  {done[0]}/{len(tests)}", file=sys.stderr)

    start = time.monotonic()
    try:
        scheduler = Scheduler(args.data, args.jobs, args.timeout, bool(set(modes) - {"cpu"}), progress)
        results = scheduler.run(tests, modes)
    except RuntimeError as exc:
        print(f"conformance run aborted: {exc}", file=sys.stderr)
        return 2
    wall = time.monotonic() - start
    seconds = {m: sum(r[m].get("seconds", 0.0) for r in results.values() if m in r) for m in modes}
    print_summary(results, modes, seconds, wall)

    if args.json:
        args.json.write_text(json.dumps(results, indent=1, sort_keys=True))
    if args.device_summary:
        args.device_summary.write_text(json.dumps(device_summary(results, modes), indent=1, sort_keys=True))
    if args.verbose:
        for name in sorted(results):
            for mode in modes:
                rec = results[name].get(mode)
                if rec and rec["outcome"] not in ("pass", "declined"):
                    print(f"{name} [{mode}] {rec['outcome']}: {rec['reason']}")

    if args.write:
        import onnxruntime as ort
        ops_of = {name: test_ops(args.data / name / "model.onnx") for name in tests}
        DOC.parent.mkdir(parents=True, exist_ok=True)
        DOC.write_text(render_doc(results, ops_of, ort.__version__))
        passing = write_expected(results)
        print(f"wrote {DOC.relative_to(ROOT)} and {EXPECTED_STRICT.relative_to(ROOT)} "
              f"({len(passing)} strict passes)")
        return 0
    if args.check:
        expected = read_expected() & set(tests)
        problems = check_problems(results, expected)
        newly = sorted(n for n, r in results.items()
                       if r["strict"]["outcome"] == "pass" and n not in expected)
        if newly:
            print(f"{len(newly)} tests now pass strict but are not in expected_strict.txt "
                  f"(run `make conformance` to regenerate): {' '.join(newly[:20])}"
                  + (" ..." if len(newly) > 20 else ""))
        failed = False
        for kind, items in problems.items():
            if items:
                failed = True
                print(f"{kind}: {len(items)}")
                for item in items:
                    print(f"  {item}")
        print("conformance check " + ("FAILED" if failed else "passed"))
        return 1 if failed else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
