"""A hostile model file: attribute and declared-shape values chosen to overflow the EP's arithmetic.
The EP must decline the node (with the reason in its claim report) or fail the Run with a clear
message; never overflow a signed integer, divide by zero or write past a table. Found by an audit of
every attribute reader (2026-12-04); `make sanitize` runs this file under UBSan, where an overflow
stops the process."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from parity import claim_report, make_model
import onnxruntime_ep_mlx as mlx_ep

F = TensorProto.FLOAT
P = 2**62


def _ml_model(node, inputs, outputs, ml_opset):
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                              [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("ai.onnx.ml", ml_opset)])
    model.ir_version = 10
    return model.SerializeToString()


def test_svm_classifier_vectors_per_class_overflow(tmp_path):
    """vectors_per_class summing past int64 wrapped to 1 and sized the pair tables below what the
    per-class loops indexed: a heap write at session creation."""
    node = helper.make_node("SVMClassifier", ["x"], ["y", "z"], domain="ai.onnx.ml", classlabels_ints=[0, 1, 2, 3],
                            vectors_per_class=[P, P, P, P + 1], support_vectors=[1.0], coefficients=[0.5] * 3,
                            rho=[0.0] * 6, kernel_type="LINEAR", kernel_params=[0.1, 0.0, 3.0])
    model = _ml_model(node, [("x", F, [1, 1])], [("y", TensorProto.INT64, [1]), ("z", F, [1, 4])], 1)
    assert "vectors_per_class sums past" in claim_report(model, tmp_path, session_may_fail=True)


@pytest.mark.parametrize("target", [5, 2**31 - 1])
def test_tree_ensemble_n_targets_overflow(tmp_path, target):
    """n_targets 2^62 with 4 nodes wrapped the weight tables' size to 0: a heap write at session creation."""
    node = helper.make_node("TreeEnsembleRegressor", ["x"], ["y"], domain="ai.onnx.ml", n_targets=P,
                            nodes_treeids=[0, 1, 2, 3], nodes_nodeids=[0] * 4, nodes_featureids=[0] * 4,
                            nodes_values=[0.0] * 4, nodes_modes=["LEAF"] * 4, nodes_truenodeids=[0] * 4,
                            nodes_falsenodeids=[0] * 4, target_ids=[target], target_nodeids=[0], target_treeids=[0],
                            target_weights=[1.0])
    model = _ml_model(node, [("x", F, [1, 1])], [("y", F, [1, 1])], 3)
    assert "too many targets" in claim_report(model, tmp_path, session_may_fail=True)


def test_attention_3d_without_head_counts():
    """Q, K and V without declared shapes and no head attributes: the claim saw no rank, and the
    lowering divided by a head count of 0 (SIGFPE, the host process died)."""
    node = helper.make_node("Attention", ["q", "k", "v"], ["y"])
    model = make_model([node], [("q", F, None), ("k", F, None), ("v", F, None)], [("y", F, None)], opset=23)
    x = np.ones((1, 2, 4), np.float32)
    sess = mlx_ep.session(model, strict=True)
    with pytest.raises(Exception, match=r"need positive q_num_heads and kv_num_heads"):
        sess.run(None, {"q": x, "k": x, "v": x})


def test_attention_mask_rank_past_limit():
    """attn_mask without a declared shape fed at rank 33, its last axis shorter than the keys: the
    padding of that axis indexed a 32-entry table at 32 (a stack write past it); now refused."""
    node = helper.make_node("Attention", ["q", "k", "v", "m"], ["y"])
    model = make_model([node], [("q", F, [1, 1, 2, 4]), ("k", F, [1, 1, 3, 4]), ("v", F, [1, 1, 3, 4]),
                                ("m", F, None)], [("y", F, None)], opset=23)
    sess = mlx_ep.session(model, strict=True)
    q, kv = np.ones((1, 1, 2, 4), np.float32), np.ones((1, 1, 3, 4), np.float32)
    with pytest.raises(Exception, match="rank above the EP's limit"):
        sess.run(None, {"q": q, "k": kv, "v": kv, "m": np.zeros([1] * 31 + [2, 2], np.float32)})


W1 = numpy_helper.from_array(np.ones((2, 1, 3), np.float32), "w")


@pytest.mark.parametrize("op,attrs", [("Conv", {"pads": [P, P]}), ("Conv", {"dilations": [P]}),
                                      ("Conv", {"group": P}), ("ConvTranspose", {"strides": [P]})])
def test_conv_attributes_above_int32(tmp_path, op, attrs):
    node = helper.make_node(op, ["x", "w"], ["y"], **attrs)
    model = make_model([node], [("x", F, [1, 1, 8])], [("y", F, None)], [("w", W1)])
    assert "above int32" in claim_report(model, tmp_path, session_may_fail=True)


def test_deform_conv_pads_above_int32(tmp_path):
    node = helper.make_node("DeformConv", ["x", "w", "o"], ["y"], pads=[P, 0, P, 0])
    model = make_model([node], [("x", F, [1, 1, 4, 4]), ("w", F, [1, 1, 2, 2]), ("o", F, [1, 8, 3, 3])],
                       [("y", F, None)], opset=22)
    assert "above int32" in claim_report(model, tmp_path, session_may_fail=True)


def test_declared_shape_past_int64():
    """Clip's min declared [2^32, 2^32]: the claim multiplied the declared dims unchecked."""
    node = helper.make_node("Clip", ["x", "lo"], ["y"])
    model = make_model([node], [("x", F, [2]), ("lo", F, [2**32, 2**32])], [("y", F, [2])], opset=13)
    mlx_ep.session(model, strict=False)   # builds, whatever the EP claims, without overflow


def test_matmul_nbits_k_near_int64():
    node = helper.make_node("MatMulNBits", ["a", "b", "s"], ["y"], domain="com.microsoft", K=2**63 - 1, N=1, bits=4,
                            block_size=16)
    model = make_model([node], [("a", F, None), ("b", TensorProto.UINT8, None), ("s", F, None)], [("y", F, None)],
                       domains=[("com.microsoft", 1)])
    mlx_ep.session(model, strict=False)   # the K-blocks count no longer overflows at claim


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "LpPool"])
def test_pool_output_past_int32(op):
    """A kernel of 2^31 - 1 taps with pads of 2^31 - 2 on each side of a 3-long axis (pads below the
    kernel, as ORT requires): the output has 2^31 + 1 positions, past MLX's 32-bit dimensions. Refused from the geometry, before any host work per position (the window
    counts of AveragePool took 8 GiB and 20 s to build for MLX to refuse the padding; fuzz attrs
    pool seeds 50861, 51861)."""
    node = helper.make_node(op, ["x"], ["y"], kernel_shape=[2**31 - 1], strides=[1], pads=[2**31 - 2, 2**31 - 2])
    model = make_model([node], [("x", F, [1, 3, 3])], [("y", F, None)])
    sess = mlx_ep.session(model, strict=True)
    with pytest.raises(Exception, match=r"passes 2\^31 - 1"):
        sess.run(None, {"x": np.ones((1, 3, 3), np.float32)})


@pytest.mark.parametrize("op", ["AveragePool", "MaxPool", "LpPool"])
@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
def test_pool_kernel_padded_past_int32(op, auto_pad):
    """A kernel of 2^31 - 1 taps (within int32, so claimed) padded SAME: its padded input would be
    past MLX's int32 dims (padding once failed, and the long-window reduction then read the failed
    array's rank, -1, and wrote below its shape table: UBSan). Those six windows are reduced over
    their taps in the input now, as ORT clips them: each covers the whole axis. With ones as input:
    MaxPool and AveragePool give ones, LpPool (p = 2) the root of the taps the window holds."""
    node = helper.make_node(op, ["x"], ["y"], kernel_shape=[2**31 - 1, 2], strides=[1, 1], auto_pad=auto_pad)
    model = make_model([node], [("x", F, [2, 2, 6, 3])], [("y", F, None)])
    sess = mlx_ep.session(model, strict=True)
    y = sess.run(None, {"x": np.ones((2, 2, 6, 3), np.float32)})[0]
    assert y.shape == (2, 2, 6, 3), y.shape
    if op != "LpPool":
        np.testing.assert_array_equal(y, np.ones_like(y))
        return
    # the second axis' windows of 2 over 3 positions, SAME: one holds a single real tap
    taps = [2, 2, 1] if auto_pad == "SAME_UPPER" else [1, 2, 2]
    np.testing.assert_allclose(y, np.broadcast_to(np.sqrt(6.0 * np.array(taps, np.float32)), y.shape), rtol=1e-6)


