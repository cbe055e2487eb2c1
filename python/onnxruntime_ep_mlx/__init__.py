"""Locator and helpers for the MLX execution provider for ONNX Runtime.

    import onnxruntime_ep_mlx as mlx_ep
    mlx_ep.register_execution_provider_library()
    sess = mlx_ep.session("model.onnx", strict=True)

The EP is a plugin library (``libonnxruntime_ep_mlx.so``); ORT loads it with
``register_execution_provider_library``. Plugin EPs are selected through ``get_ep_devices()`` and
``SessionOptions.add_provider_for_devices()``; ``session()`` does that for you.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path

__all__ = ["library_path", "ep_name", "version", "register_execution_provider_library",
           "ep_devices", "session_options", "session"]

_EP_NAME = "MLXExecutionProvider"
_VERSION = "0.1.0"
_lock = threading.Lock()
_registered: set[int] = set()


def ep_name() -> str:
    """The EP's name, which is also the name it is registered under."""
    return _EP_NAME


def version() -> str:
    return _VERSION


def library_path() -> str:
    """Absolute path of libonnxruntime_ep_mlx.so (ORT_EP_MLX_LIBRARY overrides)."""
    override = os.environ.get("ORT_EP_MLX_LIBRARY")
    if override:
        return str(Path(override).resolve())
    here = Path(__file__).resolve().parent
    for candidate in (here / "libonnxruntime_ep_mlx.so",
                      here.parent.parent / "build" / "libonnxruntime_ep_mlx.so"):
        if candidate.exists():
            return str(candidate)
    raise FileNotFoundError("libonnxruntime_ep_mlx.so not found; run `make` in the repository "
                            "or set ORT_EP_MLX_LIBRARY")


def register_execution_provider_library(ort=None) -> str:
    """Registers the EP with ONNX Runtime once per process (idempotent); returns the EP name."""
    if ort is None:
        import onnxruntime as ort
    with _lock:
        if id(ort) not in _registered:
            already = any(d.ep_name == _EP_NAME for d in ort.get_ep_devices())
            if not already:
                ort.register_execution_provider_library(_EP_NAME, library_path())
            _registered.add(id(ort))
    return _EP_NAME


def ep_devices(ort=None):
    """The OrtEpDevice objects of this EP (registering it first)."""
    if ort is None:
        import onnxruntime as ort
    register_execution_provider_library(ort)
    return [d for d in ort.get_ep_devices() if d.ep_name == _EP_NAME]


def session_options(options: dict | None = None, strict: bool = False, so=None, ort=None):
    """SessionOptions with the EP selected. ``options`` are EP options (e.g. {"device": "cpu"});
    ``strict`` forbids CPU fallback (session.disable_cpu_ep_fallback=1)."""
    if ort is None:
        import onnxruntime as ort
    so = so or ort.SessionOptions()
    devices = ep_devices(ort)
    if not devices:
        raise RuntimeError(f"{_EP_NAME} has no device after registration")
    so.add_provider_for_devices(devices, {k: str(v) for k, v in (options or {}).items()})
    if strict:
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    return so


def session(model, options: dict | None = None, strict: bool = False, sess_options=None, ort=None):
    """An InferenceSession that runs ``model`` (path or bytes) with the MLX EP."""
    if ort is None:
        import onnxruntime as ort
    so = session_options(options, strict, sess_options, ort)
    # enable_fallback=0: ORT's Python wrapper would otherwise retry a failed session creation on
    # the CPU EP alone, hiding the EP's error (e.g. an invalid option).
    return ort.InferenceSession(model, sess_options=so, enable_fallback=0)
