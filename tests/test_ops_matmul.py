"""Parity of the matmul family (src/ops/matmul.c) against ORT's CPU EP: MatMul over float and
integer dtypes with numpy 1-D promotion and batch broadcasting, Gemm's attributes and C
broadcasting, Einsum equations."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from parity import assert_parity, claim_report as declined_reason, make_model, run_cpu, run_mlx, single_op_model, uniform_data


def data(shape, dtype, lo=-2.0, hi=2.0, seed=0):
    return uniform_data(shape, dtype, lo, hi, seed)


# ---- MatMul -------------------------------------------------------------------------------------

SHAPES = [
    ([3, 4], [4, 5]),
    ([4], [4, 5]),
    ([3, 4], [4]),
    ([4], [4]),
    ([2, 3, 4], [4, 5]),
    ([3, 4], [2, 4, 5]),
    ([2, 1, 3, 4], [5, 4, 2]),
    ([2, 3, 3, 4], [4]),
    ([4], [2, 3, 4, 5]),
    ([3, 0], [0, 5]),
    ([0, 4], [4, 5]),
    ([2, 0, 4], [4, 3]),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("sa,sb", SHAPES)
def test_matmul_float(dtype, sa, sb):
    feeds = {"a": data(sa, dtype, seed=1), "b": data(sb, dtype, seed=2)}
    assert_parity(single_op_model("MatMul", feeds, opset=13), feeds)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32, np.uint64])
@pytest.mark.parametrize("sa,sb", SHAPES)
def test_matmul_int(dtype, sa, sb):
    feeds = {"a": data(sa, dtype, -9, 9, seed=3), "b": data(sb, dtype, -9, 9, seed=4)}
    model = single_op_model("MatMul", feeds, opset=13)
    if np.dtype(dtype).kind == "u" and sa[-1] == 0:
        # ORT's CPU EP fails on unsigned MatMul with K == 0 (tensor type mismatch): compare with numpy
        (got,) = run_mlx(model, feeds)
        np.testing.assert_array_equal(got, np.matmul(feeds["a"], feeds["b"]))
        return
    assert_parity(model, feeds)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32, np.uint64])
def test_matmul_int_wraps(dtype):
    info = np.iinfo(dtype)
    a = np.array([[info.max, 1, info.max // 3], [65536, 3, 7]], dtype)
    b = np.array([[1, 2], [1, 65536], [3, 5]], dtype)
    assert_parity(single_op_model("MatMul", {"a": a, "b": b}, opset=13), {"a": a, "b": b})


def test_matmul_int_chunked():
    """Large enough that the broadcast product is split over K in several chunks."""
    feeds = {"a": data([300, 200], np.int32, -50, 50, seed=5), "b": data([200, 300], np.int32, -50, 50, seed=6)}
    assert_parity(single_op_model("MatMul", feeds, opset=13), feeds)


@pytest.mark.parametrize("sa,sb", [((2, 1), (3, 4)), ((2, 0), (1, 3)), ((1,), (3, 2)), ((2, 3), (1,))])
@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.float32])
def test_matmul_inner_dims_differ(sa, sb, dtype):
    """A K of 1 against another K: the integer path's broadcast multiply took it (and answered)
    where ORT refuses (found by tools/fuzz's data pool, NonZero feeding MatMul); symbolic input
    dims, so ORT's graph checks do not see it first."""
    a, b = np.ones(sa, dtype), np.ones(sb, dtype)
    ot = TensorProto.INT64 if dtype == np.int64 else TensorProto.INT32 if dtype == np.int32 else TensorProto.FLOAT
    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    model = make_model([node], [("a", ot, [None] * len(sa)), ("b", ot, [None] * len(sb))], [("y", ot, None)])
    with pytest.raises(Exception, match="dimension mismatch|must be equal|inner"):
        run_cpu(model, {"a": a, "b": b})
    with pytest.raises(Exception, match="MatMul"):
        run_mlx(model, {"a": a, "b": b})


def test_matmul_opset9_and_symbolic_dims():
    feeds = {"a": data([3, 4], np.float32, seed=7), "b": data([4, 2], np.float32, seed=8)}
    assert_parity(single_op_model("MatMul", feeds, opset=9), feeds)
    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    model = make_model([node], [("a", TensorProto.FLOAT, ["batch", "seq", 8]), ("b", TensorProto.FLOAT, [8, 6])],
                       [("y", TensorProto.FLOAT, None)], opset=13)
    for shape in ([1, 5, 8], [3, 2, 8]):
        feeds = {"a": data(shape, np.float32, seed=9), "b": data([8, 6], np.float32, seed=10)}
        assert_parity(model, feeds)


def test_matmul_constant_weight():
    x = data([2, 5, 16], np.float32, seed=11)
    w = data([16, 8], np.float32, seed=12)
    assert_parity(single_op_model("MatMul", {"x": x}, initializers={"w": w}, opset=13), {"x": x})


# ---- Gemm ---------------------------------------------------------------------------------------

C_SHAPES = [None, [5], [1, 5], [3, 1], [3, 5], []]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("trans_a", [0, 1])
@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("c_shape", C_SHAPES)
def test_gemm(dtype, trans_a, trans_b, c_shape):
    a = data([4, 3] if trans_a else [3, 4], dtype, seed=13)
    b = data([5, 4] if trans_b else [4, 5], dtype, seed=14)
    feeds = {"a": a, "b": b}
    if c_shape is not None:
        feeds["c"] = data(c_shape, dtype, seed=15)
    attrs = {"transA": trans_a, "transB": trans_b}
    assert_parity(single_op_model("Gemm", feeds, attrs=attrs, opset=13), feeds)


@pytest.mark.parametrize("alpha,beta", [(1.0, 1.0), (0.5, 2.0), (-1.5, 0.0), (2.0, -0.25)])
@pytest.mark.parametrize("opset", [7, 11, 13])
def test_gemm_alpha_beta(alpha, beta, opset):
    feeds = {"a": data([3, 4], np.float32, seed=16), "b": data([4, 5], np.float32, seed=17),
             "c": data([5], np.float32, seed=18)}
    assert_parity(single_op_model("Gemm", feeds, attrs={"alpha": alpha, "beta": beta}, opset=opset), feeds)


def test_gemm_constant_weights_and_alpha_without_c():
    x = data([2, 6], np.float32, seed=19)
    w = data([4, 6], np.float32, seed=20)
    bias = data([4], np.float32, seed=21)
    model = single_op_model("Gemm", {"x": x}, initializers={"w": w, "bias": bias}, attrs={"transB": 1}, opset=13)
    assert_parity(model, {"x": x})
    feeds = {"a": data([3, 4], np.float32, seed=22), "b": data([4, 2], np.float32, seed=23)}
    assert_parity(single_op_model("Gemm", feeds, attrs={"alpha": 3.0}, opset=13), feeds)


def test_gemm_empty_k():
    feeds = {"a": np.zeros([3, 0], np.float32), "b": np.zeros([0, 2], np.float32), "c": data([3, 2], np.float32)}
    assert_parity(single_op_model("Gemm", feeds, opset=13), feeds)
    # ORT's CPU EP returns C unscaled when K == 0; the spec (and this EP) give beta * C
    (got,) = run_mlx(single_op_model("Gemm", feeds, attrs={"beta": 0.5}, opset=13), feeds)
    np.testing.assert_allclose(got, 0.5 * feeds["c"], rtol=1e-6)


# ---- Einsum -------------------------------------------------------------------------------------

EINSUM_CASES = [
    ("ij,jk->ik", [[3, 4], [4, 5]]),
    ("ij,jk", [[3, 4], [4, 5]]),
    ("bij,bjk->bik", [[2, 3, 4], [2, 4, 5]]),
    ("...ij,...jk->...ik", [[2, 3, 4], [2, 4, 5]]),
    ("...ij,...jk", [[1, 3, 4], [2, 4, 5]]),
    ("ij->ji", [[3, 4]]),
    ("ij->", [[3, 4]]),
    ("ij->j", [[3, 4]]),
    ("ii->i", [[4, 4]]),
    ("ii", [[4, 4]]),
    ("i,i", [[5], [5]]),
    ("i,j->ij", [[3], [4]]),
    ("bhqd,bhkd->bhqk", [[2, 3, 4, 8], [2, 3, 5, 8]]),
    ("Ba,aC->BC", [[2, 3], [3, 4]]),
    ("ij, jk -> ik", [[3, 4], [4, 5]]),
    ("ij,jk,kl->il", [[2, 3], [3, 4], [4, 5]]),
    ("bi,bi->b", [[3, 4], [3, 4]]),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("eq,shapes", EINSUM_CASES)
def test_einsum(dtype, eq, shapes):
    feeds = {f"x{i}": data(s, dtype, seed=30 + i) for i, s in enumerate(shapes)}
    assert_parity(single_op_model("Einsum", feeds, attrs={"equation": eq}, opset=12), feeds)


def test_einsum_implicit_upper_case():
    """Implicit output in ASCII order (upper case first); ORT's CPU EP rejects upper-case labels in
    implicit mode, so numpy is the reference."""
    feeds = {"a": data([2, 3], np.float32, seed=40), "b": data([3, 4], np.float32, seed=41)}
    (got,) = run_mlx(single_op_model("Einsum", feeds, attrs={"equation": "Ba,aC"}, opset=12), feeds)
    np.testing.assert_allclose(got, np.einsum("Ba,aC->BC", feeds["a"], feeds["b"]), rtol=1e-5, atol=1e-6)
    feeds = {"a": data([3, 2], np.float32, seed=42), "b": data([4, 3], np.float32, seed=43)}
    (got,) = run_mlx(single_op_model("Einsum", feeds, attrs={"equation": "aB,Ca"}, opset=12), feeds)
    np.testing.assert_allclose(got, np.einsum("aB,Ca->BC", feeds["a"], feeds["b"]), rtol=1e-5, atol=1e-6)


def test_einsum_int_declined(tmp_path):
    feeds = {"a": data([2, 3], np.int32), "b": data([3, 4], np.int32)}
    report = declined_reason(single_op_model("Einsum", feeds, attrs={"equation": "ij,jk->ik"}, opset=12), tmp_path)
    assert "declined Einsum" in report


def test_bfloat16_against_numpy():
    """ORT's CPU EP has no bfloat16 MatMul/Gemm: x (float32) -> Cast(bfloat16) -> op -> Cast(float32)."""
    import ml_dtypes

    def rb(a):
        return np.asarray(a, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)

    a, b = rb(data([3, 8], np.float32, seed=50)), rb(data([8, 4], np.float32, seed=51))
    for op, attrs, want in (("MatMul", {}, a @ b), ("Gemm", {"alpha": 0.5}, 0.5 * (a @ b))):
        nodes = [helper.make_node("Cast", ["a"], ["ab"], to=TensorProto.BFLOAT16),
                 helper.make_node("Cast", ["b"], ["bb"], to=TensorProto.BFLOAT16),
                 helper.make_node(op, ["ab", "bb"], ["yb"], **attrs),
                 helper.make_node("Cast", ["yb"], ["y"], to=TensorProto.FLOAT)]
        model = make_model(nodes, [("a", TensorProto.FLOAT, [3, 8]), ("b", TensorProto.FLOAT, [8, 4])],
                           [("y", TensorProto.FLOAT, None)], opset=13)
        (got,) = run_mlx(model, {"a": a, "b": b})
        np.testing.assert_allclose(got, rb(want), rtol=1e-2, atol=1e-2, err_msg=op)


# ---- FusedMatMul (com.microsoft) ---------------------------------------------------------------

def fused_model(ash, bsh, dtype, attrs):
    node = helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain="com.microsoft", **attrs)
    t = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE, np.float16: TensorProto.FLOAT16}[dtype]
    return make_model([node], [("a", t, list(ash)), ("b", t, list(bsh))], [("y", t, None)],
                      domains=[("com.microsoft", 1)])


def fused_reference(a, b, attrs):
    """The contrib spec: transBatch moves the leading axis before the last one, then trans swaps
    the last two; alpha scales the product (float64, rounded to the operands' dtype)."""
    def op(x, trans, batch):
        if batch:
            x = np.transpose(x, list(range(1, x.ndim - 1)) + [0, x.ndim - 1])
        return np.swapaxes(x, -1, -2) if trans and x.ndim >= 2 else x
    x = op(a.astype(np.float64), attrs.get("transA", 0), attrs.get("transBatchA", 0))
    y = op(b.astype(np.float64), attrs.get("transB", 0), attrs.get("transBatchB", 0))
    return (attrs.get("alpha", 1.0) * (x @ y)).astype(a.dtype)


FUSED_CASES = [
    ((3, 4), (4, 5), {}),
    ((4, 3), (4, 5), {"transA": 1, "alpha": 0.125}),
    ((2, 3, 4), (2, 5, 4), {"transB": 1, "alpha": -2.0}),
    ((2, 4, 3), (4, 5), {"transA": 1}),  # a batch of matrices times a matrix
    ((2, 3, 5, 4), (3, 5, 2, 6), {"transBatchA": 1, "transA": 1}),
    ((2, 3, 4, 5), (3, 4, 5, 6), {"transBatchA": 1}),
    ((3, 4, 5, 6), (2, 3, 4, 6), {"transBatchB": 1, "transB": 1, "alpha": 0.5}),
    ((3, 5, 6), (3, 5, 6), {"transBatchA": 1, "transBatchB": 1, "transB": 1}),
    ((4,), (2, 5, 4), {"transB": 1}),
    ((4, 3), (2, 4, 5), {"transA": 1}),  # a matrix times a batch of matrices
    ((1, 4, 3), (2, 4, 5), {"transA": 1, "alpha": 2.0}),  # a batch of 1 broadcast
    ((2, 3, 4), (4,), {"transA": 0, "alpha": 3.0}),
]


@pytest.mark.parametrize("ash,bsh,attrs", FUSED_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_fused_matmul(ash, bsh, attrs, dtype):
    rng = np.random.default_rng(len(ash) * 7 + len(attrs))
    a, b = rng.uniform(-1, 1, ash).astype(dtype), rng.uniform(-1, 1, bsh).astype(dtype)
    model = fused_model(ash, bsh, dtype, attrs)
    tol = {np.float16: 1e-2, np.float32: 1e-5, np.float64: 1e-12}[dtype]
    got = assert_parity(model, {"a": a, "b": b}, rtol=tol, atol=tol)[0]
    np.testing.assert_allclose(got.astype(np.float64), fused_reference(a, b, attrs).astype(np.float64), rtol=tol, atol=tol)


def test_fused_matmul_trans_batch_rank_refused():
    """ORT refuses transBatch unless both operands have the same rank >= 3; so does the EP."""
    a, b = np.ones((3, 4), np.float32), np.ones((4, 5), np.float32)
    sess_model = fused_model(a.shape, b.shape, np.float32, {"transBatchA": 1})
    with pytest.raises(Exception, match="same rank and rank >= 3"):
        run_mlx(sess_model, {"a": a, "b": b})


# ---- FusedGemm (com.microsoft) -----------------------------------------------------------------

FUSED_GEMM_ACTS = [("Relu", {}), ("Tanh", {}), ("Sigmoid", {}), ("Softplus", {}), ("Softsign", {}),
                   ("LeakyRelu", {"activation_alpha": 0.2}), ("Elu", {"activation_alpha": 0.7}),
                   ("ThresholdedRelu", {"activation_alpha": 0.3}),
                   ("HardSigmoid", {"activation_alpha": 0.3, "activation_beta": 0.4}),
                   ("ScaledTanh", {"activation_alpha": 1.5, "activation_beta": 0.6}),
                   ("ParametricSoftplus", {"activation_alpha": 0.8, "activation_beta": 1.7}),
                   ("Selu", {"activation_alpha": 1.6, "activation_gamma": 1.05})]


@pytest.mark.parametrize("act,params", FUSED_GEMM_ACTS)
@pytest.mark.parametrize("gemm", [{}, {"transA": 1, "alpha": 0.7, "beta": 0.6}, {"transB": 1, "beta": 0.0}])
def test_fused_gemm(act, params, gemm):
    a_shape = (4, 3) if gemm.get("transA") else (3, 4)
    b_shape = (5, 4) if gemm.get("transB") else (4, 5)
    node = helper.make_node("FusedGemm", ["a", "b", "c"], ["y"], domain="com.microsoft", activation=act, **params, **gemm)
    model = make_model([node], [("a", TensorProto.FLOAT, list(a_shape)), ("b", TensorProto.FLOAT, list(b_shape)),
                                ("c", TensorProto.FLOAT, [5])], [("y", TensorProto.FLOAT, None)],
                       domains=[("com.microsoft", 1)])
    rng = np.random.default_rng(len(act))
    feeds = {"a": rng.standard_normal(a_shape).astype(np.float32), "b": rng.standard_normal(b_shape).astype(np.float32),
             "c": rng.standard_normal(5).astype(np.float32)}
    assert_parity(model, feeds, rtol=1e-5, atol=1e-5)


def test_fused_gemm_declines_defaulted_parameters(tmp_path):
    node = helper.make_node("FusedGemm", ["a", "b"], ["y"], domain="com.microsoft", activation="LeakyRelu")
    model = make_model([node], [("a", TensorProto.FLOAT, [2, 3]), ("b", TensorProto.FLOAT, [3, 2])],
                       [("y", TensorProto.FLOAT, None)], domains=[("com.microsoft", 1)])
    assert "activation 'LeakyRelu'" in declined_reason(model, tmp_path, session_may_fail=True)
