"""`MqttClient` against a real mosquitto: its lifecycle ends when its owner stops it."""

from __future__ import annotations

import asyncio

from tests.fixtures.mosquitto import Broker
from tests.runtime.mqtt.conftest import bridge_settings
from wasmgate.runtime.mqtt.client import MqttClient
from wasmgate.runtime.mqtt.messages import Outgoing


async def test_stop_as_the_connack_arrives_ends_the_supervisor(mosquitto: Broker) -> None:
    """`stop` called from the connect callback (its cancel lands while the CONNACK wakes the
    supervisor) returns: 3.11's ``wait_for`` returned the CONNACK and dropped that cancel
    (gh-86296), and the supervisor then waited for a disconnect that `stop` never sent."""
    stops: list[asyncio.Task[None]] = []
    will = Outgoing("wasmgate/v1/gw1/status", b"offline", qos=1, retain=True)
    client = MqttClient(
        bridge_settings(mosquitto.port),
        "wg-client-test",
        will=will,
        on_connect=lambda _session: stops.append(asyncio.ensure_future(client.stop(None))),
        on_message=lambda _msg: None,
    )
    client.start()
    try:
        async with asyncio.timeout(10):
            while not stops:
                await asyncio.sleep(0.01)
        done, _ = await asyncio.wait(stops, timeout=10)
        assert stops[0] in done, "stop() did not return: the supervisor outlived its cancel"
        assert not client.supervising
    finally:
        if client.supervising:  # the bug: end it for good so the test leaves nothing behind
            async with asyncio.timeout(10):
                await client.stop(None)
