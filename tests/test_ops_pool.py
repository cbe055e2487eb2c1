"""Parity tests of the pool family (src/ops/pool.c): MaxPool (with Indices), AveragePool, LpPool,
the Global pools and MaxUnpool (MaxRoiPool is test_ops_detection.py) on the MLX EP in strict mode against ORT's CPU EP."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from parity import NP_TO_ONNX, assert_parity, check_feeds as check, feeds_model, make_model, run_cpu, run_mlx


def rand(shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)




WINDOW_CASES = [
    ((1, 2, 9), {"kernel_shape": [3]}),
    ((2, 3, 10), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
    ((1, 2, 8, 8), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ((2, 3, 9, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 2, 9, 7), {"kernel_shape": [3, 2], "strides": [2, 3], "pads": [1, 0, 2, 1], "ceil_mode": 1}),
    ((1, 2, 7, 6), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1}),
    ((1, 2, 10, 9), {"kernel_shape": [3, 3], "dilations": [2, 2], "strides": [1, 2]}),
    ((1, 2, 10, 9), {"kernel_shape": [2, 3], "dilations": [3, 2], "pads": [1, 1, 1, 2], "ceil_mode": 1, "strides": [2, 2]}),
    ((1, 2, 7, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 8, 7), {"kernel_shape": [4, 2], "strides": [3, 2], "auto_pad": "SAME_LOWER"}),
    ((1, 2, 7, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "VALID"}),
    ((1, 2, 7, 9), {"kernel_shape": [6, 6], "strides": [6, 6], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 5, 6, 7), {"kernel_shape": [2, 3, 2], "strides": [2, 1, 2], "pads": [0, 1, 1, 1, 1, 0]}),
    ((1, 1, 6, 5, 6), {"kernel_shape": [3, 2, 2], "strides": [2, 2, 2], "ceil_mode": 1}),
    # kernels past 16 are reduced over a strided view, shorter ones as slices: both orders
    ((1, 2, 21, 9), {"kernel_shape": [18, 3], "strides": [1, 2], "pads": [1, 0, 2, 1]}),
    ((1, 2, 9, 23), {"kernel_shape": [2, 17], "strides": [2, 3], "dilations": [2, 1], "ceil_mode": 1}),
    ((1, 2, 5, 6), {"kernel_shape": [1, 1], "strides": [2, 1]}),
    ((1, 2, 4, 5), {"kernel_shape": [1, 1]}),  # the identity
]


@pytest.mark.parametrize("shape,attrs", WINDOW_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_maxpool(shape, attrs, dtype):
    check("MaxPool", {"x": rand(shape, dtype)}, attrs)


@pytest.mark.parametrize("shape,attrs", WINDOW_CASES)
@pytest.mark.parametrize("storage_order", [0, 1])
def test_maxpool_indices(shape, attrs, storage_order):
    attrs = {**attrs, "storage_order": storage_order}
    check("MaxPool", {"x": rand(shape)}, attrs, n_out=2, out_dtypes=[TensorProto.FLOAT, TensorProto.INT64])


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.float64])
def test_maxpool_other_dtypes(dtype):
    x = (rand((1, 2, 7, 7)) * 40).astype(dtype)
    check("MaxPool", {"x": x}, {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]})


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pool_of_transposed_input(op):
    """The pool reads a non-contiguous view (a transpose's output) inside one fused graph."""
    x = rand((1, 9, 8, 3))
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2]),
             helper.make_node(op, ["t"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])]
    model = make_model(nodes, [("x", TensorProto.FLOAT, [1, 9, 8, 3])], [("y", TensorProto.FLOAT, None)])
    assert_parity(model, {"x": x})


def test_maxpool_ties_and_inf():
    x = np.zeros((1, 1, 4, 4), np.float32)
    x[0, 0, 2:, 2:] = -np.inf
    check("MaxPool", {"x": x}, {"kernel_shape": [2, 2], "pads": [1, 1, 1, 1]}, n_out=2,
          out_dtypes=[TensorProto.FLOAT, TensorProto.INT64])


@pytest.mark.parametrize("opset", [1, 8, 10, 12])
def test_maxpool_old_opsets(opset):
    attrs = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    check("MaxPool", {"x": rand((1, 2, 7, 7))}, attrs, opset=opset)


@pytest.mark.parametrize("shape,attrs", WINDOW_CASES)
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_averagepool(shape, attrs, count_include_pad):
    check("AveragePool", {"x": rand(shape)}, {**attrs, "count_include_pad": count_include_pad})


@pytest.mark.parametrize("shape,attrs", WINDOW_CASES[2:6])
def test_averagepool_float16(shape, attrs):
    check("AveragePool", {"x": rand(shape, np.float16)}, {**attrs, "count_include_pad": 1})


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
@pytest.mark.parametrize("k,s", [(1, 4), (2, 4), (2, 6)])
def test_averagepool_negative_same_pads(auto_pad, k, s):
    """A stride beyond the kernel makes SAME pads negative: ORT's AveragePool then crops."""
    check("AveragePool", {"x": rand((1, 2, 7, 9))}, {"kernel_shape": [k, k], "strides": [s, s], "auto_pad": auto_pad})


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
def test_maxpool_negative_same_pads_refused(auto_pad):
    """Where SAME pads come out negative, ORT's MaxPool refuses (its AveragePool and LpPool crop):
    so does the EP, with ORT's message, on every Run."""
    model = make_model([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[4, 1],
                                         auto_pad=auto_pad)], [("x", TensorProto.FLOAT, [1, 1, 3, 2])],
                       [("y", TensorProto.FLOAT, None)])
    x = {"x": rand((1, 1, 3, 2))}
    with pytest.raises(Exception, match="padding values must be non-negative"):
        run_cpu(model, x)
    import onnxruntime_ep_mlx as mlx_ep
    sess = mlx_ep.session(model, strict=True)
    for _ in range(3):  # the eager Run, then the signature's trace and replay attempts
        with pytest.raises(Exception, match="padding values must be non-negative"):
            sess.run(None, x)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "NOTSET"])
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_averagepool_long_kernel(auto_pad, count_include_pad):
    """A window of 2^16 taps, most of them padding: the counts per window are counted in closed form
    (a hostile kernel_shape of 2^31 - 1 once cost seconds of host loops before any refusal)."""
    attrs = {"kernel_shape": [2, 1 << 16], "auto_pad": auto_pad, "count_include_pad": count_include_pad}
    if auto_pad == "NOTSET":
        attrs.update(pads=[1, (1 << 16) - 3, 0, 0], strides=[1, 2], dilations=[1, 1])
    check("AveragePool", {"x": rand((1, 2, 3, 4))}, attrs)


@pytest.mark.parametrize("opset", [7, 10, 11])
def test_averagepool_old_opsets(opset):
    attrs = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1}
    check("AveragePool", {"x": rand((1, 2, 7, 7))}, attrs, opset=opset)


@pytest.mark.parametrize("shape,attrs", WINDOW_CASES[:9])
@pytest.mark.parametrize("p", [1, 2, 3])
def test_lppool(shape, attrs, p):
    check("LpPool", {"x": rand(shape)}, {**attrs, "p": p}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", ["GlobalMaxPool", "GlobalAveragePool", "GlobalLpPool"])
@pytest.mark.parametrize("shape", [(2, 3, 7), (1, 4, 5, 6), (1, 2, 3, 4, 5)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_global_pool(op, shape, dtype):
    # ORT has no GlobalLpPool-22 or MaxRoiPool-22 kernel: those run at opset 21.
    check(op, {"x": rand(shape, dtype)}, rtol=1e-4 if dtype == np.float32 else None, opset=21)


@pytest.mark.parametrize("p", [1, 3])
def test_global_lppool_p(p):
    check("GlobalLpPool", {"x": rand((1, 3, 5, 5))}, {"p": p}, rtol=1e-4, opset=21)


# ---- MaxUnpool ----------------------------------------------------------------------------------

def pooled_with_indices(shape, attrs):
    x = rand(shape)
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], **attrs)
    model = make_model([node], [("x", TensorProto.FLOAT, list(shape))],
                       [("y", TensorProto.FLOAT, None), ("i", TensorProto.INT64, None)])
    return run_cpu(model, {"x": x})


@pytest.mark.parametrize("shape,attrs", [
    ((1, 2, 6, 6), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ((2, 2, 7, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 3, 8), {"kernel_shape": [2], "strides": [2]}),
    ((1, 1, 5, 5), {"kernel_shape": [3, 3], "strides": [1, 1]}),  # overlapping: repeated indices
])
@pytest.mark.parametrize("with_shape", [False, True])
def test_maxunpool(shape, attrs, with_shape):
    y, i = pooled_with_indices(shape, attrs)
    feeds = {"x": y, "i": i}
    names = ["x", "i"]
    inits = {}
    if with_shape:
        inits["s"] = np.array(shape, np.int64)
        names.append("s")
    check("MaxUnpool", feeds, attrs, inits=inits, names=names, opset=11)


# ---- edge cases ---------------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "LpPool"])
def test_empty_batch(op):
    n_out = 2 if op == "MaxPool" else 1
    check(op, {"x": np.zeros((0, 2, 5, 5), np.float32)}, {"kernel_shape": [2, 2]}, n_out=n_out,
          out_dtypes=[TensorProto.FLOAT, TensorProto.INT64][:n_out])


# ---- MaxPool's CPU kernel (EpCpuMaxPool, src/mlx/bridge_cpu_maxpool.cpp) -------------------------
# A float32 2-D MaxPool without Indices on a CPU scope is one task: every window's taps inside the
# input, NaN propagated, read channels-last where a convolution hands its output over that way.
# WINDOW_CASES above run it on the CPU (pads, strides, dilations, ceil_mode, auto_pad); these add
# NaN and infinities and the convolution's layout, and check which ran.

def test_maxpool_nan_and_infinities():
    """Infinities as ORT; a NaN propagates to its window (docs/OPERATORS.md: MLX's max; ORT's kernel
    skips it), and every other window is ORT's."""
    x = rand((1, 3, 6, 5), seed=4)
    x[0, 2, 0, 0], x[0, 0, 5, 4] = np.inf, -np.inf
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    check("MaxPool", {"x": x}, attrs)
    x[0, 1, 2, 3] = np.nan  # in the window (1, 2) of channel 1 only
    model, feeds = feeds_model("MaxPool", {"x": x}, attrs=attrs)
    (want,) = run_cpu(model, feeds)
    (got,) = run_mlx(model, feeds, options={"device": "cpu"})
    assert np.isnan(got[0, 1, 1, 2]) and np.isnan(got).sum() == 1
    want[0, 1, 1, 2] = got[0, 1, 1, 2]
    np.testing.assert_allclose(got, want, rtol=0, atol=0)


def test_maxpool_nan_channels_last():
    """The channels-last path (a convolution's output): a NaN at one input position reaches every
    channel there through a pointwise convolution, and every window holding that position gives NaN
    in every channel (37: the vector loop and its tail); the rest as ORT."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((1, 4, 9, 8)).astype(np.float32)
    x[0, 2, 4, 5] = np.nan
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("MaxPool", ["c"], ["y"], kernel_shape=[3, 3], strides=[2, 2])]
    model = make_model(nodes, [("x", TensorProto.FLOAT, [1, 4, 9, 8])], [("y", TensorProto.FLOAT, None)],
                       {"w": rng.standard_normal((37, 4, 1, 1)).astype(np.float32)}.items())
    (want,) = run_cpu(model, {"x": x})
    (got,) = run_mlx(model, {"x": x}, options={"device": "cpu"})
    hit = np.zeros(got.shape, bool)
    hit[0, :, 1:3, 2] = True  # output rows 1 and 2 (input rows 2-4, 4-6), column 2 (input columns 4-6)
    assert np.array_equal(np.isnan(got), hit)
    np.testing.assert_allclose(got[~hit], want[~hit], rtol=1e-5, atol=1e-5)


def conv_maxpool_model(seed=5):
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["c"], ["y"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)]
    model = make_model(nodes, [("x", TensorProto.FLOAT, [2, 5, 13, 11])], [("y", TensorProto.FLOAT, None)],
                       {"w": (rng.standard_normal((24, 5, 3, 3)) * 0.2).astype(np.float32)}.items())
    return model, {"x": rng.standard_normal((2, 5, 13, 11)).astype(np.float32)}


def test_maxpool_of_convolution():
    """The convolution's output is a channels-last array seen through a transpose: read that way."""
    assert_parity(*conv_maxpool_model(), rtol=1e-5, atol=1e-5, options={"device": "cpu"})


@pytest.mark.parametrize("switch", ["1", "0"])
def test_maxpool_kernel_runs(switch):
    from parity import cpu_model_probe, histogram_probe
    _, programs = histogram_probe(cpu_model_probe("test_ops_pool", "conv_maxpool_model"), ORT_EP_MLX_CPU_POOL=switch)
    assert programs, programs
    for program in programs:
        assert ("EpCpuMaxPool=1" in program) == (switch == "1"), program
        assert ("Maximum" in program) == (switch == "0"), program


HUGE = 2**31 - 1
# Windows that are mostly padding: the EP reduces each over its taps inside the input (as ORT, which
# clips windows to the input) rather than padding the input out to the kernel's length. The first is
# the attribute fuzzer's seed 731429 (8 GB of padding and 2^31 taps a window before, 17 s here).
CLIPPED_CASES = [
    ("LpPool", (1, 1, 2), {"kernel_shape": [HUGE], "strides": [HUGE], "p": 2, "auto_pad": "SAME_LOWER"}),
    ("MaxPool", (1, 2, 4, 3), {"kernel_shape": [3, HUGE], "auto_pad": "SAME_UPPER"}),
    ("MaxPool", (1, 2, 7), {"kernel_shape": [HUGE], "strides": [HUGE], "auto_pad": "SAME_LOWER"}),
    ("MaxPool", (1, 2, 9), {"kernel_shape": [9000], "pads": [4000, 4999], "strides": [700]}),
    ("AveragePool", (1, 2, 4, 10), {"kernel_shape": [2, 5000], "pads": [0, 2500, 1, 2499], "count_include_pad": 1}),
    ("AveragePool", (1, 2, 4, 10), {"kernel_shape": [2, 5000], "pads": [0, 2500, 1, 2499], "count_include_pad": 0,
                                    "strides": [1, 3]}),
    ("LpPool", (1, 2, 9), {"kernel_shape": [6000], "pads": [2900, 3099], "strides": [2], "p": 1}),
    # no window at all (ORT gives an empty axis), and windows whose count takes ceil_mode
    ("MaxPool", (1, 1, 3), {"kernel_shape": [HUGE], "strides": [1 << 30], "pads": [1 << 30, 0]}),
    ("AveragePool", (1, 1, 3), {"kernel_shape": [HUGE], "strides": [(1 << 30) + 7], "pads": [HUGE - 1, (1 << 30) + 5],
                                "ceil_mode": 1}),
]


@pytest.mark.parametrize("op,shape,attrs", CLIPPED_CASES)
def test_pool_windows_mostly_padding(op, shape, attrs):
    """(2-D MaxPool on a CPU scope runs the EP's own CPU kernel, which clips its windows too; on a
    GPU it takes the clipped axes like the others.)"""
    check(op, {"x": rand(shape, seed=3)}, attrs)


_CLIPPED_CHILD = """
import resource, sys
import numpy as np
resource.setrlimit(resource.RLIMIT_DATA, (3 << 30, 3 << 30))
from onnx import TensorProto, helper
import onnxruntime_ep_mlx as mlx_ep
node = helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[2**31 - 1], strides=[2**31 - 1], p=2,
                        auto_pad="SAME_LOWER")
graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
y = mlx_ep.session(model.SerializeToString(), strict=True).run(None, {"x": np.array([[[3.0, 4.0]]], np.float32)})[0]
print(float(y.reshape(-1)[0]))
"""


def test_pool_hostile_kernel_within_memory():
    """The fuzzer's LpPool with a kernel of 2^31 - 1 in a process capped at 3 GiB of data (RLIMIT_DATA:
    the heap and private writable mappings, not the address space a GPU driver reserves without
    memory behind it): answered (sqrt(3^2 + 4^2)), where padding the input out to the kernel took 8 GB."""
    import os
    import subprocess
    import sys
    from parity import child_pythonpath
    # under the sanitizers (make sanitize) the EP's default library: their runtime cannot live in a
    # capped space; else the library the tests use (the GPU machine's is not a clone's build/)
    drop = ("LD_PRELOAD", "ORT_EP_MLX_LIBRARY") if os.environ.get("LD_PRELOAD") else ()
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PYTHONPATH"] = child_pythonpath()
    done = subprocess.run([sys.executable, "-c", _CLIPPED_CHILD], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert abs(float(done.stdout.split()[-1]) - 5.0) < 1e-6, done.stdout


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "LpPool"])
def test_pads_not_smaller_than_kernel_refused(op):
    """ORT's pooling refuses pads that reach the kernel's length (its PoolAttributes); so does the EP,
    naming the axis (it answered before: the attribute fuzzer's seed 730857, once its huge pads no
    longer passed MLX's 32-bit padded extent)."""
    node = helper.make_node(op, ["x"], ["y"], kernel_shape=[2], pads=[3, 0])
    model = make_model([node], [("x", TensorProto.FLOAT, [1, 1, 5])], [("y", TensorProto.FLOAT, None)])
    x = {"x": rand((1, 1, 5))}
    with pytest.raises(Exception, match="Pad should be smaller than kernel"):
        run_cpu(model, x)
    import onnxruntime_ep_mlx as mlx_ep
    sess = mlx_ep.session(model, strict=True)
    with pytest.raises(Exception, match=r"pads \(3, 0\) on spatial axis 0 must be smaller than the kernel \(2\)"):
        sess.run(None, x)
