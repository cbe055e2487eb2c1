"""Locator and helpers for the MLX execution provider for ONNX Runtime.

    import onnxruntime as ort
    import onnxruntime_ep_mlx

    onnxruntime_ep_mlx.register_execution_provider_library()    # idempotent
    sess = ort.InferenceSession("model.onnx",
                                providers=["MLXExecutionProvider", "CPUExecutionProvider"])

The EP is a plugin library (``libonnxruntime_ep_mlx.so``, bundled in the wheel next to this
file) that ORT loads with ``register_execution_provider_library``. The API above is the one of the
reference ``onnxruntime-ep-mlx`` package (``EP_NAME``, ``__version__``, ``vendor()``,
``register_execution_provider_library(name) -> library path``, ``append_to_session_options``);
``session()`` and ``session_options()`` select the EP through ``get_ep_devices()`` and
``SessionOptions.add_provider_for_devices()``, which every ORT from 1.23 on supports.
"""
from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

__all__ = ["EP_NAME", "__version__", "ep_name", "version", "vendor", "library_path",
           "register_execution_provider_library", "append_to_session_options", "ep_devices", "cpu_blas",
           "session_options", "session"]

#: The EP's name: what its factory reports, the default registration name, the providers entry.
EP_NAME = "MLXExecutionProvider"
_VENDOR = "onnxruntime-ep-mlx"
_LIBRARY_NAMES = ("libonnxruntime_ep_mlx.dylib",) if sys.platform == "darwin" else ("libonnxruntime_ep_mlx.so",)
_HERE = Path(__file__).resolve().parent
_lock = threading.Lock()


def _package_version() -> str:
    """The version the wheel build wrote into _version.py, else the clone's VERSION file."""
    try:
        from ._version import __version__ as v
        return v
    except ImportError:
        pass
    try:
        return (_HERE.parent.parent / "VERSION").read_text().strip()
    except OSError:
        return "0.0.0+unknown"


__version__ = _package_version()


def ep_name() -> str:
    """The EP's name, which is also the name it is registered under by default."""
    return EP_NAME


def vendor() -> str:
    """The vendor string the EP's factory reports."""
    return _VENDOR


def library_path() -> str:
    """Absolute path of the EP library: ORT_EP_MLX_LIBRARY when set, else the one bundled in this
    package (wheel install), else a clone's build/ folder."""
    override = os.environ.get("ORT_EP_MLX_LIBRARY")
    if override:
        return str(Path(override).resolve())
    for folder in (_HERE, _HERE.parent.parent / "build"):
        for name in _LIBRARY_NAMES:
            if (folder / name).is_file():
                return str(folder / name)
    raise FileNotFoundError(f"{_LIBRARY_NAMES[0]} not found next to {__file__} nor in a clone's build/: "
                            "install the wheel, run `make` in the repository, or set ORT_EP_MLX_LIBRARY")


def _ort(ort=None):
    if ort is not None:
        return ort
    import onnxruntime
    return onnxruntime


def _check_mlx_backend(path: str) -> None:
    """The bundled library finds libmlx at $ORIGIN/../mlx/lib. On Linux the mlx package holds none
    itself: a backend package (mlx-cpu, mlx-cuda-13) does, and without one loading fails with a
    bare dlopen error, so say what to install. (A clone's build links its MLX by absolute path.)"""
    lib = Path(path)
    if sys.platform == "darwin" or lib.parent != _HERE:
        return
    mlx_lib = _HERE.parent / "mlx" / "lib" / "libmlx.so"
    if not mlx_lib.exists():
        raise RuntimeError(f"MLX has no backend installed ({mlx_lib} is missing): install "
                           "onnxruntime-ep-mlx[cpu] (mlx-cpu) or onnxruntime-ep-mlx[cuda13] (mlx-cuda-13)")


def register_execution_provider_library(name: str = EP_NAME, ort=None) -> str:
    """Registers the EP library with ONNX Runtime under ``name``; returns the library's path.

    Idempotent: a second call (any name) finds the EP's devices already there and registers
    nothing. ``ort`` is the onnxruntime module to use (default: ``import onnxruntime``)."""
    ort = _ort(ort)
    path = library_path()
    with _lock:
        if not any(d.ep_name == EP_NAME for d in ort.get_ep_devices()):
            _check_mlx_backend(path)
            ort.register_execution_provider_library(name, path)
    return path


def ep_devices(ort=None):
    """The OrtEpDevice objects of this EP (registering it first)."""
    ort = _ort(ort)
    register_execution_provider_library(ort=ort)
    return [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]


def version(ort=None) -> str:
    """The version the loaded library reports (its factory's GetVersion, which ORT puts into the
    device's metadata); registers the EP first. Falls back to ``__version__`` on a runtime that
    does not publish it."""
    for device in ep_devices(ort):
        reported = dict(device.ep_metadata).get("version")
        if reported:
            return reported
    return __version__


def cpu_blas(ort=None) -> str:
    """The BLAS under MLX's CPU products as the library chose it (OpenBLAS from scipy-openblas32,
    the library ORT_EP_MLX_BLAS names, or MLX's own, with the reason); registers the EP first."""
    for device in ep_devices(ort):
        chosen = dict(device.ep_metadata).get("mlx_cpu_blas")
        if chosen:
            return chosen
    return "unknown (a library without this report)"


def append_to_session_options(session_options, name: str = EP_NAME, provider_options: dict | None = None,
                              ort=None):
    """Registers the EP under ``name`` (idempotent) and appends it to ``session_options`` with
    ``provider_options`` (EP options, e.g. {"device": "cpu"}); returns ``session_options``."""
    ort = _ort(ort)
    register_execution_provider_library(name, ort=ort)
    devices = ep_devices(ort)
    if not devices:
        raise RuntimeError(f"{EP_NAME} has no device after registration")
    session_options.add_provider_for_devices(devices, {k: str(v) for k, v in (provider_options or {}).items()})
    return session_options


def session_options(options: dict | None = None, strict: bool = False, so=None, ort=None):
    """SessionOptions with the EP selected. ``options`` are EP options (e.g. {"device": "cpu"});
    ``strict`` forbids CPU fallback (session.disable_cpu_ep_fallback=1)."""
    ort = _ort(ort)
    so = append_to_session_options(so or ort.SessionOptions(), provider_options=options, ort=ort)
    if strict:
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    return so


def session(model, options: dict | None = None, strict: bool = False, sess_options=None, ort=None):
    """An InferenceSession that runs ``model`` (path or bytes) with the MLX EP."""
    ort = _ort(ort)
    so = session_options(options, strict, sess_options, ort)
    # enable_fallback=0: ORT's Python wrapper would otherwise retry a failed session creation on
    # the CPU EP alone, hiding the EP's error (e.g. an invalid option).
    return ort.InferenceSession(model, sess_options=so, enable_fallback=0)
