"""The runtime's signature cache and compile path: traces happen once per input signature,
data-dependent host reads never bake a stale value into a compiled program, the LRU evicts,
and the run report counts all of it."""
import re

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxruntime_ep_mlx as mlx_ep
from parity import make_model

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def run_report(tmp_path, model, options, feeds_list):
    report = tmp_path / "report.txt"
    sess = mlx_ep.session(model, options={**options, "report": str(report)}, strict=True)
    outs = [sess.run(None, f)[0] for f in feeds_list]
    del sess  # the run report is written when the session releases its clusters
    text = report.read_text()
    stats = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", text.split("run report:")[1])}
    return outs, stats


def shape_chain_model():
    # y = Reshape(Relu(a + b), Shape(a)): a shape-derived host value feeding Reshape.
    nodes = [helper.make_node("Add", ["a", "b"], ["c"]), helper.make_node("Relu", ["c"], ["d"]),
             helper.make_node("Shape", ["a"], ["s"]), helper.make_node("Reshape", ["d", "s"], ["y"])]
    return make_model(nodes, [("a", F, ["N", 3]), ("b", F, [3])], [("y", F, None)])


@pytest.mark.parametrize("compile_mode", ["0", "1"])
def test_signature_cache_and_traces(tmp_path, compile_mode):
    rng = np.random.default_rng(0)
    feeds = [{"a": rng.standard_normal((n, 3)).astype(np.float32), "b": rng.standard_normal(3).astype(np.float32)}
             for n in (2, 5, 2, 2, 5, 2)]
    outs, st = run_report(tmp_path, shape_chain_model(), {"compile": compile_mode}, feeds)
    for f, y in zip(feeds, outs):
        np.testing.assert_allclose(y, np.maximum(f["a"] + f["b"], 0), rtol=1e-6)
    assert st["runs"] == 6 and st["sig_misses"] == 2 and st["sig_hits"] == 4
    assert st["host_reads"] == 0  # Shape's values are known without evaluation
    if compile_mode == "1":
        assert st["traces"] == 2 and st["compiled_runs"] == 4  # one trace per signature
    else:
        assert st["traces"] == 0 and st["eager_runs"] == 6


def test_data_dependent_reshape_is_never_baked(tmp_path):
    # The Reshape target comes from data: a compile trace must not capture it.
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Reshape", ["r", "shape"], ["y"])]
    model = make_model(nodes, [("x", F, [6]), ("shape", I64, [2])], [("y", F, None)])
    x = np.arange(6, dtype=np.float32) - 2
    feeds = [{"x": x, "shape": np.array(s, np.int64)} for s in ([2, 3], [3, 2], [2, 3], [6, 1], [1, 6])]
    outs, st = run_report(tmp_path, model, {"compile": "1"}, feeds)
    for f, y in zip(feeds, outs):
        np.testing.assert_array_equal(y, np.maximum(x, 0).reshape(f["shape"]))
    assert st["compiled_runs"] == 0 and st["eager_runs"] == 5 and st["host_reads"] == 5


def test_lru_evicts(tmp_path):
    feeds = [{"a": np.ones((n, 3), np.float32), "b": np.ones(3, np.float32)} for n in (1, 2, 3, 1)]
    _, st = run_report(tmp_path, shape_chain_model(), {"cache_size": "2"}, feeds)
    assert st["sig_misses"] == 4 and st["evictions"] == 2


@pytest.mark.parametrize("bad", [{"compile": "maybe"}, {"cache_size": "0"}, {"device": "abacus"}])
def test_invalid_options_fail_session_creation(bad):
    with pytest.raises(Exception, match=list(bad)[0]):
        mlx_ep.session(shape_chain_model(), options=bad)


def test_decode_loop_traces(tmp_path):
    """64 greedy decode steps of the generated decoder: the eager default performs no trace at
    all; the run report states the counts (docs/ARCHITECTURE.md has the policy)."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
    from llm import TINY, empty_past, make_llm, next_past, step_feeds
    report = tmp_path / "report.txt"
    sess = mlx_ep.session(make_llm(TINY, weights="int4"), options={"report": str(report)}, strict=True)
    outs = sess.run(None, step_feeds(TINY, np.array([[1, 2, 3, 4]]), empty_past(TINY)))
    for _ in range(64):
        token = outs[0][:, -1:].argmax(-1)
        outs = sess.run(None, step_feeds(TINY, token, next_past(TINY, outs)))
    del sess
    st = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", report.read_text().split("run report:")[1])}
    assert st["runs"] == 65 and st["traces"] == 0 and st["eager_runs"] == 65
