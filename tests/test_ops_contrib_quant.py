"""Parity of the weight-quantized contrib ops (src/ops/contrib_quant.c) against ORT's CPU EP:
MatMulNBits over bits, block sizes, zero-point forms, g_idx, bias, accuracy levels (level 4 makes
ORT quantize A to int8 per block) and activation dtypes, and GatherBlockQuantized. The float32
tolerance is relative to the output's magnitude: both sides sum K products in different orders."""
from __future__ import annotations

import functools
import os
import re

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxruntime_ep_mlx as mlx_ep
from parity import claim_report, make_model, onnx_type, run_cpu, run_mlx_each

MS = "com.microsoft"


def compare(model, feeds, options=None):
    """Every Run of the eager/trace/replay triple against ORT's CPU EP; returns the first Run's output."""
    (want,) = run_cpu(model, feeds)
    finite = want[np.isfinite(want)].astype(np.float64)  # the scale of the finite outputs
    scale = float(np.abs(finite).max()) if finite.size else 1.0
    runs = [got for (got,) in run_mlx_each(model, feeds, options=options)]
    for run, got in enumerate(runs):
        assert got.dtype == want.dtype and got.shape == want.shape, f"run {run + 1}"
        if want.dtype == np.float16:
            np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-2,
                                       atol=1e-3 * scale, err_msg=f"run {run + 1}")
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6 * scale, err_msg=f"run {run + 1}")
    return runs[0]


declined_reason = functools.partial(claim_report, session_may_fail=True)


# ---- MatMulNBits ---------------------------------------------------------------------------------

def pack_zero_points(z, bits):
    """[N, k_blocks] values -> ORT's packed uint8 [N, ceil(k_blocks * bits / 8)], low bits first."""
    n, kb = z.shape
    per = 8 // bits
    width = (kb * bits + 7) // 8
    padded = np.zeros((n, width * per), np.uint32)
    padded[:, :kb] = z
    shifts = (np.arange(per) * bits).astype(np.uint32)
    return (padded.reshape(n, width, per) << shifts).sum(-1).astype(np.uint8)


def nbits_model(k, n, bits, block, acc=0, dtype=np.float32, zp=None, bias=False, gidx=None, a_shape=(2, 3),
                b_const=True, seed=0, extra_attrs=None):
    """zp: None, "u8" (packed uint8) or "float" (dtype of A); gidx: None, "trivial" or "shuffled"."""
    rng = np.random.default_rng(seed)
    kb = (k + block - 1) // block
    b = rng.integers(0, 256, size=(n, kb, block * bits // 8), dtype=np.uint8)
    scales = (rng.random((n, kb)) * 0.02 + 0.005).astype(dtype)
    consts = {"B": b, "scales": scales}
    names = ["A", "B", "scales", "", "", ""]
    if zp is not None:
        zv = rng.integers(0, 2 ** bits, size=(n, kb)).astype(np.uint8)
        consts["zp"] = pack_zero_points(zv, bits) if zp == "u8" else (zv.astype(np.float32) + 0.25).astype(dtype)
        names[3] = "zp"
    if gidx is not None:
        g = np.arange(k) // block if gidx == "trivial" else rng.integers(0, kb, size=k)
        consts["g_idx"] = g.astype(np.int32)
        names[4] = "g_idx"
    if bias:
        consts["bias"] = rng.standard_normal(n).astype(dtype)
        names[5] = "bias"
    while names[-1] == "":
        names.pop()
    t = onnx_type(np.zeros(1, dtype))
    attrs = dict(K=k, N=n, bits=bits, block_size=block, accuracy_level=acc, **(extra_attrs or {}))
    node = helper.make_node("MatMulNBits", names, ["Y"], domain=MS, **attrs)
    a = rng.standard_normal(tuple(a_shape) + (k,)).astype(dtype)
    feeds = {"A": a}
    inputs = [("A", t, list(a.shape))]
    if not b_const:
        inputs.append(("B", TensorProto.UINT8, list(b.shape)))
        feeds["B"] = consts.pop("B")
    model = make_model([node], inputs, [("Y", t, None)], consts.items(), domains=[(MS, 1)])
    return model, feeds


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("acc", [0, 4])
@pytest.mark.parametrize("bits,block", [(4, 16), (4, 32), (4, 64), (4, 128), (4, 256), (8, 16), (8, 32), (8, 64),
                                        (8, 128), (2, 16), (2, 64)])
def test_matmul_nbits_blocks(bits, block, acc, dtype):
    if bits == 2 and acc == 4:
        pytest.skip("declined (test_matmul_nbits_declined)")
    compare(*nbits_model(256, 48, bits, block, acc, dtype, seed=bits * 1000 + block))


@pytest.mark.parametrize("k", [128, 384])
@pytest.mark.parametrize("block", [32, 64, 128])
@pytest.mark.parametrize("zp", [None, "u8"])
def test_matmul_nbits_int8_one_row(k, block, zp):
    """accuracy_level 4 on one row of float32 A, the decode step's form: on a CPU with AVX-512 VNNI
    the EP sums each block's int8 x times 4-bit weight products exactly in integers, as ORT's MLAS
    does (elsewhere the float32 products of the quantized A); a row whose values span very
    different magnitudes per block, against ORT's CPU EP."""
    model, feeds = nbits_model(k, 40, 4, block, acc=4, zp=zp, a_shape=(1, 1), seed=k + block)
    feeds["A"] *= np.repeat(np.float32([1e-3, 1.0, 30.0, 0.2]), k // 4)[None, None, :]
    compare(model, feeds)
    # a block holding an infinity: NaN everywhere, as ORT gives; NaN gives NaN (ORT's MLAS leaves NaN
    # out of its block maximum and gives finite values: the EP keeps the float32 products' NaN)
    feeds["A"][0, 0, 5] = np.inf
    compare(model, feeds)
    feeds["A"][0, 0, 5] = np.nan
    for (got,) in run_mlx_each(model, feeds):
        assert np.isnan(got).all()
    # a block so small that 127 / max|x| overflows (and a zero in it): the float32 products, NaN
    feeds["A"][0, 0, :block] = np.float32(1e-39) * np.arange(block, dtype=np.float32) / block
    for (got,) in run_mlx_each(model, feeds):
        assert np.isnan(got).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("acc", [0, 4])
@pytest.mark.parametrize("zp", ["u8", "float"])
@pytest.mark.parametrize("bits,block", [(4, 16), (4, 32), (4, 128), (8, 32), (2, 32)])
def test_matmul_nbits_zero_points(bits, block, zp, acc, dtype):
    if bits == 8 and zp == "float":
        pytest.skip("declined: ORT's CPU kernel rejects 8-bit float zero points")
    if bits == 2 and acc == 4 and zp == "u8":
        pytest.skip("declined (test_matmul_nbits_declined)")
    compare(*nbits_model(200, 40, bits, block, acc, dtype, zp=zp, bias=True, seed=block + bits))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("gidx", ["trivial", "shuffled"])
@pytest.mark.parametrize("zp", [None, "float"])
@pytest.mark.parametrize("block", [16, 32, 128])
def test_matmul_nbits_g_idx(block, zp, gidx, dtype):
    compare(*nbits_model(192, 24, 4, block, 0, dtype, zp=zp, gidx=gidx, bias=True, seed=block))


@pytest.mark.parametrize("a_shape", [(), (5,), (2, 3), (2, 2, 3)])
@pytest.mark.parametrize("acc", [0, 4])
def test_matmul_nbits_ranks(a_shape, acc):
    compare(*nbits_model(96, 16, 4, 32, acc, a_shape=a_shape, bias=True, seed=len(a_shape)))


@pytest.mark.parametrize("k,block", [(100, 32), (200, 128), (40, 16), (72, 64)])
@pytest.mark.parametrize("acc", [0, 4])
def test_matmul_nbits_k_not_multiple_of_block(k, block, acc):
    compare(*nbits_model(k, 20, 4, block, acc, zp="u8", seed=k))
    compare(*nbits_model(k, 20, 8, block, acc, seed=k + 1))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("bits,block,zp", [(4, 32, "u8"), (4, 128, None), (8, 32, "float"), (4, 16, "u8")])
@pytest.mark.parametrize("acc", [0, 4])
@pytest.mark.parametrize("bias", [True, False])
def test_matmul_nbits_many_rows(dtype, bits, block, zp, acc, bias):
    """80 rows of A: on MLX's GPU the weights are dequantized for one GEMM instead of the quantized
    kernel (src/ops/contrib_quant.c, mnb_prefers_dequantized), float16 activations without a bias
    and with integer zero points as two exact float16 halves (mnb_takes_split); the CPU keeps the
    kernel."""
    if bits == 8 and zp == "float":
        pytest.skip("declined: ORT's CPU kernel rejects 8-bit float zero points")
    compare(*nbits_model(160, 48, bits, block, acc, dtype, zp=zp, bias=bias, a_shape=(2, 40), seed=block + bits))


@pytest.mark.parametrize("n", [128, 200])
@pytest.mark.parametrize("bias", [True, False])
def test_matmul_nbits_prompt_shapes(n, bias):
    """A prompt's projection at a decoder's width (130 rows of float16, K 896): on MLX's CUDA backend
    the tensor-core kernel with its K steps split over blocks and their partial sums added in order
    (mlxb_qgemm_split), the bias folded in; elsewhere the float32 path. Infinite activations give
    what the float32 GEMM gives."""
    model, feeds = nbits_model(896, n, 4, 32, 0, np.float16, zp="u8", bias=bias, a_shape=(1, 130), seed=n)
    compare(model, feeds)
    feeds["A"][0, 7, 3] = np.inf
    feeds["A"][0, 9, 5] = -np.inf
    got = compare(model, feeds)
    assert np.isinf(got[0, 7]).any() and not np.isnan(got[0, 8]).any()


@pytest.mark.parametrize("acc", [0, 4])
def test_matmul_nbits_b_graph_input(acc):
    """A non-constant B is never prepacked by ORT: float32 path even with accuracy_level 4."""
    compare(*nbits_model(128, 32, 4, 32, acc, zp="u8", b_const=False, seed=7))


def test_matmul_nbits_constant_a_zero_block():
    """An all-zero block of A: ORT's int8 scale is 0 and its inverse taken as 0."""
    model, feeds = nbits_model(128, 16, 4, 32, 4, seed=8)
    feeds["A"][..., 32:64] = 0
    compare(model, feeds)


@pytest.mark.parametrize("block", [16, 32])
@pytest.mark.parametrize("acc", [0, 4])
def test_matmul_nbits_empty_a(block, acc):
    compare(*nbits_model(64, 8, 4, block, acc, a_shape=(0,)))
    compare(*nbits_model(64, 8, 4, block, acc, a_shape=(2, 0)))


def _three_runs_against_cpu(tmp_path, model, feeds, dtype, shape):
    """The model's outputs on the MLX EP (eager, traced, replayed) against ORT's CPU EP, float16 to
    1e-2 relative and 1e-3 of each output's largest value, float32 to 1e-5 and 2e-6 (the first
    output of `shape`); the run report's counts, summed over clusters."""
    wants = run_cpu(model, feeds)
    assert wants[0].shape == shape
    report = tmp_path / "report.txt"
    sess = mlx_ep.session(model, options={"report": str(report)}, strict=True)
    for run in range(3):
        for i, (got, want) in enumerate(zip(sess.run(None, feeds), wants)):
            scale = float(np.abs(want.astype(np.float64)).max())
            rtol, atol = (1e-2, 1e-3 * scale) if dtype == np.float16 else (1e-5, 2e-6 * scale)
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol,
                                       err_msg=f"run {run + 1}, output {i}")
    del sess
    stats = {"clusters": 0}
    for line in report.read_text().split("run report:")[1:]:  # summed over the clusters
        stats["clusters"] += 1
        for k, v in re.findall(r"(\w+)=(\d+)", line):
            stats[k] = stats.get(k, 0) + int(v)
    return stats


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("rows", [1, 3, 12])
def test_matmul_nbits_computed_ahead(tmp_path, dtype, rows):
    """Q/K/V- and gate/up-like MatMulNBits reading one A, Q and K followed by an Add of a constant
    bias (a Qwen-like export): at up to 8 rows the first of each group of siblings (three at most,
    in node order) computes the others' results and the bias adds that are their only readers (on
    MLX's CUDA backend one GEMV launch for the group; `computed_ahead` in the run report), each
    equal to what its node computes alone. V's Add takes a graph input and up's output has two
    readers: those adds stay nodes of their own. A node with a bias input computes alone, and so
    does everything at 12 rows, but for float32 on the CPU, whose sets task takes any number of rows
    (tiles and BLAS past one), and float16 on MLX's CUDA backend, whose tensor-core GEMM takes a
    group whose weights are all exact as float16 halves in one launch with their bias Adds.
    ORT hands the EP this graph sorted as u, v, k, q, g (then b): the groups are (u, v, k) and (q, g),
    so per lowering u hands v, k and k's Add and q hands g and q's Add (5), and on the tensor cores,
    where up's float zero points keep (u, v, k) apart, k folds its Add and q hands g and q's Add (3)."""
    k, block, bits = 64, 32, 4
    rng = np.random.default_rng(7)
    kb = k // block
    t = onnx_type(np.zeros(1, dtype))
    nodes, consts = [], []
    for name, n, zp, bias in (("q", 48, "u8", False), ("k", 16, None, False), ("v", 16, "u8", False),
                              ("g", 32, None, False), ("u", 32, "float", False), ("b", 16, None, True)):
        consts.append((f"B_{name}", rng.integers(0, 256, size=(n, kb, block * bits // 8), dtype=np.uint8)))
        consts.append((f"s_{name}", (rng.random((n, kb)) * 0.02 + 0.005).astype(dtype)))
        ins = ["A", f"B_{name}", f"s_{name}", "", "", ""]
        if zp is not None:
            z = rng.integers(0, 2 ** bits, size=(n, kb)).astype(np.uint8)
            consts.append((f"z_{name}", pack_zero_points(z, bits) if zp == "u8" else (z + 0.25).astype(dtype)))
            ins[3] = f"z_{name}"
        if bias:
            consts.append((f"bias_{name}", rng.standard_normal(n).astype(dtype)))
            ins[5] = f"bias_{name}"
        while ins[-1] == "":
            ins.pop()
        nodes.append(helper.make_node("MatMulNBits", ins, [f"Y_{name}"], domain=MS, K=k, N=n, bits=bits,
                                      block_size=block))
    consts += [("add_q", rng.standard_normal(48).astype(dtype)), ("add_k", rng.standard_normal(16).astype(dtype)),
               ("add_u", rng.standard_normal(32).astype(dtype))]
    nodes += [helper.make_node("Add", ["Y_q", "add_q"], ["Q"]), helper.make_node("Add", ["add_k", "Y_k"], ["K"]),
              helper.make_node("Add", ["Y_v", "add_v"], ["V"]), helper.make_node("Add", ["Y_u", "add_u"], ["U"])]
    # one consumer of all: one cluster (unconnected nodes would each be a cluster of their own)
    nodes.append(helper.make_node("Concat", ["Q", "K", "V", "Y_g", "Y_u", "U", "Y_b"], ["Y"], axis=-1))
    model = make_model(nodes, [("A", t, [1, rows, k]), ("add_v", t, [16])], [("Y", t, None)], consts,
                       domains=[(MS, 1)])
    feeds = {"A": rng.standard_normal((1, rows, k)).astype(dtype), "add_v": rng.standard_normal(16).astype(dtype)}
    stats = _three_runs_against_cpu(tmp_path, model, feeds, dtype, (1, rows, 192))
    per = 5 if rows <= 8 or _cpu_sets_take(dtype) else 3 if dtype == np.float16 and _cuda_gemv() else 0
    assert stats["computed_ahead"] == per * _lowerings(stats), \
        f"per lowering {per}: {_ahead_counts(stats)}"


@pytest.mark.parametrize("rows", [1, 5])
def test_matmul_nbits_int8_siblings(tmp_path, rows):
    """accuracy_level 4 (ORT quantizes A to int8 per block, MLAS CompInt8) on Q/K/V-like siblings of
    one float32 A, Q followed by a constant bias Add, and a fourth projection of the same A without
    the attribute: on a CPU scope whose sets task takes float32, A is quantized once (one task,
    EpCpuQuantizeBlocks) and the three int8-path siblings go together (the first hands the other two
    and Q's Add: 3 per lowering); the float32-path node never joins them (its A is not quantized).
    Elsewhere each node computes alone. Every output against ORT's CPU EP."""
    k, block, bits = 96, 32, 4
    rng = np.random.default_rng(41)
    kb = k // block
    nodes, consts = [], []
    for name, n, acc in (("q", 32, 4), ("k", 16, 4), ("v", 16, 4), ("f", 24, 0)):
        consts.append((f"B_{name}", rng.integers(0, 256, size=(n, kb, block * bits // 8), dtype=np.uint8)))
        consts.append((f"s_{name}", (rng.random((n, kb)) * 0.02 + 0.005).astype(np.float32)))
        nodes.append(helper.make_node("MatMulNBits", ["A", f"B_{name}", f"s_{name}"], [f"Y_{name}"], domain=MS, K=k,
                                      N=n, bits=bits, block_size=block, accuracy_level=acc))
    consts.append(("add_q", rng.standard_normal(32).astype(np.float32)))
    nodes.append(helper.make_node("Add", ["Y_q", "add_q"], ["Q"]))
    nodes.append(helper.make_node("Concat", ["Q", "Y_k", "Y_v", "Y_f"], ["Y"], axis=-1))
    model = make_model(nodes, [("A", TensorProto.FLOAT, [1, rows, k])], [("Y", TensorProto.FLOAT, None)], consts,
                       domains=[(MS, 1)])
    feeds = {"A": rng.standard_normal((1, rows, k)).astype(np.float32)}
    stats = _three_runs_against_cpu(tmp_path, model, feeds, np.float32, (1, rows, 88))
    per = 3 if _cpu_sets_take(np.float32) else 0
    assert stats["computed_ahead"] == per * _lowerings(stats), f"per lowering {per}: {_ahead_counts(stats)}"


def _lowerings(stats) -> int:
    """How often the cluster was lowered: eager Runs, first traces and a hot GPU program's fused trace."""
    return stats["traces"] + stats["eager_runs"] + stats["fusion_traces"]


def _ahead_counts(stats) -> str:
    """The run report's counts a computed-ahead assertion turns on (pytest cuts a long dict)."""
    return " ".join(f"{k}={stats.get(k)}" for k in ("computed_ahead", "clusters", "traces", "fusion_traces", "eager_runs",
                                                       "compiled_runs", "runs"))


def _cpu_sets_take(dtype) -> bool:
    """Whether the CPU's GEMV sets task (src/mlx/bridge_cpu_qgemv.cpp) takes any number of rows here:
    float32 on x86-64 with AVX2 and FMA, the EP's default device MLX's CPU."""
    from test_cpu_decode import default_device_is_cpu
    from parity import cpu_has
    switched_off = os.environ.get("ORT_EP_MLX_CPU_GEMV") in ("0", "off")
    return dtype == np.float32 and cpu_has("avx2", "fma") and default_device_is_cpu() and not switched_off


def _cuda_gemv():
    """Whether the EP's GEMV kernels run here (MLX's CUDA backend)."""
    import mlx.core as mx
    return mx.cuda.is_available()


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("form", ["plain", "swapped", "gate_bias", "product_only"])
def test_matmul_nbits_gated_mlp(tmp_path, dtype, rows, form):
    """A gated MLP (Qwen/Llama): gate and up MatMulNBits of one A, then Sigmoid(gate), gate times
    that, and that times up. On MLX's CUDA backend the first projection computes the pair and the
    three activation nodes in one GEMV launch (mlxb_qgemv_swiglu), each rounded as its node would;
    elsewhere the pair as siblings and the activations as nodes. "swapped": up comes first in node
    order and every Mul has its operands the other way round; "gate_bias": the gate has a constant
    bias Add folded in. The Sigmoid's and the first Mul's results are read elsewhere too, so every
    intermediate is checked against ORT's CPU EP; "product_only": the chain alone reads them (a
    decoder's MLP), and the CUDA launch then writes the product and nothing else."""
    k, n, block, bits = 128, 48, 32, 4
    rng = np.random.default_rng(23)
    kb = k // block
    t = onnx_type(np.zeros(1, dtype))
    consts, nodes = [], []
    order = ("u", "g") if form == "swapped" else ("g", "u")
    for name in order:
        consts.append((f"B_{name}", rng.integers(0, 256, size=(n, kb, block * bits // 8), dtype=np.uint8)))
        consts.append((f"s_{name}", (rng.random((n, kb)) * 0.02 + 0.005).astype(dtype)))
        nodes.append(helper.make_node("MatMulNBits", ["A", f"B_{name}", f"s_{name}"], [f"Y_{name}"], domain=MS, K=k,
                                      N=n, bits=bits, block_size=block))
    gate = "Y_g"
    if form == "gate_bias":
        consts.append(("bias_g", rng.standard_normal(n).astype(dtype)))
        nodes.append(helper.make_node("Add", ["Y_g", "bias_g"], ["G"]))
        gate = "G"
    swap = form == "swapped"
    nodes += [helper.make_node("Sigmoid", [gate], ["S"]),
              helper.make_node("Mul", ["S", gate] if swap else [gate, "S"], ["M"]),
              helper.make_node("Mul", ["Y_u", "M"] if swap else ["M", "Y_u"], ["P"])]
    product_only = form == "product_only"
    if not product_only:
        nodes.append(helper.make_node("Concat", ["P", "S", "M", "Y_u"], ["Y"], axis=-1))
    out = "P" if product_only else "Y"
    model = make_model(nodes, [("A", t, [1, rows, k])], [(out, t, None)], consts, domains=[(MS, 1)])
    feeds = {"A": (rng.standard_normal((1, rows, k)) * 2).astype(dtype)}
    stats = _three_runs_against_cpu(tmp_path, model, feeds, dtype, (1, rows, (1 if product_only else 4) * n))
    # per lowering: the pair's sibling (and the gate's Add), plus the three activations with the kernel
    per = 1 + (form == "gate_bias") + (3 if _cuda_gemv() else 0)
    assert stats["computed_ahead"] > 0 and stats["computed_ahead"] % per == 0, (per, stats)


def _norm_in_gemv():
    """Whether the EP's GEMV launches take an RMS norm into themselves here (MLX's CUDA backend with
    ORT_EP_MLX_NORM_IN_GEMV=1, as scripts/gpu_runbook.sh's normcheck step runs this file again)."""
    import os
    return _cuda_gemv() and os.environ.get("ORT_EP_MLX_NORM_IN_GEMV") == "1"


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("form", ["readers_only", "y_read_elsewhere"])
def test_matmul_nbits_norm_in_launch(tmp_path, dtype, rows, form):
    """A decoder layer's two norms and their projections (Qwen's export): SkipSimplifiedLayerNormalization
    of x and a residual feeding Q, K and V (Q and K with a constant bias Add), its residual sum read
    later; then SimplifiedLayerNormalization of that sum feeding a gated MLP's gate and up. On MLX's
    CUDA backend with ORT_EP_MLX_NORM_IN_GEMV=1, up to 8 rows, each norm is computed inside its readers' GEMV launch (every block
    normalizes its row; the norm launches nothing) and the launch gives the residual sum: the norm
    then computes its readers ahead (Q, K, V and two adds; gate, up and the three activations: 10 per
    lowering), where the projections alone compute theirs (K, V and two adds; up and the
    activations: 8; without a gated-MLP launch, up alone: 5). "y_read_elsewhere": the first norm's y is also a graph output, so that norm
    lowers as usual (9 on CUDA). Every Run (eager, traced, replayed) against ORT's CPU EP."""
    k, block, bits = 128, 32, 4
    rng = np.random.default_rng(31)
    kb = k // block
    t = onnx_type(np.zeros(1, dtype))
    consts, nodes = [], []

    def nbits(name, a, n):
        consts.append((f"B_{name}", rng.integers(0, 256, size=(n, kb, block * bits // 8), dtype=np.uint8)))
        consts.append((f"s_{name}", (rng.random((n, kb)) * 0.02 + 0.005).astype(dtype)))
        nodes.append(helper.make_node("MatMulNBits", [a, f"B_{name}", f"s_{name}"], [f"Y_{name}"], domain=MS, K=k,
                                      N=n, bits=bits, block_size=block))

    consts += [("g1", (rng.random(k) + 0.5).astype(dtype)), ("g2", (rng.random(k) + 0.5).astype(dtype)),
               ("add_q", rng.standard_normal(64).astype(dtype)), ("add_k", rng.standard_normal(32).astype(dtype))]
    nodes.append(helper.make_node("SkipSimplifiedLayerNormalization", ["X", "R", "g1"], ["N1", "", "", "S1"], domain=MS,
                                  epsilon=1e-6))
    nbits("q", "N1", 64)
    nbits("k", "N1", 32)
    nbits("v", "N1", 32)
    nodes += [helper.make_node("Add", ["Y_q", "add_q"], ["Q"]), helper.make_node("Add", ["add_k", "Y_k"], ["K"]),
              helper.make_node("SimplifiedLayerNormalization", ["S1", "g2"], ["N2"], axis=-1, epsilon=1e-6,
                               stash_type=1)]
    nbits("g", "N2", 48)
    nbits("u", "N2", 48)
    nodes += [helper.make_node("Sigmoid", ["Y_g"], ["G"]), helper.make_node("Mul", ["Y_g", "G"], ["M"]),
              helper.make_node("Mul", ["M", "Y_u"], ["P"]),
              helper.make_node("Concat", ["Q", "K", "Y_v", "P", "S1"], ["Y"], axis=-1)]
    outputs = [("Y", t, None)] + ([("N1", t, None)] if form == "y_read_elsewhere" else [])
    model = make_model(nodes, [("X", t, [1, rows, k]), ("R", t, [1, rows, k])], outputs, consts, domains=[(MS, 1)])
    feeds = {"X": rng.standard_normal((1, rows, k)).astype(dtype), "R": rng.standard_normal((1, rows, k)).astype(dtype)}
    stats = _three_runs_against_cpu(tmp_path, model, feeds, dtype, (1, rows, 64 + 32 + 32 + 48 + k))
    lowerings = _lowerings(stats)
    if _norm_in_gemv():
        per = 10 if form == "readers_only" else 9
    elif _cuda_gemv() or _cpu_sets_take(dtype):
        per = 8
    else:  # the siblings through MLX's quantized matmul: no gated-MLP launch, its activations are nodes
        per = 5
    assert stats["computed_ahead"] == per * lowerings, f"per lowering {per}: {_ahead_counts(stats)}"


@pytest.mark.parametrize("cond", [True, False])
def test_matmul_nbits_in_if_branches(cond):
    """Constant weights from the enclosing graph inside control-flow bodies: each branch's node gets
    its prepared arrays at Compile (the body frames' prepare), traced and replayed alike."""
    then_model, feeds = nbits_model(128, 16, 4, 32, zp="u8", seed=11)
    else_model, _ = nbits_model(128, 16, 4, 64, zp="float", seed=12)
    import onnx
    branches = []
    for tag, blob in (("t", then_model), ("e", else_model)):
        g = onnx.load_from_string(blob).graph
        node = g.node[0]
        renamed = {n: f"{n}_{tag}" for n in node.input if n and n != "A"}
        inits = [helper.make_tensor(renamed[t.name], t.data_type, t.dims, t.raw_data, raw=True) for t in g.initializer]
        branches.append((helper.make_graph(
            [helper.make_node("MatMulNBits", [renamed.get(n, n) for n in node.input], [f"y_{tag}"], domain=MS,
                              **{a.name: helper.get_attribute_value(a) for a in node.attribute})],
            f"{tag}_branch", [], [helper.make_tensor_value_info(f"y_{tag}", TensorProto.FLOAT, None)]), inits))
    (then_g, then_inits), (else_g, else_inits) = branches
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["Y"], then_branch=then_g, else_branch=else_g)], "g",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, list(feeds["A"].shape)),
         helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], initializer=then_inits + else_inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)])
    model.ir_version = 10
    compare(model.SerializeToString(), {**feeds, "c": np.array(cond)})


def test_matmul_nbits_declined(tmp_path):
    assert "2-bit weights" in declined_reason(nbits_model(64, 8, 2, 32, acc=4)[0], tmp_path)
    assert "ignores those zero points" in declined_reason(nbits_model(64, 8, 4, 32, zp="u8", gidx="trivial")[0], tmp_path)
    assert "4-bit values only" in declined_reason(nbits_model(64, 8, 2, 32, gidx="trivial")[0], tmp_path)
    assert "weight_prepacked" in declined_reason(nbits_model(64, 8, 4, 32, extra_attrs={"weight_prepacked": 1})[0],
                                                 tmp_path)


# ---- GatherBlockQuantized ------------------------------------------------------------------------

def gbq_model(bits, block, rows=12, cols=96, lead=(), idx_shape=(2, 3), zp=False, scale_dtype=np.float32,
              idx_dtype=np.int64, seed=0, idx=None):
    rng = np.random.default_rng(seed)
    comp = 8 // bits
    data = rng.integers(0, 256, size=(rows,) + tuple(lead) + (cols // comp,), dtype=np.uint8)
    nb = (cols + block - 1) // block
    scales = (rng.random((rows,) + tuple(lead) + (nb,)) * 0.1 + 0.01).astype(scale_dtype)
    consts = {"data": data, "scales": scales}
    names = ["data", "indices", "scales"]
    if zp:
        zv = rng.integers(0, 2 ** bits, size=(rows * int(np.prod(lead, dtype=np.int64)), nb)).astype(np.uint8)
        consts["zp"] = pack_zero_points(zv, bits).reshape((rows,) + tuple(lead) + (-1,))
        names.append("zp")
    indices = rng.integers(-rows, rows, size=idx_shape).astype(idx_dtype) if idx is None else np.asarray(idx, idx_dtype)
    node = helper.make_node("GatherBlockQuantized", names, ["y"], domain=MS, bits=bits, block_size=block,
                            gather_axis=0, quantize_axis=len(lead) + 1)
    model = make_model([node], [("indices", onnx_type(indices), list(indices.shape))],
                       [("y", onnx_type(np.zeros(1, scale_dtype)), None)], consts.items(), domains=[(MS, 1)])
    return model, {"indices": indices}


@pytest.mark.parametrize("scale_dtype", [np.float32, np.float16])
@pytest.mark.parametrize("zp", [False, True])
@pytest.mark.parametrize("bits,block", [(4, 32), (4, 16), (8, 32), (8, 64), (2, 32), (4, 128)])
def test_gather_block_quantized(bits, block, zp, scale_dtype):
    model, feeds = gbq_model(bits, block, zp=zp, scale_dtype=scale_dtype, seed=bits + block)
    compare(model, feeds)


@pytest.mark.parametrize("idx_dtype", [np.int32, np.int64])
def test_gather_block_quantized_index_forms(idx_dtype):
    """3-D data, scalar and out-of-range indices (ORT writes zero rows), 100 columns (partial block)."""
    compare(*gbq_model(4, 32, lead=(3,), idx_shape=(4,), zp=True, idx_dtype=idx_dtype, seed=3))
    compare(*gbq_model(4, 32, idx=5, idx_dtype=idx_dtype, seed=4))
    compare(*gbq_model(4, 32, idx=[[0, 12, -13], [-1, 3, 40]], idx_dtype=idx_dtype, seed=5))
    compare(*gbq_model(8, 32, cols=100, idx_shape=(3,), zp=True, idx_dtype=idx_dtype, seed=6))
    compare(*gbq_model(4, 32, idx_shape=(0,), idx_dtype=idx_dtype, seed=7))
    info = np.iinfo(idx_dtype)  # the dtype's ends: zero rows, nothing read outside the table
    compare(*gbq_model(4, 32, idx=[info.min, info.max, info.min + 1, -1], idx_dtype=idx_dtype, seed=8))


# ---- a small LLM-style chain -----------------------------------------------------------------------

@pytest.mark.parametrize("acc", [0, 4])
def test_quantized_decoder_chain(acc):
    """Quantized embedding -> RMS norm -> MatMulNBits -> FastGelu -> MatMulNBits -> skip RMS norm, as one
    MLX cluster (strict mode) against ORT's CPU EP."""
    rng = np.random.default_rng(11)
    vocab, hidden, ffn = 50, 64, 128
    emb = rng.integers(0, 256, size=(vocab, hidden // 2), dtype=np.uint8)
    emb_scales = (rng.random((vocab, hidden // 32)) * 0.05 + 0.01).astype(np.float32)

    def weights(k, n, seed):
        r = np.random.default_rng(seed)
        return (r.integers(0, 256, size=(n, k // 32, 16), dtype=np.uint8),
                (r.random((n, k // 32)) * 0.05 + 0.01).astype(np.float32))

    w1, s1 = weights(hidden, ffn, 1)
    w2, s2 = weights(ffn, hidden, 2)
    gamma = rng.uniform(0.5, 1.5, size=hidden).astype(np.float32)
    nodes = [
        helper.make_node("GatherBlockQuantized", ["emb", "ids", "emb_scales"], ["h"], domain=MS, bits=4,
                         block_size=32, gather_axis=0, quantize_axis=1),
        helper.make_node("SimplifiedLayerNormalization", ["h", "gamma"], ["n1"], axis=-1, epsilon=1e-5),
        helper.make_node("MatMulNBits", ["n1", "w1", "s1"], ["f1"], domain=MS, K=hidden, N=ffn, bits=4, block_size=32,
                         accuracy_level=acc),
        helper.make_node("FastGelu", ["f1"], ["g1"], domain=MS),
        helper.make_node("MatMulNBits", ["g1", "w2", "s2"], ["f2"], domain=MS, K=ffn, N=hidden, bits=4, block_size=32,
                         accuracy_level=acc),
        helper.make_node("SkipSimplifiedLayerNormalization", ["f2", "h", "gamma"], ["y", "", "", "res"], domain=MS,
                         epsilon=1e-5),
    ]
    consts = {"emb": emb, "emb_scales": emb_scales, "w1": w1, "s1": s1, "w2": w2, "s2": s2, "gamma": gamma}
    model = make_model(nodes, [("ids", TensorProto.INT64, [2, 5])],
                       [("y", TensorProto.FLOAT, None), ("res", TensorProto.FLOAT, None)], consts.items(),
                       opset=17, domains=[(MS, 1)])
    feeds = {"ids": rng.integers(0, vocab, size=(2, 5)).astype(np.int64)}
    want = run_cpu(model, feeds)
    for got in run_mlx_each(model, feeds):
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * float(np.abs(w).max()))
