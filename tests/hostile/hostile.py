"""The hostile-data harness: one node (or a small model) run with ORT's CPU EP and with the MLX EP
in strict mode on data an attacker picks. Where ORT's CPU EP refuses the data, the EP must refuse
it too with a clear message, on the eager, traced and replayed paths, and then keep working;
elsewhere its outputs must match ORT's."""
from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

from parity import NP_TO_ONNX, TOL, make_model
import onnxruntime_ep_mlx as mlx_ep

MS = "com.microsoft"
I64_MIN, I64_MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max
I32_MIN, I32_MAX = np.iinfo(np.int32).min, np.iinfo(np.int32).max
# The EP refuses what the newest ORT we pin (1.31) refuses. An older runtime (CI also runs this
# catalogue under 1.27) may accept some of those values (Range of NaN/inf bounds, for one): there
# the EP's refusal with the case's message is right too, and an answer must still match ORT's.
PINNED_ORT = (1, 31)
OLDER_ORT = tuple(int(p) for p in ort.__version__.split(".")[:2]) < PINNED_ORT


def node_model(op, inputs, out_types, attrs=None, domain="", opset=21, consts=()):
    """inputs: ordered (name, array or None); None is an absent optional input. Names in consts
    become initializers; the others are fed. out_types: ONNX dtypes of the outputs y0, y1, ..."""
    names = [n if a is not None else "" for n, a in inputs]
    node = helper.make_node(op, names, [f"y{i}" for i in range(len(out_types))], domain=domain, **(attrs or {}))
    ins = [(n, NP_TO_ONNX[a.dtype], list(a.shape)) for n, a in inputs if a is not None and n not in consts]
    outs = [(f"y{i}", t, None) for i, t in enumerate(out_types)]
    inits = [(n, a) for n, a in inputs if a is not None and n in consts]
    domains = [(MS, 1)] if domain == MS else []
    return make_model([node], ins, outs, inits, opset=opset, domains=domains)


def _cpu(model, feeds):
    so = ort.SessionOptions()
    so.log_severity_level = 4
    try:
        return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, feeds), None
    except Exception as e:  # noqa: BLE001 - any refusal by ORT is the reference answer
        return None, e


# The child's address space is capped (at most 32 GiB, and never above the machine's memory), so an
# allocation past it fails at once, as on a host that does not overcommit, instead of touching
# pages until the kernel's OOM killer steps in.
_CHILD_REFERENCE = """
import os, pickle, resource, sys
cap = min(32 << 30, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
import onnxruntime as ort
model, feeds = pickle.load(sys.stdin.buffer)
so = ort.SessionOptions()
so.log_severity_level = 4
try:
    result = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, feeds), None
except Exception as e:
    result = None, str(e)
pickle.dump(result, sys.stdout.buffer)
"""


def _cpu_in_child(model, feeds):
    """ORT's CPU EP in a child process, for feeds that make it allocate past memory: where the
    machine overcommits memory (the H200 host) that kills the process rather than failing, and
    it would take the test worker, and the EP's part of the case, with it. A death is a refusal."""
    # ORT's CPU EP alone: no sanitizer runtime preloaded (`make sanitize`), whose shadow memory the
    # capped address space could not hold
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    try:
        done = subprocess.run([sys.executable, "-c", _CHILD_REFERENCE], input=pickle.dumps((model, feeds)),
                              capture_output=True, timeout=120, env=env)
    except subprocess.TimeoutExpired:
        return None, RuntimeError("ORT's CPU EP did not finish in 120 s")
    if done.returncode != 0:
        return None, RuntimeError(f"ORT's CPU EP died (exit {done.returncode}): {done.stderr[-300:]!r}")
    out, err = pickle.loads(done.stdout)
    return out, RuntimeError(err) if err is not None else None


def _compare(got, want, tol, where):
    if got is None:  # refused as the pinned ORT refuses (see _run_or_pinned_refusal)
        return
    for i, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape, f"{where}, output {i}: {g.dtype}{g.shape} != {w.dtype}{w.shape}"
        if g.dtype.kind == "f":
            rtol, atol = tol or TOL.get(NP_TO_ONNX[g.dtype], (1e-5, 1e-5))
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=where)
        else:
            np.testing.assert_array_equal(g, w, err_msg=where)


def _run_or_pinned_refusal(sess, feeds, match):
    """The EP's outputs; under an older ORT that accepts what the pinned one refuses, the EP's
    refusal (with the case's message) stands in for them: None, which _compare skips."""
    if not OLDER_ORT or not match:
        return sess.run(None, feeds)
    try:
        return sess.run(None, feeds)
    except Exception as e:  # noqa: BLE001 - checked against the case's message
        assert re.search(match, str(e)), f"the EP refused with an unexpected message: {e}"
        return None


def _reference_in_child(match, asked: bool) -> bool:
    """A case that expects a refusal for size ("the memory limit") has ORT's CPU EP allocate past
    memory: its reference runs in a child, always (on the GPU host, which overcommits, two such
    cases left to the worker killed it)."""
    return asked or bool(match and "memory limit" in match)


def check_hostile(model, bad, good, match, tol=None, reference_in_child=False):
    """bad: the hostile feeds; good: feeds of the same shapes that ORT accepts. When ORT refuses
    `bad`, the EP must raise an error matching `match` on the eager, traced and replayed paths
    (bad, good, bad, good, bad: a signature is listed by a successful Run, traced on the next and
    replayed after), with every good Run matching ORT; otherwise every Run of `bad` must match.
    reference_in_child: ORT's answer to `bad` comes from a child process (_cpu_in_child)."""
    want_bad, err = (_cpu_in_child if _reference_in_child(match, reference_in_child) else _cpu)(model, bad)
    want_good, good_err = _cpu(model, good)
    assert good_err is None, f"ORT refuses the good feeds too: {good_err}"
    sess = mlx_ep.session(model, strict=True)
    if err is None:
        for run in range(3):
            _compare(_run_or_pinned_refusal(sess, bad, match), want_bad, tol, f"run {run + 1} (ORT accepts)")
        return
    assert match, f"ORT refuses these feeds ({err}) but the case states no expected message"
    for run, feeds in enumerate([bad, good, bad, good, bad, good]):
        if feeds is bad:
            with pytest.raises(Exception, match=match):
                sess.run(None, feeds)
        else:
            _compare(sess.run(None, feeds), want_good, tol, f"run {run + 1} (good feeds)")


def check_refused(model, feeds, match, reference_in_child=False):
    """A case whose feeds ORT's CPU EP refuses outright and that has no good twin (sizes)."""
    _, err = (_cpu_in_child if _reference_in_child(match, reference_in_child) else _cpu)(model, feeds)
    assert err is not None or OLDER_ORT, "ORT accepted the feeds"
    sess = mlx_ep.session(model, strict=True)
    for _ in range(2):
        with pytest.raises(Exception, match=match):
            sess.run(None, feeds)
