"""The BLAS under MLX's CPU products (src/mlx/cpu_blas.c): the EP library defines MLX's three CBLAS
calls and forwards them to OpenBLAS (scipy-openblas32, installed beside MLX's backend wheel), to a
library named by ORT_EP_MLX_BLAS, or to MLX's own reference BLAS. The choice is made once per
process, so every case runs in a fresh interpreter. Each checks what the EP reports it chose
(OrtEpDevice metadata "mlx_cpu_blas") and that products on that BLAS match ORT's CPU EP, strict."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from parity import child_pythonpath


pytestmark = pytest.mark.skipif(sys.platform == "darwin", reason="MLX links Accelerate on macOS")

# Runs in a fresh interpreter: reports the EP's choice, then the largest relative error against ORT's
# CPU EP of a float32 MatMul, a Gemm, a Conv (GEMMs inside MLX), a float64 MatMul (dgemm) and a
# MatMulNBits over 64 rows (dequantized and multiplied on the CPU), each Run three times (eager,
# trace, replay) in strict mode.
PROBE = r"""
import json, sys
import numpy as np
IMPORT_MLX_FIRST
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
import onnxruntime_ep_mlx as mlx_ep
from parity import make_model, run_cpu, run_mlx_each

mlx_ep.register_execution_provider_library()
blas = next(d.ep_metadata["mlx_cpu_blas"] for d in ort.get_ep_devices() if d.ep_name == mlx_ep.ep_name())
assert mlx_ep.cpu_blas() == blas
rng = np.random.default_rng(0)

def worst(model, feeds):
    want = run_cpu(model, feeds)
    err = 0.0
    for got in run_mlx_each(model, feeds, options={"device": "cpu"}):  # MLX's CPU products, on any machine
        for g, w in zip(got, want):
            g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
            err = max(err, float(np.max(np.abs(g - w)) / max(1e-30, float(np.max(np.abs(w))))))
    return err

F, D = TensorProto.FLOAT, TensorProto.DOUBLE
errors = {}
a = rng.standard_normal((96, 200)).astype(np.float32)
b = rng.standard_normal((200, 150)).astype(np.float32)
errors["matmul_f32"] = worst(make_model([helper.make_node("MatMul", ["a", "b"], ["y"])],
                                        [("a", F, [96, 200]), ("b", F, [200, 150])], [("y", F, None)]),
                             {"a": a, "b": b})
c = rng.standard_normal((150,)).astype(np.float32)
errors["gemm_f32"] = worst(make_model([helper.make_node("Gemm", ["a", "b", "c"], ["y"], transB=1, alpha=0.5)],
                                      [("a", F, [96, 200]), ("b", F, [150, 200]), ("c", F, [150])],
                                      [("y", F, None)]),
                           {"a": a, "b": rng.standard_normal((150, 200)).astype(np.float32), "c": c})
x = rng.standard_normal((2, 8, 20, 20)).astype(np.float32)
w = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
errors["conv_f32"] = worst(make_model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
                                      [("x", F, [2, 8, 20, 20]), ("w", F, [16, 8, 3, 3])], [("y", F, None)]),
                           {"x": x, "w": w})
errors["matmul_f64"] = worst(make_model([helper.make_node("MatMul", ["a", "b"], ["y"])],
                                        [("a", D, [96, 200]), ("b", D, [200, 150])], [("y", D, None)]),
                             {"a": a.astype(np.float64), "b": b.astype(np.float64)})
K, N, BLOCK = 256, 96, 32
packed = rng.integers(0, 256, (N, K // BLOCK, BLOCK // 2), dtype=np.uint8)
scales = (rng.random((N * (K // BLOCK),)) * 0.1 + 0.01).astype(np.float32)
node = helper.make_node("MatMulNBits", ["x", "w", "s"], ["y"], domain="com.microsoft", K=K, N=N, bits=4,
                        block_size=BLOCK)
model = make_model([node], [("x", F, [64, K])], [("y", F, None)],
                   [("w", packed), ("s", scales)], domains=[("com.microsoft", 1)])
errors["matmulnbits_64_rows"] = worst(model, {"x": rng.standard_normal((64, K)).astype(np.float32)})
print(json.dumps({"blas": blas, "errors": errors}))
"""


def probe(env_blas: str | None = None, import_mlx_first: bool = False) -> dict:
    env = dict(os.environ)
    env.pop("ORT_EP_MLX_BLAS", None)
    if env_blas is not None:
        env["ORT_EP_MLX_BLAS"] = env_blas
    env["PYTHONPATH"] = child_pythonpath()
    code = PROBE.replace("IMPORT_MLX_FIRST", "import mlx.core" if import_mlx_first else "")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def assert_exact(errors: dict):
    """float32 products against ORT's CPU EP (MLAS): only the order of the additions differs."""
    for name, err in errors.items():
        assert err < (1e-12 if name.endswith("f64") else 2e-5), (name, err)


def openblas_installed() -> bool:
    try:
        import scipy_openblas32  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.skipif(not openblas_installed(), reason="scipy-openblas32 is not installed (requirements.txt has it)")
def test_default_is_openblas_beside_mlx():
    r = probe()
    assert r["blas"].startswith("OpenBLAS"), r["blas"]
    assert "scipy_openblas32" in r["blas"]
    assert_exact(r["errors"])


def test_off_is_mlx_own():
    r = probe("off")
    assert r["blas"].startswith("MLX's own") and "ORT_EP_MLX_BLAS=off" in r["blas"], r["blas"]
    assert_exact(r["errors"])


@pytest.mark.skipif(not openblas_installed(), reason="scipy-openblas32 is not installed (requirements.txt has it)")
def test_named_library():
    import scipy_openblas32
    path = os.path.join(scipy_openblas32.get_lib_dir(), "libscipy_openblas.so")
    r = probe(path)
    assert r["blas"].startswith("OpenBLAS") and r["blas"].endswith(path), r["blas"]
    assert_exact(r["errors"])


@pytest.mark.parametrize("case", ["missing", "no_cblas", "ep_itself"])
def test_unusable_library_falls_back_to_mlx_own(case, tmp_path):
    """A library that cannot serve the products is not used, and the report says why."""
    if case == "missing":
        path, why = str(tmp_path / "absent.so"), "could not load"
    elif case == "no_cblas":
        import onnxruntime
        capi = os.path.join(os.path.dirname(onnxruntime.__file__), "capi")
        path = next(os.path.join(capi, f) for f in os.listdir(capi) if f.startswith("libonnxruntime.so"))
        why = "lacks cblas_sgemm"
    else:
        import onnxruntime_ep_mlx
        path, why = onnxruntime_ep_mlx.library_path(), "resolves to this EP's own definitions"
    r = probe(path)
    assert r["blas"].startswith("MLX's own") and why in r["blas"], r["blas"]
    assert_exact(r["errors"])


def test_mlx_loaded_first_is_reported():
    """libmlx bound before the EP's library was loaded keeps its own BLAS: reported, still exact."""
    r = probe(import_mlx_first=True)
    assert r["blas"].startswith("MLX's own") and "loaded before" in r["blas"], r["blas"]
    assert_exact(r["errors"])
