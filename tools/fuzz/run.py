#!/usr/bin/env python3
"""Differential fuzzing driver: generates seeded graphs (gen.py), runs each in a worker process
(harness.py: ORT's CPU EP vs the MLX EP in strict mode, eager/trace/replay), minimises every
failure and saves it under tests/fuzz/cases/ as a JSON spec that tests/fuzz/test_fuzz.py replays.

  .venv/bin/python tools/fuzz/run.py --count 10000 --seed 0 [--jobs 2] [--save] [--json out.json]

A worker that dies is a crash of the graph it was running (the driver restarts it and goes on);
one that does not answer within --timeout seconds is a hang. Prints the counts per class."""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import gen  # noqa: E402

CASES = os.path.join(ROOT, "tests", "fuzz", "cases")
FAILURES = {"crash", "hang", "one-sided", "mismatch", "harness-error"}


class Worker:
    """One harness.py process; call() sends a request and waits for its answer."""

    def __init__(self, timeout=60.0):
        self.timeout = timeout
        self.proc = None
        self.n = 0

    def start(self):
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", "1")
        # FUZZ_WORKER_STDERR=path appends the workers' stderr there (a sanitizer's report of a crash)
        err = open(os.environ["FUZZ_WORKER_STDERR"], "a") if os.environ.get("FUZZ_WORKER_STDERR") else subprocess.DEVNULL
        # its own process group: a hung worker is killed with the reference process it may have started
        # (an ORT child left behind kept two cores busy for half an hour)
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "harness.py")], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=err, text=True, bufsize=1, env=env, cwd=ROOT,
                                     start_new_session=True)
        if err is not subprocess.DEVNULL:
            err.close()

    def stop(self):
        if self.proc:
            try:
                self.proc.stdin.close()
                self.proc.wait(5)
            except Exception:  # noqa: BLE001
                self._kill()
            self.proc = None

    def _kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            self.proc.kill()
        self.proc.wait()

    def call(self, req: dict) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        self.n += 1
        req = dict(req, id=self.n)
        try:
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass
        deadline = time.time() + self.timeout
        while True:
            left = deadline - time.time()
            if left <= 0:
                self._kill()
                self.proc = None
                return {"class": "hang", "detail": f"no answer within {self.timeout:.0f} s"}
            r, _, _ = select.select([self.proc.stdout], [], [], left)
            if not r:
                continue
            line = self.proc.stdout.readline()
            if not line:
                rc = self.proc.wait()
                self.proc = None
                return {"class": "crash", "detail": f"worker died (exit status {rc})"}
            if line.startswith("RESULT "):
                res = json.loads(line[7:])
                if res.get("id") == self.n:
                    return res


# ---- minimiser -----------------------------------------------------------------------------------

def _prune(spec):
    """Drops nodes that no output needs, and inputs/initializers nothing uses."""
    need = {o["name"] for o in spec["outputs"]}
    keep = []
    for n in reversed(spec["nodes"]):
        if any(o in need for o in n["outputs"]):
            keep.append(n)
            need.update(i for i in n["inputs"] if i)
    spec = dict(spec, nodes=list(reversed(keep)))
    spec["inputs"] = [i for i in spec["inputs"] if i["name"] in need]
    spec["inits"] = [i for i in spec["inits"] if i["name"] in need]
    return spec


def _same(res, want):
    return res["class"] == want["class"] and (res["class"] != "one-sided" or res["detail"][:10] == want["detail"][:10])


def minimise(worker: Worker, spec: dict, res: dict, budget=60) -> tuple[dict, dict]:
    """Shrinks a failing spec while the failure (same class) persists: keeps one output, then cuts
    nodes (a cut node's outputs become graph inputs fed with ORT's CPU values of the current
    graph), then drops the trailing nodes. Returns (spec, result)."""
    calls = 0

    def check(cand):
        nonlocal calls
        calls += 1
        r = worker.call({"spec": cand})
        return r if _same(r, res) else None

    # 1. one output at a time (the failing one first)
    outs = sorted(spec["outputs"], key=lambda o: o["name"] != res.get("output"))
    if len(outs) > 1:
        for o in outs:
            cand = _prune(dict(spec, outputs=[o]))
            r = check(cand)
            if r:
                spec, res = cand, r
                break
    # 2. cut producers: their outputs become feeds with ORT's values
    changed = True
    while changed and calls < budget and len(spec["nodes"]) > 1:
        changed = False
        vals = worker.call({"spec": spec, "mode": "values"}).get("values")
        if not vals:
            break
        for n in list(spec["nodes"]):
            if n["op"] in ("Constant",) or not all(o in vals for o in n["outputs"]):
                continue
            if any(o in {x["name"] for x in spec["outputs"]} for o in n["outputs"]):
                continue
            cand = dict(spec, nodes=[m for m in spec["nodes"] if m is not n],
                        inputs=spec["inputs"] + [dict(vals[o], name=o) for o in n["outputs"]])
            cand = _prune(cand)
            r = check(cand)
            if r:
                spec, res, changed = cand, r, True
                break
    return spec, dict(res, minimise_calls=calls)


# ---- explanations --------------------------------------------------------------------------------

def _has_nan(spec, names, computed=False):
    """Whether a float tensor of `names` holds a NaN: the spec's own tensors, and with computed=True
    also values earlier nodes compute (ORT's kernels run node by node)."""
    import numpy as np
    for t in spec["inputs"] + spec["inits"]:
        if t["name"] in names and t["dtype"].startswith("float"):
            if np.isnan(np.array(t["data"], dtype=float)).any():
                return True
    if not computed:
        return False
    import harness
    vals = harness.stepwise_values(spec, partial=True) or {}
    return any(n in vals and np.issubdtype(np.asarray(vals[n]).dtype, np.floating) and np.isnan(vals[n]).any()
               for n in names)


def _runtime_shapes(spec, alt: bool) -> dict:
    """{value name: shape} from ORT's kernels run node by node (harness.stepwise_values) on the spec's
    first values, or its alt values: the shapes a value read at Run decides. {} when that fails."""
    import numpy as np
    import harness
    spec = harness.with_values(spec, alt)
    vals = harness.stepwise_values(spec, partial=True) or {}
    shapes = {k: list(np.shape(v)) for k, v in vals.items()}
    if len(vals) < len(spec["inputs"]) + len(spec["inits"]) + sum(len(n["outputs"]) for n in spec["nodes"]):
        shapes.update(_prefix_shapes(spec))   # a node stepwise cannot run alone (sequences) stopped it
    return shapes


def _prefix_shapes(spec) -> dict:
    """Shapes of the tensors of the longest prefix of the graph ORT's CPU EP runs whole, every
    tensor it computes exposed (the node ORT refuses, and those after it, cut off)."""
    import numpy as np
    import harness
    dtypes = harness.value_dtypes(spec)
    for k in range(len(spec["nodes"]) - 1, 0, -1):
        nodes = spec["nodes"][:k]
        outs = [{"name": o, "dtype": dtypes[o]} for n in nodes for o in n["outputs"] if dtypes.get(o) in harness.ONNX_DT]
        if not outs:
            continue
        model, feeds = harness.build_model(dict(spec, nodes=nodes), outs)
        try:
            got = harness._session(model, False).run(None, feeds)
        except Exception:  # noqa: BLE001
            continue
        return {o["name"]: list(np.shape(v)) for o, v in zip(outs, got)}
    return {}


def _values(spec, name):
    """Every value a fed or constant tensor takes: its data, and its alt values if it has them."""
    t = _tensor(spec, name)
    if not t:
        return []
    return list(t["data"]) + list(t.get("alt", []))


def _tensor(spec, name):
    for t in spec["inputs"] + spec["inits"]:
        if t["name"] == name:
            return t
    return None


def _shapes(spec) -> dict:
    """{value name: shape list} for every value whose shape ONNX shape inference (or the spec) knows
    (the fuzz graphs' inputs have static shapes and their shape-giving inputs are initializers)."""
    import onnx
    import harness
    out = {t["name"]: list(t["shape"]) for t in spec["inputs"] + spec["inits"]}
    try:
        model, _ = harness.build_model(spec)
        inferred = onnx.shape_inference.infer_shapes(onnx.load_from_string(model), data_prop=True)
    except Exception:  # noqa: BLE001
        return out
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
        t = vi.type.tensor_type
        if t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim):
            out.setdefault(vi.name, [d.dim_value for d in t.shape.dim])
    return out


I64_MAX = 2**63 - 1
REDUCES = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd")
INT_RANGE = {"int8": (-2**7, 2**7 - 1), "uint8": (0, 255), "int32": (-2**31, 2**31 - 1), "int64": (-2**63, I64_MAX)}


def _matmul_zero_broadcast(a, b) -> bool:
    """True when NumPy's matmul accepts shapes a and b and ORT's matmul_helper (whose batch
    broadcast takes max(dim) and so refuses a 0 against a 1) does not: a 1-D right operand moves
    the left's M into the batch position, as ORT pads it."""
    import numpy as np
    try:
        np.matmul(np.empty(a), np.empty(b))
    except ValueError:
        return False
    if len(a) < 1 or len(b) < 1:
        return False
    if len(b) == 1:
        lp, rp = list(a[:-1]) if len(a) >= 2 else [], [1] * max(len(a) - 1, 0)
    else:
        la, lb = ([1] + list(a)) if len(a) == 1 else list(a), list(b)
        r = max(len(la), len(lb))
        lp, rp = [1] * (r - len(la)) + la[:-2], [1] * (r - len(lb)) + lb[:-2]
        lp, rp = lp[:r - 2], rp[:r - 2]
    return any({x, y} == {0, 1} for x, y in zip(lp, rp))


def _layernorm_constant_row(spec, n) -> bool:
    """True when a LayerNormalization's input (a fed tensor) has a normalized row that is constant up
    to its dtype's rounding: that row's output is rounding error divided by sqrt(epsilon)."""
    import numpy as np
    x = _tensor(spec, n["inputs"][0])
    if not x or not x["shape"]:
        return False
    a = np.array(x["data"], dtype=np.float64).reshape(x["shape"])
    axis = n["attrs"].get("axis", -1) % a.ndim
    rows = a.reshape(int(np.prod(a.shape[:axis], dtype=np.int64)), -1)
    if rows.size == 0:
        return False
    ulp = float(np.finfo(x["dtype"]).eps)
    with np.errstate(invalid="ignore"):
        flat = rows.std(axis=1) <= 8 * ulp * np.abs(rows).max(axis=1)
    return bool(flat.any())


_ALONE = r"""
import pickle, sys
sys.path.insert(0, sys.argv[2])
import onnxruntime as ort
model, feed_sets = pickle.load(sys.stdin.buffer)
if sys.argv[1] == "ort":
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
else:
    import onnxruntime_ep_mlx as mlx_ep
    sess = mlx_ep.session(model, strict=False)
for feeds in feed_sets:
    try:
        sess.run(None, feeds)
    except Exception:
        pass
"""


def _alone(spec, timeout):
    """The exit status of ORT's CPU EP alone and of the EP alone on the graph, each in a child that
    builds its session and runs every feed set of the spec (the data pool's alt values too); None
    for a child that did not finish within timeout seconds."""
    import pickle
    import harness
    model, feeds = harness.build_model(spec)
    alt = harness.alt_feeds(spec)
    python_dir = os.path.join(os.path.dirname(os.path.dirname(HERE)), "python")
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS")}
    rcs = {}
    for who, child_env in (("ort", env), ("ep", dict(os.environ))):
        payload = pickle.dumps((model, [feeds] if alt is None else [feeds, alt]))
        try:
            rcs[who] = subprocess.run([sys.executable, "-c", _ALONE, who, python_dir], input=payload,
                                      capture_output=True, env=child_env, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rcs[who] = None
    return rcs


def crash_is_ort(spec, timeout=120.0):
    """For a worker that died: whether ORT's CPU EP alone dies on the graph (a signal, building or
    running its session in a child) while the EP alone, in another child, does not. The worker holds
    both, so ORT's own crash on a reference looks like a crash of the EP's."""
    rcs = _alone(spec, timeout)
    return rcs["ort"] is not None and rcs["ort"] < 0 and rcs["ep"] == 0


def hang_is_ort(spec, timeout=60.0):
    """For a worker that stopped answering: whether ORT's CPU EP alone does not finish the graph
    within timeout seconds while the EP alone, in another child, does (the worker runs ORT first,
    as the reference)."""
    rcs = _alone(spec, timeout)
    return rcs["ort"] is None and rcs["ep"] == 0


def _sequence_gets_empty(spec):
    """Whether an empty tensor enters a sequence: inserted (a feed or constant with a 0 in its shape) or
    split off (a SplitToSequence split of 0)."""
    tensors = {t["name"]: t for t in spec["inputs"] + spec["inits"]}
    for n in spec["nodes"]:
        ins = n["inputs"]
        if n["op"] == "SequenceInsert" and len(ins) > 1 and ins[1] in tensors and 0 in tensors[ins[1]]["shape"]:
            return True
        if n["op"] == "SplitToSequence" and len(ins) > 1 and ins[1] in tensors:
            t = tensors[ins[1]]
            if 0 in t["data"] or 0 in t.get("alt", t["data"]):
                return True
    return False


def explain(spec, res):
    """A known cause for a minimised failure, or None. Each is a place where ORT's CPU EP departs
    from the ONNX spec (checked against the spec's shape inference or NumPy) or a documented
    difference (docs/OPERATORS.md); docs/RELIABILITY.md lists them."""
    if res["class"] not in ("mismatch", "one-sided"):
        return None
    mismatch, detail = res["class"] == "mismatch", res.get("detail", "")
    shapes = None
    for n in spec["nodes"]:
        op, ins = n["op"], n["inputs"]
        if op == "Sign" and mismatch and "NaN differs" in detail:
            return "Sign(NaN): the EP keeps NaN (docs/OPERATORS.md), ORT's CPU EP gives 0"
        if op in ("ArgMax", "ArgMin", "ReduceMax", "ReduceMin") and _has_nan(spec, ins[:1]) and mismatch:
            return f"{op} of NaN inputs: docs/OPERATORS.md says NaN handling may differ from ORT"
        if (op in ("ArgMax", "ArgMin") and res["class"] == "one-sided" and "ORT errors" in detail
                and _has_nan(spec, ins[:1], computed=True)):
            return (f"{op} of NaN values an earlier node computed: NaN handling may differ from ORT "
                    "(docs/OPERATORS.md), and a later node reading the index as data then refuses on one side only")
        if op in REDUCES + ("ArgMax", "ArgMin"):
            shapes = _shapes(spec) if shapes is None else shapes
            xs = shapes.get(ins[0])
            if xs is None:   # a shape decided by a value read at Run (the data pool)
                xs = _runtime_shapes(spec, "(alt values)" in detail).get(ins[0])
            if op in REDUCES:
                axes = _tensor(spec, ins[1]) if len(ins) > 1 and ins[1] else None
                neg = bool(axes) and any(a < 0 for a in axes["data"])
            else:
                neg = n["attrs"].get("axis", 0) < 0
            if xs is not None and 0 in xs and neg:
                return (f"ORT bug: {op} of an empty input ignores negative axes (keeps them in the output "
                        "shape; ONNX shape inference and NumPy reduce them)")
        if op == "MatMul":
            shapes = _shapes(spec) if shapes is None else shapes
            a, b = shapes.get(ins[0]), shapes.get(ins[1])
            if a is None or b is None:   # shapes decided by values read at Run (the data pool)
                run_shapes = _runtime_shapes(spec, "(alt values)" in detail)
                a, b = a or run_shapes.get(ins[0]), b or run_shapes.get(ins[1])
            if (a is not None and b is not None and res["class"] == "one-sided" and "MatMul node" in detail
                    and "cannot broadcast" in detail and _matmul_zero_broadcast(a, b)):
                return ("ORT bug: MatMul batch broadcasting refuses a 0 against a 1 (NumPy, which ONNX MatMul "
                        "follows, gives an empty result; microsoft/onnxruntime PR #25663)")
            if a is not None and b is not None and mismatch and len(a) >= 1 and a[-1] == 0:
                return ("ORT bug: MatMul with an empty inner dimension (K = 0) leaves ORT's output "
                        "uninitialised (the sum of nothing is 0, as the EP gives)")
        if (op == "GroupQueryAttention" and res["class"] == "one-sided" and "ORT errors" in detail
                and "shall not be less than total_sequence_length" in detail):
            return ("GroupQueryAttention: ORT refuses a total_sequence_length past the rotary caches' rows even where "
                    "every position it rotates is inside them; the EP checks the positions (docs/OPERATORS.md: "
                    "decode buckets pad that length)")
        if op == "Pow" and mismatch:
            base, ex = _tensor(spec, ins[0]), _tensor(spec, ins[1])
            if base and ex and base["dtype"] in INT_RANGE and ex["dtype"] in INT_RANGE:
                import numpy as np
                lo, hi = INT_RANGE[base["dtype"]]
                bb, ee = np.broadcast_arrays(np.array(base["data"], dtype=object).reshape(base["shape"]),
                                             np.array(ex["data"], dtype=object).reshape(ex["shape"]))
                if any(e >= 0 and not lo <= b ** e <= hi for b, e in zip(bb.ravel(), ee.ravel())):
                    return ("integer Pow overflow: undefined in ONNX; the EP wraps (docs/OPERATORS.md), ORT casts "
                            "a double pow (INT_MIN on x86)")
        if op == "LayerNormalization" and mismatch and _layernorm_constant_row(spec, n):
            return ("LayerNormalization of a row constant up to rounding: its output is rounding error over "
                    "sqrt(epsilon) (ORT accumulates float32 in double, the EP in float32)")
        if op == "TopK" and res["class"] == "one-sided" and "EP errors" in detail and len(ins) > 1:
            if any(not -(2**31) <= k < 2**31 for k in _values(spec, ins[1])):
                return ("ORT bug: TopK truncates K to 32 bits (K = 2^40 gives 0 elements, 2^32 + 7 is refused as 7); "
                        "the EP refuses a K outside [0, axis size]")
        if op == "CumSum" and res["class"] == "one-sided" and "EP errors" in detail and "axis" in detail:
            shapes = _shapes(spec) if shapes is None else shapes
            xs = shapes.get(ins[0]) or _runtime_shapes(spec, "(alt values)" in detail).get(ins[0])
            if xs is not None and 0 in xs:
                return ("ORT skips CumSum's axis check on an empty input (it returns the input); the EP refuses an "
                        "axis outside [-rank, rank) whatever the input")
        if op == "Resize" and res["class"] == "one-sided" and "ORT errors" in detail and "upsamplebase.h" in detail \
                and ("only supports" in detail or "ScalesValidation" in detail):
            return ("ORT's CPU Resize implements linear and cubic only over the innermost two (linear: or three) axes "
                    "(outer scales must be 1); the EP resizes every axis the scales name, as ONNX defines")
        if op == "RoiAlign" and res["class"] == "one-sided" and "past int64" in detail:
            return ("RoiAlign with a roi whose sample grid count is past int64: ORT's float-to-int conversion is "
                    "undefined (x86: INT64_MIN, then its table size wraps: zeros or an error); the EP refuses")
        attrs = n["attrs"]
        if res["class"] == "one-sided" and "EP errors" in detail and "axis" in detail and \
                not -(2**31) <= attrs.get("axis", 0) < 2**31:
            return ("ORT reads this axis attribute as 32 bits (2^62 checks as 0); the EP refuses an axis outside "
                    "[-rank, rank)")
        if op in ("MaxPool", "AveragePool", "LpPool") and res["class"] == "one-sided" and "must lie in [0, 2^31)" in detail:
            return ("the EP bounds pooling's kernel, strides, dilations and pads to int32 (its windows are MLX "
                    "arrays); ORT's loops clip each window to the input")
        if op == "Split" and res["class"] == "one-sided" and "EP errors" in detail and "num_outputs" in detail:
            return "ORT's Split takes a num_outputs that differs from the node's outputs; the EP refuses it"
        if op == "GridSample" and len(ins) > 1:
            import math
            if any(not math.isfinite(v) or abs(v) >= 1e17 for v in _values(spec, ins[1])):
                return ("GridSample with a grid coordinate that is infinite or past int64 once scaled: ORT converts "
                        "it to an integer index (undefined in C++; INT64_MIN on x86, or a pixel after its clamps), "
                        "the EP treats it as outside the image (padding_mode)")
        if op == "GatherND" and res["class"] == "one-sided" and "EP errors" in detail and "batch dimension" in detail:
            return ("ORT's GatherND accepts an indices batch that is a multiple of the data's (it checks "
                    "divisibility); ONNX requires the batch dims equal, and the EP refuses others")
        if op == "Concat" and res["class"] == "one-sided" and "EP errors" in detail:
            shapes = _shapes(spec) if shapes is None else shapes
            run_shapes = None
            for i in ins:
                xs = shapes.get(i)
                if xs is None:
                    run_shapes = _runtime_shapes(spec, "(alt values)" in detail) if run_shapes is None else run_shapes
                    xs = run_shapes.get(i)
                if xs is not None and 0 in xs:
                    return ("ORT bug: Concat does not check an empty input's dims against the others' (ONNX requires "
                            "them equal): [0, 4] with [2, 3] on axis 1 gives ORT a [2, 7] output, 8 of its values never "
                            "written; the EP refuses the mismatch")
        if op == "GroupQueryAttention" and res["class"] == "one-sided" and "ORT errors" in detail and \
                "Shape mismatch attempting to re-use buffer" in detail:
            return ("ORT bug: its shape inference gives GroupQueryAttention's present the past's length, and its "
                    "allocation planner reuses a buffer of that shape, so a total_sequence_length past the past's "
                    "length (a longer present, which its kernel computes) fails in ORT's framework, not its kernel")
        if op == "ConcatFromSequence" and res["class"] == "one-sided" and "EP errors" in detail and \
                (re.search(r"has dimension \d+ = 0,|tensor \d+ has 0\b", detail) or _sequence_gets_empty(spec)):
            return ("ORT bug: ConcatFromSequence, like Concat, does not check an empty tensor's dims against the "
                    "others' (ONNX requires them equal): [1, 1, 5] and [1, 0, 5] on axis 0 gives ORT a [2, 1, 5] "
                    "output whose second row is never written; the EP refuses the mismatch")
        if op == "Slice" and len(ins) > 2:
            ends = _tensor(spec, ins[2])
            steps = _tensor(spec, ins[4]) if len(ins) > 4 and ins[4] else None
            if ends and steps and any(e == I64_MAX and st < 0 for key in ("data", "alt")
                                      for e, st in zip(ends.get(key, ends["data"]), steps.get(key, steps["data"]))):
                return ("ORT convention: Slice end INT64_MAX with a negative step runs to the start of the axis "
                        "(the ONNX spec clamps it to dim-1: an empty slice, which the EP gives)")
    if res["class"] == "one-sided" and "EP errors" in detail and \
            ("does not fit in int32" in detail or "more than an MLX dimension holds" in detail or
             "is outside the supported range [-2147483648, 2147483647]" in detail or
             "the most MLX's 32-bit dimensions hold" in detail):
        return ("MLX's dims are int32: a result or intermediate with a dim past 2^31 - 1 (an empty one, which "
                "ORT can give, or a pooling window padded past it) cannot be made; the EP refuses it")
    if res["class"] == "one-sided" and res.get("symbolic"):   # harness.ort_symbolic
        if "re-use buffer" in res["symbolic"]:
            return ("ORT bug: with static input shapes holding a 0, ORT's allocation planner reuses a buffer of "
                    "another shape ('Shape mismatch attempting to re-use buffer'); with symbolic input dims ORT "
                    "answers, as the EP does")
        return "ORT fails only with these static input shapes; with symbolic input dims it answers, as the EP does"
    if mismatch and res.get("stepwise"):   # harness.stepwise_values: ORT's kernels run node by node
        import harness
        if "float16" in harness.value_dtypes(spec).values():
            return ("float16 rounding: ORT runs float16 nodes that lack a float16 kernel in float32 and keeps "
                    "float32 between them (and drops float32->float16->float32 cast pairs); its kernels run "
                    "node by node, each output in its declared dtype, give the EP's answer")
        return "ORT's whole-graph rewrites: ORT's own kernels run node by node give the EP's answer"
    if mismatch and res.get("amplified"):   # harness.amplified
        return "sensitivity: a difference within tolerance upstream crosses a step or is amplified: " + res["amplified"]
    return None


# ---- driver --------------------------------------------------------------------------------------

def save_case(spec, res, reason=None):
    os.makedirs(CASES, exist_ok=True)
    pool = spec.get("pool", "core")
    path = os.path.join(CASES, f"seed{spec['seed']}.json" if pool == "core" else f"{pool}-seed{spec['seed']}.json")
    case = {"seed": spec["seed"], "found": res["class"], "detail": res.get("detail", ""),
            "xfail": reason, "spec": spec}
    with open(path, "w") as f:
        json.dump(case, f, indent=1)
    return path


def run(seeds, jobs=1, save=False, minimize=True, timeout=60.0, log=None, pool="core"):
    """Runs the seeds; returns (counts, failures [(seed, res, minimised spec, min res, explanation)])."""
    counts = collections.Counter()
    failures = []
    lock = threading.Lock()
    seeds = list(seeds)

    def work(part):
        w = Worker(timeout)
        try:
            for s in part:
                res = w.call({"seed": s, "pool": pool})
                cls = res["class"]
                entry = None
                if cls in FAILURES:
                    spec = gen.generate(s, pool)
                    mspec, mres = minimise(w, spec, res) if minimize and cls not in ("crash", "hang") else (spec, res)
                    why = explain(mspec, mres)
                    if cls == "crash" and not why and crash_is_ort(spec):
                        why = ("ORT's CPU EP itself dies on this graph (the reference, in the same worker); the EP alone "
                               "runs it")
                    if cls == "hang" and not why and hang_is_ort(spec):
                        why = ("ORT's CPU EP itself does not finish this graph (the reference, in the same worker); the "
                               "EP alone runs it")
                    entry = (s, res, mspec, mres, why)
                    if why:
                        cls = "explained"
                with lock:
                    counts[cls] += 1
                    if entry:
                        failures.append(entry)
                        if log:
                            print(f"seed {s}: {res['class']} ({why or 'unexplained'}): {mres.get('detail', '')[:200]}",
                                  file=log, flush=True)
        finally:
            w.stop()

    threads = [threading.Thread(target=work, args=(seeds[i::jobs],)) for i in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if save:
        for s, res, mspec, mres, why in failures:
            if not why:
                save_case(mspec, mres)
    return counts, sorted(failures, key=lambda f: f[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--pool", choices=gen.POOLS, default="core",
                    help="core: the ops of gen.py; data: ops reading indices/sizes from tensors, replayed on other values")
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--save", action="store_true", help="save unexplained failures under tests/fuzz/cases/")
    ap.add_argument("--no-minimise", action="store_true")
    ap.add_argument("--json", help="write counts and failures here")
    a = ap.parse_args()
    t0 = time.time()
    counts, failures = run(range(a.seed, a.seed + a.count), a.jobs, a.save, not a.no_minimise, a.timeout, log=sys.stdout,
                           pool=a.pool)
    dt = time.time() - t0
    print(f"{a.count} graphs ({a.pool} pool, seeds {a.seed}..{a.seed + a.count - 1}) in {dt:.0f} s:",
          ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"count": a.count, "seed": a.seed, "pool": a.pool, "seconds": dt, "counts": counts,
                       "failures": [{"seed": s, "class": r["class"], "detail": r.get("detail"),
                                     "minimised": m, "minimised_result": mr, "explanation": why}
                                    for s, r, m, mr, why in failures]}, f, indent=1)
    sys.exit(1 if any(counts[c] for c in FAILURES) else 0)


if __name__ == "__main__":
    main()
