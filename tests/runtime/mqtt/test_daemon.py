"""The real daemon (`wasmgate serve`) behind mosquitto: SIGKILL mid-stream, restart, no loss."""

from __future__ import annotations

import collections
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from tests.fixtures.benchkit import BenchKit, payload
from tests.fixtures.mosquitto import Broker
from tests.runtime.mqtt.conftest import ROOT
from tests.runtime.mqtt.requester import Reply, Requester

pytestmark = pytest.mark.slow


def _wait(dev: Requester, predicate: Any, timeout: float, what: str) -> list[Reply]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        replies = dev.snapshot()
        if predicate(replies):
            return replies
        time.sleep(0.02)
    raise TimeoutError(f"{what}: {len(dev.snapshot())} replies after {timeout}s")


def _correlations(replies: list[Reply]) -> set[bytes | None]:
    return {r.correlation for r in replies if r.topic == "c/k"}


def test_sigkill_mid_stream_then_restart_answers_every_request(
    mosquitto: Broker, models: Any, tmp_path: Path
) -> None:
    total, kill_at = 40, 15
    kit = BenchKit(tmp_path / "kit")
    kit.build("digits", models.digits_fp32)
    mqtt = {
        "host": "127.0.0.1",
        "port": mosquitto.port,
        "gateway_id": "gw1",
        "client_id": "wg-daemon",
        "keepalive_s": 5,
    }
    daemon = kit.daemon(tmp_path / "daemon", config={"mqtt": mqtt})
    x = np.load(Path(models.digits_fp32).parent / "digits-test.npz")["x"][:total]
    session = ort.InferenceSession(str(models.digits_fp32), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"input": x})[0]
    dev = Requester(mosquitto.port, client_id="dev-kill", persistent=True)
    dev.connect("c/k", f"{ROOT}/status")
    try:
        daemon.start()
        _wait(dev, lambda rs: any(r.payload == b"online" for r in rs), 20, "status online")
        sent = []
        for i in range(total):
            if i == kill_at:
                daemon.kill()  # SIGKILL: no offline publish, no drain, unacked requests stay
            request = dev.request(
                f"{ROOT}/adapters/digits/req",
                payload(x[i : i + 1]),
                response_topic="c/k",
                correlation=str(i).encode(),
            )
            sent.append(request)
            time.sleep(0.01)  # pacing: the kill lands mid-stream
        for request in sent:  # PUBACKed: the broker queued them in the daemon's session
            request.wait_for_publish(10)
        daemon.start()
        wanted = {str(i).encode() for i in range(total)}
        replies = _wait(dev, lambda rs: _correlations(rs) >= wanted, 60, "answers")
    finally:
        dev.close()
        daemon.stop()
    statuses = [r.payload for r in replies if r.topic.endswith("/status")]
    assert b"offline" in statuses  # the last will fired on SIGKILL
    assert statuses[-1] == b"online"
    answers = collections.defaultdict(list)
    for r in replies:
        if r.topic == "c/k":
            assert r.props["status"] == "200", r.payload
            answers[int(r.correlation or b"-1")].append(r.payload)
    for i in range(total):
        for body in answers[i]:  # a request answered but not acked before the kill repeats
            probs = np.frombuffer(body, dtype="<f4")
            np.testing.assert_allclose(probs, expected[i], rtol=1e-5, atol=1e-6)
