"""MatMul, Gemm and Conv (and RNN/GRU/LSTM's input projection) with a constant float32 weight on the
CPU through the EP's packed GEMM
(src/mlx/bridge_cpu_gemm.cpp: the weight packed at Compile into 32-column panels, a 12-row AVX-512
tile per panel, or the same sums with AVX2 and FMA, K in blocks of 4096) against ORT's CPU EP, strict, every Run of the eager/trace/replay
triple. Both sides sum the same K products in different orders: float32 tolerances relative to the
output's magnitude (rtol 1e-5, atol 2e-6 of the largest output). Shapes cross every edge of the
tiling: rows around 12, columns around 32, K past one block; A of rank 1 to 4; infinities and
NaN give the same non-finite outputs. Convolutions (1-D and 2-D, one group) unfold their windows
into the GEMM's rows: strides, dilations, asymmetric pads, taps past both ends, one tap. A linear
layer's bias Add and Relu fold into the epilogue where each node alone reads the one before it (the
graph as written and as ORT rewrites it). Which kernel ran is read from the op histogram of a fresh
process, with the switch on and off."""
from __future__ import annotations

import os

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxruntime_ep_mlx as mlx_ep
from parity import child_pythonpath, cpu_has, histogram_probe, make_model, run_cpu, run_mlx_each

CPU = {"device": "cpu"}


# Products (MatMul, Gemm, the RNNs' projections) take the packed GEMM with AVX-512F only, Conv also
# with AVX2 and FMA (src/mlx/bridge_cpu_gemm.cpp, cpu_gemm_packed_takes); ORT_EP_MLX_CPU_AVX512=0
# (as test_avx2_tile_where_avx512_is_off sets it) makes an AVX-512 CPU an AVX2 one
PRODUCTS_PACKED = cpu_has("avx512f") and os.environ.get("ORT_EP_MLX_CPU_AVX512") not in ("0", "off")
CONVS_PACKED = PRODUCTS_PACKED or cpu_has("avx2", "fma")
needs_kernel = pytest.mark.skipif(not CONVS_PACKED, reason="the packed convolution needs x86-64 with AVX2 and FMA")
needs_products = pytest.mark.skipif(not PRODUCTS_PACKED, reason="packed products need x86-64 with AVX-512F")


def matmul_model(a_shape, k, n, seed=0):
    rng = np.random.default_rng(seed)
    node = helper.make_node("MatMul", ["A", "W"], ["Y"])
    model = make_model([node], [("A", TensorProto.FLOAT, list(a_shape))], [("Y", TensorProto.FLOAT, None)],
                       {"W": rng.standard_normal((k, n)).astype(np.float32)}.items())
    symbolic = any(isinstance(d, str) for d in a_shape)
    return model, None if symbolic else {"A": rng.standard_normal(a_shape).astype(np.float32)}


def compare(model, feeds):
    (want,) = run_cpu(model, feeds)
    finite = want[np.isfinite(want)].astype(np.float64)
    scale = float(np.abs(finite).max()) if finite.size else 1.0
    for run, (got,) in enumerate(run_mlx_each(model, feeds, options=CPU)):
        assert got.dtype == want.dtype and got.shape == want.shape, f"run {run + 1}"
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"run {run + 1}: NaN")
        np.testing.assert_array_equal(np.isinf(got), np.isinf(want), err_msg=f"run {run + 1}: infinities")
        ok = np.isfinite(want)
        np.testing.assert_allclose(got[ok], want[ok], rtol=1e-5, atol=2e-6 * scale, err_msg=f"run {run + 1}")


@pytest.mark.parametrize("m", [1, 5, 11, 12, 13, 24, 37])
@pytest.mark.parametrize("k,n", [(1, 1), (7, 31), (64, 32), (100, 33), (255, 64), (256, 65), (257, 96), (600, 100)])
def test_shapes(m, k, n):
    compare(*matmul_model((m, k), k, n, seed=m * 1000 + k + n))


@pytest.mark.parametrize("a_shape", [(40,), (2, 7, 40), (2, 3, 5, 40), (1, 128, 40)])
def test_ranks(a_shape):
    compare(*matmul_model(a_shape, 40, 70))


@pytest.mark.parametrize("op", ["Gemm", "FusedGemm"])
@pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("alpha,beta,bias", [(1.0, 1.0, None), (0.5, 2.0, (70,)), (1.0, 1.0, (13, 70)),
                                             (1.0, 0.0, (70,)), (2.0, 1.0, (1, 1))])
def test_gemm(op, trans_a, trans_b, alpha, beta, bias):
    """Gemm's and FusedGemm's B read as it is (transB: packed from [N, K]), alpha times the product,
    then beta times C added."""
    rng = np.random.default_rng(7)
    m, k, n = 13, 40, 70
    names = ["A", "W"] + (["C"] if bias else [])
    attrs = dict(transA=trans_a, transB=trans_b, alpha=alpha, beta=beta)
    if op == "FusedGemm":
        attrs["activation"] = "Relu"
    node = helper.make_node(op, names, ["Y"], domain="com.microsoft" if op == "FusedGemm" else "", **attrs)
    consts = {"W": rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)}
    if bias:
        consts["C"] = rng.standard_normal(bias).astype(np.float32)
    a_shape = (k, m) if trans_a else (m, k)
    model = make_model([node], [("A", TensorProto.FLOAT, list(a_shape))], [("Y", TensorProto.FLOAT, None)],
                       consts.items(), domains=[("com.microsoft", 1)] if op == "FusedGemm" else ())
    compare(model, {"A": rng.standard_normal(a_shape).astype(np.float32)})


def conv_model(x_shape, w_shape, seed=0, dtype=np.float32, bias=True, **attrs):
    rng = np.random.default_rng(seed)
    consts = {"W": rng.standard_normal(w_shape).astype(dtype)}
    names = ["X", "W"]
    if bias:
        consts["B"] = rng.standard_normal(w_shape[0]).astype(dtype)
        names.append("B")
    t = TensorProto.FLOAT16 if dtype == np.float16 else TensorProto.FLOAT
    node = helper.make_node("Conv", names, ["Y"], **attrs)
    model = make_model([node], [("X", t, list(x_shape))], [("Y", t, None)], consts.items())
    return model, {"X": rng.standard_normal(x_shape).astype(dtype)}


@pytest.mark.parametrize("x_shape,w_shape,attrs", [
    ((1, 3, 17, 19), (16, 3, 3, 3), {}),
    ((2, 8, 12, 12), (20, 8, 3, 3), dict(pads=[1, 1, 1, 1])),
    ((1, 5, 23, 21), (40, 5, 3, 5), dict(strides=[2, 3], pads=[0, 2, 1, 0])),
    ((1, 4, 16, 16), (33, 4, 3, 3), dict(dilations=[2, 3], pads=[2, 1, 3, 0])),
    ((1, 16, 9, 9), (64, 16, 1, 1), {}),                       # one tap: the input is the unfolded input
    ((1, 16, 9, 9), (64, 16, 1, 1), dict(strides=[2, 2])),     # one tap, strided
    ((1, 16, 9, 9), (300, 16, 1, 1), dict(pads=[1, 0, 0, 1])),  # one tap, padded; many panels
    ((1, 3, 7, 7), (5, 3, 7, 7), dict(pads=[3, 3, 3, 3])),     # taps past both ends of every window
    ((1, 3, 5, 5), (4, 3, 2, 2), dict(strides=[1000, 1000])),  # a stride past the extent: one window
    ((2, 6, 30), (12, 6, 5), dict(pads=[2, 1], strides=[2])),  # 1-D
])
def test_conv(x_shape, w_shape, attrs):
    compare(*conv_model(x_shape, w_shape, seed=len(x_shape) + w_shape[0], **attrs))


def conv_relu_model(relu_reads_alone=True, conv_is_output=False, fused=None, bias=True, seed=3):
    """Conv (or com.microsoft FusedConv with `fused` as its activation) then Relu; the Conv's output
    also read by an Identity (relu_reads_alone=False) or returned (conv_is_output)."""
    rng = np.random.default_rng(seed)
    consts = {"W": rng.standard_normal((20, 6, 3, 3)).astype(np.float32)}
    names = ["X", "W"]
    if bias:
        consts["B"] = rng.standard_normal(20).astype(np.float32)
        names.append("B")
    if fused:
        nodes = [helper.make_node("FusedConv", names, ["Y"], domain="com.microsoft", activation=fused,
                                  pads=[1, 1, 1, 1])]
        outs = [("Y", TensorProto.FLOAT, None)]
    else:
        nodes = [helper.make_node("Conv", names, ["C"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["C"], ["Y"])]
        outs = [("Y", TensorProto.FLOAT, None)]
        if not relu_reads_alone:
            nodes.append(helper.make_node("Identity", ["C"], ["Z"]))
            outs.append(("Z", TensorProto.FLOAT, None))
        if conv_is_output:
            outs.append(("C", TensorProto.FLOAT, None))
    x = rng.standard_normal((2, 6, 9, 9)).astype(np.float32)
    x[0, 0, 3, 3], x[1, 2, 5, 5] = np.nan, -np.inf
    model = make_model(nodes, [("X", TensorProto.FLOAT, list(x.shape))], outs, consts.items(),
                       domains=[("com.microsoft", 1)] if fused else ())
    return model, {"X": x}


@pytest.mark.parametrize("form", ["folded", "folded-no-bias", "also-read", "conv-is-output", "fused-relu"])
def test_conv_relu(form):
    """A Relu that alone reads a Conv's output is the packed GEMM's epilogue (bias, then max(v, 0) with
    NaN kept): the same outputs as ORT's, NaN and infinities included, whether folded or not."""
    kw = {"folded": {}, "folded-no-bias": dict(bias=False), "also-read": dict(relu_reads_alone=False),
          "conv-is-output": dict(conv_is_output=True), "fused-relu": dict(fused="Relu")}[form]
    model, feeds = conv_relu_model(**kw)
    want = run_cpu(model, feeds)
    for got in run_mlx_each(model, feeds, options=CPU):
        for g, w in zip(got, want):
            np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
            ok = np.isfinite(w)
            np.testing.assert_array_equal(np.isinf(g), np.isinf(w))
            np.testing.assert_allclose(g[ok], w[ok], rtol=1e-5, atol=1e-4)


def test_conv_float16_input():
    """float16 is computed in float32 (the packed float32 weight), rounded once."""
    model, feeds = conv_model((1, 4, 10, 10), (24, 4, 3, 3), dtype=np.float16, pads=[1, 1, 1, 1])
    (want,) = run_cpu(model, feeds)
    for (got,) in run_mlx_each(model, feeds, options=CPU):
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-2, atol=2e-2)


@pytest.mark.parametrize("c_shape", [(2, 13, 70), (14, 70), (13, 71)])
def test_gemm_bias_not_broadcastable_is_an_error(c_shape):
    """A C that does not broadcast to [M, N] one way: the Run fails, as ORT's does (not a larger output)."""
    rng = np.random.default_rng(2)
    node = helper.make_node("Gemm", ["A", "W", "C"], ["Y"])
    model = make_model([node], [("A", TensorProto.FLOAT, [13, 40]), ("C", TensorProto.FLOAT, list(c_shape))],
                       [("Y", TensorProto.FLOAT, None)], {"W": rng.standard_normal((40, 70)).astype(np.float32)}.items())
    feeds = {"A": rng.standard_normal((13, 40)).astype(np.float32), "C": rng.standard_normal(c_shape).astype(np.float32)}
    with pytest.raises(Exception):
        run_cpu(model, feeds)
    with pytest.raises(Exception, match="Gemm|broadcast|shape"):
        mlx_ep.session(model, options=CPU, strict=True).run(None, feeds)


def test_non_finite():
    model, feeds = matmul_model((13, 70), 70, 40, seed=5)
    a = feeds["A"]
    a[0, 3], a[4, 10], a[7, :] = np.inf, np.nan, -np.inf
    compare(model, feeds)


def test_k_past_one_block():
    """K over the kernel's block of 4096: the second block adds to the first's sums."""
    compare(*matmul_model((13, 4200), 4200, 40, seed=4))


def test_large():
    """A BERT-sized product: several panels per thread, three blocks of K."""
    compare(*matmul_model((1, 128, 768), 768, 3072, seed=9))


def test_weight_shared_by_two_products():
    """One constant read by two MatMuls (and returned as is by a third node): each packs it."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((48, 40)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["A", "W"], ["Y"]), helper.make_node("MatMul", ["B", "W"], ["Z"]),
             helper.make_node("Identity", ["W"], ["V"])]
    model = make_model(nodes, [("A", TensorProto.FLOAT, [3, 48]), ("B", TensorProto.FLOAT, [2, 5, 48])],
                       [("Y", TensorProto.FLOAT, None), ("Z", TensorProto.FLOAT, None), ("V", TensorProto.FLOAT, None)],
                       {"W": w}.items())
    feeds = {"A": rng.standard_normal((3, 48)).astype(np.float32), "B": rng.standard_normal((2, 5, 48)).astype(np.float32)}
    want = run_cpu(model, feeds)
    for got in run_mlx_each(model, feeds, options=CPU):
        for g, x in zip(got, want):
            np.testing.assert_allclose(g, x, rtol=1e-5, atol=1e-5)


def test_k_mismatch_is_an_error():
    """A of another K than the weight's: the Run fails naming the node (the packed path declines it
    and MLX's product reports it), as ORT's does."""
    model, _ = matmul_model(("m", "k"), 40, 30)
    sess = mlx_ep.session(model, options=CPU, strict=True)
    with pytest.raises(Exception, match="MatMul"):
        sess.run(None, {"A": np.ones((3, 41), np.float32)})


# ---- a linear layer's bias Add and Relu in the GEMM's epilogue ------------------------------------
# MatMul -> Add(constant float32 [N]) -> Relu, and Gemm (C [N], alpha = beta = 1) -> Relu: where each
# node alone reads the one before it, the packed GEMM adds the bias and applies the Relu while the
# output is in the cache, and the nodes' outputs are handed over (op_compute_for). Every form below
# must give ORT's values; the histogram test checks which were folded.

LINEAR_FORMS = ["add", "add-relu", "bias-first", "add-read-twice", "product-read-twice", "bias-2d", "bias-fed",
                "add-is-output", "gemm-relu", "gemm-beta2-relu", "gemm-no-c-relu"]


def linear_model(form: str, seed=7):
    rng = np.random.default_rng(seed)
    k, n = 48, 40
    gemm = form.startswith("gemm")
    a_shape = [9, k] if gemm else [2, 9, k]
    bias = rng.standard_normal((1, n) if form == "bias-2d" else (n,)).astype(np.float32)
    inits = {"W": rng.standard_normal((k, n)).astype(np.float32)}
    inputs = [("A", TensorProto.FLOAT, a_shape)]
    feeds = {"A": rng.standard_normal(a_shape).astype(np.float32)}
    if form == "bias-fed":
        inputs.append(("bias", TensorProto.FLOAT, [n]))
        feeds["bias"] = bias
    elif form != "gemm-no-c-relu":
        inits["bias"] = bias
    outputs = ["Y"]
    if gemm:
        attrs = {"beta": 2.0} if form == "gemm-beta2-relu" else {}
        ins = ["A", "W"] if form == "gemm-no-c-relu" else ["A", "W", "bias"]
        nodes = [helper.make_node("Gemm", ins, ["P"], **attrs), helper.make_node("Relu", ["P"], ["Y"])]
    else:
        add_ins = ["bias", "P"] if form == "bias-first" else ["P", "bias"]
        nodes = [helper.make_node("MatMul", ["A", "W"], ["P"]), helper.make_node("Add", add_ins, ["S"])]
        if form == "add":
            nodes[-1].output[0] = "Y"
        else:
            nodes.append(helper.make_node("Relu", ["S"], ["Y"]))
        if form == "add-read-twice":
            nodes.append(helper.make_node("Neg", ["S"], ["Z"]))
            outputs.append("Z")
        if form == "product-read-twice":
            nodes.append(helper.make_node("Neg", ["P"], ["Z"]))
            outputs.append("Z")
        if form == "add-is-output":
            outputs.append("S")
    model = make_model(nodes, inputs, [(o, TensorProto.FLOAT, None) for o in outputs], inits.items())
    return model, feeds


def linear_runs(form: str, optimized: bool):
    """The eager, traced and replayed Runs of linear_model(form), its graph as written (ORT's graph
    optimizations off) or as ORT rewrites it (on: MatMul + Add becomes Gemm, with Reshapes around
    it for a 3-D A)."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    if not optimized:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    model, feeds = linear_model(form)
    sess = mlx_ep.session(model, options=CPU, strict=True, sess_options=so)
    return [sess.run(None, feeds) for _ in range(3)]


@pytest.mark.parametrize("form", LINEAR_FORMS)
@pytest.mark.parametrize("optimized", [False, True])
def test_linear_epilogue(form, optimized):
    model, feeds = linear_model(form)
    want = run_cpu(model, feeds)
    for run, got in enumerate(linear_runs(form, optimized)):
        for i, (g, w) in enumerate(zip(got, want)):
            assert g.shape == w.shape, f"run {run + 1}, output {i}"
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=f"run {run + 1}, output {i}")


LINEAR_PROBE = r"""
import sys
sys.path.insert(0, sys.argv[1])
from test_cpu_gemm import LINEAR_FORMS, linear_runs
for optimized in (False, True):
    for form in LINEAR_FORMS:
        print(f"FORM {optimized} {form}", file=sys.stderr, flush=True)
        linear_runs(form, optimized)
"""


@needs_products
def test_linear_epilogue_folds():
    out, _ = histogram_probe(LINEAR_PROBE)
    programs, form = {}, None
    for line in out.stderr.splitlines():
        if line.startswith("FORM "):
            form = tuple(line[5:].split(" "))
        elif " program: " in line:
            programs[form] = line.replace("@cpu=", "=")
    assert set(programs) == {(o, f) for o in ("False", "True") for f in LINEAR_FORMS}, sorted(programs)
    # as written: the bias and Relu fold where each node alone reads the one before it
    folded = {"add": False, "add-relu": False, "bias-first": False, "gemm-relu": False, "gemm-no-c-relu": False,
              "add-read-twice": True, "add-is-output": True}  # True: the Relu stays, where the sum is read
    for form in LINEAR_FORMS:
        program = programs[("False", form)]
        assert "EpCpuGemmPacked=1" in program, (form, program)
        if form in folded:
            assert "Add" not in program, (form, program)
            assert ("Maximum" in program) == folded[form], (form, program)
        else:  # nothing folded: the Add (or Gemm's beta * C) and MLX's Relu run as before
            assert "Add" in program or "Multiply" in program, (form, program)
    # as ORT rewrites them, MatMul + Add is a Gemm whose C [N] folds
    for form in ("add", "add-relu", "bias-first"):
        assert "Add" not in programs[("True", form)], (form, programs[("True", form)])


HISTOGRAM_PROBE = r"""
import sys
sys.path.insert(0, sys.argv[1])
from test_cpu_gemm import compare, conv_model, matmul_model, test_gemm
compare(*matmul_model((20, 96), 96, 70))
test_gemm("Gemm", 0, 1, 0.5, 2.0, (70,))
compare(*conv_model((1, 8, 12, 12), (20, 8, 3, 3), pads=[1, 1, 1, 1]))
from parity import assert_parity, run_mlx_each
from test_cpu_gemm import conv_relu_model
run_mlx_each(*conv_relu_model(), options={"device": "cpu"})
run_mlx_each(*conv_relu_model(fused="Relu"), options={"device": "cpu"})
from test_ops_rnn import rnn_data, rnn_model
data = rnn_data("LSTM", T=6, B=2, I=40, H=24, dirs=2)
assert_parity(*rnn_model("LSTM", data, dict(hidden_size=24, direction="bidirectional")), rtol=1e-4, atol=1e-5,
              options={"device": "cpu"})
"""


@needs_kernel
@pytest.mark.parametrize("switch", ["default", "off"])
def test_kernel_runs(switch):
    _, programs = histogram_probe(HISTOGRAM_PROBE, **({"ORT_EP_MLX_CPU_GEMM": "0"} if switch == "off" else {}))
    assert len(programs) == 6, programs  # MatMul, Gemm, Conv, Conv + Relu, FusedConv, LSTM (W constant)
    for program in programs[:2]:
        if switch == "off" or not PRODUCTS_PACKED:
            assert "EpCpuGemmPacked" not in program and ("Matmul" in program or "AddMM" in program), program
        else:
            assert "EpCpuGemmPacked=1" in program and "Matmul" not in program and "AddMM" not in program, program
    conv_relu, fused, lstm = programs[3], programs[4], programs[5]
    if switch == "off":
        assert "EpCpuConvPacked" not in programs[2] and "Convolution=1" in programs[2], programs[2]
        for program in (conv_relu, fused):
            assert "Maximum=1" in program, program  # MLX's Relu
        assert "EpCpuGemmPacked" not in lstm and "Matmul=2" in lstm, lstm
    else:
        assert "EpCpuConvPacked=1" in programs[2] and "Convolution" not in programs[2], programs[2]
        for program in (conv_relu, fused):
            assert "EpCpuConvPacked=1" in program and "Maximum" not in program and "Add" not in program, program
        if PRODUCTS_PACKED:
            assert "EpCpuGemmPacked=2" in lstm and "Matmul" not in lstm, lstm
        else:
            assert "EpCpuGemmPacked" not in lstm and "Matmul=2" in lstm, lstm


@pytest.mark.skipif(not (cpu_has("avx512f") and cpu_has("avx2", "fma")),
                    reason="where the CPU lacks AVX-512 the suite runs the AVX2 tile already")
def test_avx2_tile_where_avx512_is_off():
    """Where the CPU has AVX-512 the products and convolutions take its tile; the AVX2 one (every
    other x86-64 CPU's convolutions: the same sums in the same order) runs here in a fresh process
    with AVX-512 switched off: the convolutions, the products left to MLX, and which kernel ran."""
    import os
    import subprocess
    import sys
    env = dict(os.environ, PYTHONPATH=child_pythonpath(), ORT_EP_MLX_CPU_AVX512="0")
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__, "-k",
                          "test_shapes or test_conv or test_kernel_runs"], env=env, capture_output=True, text=True,
                         timeout=600, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert " passed" in out.stdout and " skipped" not in out.stdout, out.stdout[-3000:]
