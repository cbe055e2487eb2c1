"""Parity tests of the attention family (src/ops/attention.c): ai.onnx Attention and the
com.microsoft MultiHeadAttention, GroupQueryAttention and Attention contrib ops, each run on the
MLX EP in strict mode and on ORT's CPU EP, in float32 and float16."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from parity import NP_TO_ONNX, assert_parity, make_model

MS = "com.microsoft"
F32, F16 = np.float32, np.float16
OUT_NAMES = ["y", "o1", "o2", "o3"]


def rnd(shape, dtype=F32, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


def build(op, inputs, attrs=None, outputs=1, out_dtypes=None, domain="", opset=23, dynamic=False):
    """inputs: list of (name, array) or None for an absent optional input; outputs: count, or a
    list of booleans saying which outputs are wired. Returns (model, feeds)."""
    names, ins, feeds = [], [], {}
    for item in inputs:
        if item is None:
            names.append("")
            continue
        name, arr = item
        names.append(name)
        feeds[name] = arr
        shape = [f"{name}_{i}" for i in range(arr.ndim)] if dynamic else list(arr.shape)
        ins.append((name, NP_TO_ONNX[arr.dtype], shape))
    wired = [True] * outputs if isinstance(outputs, int) else outputs
    out_names = [OUT_NAMES[i] if w else "" for i, w in enumerate(wired)]
    while out_names and not out_names[-1]:
        out_names.pop()
    t = NP_TO_ONNX[inputs[0][1].dtype]
    out_dtypes = out_dtypes or {}
    outs = [(n, out_dtypes.get(i, t), None) for i, n in enumerate(out_names) if n]
    node = helper.make_node(op, names, out_names, domain=domain, **(attrs or {}))
    model = make_model([node], ins, outs, opset=opset, domains=[(MS, 1)] if domain else [])
    return model, feeds


def check(*args, **kw):
    model, feeds = build(*args, **kw)
    return assert_parity(model, feeds)


# ---- ai.onnx Attention ----------------------------------------------------------------------

def onnx_inputs(dtype, b=2, hq=4, hkv=2, s=3, l=5, dk=8, dv=6, past=0, three_d=False, seed=0):
    q = rnd((b, hq, s, dk), dtype, seed)
    k = rnd((b, hkv, l, dk), dtype, seed + 1)
    v = rnd((b, hkv, l, dv), dtype, seed + 2)
    if three_d:
        q = q.transpose(0, 2, 1, 3).reshape(b, s, hq * dk)
        k = k.transpose(0, 2, 1, 3).reshape(b, l, hkv * dk)
        v = v.transpose(0, 2, 1, 3).reshape(b, l, hkv * dv)
    pk = rnd((b, hkv, past, dk), dtype, seed + 3) if past else None
    pv = rnd((b, hkv, past, dv), dtype, seed + 4) if past else None
    return q, k, v, pk, pv


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("three_d", [False, True])
@pytest.mark.parametrize("hq,hkv", [(4, 4), (4, 2), (6, 1)])
@pytest.mark.parametrize("causal", [0, 1])
def test_onnx_attention_basic(dtype, three_d, hq, hkv, causal):
    q, k, v, _, _ = onnx_inputs(dtype, hq=hq, hkv=hkv, three_d=three_d)
    attrs = {"is_causal": causal}
    if three_d:
        attrs.update(q_num_heads=hq, kv_num_heads=hkv)
    check("Attention", [("q", q), ("k", k), ("v", v)], attrs)


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("mask_shape", [(3, 7), (1, 3, 7), (4, 3, 7), (2, 1, 3, 7), (1, 4, 3, 7), (2, 4, 3, 7)])
@pytest.mark.parametrize("kind", ["bool", "float"])
@pytest.mark.parametrize("causal", [0, 1])
def test_onnx_attention_mask_past(dtype, mask_shape, kind, causal):
    q, k, v, pk, pv = onnx_inputs(dtype, l=4, past=3)
    rng = np.random.default_rng(7)
    mask = rng.random(mask_shape) > 0.3 if kind == "bool" else rnd(mask_shape, dtype, 9)
    check("Attention", [("q", q), ("k", k), ("v", v), ("m", mask), ("pk", pk), ("pv", pv)],
          {"is_causal": causal}, outputs=3)


@pytest.mark.parametrize("dtype", [F32, F16])
def test_onnx_attention_fully_masked_rows(dtype):
    """ORT gives zeros for rows where every key is masked (bool false, -inf or lowest)."""
    q, k, v, _, _ = onnx_inputs(dtype, hq=2, hkv=2)
    m = np.ones((3, 5), bool)
    m[1] = False
    check("Attention", [("q", q), ("k", k), ("v", v), ("m", m)], {"qk_matmul_output_mode": 3},
          outputs=[True, False, False, True])
    mf = np.zeros((2, 1, 3, 5), dtype)
    mf[0, 0, 0] = -np.inf
    mf[1, 0, 2] = np.finfo(dtype).min
    check("Attention", [("q", q), ("k", k), ("v", v), ("m", mf)], {})


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("three_d", [False, True])
def test_onnx_attention_decode_with_past(dtype, three_d):
    """One query after a past: ORT applies no causal mask even with several new keys."""
    for l in (1, 3):
        q, k, v, pk, pv = onnx_inputs(dtype, s=1, l=l, past=4, three_d=three_d)
        attrs = {"is_causal": 1}
        if three_d:
            attrs.update(q_num_heads=4, kv_num_heads=2)
        check("Attention", [("q", q), ("k", k), ("v", v), None, ("pk", pk), ("pv", pv)], attrs, outputs=3)


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
@pytest.mark.parametrize("softcap", [0.0, 2.0])
@pytest.mark.parametrize("dtype", [F32, F16])
def test_onnx_attention_qk_output_softcap(mode, softcap, dtype):
    q, k, v, pk, pv = onnx_inputs(dtype, l=4, past=2)
    m = rnd((3, 6), dtype, 5)
    attrs = {"qk_matmul_output_mode": mode, "is_causal": 1, "scale": 0.3}
    if softcap:
        attrs["softcap"] = softcap
    check("Attention", [("q", q), ("k", k), ("v", v), ("m", m), ("pk", pk), ("pv", pv)], attrs, outputs=4)


@pytest.mark.parametrize("causal", [0, 1])
@pytest.mark.parametrize("lengths", [[5, 5], [2, 4], [4, 3], [0, 5]])
def test_onnx_attention_nonpad_kv_seqlen(causal, lengths):
    q, k, v, _, _ = onnx_inputs(F32)
    n = np.array(lengths, np.int64)
    check("Attention", [("q", q), ("k", k), ("v", v), None, None, None, ("n", n)], {"is_causal": causal},
          opset=24)
    m = np.random.default_rng(3).random((2, 1, 3, 5)) > 0.2
    check("Attention", [("q", q), ("k", k), ("v", v), ("m", m), None, None, ("n", n)], {"is_causal": causal},
          opset=24)


def test_onnx_attention_symbolic_and_softmax_precision():
    q, k, v, pk, pv = onnx_inputs(F32, past=2)
    model, feeds = build("Attention", [("q", q), ("k", k), ("v", v), None, ("pk", pk), ("pv", pv)],
                         {"is_causal": 1, "softmax_precision": 1}, outputs=3, dynamic=True)
    assert_parity(model, feeds)


def test_onnx_attention_diff_head_sizes_3d():
    q, k, v, pk, pv = onnx_inputs(F32, hq=3, hkv=3, dk=8, dv=10, past=2, three_d=True)
    check("Attention", [("q", q), ("k", k), ("v", v), None, ("pk", pk), ("pv", pv)],
          {"q_num_heads": 3, "kv_num_heads": 3, "softcap": 3.0}, outputs=3)


# ---- com.microsoft MultiHeadAttention -------------------------------------------------------

def mha_inputs(dtype, b=2, s=3, l=4, n=2, h=4, hv=4, seed=0):
    q = rnd((b, s, n * h), dtype, seed)
    k = rnd((b, l, n * h), dtype, seed + 1)
    v = rnd((b, l, n * hv), dtype, seed + 2)
    bias = rnd((2 * n * h + n * hv,), dtype, seed + 3)
    return q, k, v, bias


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("uni", [0, 1])
def test_mha_basic(dtype, with_bias, uni):
    q, k, v, bias = mha_inputs(dtype, hv=3)
    check("MultiHeadAttention", [("q", q), ("k", k), ("v", v), ("b", bias) if with_bias else None],
          {"num_heads": 2, "unidirectional": uni}, domain=MS)


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("mask_kind", ["lengths", "2d", "3d"])
@pytest.mark.parametrize("bias_shape", [None, (2, 2, 3, 9), (1, 2, 3, 9), (2, 1, 3, 9), (1, 1, 3, 9)])
@pytest.mark.parametrize("uni", [0, 1])
def test_mha_mask_bias_past(dtype, mask_kind, bias_shape, uni):
    q, k, v, bias = mha_inputs(dtype)
    pk, pv = rnd((2, 2, 5, 4), dtype, 11), rnd((2, 2, 5, 4), dtype, 12)
    rng = np.random.default_rng(4)
    mask = {"lengths": np.array([6, 9], np.int32),
            "2d": (rng.random((2, 9)) > 0.3).astype(np.int32),
            "3d": (rng.random((2, 3, 9)) > 0.3).astype(np.int32)}[mask_kind]
    ab = rnd(bias_shape, dtype, 13) if bias_shape else None
    check("MultiHeadAttention",
          [("q", q), ("k", k), ("v", v), ("b", bias), ("m", mask), ("ab", ab) if ab is not None else None,
           ("pk", pk), ("pv", pv)],
          {"num_heads": 2, "unidirectional": uni, "mask_filter_value": -1000.0}, outputs=3, domain=MS)


@pytest.mark.parametrize("dtype", [F32, F16])
def test_mha_cross_attention_bnsh(dtype):
    q, _, _, bias = mha_inputs(dtype)
    k, v = rnd((2, 2, 6, 4), dtype, 21), rnd((2, 2, 6, 4), dtype, 22)
    lens = np.array([3, 6], np.int32)
    check("MultiHeadAttention", [("q", q), ("k", k), ("v", v), ("b", bias), ("m", lens)],
          {"num_heads": 2, "scale": 0.4}, outputs=3, domain=MS)


@pytest.mark.parametrize("dtype", [F32, F16])
def test_mha_decode_and_qk_output(dtype):
    q, k, v, bias = mha_inputs(dtype, s=1, l=1)
    pk, pv = rnd((2, 2, 5, 4), dtype, 11), rnd((2, 2, 5, 4), dtype, 12)
    ab = rnd((2, 2, 1, 6), dtype, 13)
    check("MultiHeadAttention", [("q", q), ("k", k), ("v", v), ("b", bias), None, ("ab", ab), ("pk", pk), ("pv", pv)],
          {"num_heads": 2, "unidirectional": 1}, outputs=4, domain=MS)
    q, k, v, bias = mha_inputs(dtype)
    mask = (np.random.default_rng(1).random((2, 4)) > 0.3).astype(np.int32)
    check("MultiHeadAttention", [("q", q), ("k", k), ("v", v), ("b", bias), ("m", mask)],
          {"num_heads": 2, "unidirectional": 1}, outputs=[True, False, False, True], domain=MS)


def test_mha_symbolic_dims():
    q, k, v, bias = mha_inputs(F32)
    pk, pv = rnd((2, 2, 5, 4), F32, 11), rnd((2, 2, 5, 4), F32, 12)
    model, feeds = build("MultiHeadAttention", [("q", q), ("k", k), ("v", v), ("b", bias), None, None,
                                                ("pk", pk), ("pv", pv)],
                         {"num_heads": 2, "unidirectional": 1}, outputs=3, domain=MS, dynamic=True)
    assert_parity(model, feeds)


# ---- com.microsoft GroupQueryAttention ------------------------------------------------------

N_Q, N_KV = 4, 2


def rope_caches(max_pos, half, dtype):
    inv = 1.0 / (10000 ** (np.arange(half) / half))
    ang = np.arange(max_pos)[:, None] * inv[None, :]
    return np.cos(ang).astype(dtype), np.sin(ang).astype(dtype)


def gqa_check(dtype, seq, seqlens, total, past=None, h=16, attrs=None, packed=False, rotary=None,
              pos=None, bias=None, sink=None, outputs=3, dynamic=False, seed=0, rope_len=32):
    """past: past buffer length or None; rotary: rotary_dim (cos/sin caches of rope_len positions)."""
    b = len(seqlens)
    if packed:
        q = rnd((b, seq, (N_Q + 2 * N_KV) * h), dtype, seed)
        k = v = None
    else:
        q, k, v = rnd((b, seq, N_Q * h), dtype, seed), rnd((b, seq, N_KV * h), dtype, seed + 1), \
            rnd((b, seq, N_KV * h), dtype, seed + 2)
    pk = rnd((b, N_KV, past, h), dtype, seed + 3) if past is not None else None
    pv = rnd((b, N_KV, past, h), dtype, seed + 4) if past is not None else None
    cos = sin = None
    if rotary:
        cos, sin = rope_caches(rope_len, rotary // 2, dtype)
    items = [("q", q), ("k", k) if k is not None else None, ("v", v) if v is not None else None,
             ("pk", pk) if pk is not None else None, ("pv", pv) if pv is not None else None,
             ("sl", np.array(seqlens, np.int32)), ("tsl", np.array(total, np.int32)),
             ("cos", cos) if cos is not None else None, ("sin", sin) if sin is not None else None,
             ("pos", pos) if pos is not None else None, ("ab", bias) if bias is not None else None,
             ("sink", sink) if sink is not None else None]
    while items[-1] is None:
        items.pop()
    a = {"num_heads": N_Q, "kv_num_heads": N_KV, **(attrs or {})}
    if rotary:
        a.setdefault("do_rotary", 1)
    model, feeds = build("GroupQueryAttention", items, a, outputs=outputs, domain=MS, dynamic=dynamic)
    assert_parity(model, feeds)


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("past", [None, 8])
@pytest.mark.parametrize("seqlens", [[4, 4], [4, 2]])
@pytest.mark.parametrize("window", [-1, 2])
def test_gqa_prompt(dtype, past, seqlens, window):
    gqa_check(dtype, 5, seqlens, 5, past=past, attrs={"local_window_size": window})


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("seqlens,total", [([5, 3], 6), ([7, 7], 8), ([8, 6], 9)])
@pytest.mark.parametrize("window", [-1, 3])
def test_gqa_decode(dtype, seqlens, total, window):
    gqa_check(dtype, 1, seqlens, total, past=8, attrs={"local_window_size": window})


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("seqlens,total", [([8], 9), ([3], 9), ([0], 9), ([3], 5), ([7], 8)])
@pytest.mark.parametrize("rotary", [None, 16])
def test_gqa_decode_single_sequence(dtype, seqlens, total, rotary):
    # One sequence, one new token: the present cache is written in place at seqlens_k (dynamic
    # cache total = past + 1, and static caches with total <= past; rows after it zeroed).
    gqa_check(dtype, 1, seqlens, total, past=8, rotary=rotary)


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("window", [-1, 100])
def test_gqa_decode_long_context(dtype, window):
    # Caches of hundreds of rows: on MLX's CUDA backend with ORT_EP_MLX_DECODE_PARTS > 1 the decode
    # attention kernel splits each head's context over several blocks (scripts/gpu_runbook.sh's
    # longctx step runs this with partitions); one sequence ends near the cache, one midway
    gqa_check(dtype, 1, [299, 130], 300, past=300, attrs={"local_window_size": window})
    gqa_check(dtype, 1, [40], 300, past=300, rotary=16, rope_len=320)


@pytest.mark.parametrize("dtype", [F32, F16])
def test_gqa_chunked_prefill(dtype):
    gqa_check(dtype, 3, [6], 7, past=8)
    gqa_check(dtype, 3, [6], 7, past=8, attrs={"local_window_size": 2})


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("phase", ["prompt", "decode", "packed"])
def test_gqa_rotary(dtype, interleaved, phase):
    attrs = {"rotary_interleaved": interleaved}
    if phase == "prompt":
        gqa_check(dtype, 5, [4, 2], 5, past=8, rotary=16, attrs=attrs)
    elif phase == "decode":
        gqa_check(dtype, 1, [5, 3], 6, past=8, rotary=16, attrs=attrs)
    else:
        gqa_check(dtype, 4, [3, 3], 4, past=6, rotary=16, attrs=attrs, packed=True)


def test_gqa_rotary_partial_and_position_ids():
    gqa_check(F32, 1, [5, 3], 6, past=8, h=32, rotary=16)
    gqa_check(F32, 1, [5, 3], 6, past=8, rotary=16, pos=np.array([[4], [9]], np.int64))
    gqa_check(F32, 3, [6], 7, past=8, rotary=16, pos=np.array([[2, 7, 9]], np.int64))


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("extra", [{"softcap": 1.5}, {"smooth_softmax": 1}, {"scale": 0.3},
                                   {"softcap": 2.0, "local_window_size": 2}, {"causal": 0}])
def test_gqa_attributes(dtype, extra):
    gqa_check(dtype, 5, [4, 2], 5, past=8, attrs=extra)
    gqa_check(dtype, 1, [5, 3], 6, past=8, attrs=extra)


@pytest.mark.parametrize("dtype", [F32, F16])
def test_gqa_head_sink_and_bias(dtype):
    gqa_check(dtype, 1, [5, 3], 6, past=8, sink=rnd((N_Q,), dtype, 7))
    gqa_check(dtype, 5, [4, 2], 5, past=8, sink=rnd((N_Q,), dtype, 7), attrs={"local_window_size": 2})
    for shape in [(2, N_Q, 1, 6), (1, 1, 1, 6), (2, 1, 1, 6)]:
        gqa_check(dtype, 1, [5, 3], 6, past=8, bias=rnd(shape, dtype, 8))
    gqa_check(dtype, 5, [4, 4], 5, bias=rnd((1, N_Q, 5, 5), dtype, 8), attrs={"local_window_size": 3})


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("mode", [1, 2])
def test_gqa_qk_output(dtype, mode):
    gqa_check(dtype, 1, [5, 5], 6, past=8, attrs={"qk_output": mode}, outputs=4)
    gqa_check(dtype, 4, [3, 3], 4, attrs={"qk_output": mode, "softcap": 2.0}, outputs=4)


def test_gqa_seqlens_batch_by_one():
    """Older genai exporters give seqlens_k as [batch, 1]; ORT accepts it."""
    q, k, v = rnd((2, 1, N_Q * 16), F32), rnd((2, 1, N_KV * 16), F32, 1), rnd((2, 1, N_KV * 16), F32, 2)
    past = rnd((2, N_KV, 8, 16), F32, 3)
    check("GroupQueryAttention", [("q", q), ("k", k), ("v", v), ("pk", past), ("pv", past),
                                  ("sl", np.array([[5], [3]], np.int32)), ("tsl", np.array(6, np.int32))],
          {"num_heads": N_Q, "kv_num_heads": N_KV}, outputs=3, domain=MS)


def test_gqa_packed_and_symbolic():
    gqa_check(F32, 4, [3, 1], 4, past=6, packed=True)
    gqa_check(F32, 1, [5, 3], 6, past=8, dynamic=True, rotary=16)
    gqa_check(F32, 5, [4, 2], 5, dynamic=True, attrs={"local_window_size": 2})


# ---- com.microsoft Attention (fused QKV projection) -----------------------------------------

def ms_attention_inputs(dtype, b=2, s=3, din=5, n=2, h=4, hv=None, seed=0):
    hv = hv or h
    x = rnd((b, s, din), dtype, seed)
    w = rnd((din, 2 * n * h + n * hv), dtype, seed + 1, scale=0.5)
    bias = rnd((2 * n * h + n * hv,), dtype, seed + 2)
    return x, w, bias


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("mask_kind", [None, "end", "end_start", "2d", "3d"])
@pytest.mark.parametrize("uni", [0, 1])
def test_ms_attention_masks(dtype, mask_kind, uni):
    x, w, bias = ms_attention_inputs(dtype)
    rng = np.random.default_rng(5)
    mask = {None: None, "end": np.array([2, 3], np.int32), "end_start": np.array([3, 2, 1, 0], np.int32),
            "2d": (rng.random((2, 3)) > 0.3).astype(np.int32),
            "3d": (rng.random((2, 3, 3)) > 0.3).astype(np.int32)}[mask_kind]
    check("Attention", [("x", x), ("w", w), ("b", bias), ("m", mask) if mask is not None else None],
          {"num_heads": 2, "unidirectional": uni}, domain=MS)


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("uni", [0, 1])
def test_ms_attention_past(dtype, uni):
    x, w, bias = ms_attention_inputs(dtype)
    past = rnd((2, 2, 2, 4, 4), dtype, 9)
    mask = (np.random.default_rng(6).random((2, 7)) > 0.3).astype(np.int32)
    check("Attention", [("x", x), ("w", w), ("b", bias), ("m", mask), ("p", past)],
          {"num_heads": 2, "unidirectional": uni, "scale": 0.5, "mask_filter_value": -100.0}, outputs=2, domain=MS)
    check("Attention", [("x", x), ("w", w), ("b", bias), ("m", np.array([5, 7], np.int32)), ("p", past)],
          {"num_heads": 2, "unidirectional": uni}, outputs=2, domain=MS)
    x1 = x[:, :1]
    check("Attention", [("x", x1), ("w", w), ("b", bias), None, ("p", past)],
          {"num_heads": 2, "unidirectional": uni}, outputs=2, domain=MS)


@pytest.mark.parametrize("dtype", [F32, F16])
def test_ms_attention_bias_and_sizes(dtype):
    x, w, bias = ms_attention_inputs(dtype)
    mask = (np.random.default_rng(6).random((2, 3)) > 0.3).astype(np.int32)
    for shape in [(2, 2, 3, 3), (1, 2, 3, 3), (2, 1, 3, 3), (1, 1, 3, 3)]:
        check("Attention", [("x", x), ("w", w), ("b", bias), ("m", mask), None, ("ab", rnd(shape, dtype, 4))],
              {"num_heads": 2, "unidirectional": 1}, domain=MS)
    x, w, bias = ms_attention_inputs(dtype, hv=6)
    check("Attention", [("x", x), ("w", w), ("b", bias)], {"num_heads": 2, "qkv_hidden_sizes": [8, 8, 12]},
          domain=MS)


def test_ms_attention_symbolic():
    x, w, bias = ms_attention_inputs(F32)
    past = rnd((2, 2, 2, 4, 4), F32, 9)
    model, feeds = build("Attention", [("x", x), ("w", w), ("b", bias), None, ("p", past)],
                         {"num_heads": 2, "unidirectional": 1}, outputs=2, domain=MS, dynamic=True)
    assert_parity(model, feeds)


# ---- float16 rounding: masked scores near -10000 make single vs double rounding visible ------

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_f16_masked_score_rounding(seed):
    q, k, v = (rnd((1, 3, 4), F16, seed + i) for i in range(3))
    mask = np.array([[0, 0, 1]], np.int32)
    check("MultiHeadAttention", [("q", q), ("k", k), ("v", v), None, ("m", mask)],
          {"num_heads": 1, "unidirectional": 1}, outputs=[True, False, False, True], domain=MS)
    x, w, bias = ms_attention_inputs(F16, seed=seed)
    check("Attention", [("x", x), ("w", w), ("b", bias), ("m", np.array([[0, 0, 1], [1, 0, 0]], np.int32))],
          {"num_heads": 2, "unidirectional": 1}, domain=MS)
    q4, k4, v4, _, _ = onnx_inputs(F16, hq=2, hkv=2, seed=seed)
    m = np.zeros((3, 5), F16)
    m[:, :3] = -10000
    for attrs in ({}, {"softcap": 30.0}, {"qk_matmul_output_mode": 0}):
        check("Attention", [("q", q4), ("k", k4), ("v", v4), ("m", m)], attrs,
              outputs=[True, False, False, "qk_matmul_output_mode" in attrs])


# ---- declined forms: strict mode must refuse them (they fall back to ORT's CPU EP) ----------

def declined_models():
    q, k, v, bias = mha_inputs(F32)
    x, w, b = ms_attention_inputs(F32)
    gq, gk, gv = rnd((1, 1, 4 * 16), F32), rnd((1, 1, 2 * 16), F32), rnd((1, 1, 2 * 16), F32)
    past = rnd((1, 2, 4, 16), F32)
    gqa = [("q", gq), ("k", gk), ("v", gv), ("pk", past), ("pv", past), ("sl", np.array([3], np.int32)),
           ("tsl", np.array(4, np.int32))]
    return {
        "ms_attention_without_bias": build("Attention", [("x", x), ("w", w)], {"num_heads": 2}, domain=MS),
        "ms_attention_4d_mask": build("Attention", [("x", x), ("w", w), ("b", b),
                                                    ("m", np.ones((2, 1, 3, 3), np.int32))],
                                      {"num_heads": 2}, domain=MS),
        "mha_past_sequence_length": build("MultiHeadAttention",
                                          [("q", q), ("k", k), ("v", v), None, None, None, None, None,
                                           ("psl", np.array([0], np.int32))], {"num_heads": 2}, domain=MS),
        "gqa_sliding_window_cache": build("GroupQueryAttention", gqa,
                                          {"num_heads": 4, "kv_num_heads": 2, "local_window_size": 4,
                                           "sliding_window_cache": 1}, outputs=3, domain=MS),
    }


@pytest.mark.parametrize("form", sorted(declined_models()))
def test_declined_forms_refuse_strict(form):
    import onnxruntime_ep_mlx as mlx_ep
    model, _ = declined_models()[form]
    with pytest.raises(Exception, match=r"(?i)fallback"):
        mlx_ep.session(model, strict=True)
