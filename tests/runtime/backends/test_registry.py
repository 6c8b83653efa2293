from __future__ import annotations

import logging
import sys

import numpy as np
import pytest

from tests.runtime.backends.models import fc_tflite, mlp_onnx, mlp_reference
from wasmgate.device_profiles import load_profile
from wasmgate.runtime.backends import (
    LoadOptions,
    ModelSpec,
    Negotiated,
    VariantSource,
    available_backends,
    create_backend,
    negotiate,
)
from wasmgate.runtime.errors import BackendError
from wasmgate.sandbox.models import TensorSpec


def test_both_backends_are_available_here() -> None:
    assert available_backends() == ["onnx", "tflite"]


def test_missing_optional_runtime_drops_the_backend_with_a_log_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Neither LiteRT nor tflite_runtime importable (None in sys.modules → ImportError).
    monkeypatch.setitem(sys.modules, "ai_edge_litert.interpreter", None)
    monkeypatch.setitem(sys.modules, "tflite_runtime.interpreter", None)
    monkeypatch.setitem(sys.modules, "tflite_runtime", None)
    with caplog.at_level(logging.WARNING), pytest.raises(BackendError, match="not installed"):
        create_backend("tflite")
    assert "backend tflite unavailable" in caplog.text
    assert available_backends() == ["onnx"]


def _negotiate(
    fmt: str, spec: ModelSpec, variants: dict[str, VariantSource], profile: str
) -> Negotiated:
    """What the bundle loader does: a backend per format, then precision negotiation."""
    options = LoadOptions(load_profile(profile))
    return negotiate(create_backend(fmt), spec, variants, options)


def test_negotiate_from_lazy_verified_sources(batch: np.ndarray) -> None:
    spec = ModelSpec("mlp", inputs=[TensorSpec("x", "FP32", (-1, 16))])
    result = _negotiate("onnx", spec, {"fp32": mlp_onnx}, "generic-x86_64")
    assert result.precision == "fp32"
    np.testing.assert_allclose(result.model.infer([batch])[0], mlp_reference(batch), rtol=1e-5)
    tfl = _negotiate("tflite", ModelSpec("fc"), {"int8": fc_tflite(int8=True)}, "raspberry-pi-5")
    assert (tfl.precision, tfl.model.providers) == ("int8", ("XNNPACK/CPU",))
