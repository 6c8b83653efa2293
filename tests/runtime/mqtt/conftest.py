"""Bridge fixtures: a fake service doing real work, bridge settings for the test broker."""

from __future__ import annotations

import pytest

from tests.runtime.mqtt.service import FakeService
from wasmgate.runtime.ops.config import MqttSettings

ROOT = "wasmgate/v1/gw1"


@pytest.fixture
def service() -> FakeService:
    return FakeService()


def bridge_settings(port: int, **over: object) -> MqttSettings:
    base: dict[str, object] = {
        "host": "127.0.0.1",
        "port": port,
        "gateway_id": "gw1",
        "client_id": "wg-test",
        "reconnect_max_s": 0.5,
        "keepalive_s": 5,
        "max_payload_bytes": 4096,
    }
    base.update(over)
    return MqttSettings.model_validate(base)
