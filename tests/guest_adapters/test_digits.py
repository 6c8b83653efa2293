"""The digits example, built from source, in the real sandbox with the real ONNX models."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.fixtures.models import ModelFiles
from tests.guest_adapters.helpers import Runner, make_runner
from wasmgate.sandbox import SandboxEngine


@pytest.fixture(scope="module")
def digits(engine: SandboxEngine, models: ModelFiles) -> Runner:
    return make_runner(engine, models, "digits")


def reference(models: ModelFiles, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort  # noqa: PLC0415

    sess = ort.InferenceSession(str(models.digits_fp32), providers=["CPUExecutionProvider"])
    return np.asarray(sess.run(None, {"input": x.astype(np.float32)})[0])


def test_held_out_digits_classified_like_the_model(digits: Runner, models: ModelFiles) -> None:
    data = np.load(models.digits_test)
    x, y = data["x"], data["y"]
    probs = reference(models, x)
    answers = []
    for row in x:
        res, _ = digits.run([float(v) for v in row])
        assert res.status == 0, res.output
        answers.append(json.loads(res.output))
    got = np.array([a["digit"] for a in answers])
    conf = np.array([a["confidence"] for a in answers])
    model_accuracy = float(np.mean(probs.argmax(1) == y))
    assert float(np.mean(got == y)) >= model_accuracy - 0.005  # measured: identical (0.9733)
    assert np.array_equal(got, probs.argmax(1))
    np.testing.assert_allclose(conf, probs.max(1), rtol=1e-5)


def test_three_payload_forms_agree(digits: Runner, models: ModelFiles) -> None:
    x, y = np.load(models.digits_test)["x"], np.load(models.digits_test)["y"]
    row = x[0]
    as_list, _ = digits.run([int(v) for v in row])
    as_obj, _ = digits.run({"pixels": [int(v) for v in row]}, content_type="application/json")
    raw = bytes(round(float(v) * 255 / 16) for v in row)
    as_raw, _ = digits.run(raw, content_type="application/octet-stream")
    as_raw_untyped, _ = digits.run(raw)
    answers = [json.loads(r.output) for r in (as_list, as_obj, as_raw, as_raw_untyped)]
    assert {a["digit"] for a in answers} == {int(y[0])}


def test_low_confidence_requests_fallback_and_still_answers(
    digits: Runner, models: ModelFiles
) -> None:
    x = np.load(models.digits_test)["x"]
    probs = reference(models, x)
    low = int(np.flatnonzero(probs.max(1) < 0.6)[0])
    high = int(np.flatnonzero(probs.max(1) > 0.99)[0])
    res, _ = digits.run([float(v) for v in x[low]])
    assert res.status == 0
    assert res.fallback_reason == "low confidence"
    assert json.loads(res.output)["confidence"] < 0.6
    res, _ = digits.run([float(v) for v in x[high]])
    assert res.fallback_reason is None


def test_threshold_comes_from_the_manifest_param(digits: Runner, models: ModelFiles) -> None:
    x = np.load(models.digits_test)["x"]
    high = int(np.flatnonzero(reference(models, x).max(1) > 0.99)[0])
    payload = [float(v) for v in x[high]]
    res, _ = digits.run(payload, params={"confidence_threshold": "1.01"})
    assert res.fallback_reason == "low confidence"
    res, _ = digits.run(payload, params={})  # absent: the adapter's default 0.7
    assert res.fallback_reason is None
    res, _ = digits.run(payload, params={"confidence_threshold": "high"})
    assert res.status == 2
    assert b"confidence_threshold" in res.output


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"", b"neither 64 raw bytes nor valid JSON"),
        (b"[1, 2", b"neither 64 raw bytes nor valid JSON"),
        (b"[1, 2, 3]", b"got fewer"),
        (json.dumps(list(range(65))).encode(), b"got more"),
        (b'{"pixel": []}', b'needs a "pixels" array'),
        (json.dumps([1] * 63 + ["x"]).encode(), b"got something else"),
        (json.dumps([1] * 63 + [17]).encode(), b"pixel 63 is 17, expected 0..16"),
        (json.dumps([1] * 63 + [-1]).encode(), b"pixel 63 is -1"),
        (b"[" + b"1," * 63 + b"1e999]", b"neither 64 raw bytes nor valid JSON"),
        (b"[" * 100_000, b"neither 64 raw bytes nor valid JSON"),
        (b'"' + b"a" * 10_000, b"neither 64 raw bytes nor valid JSON"),
        (bytes(65), b"neither 64 raw bytes nor valid JSON"),
        (json.dumps([1] * 64).encode() + b" trailing", b"neither 64 raw bytes nor valid JSON"),
    ],
)
def test_malformed_payloads_are_bad_input(digits: Runner, payload: bytes, message: bytes) -> None:
    res, provider = digits.run(payload)
    assert res.status == 1, res.output
    assert message in res.output
    assert provider.loaded == []  # rejected before any model ran


def test_raw_payload_of_wrong_length_is_refused_when_typed(digits: Runner) -> None:
    res, _ = digits.run(bytes(63), content_type="application/octet-stream")
    assert res.status == 1
    assert res.output == b"raw payload must be 64 bytes (8x8 grayscale), got 63"


def test_missing_model_is_an_adapter_error(digits: Runner) -> None:
    empty = Runner(digits.adapter, {}, digits.params)
    res, provider = empty.run([0] * 64)
    assert res.status == 2
    assert res.output == b"digits model failed: not found"
    assert provider.loaded == ["digits-mlp"]
