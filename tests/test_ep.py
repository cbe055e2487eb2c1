"""EP-level behaviour, beyond single ops: how a graph is split between the MLX EP and ORT's CPU EP
(and what the claim report says about it), errors at Run that must not kill the process, dynamic
shapes through one session, graph outputs that are inputs or initializers, EP options, the
library's exported symbols and idempotent registration."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnxruntime_ep_mlx as mlx_ep
from parity import assert_parity, make_model, run_cpu

F = TensorProto.FLOAT
# An op no row of the registry claims (com.microsoft Inverse, a batched matrix inverse), which
# ORT's CPU EP runs.
UNCLAIMED_OP = "Inverse"


def split_model() -> bytes:
    """Add -> Inverse (unclaimed) -> Mul: the MLX EP should form two clusters around Inverse."""
    nodes = [helper.make_node("Add", ["x", "x"], ["s"], name="add"),
             helper.make_node(UNCLAIMED_OP, ["s"], ["d"], name="inverse", domain="com.microsoft"),
             helper.make_node("Mul", ["d", "c"], ["y"], name="mul")]
    return make_model(nodes, [("x", F, [2, 3, 3])], [("y", F, [2, 3, 3])],
                      initializers={"c": np.array([1.5, -2.0, 0.5], np.float32)},
                      domains=[("com.microsoft", 1)])


def split_feeds() -> dict:
    rng = np.random.default_rng(0)
    return {"x": rng.standard_normal((2, 3, 3)).astype(np.float32)}


def report_of(make_session, tmp_path, monkeypatch, via: str) -> str:
    """Creates a session with the claim report sent to a file, through the "report" EP option or
    the ORT_EP_MLX_REPORT environment variable; returns the report's text."""
    path = tmp_path / f"report_{via}.txt"
    if via == "option":
        make_session({"report": str(path)})
    else:
        monkeypatch.setenv("ORT_EP_MLX_REPORT", str(path))
        make_session(None)
    assert path.exists(), f"no claim report written ({via})"
    return path.read_text()


def cluster_count(report: str) -> int:
    """Clusters formed by the last GetCapability call the report records ("clusters: N")."""
    counts = re.findall(r"clusters:\s*(\d+)", report)
    assert counts, report
    return int(counts[-1])


# ---- (a) claiming and splitting -------------------------------------------------------------------

def test_split_runs_with_fallback():
    model, feeds = split_model(), split_feeds()
    sess = mlx_ep.session(model, strict=False)
    assert sess.get_providers()[0] == mlx_ep.ep_name()
    got = sess.run(None, feeds)[0]
    want = run_cpu(model, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("via", ["option", "env"])
def test_split_report(tmp_path, monkeypatch, via):
    model = split_model()
    report = report_of(lambda opts: mlx_ep.session(model, options=opts, strict=False), tmp_path,
                       monkeypatch, via)
    # The declined op is listed with a reason: "declined com.microsoft::Inverse x1: <why>".
    assert re.search(rf"declined\s+com.microsoft::{UNCLAIMED_OP}\b.*:\s*\S+", report), report
    assert re.search(r"claimed\s+Add\b", report) and re.search(r"claimed\s+Mul\b", report), report
    assert cluster_count(report) == 2, report


def test_split_strict_refuses_fallback():
    with pytest.raises(Exception, match=r"(?i)fallback"):
        mlx_ep.session(split_model(), strict=True)


# ---- (b) bad input at Run --------------------------------------------------------------------------

def add_model() -> bytes:
    nodes = [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    return make_model(nodes, [("a", F, ["n", 3]), ("b", F, ["m", 3])], [("y", F, None)])


def test_bad_input_then_good_run():
    model = add_model()
    sess = mlx_ep.session(model, strict=True)
    good = {"a": np.ones((2, 3), np.float32), "b": -np.arange(6, dtype=np.float32).reshape(2, 3)}
    bad_feeds = [
        ({**good, "a": good["a"].astype(np.int32)}, None, "Unexpected input data type"),  # ORT checks
        ({**good, "a": np.ones((2, 3, 1), np.float32)}, None, "Invalid rank"),          # ORT checks
        ({**good, "b": np.ones((4, 3), np.float32)}, "Add", "broadcast"),               # the EP checks
    ]
    for feeds, ep_op, message in bad_feeds:
        with pytest.raises(Exception, match=message) as err:
            sess.run(None, feeds)
        if ep_op:  # the EP's message names itself and the op that failed
            assert mlx_ep.ep_name() in str(err.value) and ep_op in str(err.value), str(err.value)
        # The process and the session survive: a correct run still works.
        np.testing.assert_allclose(sess.run(None, good)[0], np.maximum(good["a"] + good["b"], 0))


def test_bad_rank_inside_ep_then_good_run():
    # No declared shapes, so ORT cannot check ranks: the EP meets the bad input itself.
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", F, None)], [("y", F, None)],
                       initializers={"w": w})
    sess = mlx_ep.session(model, strict=True)
    for bad in (np.ones((2, 5), np.float32), np.array(1.0, np.float32)):
        with pytest.raises(Exception, match="MatMul"):
            sess.run(None, {"x": bad})
        x = np.ones((2, 3), np.float32)
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], x @ w)


# ---- (c) dynamic shapes ----------------------------------------------------------------------------

def test_dynamic_shapes_one_session():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 6)).astype(np.float32)
    bias = rng.standard_normal(6).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Add", ["m", "bias"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Softmax", ["r"], ["y"], axis=-1),
             helper.make_node("ReduceSum", ["y", "axes"], ["z"], keepdims=0)]
    model = make_model(nodes, [("x", F, ["b", "s", 8])], [("y", F, ["b", "s", 6]), ("z", F, None)],
                       initializers={"w": w, "bias": bias, "axes": np.array([1], np.int64)})
    cpu = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    sess = mlx_ep.session(model, strict=True)
    for shape in [(1, 1, 8), (2, 5, 8), (3, 17, 8), (1, 5, 8), (2, 5, 8)]:
        feeds = {"x": rng.standard_normal(shape).astype(np.float32)}
        got, want = sess.run(None, feeds), cpu.run(None, feeds)
        for g, e in zip(got, want):
            assert g.shape == e.shape, f"{shape}: {g.shape} != {e.shape}"
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5, err_msg=str(shape))


def test_input_without_declared_shape():
    # A graph input whose type has no shape at all: any rank may arrive at Run.
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, None)], [("y", F, None)])
    sess = mlx_ep.session(model, strict=True)
    for shape in [(2, 3), (), (4,), (1, 2, 3, 2)]:
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.maximum(x, 0), err_msg=str(shape))


def test_empty_dynamic_dim():
    nodes = [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    model = make_model(nodes, [("a", F, ["n", 3]), ("b", F, [3])], [("y", F, ["n", 3])])
    sess = mlx_ep.session(model, strict=True)
    for n in (0, 2):
        feeds = {"a": np.ones((n, 3), np.float32), "b": np.arange(3, dtype=np.float32)}
        got = sess.run(None, feeds)[0]
        assert got.shape == (n, 3)
        np.testing.assert_array_equal(got, run_cpu(model, feeds)[0])


# ---- (d) outputs that are graph inputs, initializers or also consumed -------------------------------

def test_output_is_graph_input():
    nodes = [helper.make_node("Add", ["a", "b"], ["y"])]
    model = make_model(nodes, [("a", F, [2, 3]), ("b", F, [2, 3])], [("y", F, [2, 3]), ("a", F, [2, 3])])
    feeds = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones((2, 3), np.float32)}
    assert_parity(model, feeds)


def test_output_is_initializer():
    c = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    nodes = [helper.make_node("Mul", ["x", "c"], ["y"])]
    model = make_model(nodes, [("x", F, [2, 2])], [("y", F, [2, 2]), ("c", F, [2, 2])],
                       initializers={"c": c})
    got = assert_parity(model, {"x": np.full((2, 2), 2.0, np.float32)})
    np.testing.assert_array_equal(got[1], c)


def test_intermediate_is_also_output():
    nodes = [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    model = make_model(nodes, [("a", F, [2, 3]), ("b", F, [2, 3])], [("y", F, [2, 3]), ("s", F, [2, 3])])
    rng = np.random.default_rng(0)
    assert_parity(model, {k: rng.standard_normal((2, 3)).astype(np.float32) for k in "ab"})


# ---- (e) EP options --------------------------------------------------------------------------------

def test_option_device_cpu():
    model = add_model()
    feeds = {"a": np.ones((2, 3), np.float32), "b": np.full((1, 3), -0.5, np.float32)}
    assert_parity(model, feeds, options={"device": "cpu"})


def error_chain(err: BaseException) -> str:
    """The messages of an exception and of the exceptions it was raised from."""
    parts = []
    while err is not None:
        parts.append(str(err))
        err = err.__cause__ or err.__context__
    return "\n".join(parts)


@pytest.mark.parametrize("strict", [True, False])
def test_option_unknown_device(strict):
    # Without strict mode too: the session must fail, not quietly retry on the CPU EP alone.
    with pytest.raises(Exception, match=r"Error creating execution provider") as err:
        mlx_ep.session(add_model(), options={"device": "abacus"}, strict=strict)
    assert re.search(r"device='?abacus", error_chain(err.value)), error_chain(err.value)


def readme_option_keys() -> list[str]:
    """The option names of README's options table (first column, in backquotes)."""
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = readme.split("## Options and environment", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `(\w+)` \|", section, flags=re.M)


@pytest.mark.parametrize("strict", [True, False])
def test_option_unknown_key(strict):
    with pytest.raises(Exception, match=r"Error creating execution provider") as err:
        mlx_ep.session(add_model(), options={"devcie": "gpu"}, strict=strict)
    text = error_chain(err.value)
    found = re.search(r"unknown option 'devcie' \(valid options: ([^)]*)\)", text)
    assert found, text
    # The error lists the option table, and README documents exactly those options.
    assert found.group(1).split(", ") == readme_option_keys()


def test_option_report_unopenable(tmp_path):
    with pytest.raises(Exception, match=r"report='.*no_such_dir/x\.txt': cannot open"):
        mlx_ep.session(add_model(), options={"report": str(tmp_path / "no_such_dir" / "x.txt")})


@pytest.mark.parametrize("key,value", [
    ("compile", "on"), ("compile", "off"), ("compile", "1"), ("compile", "0"), ("compile", "auto"),
    ("device", "auto"), ("cache_size", "1"), ("cache_size", "4096"), ("decode_bucket", "0"),
    ("decode_bucket", "auto"), ("memory_limit", "auto"), ("memory_limit", str(64 << 30)),
    ("report", "1"), ("report", "stderr"), ("report", "stdout")])
def test_option_accepted_values(key, value):
    feeds = {"a": np.ones((2, 3), np.float32), "b": np.full((1, 3), -0.5, np.float32)}
    assert_parity(add_model(), feeds, options={key: value})


@pytest.mark.parametrize("value", ["0", "-1", "1.5", "x", "", " 12", "12 "])
def test_option_memory_limit_invalid(value):
    with pytest.raises(Exception, match=r"memory_limit='.*' is invalid \(bytes, at least 1048576, or auto\)"):
        mlx_ep.session(add_model(), options={"memory_limit": value})


# ---- (f) exported symbols -----------------------------------------------------------------------------

@pytest.mark.skipif(shutil.which("nm") is None, reason="nm not installed")
def test_exported_symbols():
    out = subprocess.run(["nm", "-D", "--defined-only", mlx_ep.library_path()], check=True,
                         capture_output=True, text=True).stdout
    names = {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}
    # the EP's two entry points, and MLX's three CBLAS calls (src/mlx/cpu_blas.c), nothing else
    assert names == {"CreateEpFactories", "ReleaseEpFactory", "cblas_sgemm", "cblas_dgemm", "cblas_cgemm"}, \
        sorted(names)


# ---- (g) registration ------------------------------------------------------------------------------

def test_register_twice_is_idempotent():
    path = mlx_ep.register_execution_provider_library()
    n = len(mlx_ep.ep_devices())
    assert path == mlx_ep.register_execution_provider_library() == mlx_ep.library_path()
    assert path == mlx_ep.register_execution_provider_library("another_name")
    assert n >= 1 and len(mlx_ep.ep_devices()) == n
    assert sum(d.ep_name == mlx_ep.EP_NAME for d in ort.get_ep_devices()) == n
    feeds = {"a": np.ones((2, 3), np.float32), "b": np.ones((2, 3), np.float32)}
    assert_parity(add_model(), feeds)


# ---- (h) the reference package's Python API ---------------------------------------------------------

def test_reference_api():
    assert mlx_ep.EP_NAME == mlx_ep.ep_name() == "MLXExecutionProvider"
    assert mlx_ep.vendor() == "onnxruntime-ep-mlx"
    version_file = Path(__file__).resolve().parent.parent / "VERSION"
    # version() is what the loaded library reports; both come from the VERSION file.
    assert mlx_ep.version() == mlx_ep.__version__ == version_file.read_text().strip()


def test_providers_list_selects_plugin_ep():
    """The reference package's README snippet: registration, then providers=[...] (ORT >= 1.31)."""
    mlx_ep.register_execution_provider_library()
    so = ort.SessionOptions()
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    feeds = {"a": np.ones((2, 3), np.float32), "b": np.full((2, 3), -2.0, np.float32)}
    sess = ort.InferenceSession(add_model(), sess_options=so, providers=[mlx_ep.EP_NAME],
                                provider_options=[{"compile": "off"}])
    assert sess.get_providers()[0] == mlx_ep.EP_NAME
    np.testing.assert_array_equal(sess.run(None, feeds)[0], run_cpu(add_model(), feeds)[0])
    sess = ort.InferenceSession(add_model(), providers=[mlx_ep.EP_NAME, "CPUExecutionProvider"])
    assert sess.get_providers() == [mlx_ep.EP_NAME, "CPUExecutionProvider"]


def test_append_to_session_options():
    so = ort.SessionOptions()
    assert mlx_ep.append_to_session_options(so, provider_options={"device": "cpu", "cache_size": 4}) is so
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    sess = ort.InferenceSession(add_model(), sess_options=so)
    assert sess.get_providers()[0] == mlx_ep.EP_NAME


ENV_PROBE = r"""
import ctypes, sys
import onnxruntime_ep_mlx as mlx_ep
mlx_ep.register_execution_provider_library()
getenv = ctypes.CDLL(None).getenv
getenv.restype = ctypes.c_char_p
print(" ".join(f"{n}={(getenv(n.encode()) or b'unset').decode()}" for n in sys.argv[1:]))
"""


@pytest.mark.parametrize("preset", [None, "1"])
def test_library_sets_mlx_environment_unless_set(preset):
    """Registering the library sets MLX_ENABLE_TF32, MLX_ENABLE_CACHE_THRASHING_CHECK and
    MLX_USE_CUDA_GRAPHS to 0 in the process environment (MLX reads them only there), and leaves a
    value the user set (README, "Options and environment")."""
    import os
    import sys
    from parity import child_pythonpath
    names = ["MLX_ENABLE_TF32", "MLX_ENABLE_CACHE_THRASHING_CHECK", "MLX_USE_CUDA_GRAPHS"]
    env = {k: v for k, v in os.environ.items() if k not in names}
    env["PYTHONPATH"] = child_pythonpath()
    if preset is not None:
        env.update({n: preset for n in names})
    out = subprocess.run([sys.executable, "-c", ENV_PROBE, *names], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    want = preset if preset is not None else "0"
    assert out.stdout.split() == [f"{n}={want}" for n in names], out.stdout
