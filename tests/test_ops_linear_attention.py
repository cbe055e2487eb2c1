"""com.microsoft LinearAttention (src/ops/linear_attention.c) on the MLX EP in strict mode against
ORT's CPU EP, and against the recurrence written out in NumPy (float64): every update rule, decay
per head and per key dimension, beta per head and shared, GQA, scale, with and without a past state,
one decode token and prompts, float32 and float16. Prompts of LA_CHUNKED_MIN (24) tokens or more take
the chunked form (chunks of 64, the last one partial): the same cases again there, gates that decay
strongly or not at all, and the run report's operation count showing the graph grows per chunk,
not per token."""
from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxruntime_ep_mlx as mlx_ep
from parity import assert_parity, make_model, run_mlx

MS = [("com.microsoft", 1)]


def recurrence(f, hq, hkv, rule, scale=0.0):
    """The token-by-token recurrence of the contrib spec, in float64."""
    q, k, v = (f[n].astype(np.float64) for n in ("q", "k", "v"))
    b, t, _ = q.shape
    dk, dv = q.shape[2] // hq, v.shape[2] // hkv
    scale = scale or 1.0 / np.sqrt(dk)
    q, k, v = q.reshape(b, t, hq, dk), k.reshape(b, t, hkv, dk), v.reshape(b, t, hkv, dv)
    s = f["st"].astype(np.float64).copy() if "st" in f else np.zeros((b, hkv, dk, dv))
    out = np.zeros((b, t, hq, dv))
    for i in range(t):
        if rule in ("gated", "gated_delta"):
            s = s * np.exp(f["g"][:, i].astype(np.float64).reshape(b, hkv, -1))[..., None]
        if rule in ("delta", "gated_delta"):
            beta = np.broadcast_to(f["b"][:, i].astype(np.float64), (b, hkv))
            err = v[:, i] - np.einsum("bhkv,bhk->bhv", s, k[:, i])
            s = s + beta[..., None, None] * np.einsum("bhk,bhv->bhkv", k[:, i], err)
        else:
            s = s + np.einsum("bhk,bhv->bhkv", k[:, i], v[:, i])
        for h in range(hq):
            out[:, i, h] = scale * np.einsum("bk,bkv->bv", q[:, i, h], s[:, h // (hq // hkv)])
    return out.reshape(b, t, hq * dv), s


def la_case(b, t, hq, hkv, dk, dv, rule, decay, beta, past, dtype=np.float32, scale=0.0, seed=1, gate=(0.0, 1.0)):
    """A one-node model and its feeds; the log decay g is drawn from [-gate[1], -gate[0]]."""
    rng = np.random.default_rng(seed)
    f = {"q": rng.standard_normal((b, t, hq * dk)), "k": rng.standard_normal((b, t, hkv * dk)) * 0.3,
         "v": rng.standard_normal((b, t, hkv * dv))}
    names = ["q", "k", "v", "st" if past else "", "g" if decay else "", "b" if beta else ""]
    if past:
        f["st"] = rng.standard_normal((b, hkv, dk, dv))
    if decay:
        f["g"] = -(gate[0] + (gate[1] - gate[0]) * rng.random((b, t, hkv * (dk if decay == "dim" else 1))))
    if beta:
        f["b"] = rng.random((b, t, hkv if beta == "head" else 1))
    f = {n: a.astype(dtype) for n, a in f.items()}
    while names[-1] == "":
        names.pop()
    attrs = {"q_num_heads": hq, "kv_num_heads": hkv, "update_rule": rule, **({"scale": scale} if scale else {})}
    node = helper.make_node("LinearAttention", names, ["y", "state"], domain="com.microsoft", **attrs)
    ot = TensorProto.FLOAT if dtype == np.float32 else TensorProto.FLOAT16
    ins = [(n, ot, list(f[n].shape)) for n in names if n]
    return make_model([node], ins, [("y", ot, None), ("state", ot, None)], domains=MS), f


CASES = [  # (b, t, hq, hkv, dk, dv, rule, decay, beta, past, scale)
    (1, 1, 2, 2, 4, 4, "linear", None, None, True, 0.0),
    (2, 3, 4, 2, 4, 3, "linear", None, None, False, 0.0),
    (1, 3, 2, 2, 4, 4, "gated", "head", None, True, 0.0),
    (1, 3, 2, 1, 4, 4, "gated", "dim", None, True, 0.0),
    (1, 3, 2, 2, 4, 4, "delta", None, "head", True, 0.0),
    (1, 5, 2, 2, 4, 4, "delta", None, "one", False, 0.0),
    (2, 4, 4, 2, 8, 8, "gated_delta", "head", "head", True, 0.0),
    (1, 6, 2, 2, 4, 4, "gated_delta", "dim", "head", True, 0.7),
    (1, 1, 4, 2, 16, 8, "gated_delta", "head", "one", True, 0.0),  # a decode step
    (1, 40, 2, 2, 4, 4, "gated_delta", "head", "head", False, 0.0),  # a prompt
]


@pytest.mark.parametrize("b,t,hq,hkv,dk,dv,rule,decay,beta,past,scale", CASES)
def test_linear_attention(b, t, hq, hkv, dk, dv, rule, decay, beta, past, scale):
    model, f = la_case(b, t, hq, hkv, dk, dv, rule, decay, beta, past, scale=scale)
    got = assert_parity(model, f, rtol=1e-5, atol=1e-5)
    want = recurrence(f, hq, hkv, rule, scale)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rule,decay,beta", [("gated_delta", "head", "head"), ("gated", "dim", None)])
def test_linear_attention_float16(rule, decay, beta):
    model, f = la_case(1, 4, 4, 2, 8, 8, rule, decay, beta, True, dtype=np.float16)
    assert_parity(model, f, rtol=2e-2, atol=2e-2)


def test_linear_attention_decode_steps_carry_the_prompt():
    """A prompt then one-token steps with the carried state give the prompt-at-once result."""
    model, f = la_case(1, 6, 2, 2, 4, 4, "gated_delta", "head", "head", True, seed=3)
    whole = run_mlx(model, f)
    state, ys = f["st"], []
    for lo, hi in [(0, 3), (3, 4), (4, 5), (5, 6)]:
        step_model, _ = la_case(1, hi - lo, 2, 2, 4, 4, "gated_delta", "head", "head", True, seed=3)
        part = {"q": f["q"][:, lo:hi], "k": f["k"][:, lo:hi], "v": f["v"][:, lo:hi], "st": state, "g": f["g"][:, lo:hi],
                "b": f["b"][:, lo:hi]}
        y, state = run_mlx(step_model, part)
        ys.append(y)
    np.testing.assert_allclose(np.concatenate(ys, axis=1), whole[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(state, whole[1], rtol=1e-5, atol=1e-5)


def test_linear_attention_declined_forms(tmp_path):
    from parity import claim_report
    model, _ = la_case(1, 2, 2, 2, 4, 4, "gated", None, None, True)  # the gated rule without decay
    assert "needs decay" in claim_report(model, tmp_path, session_may_fail=True)
    node = helper.make_node("LinearAttention", ["q", "k", "v"], ["y", "state"], domain="com.microsoft", q_num_heads=2,
                            kv_num_heads=2, update_rule="linear", state_window=2)
    ins = [(n, TensorProto.FLOAT, [1, 2, 8]) for n in ("q", "k", "v")]
    model = make_model([node], ins, [("y", TensorProto.FLOAT, None), ("state", TensorProto.FLOAT, None)], domains=MS)
    assert "state_window" in claim_report(model, tmp_path, session_may_fail=True)


# ---- the chunked form (prompts of LA_CHUNKED_MIN tokens or more) ---------------------------------

CHUNKED = [  # (b, t, hq, hkv, dk, dv, rule, decay, beta, past, scale): whole chunks and a partial last one
    (1, 64, 2, 2, 8, 8, "linear", None, None, False, 0.0),
    (2, 130, 4, 2, 8, 6, "linear", None, None, True, 0.0),
    (1, 65, 4, 2, 8, 8, "gated", "head", None, True, 0.0),
    (2, 200, 2, 1, 8, 4, "gated", "dim", None, False, 0.0),
    (1, 130, 4, 2, 8, 8, "gated", "dim", None, True, 0.5),
    (1, 64, 2, 2, 8, 8, "delta", None, "head", True, 0.0),
    (2, 200, 4, 2, 8, 6, "delta", None, "one", False, 0.0),
    (1, 130, 4, 2, 16, 8, "gated_delta", "head", "head", True, 0.0),
    (2, 65, 2, 2, 8, 8, "gated_delta", "head", "one", False, 0.0),
    (1, 200, 4, 1, 8, 8, "gated_delta", "dim", "head", True, 0.0),
    (1, 64, 2, 2, 8, 8, "gated_delta", "dim", "one", False, 0.7),
    (1, 30, 4, 2, 8, 8, "gated_delta", "head", "head", True, 0.0),  # one partial chunk
]


@pytest.mark.parametrize("b,t,hq,hkv,dk,dv,rule,decay,beta,past,scale", CHUNKED)
def test_linear_attention_chunked(b, t, hq, hkv, dk, dv, rule, decay, beta, past, scale):
    model, f = la_case(b, t, hq, hkv, dk, dv, rule, decay, beta, past, scale=scale, seed=t)
    got = assert_parity(model, f, rtol=1e-5, atol=1e-5)
    for g, w in zip(got, recurrence(f, hq, hkv, rule, scale)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rule,decay,beta,gate", [
    ("gated", "head", None, (5.0, 20.0)), ("gated", "dim", None, (5.0, 20.0)),
    ("gated_delta", "head", "head", (5.0, 20.0)), ("gated_delta", "dim", "one", (5.0, 20.0)),
    ("gated", "dim", None, (0.0, 20.0)), ("gated_delta", "head", "one", (0.0, 20.0)),
    ("gated", "head", None, (0.0, 0.0)), ("gated_delta", "dim", "head", (0.0, 0.0))])
def test_linear_attention_chunked_gates(rule, decay, beta, gate):
    """Strong decay (e^-20 a token: a chunk's summed gate reaches -1280) underflows to zeros, never to
    inf or NaN; g = 0 is the rule without decay."""
    model, f = la_case(1, 130, 4, 2, 8, 8, rule, decay, beta, True, gate=gate)
    got = assert_parity(model, f, rtol=1e-5, atol=1e-5)
    assert all(np.isfinite(g).all() for g in got)
    for g, w in zip(got, recurrence(f, 4, 2, rule)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("t,rule,decay,beta", [(64, "linear", None, None), (65, "gated", "dim", None),
                                               (200, "delta", None, "one"), (130, "gated_delta", "head", "head")])
def test_linear_attention_chunked_float16(t, rule, decay, beta):
    model, f = la_case(1, t, 4, 2, 8, 8, rule, decay, beta, True, dtype=np.float16)
    got = assert_parity(model, f, rtol=2e-2, atol=2e-2)
    for g, w in zip(got, recurrence(f, 4, 2, rule)):
        np.testing.assert_allclose(g.astype(np.float64), w, rtol=2e-2, atol=2e-2)


def test_linear_attention_chunked_prompt_then_decode_steps():
    """A chunked prompt, then unrolled steps from its state, give the whole run at once (chunked)."""
    model, f = la_case(1, 133, 4, 2, 8, 8, "gated_delta", "dim", "head", True, seed=5)
    whole = run_mlx(model, f)
    state, ys = f["st"], []
    for lo, hi in [(0, 130), (130, 131), (131, 133)]:
        step_model, _ = la_case(1, hi - lo, 4, 2, 8, 8, "gated_delta", "dim", "head", True)
        part = {n: (a if n == "st" else a[:, lo:hi]) for n, a in f.items()}
        y, state = run_mlx(step_model, {**part, "st": state})
        ys.append(y)
    np.testing.assert_allclose(np.concatenate(ys, axis=1), whole[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(state, whole[1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("b,t", [(0, 100), (2, 0)])
def test_linear_attention_empty(b, t):
    model, f = la_case(b, t, 4, 2, 8, 8, "gated_delta", "dim", "head", True)
    y, state = assert_parity(model, f)
    assert y.shape == (b, t, 32) and state.shape == (b, 2, 8, 8)


def eager_ops(path, model, feeds):
    """The MLX operations of the first (eager) Run's graph, from the run report."""
    sess = mlx_ep.session(model, options={"report": str(path)}, strict=True)
    sess.run(None, feeds)
    del sess  # the run report is written when the session releases its cluster
    return int(re.search(r"eager_ops=(\d+)", path.read_text()).group(1))


@pytest.mark.parametrize("rule,decay,beta", [("gated_delta", "head", "head"), ("gated", "dim", None),
                                             ("gated_delta", "dim", "one")])
def test_linear_attention_long_prompt_is_chunked(tmp_path, rule, decay, beta):
    """Unrolled, a prompt costs 10 to 26 MLX operations a token (over 20000 for 2048 tokens); chunked,
    a few hundred once plus a few a chunk (of 64 tokens, 16 with decay per key dimension)."""
    ops = {}
    for t in (20, 1024, 2048):
        model, f = la_case(1, t, 4, 2, 16, 16, rule, decay, beta, True)
        ops[t] = eager_ops(tmp_path / f"report{t}.txt", model, f)
    assert ops[20] > 20 * 10, ops  # below LA_CHUNKED_MIN tokens are unrolled: the count sees them
    assert ops[2048] < 2000, ops
    assert ops[2048] - ops[1024] < 1024, ops  # fewer than one a token
