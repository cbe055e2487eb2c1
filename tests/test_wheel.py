"""The wheel, as a new user gets it: pyproject.toml builds a wheel, a fresh virtualenv installs it
with its [cpu] extra, and, with no clone and no PYTHONPATH, the reference package's README snippet
runs a model with the EP in strict mode, version() reports the library's version, the console
script prints the claim report.

To keep CI at one compile, the wheel packages the library `make` built (CMake option
EP_MLX_PREBUILT_LIBRARY: install it, with its RUNPATH set to $ORIGIN/../mlx/lib, as a full build
does); `pip wheel .` compiling from source is the same CMakeLists.txt (README, "Install").
EP_MLX_WHEEL_FROM_SOURCE=1 makes this test compile it that way instead (build isolation, MLX from
the wheelhouse; about 1.5 minutes more on 2 cores).
Dependencies come from build/wheelhouse, downloaded from PyPI with requirements.txt's pins on
first use and then installed with --no-index."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LIB = ROOT / "build" / "libonnxruntime_ep_mlx.so"
WHEELHOUSE = ROOT / "build" / "wheelhouse"
VERSION = (ROOT / "VERSION").read_text().strip()


def pinned(*names: str) -> list[str]:
    """requirements.txt's pins of the named packages."""
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line)
        if m:
            pins[m.group(1).lower()] = line.strip()
    return [pins[n] for n in names]


def sh(*cmd, **kw) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ORT_EP_MLX_LIBRARY", "PIP_FIND_LINKS")}
    out = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env, **kw)
    assert out.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


def venv(path: Path) -> Path:
    sh(sys.executable, "-m", "venv", path)
    return path / "bin" / "python"


def pip_install(python: Path, *reqs: str) -> None:
    """Installs from the wheelhouse, downloading what it lacks from PyPI first."""
    args = ["-m", "pip", "install", "-q", "--disable-pip-version-check", "--find-links", WHEELHOUSE]
    try:
        sh(python, *args, "--no-index", *reqs)
    except AssertionError:
        sh(python, "-m", "pip", "download", "-q", "--disable-pip-version-check", "-d", WHEELHOUSE,
           "--find-links", WHEELHOUSE, *reqs)
        sh(python, *args, "--no-index", *reqs)


SNIPPET = r'''
import json, sys
import numpy as np
import onnxruntime as ort
import onnxruntime_ep_mlx

# The reference package's README snippet, unchanged (plus strict mode: no CPU fallback).
onnxruntime_ep_mlx.register_execution_provider_library()
so = ort.SessionOptions()
so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
session = ort.InferenceSession(sys.argv[1], sess_options=so, providers=["MLXExecutionProvider"])
a = np.arange(-3, 3, dtype=np.float32).reshape(2, 3)
b = np.full((2, 3), 0.5, np.float32)
outputs = session.run(None, {"a": a, "b": b})
assert np.array_equal(outputs[0], np.maximum(a + b, 0)), outputs
mixed = ort.InferenceSession(sys.argv[1], providers=["MLXExecutionProvider", "CPUExecutionProvider"])
print(json.dumps({"providers": session.get_providers(), "mixed": mixed.get_providers(),
                  "library": onnxruntime_ep_mlx.library_path(), "module": onnxruntime_ep_mlx.__file__,
                  "version": onnxruntime_ep_mlx.version(), "package_version": onnxruntime_ep_mlx.__version__,
                  "name": onnxruntime_ep_mlx.EP_NAME, "vendor": onnxruntime_ep_mlx.vendor(),
                  "blas": [d.ep_metadata["mlx_cpu_blas"] for d in ort.get_ep_devices()
                           if d.ep_name == onnxruntime_ep_mlx.EP_NAME]}))
'''


@pytest.mark.skipif(not LIB.exists(), reason="build/libonnxruntime_ep_mlx.so not built")
def test_wheel_installs_and_runs(tmp_path):
    import json
    # 1. Build the wheel (the packaging of `pip wheel .`, around the library make built).
    build_py = venv(tmp_path / "buildenv")
    wheel = [build_py, "-m", "pip", "wheel", "-q", "--disable-pip-version-check", "--no-deps",
             "-w", tmp_path / "dist", ROOT, f"-Cbuild-dir={tmp_path / 'skbuild'}"]
    if os.environ.get("EP_MLX_WHEEL_FROM_SOURCE") == "1":
        pip_install(build_py, "scikit-build-core", *pinned("mlx", "mlx-cpu"))  # fills the wheelhouse
        sh(*wheel, "--find-links", WHEELHOUSE)
    else:
        pip_install(build_py, "scikit-build-core")
        sh(*wheel, "--no-build-isolation", f"-Ccmake.define.EP_MLX_PREBUILT_LIBRARY={LIB}")
    wheels = list((tmp_path / "dist").glob("onnxruntime_ep_mlx-*.whl"))
    assert len(wheels) == 1, wheels
    assert wheels[0].name.startswith(f"onnxruntime_ep_mlx-{VERSION}-py3-none-"), wheels[0].name
    names = set(zipfile.ZipFile(wheels[0]).namelist())
    for member in ("__init__.py", "__main__.py", "_version.py", "libonnxruntime_ep_mlx.so"):
        assert f"onnxruntime_ep_mlx/{member}" in names, sorted(names)

    # 2. A fresh virtualenv: the wheel with its [cpu] extra, dependencies from the wheelhouse.
    py = venv(tmp_path / "env")
    pip_install(py, *pinned("mlx", "mlx-cpu", "scipy-openblas32", "onnxruntime", "numpy"))
    sh(py, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-index", "--find-links",
       WHEELHOUSE, f"{wheels[0]}[cpu]")

    # 3. Outside the clone: run a model in strict mode through the reference API.
    work = tmp_path / "work"
    work.mkdir()
    model = shutil.copy(ROOT / "tests" / "data" / "add_relu.onnx", work / "model.onnx")
    result = json.loads(sh(py, "-c", SNIPPET, model, cwd=work).stdout.strip().splitlines()[-1])
    site = Path(sh(py, "-c", "import sysconfig; print(sysconfig.get_paths()['platlib'])").stdout.strip())
    assert Path(result["module"]).parent == site / "onnxruntime_ep_mlx", result
    assert Path(result["library"]) == site / "onnxruntime_ep_mlx" / "libonnxruntime_ep_mlx.so", result
    assert result["providers"][0] == result["mixed"][0] == "MLXExecutionProvider", result
    assert result["version"] == result["package_version"] == VERSION, result
    assert (result["name"], result["vendor"]) == ("MLXExecutionProvider", "onnxruntime-ep-mlx")
    # [cpu] brings OpenBLAS, and the installed library finds it beside MLX's backend wheel
    assert len(result["blas"]) == 1 and result["blas"][0].startswith("OpenBLAS"), result["blas"]
    assert str(site / "scipy_openblas32") in result["blas"][0], result["blas"]
    if shutil.which("readelf"):
        dyn = sh("readelf", "-d", result["library"]).stdout
        assert "RUNPATH" in dyn and "[$ORIGIN/../mlx/lib]" in dyn, dyn

    # 4. The console script: the claim report.
    out = sh(tmp_path / "env" / "bin" / "onnxruntime-ep-mlx", "inspect", model, cwd=work).stdout
    assert "claimed: 2, declined: 0, clusters: 1" in out, out
