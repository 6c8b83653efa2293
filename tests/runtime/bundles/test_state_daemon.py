"""Adapter state in a real daemon: the vibration example's moving average over HTTP, kept
across requests, a SIGKILL and a clean restart, per device, within its window."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.daemon import Daemon
from tests.fixtures.models import ModelFiles
from tests.guest_adapters.test_examples_daemon import demo_config, post
from wasmgate.runtime.bundles.demo import prepare_demo

ADAPTER = "/v1/adapters/vibration-anomaly"


def reading(daemon: Daemon, payload: dict[str, Any]) -> dict[str, Any]:
    status, body, _ = post(daemon.url + ADAPTER, json.dumps(payload).encode())
    assert status == 200, body
    answer: dict[str, Any] = json.loads(body)
    return answer


@pytest.fixture
def vibration(tmp_path: Path, daemon_factory: Callable[..., Daemon]) -> Daemon:
    setup = prepare_demo(tmp_path / "demo-data", names=("vibration-anomaly",))
    config = demo_config(setup)
    return daemon_factory(config=config, name="edge")


def test_moving_average_survives_sigkill_and_restart(vibration: Daemon, models: ModelFiles) -> None:
    normal = json.loads(models.anomaly_samples["normal"].read_text())
    spike = json.loads(models.anomaly_samples["spike"].read_text()) | {"device": normal["device"]}
    scores = []
    for i in range(3):
        answer = reading(vibration, spike if i == 1 else normal)
        scores.append(answer["score"])
        assert answer["readings"] == i + 1
        assert answer["mean_score"] == pytest.approx(sum(scores) / len(scores), abs=1e-6)

    vibration.kill()  # SIGKILL: nothing is flushed on the way out
    vibration.start()
    answer = reading(vibration, normal)
    scores.append(answer["score"])
    assert answer["readings"] == 4
    assert answer["mean_score"] == pytest.approx(sum(scores) / 4, abs=1e-6)

    assert vibration.stop() == 0
    vibration.start()
    other = reading(vibration, {**normal, "device": "pump-other"})
    assert (other["readings"], other["mean_score"]) == (1, other["score"])  # its own window
    for _ in range(6):  # the window holds the last 8 readings (param average_window)
        answer = reading(vibration, normal)
    scores += [answer["score"]] * 6
    assert answer["readings"] == 8
    assert answer["mean_score"] == pytest.approx(sum(scores[-8:]) / 8, abs=1e-6)
