"""Hostile MQTT requesters against a real daemon on a real mosquitto.

Retained requests are not replayed at start; a Response Topic outside the allow-list or
inside the daemon's own tree gets nothing published to it; meanwhile an ordinary requester
is answered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.fixtures.daemon import Daemon
from tests.fixtures.mosquitto import Broker
from tests.runtime.edges.probe import probe_daemon
from tests.runtime.mqtt.requester import Requester

GW = "gw-edges"
ROOT = f"wasmgate/v1/{GW}"
REQ = f"{ROOT}/adapters/probe/req"


def mqtt_config(broker: Broker, **extra: Any) -> dict[str, Any]:
    return {"mqtt": {"host": broker.host, "port": broker.port, "gateway_id": GW, **extra}}


async def status_counter(daemon: Daemon, name: str, want: int, limit_s: float = 10) -> None:
    """Wait (bounded) until the MQTT bridge's status counter ``name`` reaches ``want``."""
    for _ in range(int(limit_s * 10)):
        if daemon.get_json("/v1/status")["components"]["mqtt"][name] >= want:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"mqtt.{name} never reached {want}: {daemon.get_json('/v1/status')}")


async def test_retained_requests_are_not_replayed(
    tmp_path: Path, mosquitto: Broker, daemon_factory: Callable[..., Daemon]
) -> None:
    with Requester(mosquitto.port).connect("replies/#") as dev:
        dev.request(REQ, b"Pretained", response_topic="replies/r", correlation=b"r", retain=True)
        await asyncio.sleep(0.2)  # the broker stores it before the daemon subscribes
        daemon = probe_daemon(tmp_path, daemon_factory, mqtt_config(mosquitto))
        await status_counter(daemon, "retained_ignored", 1)
        dev.request(REQ, b"Pfresh", response_topic="replies/f", correlation=b"f")
        (answer,) = await dev.wait_for(1, timeout=30)
    assert (answer.topic, answer.payload) == ("replies/f", b"v1:fresh")
    assert [r.topic for r in dev.snapshot()] == ["replies/f"]
    with Requester(mosquitto.port).connect(REQ) as cleaner:  # leave no retained request behind
        cleaner.request(REQ, b"", retain=True)


async def test_response_topics_outside_the_allow_list_get_nothing(
    tmp_path: Path, mosquitto: Broker, daemon_factory: Callable[..., Daemon]
) -> None:
    config = mqtt_config(mosquitto, response_topics=["replies/#"])
    daemon = probe_daemon(tmp_path, daemon_factory, config)
    forged = [
        "factory/line1/valve7/cmd",  # not allowed by the list
        f"{ROOT}/status",  # the daemon's own status: always refused
        "wasmgate/v1/other-gw/status",  # another gateway's tree
        "$SYS/broker/x",
    ]
    with Requester(mosquitto.port).connect("#") as spy:
        for i, topic in enumerate(forged):
            spy.request(REQ, b"Popen", response_topic=topic, correlation=b"%d" % i)
        await status_counter(daemon, "replies_refused", len(forged))
        spy.request(REQ, b"Pfine", response_topic="replies/ok", correlation=b"ok")
        await status_counter(daemon, "answered", 1)
        await asyncio.sleep(0.5)  # anything the daemon wrongly published arrives meanwhile
        published = [(r.topic, r.payload) for r in spy.snapshot() if r.topic != REQ]
    assert ("replies/ok", b"v1:fine") in published
    # Only the daemon's own retained "online" may be on a forged topic, never the answer.
    wrong = [p for p in published if b"open" in p[1] or (p[0] in forged and p[1] != b"online")]
    assert not wrong, published
