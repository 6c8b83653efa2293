"""run-guest's model handles (ONNX Runtime, LiteRT) through a real adapter and wasi-nn."""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from wasmgate.runtime.guest_models import LiteRtModel, OrtModel, PreloadedModels, load_model
from wasmgate.sandbox import GuestLimits, SandboxEngine, TensorSpec

MODELS = Path(__file__).resolve().parents[2] / "guest_adapters" / "models"


def digits_payload(x: npt.NDArray[np.float32]) -> bytes:
    return struct.pack("<3I", 2, *x.shape) + x.astype("<f4").tobytes()


@pytest.mark.parametrize("batch", [1, 3])
def test_tflite_and_onnx_digits_agree_through_the_sandbox(
    engine: SandboxEngine, guest_wasm: Callable[[str], bytes], batch: int
) -> None:
    adapter = engine.compile(guest_wasm("bench_adapter"), name="bench")
    x = np.random.default_rng(batch).uniform(0, 16, (batch, 64)).astype(np.float32)
    outs = []
    for handle in (
        OrtModel((MODELS / "digits-fp32.onnx").read_bytes(), "digits"),
        LiteRtModel((MODELS / "digits-fp32.tflite").read_bytes(), "digits"),
    ):
        provider = PreloadedModels({"digits": handle})
        res = adapter.run(digits_payload(x), {"param.model": "digits"}, provider, GuestLimits())
        assert res.status == 0, res.output
        outs.append(np.frombuffer(res.output, dtype="<f4").reshape(batch, 10))
    np.testing.assert_allclose(outs[0], outs[1], atol=1e-5)
    assert np.allclose(outs[0].sum(axis=1), 1.0, atol=1e-4)


def test_specs_are_read_from_the_models() -> None:
    onnx = OrtModel((MODELS / "digits-fp32.onnx").read_bytes())
    tfl = LiteRtModel((MODELS / "digits-int8.tflite").read_bytes())
    assert onnx.inputs == [TensorSpec("input", "FP32", (-1, 64))]
    assert onnx.outputs == [TensorSpec("probs", "FP32", (-1, 10))]
    assert tfl.inputs[0].datatype == "INT8"
    assert tfl.inputs[0].shape[-1] == 64


def test_load_model_refuses_other_encodings() -> None:
    with pytest.raises(ValueError, match="not supported"):
        load_model(b"", "pytorch")
    assert PreloadedModels().by_name("x") is None
