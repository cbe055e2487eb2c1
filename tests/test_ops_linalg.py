"""Parity tests of the linalg family (src/ops/linalg.c): Det on the MLX EP in strict mode against
ORT's CPU EP and NumPy."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from parity import rng_values, NP_TO_ONNX, assert_parity, feeds_model, run_mlx


RNG = np.random.default_rng(0)




@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4), (2, 1, 5, 5), (1, 1), (0, 2, 2), (2, 0, 0)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_det(shape, dtype):
    x = rng_values(shape, dtype)
    assert_parity(*feeds_model("Det", {"x": x}, opset=11), rtol=1e-4 if dtype == np.float32 else None)


def test_det_singular_and_permuted():
    x = np.array([[[1, 2], [2, 4]], [[0, 1], [1, 0]], [[0, 0, ], [0, 0]]], np.float32)
    assert_parity(*feeds_model("Det", {"x": x}, opset=22))


def test_det_float64_vs_numpy():
    x = rng_values((3, 6, 6), np.float64)
    got = run_mlx(*feeds_model("Det", {"x": x}, opset=22))[0]
    np.testing.assert_allclose(got, np.linalg.det(x), rtol=1e-12)
