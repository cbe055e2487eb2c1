"""Device memory (src/ep/device_memory.c, src/mlx/bridge_device.cpp): on MLX's CUDA backend the EP
registers MLX's GPU memory with ORT (an allocator and a data transfer), so an IOBinding keeps a
decoder's KV cache on the GPU between Runs. These tests need that memory and are skipped where
MLX has none (its CPU backend, as in CI) or where it is turned off (ORT_EP_MLX_DEVICE_MEMORY=0);
scripts/gpu_check.sh runs them on the GPU machine.
Every output is compared with ORT's CPU EP, and the run report proves where the data lived."""
import gc
import os
import re
import sys

import numpy as np
import onnxruntime as ort
import pytest

import onnxruntime_ep_mlx as mlx_ep
from parity import device_memory_info, make_model

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
from llm import TINY, empty_past, make_llm, next_past, step_feeds  # noqa: E402

DEVICE = "cuda"  # Python's alias for OrtDevice(GPU, NVIDIA, 0): the memory the EP registers


pytestmark = pytest.mark.skipif(device_memory_info() is None,
                                reason="no device memory: MLX's CPU backend, or ORT_EP_MLX_DEVICE_MEMORY=0")


def report_stats(text):
    stats = {}
    for line in text.splitlines():
        if "run report:" in line:
            for k, v in re.findall(r"(\w+)=(\d+)", line.split("run report:")[1]):
                stats[k] = stats.get(k, 0) + int(v)
    return stats


def copies_in_program():
    """Whether the EP copies outputs into device buffers within the program's eval
    (ORT_EP_MLX_COPY_IN_PROGRAM: on for the host stand-in unless "0", opt-in with "1" on CUDA)."""
    v = os.environ.get("ORT_EP_MLX_COPY_IN_PROGRAM")
    if os.environ.get("ORT_EP_MLX_DEVICE_MEMORY") == "host":
        return v not in ("0", "off")
    return v == "1"


def to_host(value, dtype=np.float32):
    """A device OrtValue's contents, copied through the EP's data transfer into a NumPy array that
    the returned value owns (a view of a temporary OrtValue's buffer would dangle once it is freed)."""
    host = np.zeros(value.shape(), dtype=dtype)
    ort.copy_tensors([value], [ort.OrtValue.ortvalue_from_numpy(host)])
    return host


def test_copy_tensors_round_trip():
    """ORT's copy_tensors goes through the EP's data transfer: host -> device -> device -> host."""
    mi = device_memory_info()
    x = np.arange(4096, dtype=np.float32).reshape(64, 64)
    host_in = ort.OrtValue.ortvalue_from_numpy(x)
    dev_a = ort.OrtValue.ortvalue_from_shape_and_type(x.shape, np.float32, memory_info=mi)
    dev_b = ort.OrtValue.ortvalue_from_shape_and_type(x.shape, np.float32, memory_info=mi)
    host_out = ort.OrtValue.ortvalue_from_numpy(np.zeros_like(x))
    ort.copy_tensors([host_in], [dev_a])
    ort.copy_tensors([dev_a], [dev_b])
    ort.copy_tensors([dev_b], [host_out])
    np.testing.assert_array_equal(host_out.numpy(), x)


def test_plain_run_uses_device_memory(tmp_path):
    """Plain run() with NumPy feeds: ORT copies inputs into the EP's memory and results out."""
    from onnx import TensorProto, helper
    model = make_model([helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Relu", ["s"], ["y"])],
                       [("a", TensorProto.FLOAT, [3, 5]), ("b", TensorProto.FLOAT, [3, 5])],
                       [("y", TensorProto.FLOAT, [3, 5])])
    rng = np.random.default_rng(0)
    feeds = {"a": rng.standard_normal((3, 5)).astype(np.float32), "b": rng.standard_normal((3, 5)).astype(np.float32)}
    report = tmp_path / "r.txt"
    sess = mlx_ep.session(model, options={"report": str(report)}, strict=True)
    for _ in range(3):
        np.testing.assert_allclose(sess.run(None, feeds)[0], np.maximum(feeds["a"] + feeds["b"], 0), rtol=1e-6)
    del sess
    st = report_stats(report.read_text())
    assert st["device_inputs"] == 6 and st["host_inputs"] == 0, st
    assert st["device_outputs"] == 3 and st["host_outputs"] == 0, st
    assert st["program_copies"] == (3 if copies_in_program() else 0), st


def test_iobinding_decode_keeps_kv_on_device(tmp_path):
    """A greedy decode loop whose present.* are bound to the device and fed back as the next
    past: every step's logits match ORT's CPU EP, and the KV cache never crosses host memory."""
    model = make_llm(TINY, weights="int4", block_size=32)
    cpu = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    report = tmp_path / "r.txt"
    sess = mlx_ep.session(model, options={"report": str(report)}, strict=True)
    names = [o.name for o in sess.get_outputs()]
    tokens = np.array([[3, 7, 11, 19, 23]], np.int64)
    feeds = step_feeds(TINY, tokens, empty_past(TINY))
    ref_feeds = dict(feeds)
    past_values = None
    steps = 12
    for step in range(steps):
        ref = cpu.run(None, ref_feeds)
        io = sess.io_binding()
        io.bind_cpu_input("input_ids", ref_feeds["input_ids"])
        io.bind_cpu_input("attention_mask", ref_feeds["attention_mask"])
        for k, v in ref_feeds.items():
            if k.startswith("past_key_values"):
                if past_values is None:
                    io.bind_cpu_input(k, v)
                else:
                    io.bind_ortvalue_input(k, past_values[k])
        io.bind_output("logits", "cpu")
        for n in names[1:]:
            io.bind_output(n, DEVICE)
        sess.run_with_iobinding(io)
        outs = io.get_outputs()
        np.testing.assert_allclose(outs[0].numpy(), ref[0], rtol=2e-3, atol=2e-3, err_msg=f"step {step}")
        for o in outs[1:]:
            assert o.device_name().lower() != "cpu"
        past_names = [n.replace("present", "past_key_values") for n in names[1:]]
        past_values = dict(zip(past_names, outs[1:]))
        for i, (o, r) in enumerate(zip(outs[1:], ref[1:])):
            np.testing.assert_allclose(to_host(o), r, rtol=2e-3, atol=2e-3, err_msg=f"step {step}, {names[i + 1]}")
        token = ref[0][:, -1].argmax(-1).reshape(1, 1)
        mask = np.ones((1, ref_feeds["attention_mask"].shape[1] + 1), np.int64)
        ref_feeds = step_feeds(TINY, token, next_past(TINY, ref), mask)
    # the run report is written when the session is released; output OrtValues keep it alive
    del io, outs, past_values, sess, o, r
    gc.collect()
    st = report_stats(report.read_text())
    n_kv = 2 * TINY.layers
    # first step: the empty past comes from the host; later steps bind the previous present
    assert st["device_inputs"] >= (steps - 1) * n_kv, st
    # every output is written in device memory: ORT copies the logits to the host binding itself
    assert st["device_outputs"] == steps * (n_kv + 1) and st["host_outputs"] == 0, st
    # ... by the program's own eval where that path is on, else copied after it
    assert st["program_copies"] == (steps * (n_kv + 1) if copies_in_program() else 0), st
    # the device pasts were padded to their decode bucket (mlxb_pad_axis, one batch a Run), and the
    # logits above match ORT with them
    assert st["padded_runs"] >= steps - 2, st


def test_shared_kv_buffer_written_in_place(tmp_path):
    """onnxruntime-genai's past_present_share_buffer: one device buffer of max_len rows per KV
    tensor, bound as both the past input and the present output of every step. The logits and the
    valid cache rows match ORT's CPU EP fed the same buffers functionally. On MLX's CUDA backend
    the compiled one-token steps write the new rows into the buffer (inplace_outputs) and hand no
    present back; with host memory standing in for the device (CI) every present is copied."""
    model = make_llm(TINY, weights="int4", block_size=32)
    cpu = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    report = tmp_path / "r.txt"
    sess = mlx_ep.session(model, options={"report": str(report)}, strict=True)
    names = [o.name for o in sess.get_outputs()]
    past_names = [n.replace("present", "past_key_values") for n in names[1:]]
    shape = (1, TINY.kv_heads, 32, TINY.head_dim)
    mi = device_memory_info()
    bufs = {k: ort.OrtValue.ortvalue_from_shape_and_type(shape, np.float32, memory_info=mi) for k in past_names}
    ort.copy_tensors([ort.OrtValue.ortvalue_from_numpy(np.zeros(shape, np.float32)) for _ in past_names],
                     list(bufs.values()))
    ref_past = {k: np.zeros(shape, np.float32) for k in past_names}
    ids = np.array([[3, 7, 11, 19, 23]], np.int64)
    steps = 12
    for step in range(steps):
        mask = np.ones((1, ids.shape[1] if step == 0 else total + 1), np.int64)
        total = mask.shape[1]
        ref = cpu.run(None, {"input_ids": ids, "attention_mask": mask, **ref_past})
        io = sess.io_binding()
        io.bind_cpu_input("input_ids", ids)
        io.bind_cpu_input("attention_mask", mask)
        io.bind_output("logits", "cpu")  # first: get_outputs() follows the binding order
        for n, k in zip(names[1:], past_names):
            io.bind_ortvalue_input(k, bufs[k])
            io.bind_ortvalue_output(n, bufs[k])
        sess.run_with_iobinding(io)
        logits = io.get_outputs()[0].numpy()
        np.testing.assert_allclose(logits, ref[0], rtol=2e-3, atol=2e-3, err_msg=f"step {step}")
        for k, r in zip(past_names, ref[1:]):
            np.testing.assert_allclose(to_host(bufs[k])[:, :, :total], r[:, :, :total], rtol=2e-3, atol=2e-3,
                                       err_msg=f"step {step}, {k}")
        ref_past = dict(zip(past_names, ref[1:]))
        ids = ref[0][:, -1].argmax(-1).reshape(1, 1)
    del io, sess
    gc.collect()
    st = report_stats(report.read_text())
    n_kv = 2 * TINY.layers
    assert st["device_inputs"] >= steps * n_kv and st["host_outputs"] == 0, st
    if os.environ.get("ORT_EP_MLX_DEVICE_MEMORY") == "host":
        assert st["inplace_outputs"] == 0, st  # no in-place kernel on MLX's CPU backend
    else:
        # one-token steps after each signature's first (eager) Run: at least half of the 11
        assert st["inplace_outputs"] % n_kv == 0 and st["inplace_outputs"] >= 6 * n_kv, st


def test_output_shapes_following_fed_bounds():
    """A Slice whose bounds are fed at Run: one signature, output shapes that follow the data. Such
    outputs are never asked of ORT before the Run (the first Run's [4, 3] once was, on the second
    Run, for an input of that shape in device memory: "output 0 changed dtype or shape within its
    signature"; the fuzzer's data pool, seed 200119)."""
    from onnx import TensorProto, helper
    from parity import run_cpu
    model = make_model([helper.make_node("Slice", ["x", "starts", "ends"], ["y"])],
                       [("x", TensorProto.FLOAT, [4, 3]), ("starts", TensorProto.INT64, [1]),
                        ("ends", TensorProto.INT64, [1])], [("y", TensorProto.FLOAT, None)])
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    sess = mlx_ep.session(model, strict=True)
    for lo, hi in [(0, 4), (1, 3), (0, 4), (2, 4), (3, 1)]:
        feeds = {"x": x, "starts": np.array([lo], np.int64), "ends": np.array([hi], np.int64)}
        np.testing.assert_array_equal(sess.run(None, feeds)[0], run_cpu(model, feeds)[0])


@pytest.mark.parametrize("t", [30, 130])
def test_lowering_pads_a_device_input(t):
    """LinearAttention's chunked form pads its inputs, fed in device memory, to whole chunks while it
    is lowered. The pad is the lowering's own operation: a pad queued for the Run's input stage
    (decode buckets) was read unfilled there (every output wrong on the GPU)."""
    from parity import assert_parity
    from test_ops_linear_attention import la_case
    model, f = la_case(1, t, 4, 2, 8, 8, "gated_delta", "head", "head", True)
    assert_parity(model, f, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(os.environ.get("ORT_EP_MLX_DEVICE_MEMORY") == "host",
                    reason="kernel chains are made of the EP's CUDA kernels: MLX's CUDA backend only")
def test_kernel_chains_change_no_result(tmp_path):
    """A decode loop on MLX's CUDA backend with our kernels' runs as chains launched as CUDA graphs
    (the default), as chains launched kernel by kernel, and as one operation per kernel (each a
    process of its own: the switches are read once): the chains engage (ORT_EP_MLX_LOG_CHAINS), and
    every step's logits agree with the unchained ones and with ORT's CPU EP."""
    from chain_runs import decode_in_child, greedy_reference
    tokens, ref_logits = greedy_reference(tmp_path)
    runs = {}
    for name, chains, graphs in (("graphs", "1", "1"), ("kernels", "1", "0"), ("none", "0", "0")):
        runs[name], stderr = decode_in_child(tokens, tmp_path / f"{name}.npy",
                                             {"ORT_EP_MLX_KERNEL_CHAINS": chains, "ORT_EP_MLX_CHAIN_GRAPHS": graphs,
                                              "ORT_EP_MLX_LOG_CHAINS": "1"})
        chained = [int(m) for m in re.findall(r"kernel chains: (\d+) kernels in \d+ chains", stderr)]
        assert (max(chained, default=0) >= 2) == (chains == "1"), stderr[-2000:]
    np.testing.assert_allclose(runs["graphs"], runs["none"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(runs["kernels"], runs["none"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(runs["graphs"], ref_logits, rtol=2e-3, atol=2e-3)
