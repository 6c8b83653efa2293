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

from tests.fixtures.benchkit import rss_mb
from tests.fixtures.daemon import Daemon
from tests.fixtures.mosquitto import Broker
from tests.fixtures.waits import until_async
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


async def wait_online(broker: Broker) -> None:
    """Until the daemon announced itself, which it does after subscribing to requests."""
    with Requester(broker.port).connect(f"{ROOT}/status") as watcher:
        for _ in range(300):  # bounded: 30 s
            if any(r.payload == b"online" for r in watcher.snapshot()):
                return
            await asyncio.sleep(0.1)
    raise AssertionError("the daemon never published status online")


async def test_retained_requests_are_not_replayed(
    tmp_path: Path, mosquitto: Broker, daemon_factory: Callable[..., Daemon]
) -> None:
    with Requester(mosquitto.port).connect("replies/#") as dev:
        stored = dev.request(
            REQ, b"Pretained", response_topic="replies/r", correlation=b"r", retain=True
        )
        await asyncio.to_thread(stored.wait_for_publish, 10)  # stored before the daemon starts
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
    await wait_online(mosquitto)
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
        # A fence, not a quiet window: the forged ones were refused before this request was
        # sent, and the daemon publishes on one connection in order, so anything it wrongly
        # published for them reaches the spy before this answer.
        await until_async(lambda: any(r.topic == "replies/ok" for r in spy.snapshot()), "ok")
        published = [(r.topic, r.payload) for r in spy.snapshot() if r.topic != REQ]
    assert ("replies/ok", b"v1:fine") in published
    # Only the daemon's own retained "online" may be on a forged topic, never the answer.
    wrong = [p for p in published if b"open" in p[1] or (p[0] in forged and p[1] != b"online")]
    assert not wrong, published


async def test_non_finite_timeouts_are_refused_and_deadlines_still_fire(
    tmp_path: Path, mosquitto: Broker, daemon_factory: Callable[..., Daemon]
) -> None:
    daemon = probe_daemon(tmp_path, daemon_factory, mqtt_config(mosquitto), {"max_in_flight": 1})
    await wait_online(mosquitto)
    bad: list[tuple[list[tuple[str, str]], bytes, str]] = [
        ([("timeout_ms", v)], b"Px", "user property 'timeout_ms'")
        for v in ("nan", "inf", "-inf", "1e999", "-5", "0")
    ]
    bad += [([("deadline", "nan")], b"Px", "user property 'deadline'")]
    bad += [([], b'{"deadline": NaN}', "payload field 'deadline'")]
    bad += [([], b'{"deadline": 1' + b"0" * 400 + b"}", "payload field 'deadline'")]
    with Requester(mosquitto.port).connect("replies/#") as dev:
        for i, (user, payload, _) in enumerate(bad):
            dev.request(
                REQ, payload, response_topic="replies/bad", correlation=b"%d" % i, user=user
            )
        answers = {r.correlation: r for r in await dev.wait_for(len(bad), timeout=30)}
        for i, (_, _, field) in enumerate(bad):
            answer = answers[b"%d" % i]
            assert answer.props["status"] == "400", answer
            assert field in answer.payload.decode(), answer
        # An ordinary deadline still fires, and the single slot is free again afterwards.
        dev.request(
            REQ, b"L", response_topic="replies/l", correlation=b"l", user=[("timeout_ms", "300")]
        )
        dev.request(REQ, b"Pok", response_topic="replies/ok", correlation=b"ok")
        later = {r.correlation: r for r in await dev.wait_for(len(bad) + 2, timeout=30)}
    assert later[b"l"].props["status"] == "504", later[b"l"]
    assert (later[b"ok"].props["status"], later[b"ok"].payload) == ("200", b"v1:ok")
    assert "Traceback" not in daemon.log()


async def test_oversize_reply_properties_are_refused_unanswered_and_counted(
    tmp_path: Path, mosquitto: Broker, daemon_factory: Callable[..., Daemon]
) -> None:
    config = mqtt_config(mosquitto, max_response_topic_bytes=64, max_correlation_bytes=16)
    daemon = probe_daemon(tmp_path, daemon_factory, config)
    await wait_online(mosquitto)
    with Requester(mosquitto.port).connect("replies/#") as dev:
        dev.request(REQ, b"Plong", response_topic="replies/" + "t" * 57, correlation=b"c")
        dev.request(REQ, b"Pcorr", response_topic="replies/c", correlation=b"c" * 17)
        dev.request(REQ, b"Pwide", response_topic="replies/" + "é" * 29, correlation=b"w")
        await status_counter(daemon, "oversize_refused", 3)
        dev.request(REQ, b"Pfits", response_topic="replies/" + "t" * 56, correlation=b"c" * 16)
        (answer,) = await dev.wait_for(1, timeout=30)
    assert (answer.payload, answer.correlation) == (b"v1:fits", b"c" * 16)
    assert [r.topic for r in dev.snapshot()] == ["replies/" + "t" * 56]  # nothing else answered
    log = daemon.log()
    assert "exceeds mqtt.max_response_topic_bytes" in log
    assert "exceeds mqtt.max_correlation_bytes" in log


async def test_a_flood_of_large_requests_leaves_rss_near_its_plateau(
    tmp_path: Path, mosquitto: Broker, daemon_factory: Callable[..., Daemon]
) -> None:
    """60 KB properties (refused) and 256 KB payloads (answered): what each request leaves
    behind is bounded in bytes. Without the heap keeper the parsed payloads left RSS
    +54 MiB for good here (glibc kept the freed arena pages), so this fails without it.
    Every process that takes requests is held to it (with ``[workers] count`` > 1, the
    workers: the supervisor takes none)."""
    daemon = probe_daemon(tmp_path, daemon_factory, mqtt_config(mosquitto))
    assert daemon.proc is not None
    await wait_online(mosquitto)
    nope = f"{ROOT}/adapters/nope/req"
    with Requester(mosquitto.port).connect("replies/#") as dev:
        for i in range(200):  # warm-up: the plateau every later figure is held to
            dev.request(nope, b"{}", response_topic="replies/w", correlation=b"%d" % i)
        await dev.wait_for(200, timeout=60)
        plateau = {pid: rss_mb(pid) for pid in serving_pids(daemon)}
        huge_topic, huge_data = "replies/" + "x" * 60_000, b"c" * 60_000
        for _ in range(200):
            dev.request(REQ, b"P", response_topic=huge_topic, correlation=huge_data)
        await status_counter(daemon, "oversize_refused", 200, limit_s=60)
        # Counted each, logged once a minute: a flood writes no journal line per message.
        assert daemon.log().count("exceeds mqtt.max_response_topic_bytes") == 1
        big = b'{"x": "' + b"a" * 256 * 1024 + b'"}'  # parsed: a 256 KB str each
        for i in range(200):
            dev.request(nope, big, response_topic="replies/b", correlation=b"%d" % i)
        await dev.wait_for(400, timeout=120)
        rss = {pid: await settled_rss(pid, mb + 16) for pid, mb in plateau.items()}
    assert all(rss[pid] <= mb + 16 for pid, mb in plateau.items()), (rss, plateau)


def serving_pids(daemon: Daemon) -> list[int]:
    """The processes that take the gateway's requests: the daemon, or its workers."""
    assert daemon.proc is not None
    workers = daemon.get_json("/v1/status")["components"].get("workers", {})
    return [int(w["pid"]) for w in workers.get("workers", [])] or [daemon.proc.pid]


async def settled_rss(pid: int, goal: float, limit_s: float = 30) -> float:
    """RSS once it is at most ``goal`` MiB (the trim runs after a quiet second), or the last
    reading after ``limit_s``."""
    rss = rss_mb(pid)
    for _ in range(int(limit_s * 10)):
        if rss <= goal:
            break
        await asyncio.sleep(0.1)
        rss = rss_mb(pid)
    return rss
