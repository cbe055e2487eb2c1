"""Parity of the recurrent family (src/ops/rnn.c) against ORT's CPU EP: RNN, GRU and LSTM in every
direction, with biases, initial states, sequence_lens (including reverse and length 0), clip, every
activation function with its alpha/beta, peepholes, input_forget, linear_before_reset, every subset
of the optional outputs, opsets 7/14/22, and the forms ORT's CPU EP cannot run itself:

- layout=1 (ORT's CPU EP rejects it): compared with ORT running the same weights in layout 0 on the
  transposed inputs, outputs transposed back;
- float16: ORT's CPU EP has no float16 kernel for these ops, but it inserts casts and runs them
  in float32, as the lowering does (parity as usual).

Tolerances: the lowering unrolls the time loop, so rounding differences (MLX's vs MLAS's
sigmoid/tanh, the rational tanh approximation of ORT's GRU, the summation order of the matmuls)
are fed back through the recurrence at every step. With weights scaled so the recurrence is
contractive they stay at a few float32 ulp of the O(1) outputs (measured: at most 3e-7 absolute
over 40 steps, bidirectional): float32 is compared with rtol=1e-5, atol=1e-6 (the absolute part
covers outputs near 0, whose relative differences reach 1e-4); float16 with rtol=atol=1e-3 (one
float16 rounding of the result, 4.9e-4 relative, on top of those).
"""
from __future__ import annotations

import itertools

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from parity import (assert_parity, child_pythonpath, claim_report, cpu_has, make_model, run_cpu, run_mlx,
                    _assert_outputs_match)

F32_TOL = dict(rtol=1e-5, atol=1e-6)
F16_TOL = dict(rtol=1e-3, atol=1e-3)
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
INPUT_NAMES = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"]
OUTPUT_NAMES = ["Y", "Y_h", "Y_c"]
ONNX_OF = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16,
           np.dtype(np.int32): TensorProto.INT32}


def rnn_data(op, T=5, B=3, I=4, H=6, dirs=1, *, bias=True, init=True, peep=False, lens=None, seed=0,
             dtype=np.float32, scale=0.6):
    """Inputs by name (None: absent) for layout 0."""
    rng = np.random.default_rng(seed)
    G = GATES[op]
    u = lambda *shape, s=1.0: rng.uniform(-s, s, size=shape).astype(dtype)  # noqa: E731
    d = {"X": u(T, B, I, s=1.5), "W": u(dirs, G * H, I, s=scale), "R": u(dirs, G * H, H, s=scale),
         "B": u(dirs, 2 * G * H, s=0.5) if bias else None,
         "sequence_lens": None if lens is None else np.asarray(lens, np.int32),
         "initial_h": u(dirs, B, H) if init else None,
         "initial_c": u(dirs, B, H) if init and op == "LSTM" else None,
         "P": u(dirs, 3 * H, s=0.5) if peep and op == "LSTM" else None}
    return d


def rnn_model(op, data, attrs, outputs=(True, True, True), opset=22, consts=("W", "R", "B", "P")):
    """One-node model; W, R, B and P are initializers (as exported models hold them), the rest
    graph inputs. outputs masks Y, Y_h, Y_c (Y_c only for LSTM). Returns (model, feeds)."""
    n_in = 8 if op == "LSTM" else 6
    names, ins, inits, feeds = [], [], {}, {}
    for name in INPUT_NAMES[:n_in]:
        v = data.get(name)
        if v is None:
            names.append("")
            continue
        names.append(name)
        if name in consts:
            inits[name] = v
        else:
            feeds[name] = v
            ins.append((name, ONNX_OF[v.dtype], list(v.shape)))
    while names and names[-1] == "":
        names.pop()
    n_out = 3 if op == "LSTM" else 2
    mask = list(outputs)[:n_out]
    outs_names = [OUTPUT_NAMES[i] if mask[i] else "" for i in range(n_out)]
    while outs_names and outs_names[-1] == "":
        outs_names.pop()
    t = ONNX_OF[data["X"].dtype]
    node = helper.make_node(op, names, outs_names, **attrs)
    outs = [(n, t, None) for n in outs_names if n]
    return make_model([node], ins, outs, inits.items(), opset=opset), feeds


def check(op, data, attrs, outputs=(True, True, True), opset=22, tol=F32_TOL):
    attrs = {"hidden_size": data["R"].shape[-1], **attrs}
    model, feeds = rnn_model(op, data, attrs, outputs, opset)
    return assert_parity(model, feeds, **tol)


DIRECTIONS = ["forward", "reverse", "bidirectional"]
OPS = ["RNN", "GRU", "LSTM"]


def ndirs(direction):
    return 2 if direction == "bidirectional" else 1


# ---- directions x biases/initial states x sequence_lens x clip ------------------------------------

FORMS = {
    "plain": dict(bias=False, init=False),
    "bias_init": dict(bias=True, init=True),
    "seq_lens": dict(bias=True, init=True, lens=[5, 2, 4]),
    "seq_lens_no_init": dict(bias=True, init=False, lens=[1, 5, 3]),
}


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("form", list(FORMS))
def test_directions_and_forms(op, direction, form):
    data = rnn_data(op, dirs=ndirs(direction), **FORMS[form])
    check(op, data, {"direction": direction})


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_clip(op, direction):
    data = rnn_data(op, dirs=ndirs(direction), scale=1.5, lens=[5, 3, 4], seed=3)
    check(op, data, {"direction": direction, "clip": 0.7})


@pytest.mark.parametrize("op", ["GRU", "LSTM"])
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_sequence_length_zero(op, direction):
    """ORT's GRU/LSTM kernels give zeros in Y_h/Y_c for an empty sequence."""
    data = rnn_data(op, dirs=ndirs(direction), lens=[3, 0, 5], seed=4)
    check(op, data, {"direction": direction})


@pytest.mark.parametrize("op", OPS)
def test_single_step_and_long_sequence(op):
    check(op, rnn_data(op, T=1, dirs=2, lens=[1, 1, 1]), {"direction": "bidirectional"})
    check(op, rnn_data(op, T=40, B=2, dirs=2, scale=0.3, seed=5, lens=[40, 17]), {"direction": "bidirectional"})


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("opset", [7, 14, 22])
def test_opsets(op, opset):
    data = rnn_data(op, dirs=2, lens=[5, 2, 4], seed=6)
    check(op, data, {"direction": "bidirectional"}, opset=opset)


# ---- optional outputs ------------------------------------------------------------------------------

def output_masks(op):
    n = 3 if op == "LSTM" else 2
    return [m + (False,) * (3 - n) for m in itertools.product([False, True], repeat=n) if any(m)]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_optional_outputs(op, direction):
    data = rnn_data(op, dirs=ndirs(direction), lens=[4, 5, 2], seed=7)
    for mask in output_masks(op):
        check(op, data, {"direction": direction}, outputs=mask)


# ---- activations ----------------------------------------------------------------------------------

# (name, alpha, beta) with explicit values where the function takes them
ACTIVATIONS = [("Sigmoid", None, None), ("Tanh", None, None), ("Relu", None, None), ("Affine", 0.7, 0.1),
               ("LeakyRelu", 0.2, None), ("ThresholdedRelu", 0.3, None), ("ScaledTanh", 1.3, 0.6),
               ("HardSigmoid", 0.3, 0.4), ("Elu", 0.8, None), ("Softsign", None, None), ("Softplus", None, None)]


def act_attrs(funcs):
    """activations/activation_alpha/activation_beta for funcs [(name, alpha, beta), ...]: the lists
    hold the values of the functions that take them, in order."""
    attrs = {"activations": [f[0] for f in funcs]}
    alphas = [f[1] for f in funcs if f[1] is not None]
    betas = [f[2] for f in funcs if f[2] is not None]
    if alphas:
        attrs["activation_alpha"] = alphas
    if betas:
        attrs["activation_beta"] = betas
    return attrs


@pytest.mark.parametrize("act", ACTIVATIONS, ids=[a[0] for a in ACTIVATIONS])
@pytest.mark.parametrize("op", OPS)
def test_activations(op, act):
    """Each function in every position of the op (forward), and bidirectional with the function in
    the second direction only."""
    per_dir = {"RNN": 1, "GRU": 2, "LSTM": 3}[op]
    default = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}[op]
    data = rnn_data(op, lens=[5, 3, 4], seed=8, scale=0.5)
    for pos in range(per_dir):
        funcs = [(n, None, None) for n in default]
        funcs[pos] = act
        check(op, data, {"direction": "forward", **act_attrs(funcs)})
    data2 = rnn_data(op, dirs=2, lens=[5, 3, 4], seed=9, scale=0.5)
    if op == "RNN":
        # ORT's RNN reads activation_alpha/beta per direction: lists of two values, both used
        funcs = [("Tanh", None, None), act]
        attrs = {"activations": ["Tanh", act[0]]}
        if act[1] is not None:
            attrs["activation_alpha"] = [act[1], act[1]]
        if act[2] is not None:
            attrs["activation_beta"] = [act[2], act[2]]
        check(op, data2, {"direction": "bidirectional", **attrs})
    else:
        funcs = [(n, None, None) for n in default] + [act] + [(n, None, None) for n in default[1:]]
        check(op, data2, {"direction": "bidirectional", **act_attrs(funcs)})


@pytest.mark.parametrize("op", ["GRU", "LSTM"])
def test_activation_defaults_and_case(op):
    """LeakyRelu, HardSigmoid and Elu without alpha/beta take the ONNX defaults (ORT agrees); ORT's
    deep kernels match names case-insensitively."""
    data = rnn_data(op, seed=10)
    rest = ["tanh"] * (2 if op == "LSTM" else 1)
    for f in ["LeakyRelu", "HardSigmoid", "elu", "SIGMOID"]:
        check(op, data, {"activations": [f] + rest})


def test_rnn_alpha_per_direction():
    data = rnn_data("RNN", dirs=2, seed=11)
    check("RNN", data, {"direction": "bidirectional", "activations": ["LeakyRelu", "Elu"],
                        "activation_alpha": [0.3, 0.6]})
    # forward RNN with the schema's two default functions: ORT takes the first
    check("RNN", rnn_data("RNN", seed=12), {"activations": ["Relu", "Tanh"]})


DECLINED = [
    ("LSTM", {"activations": ["Sigmoid", "Foo", "Tanh"]}, "activation 'Foo'"),
    ("GRU", {"activations": ["Sigmoid"]}, "1 activations (expected 2)"),
    ("LSTM", {"activations": ["Affine", "Tanh", "Tanh"]}, "activation_alpha of Affine"),
    ("GRU", {"activations": ["ThresholdedRelu", "Tanh"]}, "activation_alpha of ThresholdedRelu"),
    ("GRU", {"activations": ["Sigmoid", "ScaledTanh"], "activation_alpha": [1.0]}, "activation_beta of ScaledTanh"),
    ("RNN", {"activations": ["LeakyRelu"]}, "activation_alpha of LeakyRelu"),  # ORT takes 0, ONNX 0.01
    ("RNN", {"activations": ["tanh"]}, "activation 'tanh'"),  # ORT's RNN would silently use Tanh
    ("RNN", {"direction": "bidirectional", "activations": ["Tanh", "LeakyRelu"], "activation_alpha": [0.5]},
     "fewer activation_alpha"),
    ("LSTM", {"clip": 0.0}, "clip 0"),
    ("GRU", {"direction": "sideways"}, "direction 'sideways'"),
]


@pytest.mark.parametrize("op,attrs,why", DECLINED, ids=[d[2] for d in DECLINED])
def test_declined(op, attrs, why, tmp_path):
    data = rnn_data(op, dirs=ndirs(attrs.get("direction", "forward")), seed=13)
    model, _ = rnn_model(op, data, {"hidden_size": 6, **attrs})
    report = claim_report(model, tmp_path, session_may_fail=True)
    assert f"declined {op}" in report and why in report, report


def test_declined_float64(tmp_path):
    data = {k: (v.astype(np.float64) if v is not None and v.dtype == np.float32 else v)
            for k, v in rnn_data("GRU").items()}
    ONNX_OF[np.dtype(np.float64)] = TensorProto.DOUBLE
    model, _ = rnn_model("GRU", data, {"hidden_size": 6})
    assert "declined GRU" in claim_report(model, tmp_path, session_may_fail=True)


# ---- LSTM peepholes, input_forget; GRU linear_before_reset -----------------------------------------

@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("peep,input_forget", [(True, 0), (False, 1), (True, 1)])
def test_lstm_peepholes_input_forget(direction, peep, input_forget):
    data = rnn_data("LSTM", dirs=ndirs(direction), peep=peep, lens=[4, 5, 1], seed=14)
    check("LSTM", data, {"direction": direction, "input_forget": input_forget, "clip": 2.0})


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("bias", [False, True])
def test_gru_linear_before_reset(direction, bias):
    data = rnn_data("GRU", dirs=ndirs(direction), bias=bias, lens=[5, 2, 3], seed=15)
    check("GRU", data, {"direction": direction, "linear_before_reset": 1})


def test_all_inputs_are_graph_inputs():
    """Weights fed at Run (not constants); without hidden_size (ORT's CPU EP requires it) the
    lowering takes it from R and matches ORT's result with it."""
    data = rnn_data("LSTM", dirs=2, peep=True, lens=[5, 4, 3], seed=16)
    model, feeds = rnn_model("LSTM", data, {"direction": "bidirectional", "hidden_size": 6}, consts=())
    want = assert_parity(model, feeds, **F32_TOL)
    model, feeds = rnn_model("LSTM", data, {"direction": "bidirectional"}, consts=())
    _assert_outputs_match(run_mlx(model, feeds), want, 0, 0, 0)


# ---- layout=1 and float16: forms ORT's CPU EP cannot run -------------------------------------------

def ort_reference(op, data, attrs, outputs, opset=22):
    """ORT's CPU EP on the layout-0 form of data."""
    model, feeds = rnn_model(op, data, attrs, outputs, opset)
    return run_cpu(model, feeds)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_layout_1(op, direction):
    data = rnn_data(op, dirs=ndirs(direction), peep=True, lens=[5, 2, 4], seed=17)
    attrs = {"hidden_size": 6, "direction": direction}
    want = ort_reference(op, data, attrs, (True, True, True))
    batchwise = dict(data)
    for k in ("X", "initial_h", "initial_c"):
        if data[k] is not None:
            batchwise[k] = np.ascontiguousarray(np.swapaxes(data[k], 0, 1))
    model, feeds = rnn_model(op, batchwise, {**attrs, "layout": 1})
    with pytest.raises(Exception, match="layout"):  # the reason this test does not use assert_parity
        run_cpu(model, feeds)
    want = [np.transpose(want[0], (2, 0, 1, 3))] + [np.swapaxes(w, 0, 1) for w in want[1:]]
    sess = __import__("onnxruntime_ep_mlx").session(model, strict=True)
    for run in range(3):
        _assert_outputs_match(sess.run(None, feeds), want, F32_TOL["rtol"], F32_TOL["atol"], run)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_float16(op, direction):
    """ORT's CPU EP has no float16 kernel for these ops; it runs them in float32 between inserted
    casts, which is what the lowering does too."""
    data = rnn_data(op, dirs=ndirs(direction), peep=True, lens=[5, 3, 0] if op != "RNN" else [5, 3, 1],
                    seed=18, dtype=np.float16)
    check(op, data, {"direction": direction, "clip": 1.0}, tol=F16_TOL)


# ---- empty inputs and bad data ---------------------------------------------------------------------

@pytest.mark.parametrize("op", OPS)
def test_empty_batch_and_sequence(op):
    for T, B in [(4, 0), (0, 3)]:
        data = rnn_data(op, T=T, B=B, dirs=2, init=True)
        model, feeds = rnn_model(op, data, {"hidden_size": 6, "direction": "bidirectional"})
        got = run_mlx(model, feeds)
        assert got[0].shape == (T, 2, B, 6) and got[1].shape == (2, B, 6)
        # no step taken: zero states (ORT's RNN gives zeros too; its GRU kernel aborts on T = 0)
        assert all(not g.any() for g in got)


@pytest.mark.parametrize("lens", [[5, 6, 2], [-1, 2, 3], [2**31 - 1, 1, 1], [-2**31, 5, 5]])
@pytest.mark.parametrize("op", OPS)
def test_sequence_lens_out_of_range(op, lens):
    """Lengths outside [0, T] (hostile ones included) fail the Run naming sequence_lens; the CPU's
    recurrence only compares them with the step index, the unrolled form the same."""
    data = rnn_data(op, lens=lens)
    model, feeds = rnn_model(op, data, {"hidden_size": 6})
    with pytest.raises(Exception, match="sequence_lens"):
        run_mlx(model, feeds)


def test_one_graph_per_signature():
    """The unrolled loop is built once per input signature: Runs of another length retrace, Runs
    of the same length replay (every Run matches ORT)."""
    data5 = rnn_data("LSTM", T=5, dirs=2, seed=19)
    data3 = {**data5, "X": data5["X"][:3].copy()}
    model, _ = rnn_model("LSTM", data5, {"hidden_size": 6, "direction": "bidirectional"})
    # a model with a dynamic sequence axis
    import onnx
    m = onnx.load_from_string(model)
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "T"
    model = m.SerializeToString()
    sess = __import__("onnxruntime_ep_mlx").session(model, strict=True)
    for d in (data5, data3, data5, data3):
        feeds = {k: d[k] for k in ("X", "initial_h", "initial_c")}
        _assert_outputs_match(sess.run(None, feeds), run_cpu(model, feeds), F32_TOL["rtol"], F32_TOL["atol"], 0)


# ---- hidden sizes past one panel of the CPU's recurrent product -------------------------------------
# On the CPU each step's h @ R^T reads R in panels of 32 rows (bridge_cpu_rnn.cpp), four at a time
# with AVX-512 and two with AVX2, shared among the threads from 256 rows on; a constant R is packed
# at Compile (rnn.c's prepare), one fed at Run is packed by the Run. The sizes cover a partial last
# panel, a partial last group, one thread and several; the GRU without linear_before_reset packs its
# [2H, 3H) rows apart. Every form sums each output in the same order, so a constant R and the same R
# fed at Run give bit-identical outputs. (A GPU unrolls the steps: test_directions_and_forms.)

WIDE = [(1, 37), (3, 100)]  # (batch, hidden): LSTM 148 and 400 rows of R, GRU 111 and 300
CPU = {"device": "cpu"}  # the CPU's kernel, on every machine


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("batch,hidden", WIDE)
@pytest.mark.parametrize("lbr", [0, 1])
def test_wide_hidden(op, batch, hidden, lbr):
    if op != "GRU" and lbr:
        pytest.skip("linear_before_reset is the GRU's")
    data = rnn_data(op, T=12, B=batch, I=8, H=hidden, dirs=2, scale=0.6 / np.sqrt(hidden / 6), seed=hidden,
                    lens=None if batch == 1 else [12, 7, 1])
    attrs = {"hidden_size": hidden, "direction": "bidirectional", **({"linear_before_reset": lbr} if lbr else {})}
    model, feeds = rnn_model(op, data, attrs)
    constant = assert_parity(model, feeds, **F32_TOL, options=CPU)
    fed_model, fed_feeds = rnn_model(op, data, attrs, consts=("W", "B", "P"))  # R fed at Run
    fed = run_mlx(fed_model, fed_feeds, options=CPU)
    for got, want in zip(fed, constant):
        np.testing.assert_array_equal(got, want)


def _wide_hidden_in_child(**switches):
    """test_wide_hidden in a fresh process with the EP's switches (each read once per process)."""
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=child_pythonpath(), **switches)
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__, "-k",
                          "test_wide_hidden and not without and not own_blas"], env=env, capture_output=True, text=True,
                         timeout=600, cwd=root)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "8 passed" in out.stdout, out.stdout[-3000:]


@pytest.mark.skipif(not cpu_has("avx512f"), reason="the two-panel AVX2 product is the only one without AVX-512")
def test_wide_hidden_without_avx512():
    """Where the CPU has AVX-512 the product takes four panels at a time; the two-panel AVX2 form
    (every AVX2 CPU's) is checked here with the switch off."""
    _wide_hidden_in_child(ORT_EP_MLX_CPU_AVX512="0")


def test_wide_hidden_with_mlx_own_blas():
    """With MLX's own BLAS (what a process that imported MLX before the EP gets): a constant R and an
    R fed at Run still give bit-identical outputs, because W is packed at Compile either way (an R
    fed at Run once left W to MLX's matmul, whose BLAS rounds otherwise: the GPU machine's suite)."""
    _wide_hidden_in_child(ORT_EP_MLX_BLAS="off")
