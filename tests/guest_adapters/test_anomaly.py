"""The vibration-anomaly example: features computed in C match the reference, anomalies found."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest

from tests.fixtures.models import ModelFiles
from tests.guest_adapters.helpers import Runner, make_runner
from wasmgate.sandbox import SandboxEngine

MIN_DETECTION = 0.95  # the model itself: 0.984 on this test set
MAX_FALSE_POSITIVES = 0.02  # the model itself: 0.005


@pytest.fixture(scope="module")
def anomaly(engine: SandboxEngine, models: ModelFiles) -> Runner:
    return make_runner(engine, models, "vibration-anomaly")


def window(data: np.lib.npyio.NpzFile, i: int) -> dict[str, object]:
    return {
        "device": f"pump-{i}",
        "ts": 1764410000.5 + i,
        "accel": [float(v) for v in data["windows"][i]],
        "temp": float(data["temps"][i]),
    }


def test_injected_anomalies_detected_with_events(anomaly: Runner, models: ModelFiles) -> None:
    data = np.load(models.anomaly_test)
    sess = ort.InferenceSession(str(models.anomaly_fp32), providers=["CPUExecutionProvider"])
    ref = np.asarray(sess.run(None, {"input": data["features"]})[0])[:, 0]
    labels = data["labels"]
    flagged, scores = [], []
    for i in range(len(labels)):
        res, _ = anomaly.run(window(data, i))
        assert res.status == 0, res.output
        answer = json.loads(res.output)
        assert answer["device"] == f"pump-{i}"
        assert answer["ts"] == 1764410000.5 + i  # timestamps keep every digit
        flagged.append(answer["anomaly"])
        scores.append(answer["score"])
        # Exactly the anomalies are published, with the answer as the event body.
        assert res.events == ([res.output] if answer["anomaly"] else [])
    flagged_a, scores_a = np.array(flagged), np.array(scores)
    # The C features equal the float64 reference features, so the scores match the model's.
    np.testing.assert_allclose(scores_a, ref, atol=1e-4)
    assert float(np.mean(flagged_a[labels == 1])) >= MIN_DETECTION
    assert float(np.mean(flagged_a[labels == 0])) <= MAX_FALSE_POSITIVES
    assert np.array_equal(flagged_a, ref >= models.anomaly_threshold)


@pytest.mark.parametrize("kind", ["normal", "bearing", "spike", "overheat"])
def test_sample_payloads(anomaly: Runner, models: ModelFiles, kind: str) -> None:
    res, _ = anomaly.run(models.anomaly_samples[kind].read_bytes())
    answer = json.loads(res.output)
    assert answer["anomaly"] is (kind != "normal")
    assert answer["device"].startswith("pump-")


def test_threshold_param(anomaly: Runner, models: ModelFiles) -> None:
    payload = models.anomaly_samples["bearing"].read_bytes()  # score ~0.89
    res, _ = anomaly.run(payload, params={"threshold": "0.95"})
    assert json.loads(res.output)["anomaly"] is False
    assert res.events == []


def test_ts_is_optional_and_device_is_escaped(anomaly: Runner, models: ModelFiles) -> None:
    payload = json.loads(models.anomaly_samples["normal"].read_text())
    del payload["ts"]
    payload["device"] = 'pump "7"\n'
    res, _ = anomaly.run(payload)
    assert res.status == 0
    assert json.loads(res.output)["device"] == 'pump "7"\n'
    assert "ts" not in json.loads(res.output)


BASE = {"device": "pump-7", "ts": 1.0, "accel": [0.0] * 64, "temp": 50}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"accel": [0.0] * 63}, b'"accel" must be an array of exactly 64 numbers'),
        ({"accel": [0.0] * 65}, b'"accel" must be an array of exactly 64 numbers'),
        ({"accel": "none"}, b'"accel" must be an array'),
        ({"accel": None}, b'"accel" must be an array'),
        ({"temp": "hot"}, b'"temp" must be a number'),
        ({"device": 7}, b'"device" must be a string'),
        ({"device": "p" * 65}, b'"device" is longer than 64 characters'),
        ({"ts": "yesterday"}, b'"ts" must be a number'),
    ],
)
def test_malformed_windows_are_bad_input(
    anomaly: Runner, change: dict[str, object], message: bytes
) -> None:
    res, provider = anomaly.run(BASE | change)
    assert res.status == 1
    assert message in res.output
    assert provider.loaded == []


@pytest.mark.parametrize(
    "payload", [b"", b"[]", b"{", b'{"device": "a"', b"{" * 50_000, b"\xff\xfe", b"null"]
)
def test_not_an_object_is_bad_input(anomaly: Runner, payload: bytes) -> None:
    res, _ = anomaly.run(payload)
    assert res.status == 1
    assert res.output.startswith(b"payload must be a JSON object") or b'"device"' in res.output


def test_flat_window_has_zero_features_not_nan(anomaly: Runner) -> None:
    res, _ = anomaly.run(BASE)  # rms = 0: crest/kurtosis/bands defined as 0
    assert res.status == 0
    score = json.loads(res.output)["score"]  # a dead (flat) sensor scores as an anomaly
    assert isinstance(score, int | float)
    assert 0 <= score <= 1
