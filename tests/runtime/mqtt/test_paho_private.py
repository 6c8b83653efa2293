"""The fence around paho internals refuses an unknown paho-mqtt when the bridge starts, and
`close_threaded` frees every descriptor of a ``loop_start()`` client without the GC."""

from __future__ import annotations

import gc
import re
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from tests.fixtures.mosquitto import Broker
from tests.runtime.mqtt.conftest import bridge_settings
from tests.runtime.mqtt.service import FakeService
from wasmgate.runtime.errors import ConfigError
from wasmgate.runtime.mqtt import MqttBridge, _paho_private
from wasmgate.runtime.mqtt._paho_private import SUPPORTED, check_paho, close_threaded


def test_the_installed_paho_is_supported() -> None:
    check_paho()


@pytest.mark.parametrize("version", ["2.1.0", "2.3.0", "3.0.0", "dev"])
def test_other_versions_are_refused_naming_the_range(version: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(SUPPORTED)):
        check_paho(version)


@pytest.mark.parametrize("name", ["_sock_close", "_sock_recv"])
def test_a_paho_without_an_internal_we_use_is_refused(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.delattr(paho.Client, name)
    with pytest.raises(ConfigError, match=re.escape(SUPPORTED)):
        check_paho()


async def test_bridge_start_refuses_an_unsupported_paho(
    monkeypatch: pytest.MonkeyPatch, mosquitto: Broker, service: FakeService
) -> None:
    monkeypatch.setattr(_paho_private, "version", lambda _name: "2.3.0")
    with pytest.raises(ConfigError, match=r"paho-mqtt 2\.3\.0 is not supported"):
        async with MqttBridge(bridge_settings(mosquitto.port), service):
            pass


class _Owner:
    """A client in a reference cycle with its owner, as every callback-holding owner is."""

    def __init__(self) -> None:
        self.client = paho.Client(CallbackAPIVersion.VERSION2, client_id="fd-check")
        self.client.on_message = self._on_message

    def _on_message(self, *_a: Any) -> None:
        pass


def _open_fds() -> int:
    return sum(1 for _ in Path("/proc/self/fd").iterdir())


@pytest.mark.parametrize("close", ["close_threaded", "disconnect+loop_stop"])
def test_close_threaded_frees_the_loop_socket_pair(mosquitto: Broker, close: str) -> None:
    """paho issue #627: ``disconnect`` + ``loop_stop`` leave ``loop_start``'s socket pair
    open until the cycle is collected; `close_threaded` closes it at once."""
    gc.collect()
    gc.disable()  # the cycle must not be collected behind the count
    try:
        before = _open_fds()
        owner = _Owner()
        owner.client.connect("127.0.0.1", mosquitto.port)
        owner.client.loop_start()
        if close == "close_threaded":
            close_threaded(owner.client)
            assert _open_fds() == before
        else:
            owner.client.disconnect()
            owner.client.loop_stop()
            assert _open_fds() == before + 2  # the pair, until the GC runs __del__
            owner.client.reinitialise()  # not left for the collector: it would warn
    finally:
        gc.enable()
