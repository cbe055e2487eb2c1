"""Runs one fuzz spec (gen.generate) with ORT's CPU EP and with the MLX EP in strict mode (three
Runs: eager, trace, replay) and classifies the outcome:

  ok          every EP Run matches ORT within tolerance
  declined    the EP session cannot be built in strict mode (a node is not claimed)
  no-ref      ORT's CPU EP has no kernel for some node (NOT_IMPLEMENTED): nothing to compare
  both-error  ORT and the EP both refuse the data at Run (every EP Run)
  one-sided   exactly one side errors (detail says which and the message)
  mismatch    an output differs beyond tolerance (or in dtype/shape), or the EP's Runs disagree
  crash/hang  set by the driver when the worker process dies or stops answering

Tolerances (float outputs; ints and bools must be equal; NaN must match NaN):
  |ep - ort| <= atol * max(1, max|ort|) + rtol * |ort|
  float32 rtol 1e-4 atol 1e-4, float16 rtol 1e-2 atol 1e-2, float64 rtol 1e-9 atol 1e-9.
The atol term scales with the output's largest magnitude because chains (sums, matmuls,
softmax) cancel: a difference relative to the output's scale is what a rounding order changes.
A float output that differs is compared again at the tolerance of the least precise float dtype
computed on its way (working_dtype: a float64 Cast of float32 arithmetic carries float32's
accuracy). A mismatch is also compared with ORT's kernels run node by node (stepwise_values);
when the EP matches that, the result says so ("stepwise") and run.explain names the cause;
otherwise `amplified` looks for the first node whose output differs while its inputs agree within
tolerance and that, alone on ORT's input values, the EP computes as ORT does ("amplified"). When
ORT errors and the EP answers, ORT is run again with symbolic input dims ("symbolic" when it then
answers as the EP).

As a program (the worker): reads JSON lines {"id", "seed"|"spec", "mode"} on stdin and answers
each with one line "RESULT <json>", flushing before and after; the driver treats the worker's
death as a crash of the request it was on."""
from __future__ import annotations

import inspect
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

import gen  # noqa: E402

TOL = {"float32": (1e-4, 1e-4), "float16": (1e-2, 1e-2), "float64": (1e-9, 1e-9)}
RUNS = 3
ONNX_DT = {"float32": 1, "uint8": 2, "int8": 3, "uint16": 4, "int16": 5, "int32": 6, "int64": 7, "bool": 9,
           "float16": 10, "float64": 11, "uint32": 12, "uint64": 13}


def arr_of(t):
    return np.array(t["data"], dtype=t["dtype"]).reshape(t["shape"])


def node_attrs(n) -> dict:
    """A spec node's attributes for helper.make_node: a tensor attribute is written in the spec as
    {"tensor": {"dtype", "shape", "data"}} (JSON has no TensorProto)."""
    return {k: numpy_helper.from_array(arr_of(v["tensor"]), k) if isinstance(v, dict) and "tensor" in v else v
            for k, v in n["attrs"].items()}


def make_node(n):
    return helper.make_node(n["op"], n["inputs"], n["outputs"], **node_attrs(n))


def opsets(spec, nodes=None) -> list:
    """The model's opset imports: ONNX's, and com.microsoft's when a node is a contrib op (its
    "domain" attribute, which make_node takes as the node's domain)."""
    out = [helper.make_opsetid("", spec.get("opset", gen.OPSET))]
    if any(n["attrs"].get("domain") == "com.microsoft" for n in (spec["nodes"] if nodes is None else nodes)):
        out.append(helper.make_opsetid("com.microsoft", 1))
    return out


def alt_feeds(spec) -> dict | None:
    """The second feed set of a spec whose inputs carry "alt" values (gen_data.py), else None."""
    if not any("alt" in i for i in spec["inputs"]):
        return None
    return {i["name"]: arr_of(dict(i, data=i["alt"]) if "alt" in i else i) for i in spec["inputs"]}


def build_model(spec, outputs=None) -> tuple[bytes, dict]:
    """(model bytes, feeds). outputs: names to expose (default: the spec's outputs); every name
    must be a node output whose dtype is known (from the spec's outputs or `dtypes`)."""
    outs = spec["outputs"] if outputs is None else outputs
    nodes = [make_node(n) for n in spec["nodes"]]
    graph = helper.make_graph(
        nodes, "fuzz",
        [helper.make_tensor_value_info(i["name"], ONNX_DT[i["dtype"]], i["shape"]) for i in spec["inputs"]],
        [helper.make_tensor_value_info(o["name"], ONNX_DT[o["dtype"]], None) for o in outs],
        initializer=[numpy_helper.from_array(arr_of(t), t["name"]) for t in spec["inits"]])
    model = helper.make_model(graph, opset_imports=opsets(spec))
    model.ir_version = 10
    return model.SerializeToString(), {i["name"]: arr_of(i) for i in spec["inputs"]}


def _short(e):
    s = str(e).replace("\n", " ")
    return s[:500]


def compare(got, want, name, tol=None):
    """None when equal within tolerance (`tol`: (rtol, atol), default by want's dtype), else a
    description."""
    g, w = np.asarray(got), np.asarray(want)
    if g.dtype != w.dtype or g.shape != w.shape:
        return f"{name}: {g.dtype}{list(g.shape)} != ORT's {w.dtype}{list(w.shape)}"
    if g.size == 0:
        return None
    if w.dtype.kind == "f":
        rtol, atol = tol or TOL.get(str(w.dtype), (1e-4, 1e-4))
        g64, w64 = g.astype(np.float64), w.astype(np.float64)
        nan_g, nan_w = np.isnan(g64), np.isnan(w64)
        if (nan_g != nan_w).any():
            i = int(np.argmax(nan_g != nan_w))
            return f"{name}: NaN differs at flat {i}: ep {g64.flat[i]} ort {w64.flat[i]}"
        fin = np.isfinite(w64) & ~nan_w
        inf_bad = (~fin & ~nan_w) & (g64 != w64)
        if inf_bad.any():
            i = int(np.argmax(inf_bad))
            return f"{name}: inf differs at flat {i}: ep {g64.flat[i]} ort {w64.flat[i]}"
        scale = max(1.0, float(np.abs(w64[fin]).max())) if fin.any() else 1.0
        with np.errstate(invalid="ignore"):
            err = np.where(fin, np.abs(g64 - w64), 0.0)
            bad = err > atol * scale + rtol * np.abs(np.where(fin, w64, 0))
        if bad.any():
            i = int(np.argmax(bad))
            return f"{name}: max |diff| {err.max():.3g} (scale {scale:.3g}) at flat {i}: ep {g64.flat[i]!r} ort {w64.flat[i]!r}"
        return None
    if not np.array_equal(g, w):
        i = int(np.argmax(g.ravel() != w.ravel()))
        return f"{name}: differs at flat {i}: ep {g.flat[i]!r} ort {w.flat[i]!r}"
    return None


def _quiet():
    so = ort.SessionOptions()
    so.log_severity_level = 4
    return so


TOL_ORDER = ("float64", "float32", "float16")   # from the tightest tolerance to the loosest


def value_dtypes(spec) -> dict:
    """{value name: numpy dtype name} for every input, initializer and node output (node outputs from
    ONNX shape inference); a value inference cannot type is left out."""
    inv = {v: k for k, v in ONNX_DT.items()}
    out = {t["name"]: t["dtype"] for t in spec["inputs"] + spec["inits"]}
    out.update(spec.get("dtypes", {}))   # the generator's own types (contrib nodes' outputs among them)
    model, _ = build_model(spec)
    try:
        inferred = onnx.shape_inference.infer_shapes(onnx.load_from_string(model))
    except Exception:  # noqa: BLE001
        return out
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
        t = vi.type.tensor_type.elem_type
        if t in inv:
            out[vi.name] = inv[t]
    return out


def working_dtype(spec, name, dtypes) -> str | None:
    """The least precise float dtype among the values COMPUTED on the way to `name` (node outputs,
    `name` included; graph inputs are exact on both sides). A float64 output cast from float32
    arithmetic carries float32's accuracy, so it is compared with float32's tolerance."""
    producer = {o: n for n in spec["nodes"] for o in n["outputs"]}
    seen, todo, worst = set(), [name], None
    while todo:
        v = todo.pop()
        if v in seen or v not in producer:
            continue
        seen.add(v)
        dt = dtypes.get(v)
        if dt in TOL_ORDER and (worst is None or TOL_ORDER.index(dt) > TOL_ORDER.index(worst)):
            worst = dt
        todo.extend(i for i in producer[v]["inputs"] if i)
    return worst


def stepwise_values(spec, partial=False) -> dict | None:
    """Every value computed node by node, each node in its own ORT CPU session with its inputs fed
    and its outputs materialised in their ONNX dtype: the graph's per-node semantics, without ORT's
    whole-graph rewrites (a float16 node that lacks a float16 kernel runs in float32, and between
    two such nodes ORT's cast elimination keeps the value in float32, never rounding it to the
    float16 the graph declares). None when a node cannot be run this way."""
    vals = {t["name"]: arr_of(t) for t in spec["inputs"] + spec["inits"]}
    dtypes = value_dtypes(spec)
    for n in spec["nodes"]:
        ins = [i for i in n["inputs"] if i]
        if any(i not in vals for i in ins) or any(o not in dtypes for o in n["outputs"]):
            return vals if partial else None
        graph = helper.make_graph(
            [make_node(n)], "step",
            [helper.make_tensor_value_info(i, helper.np_dtype_to_tensor_dtype(vals[i].dtype), vals[i].shape)
             for i in dict.fromkeys(ins)],
            [helper.make_tensor_value_info(o, ONNX_DT[dtypes[o]], None) for o in n["outputs"]])
        model = helper.make_model(graph, opset_imports=opsets(spec))
        model.ir_version = 10
        try:
            got = ort.InferenceSession(model.SerializeToString(), _quiet(), providers=["CPUExecutionProvider"]).run(
                None, {i: vals[i] for i in ins})
        except Exception:  # noqa: BLE001
            return vals if partial else None   # partial: the values before the node ORT refuses
        vals.update(zip(n["outputs"], got))
    return vals


def compare_working(spec, got, want, name, dtypes) -> str | None:
    """compare(), then, for a float output that differs, again at the tolerance of the precision the
    value was computed in (working_dtype). dtypes: a dict value_dtypes fills on first use."""
    d = compare(got, want, name)
    if d and np.asarray(want).dtype.kind == "f":
        if not dtypes:
            dtypes.update(value_dtypes(spec))
        wd = working_dtype(spec, name, dtypes)
        if wd and TOL_ORDER.index(wd) > TOL_ORDER.index(str(np.asarray(want).dtype)):
            d = compare(got, want, name, TOL[wd])
    return d


def _stepwise_match(spec, results, names, dtypes) -> bool:
    """True when every EP Run matches ORT's node-by-node values (stepwise_values) on every output."""
    step = stepwise_values(spec)
    if step is None or any(nm not in step for nm in names):
        return False
    return all(compare_working(spec, g, step[nm], nm, dtypes) is None for got in results for nm, g in zip(names, got))


def _differs(spec, got, want, name, dtypes) -> str | None:
    """compare_working, and for float values equal within tolerance, zeros of another sign (a later
    Reciprocal or Div turns them into infinities of another sign)."""
    d = compare_working(spec, got, want, name, dtypes)
    g, w = np.asarray(got), np.asarray(want)
    if d is None and w.dtype.kind == "f" and g.shape == w.shape and g.size:
        z = (g == 0) & (w == 0) & (np.signbit(g) != np.signbit(w))
        if z.any():
            return f"{name}: the sign of zero differs at flat {int(np.argmax(z))}"
    return d


def _session(model, ep: bool):
    if ep:
        import onnxruntime_ep_mlx as mlx_ep
        return mlx_ep.session(model, strict=True, sess_options=_quiet())
    return ort.InferenceSession(model, _quiet(), providers=["CPUExecutionProvider"])


def _all_values(spec, dtypes, ep: bool) -> dict | None:
    """{name: array} of every input, initializer and node output: ORT's CPU EP, or the EP (strict, one
    eager Run) with every intermediate exposed. None when that fails."""
    outs = [{"name": o, "dtype": dtypes[o]} for n in spec["nodes"] for o in n["outputs"] if o in dtypes]
    model, feeds = build_model(spec, outs)
    try:
        vals = _session(model, ep).run(None, feeds)
    except Exception:  # noqa: BLE001
        return None
    out = {t["name"]: arr_of(t) for t in spec["inputs"] + spec["inits"]}
    out.update(zip([o["name"] for o in outs], vals))
    return out


def amplified(spec) -> str | None:
    """For a mismatch: finds the first node (in graph order) whose output differs between the EP and
    ORT (_differs) while its inputs agree within tolerance, and runs that node alone on the EP with
    ORT's values of its inputs. When the EP then gives ORT's output, the node is exact and the
    mismatch is its sensitivity to differences within tolerance upstream (Floor/Ceil/a Cast to int or
    a comparison of a value at a step, Log of a tiny value): returns a description, else None."""
    dtypes = value_dtypes(spec)
    ref, got = _all_values(spec, dtypes, False), _all_values(spec, dtypes, True)
    if ref is None or got is None:
        return None
    inits = {t["name"]: t for t in spec["inits"]}
    for n in spec["nodes"]:
        bad = [o for o in n["outputs"] if o in ref and o in got and _differs(spec, got[o], ref[o], o, dtypes)]
        if not bad:
            continue
        ins = [i for i in dict.fromkeys(n["inputs"]) if i]
        if any(i not in ref or i not in got or _differs(spec, got[i], ref[i], i, dtypes) for i in ins):
            return None
        single = {"seed": spec.get("seed"), "opset": spec.get("opset", gen.OPSET), "nodes": [n],
                  "inits": [inits[i] for i in ins if i in inits],
                  "inputs": [{"name": i, "dtype": str(ref[i].dtype), "shape": list(ref[i].shape),
                              "data": ref[i].ravel().tolist()} for i in ins if i not in inits],
                  "outputs": [{"name": o, "dtype": dtypes[o]} for o in n["outputs"]]}
        model, feeds = build_model(single)
        try:
            alone = _session(model, True).run(None, feeds)
        except Exception:  # noqa: BLE001
            return None
        if any(_differs(single, a, ref[o], o, dtypes) for a, o in zip(alone, n["outputs"])):
            return None
        return (f"{n['op']} -> '{bad[0]}': its inputs agree within tolerance and, fed ORT's values of them, "
                f"the EP gives ORT's output ({_differs(spec, got[bad[0]], ref[bad[0]], bad[0], dtypes)})")
    return None


def ort_symbolic(spec):
    """ORT's CPU outputs with every graph input's dims symbolic (dim_param), or None when it fails."""
    model, feeds = build_model(spec)
    m = onnx.load_from_string(model)
    for vi in m.graph.input:
        for k, d in enumerate(vi.type.tensor_type.shape.dim):
            d.dim_param = f"{vi.name}_d{k}"
    try:
        return _session(m.SerializeToString(), False).run(None, feeds)
    except Exception:  # noqa: BLE001
        return None


ALT_ORDER = (0, 0, 1, 1, 0)   # eager and trace on the first values, the replay on alt, then back


def _ort_answer(sess, feeds):
    """ORT's outputs, or its error message."""
    try:
        return sess.run(None, feeds)
    except Exception as e:  # noqa: BLE001
        return _short(e)


# Under ASan (make sanitize preloads it) an allocation past memory in ORT's operator new aborts the
# process instead of throwing, and the data pool asks ORT for such sizes on purpose: there ORT's
# answers come from a child process without the sanitizer (the EP, instrumented, stays here).
REFERENCE_IN_CHILD = "libasan" in os.environ.get("LD_PRELOAD", "")


def cap_data_memory():
    """The data and attrs pools ask for sizes past any memory on purpose (2^40 elements). Where the
    host overcommits memory (the GPU machines) such an allocation succeeds and its pages are touched
    until the process has tens of GiB and the OOM killer ends it, or the call's timeout does: a crash
    or a hang of the worker, where a host that does not overcommit refuses the allocation at once
    (ORT's error; the EP's). The worker and the reference's child cap their data segment
    (RLIMIT_DATA: private writable memory, which a CUDA context's reserved address space is not), so
    every host refuses alike."""
    import os
    import resource
    cap = min(16 << 30, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4)
    hard = resource.getrlimit(resource.RLIMIT_DATA)[1]
    resource.setrlimit(resource.RLIMIT_DATA, (cap if hard == resource.RLIM_INFINITY else min(cap, hard), hard))


_CHILD = inspect.getsource(cap_data_memory) + """
cap_data_memory()
import pickle, sys
import onnxruntime as ort
model, sets = pickle.load(sys.stdin.buffer)
so = ort.SessionOptions()
so.log_severity_level = 4
out = []
try:
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
except Exception as e:
    pickle.dump(("session", str(e).replace("\\n", " ")[:500]), sys.stdout.buffer)
    sys.exit(0)
for feeds in sets:
    try:
        out.append(sess.run(None, feeds))
    except Exception as e:
        out.append(str(e).replace("\\n", " ")[:500])
pickle.dump(("runs", out), sys.stdout.buffer)
"""


# Half the driver's default --timeout: a reference that runs longer is given up on while the worker
# still answers (a hostile pooling kernel of 2^62 keeps ORT's CPU EP busy without end).
REFERENCE_TIMEOUT_S = 30


class ReferenceHang(Exception):
    """ORT's CPU EP gave no answer within REFERENCE_TIMEOUT_S."""


def _ort_answers_in_child(model, sets):
    """ORT's answer for each feed set (outputs or an error message), from a child process without
    the sanitizer; raises RuntimeError(message) when ORT refuses the model itself, ReferenceHang
    when it does not answer in time."""
    import pickle
    import subprocess
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS")}
    try:
        done = subprocess.run([sys.executable, "-c", _CHILD], input=pickle.dumps((model, list(sets))),
                              capture_output=True, env=env, timeout=REFERENCE_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        raise ReferenceHang(f"ORT's CPU EP gave no answer within {REFERENCE_TIMEOUT_S} s") from e
    if done.returncode != 0:   # ORT died on a size it could not allocate: a refusal
        return [f"ORT's CPU EP died (exit {done.returncode})"] * len(sets)
    kind, val = pickle.loads(done.stdout)
    if kind == "session":
        raise RuntimeError(val)
    return val


def _ort_answers(model, sets, child=False):
    if REFERENCE_IN_CHILD or child:
        return _ort_answers_in_child(model, sets)
    sess = ort.InferenceSession(model, _quiet(), providers=["CPUExecutionProvider"])
    return [_ort_answer(sess, f) for f in sets]


def with_values(spec, alt: bool):
    """The spec with its inputs holding their alt values (alt=True), or as it is."""
    if not alt:
        return spec
    return dict(spec, inputs=[dict(i, data=i["alt"]) if "alt" in i else i for i in spec["inputs"]])


def _ep_session(model, ort_error):
    """(the EP's strict session, None), or (None, the result when it cannot be built: declined,
    both-error when ORT errors too (ort_error: ORT's message, or None), else one-sided)."""
    import onnxruntime_ep_mlx as mlx_ep
    try:
        return mlx_ep.session(model, strict=True, sess_options=_quiet()), None
    except Exception as e:  # noqa: BLE001
        msg = _short(e)
        if "fallback" in msg.lower() or "assigned to the default CPU" in msg:
            return None, {"class": "declined", "detail": msg}
        if ort_error:
            return None, {"class": "both-error", "detail": f"ep session: {msg} | ort: {ort_error}"}
        return None, {"class": "one-sided", "detail": f"EP session fails, ORT runs: {msg}"}


def _ep_runs_without_reference(model, sets, why: str) -> dict:
    """No reference to hold the EP to: its Runs still go (ALT_ORDER), so a crash or a hang of the
    EP shows (the worker dies or stops answering); answers and refusals alike end as no-ref."""
    esess, failed = _ep_session(model, why)
    if esess is not None:
        for which in ALT_ORDER:
            _ort_answer(esess, sets[which])
    return {"class": "no-ref", "detail": f"{why}; the EP's Runs ended ({'session refused' if failed else 'ran'})"}


def run_spec_alt(spec, model, sets, child=False) -> dict:
    """run_spec for a spec with a second feed set: the EP's Runs follow ALT_ORDER and each is held to
    ORT's answer for its own feeds: the same outputs, or an error where ORT errors."""
    names = [o["name"] for o in spec["outputs"]]
    try:
        want = _ort_answers(model, sets, child)
    except ReferenceHang as e:
        return _ep_runs_without_reference(model, sets, str(e))
    except Exception as e:  # noqa: BLE001
        msg = _short(e)
        if "NOT_IMPLEMENTED" in msg or "Could not find an implementation" in msg:
            return {"class": "no-ref", "detail": msg}
        want = ["session: " + msg] * len(sets)
    for w in want:
        if isinstance(w, str) and "data type is not supported" in w:
            return {"class": "no-ref", "detail": w}
    esess, failed = _ep_session(model, want[0] if all(isinstance(w, str) for w in want) else None)
    if failed:
        return failed
    dtypes, errors = {}, 0
    for run, which in enumerate(ALT_ORDER):
        got, ref = _ort_answer(esess, sets[which]), want[which]
        where = f"run {run + 1} ({'alt' if which else 'first'} values)"
        if isinstance(got, str) and isinstance(ref, str):
            errors += 1
            continue
        if isinstance(got, str):
            return {"class": "one-sided", "detail": f"EP errors, ORT answers, {where}: {got}"}
        if isinstance(ref, str):
            return {"class": "one-sided", "detail": f"ORT errors, EP answers, {where}: {ref}"}
        for nm, gv, wv in zip(names, got, ref):
            d = compare_working(spec, gv, wv, nm, dtypes)
            if d:
                res = {"class": "mismatch", "detail": f"{where}: {d}", "output": nm}
                amp = amplified(with_values(spec, alt=which == 1))
                if amp:
                    res["amplified"] = amp
                return res
    return {"class": "both-error" if errors == len(ALT_ORDER) else "ok"}


def run_spec(spec) -> dict:
    model, feeds = build_model(spec)
    alt = alt_feeds(spec)
    if alt is not None:
        return run_spec_alt(spec, model, (feeds, alt))
    if spec.get("pool") == "attrs":   # a hostile model may take ORT's process down: its answers from a child
        return run_spec_alt(spec, model, (feeds, feeds), child=True)
    names = [o["name"] for o in spec["outputs"]]
    cpu_err = cpu_full = want = None
    try:
        sess = ort.InferenceSession(model, _quiet(), providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001
        msg = _short(e)
        if "NOT_IMPLEMENTED" in msg or "Could not find an implementation" in msg:
            return {"class": "no-ref", "detail": msg}
        cpu_err = "session: " + msg
    if cpu_err is None:
        try:
            want = sess.run(None, feeds)
        except Exception as e:  # noqa: BLE001
            cpu_err, cpu_full = _short(e), str(e)
            if "data type is not supported" in str(e):  # a kernel without this dtype's form
                return {"class": "no-ref", "detail": cpu_err}
    esess, failed = _ep_session(model, cpu_err)
    if failed:
        return failed
    results = []
    for _ in range(RUNS):
        try:
            results.append(esess.run(None, feeds))
        except Exception as e:  # noqa: BLE001
            results.append(_short(e))
    errs = [r for r in results if isinstance(r, str)]
    if errs and len(errs) != RUNS:
        return {"class": "mismatch", "detail": f"EP Runs disagree: {['error' if isinstance(r, str) else 'ok' for r in results]}: {errs[0]}"}
    if cpu_err and errs:
        return {"class": "both-error", "detail": f"ep: {errs[0]} | ort: {cpu_err}"}
    if cpu_err:
        res = {"class": "one-sided", "detail": f"ORT errors, EP answers: {cpu_err}"}
        # a Run error only (a session ORT refuses is a model matter): does ORT answer when the
        # input shapes are not static?
        sym = None if cpu_err.startswith("session: ") else ort_symbolic(spec)
        if sym is not None and all(compare(g, w, nm) is None for got in results for nm, g, w in zip(names, got, sym)):
            res["symbolic"] = "ORT with symbolic input dims answers, as the EP does"
            if "re-use buffer" in (cpu_full or ""):
                res["symbolic"] += " (ORT's error: 'Shape mismatch attempting to re-use buffer')"
        return res
    if errs:
        return {"class": "one-sided", "detail": f"EP errors, ORT answers: {errs[0]}"}
    dtypes = {}
    for run, got in enumerate(results):
        for nm, g, w in zip(names, got, want):
            d = compare_working(spec, g, w, nm, dtypes)
            if d:
                res = {"class": "mismatch", "detail": f"run {run + 1}: {d}", "output": nm}
                if _stepwise_match(spec, results, names, dtypes):
                    res["stepwise"] = "the EP matches ORT's kernels run node by node"
                else:
                    amp = amplified(spec)
                    if amp:
                        res["amplified"] = amp
                return res
    return {"class": "ok"}


def cpu_values(spec) -> dict:
    """Every node output's value on ORT's CPU EP (for the minimiser's cuts); dtypes from the model
    (shape inference is not needed: ORT reports the dtype of each fetched value)."""
    dtypes = {}
    for n in spec["nodes"]:
        for o in n["outputs"]:
            dtypes[o] = None
    # ask ORT for every intermediate: declare outputs with a dtype found by a first CPU run of
    # onnx's shape inference
    model, feeds = build_model(spec)
    inferred = onnx.shape_inference.infer_shapes(onnx.load_from_string(model))
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
        if vi.name in dtypes:
            dtypes[vi.name] = vi.type.tensor_type.elem_type
    inv = {v: k for k, v in ONNX_DT.items()}
    outs = [{"name": k, "dtype": inv[t]} for k, t in dtypes.items() if t in inv]
    model, feeds = build_model(spec, outs)
    vals = ort.InferenceSession(model, _quiet(), providers=["CPUExecutionProvider"]).run(None, feeds)
    return {o["name"]: {"dtype": str(v.dtype), "shape": list(v.shape), "data": v.ravel().tolist()}
            for o, v in zip(outs, vals)}


def handle(req) -> dict:
    spec = req.get("spec") or gen.generate(req["seed"], req.get("pool", "core"))
    if req.get("mode") == "values":
        return {"values": cpu_values(spec)}
    out = run_spec(spec)
    out["ops"] = sorted({n["op"] for n in spec["nodes"]})
    return out


def main():
    if not REFERENCE_IN_CHILD:  # under ASan the shadow memory would not fit; ORT answers from the child
        cap_data_memory()
    import onnxruntime_ep_mlx as mlx_ep
    mlx_ep.register_execution_provider_library()
    for line in sys.stdin:
        req = json.loads(line)
        try:
            res = handle(req)
        except Exception as e:  # noqa: BLE001 - a harness error is reported, not a crash
            res = {"class": "harness-error", "detail": _short(repr(e))}
        res["id"] = req["id"]
        sys.stdout.write("RESULT " + json.dumps(res) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
