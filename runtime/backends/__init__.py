"""Inference backends (ONNX Runtime, TFLite/LiteRT) and their registry.

`create_backend("onnx" | "tflite")` returns a fresh backend. An optional runtime whose
import fails (no LiteRT on this platform) is dropped with one log line, not an error at
import time; asking for it then raises `BackendError` naming the cause.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from wasmgate.runtime.backends.base import (
    HostInfo,
    InferenceBackend,
    LoadedModel,
    LoadOptions,
    ModelSpec,
)
from wasmgate.runtime.backends.precision import Attempt, Negotiated, VariantSource, negotiate
from wasmgate.runtime.errors import BackendError

log = logging.getLogger(__name__)


def _onnx() -> InferenceBackend:
    from wasmgate.runtime.backends.onnx import OnnxBackend  # noqa: PLC0415

    return OnnxBackend()


def _tflite() -> InferenceBackend:
    from wasmgate.runtime.backends.tflite import TfliteBackend  # noqa: PLC0415

    return TfliteBackend()


_FACTORIES: dict[str, Callable[[], InferenceBackend]] = {"onnx": _onnx, "tflite": _tflite}


def create_backend(type_key: str) -> InferenceBackend:
    """A backend for ``onnx`` or ``tflite`` (`BackendError` if unknown or not installed)."""
    factory = _FACTORIES.get(type_key)
    if factory is None:
        raise BackendError(f"unknown model format {type_key!r} (known: {', '.join(_FACTORIES)})")
    try:
        return factory()
    except ImportError as e:
        log.warning("backend %s unavailable: %s", type_key, e)
        raise BackendError(f"backend {type_key!r} is not installed here: {e}") from e


def available_backends() -> list[str]:
    """Formats whose runtime imports on this host."""
    names = []
    for name in _FACTORIES:
        try:
            create_backend(name).close()
        except BackendError:
            continue
        names.append(name)
    return names


__all__ = [
    "Attempt",
    "HostInfo",
    "InferenceBackend",
    "LoadOptions",
    "LoadedModel",
    "ModelSpec",
    "Negotiated",
    "VariantSource",
    "available_backends",
    "create_backend",
    "negotiate",
]
