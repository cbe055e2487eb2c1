"""Parity of control flow (src/ops/control.c) against ORT's CPU EP, in strict mode (every node,
bodies included, on MLX), eager, traced and replayed (assert_parity's three Runs):

- If: a condition from data (eager: the taken branch; traced: both branches selected), a constant
  condition (the taken branch alone is claimed: the other may hold an op without a lowering),
  branch outputs of different shapes (the trace fails, the signature runs eagerly), outer-scope
  values, a check in the untaken branch that must not fail the Run;
- Loop: constant, shape-derived and runtime trip counts, an exit condition computed by the body
  (masked when traced), loop-carried values and scan outputs, zero iterations, outer-scope values,
  an If nested in the body, a trip count without an exit condition beyond the EP's limit;
- Scan (opset 9+): several states and scan inputs, any axes (negative too) and directions;
- the claim report: body nodes are declined in ORT's body calls and the parent's reason names the
  body node that blocks it.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import TensorProto as TP, helper

import onnxruntime_ep_mlx as mlx_ep
from parity import assert_parity, claim_report, make_model, run_cpu

F = TP.FLOAT


def vi(name, dtype=F, shape=None):
    return helper.make_tensor_value_info(name, dtype, shape)


def run_report(tmp_path, model, feeds_list, options=None):
    """Outputs of every Run of one strict session, and the run report's counters."""
    report = tmp_path / "report.txt"
    sess = mlx_ep.session(model, options={**(options or {}), "report": str(report)}, strict=True)
    outs = [sess.run(None, f) for f in feeds_list]
    del sess  # the run report is written when the session releases its clusters
    text = report.read_text()
    stats = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", text.split("run report:")[1])}
    return outs, stats, text


# ---- If --------------------------------------------------------------------------------------

def if_model(cond_const=None, else_op="Mul", else_extra=()):
    """y = -(If c: relu(x) + w else: relu(x) <else_op> w); w is an outer-scope initializer."""
    then_g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["t"])], "then", [], [vi("t")])
    else_g = helper.make_graph([*else_extra, helper.make_node(else_op, ["x", "w"], ["e"])], "else", [], [vi("e")])
    nodes = [helper.make_node("Relu", ["x0"], ["x"]),
             helper.make_node("If", ["c"], ["y0"], then_branch=then_g, else_branch=else_g),
             helper.make_node("Neg", ["y0"], ["y"])]
    inits = {"w": np.full((3,), 2.0, np.float32)}
    ins = [("x0", F, [3])]
    if cond_const is None:
        ins.append(("c", TP.BOOL, []))
    else:
        inits["c"] = np.array(cond_const)
    return make_model(nodes, ins, [("y", F, None)], inits.items())


X3 = np.array([1, -2, 3], np.float32)


@pytest.mark.parametrize("cond", [True, False])
def test_if_runtime_condition(cond):
    assert_parity(if_model(), {"x0": X3, "c": np.array(cond)})


def test_if_runtime_condition_one_trace(tmp_path):
    # alternating conditions: one signature, one trace, every Run matches its branch
    feeds = [{"x0": X3 * (i + 1), "c": np.array(i % 2 == 0)} for i in range(6)]
    outs, st, _ = run_report(tmp_path, if_model(), feeds)
    for f, got in zip(feeds, outs):
        np.testing.assert_allclose(got[0], run_cpu(if_model(), f)[0], rtol=1e-6)
    assert st["traces"] == 1 and st["trace_failures"] == 0 and st["compiled_runs"] == 5


@pytest.mark.parametrize("cond", [True, False])
def test_if_constant_condition(cond):
    assert_parity(if_model(cond_const=cond), {"x0": X3})


def test_if_constant_condition_claims_the_taken_branch_alone(tmp_path):
    # the else branch holds a node the EP cannot lower (a string tensor); never taken, it is not claimed
    to_str = helper.make_node("Cast", ["x"], ["xs"], name="str", to=TP.STRING)
    back = helper.make_node("Cast", ["xs"], ["x1"], to=F)
    model = if_model(cond_const=True, else_extra=(to_str, back))
    assert_parity(model, {"x0": X3})
    text = claim_report(if_model(else_extra=(to_str, back)), tmp_path)
    assert re.search(r"declined If x1: body 'else_branch' node 'str' \(Cast\)", text), text
    assert "in a control-flow body: claimed or declined with its node, whole" in text


def if_shapes_model():
    """Branches of different output shapes: then gives x[:2], else gives x."""
    starts, ends = helper.make_tensor("st", TP.INT64, [1], [0]), helper.make_tensor("en", TP.INT64, [1], [2])
    then_g = helper.make_graph([helper.make_node("Slice", ["x", "st", "en"], ["t"])], "then", [], [vi("t")],
                               initializer=[starts, ends])
    else_g = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [], [vi("e")])
    nodes = [helper.make_node("Abs", ["x0"], ["x"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    return make_model(nodes, [("x0", F, [3]), ("c", TP.BOOL, [])], [("y", F, None)])


def test_if_branch_outputs_of_different_shapes(tmp_path):
    for cond in (True, False):
        assert_parity(if_shapes_model(), {"x0": X3, "c": np.array(cond)})
    _, st, text = run_report(tmp_path, if_shapes_model(), [{"x0": X3, "c": np.array(True)}] * 3)
    assert st["trace_failures"] == 1 and st["eager_runs"] == 3 and st["unexpected_trace_failures"] == 0
    assert "by design: " in text and "differs in shape or dtype between the branches" in text


def test_if_untaken_branch_checks_do_not_fail(tmp_path):
    # the else branch gathers with index 7 out of [-3, 3): an error only when it is taken
    idx = helper.make_tensor("i", TP.INT64, [1], [7])
    model = if_model(else_op="Add", else_extra=())
    then_g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["t"])], "then", [], [vi("t")])
    else_g = helper.make_graph([helper.make_node("Gather", ["x", "i"], ["e"])], "else", [], [vi("e")],
                               initializer=[idx])
    nodes = [helper.make_node("Relu", ["x0"], ["x"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    model = make_model(nodes, [("x0", F, [3]), ("c", TP.BOOL, [])], [("y", F, None)],
                       {"w": np.ones(1, np.float32)}.items())
    assert_parity(model, {"x0": X3, "c": np.array(True)})
    sess = mlx_ep.session(model, strict=True)
    for run in range(3):  # eager, traced, replayed
        sess.run(None, {"x0": X3, "c": np.array(True)})
        with pytest.raises(Exception, match=r"index 7 out of range"):
            sess.run(None, {"x0": X3, "c": np.array(False)})


# ---- Loop ------------------------------------------------------------------------------------

def loop_body(exit_below=None, scan=True, nested_if=False):
    """body(i, cond, acc) -> (cond', acc + x * i, [acc + x * i]); x is an outer-scope value.
    exit_below: the body's condition becomes sum(acc') < exit_below (an exit computed from data)."""
    nodes = [helper.make_node("Cast", ["i"], ["fi"], to=F),
             helper.make_node("Mul", ["x", "fi"], ["xi"]),
             helper.make_node("Add", ["acc", "xi"], ["acc2"])]
    outs = [vi("cond_out", TP.BOOL, []), vi("acc_out")]
    if nested_if:  # acc' = (i even ? acc2 : acc2 * 2)
        two = helper.make_tensor("two", TP.INT64, [], [2])
        zero = helper.make_tensor("zero", TP.INT64, [], [0])
        nodes += [helper.make_node("Mod", ["i", "two"], ["r"]), helper.make_node("Equal", ["r", "zero"], ["even"])]
        then_g = helper.make_graph([helper.make_node("Identity", ["acc2"], ["a_t"])], "t", [], [vi("a_t")])
        else_g = helper.make_graph([helper.make_node("Add", ["acc2", "acc2"], ["a_e"])], "e", [], [vi("a_e")])
        nodes.append(helper.make_node("If", ["even"], ["acc3"], then_branch=then_g, else_branch=else_g))
        inits = [two, zero]
    else:
        nodes.append(helper.make_node("Identity", ["acc2"], ["acc3"]))
        inits = []
    nodes.append(helper.make_node("Identity", ["acc3"], ["acc_out"]))
    if exit_below is None:
        nodes.append(helper.make_node("Identity", ["cond"], ["cond_out"]))
    else:
        inits.append(helper.make_tensor("lim", F, [], [exit_below]))
        nodes += [helper.make_node("ReduceSum", ["acc3"], ["tot"], keepdims=0),
                  helper.make_node("Less", ["tot", "lim"], ["cond_out"])]
    if scan:
        nodes.append(helper.make_node("Identity", ["acc3"], ["scan_out"]))
        outs.append(vi("scan_out", F, [3]))
    return helper.make_graph(nodes, "body", [vi("i", TP.INT64, []), vi("cond", TP.BOOL, []), vi("acc")], outs,
                             initializer=inits)


def loop_model(trip="const", n=4, cond=None, **body):
    """trip: 'const' (an initializer), 'shape' (Shape(x)[0]), 'input' (a graph input M), 'none'."""
    scan = body.get("scan", True)
    nodes = [helper.make_node("Sigmoid", ["x0"], ["x"])]
    inits = {"acc0": np.zeros(3, np.float32)}
    ins = [("x0", F, [3]), ("s", F, None)]
    if trip == "const":
        inits["M"] = np.array(n, np.int64)
    elif trip == "shape":
        nodes += [helper.make_node("Shape", ["s"], ["sh"]),
                  helper.make_node("Gather", ["sh", "zero"], ["M"], axis=0)]
        inits["zero"] = np.array(0, np.int64)
    elif trip == "input":
        ins.append(("M", TP.INT64, []))
    cond_name = ""
    if cond == "const":
        inits["c0"] = np.array(True)
        cond_name = "c0"
    elif cond == "input":
        ins.append(("c0", TP.BOOL, []))
        cond_name = "c0"
    outs = ["acc_final"] + (["scans"] if scan else [])
    nodes.append(helper.make_node("Loop", ["M" if trip != "none" else "", cond_name, "acc0"], outs,
                                  body=loop_body(**body)))
    return make_model(nodes, ins, [(o, F, None) for o in outs], inits.items())


XL = np.array([0.5, -1.0, 2.0], np.float32)
S5 = np.zeros(5, np.float32)  # its length is the shape-derived trip count


@pytest.mark.parametrize("trip", ["const", "shape", "input"])
def test_loop_trip_counts(trip):
    feeds = {"x0": XL, "s": S5}
    if trip == "input":
        feeds["M"] = np.array(6, np.int64)
    assert_parity(loop_model(trip), feeds)


def test_loop_constant_trip_count_is_unrolled_in_one_trace(tmp_path):
    _, st, _ = run_report(tmp_path, loop_model("shape"), [{"x0": XL * k, "s": S5} for k in range(4)])
    assert st["traces"] == 1 and st["trace_failures"] == 0 and st["compiled_runs"] == 3


def test_loop_runtime_trip_count_runs_eagerly(tmp_path):
    feeds = [{"x0": XL, "s": S5, "M": np.array(m, np.int64)} for m in (3, 0, 7)]
    outs, st, text = run_report(tmp_path, loop_model("input"), feeds)
    for f, got in zip(feeds, outs):
        for g, w in zip(got, run_cpu(loop_model("input"), f)):
            np.testing.assert_allclose(g, w, rtol=1e-6)
    assert st["traces"] == 0 and st["trace_failures"] == 1 and st["eager_runs"] == 3
    assert st["unexpected_trace_failures"] == 0
    assert "by design: " in text and "the trip count depends on data" in text


@pytest.mark.parametrize("cond", ["const", "input"])
def test_loop_initial_condition(cond):
    feeds = {"x0": XL, "s": S5}
    if cond == "input":
        for c in (True, False):
            assert_parity(loop_model("const", cond=cond), {**feeds, "c0": np.array(c)})
    else:
        assert_parity(loop_model("const", cond=cond), feeds)


def test_loop_early_exit_masked_in_a_trace(tmp_path):
    # no scan outputs: the exit computed by the body is followed with a mask, one trace
    model = loop_model("const", n=10, exit_below=6.0, scan=False)
    feeds = [{"x0": XL * k, "s": S5} for k in (1.0, 0.2, 3.0, 0.0)]
    for f in feeds:
        assert_parity(model, f)
    _, st, _ = run_report(tmp_path, model, feeds)
    assert st["traces"] == 1 and st["trace_failures"] == 0 and st["compiled_runs"] == 3


def test_loop_early_exit_with_scan_outputs():
    # the scan outputs' length depends on data: a host loop (eager), still exact
    for k in (1.0, 0.2, 3.0):
        assert_parity(loop_model("const", n=10, exit_below=6.0), {"x0": XL * k, "s": S5})


def test_loop_without_trip_count_exits_on_its_condition():
    assert_parity(loop_model("none", exit_below=6.0), {"x0": XL, "s": S5})


def test_loop_zero_iterations():
    assert_parity(loop_model("const", n=0), {"x0": XL, "s": S5})


def test_loop_with_nested_if():
    assert_parity(loop_model("const", n=5, nested_if=True), {"x0": XL, "s": S5})


def test_loop_trip_count_beyond_the_limit_fails_clearly():
    sess = mlx_ep.session(loop_model("input", scan=False), strict=True)
    with pytest.raises(Exception, match=r"\(Loop\): trip count 1099511627776 without an exit condition"):
        sess.run(None, {"x0": XL, "s": S5, "M": np.array(1 << 40, np.int64)})
    sess.run(None, {"x0": XL, "s": S5, "M": np.array(3, np.int64)})  # the session keeps working


# ---- Scan ------------------------------------------------------------------------------------

def scan_body():
    """Both Scan forms' body: states (sum, running max) over scan inputs a, b; per step the sum and
    the product a * b."""
    return helper.make_graph(
        [helper.make_node("Add", ["s_in", "a"], ["s_add"]), helper.make_node("Add", ["s_add", "b"], ["s_out"]),
         helper.make_node("Max", ["m_in", "a"], ["m_out"]), helper.make_node("Mul", ["a", "b"], ["p"]),
         helper.make_node("Identity", ["s_out"], ["s_scan"])],
        "body", [vi(n, F, [3]) for n in ("s_in", "m_in", "a", "b")],
        [vi(n, F, [3]) for n in ("s_out", "m_out", "s_scan", "p")])


def scan_model(in_axes=None, in_dirs=None, out_axes=None, out_dirs=None, rank=2):
    """Two states (sum, running max) over two scan inputs; scan outputs: the sum after each step
    and the step's product."""
    body = scan_body()
    attrs = {"num_scan_inputs": 2}
    if in_axes is not None:
        attrs["scan_input_axes"] = in_axes
    if in_dirs is not None:
        attrs["scan_input_directions"] = in_dirs
    if out_axes is not None:
        attrs["scan_output_axes"] = out_axes
    if out_dirs is not None:
        attrs["scan_output_directions"] = out_dirs
    node = helper.make_node("Scan", ["s0", "m0", "A", "B"], ["s", "m", "sums", "prods"], body=body, **attrs)
    return make_model([node], [("s0", F, None), ("m0", F, None), ("A", F, None), ("B", F, None)],
                      [(o, F, None) for o in ("s", "m", "sums", "prods")], opset=16)


def scan_feeds(rng, a_axis=0, b_axis=0, steps=4, width=3):
    a = rng.standard_normal((steps, width)).astype(np.float32)
    b = rng.standard_normal((steps, width)).astype(np.float32)
    return {"s0": np.zeros(width, np.float32), "m0": np.full(width, -9.0, np.float32),
            "A": np.moveaxis(a, 0, a_axis).copy(), "B": np.moveaxis(b, 0, b_axis).copy()}


@pytest.mark.parametrize("in_axes,in_dirs,out_axes,out_dirs", [
    (None, None, None, None),
    ([1, 0], [1, 0], [1, 0], [0, 1]),
    ([-1, 0], [0, 1], [-1, -2], [1, 1]),
])
def test_scan_axes_and_directions(in_axes, in_dirs, out_axes, out_dirs):
    rng = np.random.default_rng(3)
    a_axis = (in_axes or [0, 0])[0] % 2
    b_axis = (in_axes or [0, 0])[1] % 2
    assert_parity(scan_model(in_axes, in_dirs, out_axes, out_dirs), scan_feeds(rng, a_axis, b_axis))


def test_scan_traces_once(tmp_path):
    rng = np.random.default_rng(4)
    _, st, _ = run_report(tmp_path, scan_model(), [scan_feeds(rng) for _ in range(4)])
    assert st["traces"] == 1 and st["trace_failures"] == 0


def test_scan_steps_mismatch_fails_like_ort():
    feeds = scan_feeds(np.random.default_rng(5))
    feeds["B"] = feeds["B"][:3]
    with pytest.raises(Exception, match=r"Scan inputs have inconsistent sequence lengths"):
        run_cpu(scan_model(), feeds)
    with pytest.raises(Exception, match=r"\(Scan\): scan input 1 has 3 steps"):
        mlx_ep.session(scan_model(), strict=True).run(None, feeds)


def test_long_host_loop_and_scan():
    # past 256 iterations an eager loop evaluates its state and frees the iterations before
    assert_parity(loop_model("input"), {"x0": XL, "s": S5, "M": np.array(300, np.int64)})
    assert_parity(scan_model(), scan_feeds(np.random.default_rng(6), steps=300))


# ---- Scan opset 8 ----------------------------------------------------------------------------

def scan8_model(directions=None, with_lens=True):
    """Opset 8: batch axis 0, optional sequence_lens; a running sum and a running max as states,
    the sum after each step and the product of the two scan inputs as scan outputs."""
    body = scan_body()
    attrs = {"num_scan_inputs": 2}
    if directions is not None:
        attrs["directions"] = directions
    ins = [("s0", F, None), ("m0", F, None), ("A", F, None), ("B", F, None)]
    if with_lens:
        ins.insert(0, ("L", TP.INT64, None))
    node = helper.make_node("Scan", ["L" if with_lens else "", "s0", "m0", "A", "B"], ["s", "m", "sums", "prods"],
                            body=body, **attrs)
    return make_model([node], ins, [(o, F, None) for o in ("s", "m", "sums", "prods")], opset=8)


def scan8_feeds(rng, lens=None, batch=2, steps=4):
    f = {"s0": np.zeros((batch, 3), np.float32), "m0": np.full((batch, 3), -9.0, np.float32),
         "A": rng.standard_normal((batch, steps, 3)).astype(np.float32),
         "B": rng.standard_normal((batch, steps, 3)).astype(np.float32)}
    if lens is not None:
        f["L"] = np.array(lens, np.int64)
    return f


@pytest.mark.parametrize("directions", [None, [0, 1], [1, 1]])
@pytest.mark.parametrize("lens", [None, [4, 2], [1, 3]])
def test_scan8_batch_and_sequence_lens(directions, lens):
    rng = np.random.default_rng(7)
    assert_parity(scan8_model(directions, with_lens=lens is not None), scan8_feeds(rng, lens))


def test_scan8_traces_once_without_sequence_lens(tmp_path):
    rng = np.random.default_rng(8)
    _, st, _ = run_report(tmp_path, scan8_model(with_lens=False), [scan8_feeds(rng) for _ in range(4)])
    assert st["traces"] == 1 and st["trace_failures"] == 0


@pytest.mark.parametrize("lens", [[0, 2], [5, 1]])
def test_scan8_sequence_lens_out_of_range_fails_like_ort(lens):
    feeds = scan8_feeds(np.random.default_rng(9), lens)
    with pytest.raises(Exception, match="sequence_lens"):
        run_cpu(scan8_model(), feeds)
    sess = mlx_ep.session(scan8_model(), strict=True)
    with pytest.raises(Exception, match=r"\(Scan\): sequence_lens\[\d\] = -?\d+ is outside \[1, 4\]"):
        sess.run(None, feeds)
    sess.run(None, scan8_feeds(np.random.default_rng(9), [4, 4]))  # the session keeps working


# ---- host loops replay a compiled body --------------------------------------------------------

def test_host_loop_replays_one_compiled_body(tmp_path):
    # a runtime trip count: the cluster runs eagerly, its Loop as a host loop whose body is traced
    # once per body signature and replayed in every iteration (and every later Run)
    feeds = [{"x0": XL * k, "s": S5, "M": np.array(m, np.int64)} for k, m in ((1, 5), (2, 300), (3, 7))]
    outs, st, _ = run_report(tmp_path, loop_model("input"), feeds)
    for f, got in zip(feeds, outs):
        for g, w in zip(got, run_cpu(loop_model("input"), f)):
            np.testing.assert_allclose(g, w, rtol=1e-6)
    assert st["body_traces"] == 1 and st["body_trace_failures"] == 0 and st["body_replays"] == 312


def host_loop_gather_model():
    """A host loop (trip count from data) whose body gathers x[idx + i]: out of range from some
    iteration on, a check of the compiled body."""
    body = helper.make_graph(
        [helper.make_node("Add", ["idx", "i"], ["j"]), helper.make_node("Gather", ["x", "j"], ["g"]),
         helper.make_node("Add", ["acc", "g"], ["acc_out"]), helper.make_node("Identity", ["cond"], ["cond_out"])],
        "body", [vi("i", TP.INT64, []), vi("cond", TP.BOOL, []), vi("acc", F, [])],
        [vi("cond_out", TP.BOOL, []), vi("acc_out", F, [])])
    node = helper.make_node("Loop", ["M", "", "acc0"], ["y"], body=body)
    return make_model([node], [("M", TP.INT64, []), ("x", F, [5]), ("idx", TP.INT64, [])], [("y", F, None)],
                      {"acc0": np.zeros((), np.float32)}.items())


def test_host_loop_compiled_body_checks():
    model = host_loop_gather_model()
    x = np.arange(5, dtype=np.float32)
    good = {"M": np.array(3, np.int64), "x": x, "idx": np.array(1, np.int64)}
    bad = {"M": np.array(6, np.int64), "x": x, "idx": np.array(1, np.int64)}  # idx + 4 = 5: out of range
    with pytest.raises(Exception, match=r"indices element out of data bounds, idx=5"):
        run_cpu(model, bad)
    sess = mlx_ep.session(model, strict=True)
    want = run_cpu(model, good)[0]
    for _ in range(3):
        np.testing.assert_allclose(sess.run(None, good)[0], want)
        with pytest.raises(Exception, match=r"node '.*' \(Gather\): index 5 out of range \[-5, 5\)"):
            sess.run(None, bad)


def test_host_loop_body_read_on_the_host_is_lowered_per_iteration(tmp_path):
    # Range(0, i + 1) in the body: a size read on the host, so the body cannot be traced; it is
    # lowered in every iteration as before, and the result is exact
    body = helper.make_graph(
        [helper.make_node("Add", ["i", "one"], ["n"]), helper.make_node("Range", ["zero", "n", "one"], ["r"]),
         helper.make_node("ReduceSum", ["r"], ["t"], keepdims=0), helper.make_node("Add", ["acc", "t"], ["acc_out"]),
         helper.make_node("Identity", ["cond"], ["cond_out"])],
        "body", [vi("i", TP.INT64, []), vi("cond", TP.BOOL, []), vi("acc", TP.INT64, [])],
        [vi("cond_out", TP.BOOL, []), vi("acc_out", TP.INT64, [])],
        initializer=[helper.make_tensor("one", TP.INT64, [], [1]), helper.make_tensor("zero", TP.INT64, [], [0])])
    model = make_model([helper.make_node("Loop", ["M", "", "acc0"], ["y"], body=body)], [("M", TP.INT64, [])],
                       [("y", TP.INT64, None)], {"acc0": np.zeros((), np.int64)}.items())
    feeds = [{"M": np.array(m, np.int64)} for m in (4, 9)]
    outs, st, _ = run_report(tmp_path, model, feeds)
    for f, got in zip(feeds, outs):
        np.testing.assert_array_equal(got[0], run_cpu(model, f)[0])
    assert st["body_trace_failures"] >= 1 and st["body_replays"] == 0
    assert st["unexpected_trace_failures"] == 0  # the body reads a value on the host: refused by design
