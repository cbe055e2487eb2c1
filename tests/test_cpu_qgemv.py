"""MatMulNBits on the CPU through the EP's own kernels (src/mlx/bridge_cpu_qgemv.cpp: one row by an
AVX2 GEMV over a few threads, many rows by tiles of dequantized weights and the BLAS) against ORT's
CPU EP, strict, every Run of the
eager/trace/replay triple; tolerances are test_ops_contrib_quant's (float32: rtol 1e-5, atol 2e-6 of
the largest output). That the kernel, not MLX's quantized matmul, computed them is read from the
op histogram in a fresh process."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

from parity import child_pythonpath, cpu_has, histogram_probe, run_cpu, run_mlx_each
from test_ops_contrib_quant import compare as compare_any_device, nbits_model

# The kernels serve CPU scopes: on a machine with MLX's GPU the sessions ask for the CPU device.
CPU = {"device": "cpu"}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def compare(model, feeds):
    """test_ops_contrib_quant's comparison (every Run of the triple, its tolerances) on the CPU device."""
    return compare_any_device(model, feeds, options=CPU)


needs_kernel = pytest.mark.skipif(not cpu_has("avx2", "fma"), reason="the kernel needs x86-64 with AVX2 and FMA")

# (K, N, block): one group and many; N under 256 (one thread) and over (columns shared out); K not a
# multiple of the block (padded to it at Compile); for many rows, N over one dequantized tile (about
# 2 MiB of weights, at least 256 columns) with a partial last tile
SHAPES = [(32, 8, 32), (64, 200, 32), (512, 1408, 32), (896, 300, 64), (1024, 260, 128), (100, 270, 32),
          (4864, 600, 32), (512, 2500, 32)]


@pytest.mark.parametrize("rows", [1, 3, 40])
@pytest.mark.parametrize("zp", [None, "u8", "float"])
@pytest.mark.parametrize("k,n,block", SHAPES)
def test_rows(k, n, block, zp, rows):
    model, feeds = nbits_model(k, n, 4, block, zp=zp, a_shape=(rows,), seed=k + n)
    compare(model, feeds)


@pytest.mark.parametrize("a_shape", [(), (1, 1), (1, 1, 1), (2, 3), (2, 1, 5)])
@pytest.mark.parametrize("bias", [False, True])
def test_ranks_and_bias(a_shape, bias):
    model, feeds = nbits_model(256, 300, 4, 32, zp="u8", bias=bias, a_shape=a_shape)
    compare(model, feeds)


@pytest.mark.parametrize("where", ["inf", "-inf", "nan"])
def test_one_row_non_finite(where):
    """An infinity meets each weight as ORT multiplies it (a weight of 0 gives NaN, others infinity),
    not through the kernel's reordered sums; a NaN spreads the same. (Finite values whose sum
    overflows are summed as written too, but where a sum of huge terms overflows depends on the
    order of the additions, which no two BLAS-like kernels share: not compared.)"""
    model, feeds = nbits_model(256, 300, 4, 32, zp="u8", a_shape=(1,), seed=3)
    a = feeds["A"]
    a[0, 5] = {"inf": np.inf, "-inf": -np.inf, "nan": np.nan}[where]
    (want,) = compare_non_finite(model, feeds)
    assert not np.isfinite(want).all()


def compare_non_finite(model, feeds):
    want = run_cpu(model, feeds)
    for run, got in enumerate(run_mlx_each(model, feeds, options=CPU)):
        np.testing.assert_array_equal(np.isnan(got[0]), np.isnan(want[0]), err_msg=f"run {run + 1}: NaN")
        np.testing.assert_array_equal(np.isinf(got[0]), np.isinf(want[0]), err_msg=f"run {run + 1}: inf")
        finite = np.isfinite(want[0])
        np.testing.assert_allclose(got[0][finite], want[0][finite], rtol=1e-5, err_msg=f"run {run + 1}")
    return want


@needs_kernel
@pytest.mark.skipif(not cpu_has("avx512f"), reason="the 8-lane GEMV is the only one without AVX-512")
def test_eight_lane_gemv():
    """Where the CPU has AVX-512 the one-row GEMV takes 16 lanes; the 8-lane form (every AVX2 CPU's)
    is checked here with the switch off, in a fresh process (the switch is read once)."""
    env = dict(os.environ, ORT_EP_MLX_CPU_AVX512="0",
               PYTHONPATH=child_pythonpath())
    env.pop("ORT_EP_MLX_DEVICE", None)
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__,
                          "-k", "test_rows or test_ranks_and_bias or test_one_row_non_finite"],
                         env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    ran = re.search(r"(\d+) passed", out.stdout)
    assert ran and int(ran.group(1)) >= 80, out.stdout[-3000:]  # every shape, rank and infinity above


HISTOGRAM_PROBE = r"""
import sys
sys.path.insert(0, sys.argv[1])
from test_cpu_qgemv import compare
from test_ops_contrib_quant import nbits_model
for rows in ((1,), (3,)):
    model, feeds = nbits_model(512, 300, 4, 32, zp="u8", a_shape=rows)
    compare(model, feeds)
"""


@needs_kernel
@pytest.mark.parametrize("switch", ["default", "off"])
def test_kernels_run(switch):
    out, programs = histogram_probe(HISTOGRAM_PROBE, **({"ORT_EP_MLX_CPU_GEMV": "0"} if switch == "off" else {}))
    assert len(programs) == 2, out.stderr[-3000:]
    one_row, three_rows = programs
    # a few rows take the sets task (mlxb_qgemv_sets: one row a GEMV, three rows the tiles and BLAS)
    if switch == "off":
        assert "EpCpuQGemv" not in out.stderr and "QuantizedMatmul" in one_row, one_row
    else:
        assert "EpCpuQGemvSets=1" in one_row and "QuantizedMatmul" not in one_row, one_row
    if switch == "off":
        assert "EpCpuQGemm" not in three_rows and "Matmul=" in three_rows, three_rows  # dequantized, one GEMM
    else:
        assert "EpCpuQGemvSets=1" in three_rows and "Matmul" not in three_rows, three_rows
