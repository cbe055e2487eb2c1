"""Parity tests of the rotary family (src/ops/rotary.c): ai.onnx RotaryEmbedding (opset 23) and
com.microsoft RotaryEmbedding, each on the MLX EP in strict mode against ORT's CPU EP, in float32
and float16, over layouts (3-D/4-D), interleaving, partial rotation and position-id forms."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from parity import NP_TO_ONNX, assert_parity, make_model

MS = "com.microsoft"


def rng(seed=0):
    return np.random.default_rng(seed)


def caches(max_pos, half, dtype, seed=1):
    """cos/sin tables of a real rotary embedding (angles pos * theta_i)."""
    inv = 1.0 / (10000 ** (np.arange(half) / half))
    ang = np.arange(max_pos)[:, None] * inv[None, :]
    return np.cos(ang).astype(dtype), np.sin(ang).astype(dtype)


def build(op, feeds: dict, attrs, domain="", opset=23, absent=()):
    """One-node model; feeds is an ordered name -> array map ('' keys in `absent` positions)."""
    names = [n for n in feeds]
    for pos in absent:
        names.insert(pos, "")
    node = helper.make_node(op, names, ["y"], domain=domain, **attrs)
    x = next(iter(feeds.values()))
    ins = [(k, NP_TO_ONNX[v.dtype], list(v.shape)) for k, v in feeds.items()]
    model = make_model([node], ins, [("y", NP_TO_ONNX[x.dtype], None)], opset=opset,
                       domains=[(MS, 1)] if domain else [])
    return model


def check(op, feeds, attrs, domain="", **kw):
    model = build(op, feeds, attrs, domain=domain, **kw)
    return assert_parity(model, feeds)


DTYPES = [np.float32, np.float16]


# ---- ai.onnx RotaryEmbedding ----------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("rot", [0, 4])
@pytest.mark.parametrize("rank", [3, 4])
def test_onnx_rotary_position_ids(dtype, interleaved, rot, rank):
    b, n, s, h = 2, 3, 5, 8
    half = (rot or h) // 2
    x = rng().standard_normal((b, n, s, h) if rank == 4 else (b, s, n * h)).astype(dtype)
    cos, sin = caches(32, half, dtype)
    pos = rng(2).integers(0, 32, size=(b, s)).astype(np.int64)
    attrs = {"interleaved": interleaved}
    if rot:
        attrs["rotary_embedding_dim"] = rot
    if rank == 3 or rot:
        attrs["num_heads"] = n
    check("RotaryEmbedding", {"x": x, "cos": cos, "sin": sin, "pos": pos}, attrs)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("rank", [3, 4])
def test_onnx_rotary_no_position_ids(dtype, interleaved, rank):
    b, n, s, h = 2, 2, 4, 6
    x = rng().standard_normal((b, n, s, h) if rank == 4 else (b, s, n * h)).astype(dtype)
    cos = rng(3).standard_normal((b, s, h // 2)).astype(dtype)
    sin = rng(4).standard_normal((b, s, h // 2)).astype(dtype)
    attrs = {"interleaved": interleaved}
    if rank == 3:
        attrs["num_heads"] = n
    check("RotaryEmbedding", {"x": x, "cos": cos, "sin": sin}, attrs)


def test_onnx_rotary_partial_no_position_ids():
    x = rng().standard_normal((1, 2, 3, 8)).astype(np.float32)
    cos = rng(3).standard_normal((1, 3, 2)).astype(np.float32)
    sin = rng(4).standard_normal((1, 3, 2)).astype(np.float32)
    check("RotaryEmbedding", {"x": x, "cos": cos, "sin": sin}, {"rotary_embedding_dim": 4, "num_heads": 2})


def test_onnx_rotary_symbolic_dims():
    """Graph inputs with symbolic dims: shapes are only known at run time."""
    x = rng().standard_normal((2, 3, 4, 8)).astype(np.float32)
    cos, sin = caches(16, 4, np.float32)
    pos = np.array([[0, 1, 2, 3], [5, 6, 7, 8]], np.int64)
    node = helper.make_node("RotaryEmbedding", ["x", "cos", "sin", "pos"], ["y"])
    model = make_model([node], [("x", TensorProto.FLOAT, ["B", "N", "S", "H"]),
                                ("cos", TensorProto.FLOAT, ["M", "h"]), ("sin", TensorProto.FLOAT, ["M", "h"]),
                                ("pos", TensorProto.INT64, ["B", "S"])],
                       [("y", TensorProto.FLOAT, None)], opset=23)
    assert_parity(model, {"x": x, "cos": cos, "sin": sin, "pos": pos})


# ---- com.microsoft RotaryEmbedding ----------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("rank", [3, 4])
def test_ms_rotary_full(dtype, interleaved, rank):
    b, n, s, h = 2, 3, 5, 8
    x = rng().standard_normal((b, s, n * h) if rank == 3 else (b, n, s, h)).astype(dtype)
    cos, sin = caches(16, h // 2, dtype)
    pos = rng(5).integers(0, 16, size=(b, s)).astype(np.int64)
    check("RotaryEmbedding", {"x": x, "pos": pos, "cos": cos, "sin": sin}, {"interleaved": interleaved}, domain=MS)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("interleaved", [0, 1])
def test_ms_rotary_start_offset(dtype, interleaved):
    b, n, s, h = 2, 2, 4, 8
    x = rng().standard_normal((b, s, n * h)).astype(dtype)
    cos, sin = caches(16, h // 2, dtype)
    pos = np.array([3], np.int64)
    check("RotaryEmbedding", {"x": x, "pos": pos, "cos": cos, "sin": sin}, {"interleaved": interleaved}, domain=MS)


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("rank", [3, 4])
def test_ms_rotary_partial(interleaved, rank):
    b, n, s, h, rot = 2, 4, 3, 16, 8
    x = rng().standard_normal((b, s, n * h) if rank == 3 else (b, n, s, h)).astype(np.float32)
    cos, sin = caches(8, rot // 2, np.float32)
    pos = rng(6).integers(0, 8, size=(b, s)).astype(np.int64)
    attrs = {"interleaved": interleaved, "rotary_embedding_dim": rot, "num_heads": n}
    check("RotaryEmbedding", {"x": x, "pos": pos, "cos": cos, "sin": sin}, attrs, domain=MS)


def test_ms_rotary_packed_batching_and_scale():
    x = rng().standard_normal((1, 6, 16)).astype(np.float32)
    cos, sin = caches(8, 4, np.float32)
    pos = np.array([[0, 1, 2, 0, 1, 2]], np.int64)
    attrs = {"is_packed_batching": 1, "scale": 2.0, "num_heads": 2, "rotary_embedding_dim": 8}
    check("RotaryEmbedding", {"x": x, "pos": pos, "cos": cos, "sin": sin}, attrs, domain=MS)
