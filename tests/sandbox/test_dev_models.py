"""The models of run-guest / adapter test (daemon backends) through a real adapter and wasi-nn."""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from tests.fixtures.backends import cpu_profile
from tests.sandbox.helpers import Script
from wasmgate.runtime.backends import LoadOptions
from wasmgate.runtime.cli._models import FORMATS, PreloadedModels, load_model
from wasmgate.runtime.errors import BackendError
from wasmgate.sandbox import Adapter, GuestLimits, SandboxEngine, TensorSpec

MODELS = Path(__file__).resolve().parents[2] / "guest_adapters" / "models"
FLOAT = LoadOptions(cpu_profile())  # adapter test: the daemon's float interface
RAW = LoadOptions(cpu_profile(), raw_quantized_io=True)  # run-guest: WasmEdge's raw tensors
FILES = ["digits-fp32.onnx", "digits-int8.onnx", "digits-fp32.tflite", "digits-int8.tflite"]


def digits_payload(x: npt.NDArray[np.float32]) -> bytes:
    return struct.pack("<3I", 2, *x.shape) + x.astype("<f4").tobytes()


def load(file: str, options: LoadOptions = FLOAT) -> PreloadedModels:
    encoding = "tensorflowlite" if file.endswith(".tflite") else "onnx"
    model = load_model((MODELS / file).read_bytes(), encoding, "digits", options)
    return PreloadedModels({"digits": model}, options)


@pytest.mark.parametrize("batch", [1, 3])
def test_every_digits_file_agrees_through_the_sandbox(
    engine: SandboxEngine, guest_wasm: Callable[[str], bytes], batch: int
) -> None:
    adapter = engine.compile(guest_wasm("bench_adapter"), name="bench")
    x = np.random.default_rng(batch).uniform(0, 16, (batch, 64)).astype(np.float32)
    outs = {}
    for file in FILES:
        res = adapter.run(digits_payload(x), {"param.model": "digits"}, load(file), GuestLimits())
        assert res.status == 0, res.output
        outs[file] = np.frombuffer(res.output, dtype="<f4").reshape(batch, 10)
    np.testing.assert_allclose(outs["digits-fp32.tflite"], outs["digits-fp32.onnx"], atol=1e-5)
    assert np.allclose(outs["digits-fp32.onnx"].sum(axis=1), 1.0, atol=1e-4)
    for file in ("digits-int8.onnx", "digits-int8.tflite"):  # quantized: same digits
        assert (outs[file].argmax(axis=1) == outs["digits-fp32.onnx"].argmax(axis=1)).all()


def test_specs_are_read_from_the_models() -> None:
    onnx = load("digits-int8.onnx").by_name("digits")
    float_io = load("digits-int8.tflite").by_name("digits")
    raw_io = load("digits-int8.tflite", RAW).by_name("digits")
    assert onnx is not None
    assert float_io is not None
    assert raw_io is not None
    assert onnx.inputs == [TensorSpec("input", "FP32", (-1, 64))]
    assert onnx.outputs == [TensorSpec("probs", "FP32", (-1, 10))]
    assert float_io.inputs == [TensorSpec("input", "FP32", (-1, 64))]
    assert raw_io.inputs == [TensorSpec("input", "INT8", (-1, 64))]
    assert raw_io.outputs == [TensorSpec("probs", "INT8", (-1, 10))]


def test_raw_int8_tflite_through_wasi_nn_like_wasmedge(proxy: Adapter) -> None:
    """A WasmEdge guest feeds a full-integer model u8-typed bytes and reads int8 scores."""
    x = np.random.default_rng(7).integers(0, 17, (1, 64)).astype(np.int8)
    s = Script()
    g, ctx = s.out(), s.out()
    s.call("load_by_name", s.blob(b"digits"), 6, g)
    s.call("init_execution_context", 0, ctx)
    s.call("set_input", 0, 0, s.tensor([1, 64], 3, x.tobytes()))  # 3: u8 (no i8 in witx)
    s.call("compute", 0)
    buf, written = s.out(16), s.out()
    s.call("get_output", 0, 0, buf, 16, written)
    res = proxy.run(s.payload(), {}, load("digits-int8.tflite", RAW), GuestLimits())
    assert res.status == 0, res.output
    r = s.result(res.output)
    assert r.errnos == [0] * 5, res.logs
    assert r.u32(written) == 10
    scores = np.frombuffer(r.raw(buf, 10), dtype=np.int8)
    float_model = load("digits-int8.tflite").by_name("digits")
    assert float_model is not None
    want = float_model.infer([x.astype(np.float32)])[0] / 0.00390625 - 128
    np.testing.assert_array_equal(scores, np.rint(want).astype(np.int8).ravel())


def test_guest_loaded_bytes_go_through_the_backend() -> None:
    provider = PreloadedModels({}, FLOAT)
    assert provider.by_name("x") is None
    model = provider.from_bytes(
        (MODELS / "digits-fp32.tflite").read_bytes(), "tensorflowlite", "gpu"
    )
    assert model is not None
    assert model.outputs == [TensorSpec("probs", "FP32", (-1, 10))]
    assert set(FORMATS.values()) == {"onnx", "tflite"}
    with pytest.raises(BackendError, match="unknown model format 'pytorch'"):
        provider.from_bytes(b"", "pytorch", "cpu")
    with pytest.raises(BackendError, match="not a valid ONNX model"):
        provider.from_bytes(b"not onnx", "onnx", "cpu")
