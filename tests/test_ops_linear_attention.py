"""com.microsoft LinearAttention (src/ops/linear_attention.c) on the MLX EP in strict mode against
ORT's CPU EP, and against the recurrence written out in NumPy (float64): every update rule, decay
per head and per key dimension, beta per head and shared, GQA, scale, with and without a past state,
one decode token and prompts, float32 and float16."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

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


def la_case(b, t, hq, hkv, dk, dv, rule, decay, beta, past, dtype=np.float32, scale=0.0, seed=1):
    rng = np.random.default_rng(seed)
    f = {"q": rng.standard_normal((b, t, hq * dk)), "k": rng.standard_normal((b, t, hkv * dk)) * 0.3,
         "v": rng.standard_normal((b, t, hkv * dv))}
    names = ["q", "k", "v", "st" if past else "", "g" if decay else "", "b" if beta else ""]
    if past:
        f["st"] = rng.standard_normal((b, hkv, dk, dv))
    if decay:
        f["g"] = -rng.random((b, t, hkv * (dk if decay == "dim" else 1)))
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
