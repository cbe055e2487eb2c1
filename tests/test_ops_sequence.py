"""Sequence values inside a cluster (src/ops/sequence.c) against ORT's CPU EP, strict mode, eager,
traced and replayed (assert_parity's three Runs): the models of ONNX's simple sequence tests
(sequence_model1..8, whose inputs and outputs are tensors), positions read from data and checked
like ORT, sequences read by a control-flow body, and the partition rule that no sequence crosses a
cluster's boundary (ORT's plugin-EP interface cannot carry one), with the claim report's reason."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP, helper

import onnxruntime_ep_mlx as mlx_ep
from parity import assert_parity, claim_report, make_model, run_cpu

F, I64 = TP.FLOAT, TP.INT64
rng = np.random.default_rng(11)
X = rng.standard_normal((2, 3)).astype(np.float32)
Y = rng.standard_normal((2, 3)).astype(np.float32)
Z = rng.standard_normal((2, 3)).astype(np.float32)


def node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, **attrs)


def xyz(*extra):
    return [("X", F, [2, 3]), ("Y", F, [2, 3]), ("Z", F, [2, 3]), *[(e, I64, []) for e in extra]]


def pos(v):
    return np.array(v, np.int64)


# the models of ONNX's simple tests test_sequence_model1..8
MODEL1 = make_model([node("SequenceEmpty", [], ["s0"], dtype=F), node("SequenceInsert", ["s0", "X"], ["s1"]),
                     node("SequenceInsert", ["s1", "Y"], ["s2"]), node("SequenceInsert", ["s2", "Z", "pos"], ["s3"]),
                     node("SequenceAt", ["s3", "pos_at"], ["out"])], xyz("pos", "pos_at"), [("out", F, None)], opset=12)
MODEL2 = make_model([node("SequenceConstruct", ["X", "Y", "Z"], ["s1"]), node("SequenceErase", ["s1", "pe"], ["s2"]),
                     node("SequenceAt", ["s2", "pos_at"], ["out"])], xyz("pe", "pos_at"), [("out", F, None)], opset=12)
MODEL3 = make_model([node("SequenceConstruct", ["X", "Y", "Z"], ["s1"]), node("SequenceErase", ["s1", "pe"], ["s2"]),
                     node("SequenceInsert", ["s2", "X", "pi"], ["s3"]), node("SequenceAt", ["s3", "pos_at"], ["out"])],
                    xyz("pe", "pi", "pos_at"), [("out", F, None)], opset=12)


def concat_model(axis, new_axis=None):
    attrs = {"axis": axis} if new_axis is None else {"axis": axis, "new_axis": new_axis}
    return make_model([node("SequenceConstruct", ["X", "Y", "Z"], ["s1"]), node("ConcatFromSequence", ["s1"], ["out"], **attrs)],
                      xyz(), [("out", F, None)], opset=12)


def split_model(split=None, **attrs):
    ins = [("X", F, [4, 6])] + ([("split", I64, None)] if split is not None else [])
    nodes = [node("SplitToSequence", ["X"] + (["split"] if split is not None else []), ["s"], **attrs),
             node("SequenceLength", ["s"], ["len"]), node("ConcatFromSequence", ["s"], ["back"], axis=attrs.get("axis", 0),
                                                          new_axis=int(split is None and attrs.get("keepdims", 1) == 0)),
             node("SequenceAt", ["s", "at"], ["piece"])]
    return make_model(nodes, ins + [("at", I64, [])], [("len", I64, None), ("back", F, None), ("piece", F, None)], opset=12)


X46 = rng.standard_normal((4, 6)).astype(np.float32)


@pytest.mark.parametrize("p,at", [(0, 0), (1, -1), (-2, 2), (2, 2)])
def test_sequence_model1_insert_and_at(p, at):
    assert_parity(MODEL1, {"X": X, "Y": Y, "Z": Z, "pos": pos(p), "pos_at": pos(at)})


@pytest.mark.parametrize("pe,at", [(0, 0), (-1, 1), (1, -1)])
def test_sequence_model2_erase(pe, at):
    assert_parity(MODEL2, {"X": X, "Y": Y, "Z": Z, "pe": pos(pe), "pos_at": pos(at)})


def test_sequence_model3_erase_insert():
    assert_parity(MODEL3, {"X": X, "Y": Y, "Z": Z, "pe": pos(1), "pi": pos(-1), "pos_at": pos(2)})


@pytest.mark.parametrize("axis,new_axis", [(1, None), (0, 0), (-1, 1), (0, 1), (2, 1)])
def test_concat_from_sequence(axis, new_axis):
    assert_parity(concat_model(axis, new_axis), {"X": X, "Y": Y, "Z": Z})


@pytest.mark.parametrize("split,attrs,at", [
    (None, {"axis": -1}, 5), (None, {"axis": 0, "keepdims": 0}, -1), (np.array(4, np.int64), {"axis": 1}, 1),
    (np.array([1, 3], np.int64), {"axis": 0}, 1), (np.array([2, 0, 4], np.int64), {"axis": 1}, 1)])
def test_split_to_sequence(split, attrs, at):
    feeds = {"X": X46, "at": pos(at)}
    if split is not None:
        feeds["split"] = split
    assert_parity(split_model(split, **attrs), feeds)


@pytest.mark.parametrize("model,feeds", [
    (MODEL1, {"pos": pos(3), "pos_at": pos(0)}),    # insert position past [-2, 2]
    (MODEL1, {"pos": pos(0), "pos_at": pos(-4)}),   # SequenceAt position past [-3, 2]
    (MODEL2, {"pe": pos(3), "pos_at": pos(0)}),     # erase position past [-3, 2]
])
def test_out_of_range_positions_fail_like_ort(model, feeds):
    feeds = {"X": X, "Y": Y, "Z": Z, **feeds}
    with pytest.raises(Exception, match="(?i)invalid sequence index"):
        run_cpu(model, feeds)
    sess = mlx_ep.session(model, strict=True)
    good = {**feeds, **{k: pos(0) for k in feeds if k not in "XYZ"}}
    for _ in range(3):  # eager, traced, replayed: the position is data, so the signature runs eagerly
        with pytest.raises(Exception, match=r"node '.*' \(Sequence(At|Insert|Erase)\): invalid sequence index \(-?\d\)"):
            sess.run(None, feeds)
        want = run_cpu(model, good)
        np.testing.assert_array_equal(sess.run(None, good)[0], want[0])


def test_split_sizes_that_do_not_sum_fail_clearly():
    model = split_model(np.array([1, 2], np.int64), axis=0)
    feeds = {"X": X46, "split": np.array([1, 2], np.int64), "at": pos(0)}
    with pytest.raises(Exception, match=r"split_size_sum \(3\) != split_dim_size \(4\)"):
        run_cpu(model, feeds)
    with pytest.raises(Exception, match=r"\(SplitToSequence\): split sizes sum to 3, not the dimension 4"):
        mlx_ep.session(model, strict=True).run(None, feeds)


def test_loop_body_reads_an_outer_sequence():
    # SequenceMap's expansion without sequences at the boundary: a Loop over SequenceLength(s)
    # whose body reads SequenceAt(s, i) of the enclosing graph's sequence
    vi = helper.make_tensor_value_info
    body = helper.make_graph(
        [node("SequenceAt", ["s", "i"], ["e"]), node("Add", ["acc", "e"], ["acc_out"]),
         node("Identity", ["cond"], ["cond_out"])],
        "body", [vi("i", I64, []), vi("cond", TP.BOOL, []), vi("acc", F, [2, 3])],
        [vi("cond_out", TP.BOOL, []), vi("acc_out", F, [2, 3])])
    nodes = [node("SequenceConstruct", ["X", "Y", "Z"], ["s"]), node("SequenceLength", ["s"], ["n"]),
             node("Loop", ["n", "", "acc0"], ["total"], body=body)]
    model = make_model(nodes, xyz(), [("total", F, None)], {"acc0": np.zeros((2, 3), np.float32)}.items(), opset=13)
    assert_parity(model, {"X": X, "Y": Y, "Z": Z})


def test_sequence_at_a_graph_boundary_is_declined_with_the_reason(tmp_path):
    # a sequence output of the graph: its producer stays on ORT, the tensor part is claimed
    model = make_model([node("Relu", ["X"], ["r"]), node("SequenceConstruct", ["r", "Y"], ["s"])],
                       [("X", F, [2, 3]), ("Y", F, [2, 3])], [], opset=12)
    import onnx
    m = onnx.load_from_string(model)
    m.graph.output.append(helper.make_tensor_sequence_value_info("s", F, None))
    model = m.SerializeToString()
    text = claim_report(model, tmp_path)
    assert "sequence 's' would cross the cluster's boundary (a graph output)" in text
    assert "ORT's plugin-EP interface cannot hand a sequence" in text
    out = mlx_ep.session(model, strict=False).run(None, {"X": X, "Y": Y})[0]
    np.testing.assert_array_equal(out[0], np.maximum(X, 0))


def test_sequence_made_on_ort_is_not_read_in_a_cluster(tmp_path):
    # the sequence's producer is declined (a graph input feeds it a string... here: an op the EP
    # lacks stands in, SequenceMap), so its consumer is declined too and nothing crosses
    vi = helper.make_tensor_value_info
    body = helper.make_graph([node("Relu", ["e"], ["r"])], "b", [vi("e", F, None)], [vi("r", F, None)])
    nodes = [node("SequenceConstruct", ["X", "Y"], ["s"]), node("SequenceMap", ["s"], ["m"], body=body),
             node("ConcatFromSequence", ["m"], ["out"], axis=0)]
    model = make_model(nodes, [("X", F, [2, 3]), ("Y", F, [2, 3])], [("out", F, None)], opset=17)
    text = claim_report(model, tmp_path)
    assert "sequence 'm' would cross the cluster's boundary (made on ORT)" in text
    assert "sequence 's' would cross the cluster's boundary" in text
    got = mlx_ep.session(model, strict=False).run(None, {"X": X, "Y": Y})[0]
    np.testing.assert_array_equal(got, run_cpu(model, {"X": X, "Y": Y})[0])


def test_optional_get_element_of_a_tensor_and_of_a_sequence():
    nodes = [node("OptionalGetElement", ["X"], ["x"]), node("SequenceConstruct", ["x", "Y"], ["s"]),
             node("OptionalGetElement", ["s"], ["s2"]), node("ConcatFromSequence", ["s2"], ["out"], axis=0)]
    assert_parity(make_model(nodes, [("X", F, [2, 3]), ("Y", F, [2, 3])], [("out", F, None)], opset=18), {"X": X, "Y": Y})
