"""Exp, Erf, Sigmoid and Tanh of float32 on the CPU through the EP's eight-lane AVX2/FMA functions
(src/mlx/bridge_cpu_unary.cpp, bridge_cpu_vmath.cpp): Exp, Erf and Sigmoid give the same bits as
MLX's kernels (ORT_EP_MLX_CPU_UNARY=0), special values included, except Exp past |x| = 88, where
MLX's kernel gives infinity or zero and ours the value ORT gives; Tanh is within 2 ulp of float64's
tanh (MLX's kernel is libm's tanhf); all four give ORT's CPU EP's values within float32 tolerances
(rtol 1e-5, atol 1e-6: different approximations of each function; the same infinities and NaNs).
Softmax over the last axis (EpCpuSoftmax) gives MLX's kernel's bits too, on rows with NaN, infinities,
only -inf, signed zeros, of widths around the eight lanes, and ORT's values within the same tolerances.
Gelu's erf form, (0.5 x)(1 + erf(x sqrt(1/2))) in one pass, gives the bits of MLX's composed
operations, and arrays past 2^16 values (shared with the pool's helpers) give the bits one thread
gives. LayerNormalization (EpCpuLayerNorm) against ORT's CPU EP, and far from zero against float64.
Which kernel ran is read from the op histogram of a fresh process per switch. `make check-vmath`
runs every float32 through the same functions."""
from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import TensorProto, helper

from parity import histogram_probe, make_model, run_cpu, run_mlx_each
from test_cpu_qgemv import needs_kernel

BITWISE_OPS = ["Exp", "Erf", "Sigmoid", "Gelu"]  # Gelu: (0.5 x)(1 + erf(x sqrt(1/2))), MLX's ops in one pass
OPS = BITWISE_OPS + ["Tanh"]


def values() -> np.ndarray:
    rng = np.random.default_rng(0)
    special = [0.0, -0.0, 1e-45, -1e-45, 1e-38, 0.5, -0.5, 0.5625, -0.5625, 0.56249994, 0.5706, 9.0, 9.1, 44.0, 44.5,
               87.9, 88.0, 88.1, -87.9, -88.0, -88.1, 100.0, -100.0,
               1e30, -1e30, np.inf, -np.inf, np.nan, 3.4e38, -3.4e38]
    body = np.concatenate([rng.standard_normal(4000) * 4, rng.uniform(-90, 90, 4000), special])
    return body.astype(np.float32).reshape(1, -1)


def model(op: str, x=None) -> bytes:
    x = values() if x is None else x
    return make_model([helper.make_node(op, ["x"], ["y"])], [("x", TensorProto.FLOAT, list(x.shape))],
                      [("y", TensorProto.FLOAT, list(x.shape))])


def many(x: np.ndarray, copies: int) -> np.ndarray:
    """x repeated along its last axis: arrays past 2^16 values, which the task shares with the pool's
    helpers (bridge_cpu_unary.cpp), computed as one thread would."""
    return np.tile(x, (1, copies)) if x.shape[0] == 1 else np.tile(x, (copies, 1))


@pytest.mark.parametrize("op", OPS)
def test_against_cpu_ep(op):
    x = values()
    (want,) = run_cpu(model(op), {"x": x})
    for run, (got,) in enumerate(run_mlx_each(model(op), {"x": x}, options={"device": "cpu"})):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{op} run {run + 1}: NaN")
        np.testing.assert_array_equal(np.isinf(got), np.isinf(want), err_msg=f"{op} run {run + 1}: inf")
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"{op} run {run + 1}")


PROBE = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import numpy as np
from test_cpu_unary import OPS, SOFTMAX_WIDTHS, many, model, softmax_model, softmax_values, values
from parity import run_mlx_each
out = {}
for op in OPS:
    for copies in (1, 9):
        x = many(values(), copies)
        runs = [got.tobytes().hex() for (got,) in run_mlx_each(model(op, x), {"x": x}, options={"device": "cpu"})]
        out[f"{op}x{copies}"] = runs
for m in SOFTMAX_WIDTHS:
    x = many(softmax_values(m), 1 if m < 300 else 30)
    runs = [got.tobytes().hex() for (got,) in run_mlx_each(softmax_model(x), {"x": x}, options={"device": "cpu"})]
    out[f"Softmax{m}"] = runs
print("RESULT " + json.dumps(out))
"""

SOFTMAX_WIDTHS = (5, 8, 37, 300)


def softmax_values(m: int) -> np.ndarray:
    """Rows of m for Softmax: ordinary, wide and tiny ranges, and rows holding NaN, +inf, -inf, only
    -inf, one value repeated, signed zeros."""
    rng = np.random.default_rng(m)
    rows = [rng.standard_normal(m) * 3, rng.uniform(-100, 100, m), rng.standard_normal(m) * 1e-6,
            np.full(m, 7.5), np.full(m, -np.inf), np.where(np.arange(m) % 2 == 0, 0.0, -0.0)]
    for special in (np.nan, np.inf, -np.inf, 1e30):
        row = rng.standard_normal(m)
        row[m // 2] = special
        rows.append(row)
    return np.stack(rows).astype(np.float32)


def softmax_model(x: np.ndarray) -> bytes:
    return make_model([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], [("x", TensorProto.FLOAT, list(x.shape))],
                      [("y", TensorProto.FLOAT, list(x.shape))])


def probe(switch: str):
    out, _ = histogram_probe(PROBE, ORT_EP_MLX_CPU_UNARY=switch)
    result = json.loads(next(line for line in out.stdout.splitlines() if line.startswith("RESULT "))[7:])
    return result, [line for line in out.stderr.splitlines() if " program: " in line or " eager: " in line]


@needs_kernel
def test_same_bits_as_mlx():
    ours, ours_ops = probe("1")
    mlx, mlx_ops = probe("0")
    assert any("EpCpuUnary" in line for line in ours_ops), ours_ops
    assert not any("EpCpuUnary" in line for line in mlx_ops), mlx_ops
    for op in BITWISE_OPS:
        for copies in (1, 9):
            x = many(values(), copies)
            wide = (np.abs(x) > 88.0)[0]
            for run, (a, b) in enumerate(zip(ours[f"{op}x{copies}"], mlx[f"{op}x{copies}"])):
                a = np.frombuffer(bytes.fromhex(a), np.float32)
                b = np.frombuffer(bytes.fromhex(b), np.float32)
                same = a.view(np.uint32) == b.view(np.uint32)
                if op == "Exp":  # MLX's kernel: infinity above 88, zero below -88
                    assert (b[wide & (x[0] > 0)] == np.inf).all() and (b[wide & (x[0] < 0)] == 0).all()
                    same |= wide
                assert same.all(), f"{op} x{copies} run {run + 1}: bits differ from MLX's at {np.flatnonzero(~same)[:5]}"
    assert any("EpCpuSoftmax" in line for line in ours_ops), ours_ops
    for m in SOFTMAX_WIDTHS:
        for run, (a, b) in enumerate(zip(ours[f"Softmax{m}"], mlx[f"Softmax{m}"])):
            a = np.frombuffer(bytes.fromhex(a), np.float32)
            b = np.frombuffer(bytes.fromhex(b), np.float32)
            same = (a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))
            assert same.all(), f"Softmax over {m} run {run + 1}: differs from MLX's kernel at {np.flatnonzero(~same)[:5]}"


@pytest.mark.parametrize("m", SOFTMAX_WIDTHS)
def test_softmax_against_cpu_ep(m):
    x = softmax_values(m)
    (want,) = run_cpu(softmax_model(x), {"x": x})
    for run, (got,) in enumerate(run_mlx_each(softmax_model(x), {"x": x}, options={"device": "cpu"})):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"run {run + 1}: NaN")
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"run {run + 1}")


def float32_ulp(v: np.ndarray) -> np.ndarray:
    """The spacing of float32 at |v| (float64 values): 2^(e - 24) for |v| in [2^(e-1), 2^e), at least 2^-149."""
    _, e = np.frexp(v)
    return np.ldexp(1.0, np.maximum(e - 24, -149))


@needs_kernel
def test_tanh_within_two_ulp():
    ours, ours_ops = probe("1")
    assert any("EpCpuUnary" in line for line in ours_ops), ours_ops
    x = values()[0]
    want = np.tanh(x.astype(np.float64))
    for run, got in enumerate(ours["Tanhx1"]):
        got = np.frombuffer(bytes.fromhex(got), np.float32)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"run {run + 1}: NaN")
        finite = ~np.isnan(want)
        err = np.abs(got[finite].astype(np.float64) - want[finite]) / float32_ulp(want[finite])
        assert err.max() <= 2.0, f"run {run + 1}: {err.max():.2f} ulp at x={x[finite][err.argmax()]!r}"
        zeros = x == 0
        assert (np.signbit(got[zeros]) == np.signbit(x[zeros])).all(), f"run {run + 1}: tanh of a zero lost its sign"


# ---- LayerNormalization over the last axis (EpCpuLayerNorm) -------------------------------------
# One task per LayerNormalization on a CPU scope: mean, then the mean of squared deviations, summed
# in float64, the normalized value rounded once; rows shared with the pool's helpers from 2^14
# values on. Against ORT's CPU EP (rtol 1e-5, atol 1e-5: ORT sums in another order) on widths
# around the eight lanes, constant rows, NaN and infinities, with and without weight and bias; a
# row offset by 1e4 against float64's LayerNormalization of the same float32 values (ORT's own
# result is 5e-4 from that there, MLX's composition 1.2e-3).

LN_SHAPES = [(3, 5), (2, 8), (7, 13), (256, 768), (2, 3, 40)]


def layer_norm_case(shape, weight: bool, bias: bool, seed=0, offset=False):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    flat = x.reshape(-1, shape[-1])
    if offset:
        flat[0] += 1e4
    if flat.shape[0] > 2:
        flat[1] = 2.5  # a constant row: zero variance
        flat[2, 0] = np.nan if flat.shape[0] % 2 else np.inf
    h = shape[-1]
    inputs, inits = [("x", TensorProto.FLOAT, list(shape))], []
    names = ["x", "w" if weight else "", "b" if bias else ""]
    if weight:
        inits.append(("w", (1 + 0.1 * rng.standard_normal(h)).astype(np.float32)))
    if bias:
        inits.append(("b", (0.1 * rng.standard_normal(h)).astype(np.float32)))
    if not weight:  # the scale input is required: ones stand for "no weight"
        names[1] = "w"
        inits.append(("w", np.ones(h, np.float32)))
    while names[-1] == "":
        names.pop()
    node = helper.make_node("LayerNormalization", names, ["y"], axis=-1, epsilon=1e-5)
    return make_model([node], inputs, [("y", TensorProto.FLOAT, list(shape))], inits, opset=17), {"x": x}


@pytest.mark.parametrize("shape", LN_SHAPES)
@pytest.mark.parametrize("weight,bias", [(True, True), (True, False), (False, False)])
def test_layer_norm_against_cpu_ep(shape, weight, bias):
    model, feeds = layer_norm_case(shape, weight, bias)
    (want,) = run_cpu(model, feeds)
    for run, (got,) in enumerate(run_mlx_each(model, feeds, options={"device": "cpu"})):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"run {run + 1}: NaN")
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"run {run + 1}")


@pytest.mark.parametrize("shape", [(3, 5), (256, 768)])
def test_layer_norm_far_from_zero(shape):
    model, feeds = layer_norm_case(shape, False, False, offset=True)
    (got,) = run_mlx_each(model, feeds, options={"device": "cpu"})[-1]
    x = feeds["x"].astype(np.float64)[..., :][(0,) * (len(shape) - 1)]
    want = (x - x.mean()) / np.sqrt(((x - x.mean()) ** 2).mean() + 1e-5)
    np.testing.assert_allclose(got[(0,) * (len(shape) - 1)], want, rtol=0, atol=2e-6)


LN_PROBE = r"""
import sys
sys.path.insert(0, sys.argv[1])
from test_cpu_unary import layer_norm_case
from parity import run_mlx_each
model, feeds = layer_norm_case((256, 768), True, True)
run_mlx_each(model, feeds, options={"device": "cpu"})
"""


@needs_kernel
@pytest.mark.parametrize("switch", ["1", "0"])
def test_layer_norm_kernel_runs(switch):
    _, programs = histogram_probe(LN_PROBE, ORT_EP_MLX_CPU_UNARY=switch)
    assert programs and all(("EpCpuLayerNorm=1" in p) == (switch == "1") for p in programs), programs


@pytest.mark.parametrize("op", OPS)
def test_scalar_input(op):
    """A 0-d input has no last axis: the task must not read one (found by tools/fuzz's core slice)."""
    x = np.array(0.75, np.float32)
    (want,) = run_cpu(model(op, x), {"x": x})
    for run, (got,) in enumerate(run_mlx_each(model(op, x), {"x": x}, options={"device": "cpu"})):
        assert got.shape == () and not np.isnan(got), f"{op} run {run + 1}: {got}"
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
