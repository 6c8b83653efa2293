from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

from tests.runtime.backends.conftest import X86
from tests.runtime.backends.models import IN_Q, OUT_Q, fc_tflite, mlp_reference
from wasmgate.device_profiles import DeviceProfile, Precision, load_profile
from wasmgate.runtime.backends import LoadOptions, ModelSpec, create_backend
from wasmgate.runtime.backends.tflite import CPU_PATH, TfliteBackend, TfliteModel
from wasmgate.runtime.errors import BackendError
from wasmgate.sandbox.models import InputMismatch, ModelHandle, TensorSpec, validate


def _load(
    data: bytes, profile: DeviceProfile | None = None, precision: Precision = "fp32"
) -> TfliteModel:
    options = LoadOptions(profile or load_profile("generic-x86_64"), precision, host=X86)
    return TfliteBackend().load(data, ModelSpec("fc"), options)


def test_litert_is_the_runtime() -> None:
    backend = create_backend("tflite")
    assert isinstance(backend, TfliteBackend)
    assert backend.package == "ai-edge-litert"


def test_fp32_matches_numpy(batch: np.ndarray) -> None:
    model = _load(fc_tflite(int8=False))
    assert isinstance(model, ModelHandle)
    assert model.inputs == [TensorSpec("x", "FP32", (-1, 16))]
    assert model.outputs == [TensorSpec("y", "FP32", (-1, 8))]
    assert model.providers == (CPU_PATH,)
    assert model.dynamic_batch
    np.testing.assert_allclose(model.infer([batch])[0], mlp_reference(batch), atol=1e-5)


def test_int8_keeps_a_float_interface(batch: np.ndarray) -> None:
    model = _load(fc_tflite(int8=True), precision="int8")
    assert model.precision == "int8"
    assert model.inputs[0].datatype == "FP32"
    out = model.infer([batch])[0]
    assert out.dtype == np.float32
    # quantized input (step 1/32) and output (step 1/16): within ~1.5 output steps
    assert np.abs(out - mlp_reference(batch)).max() <= 1.5 * OUT_Q[0]


def test_int8_output_is_an_exact_multiple_of_the_scale(batch: np.ndarray) -> None:
    out = _load(fc_tflite(int8=True), precision="int8").infer([batch])[0]
    steps = out / OUT_Q[0] + OUT_Q[1]
    np.testing.assert_allclose(steps, np.round(steps), atol=1e-4)
    assert steps.min() >= -128


def test_raw_quantized_io_keeps_the_int8_tensors(batch: np.ndarray) -> None:
    raw_options = LoadOptions(load_profile("generic-x86_64"), host=X86, raw_quantized_io=True)
    raw = TfliteBackend().load(fc_tflite(int8=True), ModelSpec("fc"), raw_options)
    assert raw.inputs[0].datatype == "INT8"
    assert raw.outputs[0].datatype == "INT8"
    q = np.clip(np.rint(batch / IN_Q[0]), -128, 127).astype(np.int8)
    got = raw.infer([q])[0]
    assert got.dtype == np.int8
    want = _load(fc_tflite(int8=True)).infer([batch])[0] / OUT_Q[0] + OUT_Q[1]
    np.testing.assert_array_equal(got, np.rint(want).astype(np.int8))
    with pytest.raises(InputMismatch, match="expected datatype INT8, got FP32"):
        validate(raw.inputs, {raw.inputs[0].name: batch})


def test_batch_dimension_is_resized_on_demand(batch: np.ndarray) -> None:
    model = _load(fc_tflite(int8=False))
    assert model.infer([batch[:1]])[0].shape == (1, 8)
    assert model.infer([batch])[0].shape == (5, 8)
    np.testing.assert_allclose(model.infer([batch[2:3]])[0], mlp_reference(batch[2:3]), atol=1e-5)


def test_missing_delegate_falls_back_to_xnnpack(batch: np.ndarray) -> None:
    model = _load(fc_tflite(int8=False), load_profile("raspberry-pi-5"))
    gc.collect()  # a half-built Delegate would raise in __del__ (unraisable → error here)
    assert model.providers == (CPU_PATH,)
    assert any("libedgetpu.so.1 unavailable" in n for n in model.notes)
    assert any("no delegate usable" in n for n in model.notes)
    np.testing.assert_allclose(model.infer([batch])[0], mlp_reference(batch), atol=1e-5)


def test_coral_dev_board_without_its_edge_tpu_runs_on_the_cpu(batch: np.ndarray) -> None:
    model = _load(fc_tflite(int8=False), load_profile("google-coral-devboard"))
    gc.collect()
    assert model.providers == (CPU_PATH,)
    assert any("libedgetpu.so.1 unavailable" in n for n in model.notes)
    np.testing.assert_allclose(model.infer([batch])[0], mlp_reference(batch), atol=1e-5)


def test_concurrent_infer_is_serialised_and_correct() -> None:
    model = _load(fc_tflite(int8=False))
    rng = np.random.default_rng(1)
    inputs = [rng.normal(size=(1 + i % 4, 16)).astype(np.float32) for i in range(48)]
    results: dict[int, np.ndarray] = {}

    def work(i: int) -> None:
        results[i] = model.infer([inputs[i]])[0]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(48)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, x in enumerate(inputs):
        np.testing.assert_allclose(results[i], mlp_reference(x), atol=1e-5)


def test_bad_inputs_and_bad_models(batch: np.ndarray) -> None:
    model = _load(fc_tflite(int8=False))
    with pytest.raises(InputMismatch, match="shape"):
        validate(model.inputs, {model.inputs[0].name: batch[:, :4]})
    with pytest.raises(BackendError, match="inference failed"):
        model.infer([batch[:, :4]])
    with pytest.raises(BackendError, match="cannot load the model"):
        _load(b"not a flatbuffer at all")
    with pytest.raises(BackendError, match="no bf16"):
        _load(fc_tflite(int8=False), precision="bf16")
    model.close()
    with pytest.raises(BackendError, match="closed"):
        model.infer([batch])
