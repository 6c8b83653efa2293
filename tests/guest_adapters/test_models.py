"""The model fixtures are what their README says: hashes, accuracies, detection rate, shapes."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
import pytest
from ai_edge_litert.interpreter import Interpreter

from tests.fixtures.models import ModelFiles, get_models

F32 = npt.NDArray[np.float32]
ANOMALY_MIN_DETECTION = 0.95  # measured 0.984
ANOMALY_MAX_FALSE_POSITIVES = 0.02  # measured 0.005


@pytest.fixture(scope="module")
def files() -> ModelFiles:
    return get_models()


def onnx_run(path: object, x: F32) -> F32:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return np.asarray(sess.run(None, {sess.get_inputs()[0].name: x})[0], dtype=np.float32)


def tflite_run(path: object, x: F32) -> F32:
    interp = Interpreter(model_path=str(path), num_threads=1)
    inp, out = interp.get_input_details()[0], interp.get_output_details()[0]
    interp.resize_tensor_input(inp["index"], list(x.shape))
    interp.allocate_tensors()
    s_in, zp_in = inp["quantization"]
    if inp["dtype"] == np.int8:
        interp.set_tensor(
            inp["index"], np.clip(np.round(x / s_in) + zp_in, -128, 127).astype(np.int8)
        )
    else:
        interp.set_tensor(inp["index"], x)
    interp.invoke()
    y = np.asarray(interp.get_tensor(out["index"]), dtype=np.float32)
    s_out, zp_out = out["quantization"]
    return np.asarray((y - zp_out) * s_out, dtype=np.float32) if out["dtype"] == np.int8 else y


def digits_test(files: ModelFiles) -> tuple[F32, npt.NDArray[np.int64]]:
    with np.load(files.digits_test) as d:
        return d["x"].astype(np.float32), d["y"].astype(np.int64)


def test_sha256sums_match_every_committed_file(files: ModelFiles) -> None:
    lines = files.sha256sums.read_text().splitlines()
    assert len(lines) >= 15
    for line in lines:
        digest, name = line.split()
        assert hashlib.sha256((files.dir / name).read_bytes()).hexdigest() == digest, name
        assert (files.dir / name).stat().st_size < 1 << 20, f"{name} is too large to commit"
    listed = {line.split()[1] for line in lines}
    on_disk = {
        p.name for p in files.dir.iterdir() if p.suffix in {".onnx", ".tflite", ".npz", ".json"}
    }
    assert on_disk - {"mobilenet-fp32.onnx", "mobilenet-int8.onnx"} == listed


def test_digits_int8_within_one_point_of_fp32(files: ModelFiles) -> None:
    x, y = digits_test(files)
    acc = {
        p: float(np.mean(onnx_run(p, x).argmax(1) == y))
        for p in (files.digits_fp32, files.digits_int8)
    }
    assert acc[files.digits_fp32] > 0.95
    assert abs(acc[files.digits_fp32] - acc[files.digits_int8]) <= 0.01


def test_digits_io_signature(files: ModelFiles) -> None:
    for path in (files.digits_fp32, files.digits_int8):
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        (i,), (o,) = sess.get_inputs(), sess.get_outputs()
        assert (i.name, i.type, i.shape[1]) == ("input", "tensor(float)", 64)
        assert (o.name, o.type, o.shape[1]) == ("probs", "tensor(float)", 10)
        probs = sess.run(None, {"input": np.zeros((3, 64), np.float32)})[0]
        np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=0.02)


@pytest.mark.parametrize("variant", ["fp32", "int8"])
def test_anomaly_detection_rate_and_false_positives(files: ModelFiles, variant: str) -> None:
    with np.load(files.anomaly_test) as d:
        feats, labels = d["features"].astype(np.float32), d["labels"]
    path = files.anomaly_fp32 if variant == "fp32" else files.anomaly_int8
    hit = onnx_run(path, feats)[:, 0] >= files.anomaly_threshold
    assert np.mean(hit[labels == 1]) >= ANOMALY_MIN_DETECTION
    assert np.mean(hit[labels == 0]) <= ANOMALY_MAX_FALSE_POSITIVES


def test_anomaly_samples_are_payloads_of_the_documented_shape(files: ModelFiles) -> None:
    for kind, path in files.anomaly_samples.items():
        payload = json.loads(path.read_text())
        assert set(payload) == {"device", "ts", "accel", "temp"}, kind
        assert len(payload["accel"]) == 64


def test_tflite_matches_onnx(files: ModelFiles) -> None:
    x, y = digits_test(files)
    ref = onnx_run(files.digits_fp32, x)
    np.testing.assert_allclose(tflite_run(files.digits_fp32_tflite, x), ref, atol=1e-4)
    int8 = tflite_run(files.digits_int8_tflite, x)
    assert abs(float(np.mean(int8.argmax(1) == y)) - float(np.mean(ref.argmax(1) == y))) <= 0.01
    assert float(np.mean(int8.argmax(1) == ref.argmax(1))) >= 0.98


def test_tflite_int8_is_full_integer(files: ModelFiles) -> None:
    interp = Interpreter(model_path=str(files.digits_int8_tflite))
    inp, out = interp.get_input_details()[0], interp.get_output_details()[0]
    assert (inp["dtype"], inp["quantization"]) == (np.int8, (1.0, 0))
    assert out["dtype"] == np.int8
    assert out["quantization"] == pytest.approx((1 / 256, -128))


def test_gate_separates_digits_from_noise(files: ModelFiles) -> None:
    with np.load(files.gate_test) as d:
        x, y = d["x"].astype(np.float32), d["y"]
    assert np.mean((onnx_run(files.gate_fp32, x)[:, 0] >= 0.5) == y) >= 0.98


def test_mobilenet_has_dynamic_batch_and_quantized_convs(files: ModelFiles) -> None:
    n = files.mobilenet_size
    x = np.random.default_rng(0).normal(size=(2, 3, n, n)).astype(np.float32)
    fp32, int8 = onnx_run(files.mobilenet_fp32, x), onnx_run(files.mobilenet_int8, x)
    assert fp32.shape == int8.shape == (2, 1000)
    # int8 follows fp32 roughly (random weights: compare the logits' correlation, not labels)
    assert float(np.corrcoef(fp32.ravel(), int8.ravel())[0, 1]) > 0.9
    text = files.mobilenet_int8.read_bytes()
    assert b"QuantizeLinear" in text
    assert b"DequantizeLinear" in text
