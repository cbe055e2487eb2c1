"""Hostile positions, token ids, sequence lengths and group indices for the transformer ops:
RotaryEmbedding (ai.onnx opset 23 and com.microsoft) position_ids far past the cos/sin cache,
EmbedLayerNormalization input/segment/position ids, GroupQueryAttention seqlens_k and
MatMulNBits g_idx (runtime input and initializer), against ORT's CPU EP."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from hostile import I32_MIN, I64_MIN, MS, check_hostile, node_model

F = TensorProto.FLOAT
R = np.random.default_rng(0)
MAX_POS, HALF = 16, 4
COS = np.cos(np.arange(MAX_POS)[:, None] * np.ones(HALF)[None, :]).astype(np.float32)
SIN = np.sin(np.arange(MAX_POS)[:, None] * np.ones(HALF)[None, :]).astype(np.float32)
POS_BAD = [MAX_POS, -1, 10**9, -(10**9), 2**40, I64_MIN]


@pytest.mark.parametrize("p", POS_BAD)
def test_onnx_rotary_position_ids(p):
    x = R.standard_normal((1, 2, 3, 2 * HALF)).astype(np.float32)
    model = node_model("RotaryEmbedding", [("x", x), ("cos", COS), ("sin", SIN), ("pos", np.zeros((1, 3), np.int64))],
                       [F], opset=23, consts={"cos", "sin"})
    check_hostile(model, {"x": x, "pos": np.array([[0, p, 2]], np.int64)}, {"x": x, "pos": np.array([[0, 15, 2]], np.int64)},
                  rf"position id {p} out of range \[0, {MAX_POS}\)")


@pytest.mark.parametrize("p", POS_BAD)
def test_ms_rotary_position_ids(p):
    x = R.standard_normal((1, 3, 2 * HALF)).astype(np.float32)
    model = node_model("RotaryEmbedding", [("x", x), ("pos", np.zeros((1, 3), np.int64)), ("cos", COS), ("sin", SIN)],
                       [F], domain=MS, consts={"cos", "sin"})
    check_hostile(model, {"x": x, "pos": np.array([[0, p, 2]], np.int64)}, {"x": x, "pos": np.array([[0, 15, 2]], np.int64)},
                  r"position -?\d+ out of range \[0, 16\)")


@pytest.mark.parametrize("p", [14, 10**9, -1])
def test_ms_rotary_start_offset(p):
    x = R.standard_normal((1, 3, 2 * HALF)).astype(np.float32)
    model = node_model("RotaryEmbedding", [("x", x), ("pos", np.zeros(1, np.int64)), ("cos", COS), ("sin", SIN)],
                       [F], domain=MS, consts={"cos", "sin"})
    check_hostile(model, {"x": x, "pos": np.array([p], np.int64)}, {"x": x, "pos": np.array([13], np.int64)},
                  r"position -?\d+ out of range \[0, 16\)")


def _eln_inputs(ids, seg_ids=None, pos_ids=None):
    h, vocab = 8, 10
    g = np.random.default_rng(3)
    return [("ids", ids), ("seg_ids", seg_ids), ("word", g.standard_normal((vocab, h)).astype(np.float32)),
            ("posemb", g.standard_normal((6, h)).astype(np.float32)),
            ("seg", g.standard_normal((2, h)).astype(np.float32) if seg_ids is not None else None),
            ("gamma", np.ones(h, np.float32)), ("beta", np.zeros(h, np.float32)), ("mask", None), ("pos_ids", pos_ids)]


CONSTS = {"word", "posemb", "seg", "gamma", "beta"}


@pytest.mark.parametrize("bad", [10, -1, 10**9, I32_MIN])
def test_embed_layer_norm_input_ids(bad):
    ids = np.array([[1, 2, 3]], np.int32)
    model = node_model("EmbedLayerNormalization", _eln_inputs(ids), [F, TensorProto.INT32], domain=MS, consts=CONSTS)
    check_hostile(model, {"ids": np.array([[1, bad, 3]], np.int32)}, {"ids": np.array([[1, 9, 0]], np.int32)},
                  rf"input id {bad} out of range \[0, 10\)")


@pytest.mark.parametrize("bad", [2, -1])
def test_embed_layer_norm_segment_ids(bad):
    ids = np.array([[1, 2, 3]], np.int32)
    seg = np.array([[0, 1, 0]], np.int32)
    model = node_model("EmbedLayerNormalization", _eln_inputs(ids, seg), [F, TensorProto.INT32], domain=MS, consts=CONSTS)
    check_hostile(model, {"ids": ids, "seg_ids": np.array([[0, bad, 1]], np.int32)}, {"ids": ids, "seg_ids": seg},
                  rf"segment id {bad} out of range \[0, 2\)")


@pytest.mark.parametrize("bad", [6, 10**9])
def test_embed_layer_norm_position_ids(bad):
    ids = np.array([[1, 2, 3]], np.int32)
    pos = np.array([[0, 1, 2]], np.int32)
    model = node_model("EmbedLayerNormalization", _eln_inputs(ids, None, pos), [F, TensorProto.INT32], domain=MS,
                       consts=CONSTS)
    check_hostile(model, {"ids": ids, "pos_ids": np.array([[0, bad, 2]], np.int32)}, {"ids": ids, "pos_ids": pos},
                  rf"position id {bad} out of range \[0, 6\)")


def _gqa_model(past_len, seq=1, rotary=False):
    b, heads, kv, h = 1, 2, 1, 16 if rotary else 8  # ORT's rotary wants a head size of a multiple of 16
    g = np.random.default_rng(5)
    q = g.standard_normal((b, seq, heads * h)).astype(np.float32)
    k = g.standard_normal((b, seq, kv * h)).astype(np.float32)
    v = g.standard_normal((b, seq, kv * h)).astype(np.float32)
    pk = g.standard_normal((b, kv, past_len, h)).astype(np.float32)
    pv = g.standard_normal((b, kv, past_len, h)).astype(np.float32)
    inputs = [("q", q), ("k", k), ("v", v), ("pk", pk), ("pv", pv),
              ("seqlens", np.array([past_len + seq - 1], np.int32)), ("total", np.array(past_len + seq, np.int32))]
    attrs = {"num_heads": heads, "kv_num_heads": kv}
    if rotary:  # caches of 16 positions; position_ids one per new row
        ang = np.arange(16)[:, None] * (1.0 / 10000 ** (np.arange(h // 2) / (h // 2)))[None, :]
        inputs += [("cos", np.cos(ang).astype(np.float32)), ("sin", np.sin(ang).astype(np.float32)),
                   ("pos", (past_len + np.arange(seq, dtype=np.int64))[None, :])]
        attrs["do_rotary"] = 1
    model = node_model("GroupQueryAttention", inputs, [F, F, F], domain=MS, attrs=attrs)
    feeds = {n: a for n, a in inputs}
    return model, feeds


@pytest.mark.parametrize("bad", [10**9, 2**31 - 1, 9, -5])
def test_gqa_seqlens_k(bad):
    model, good = _gqa_model(8)
    check_hostile(model, {**good, "seqlens": np.array([bad], np.int32)}, good, r"seqlens_k -?\d+ out of range")


@pytest.mark.parametrize("bad", [10**9, 2**31 - 1, 11, 1, -5])
def test_gqa_seqlens_k_prompt(bad):
    """A three-row prompt continuing a past of 8 rows (on MLX's CUDA backend the many-row kernels): seqlens_k
    must hold the new rows (>= 2) and fit the present (< 11)."""
    model, good = _gqa_model(8, seq=3)
    check_hostile(model, {**good, "seqlens": np.array([bad], np.int32)}, good, r"seqlens_k -?\d+ out of range")


@pytest.mark.parametrize("bad", [16, 10**12, -1, -(2**62)])
def test_gqa_prompt_position_ids(bad):
    """position_ids past the rotary caches in a three-row prompt, refused before any kernel reads a cache row."""
    model, good = _gqa_model(8, seq=3, rotary=True)
    pos = good["pos"].copy()
    pos[0, 1] = bad
    check_hostile(model, {**good, "pos": pos}, good, r"position.* out of range")


@pytest.mark.parametrize("bad", [0, -1, I32_MIN])
def test_gqa_total_sequence_length_not_positive(bad):
    """ORT refuses it first, with its own words (the EP refused it through seqlens_k's range)."""
    model, good = _gqa_model(8)
    check_hostile(model, {**good, "total": np.array(bad, np.int32)}, good, r"total_sequence_length must be positive")


@pytest.mark.parametrize("bad", [10, 100, 2**31 - 1])
def test_gqa_total_sequence_length_past_the_buffer(bad):
    """More than past + new rows, and more than a fixed buffer holds: ORT's lengths rule (found by
    tools/fuzz's data pool; the EP answered)."""
    model, good = _gqa_model(8)
    check_hostile(model, {**good, "total": np.array(bad, np.int32)}, good, r"total_sequence_length must equal")


def _mnb(g_idx, const_gidx):
    k, n, block = 32, 4, 16
    g = np.random.default_rng(7)
    a = g.standard_normal((2, k)).astype(np.float32)
    b = g.integers(0, 256, size=(n, k // block, block // 2)).astype(np.uint8)
    scales = (g.random(n * (k // block)) + 0.5).astype(np.float32)
    inputs = [("a", a), ("b", b), ("scales", scales), ("zp", None), ("g_idx", g_idx)]
    model = node_model("MatMulNBits", inputs, [F], domain=MS, attrs={"K": k, "N": n, "bits": 4, "block_size": block},
                       consts={"b", "scales"} | ({"g_idx"} if const_gidx else set()))
    return model, a


GOOD_G = (np.arange(32) // 16).astype(np.int32)


@pytest.mark.parametrize("bad", [2, -1, 10**9, I32_MIN])
def test_matmul_nbits_g_idx_input(bad):
    bad_g = GOOD_G.copy()
    bad_g[5] = bad
    model, a = _mnb(GOOD_G, False)
    check_hostile(model, {"a": a, "g_idx": bad_g}, {"a": a, "g_idx": GOOD_G}, rf"g_idx {bad} out of range \[0, 2\)")


def test_matmul_nbits_g_idx_initializer():
    bad_g = GOOD_G.copy()
    bad_g[3] = 7
    model, a = _mnb(bad_g, True)
    from hostile import check_refused
    check_refused(model, {"a": a}, r"g_idx 7 out of range \[0, 2\)")
