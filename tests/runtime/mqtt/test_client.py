"""`MqttClient` against a real mosquitto: its lifecycle ends when its owner stops it."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time
from collections.abc import Callable

import pytest
from paho.mqtt import publish

from tests.fixtures.mosquitto import Broker
from tests.fixtures.net import free_port
from tests.fixtures.waits import until_async
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


async def _until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    await until_async(predicate, getattr(predicate, "__name__", "the condition"), timeout)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


async def test_retry_warnings_name_the_broker(
    caplog: pytest.LogCaptureFixture, mosquitto: Broker
) -> None:
    """With no broker, each retry warning says where the daemon is dialing; so does the
    warning when an established connection is lost (a port nobody listens on first, then
    the test broker stopped under a connected client)."""
    caplog.set_level(logging.WARNING, logger="wasmgate")
    will = Outgoing("wasmgate/v1/gw1/status", b"offline", qos=1, retain=True)
    nobody = free_port()
    down = MqttClient(
        bridge_settings(nobody), "wg-nobody", will=will,
        on_connect=lambda _s: None, on_message=lambda _m: None,
    )  # fmt: skip
    down.start()
    try:
        await _until(lambda: len(_warnings(caplog)) >= 2)  # the first try and one retry
    finally:
        await down.stop(None)
    for message in _warnings(caplog):
        assert f"mqtt connect to 127.0.0.1:{nobody} failed" in message, message
        assert "retry in" in message
    caplog.clear()
    up = MqttClient(
        bridge_settings(mosquitto.port), "wg-lost", will=will,
        on_connect=lambda _s: None, on_message=lambda _m: None,
    )  # fmt: skip
    up.start()
    try:
        await _until(lambda: up.connected)
        mosquitto.stop()
        await _until(lambda: any("lost" in m for m in _warnings(caplog)))
    finally:
        await up.stop(None)
    lost = next(m for m in _warnings(caplog) if "lost" in m)
    assert f"mqtt connection to 127.0.0.1:{mosquitto.port} lost" in lost


def test_broker_names_an_ipv6_host_in_brackets() -> None:
    async def name() -> str:
        client = MqttClient(
            bridge_settings(1883, host="::1"), "wg-v6",
            will=Outgoing("t", b"", qos=0, retain=False),
            on_connect=lambda _s: None, on_message=lambda _m: None,
        )  # fmt: skip
        return client.broker

    assert asyncio.run(name()) == "[::1]:1883"


async def test_stop_during_a_failing_connect_leaves_no_unretrieved_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`stop` while the executor still connects (to a broker that then refuses): the
    connect's failure is nobody's to await, and must not surface at exit as asyncio's
    "Future exception was never retrieved" with a traceback. The connect is slowed by a
    stand-in (the timing is what is under test, not the socket)."""
    started = threading.Event()

    def slow_refusal() -> None:
        started.set()
        time.sleep(0.3)
        raise ConnectionRefusedError(111, "Connection refused")

    client = MqttClient(
        bridge_settings(free_port()), "wg-slow",
        will=Outgoing("t", b"", qos=0, retain=False),
        on_connect=lambda _s: None, on_message=lambda _m: None,
    )  # fmt: skip
    client._connect_blocking = slow_refusal  # type: ignore[method-assign]  # noqa: SLF001
    client.start()
    await _until(started.is_set)
    await client.stop(None)
    connecting = client._connecting  # noqa: SLF001 - the future under test
    assert connecting is not None
    await _until(connecting.done)  # the refusal lands after stop returned
    del client, connecting
    gc.collect()
    await asyncio.sleep(0)
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]


async def test_a_burst_read_in_one_chunk_is_delivered_whole(mosquitto: Broker) -> None:
    """Packets the client read ahead in one ``recv`` wake no selector: all of a burst is
    delivered at once, not the rest only when the next packet happens to arrive."""
    got: list[bytes] = []
    probes: list[bytes] = []
    subscribed = asyncio.Event()
    will = Outgoing("wasmgate/v1/gw1/status", b"offline", qos=1, retain=True)

    def connected(_session: bool) -> None:
        client.subscribe(["burst/#"], 0)
        subscribed.set()

    client = MqttClient(
        bridge_settings(mosquitto.port), "wg-burst", will=will,
        on_connect=connected,
        on_message=lambda msg: (probes if msg.topic == "burst/probe" else got).append(msg.payload),
    )  # fmt: skip
    client.start()
    try:
        await _until(subscribed.is_set)
        # The SUBACK tells the caller nothing: probe until one comes through.
        while not probes:
            await asyncio.to_thread(publish.single, "burst/probe", b"p", port=mosquitto.port)
            await asyncio.sleep(0.05)
        sent = [b"%d" % i for i in range(300)]
        done = threading.Event()

        def burst() -> None:
            # One packet after the other in a single write: they arrive together.
            publish.multiple([("burst/x", m, 0, False) for m in sent], port=mosquitto.port)
            done.set()

        threading.Thread(target=burst).start()
        # Without draining the read-ahead each wake-up delivered one message, the rest
        # trickling in as later packets (keep-alives) arrived: 5.8 s here, against 0.6 s.
        await _until(lambda: len(got) == len(sent), timeout=3.0)
        assert got == sent
        assert done.wait(10)
    finally:
        await client.stop(None)
