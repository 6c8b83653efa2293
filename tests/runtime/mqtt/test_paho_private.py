"""The fence around paho internals refuses an unknown paho-mqtt when the bridge starts."""

from __future__ import annotations

import re

import pytest

from tests.fixtures.mosquitto import Broker
from tests.runtime.mqtt.conftest import bridge_settings
from tests.runtime.mqtt.service import FakeService
from wasmgate.runtime.errors import ConfigError
from wasmgate.runtime.mqtt import MqttBridge, _paho_private
from wasmgate.runtime.mqtt._paho_private import SUPPORTED, check_paho


def test_the_installed_paho_is_supported() -> None:
    check_paho()


@pytest.mark.parametrize("version", ["2.1.0", "2.3.0", "3.0.0", "dev"])
def test_other_versions_are_refused_naming_the_range(version: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(SUPPORTED)):
        check_paho(version)


async def test_bridge_start_refuses_an_unsupported_paho(
    monkeypatch: pytest.MonkeyPatch, mosquitto: Broker, service: FakeService
) -> None:
    monkeypatch.setattr(_paho_private, "version", lambda _name: "2.3.0")
    with pytest.raises(ConfigError, match=r"paho-mqtt 2\.3\.0 is not supported"):
        async with MqttBridge(bridge_settings(mosquitto.port), service):
            pass
