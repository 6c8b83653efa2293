"""No loss: broker restarts, dropped connections, last will, shared-subscription scale-out."""

from __future__ import annotations

import asyncio
import collections
import json
import socket
from collections.abc import Callable

from tests.fixtures.mosquitto import Broker
from tests.fixtures.waits import until_async
from tests.runtime.mqtt.conftest import ROOT, bridge_settings
from tests.runtime.mqtt.requester import Requester
from tests.runtime.mqtt.service import FakeService
from wasmgate.runtime.mqtt import MqttBridge
from wasmgate.runtime.mqtt.spool import Stored

SUM = f"{ROOT}/adapters/sum/req"


async def _until(predicate: Callable[[], object], timeout: float = 10.0) -> None:
    await until_async(predicate, getattr(predicate, "__name__", "the condition"), timeout)


def _statuses(watch: Requester, topic: str) -> list[bytes]:
    return [r.payload for r in watch.snapshot() if r.topic == topic]


async def test_status_will_and_retained_metadata(mosquitto: Broker, service: FakeService) -> None:
    status = f"{ROOT}/status"
    with Requester(mosquitto.port).connect(status, f"{ROOT}/+/+/metadata") as watch:
        async with MqttBridge(bridge_settings(mosquitto.port), service) as bridge:
            async with asyncio.timeout(10):
                await bridge.wait_connected()
            await _until(lambda: len(watch.snapshot()) >= 6)
            # Drop the TCP connection without DISCONNECT: the broker publishes the will.
            sock = bridge.client.current_socket()
            assert isinstance(sock, socket.socket)
            sock.shutdown(socket.SHUT_RDWR)
            # will, then online again (paho may also re-send the first "online" if its
            # PUBACK was lost with the connection: statuses end offline, online[, online]).
            await _until(lambda: _statuses(watch, status)[1:].count(b"offline") == 1)
            await _until(lambda: _statuses(watch, status)[-1] == b"online")
            assert bridge.state.client.disconnects == 1
            assert bridge.state.client.connects == 2
        await _until(lambda: watch.snapshot()[-1].payload == b"offline")
        replies = watch.snapshot()
    meta = {r.topic: json.loads(r.payload) for r in replies if r.topic.endswith("/metadata")}
    affine = meta[f"{ROOT}/models/affine/metadata"]
    assert affine["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}]
    assert affine["request_topic"] == f"{ROOT}/models/affine/infer"
    assert meta[f"{ROOT}/adapters/sum/metadata"]["request_topic"] == SUM
    with Requester(mosquitto.port).connect(status) as late:  # retained for late subscribers
        (retained,) = await late.wait_for(1)
    assert retained.retain
    assert retained.payload == b"offline"


async def test_broker_restart_mid_stream_every_request_answered(
    mosquitto: Broker, service: FakeService, stored: Stored
) -> None:
    """QoS 1 requests and answers, broker restarted mid-stream (persistent sessions on both
    sides): every request is answered and worked exactly once (answers made while the
    broker was down wait in the store; their redelivered requests are only acked). An
    answer whose PUBACK the dying broker never sent is re-sent by paho (QoS 1 is at least
    once), so the requester may see that answer twice, byte-identical, which it drops by
    correlation data."""
    total = 60
    async with MqttBridge(bridge_settings(mosquitto.port), service, stored=stored) as bridge:
        async with asyncio.timeout(10):
            await bridge.wait_connected()
        dev = Requester(mosquitto.port, client_id="dev-restart", persistent=True).connect("c/r")
        try:
            for i in range(total):
                dev.request(
                    f"{ROOT}/adapters/slow/req",
                    f"{i}".encode(),
                    response_topic="c/r",
                    correlation=f"{i}".encode(),
                )
                if i == total // 2:
                    await asyncio.to_thread(mosquitto.restart)
                await asyncio.sleep(0.005)
            await dev.wait_for(total, timeout=60)
            await asyncio.sleep(1.0)  # quiet window: a late or repeated answer after the restart
            replies = dev.snapshot()
        finally:
            dev.close()
    assert bridge.state.client.connects >= 2
    assert set(service.calls.values()) == {1}, service.calls
    assert bridge.state.answered == total
    by_corr: dict[bytes, set[bytes]] = collections.defaultdict(set)
    for r in replies:
        assert r.props["status"] == "200"
        by_corr[r.correlation or b""].add(r.payload)
    assert sorted(by_corr) == sorted(f"{i}".encode() for i in range(total))
    assert all(len(bodies) == 1 for bodies in by_corr.values())
    for corr, bodies in by_corr.items():
        assert json.loads(next(iter(bodies))) == {"sum": float(corr)}


async def test_shared_group_two_bridges_share_the_stream(mosquitto: Broker) -> None:
    total = 40
    services = [FakeService(slow_s=0.01), FakeService(slow_s=0.01)]
    bridges = [
        MqttBridge(bridge_settings(mosquitto.port, shared_group="wg", client_id=f"wg-{n}"), s)
        for n, s in enumerate(services)
    ]
    async with bridges[0], bridges[1]:
        async with asyncio.timeout(10):
            await bridges[0].wait_connected()
            await bridges[1].wait_connected()
        for n, bridge in enumerate(bridges):  # both subscribed before the first request
            filters = bridge.topics.subscriptions()
            await asyncio.to_thread(mosquitto.wait_subscribed, f"wg-{n}", filters[-1])
        with Requester(mosquitto.port).connect("c/s") as dev:
            for i in range(total):
                dev.request(
                    f"{ROOT}/adapters/slow/req",
                    f"{i}".encode(),
                    response_topic="c/s",
                    correlation=f"{i}".encode(),
                )
            await dev.wait_for(total)
            replies = dev.snapshot()
    counts = collections.Counter(r.correlation for r in replies)
    assert len(counts) == total
    assert set(counts.values()) == {1}
    worked = [sum(s.calls.values()) for s in services]
    assert sum(worked) == total
    assert min(worked) > 0, worked
