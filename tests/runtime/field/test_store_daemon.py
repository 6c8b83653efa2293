"""Store-and-forward against real daemons on a real mosquitto: the broker away for a while
under HTTP and MQTT traffic, a SIGKILL in the middle, the broker back; a full store; a
corrupt store file.

The probe adapter's ``X<text>`` emits ``<text>`` as an event; ``L`` loops until its
deadline, so its (504) answer is made while the test holds the broker down.
"""

from __future__ import annotations

import asyncio
import collections
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.daemon import Daemon
from tests.fixtures.mosquitto import Broker
from tests.fixtures.waits import until_async
from tests.runtime.edges.probe import probe_daemon, request
from tests.runtime.edges.test_mqtt_edges import GW, mqtt_config, wait_online
from tests.runtime.mqtt.requester import Reply, Requester
from wasmgate.runtime.field.setup import REFRESH_EVERY_S

ROOT = f"wasmgate/v1/{GW}"
EVENTS = f"{ROOT}/events/probe"
REQ = f"{ROOT}/adapters/probe/req"


def _config(broker: Broker, workers: int = 1) -> dict[str, Any]:
    config = mqtt_config(broker, reconnect_max_s=0.5, reconnect_spread_s=0)
    return {**config, "workers": {"count": workers}}


# With two workers the requests, their events and the answers stored while the broker is
# away are the workers'; the drain, the gateway's counters and the dedupe table that
# answers a redelivery once are shared with the supervisor (`[workers] count`).
WORKERS = pytest.mark.parametrize("workers", [1, 2])


def _emit(daemon: Daemon, text: str) -> None:
    got = request(daemon.port, "POST", "/v1/adapters/probe", b"X" + text.encode())
    assert (got.status, got.body) == (200, b"v1:" + text.encode())


def stream_status(daemon: Daemon, name: str) -> dict[str, Any]:
    streams: dict[str, dict[str, Any]] = daemon.get_json("/v1/status")["components"]["store"][
        "streams"
    ]
    return streams[name]


async def depth(daemon: Daemon, stream: str, wanted: int, workers: int) -> None:
    """The stream's depth as the gateway shows it: at once in one process; with workers
    within `REFRESH_EVERY_S` (each process appends to the one file, the supervisor counts)."""
    limit_s = 0.0 if workers == 1 else 3 * REFRESH_EVERY_S
    what = f"{stream} depth {wanted}"
    await until(lambda: stream_status(daemon, stream)["depth"] == wanted, what, limit_s)


def _mqtt(daemon: Daemon) -> dict[str, Any]:
    section: dict[str, Any] = daemon.get_json("/v1/status")["components"]["mqtt"]
    return section


async def until(check: Callable[[], bool], what: str, limit_s: float = 30) -> None:
    await until_async(check, what, limit_s, every_s=0.1)


async def fenced(daemon: Daemon, watch: Requester, dev: Requester | None = None) -> None:
    """Instead of a quiet window for duplicates: once every stream is empty (acked and
    deleted) the daemon has nothing left to resend, and what it published before reaches a
    client before a fence published after it (one connection, one order): the event
    ``fence`` for ``watch``, an answer on ``replies/fence`` for ``dev``."""
    await until(lambda: all(s["depth"] == 0 for s in _streams(daemon).values()), "streams acked")
    _emit(daemon, "fence")
    await until(lambda: b"fence" in _payloads(watch.snapshot(), EVENTS), "the fence event")
    if dev is not None:
        dev.request(REQ, b"Pfence", response_topic="replies/fence", correlation=b"fence")
        await until(lambda: _payloads(dev.snapshot(), "replies/fence") != [], "the fence answer")


def _streams(daemon: Daemon) -> dict[str, dict[str, Any]]:
    streams: dict[str, dict[str, Any]] = daemon.get_json("/v1/status")["components"]["store"][
        "streams"
    ]
    return streams


def _unfenced(replies: list[Reply]) -> list[Reply]:
    return [r for r in replies if r.payload != b"fence" and r.topic != "replies/fence"]


def _payloads(replies: list[Reply], topic: str) -> list[bytes]:
    return [r.payload for r in replies if r.topic == topic]


@WORKERS
async def test_http_and_mqtt_events_reach_mqtt_at_qos1(
    tmp_path: Path, mosquitto: Broker, daemon_factory: Callable[..., Daemon], workers: int
) -> None:
    daemon = probe_daemon(tmp_path, daemon_factory, _config(mosquitto, workers))
    await wait_online(mosquitto)
    with Requester(mosquitto.port).connect(EVENTS, "replies/#") as dev:
        _emit(daemon, "over-http")
        dev.request(REQ, b"Xover-mqtt", response_topic="replies/1", correlation=b"1")
        await until(lambda: len(dev.snapshot()) >= 3, "two events and one answer")
        await fenced(daemon, dev)
        got = _unfenced(dev.snapshot())
    assert sorted(_payloads(got, EVENTS)) == [b"over-http", b"over-mqtt"]
    assert _payloads(got, "replies/1") == [b"v1:over-mqtt"]
    assert all(r.props.get("store-id", "").isdigit() for r in got if r.topic == EVENTS)
    await depth(daemon, "events", 0, workers)


@WORKERS
async def test_broker_away_and_sigkill_every_answer_and_event_once_in_order(
    tmp_path: Path, mosquitto: Broker, daemon_factory: Callable[..., Daemon], workers: int
) -> None:
    daemon = probe_daemon(tmp_path, daemon_factory, _config(mosquitto, workers))
    await wait_online(mosquitto)
    # Persistent sessions: what the broker holds for them survives its own restart.
    watch = Requester(mosquitto.port, client_id="watch", persistent=True).connect(EVENTS)
    dev = Requester(mosquitto.port, client_id="dev", persistent=True).connect("replies/#")
    try:
        slow = 3  # answered at their 4 s deadline: while the broker is down
        for i in range(slow):
            dev.request(REQ, b"L", response_topic=f"replies/{i}", correlation=b"%d" % i,
                        user=[("timeout_ms", "4000")])  # fmt: skip
        await until(lambda: _mqtt(daemon)["received"] >= slow, "the slow requests arrived")
        await asyncio.to_thread(mosquitto.stop)
        for i in range(10):
            _emit(daemon, f"ev-{i:02d}")
        await until(lambda: stream_status(daemon, "answers")["depth"] == slow, "answers stored")
        await depth(daemon, "events", 10, workers)
        daemon.kill()  # SIGKILL: no drain, no close
        daemon.start()
        for i in range(10, 20):
            _emit(daemon, f"ev-{i:02d}")
        await depth(daemon, "events", 20, workers)
        await depth(daemon, "answers", slow, workers)
        await asyncio.to_thread(mosquitto.start)  # the unacked slow requests come back too
        await until(lambda: len(_payloads(watch.snapshot(), EVENTS)) >= 20, "events drained")
        await until(lambda: len(dev.snapshot()) >= slow, "answers drained")
        await fenced(daemon, watch, dev)
        events, answers = _payloads(_unfenced(watch.snapshot()), EVENTS), _unfenced(dev.snapshot())
    finally:
        watch.close()
        dev.close()
    assert events == [f"ev-{i:02d}".encode() for i in range(20)]  # once each, in order
    by_topic = collections.Counter(r.topic for r in answers)
    assert by_topic == {f"replies/{i}": 1 for i in range(slow)}, answers
    assert {r.props["status"] for r in answers} == {"504"}
    assert stream_status(daemon, "events")["dropped_full"] == 0
    assert _mqtt(daemon)["duplicates"] == slow  # the redelivered requests were only acked


async def test_a_full_store_drops_the_oldest_and_counts_them(
    tmp_path: Path, mosquitto: Broker, daemon_factory: Callable[..., Daemon]
) -> None:
    # 25 bytes of payload + {"adapter":"probe"} = 44 bytes an entry: 5 fit in 230 bytes.
    daemon = probe_daemon(tmp_path, daemon_factory, _config(mosquitto))
    daemon.stop()
    daemon.config_path.write_text(  # a nested table write_config does not write
        daemon.config_path.read_text() + "\n[store.streams.events]\nmax_bytes = 230\n"
    )
    daemon.start()
    await wait_online(mosquitto)
    with Requester(mosquitto.port, client_id="w", persistent=True).connect(EVENTS) as watch:
        await asyncio.to_thread(mosquitto.stop)
        for i in range(12):
            _emit(daemon, f"event-number-{i:02d}-padding"[:25])
        st = stream_status(daemon, "events")
        assert (st["depth"], st["dropped_full"], st["max_bytes"]) == (5, 7, 230)
        metrics = request(daemon.port, "GET", "/metrics").body.decode()
        assert 'wasmgate_store_dropped_total{reason="full",stream="events"} 7.0' in metrics
        assert 'wasmgate_store_depth{stream="events"} 5.0' in metrics
        await asyncio.to_thread(mosquitto.start)
        await until(lambda: len(watch.snapshot()) >= 5, "the kept events drained")
        await fenced(daemon, watch)  # the 7 dropped ones never come
        got = _payloads(_unfenced(watch.snapshot()), EVENTS)
    assert got == [f"event-number-{i:02d}-padding"[:25].encode() for i in range(7, 12)]


def test_a_corrupt_store_file_stops_the_start_with_one_line(tmp_path: Path) -> None:
    garbage = b"not a database at all" * 200
    store = tmp_path / "data" / "state" / "store.db"
    store.parent.mkdir(parents=True)
    store.write_bytes(garbage)
    daemon = Daemon(tmp_path, {})
    cmd = [sys.executable, "-m", "wasmgate", "serve", "--config", str(daemon.config_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2, proc.stderr
    (line,) = [x for x in proc.stderr.splitlines() if "store.db" in x]
    assert "not a usable SQLite database; move it aside" in line
    assert store.read_bytes() == garbage
