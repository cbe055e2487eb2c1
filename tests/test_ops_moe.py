"""Parity of the mixture-of-experts ops (src/ops/moe.c) against ORT's CPU EP: MoE (float experts)
and QMoE (packed 2/4/8-bit experts) over activations, k, routing-weight normalization, router
weights, weight bits, block sizes, zero points, constant vs fed weights (ORT's int8 kernels run
only on constant block-wise weights), float16, decode (experts gathered per route) and prefill
(experts run densely), and the declined forms. The float32 tolerance is relative to the output's
magnitude: both sides sum the products in different orders."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxruntime_ep_mlx as mlx_ep
from parity import make_model, onnx_type, run_cpu, run_mlx_each

MS = "com.microsoft"


def compare(model, feeds, int8=False):
    """Every Run of the eager/trace/replay triple against ORT's CPU EP; returns the first Run's output.
    int8: ORT quantized FC2's input to int8; an FC1 output within an ulp of a rounding tie may
    round the other way there, moving one token's row by about one quantization step. Such rows
    are allowed when rare (at most 5%) and within 2e-3 of the output's magnitude."""
    (want,) = run_cpu(model, feeds)
    runs = [got for (got,) in run_mlx_each(model, feeds)]
    for got in runs:
        compare_one(got, want, int8)
    return runs[0]


def compare_one(got, want, int8):
    assert got.dtype == want.dtype and got.shape == want.shape
    scale = float(np.abs(want.astype(np.float64)).max()) if want.size else 1.0
    g, w = got.astype(np.float64), want.astype(np.float64)
    rtol, atol = (1e-2, 1e-3 * scale) if want.dtype == np.float16 else (1e-5, 2e-6 * scale)
    if int8 and want.size:
        rows = (np.abs(g - w) > atol + rtol * np.abs(w)).reshape(-1, w.shape[-1]).any(1)
        assert rows.sum() <= max(1, rows.size // 20), f"{rows.sum()} of {rows.size} rows differ"
        np.testing.assert_allclose(g, w, rtol=0, atol=2e-3 * scale)
        keep = ~rows
        g, w = g.reshape(-1, w.shape[-1])[keep], w.reshape(-1, w.shape[-1])[keep]
    np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def declined_reason(model, tmp_path) -> str:
    path = tmp_path / "report.txt"
    try:
        mlx_ep.session(model, options={"report": str(path)}, strict=False)
    except Exception:  # noqa: BLE001 - only the report matters here
        pass
    return path.read_text()


def moe_node_model(op, values, order, attrs, fed, dtype):
    """values: name -> array; order: the node's inputs ('' for absent); fed: names fed at run time."""
    while order and not order[-1]:
        order = order[:-1]
    node = helper.make_node(op, order, ["y"], domain=MS, **attrs)
    inputs = [(k, onnx_type(values[k]), list(values[k].shape)) for k in order if k in fed]
    consts = [(k, values[k]) for k in order if k and k not in fed]
    model = make_model([node], inputs, [("y", onnx_type(np.zeros(1, dtype)), None)], consts, domains=[(MS, 1)])
    return model, {k: values[k] for k in order if k in fed}


# ---- MoE -----------------------------------------------------------------------------------------

def moe_model(act="relu", k=2, normalize=0, experts=4, hidden=32, inter=16, tokens=5, dtype=np.float32, bias=True,
              rank=2, attrs=None, weights_fed=False, logits=None, seed=0):
    rng = np.random.default_rng(seed)
    fuse = 2 if act == "swiglu" else 1
    shape = (tokens, hidden) if rank == 2 else (1, tokens, hidden)
    v = {"x": rng.standard_normal(shape).astype(dtype),
         "router": (rng.standard_normal((tokens, experts)) if logits is None else np.asarray(logits)).astype(dtype),
         "w1": (rng.standard_normal((experts, fuse * inter, hidden)) * 0.3).astype(dtype),
         "b1": (rng.standard_normal((experts, fuse * inter)) * 0.1).astype(dtype),
         "w2": (rng.standard_normal((experts, hidden, inter)) * 0.3).astype(dtype),
         "b2": (rng.standard_normal((experts, hidden)) * 0.1).astype(dtype)}
    a = dict(k=k, activation_type=act, normalize_routing_weights=normalize, **(attrs or {}))
    if act == "swiglu":
        a.setdefault("swiglu_fusion", 1)
    order = ["x", "router", "w1", "b1" if bias else "", "w2", "b2" if bias else ""]
    fed = {"x", "router"} | ({"w1", "b1", "w2", "b2"} if weights_fed else set())
    return moe_node_model("MoE", v, order, a, fed, dtype)


@pytest.mark.parametrize("tokens", [1, 5])
@pytest.mark.parametrize("normalize", [0, 1])
@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("act", ["relu", "gelu", "silu", "identity", "swiglu"])
def test_moe(act, k, normalize, tokens):
    compare(*moe_model(act, k, normalize, tokens=tokens, seed=k * 10 + tokens))


@pytest.mark.parametrize("act", ["relu", "gelu", "silu", "swiglu"])
def test_moe_float16(act):
    """float16 widened to float32 and the output rounded once, as ORT's CPU kernel."""
    compare(*moe_model(act, 2, 1, hidden=64, inter=32, tokens=6, dtype=np.float16, seed=3))
    compare(*moe_model(act, 2, 1, hidden=64, inter=32, tokens=1, dtype=np.float16, seed=4))


def test_moe_forms():
    swiglu = dict(activation_alpha=1.702, activation_beta=1.0, swiglu_limit=0.5)
    compare(*moe_model("swiglu", 2, 1, attrs=swiglu, seed=1))
    compare(*moe_model("swiglu", 2, 0, tokens=1, attrs=swiglu, seed=2))
    compare(*moe_model("silu", 2, 1, attrs=dict(activation_alpha=2.0, activation_beta=1.0), seed=3))  # unused
    compare(*moe_model("relu", 2, 0, attrs=dict(use_sparse_mixer=1), seed=4))  # ORT's CPU kernel ignores it
    compare(*moe_model("relu", 2, 0, bias=False, seed=5))
    compare(*moe_model("gelu", 2, 1, rank=3, seed=6))
    compare(*moe_model("gelu", 2, 1, weights_fed=True, seed=7))
    compare(*moe_model("relu", 4, 0, seed=8))  # k = E
    compare(*moe_model("silu", 2, 1, experts=8, tokens=64, hidden=64, inter=64, seed=9))
    compare(*moe_model("relu", 2, 1, tokens=0, seed=10))


@pytest.mark.parametrize("k", [1, 2, 3])
def test_moe_ties(k):
    """Equal router logits: ORT picks the higher expert index first."""
    logits = [[0, 0, 0, 0, 0, 0], [1, 2, 2, 0, 2, 1], [-1, 5, 5, -1, 0, 5], [3, 1, 3, 1, 3, 1]]
    compare(*moe_model("identity", k, 0, experts=6, tokens=4, logits=logits, seed=k))


def test_moe_declined(tmp_path):
    assert "float16 with normalize_routing_weights=0" in declined_reason(moe_model(dtype=np.float16)[0], tmp_path)
    assert "swiglu_fusion=2" in declined_reason(moe_model("swiglu", attrs=dict(swiglu_fusion=2))[0], tmp_path)
    assert "activation_type 'geglu'" in declined_reason(moe_model("geglu")[0], tmp_path)
    assert "k=5 > 4 experts" in declined_reason(moe_model(k=5)[0], tmp_path)
    assert "use_sparse_mixer with k != 2" in declined_reason(moe_model(k=1, attrs=dict(use_sparse_mixer=1))[0], tmp_path)
    rng = np.random.default_rng(0)
    v = {"x": rng.standard_normal((2, 8)).astype(np.float32), "router": rng.standard_normal((2, 2)).astype(np.float32),
         "w1": np.zeros((2, 4, 8), np.float32), "w2": np.zeros((2, 8, 4), np.float32), "w3": np.zeros((2, 4, 8), np.float32)}
    model, _ = moe_node_model("MoE", v, ["x", "router", "w1", "", "w2", "", "w3"], dict(k=1), {"x", "router"}, np.float32)
    assert "fc3 inputs" in declined_reason(model, tmp_path)


# ---- QMoE ----------------------------------------------------------------------------------------

def pack_bits(q, bits):
    """[..., K] integer values -> uint8 [..., K * bits / 8], element 0 in the low bits."""
    per = 8 // bits
    q = q.astype(np.uint32).reshape(q.shape[:-1] + (q.shape[-1] // per, per))
    return (q << (np.arange(per, dtype=np.uint32) * bits)).sum(-1).astype(np.uint8)


def quantized_fc(rng, experts, rows, cols, bits, block, zp, dtype):
    q = rng.integers(0, 2 ** bits, size=(experts, rows, cols))
    groups = cols // block if block else None
    sshape = (experts, rows, groups) if block else (experts, rows)
    scales = (rng.random(sshape) * 0.02 + 0.005).astype(dtype)
    zps = None
    if zp:
        z = rng.integers(0, 2 ** bits, size=sshape)
        per = 8 // bits
        zps = pack_bits(np.pad(z, [(0, 0)] * (z.ndim - 1) + [(0, (-z.shape[-1]) % per)]), bits)
    return pack_bits(q, bits), scales, zps


def uses_int8(bits=4, block=0, zp=False, attrs=None, fed=(), **_):
    """ORT's rule: block-wise 8-bit (4-bit with accuracy_level 4) experts with constant weights,
    scales and zero points run on MLAS's int8-activation kernels."""
    level4 = (attrs or {}).get("accuracy_level", 0) == 4
    consts = not set(fed) & {"w1", "s1", "z1", "w2", "s2", "z2"}
    return block > 0 and (bits == 8 or (bits == 4 and level4)) and consts


def check_qmoe(bits=4, block=0, zp=False, **kw):
    kw.update(bits=bits, block=block, zp=zp)
    return compare(*qmoe_model(**kw), int8=uses_int8(**kw))


def qmoe_model(bits=4, block=0, zp=False, act="relu", k=2, normalize=0, experts=4, hidden=64, inter=64, tokens=5,
               dtype=np.float32, bias=True, rank=2, attrs=None, fed=(), router_weights=False, seed=0):
    """fed: names among w1/s1/z1/w2/s2/z2/b1/b2 given as graph inputs rather than initializers."""
    rng = np.random.default_rng(seed)
    fuse = 2 if act == "swiglu" else 1
    v = {}
    v["w1"], v["s1"], v["z1"] = quantized_fc(rng, experts, fuse * inter, hidden, bits, block, zp, dtype)
    v["w2"], v["s2"], v["z2"] = quantized_fc(rng, experts, hidden, inter, bits, block, zp, dtype)
    v["x"] = rng.standard_normal((tokens, hidden) if rank == 2 else (1, tokens, hidden)).astype(dtype)
    v["router"] = rng.standard_normal((tokens, experts)).astype(dtype)
    v["b1"] = (rng.standard_normal((experts, fuse * inter)) * 0.1).astype(dtype)
    v["b2"] = (rng.standard_normal((experts, hidden)) * 0.1).astype(dtype)
    v["rw"] = rng.random((tokens, experts)).astype(dtype)
    a = dict(k=k, activation_type=act, normalize_routing_weights=normalize, expert_weight_bits=bits, **(attrs or {}))
    if block:
        a["block_size"] = block
    if act == "swiglu":
        a.setdefault("swiglu_fusion", 1)
    b = "b1" if bias else ""
    order = ["x", "router", "w1", "s1", b, "w2", "s2", "b2" if bias else "", "", "", "",
             "z1" if zp else "", "z2" if zp else "", "", "rw" if router_weights else ""]
    return moe_node_model("QMoE", v, order, a, {"x", "router", "rw"} | set(fed), dtype)


@pytest.mark.parametrize("fed", [(), ("w1", "w2")])
@pytest.mark.parametrize("zp", [False, True])
@pytest.mark.parametrize("bits,block", [(4, 0), (4, 16), (4, 32), (4, 128), (8, 0), (8, 16), (8, 32), (8, 128), (2, 0)])
def test_qmoe_weights(bits, block, zp, fed):
    """Constant block-wise 8-bit experts take ORT's int8-activation kernels; the others dequantize."""
    hidden, inter = (256, 256) if block == 128 else (64, 64)
    seed = bits * 100 + block + zp
    check_qmoe(bits, block, zp, hidden=hidden, inter=inter, tokens=5, fed=fed, seed=seed)
    check_qmoe(bits, block, zp, hidden=hidden, inter=inter, tokens=1, fed=fed, seed=seed + 1)


@pytest.mark.parametrize("zp", [False, True])
@pytest.mark.parametrize("block", [16, 32, 64])
def test_qmoe_accuracy_level_4(block, zp):
    """4-bit block-wise constant experts with accuracy_level 4: ORT quantizes activations to int8."""
    check_qmoe(4, block, zp, attrs=dict(accuracy_level=4), hidden=128, inter=128, tokens=6, seed=block + zp)
    check_qmoe(4, block, zp, attrs=dict(accuracy_level=4), hidden=128, inter=128, tokens=1, seed=block + 3)
    check_qmoe(4, block, zp, attrs=dict(accuracy_level=4), hidden=128, inter=128, fed=("s1", "s2"), seed=block + 2)


@pytest.mark.parametrize("act", ["relu", "gelu", "silu", "identity", "swiglu"])
@pytest.mark.parametrize("bits,block", [(4, 0), (8, 32)])
def test_qmoe_activations(act, bits, block):
    attrs = dict(activation_alpha=1.702, activation_beta=1.0, swiglu_limit=7.0) if act == "swiglu" else None
    check_qmoe(bits, block, act=act, attrs=attrs, tokens=6, seed=len(act))
    check_qmoe(bits, block, act=act, attrs=attrs, tokens=1, seed=len(act) + 1)


@pytest.mark.parametrize("normalize", [0, 1])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_qmoe_routing(k, normalize):
    """Without router_weights ORT always normalizes (softmax over the k logits); with them it
    mixes by router_weights, divided by their sum only when normalizing."""
    check_qmoe(4, k=k, normalize=normalize, seed=k)
    check_qmoe(4, k=k, normalize=normalize, router_weights=True, seed=k + 10)
    check_qmoe(8, 32, k=k, normalize=normalize, router_weights=True, tokens=1, seed=k + 20)


@pytest.mark.parametrize("bits,block,zp", [(4, 0, True), (8, 0, False), (8, 32, False), (8, 16, True), (4, 32, True)])
def test_qmoe_float16(bits, block, zp):
    check_qmoe(bits, block, zp, dtype=np.float16, tokens=5, seed=bits + block)
    check_qmoe(bits, block, zp, dtype=np.float16, tokens=1, act="swiglu", seed=bits + block + 1)


def test_qmoe_forms():
    check_qmoe(8, 32, rank=3, seed=1)
    check_qmoe(8, 32, tokens=0, seed=2)
    check_qmoe(8, 32, zp=True, fed=("z1", "z2"), seed=3)  # fed zero points: dequantize path
    check_qmoe(8, 256, hidden=256, inter=256, seed=4)
    check_qmoe(4, 32, experts=16, k=4, tokens=1, seed=5)
    check_qmoe(4, 32, experts=16, k=4, tokens=3, seed=6)
    check_qmoe(8, 32, experts=8, k=8, tokens=3, seed=7)
    check_qmoe(4, 0, attrs=dict(use_sparse_mixer=1, weights_prepacked=0), seed=8)
    check_qmoe(8, 32, bias=False, seed=9)


def test_qmoe_declined(tmp_path):
    def reason(**kw):
        return declined_reason(qmoe_model(**kw)[0], tmp_path)
    assert "block-wise 2-bit" in reason(bits=2, block=32)
    assert "quant_type 'fp8'" in reason(attrs=dict(quant_type="fp8"))
    assert "mixed widths" in reason(attrs=dict(fc1_expert_weight_bits=8))
    assert "weights_prepacked=1" in reason(attrs=dict(weights_prepacked=1))
    assert "one block per row" in reason(bits=8, block=64, zp=True, hidden=64, inter=64)
    assert "swiglu_fusion=0" in reason(act="swiglu", attrs=dict(swiglu_fusion=0))
    assert "block_size=24" in reason(block=24)
    rng = np.random.default_rng(0)
    v = {"x": rng.standard_normal((2, 32)).astype(np.float32), "router": rng.standard_normal((2, 2)).astype(np.float32)}
    v["w1"], v["s1"], _ = quantized_fc(rng, 2, 32, 32, 4, 0, False, np.float32)
    v["w2"], v["s2"], _ = quantized_fc(rng, 2, 32, 32, 4, 0, False, np.float32)
    v["w3"], v["s3"] = v["w1"], v["s1"]
    model, _ = moe_node_model("QMoE", v, ["x", "router", "w1", "s1", "", "w2", "s2", "", "w3", "s3"],
                              dict(k=1, expert_weight_bits=4), {"x", "router"}, np.float32)
    assert "fc3 inputs" in declined_reason(model, tmp_path)
