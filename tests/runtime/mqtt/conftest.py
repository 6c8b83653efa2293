"""Bridge fixtures: a fake service doing real work, bridge settings for the test broker."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.runtime.mqtt.service import FakeService
from wasmgate.runtime.field.setup import build_store
from wasmgate.runtime.mqtt.spool import Stored
from wasmgate.runtime.ops.config import MqttSettings, Settings, StoreSettings
from wasmgate.typed import convert

ROOT = "wasmgate/v1/gw1"


@pytest.fixture
def service() -> FakeService:
    return FakeService()


@pytest.fixture
async def stored(tmp_path: Path) -> AsyncIterator[Stored]:
    """The daemon's store, as `MqttBridge(..., stored=stored)` takes it."""
    settings = Settings(store=StoreSettings(path=tmp_path / "store.db"))
    async with build_store(settings) as store:
        yield Stored(store, settings.store)


def bridge_settings(port: int, **over: object) -> MqttSettings:
    base: dict[str, object] = {
        "host": "127.0.0.1",
        "port": port,
        "gateway_id": "gw1",
        "client_id": "wg-test",
        "reconnect_max_s": 0.5,
        "reconnect_spread_s": 0,
        "keepalive_s": 5,
        "max_payload_bytes": 4096,
    }
    base.update(over)
    return convert(base, MqttSettings, strict=False)
