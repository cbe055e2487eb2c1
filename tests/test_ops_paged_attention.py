"""Tests of com.microsoft PagedAttention (src/ops/paged_attention.c) on the MLX EP in strict mode.
ORT's CPU EP has no kernel for this op, so every case is checked against the NumPy reference
below (float32 arithmetic, rounding to the storage dtype where the op stores: the normalized and
rotated K written to the cache, and the output). The reference follows the contrib schema: new K/V
rows go to slot block_table[b, pos // block_size] * block_size + pos % block_size (or
slot_mapping, -1 = no write), and query i of sequence b, at position past[b] + i, attends to
positions 0..past[b] + i of its sequence (all past[b] + len[b] positions when is_causal = 0)."""
from __future__ import annotations

import re

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnxruntime_ep_mlx as mlx_ep
from parity import NP_TO_ONNX, make_model

MS = "com.microsoft"
F16_TOL = dict(rtol=1e-2, atol=1e-2)
INPUTS = ["query", "key", "value", "key_cache", "value_cache", "cumulative_sequence_length", "past_seqlens",
          "block_table", "cos_cache", "sin_cache", "slot_mapping", "head_sink", "q_norm_weight", "k_norm_weight"]


# ---- the reference ---------------------------------------------------------------------------

def _rms(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def _rotate(x, cos, sin, interleaved):
    """x [T, H, D] float32; cos/sin [T, rot/2] float32."""
    rot = 2 * cos.shape[1]
    c, s = cos[:, None, :], sin[:, None, :]
    y = x.copy()
    if interleaved:
        x1, x2 = x[..., 0:rot:2], x[..., 1:rot:2]
        y[..., 0:rot:2], y[..., 1:rot:2] = x1 * c - x2 * s, x1 * s + x2 * c
    else:
        x1, x2 = x[..., : rot // 2], x[..., rot // 2: rot]
        y[..., : rot // 2], y[..., rot // 2: rot] = x1 * c - x2 * s, x1 * s + x2 * c
    return y


def reference(f: dict, num_heads, kv_num_heads, scale=0.0, softcap=0.0, do_rotary=0, rotary_interleaved=0,
              is_causal=1, qk_norm_epsilon=1e-6, **_):
    dt = f["query"].dtype
    f32 = {k: (v.astype(np.float32) if v.dtype.kind == "f" else v) for k, v in f.items()}
    q = f32["query"]
    T = q.shape[0]
    if "key" in f:
        k, v = f32["key"], f32["value"]
        D = q.shape[1] // num_heads
    else:
        D = q.shape[1] // (num_heads + 2 * kv_num_heads)
        q, k, v = np.split(q, [num_heads * D, (num_heads + kv_num_heads) * D], axis=1)
    q, k, v = q.reshape(T, num_heads, D), k.reshape(T, kv_num_heads, D), v.reshape(T, kv_num_heads, D)
    cu, past, bt = f["cumulative_sequence_length"], f["past_seqlens"], f["block_table"]
    B = len(past)
    seq = np.array([np.searchsorted(cu[1:], t, side="right") for t in range(T)])
    pos = past[seq] + np.arange(T) - cu[seq]
    if "q_norm_weight" in f:
        q = _rms(q, f32["q_norm_weight"], qk_norm_epsilon).astype(dt).astype(np.float32)
        k = _rms(k, f32["k_norm_weight"], qk_norm_epsilon).astype(dt).astype(np.float32)
    if do_rotary:
        cos, sin = f32["cos_cache"][pos], f32["sin_cache"][pos]
        q = _rotate(q, cos, sin, rotary_interleaved).astype(dt).astype(np.float32)
        k = _rotate(k, cos, sin, rotary_interleaved).astype(dt).astype(np.float32)
    kc, vc = f["key_cache"].copy(), f["value_cache"].copy()
    nb, bs = kc.shape[:2]
    kflat, vflat = kc.reshape(nb * bs, kv_num_heads, D), vc.reshape(nb * bs, kv_num_heads, D)
    for t in range(T):
        slot = f["slot_mapping"][t] if "slot_mapping" in f else bt[seq[t], pos[t] // bs] * bs + pos[t] % bs
        if slot >= 0:
            kflat[slot], vflat[slot] = k[t].astype(dt), v[t].astype(dt)
    scale = scale or 1.0 / np.sqrt(D)
    rep = num_heads // kv_num_heads
    out = np.zeros((T, num_heads, D), np.float32)
    for b in range(B):
        total = past[b] + cu[b + 1] - cu[b]
        p = np.arange(total)
        slots = bt[b, p // bs] * bs + p % bs
        K = np.repeat(kflat[slots].astype(np.float32), rep, axis=1)   # [L, Hq, D]
        V = np.repeat(vflat[slots].astype(np.float32), rep, axis=1)
        for t in range(cu[b], cu[b + 1]):
            s = np.einsum("hd,lhd->hl", q[t], K) * scale
            if softcap:
                s = softcap * np.tanh(s / softcap)
            if is_causal:
                s[:, p > pos[t]] = -np.inf
            m = s.max(axis=1, keepdims=True)
            if "head_sink" in f:
                m = np.maximum(m, f32["head_sink"][:, None])
            e = np.exp(s - m)
            denom = e.sum(axis=1, keepdims=True)
            if "head_sink" in f:
                denom += np.exp(f32["head_sink"][:, None] - m)
            out[t] = np.einsum("hl,lhd->hd", e / denom, V)
    return out.reshape(T, num_heads * D).astype(dt), kc, vc


# ---- cases --------------------------------------------------------------------------------

def make_case(qlens, past, heads=4, kv_heads=2, head_size=16, block_size=16, num_blocks=12, max_blocks=4,
              dtype=np.float16, packed=False, rotary=None, sink=False, qk_norm=False, slot_mapping=None, seed=0):
    """Feeds for sequences with qlens new tokens after past cached ones; block tables are random
    distinct blocks, the caches random (unused rows are NaN, as uninitialized memory may be)."""
    rng = np.random.default_rng(seed)
    T, B = int(sum(qlens)), len(qlens)
    hq, hkv = heads * head_size, kv_heads * head_size
    f = {}
    if packed:
        f["query"] = rng.standard_normal((T, hq + 2 * hkv)).astype(dtype)
    else:
        f["query"] = rng.standard_normal((T, hq)).astype(dtype)
        f["key"] = rng.standard_normal((T, hkv)).astype(dtype)
        f["value"] = rng.standard_normal((T, hkv)).astype(dtype)
    blocks = rng.permutation(num_blocks)[: B * max_blocks].reshape(B, max_blocks).astype(np.int32)
    for kind in ("key_cache", "value_cache"):
        cache = np.full((num_blocks, block_size, kv_heads, head_size), np.nan, dtype)
        for b in range(B):  # cached positions hold real values
            for p in range(past[b]):
                cache[blocks[b, p // block_size], p % block_size] = rng.standard_normal((kv_heads, head_size))
        f[kind] = cache
    f["cumulative_sequence_length"] = np.concatenate([[0], np.cumsum(qlens)]).astype(np.int32)
    f["past_seqlens"] = np.asarray(past, np.int32)
    f["block_table"] = blocks
    if rotary is not None:
        rot = rotary
        inv = 1.0 / (10000 ** (np.arange(rot // 2) / (rot // 2)))
        ang = np.arange(max_blocks * block_size)[:, None] * inv[None, :]
        f["cos_cache"], f["sin_cache"] = np.cos(ang).astype(dtype), np.sin(ang).astype(dtype)
    if slot_mapping is not None:
        f["slot_mapping"] = np.asarray(slot_mapping, np.int32)
    if sink:
        f["head_sink"] = rng.standard_normal(heads).astype(dtype)
    if qk_norm:
        f["q_norm_weight"] = (1 + 0.2 * rng.standard_normal(head_size)).astype(dtype)
        f["k_norm_weight"] = (1 + 0.2 * rng.standard_normal(head_size)).astype(dtype)
    return f


def _onnx_type(a) -> int:
    return TensorProto.BFLOAT16 if a.dtype.name == "bfloat16" else NP_TO_ONNX[a.dtype]


def build(f: dict, **attrs) -> bytes:
    names = [n if n in f else "" for n in INPUTS]
    while names and not names[-1]:
        names.pop()
    outputs = ["output", "key_cache_out", "value_cache_out"][: 3 if "value_cache" in f else 2]
    node = helper.make_node("PagedAttention", names, outputs, domain=MS, **attrs)
    t = _onnx_type(f["query"])
    # Leading dims symbolic (one session serves several batches); ORT's shape inference needs the
    # hidden sizes of query/key/value.
    ins = [(n, _onnx_type(v), [f"{n}_d0"] + [f"{n}_d{i}" if n not in ("query", "key", "value") else d
                                                   for i, d in enumerate(v.shape) if i > 0])
           for n, v in f.items()]
    outs = [(name, t, None) for name in outputs]
    return make_model([node], ins, outs, opset=21, domains=[(MS, 1)])


def run_and_check(f, attrs, sess=None):
    sess = sess or mlx_ep.session(build(f, **attrs), strict=True)
    got = sess.run(None, f)
    want = reference(f, **attrs)
    names = ("output", "key_cache_out", "value_cache_out")
    for name, g, w in zip(names, got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, f"{name}: {g.shape}/{g.dtype} vs {w.shape}/{w.dtype}"
    assert not np.isnan(got[0]).any(), "NaN in the output (unused cache rows leaked into attention)"
    np.testing.assert_allclose(got[0].astype(np.float32), want[0].astype(np.float32), err_msg="output", **F16_TOL)
    for name, g, w in zip(names[1:], got[1:], want[1:]):
        # Unwritten rows come back unchanged (NaN included); written rows within float16 rounding.
        np.testing.assert_allclose(g.astype(np.float32), w.astype(np.float32), err_msg=name, equal_nan=True,
                                   rtol=2e-3, atol=2e-3)
    return sess


BASE = dict(num_heads=4, kv_num_heads=2)


# ---- tests --------------------------------------------------------------------------------

def test_schema_known_and_claimed(tmp_path):
    """ORT knows the contrib schema (session creation would fail otherwise) and the EP claims the
    node: strict mode forbids the CPU EP, which has no PagedAttention kernel anyway."""
    f = make_case([5], [0])
    report = tmp_path / "report.txt"
    mlx_ep.session(build(f, **BASE), options={"report": str(report)}, strict=True)
    assert re.search(r"declined:\s*0\b", report.read_text()), report.read_text()
    with pytest.raises(Exception, match=r"operator \(PagedAttention\)"):
        ort.InferenceSession(build(f, **BASE), providers=["CPUExecutionProvider"]).run(None, f)


def test_prefill_one_sequence():
    run_and_check(make_case([37], [0], max_blocks=3), BASE)


def test_mixed_batch_decode_prefill_chunk():
    """Decode (1 token after 17), fresh prefill (5) and a chunked prefill (3 after 30) in one batch."""
    run_and_check(make_case([1, 5, 3], [17, 0, 30]), BASE)


def test_batched_decode():
    """One token per sequence: the per-token grouping."""
    run_and_check(make_case([1, 1, 1, 1], [3, 16, 40, 0], num_blocks=16), BASE)


def test_one_session_many_shapes():
    sess = None
    for qlens, past in [([4], [0]), ([1], [4]), ([2, 1], [5, 9]), ([1, 1, 1], [7, 0, 33])]:
        f = make_case(qlens, past, seed=len(qlens))
        sess = run_and_check(f, BASE, sess)


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("rot", [16, 8])
def test_rotary(interleaved, rot):
    f = make_case([1, 6], [20, 3], rotary=rot)
    run_and_check(f, dict(BASE, do_rotary=1, rotary_interleaved=interleaved))


def test_packed_qkv_with_rotary():
    run_and_check(make_case([3, 2], [0, 11], packed=True, rotary=16), dict(BASE, do_rotary=1))


def test_gqa_ratio_and_mha():
    run_and_check(make_case([4, 1], [2, 9], heads=8, kv_heads=2), dict(num_heads=8, kv_num_heads=2))
    run_and_check(make_case([4, 1], [2, 9], heads=2, kv_heads=2, head_size=32), dict(num_heads=2, kv_num_heads=2))


def test_non_causal_scale_softcap_sink():
    f = make_case([4, 3], [6, 0], sink=True)
    run_and_check(f, dict(BASE, is_causal=0))
    run_and_check(f, dict(BASE, scale=0.3, softcap=2.0))
    run_and_check(f, dict(BASE, softcap=5.0, is_causal=0))


def test_qk_norm_then_rotary():
    f = make_case([5, 1], [0, 12], qk_norm=True, rotary=16)
    run_and_check(f, dict(BASE, do_rotary=1, qk_norm_epsilon=1e-5))


def test_slot_mapping_skips_minus_one():
    """Prefix-cache hit: the first two tokens of sequence 0 are already cached (slot -1 = no
    write); the rest go to the slots given, which the block table also maps."""
    f = make_case([4, 1], [0, 5], seed=3)
    bt, bs = f["block_table"], f["key_cache"].shape[1]
    for p in range(2):  # what an earlier step wrote
        f["key_cache"][bt[0, 0], p] = f["key"][p].reshape(2, 16)
        f["value_cache"][bt[0, 0], p] = f["value"][p].reshape(2, 16)
    slots = [-1, -1, bt[0, 0] * bs + 2, bt[0, 0] * bs + 3, bt[1, 0] * bs + 5]
    f = dict(f, slot_mapping=np.asarray(slots, np.int32))
    run_and_check(f, BASE)


def test_unsupported_forms_declined(tmp_path):
    f = make_case([2], [0])
    latent = make_case([2], [0], heads=4, kv_heads=1)
    latent = {k: v for k, v in latent.items() if k not in ("value", "value_cache")}
    cases = [
        (f, dict(BASE, local_window_size=8), "local_window_size"),
        (f, dict(BASE, k_quant_type="PER_TENSOR", v_quant_type="PER_TENSOR"), "quantized"),
        (latent, dict(num_heads=4, kv_num_heads=1, kv_cache_layout="LATENT"), "LATENT"),
    ]
    for i, (feeds, attrs, reason) in enumerate(cases):
        report = tmp_path / f"report{i}.txt"
        with pytest.raises(Exception, match=r"operator \(PagedAttention\)|fallback to CPU EP has been explicitly disabled"):
            mlx_ep.session(build(feeds, **attrs), options={"report": str(report)}, strict=True)
        assert reason in report.read_text(), report.read_text()


def test_bfloat16():
    """bfloat16 (numpy has no such type: the graph casts float32 feeds to bfloat16 and back)."""
    f = make_case([3, 1], [0, 7], rotary=16, dtype=np.float32)
    bf16 = {k for k, v in f.items() if v.dtype == np.float32}
    names = [(n + "_bf16" if n in bf16 else n) if n in f else "" for n in INPUTS][:10]
    nodes = [helper.make_node("Cast", [n], [n + "_bf16"], to=TensorProto.BFLOAT16) for n in sorted(bf16)]
    outs = ["output", "key_cache_out", "value_cache_out"]
    nodes.append(helper.make_node("PagedAttention", names, [o + "_bf16" for o in outs], domain=MS, **BASE,
                                  do_rotary=1))
    nodes += [helper.make_node("Cast", [o + "_bf16"], [o], to=TensorProto.FLOAT) for o in outs]
    ins = [(n, NP_TO_ONNX[v.dtype], list(v.shape)) for n, v in f.items()]
    model = make_model(nodes, ins, [(o, TensorProto.FLOAT, None) for o in outs], opset=21, domains=[(MS, 1)])
    got = mlx_ep.session(model, strict=True).run(None, f)
    ml_dtypes = pytest.importorskip("ml_dtypes")
    ref = {k: (v.astype(ml_dtypes.bfloat16).astype(np.float32) if k in bf16 else v) for k, v in f.items()}
    want = reference(ref, **BASE, do_rotary=1)
    np.testing.assert_allclose(got[0], want[0], rtol=3e-2, atol=3e-2)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-2, atol=1e-2, equal_nan=True)


# ---- lengths and block numbers from data (ORT's CPU EP has no kernel to compare refusals with) --

@pytest.mark.parametrize("name,bad", [
    ("block_table", lambda f: np.full_like(f["block_table"], 2**31 - 1)),
    ("block_table", lambda f: np.full_like(f["block_table"], -1)),
    ("past_seqlens", lambda f: np.full_like(f["past_seqlens"], 2**31 - 1)),
    ("past_seqlens", lambda f: np.full_like(f["past_seqlens"], -5)),
    ("past_seqlens", lambda f: np.array([17, 0, 62], np.int32)),  # 62 + 3 new rows past the 64-row table
    ("cumulative_sequence_length", lambda f: np.array([0, 9, 3, 9], np.int32)),
    ("cumulative_sequence_length", lambda f: np.array([0, 1, 6, 2**31 - 1], np.int32)),
    ("slot_mapping", lambda f: np.array([0, 1, 2, 3, 4, 5, 6, 7, 12 * 16], np.int32)),
])
def test_hostile_lengths_fail_the_run(name, bad):
    """A block number or length that does not fit the caches fails the Run (every index is clipped
    as well, so none reaches memory outside them); the session then answers valid feeds as before.
    Block-table entries past a sequence's length are padding and stay unchecked."""
    f = make_case([1, 5, 3], [17, 0, 30], slot_mapping=None)
    if name == "slot_mapping":  # the slots the block table gives, given explicitly
        bt, bs = f["block_table"], f["key_cache"].shape[1]
        rows = [(b, p) for b, (n, past) in enumerate(zip([1, 5, 3], [17, 0, 30])) for p in range(past, past + n)]
        f["slot_mapping"] = np.array([bt[b, p // bs] * bs + p % bs for b, p in rows], np.int32)
    sess = run_and_check(f, BASE)
    with pytest.raises(Exception, match=r"out of range"):
        sess.run(None, dict(f, **{name: bad(f)}))
    run_and_check(f, BASE, sess)


def test_padding_entries_of_the_block_table_are_not_checked():
    f = make_case([1, 5, 3], [17, 0, 30])
    bt = f["block_table"].copy()
    bt[1, 1:] = -1  # sequence 1 holds 5 rows: only its first block is read
    run_and_check(dict(f, block_table=bt), BASE)
