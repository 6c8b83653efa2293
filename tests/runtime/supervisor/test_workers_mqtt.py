"""MQTT on a real gateway with ``[workers] count = 2`` behind a real mosquitto: the workers
share the gateway's request topics (an MQTT 5 shared subscription: mosquitto hands the
requests round-robin to its members), the supervisor keeps the gateway's status, metadata
and fleet topics, and a request delivered twice is answered once whichever worker each
copy reaches (`wasmgate.runtime.mqtt.dedupe_shared`)."""

from __future__ import annotations

import collections
import os
import signal
import time
from collections.abc import Iterator

import pytest

from tests.fixtures.daemon import Daemon
from tests.fixtures.mosquitto import Broker, running_broker
from tests.runtime.mqtt.requester import Reply, Requester
from tests.runtime.supervisor.workerkit import (
    SAMPLE,
    cpu_ticks,
    serving,
    until_replaced,
    until_serving,
)

pytestmark = pytest.mark.timeout(300)
ROOT = "wasmgate/v1/gw-w"
REQ = f"{ROOT}/adapters/digits/req"
MQTT_REQUESTS = (
    'wasmgate_requests_total{kind="adapter",name="digits",source="local",transport="mqtt"}'
)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    with running_broker(tmp_path_factory.mktemp("mosquitto")) as broker:
        yield broker


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, broker: Broker) -> Iterator[Daemon]:
    mqtt = {"host": "127.0.0.1", "port": broker.port, "gateway_id": "gw-w", "keepalive_s": 5}
    config = {"workers": {"count": 2}, "mqtt": mqtt}
    with serving(Daemon(tmp_path_factory.mktemp("workers-mqtt"), config, ("--demo",))) as daemon:
        until_mqtt_workers(daemon, 2)
        yield daemon


def until_mqtt_workers(daemon: Daemon, count: int, timeout: float = 90.0) -> dict[str, object]:
    """The gateway's MQTT card once ``count`` worker connections are up."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        card: dict[str, object] = daemon.get_json("/v1/status")["components"]["mqtt"]
        workers = card.get("workers") or []
        assert isinstance(workers, list)
        if sum(1 for w in workers if w["connected"]) == count:
            return card
        time.sleep(0.1)
    raise TimeoutError(f"worker MQTT connections not up: {card}")


def answers(dev: Requester, topic: str, wanted: set[bytes], timeout: float) -> list[Reply]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = [r for r in dev.snapshot() if r.topic == topic]
        if {r.correlation for r in got} >= wanted:
            time.sleep(0.5)  # a second answer to any of them would arrive now
            return [r for r in dev.snapshot() if r.topic == topic]
        time.sleep(0.02)
    seen = {r.correlation for r in dev.snapshot() if r.topic == topic}
    raise TimeoutError(f"{len(seen)} of {len(wanted)} answered")


def test_the_workers_share_the_requests_and_the_gateway_counts_them_once(
    gateway: Daemon, broker: Broker
) -> None:
    pids = [w["pid"] for w in until_serving(gateway, 2)]
    ticks = [cpu_ticks(p) for p in pids]
    before = gateway.metric(MQTT_REQUESTS)
    received = int(str(until_mqtt_workers(gateway, 2)["received"]))
    with Requester(broker.port).connect("share/replies") as dev:
        wanted = {str(i).encode() for i in range(60)}
        for corr in sorted(wanted):
            dev.request(REQ, SAMPLE, response_topic="share/replies", correlation=corr)
        got = answers(dev, "share/replies", wanted, 60)
    assert sorted(r.correlation or b"" for r in got) == sorted(wanted)  # each once
    assert all(b'"digit": 0' in r.payload or b'"digit":0' in r.payload for r in got)
    assert gateway.metric(MQTT_REQUESTS) - before == 60
    card = until_mqtt_workers(gateway, 2)
    assert int(str(card["received"])) - received == 60
    used = [cpu_ticks(p) - t for p, t in zip(pids, ticks, strict=True)]
    assert min(used) >= 2, f"one worker took (almost) no MQTT request: CPU ticks {used}"
    # The supervisor's connection subscribes to no request topic: it is the gateway's voice.
    assert card["client"]["connected"]  # type: ignore[index]


def test_a_request_delivered_twice_is_answered_once_whichever_worker_gets_each_copy(
    gateway: Daemon, broker: Broker
) -> None:
    """Each request is published twice back to back (a device retrying, or the broker
    redelivering): round-robin sends the two copies to different workers. One answer each."""
    dupes = int(str(until_mqtt_workers(gateway, 2)["duplicates"]))
    with Requester(broker.port).connect("twice/replies") as dev:
        wanted = {f"t{i}".encode() for i in range(40)}
        for corr in sorted(wanted):
            for _ in range(2):
                dev.request(REQ, SAMPLE, response_topic="twice/replies", correlation=corr)
        got = answers(dev, "twice/replies", wanted, 60)
    counts = collections.Counter(r.correlation for r in got)
    assert set(counts.values()) == {1}, counts.most_common(3)
    assert int(str(until_mqtt_workers(gateway, 2)["duplicates"])) - dupes == 40


def test_a_killed_worker_loses_no_mqtt_request(gateway: Daemon, broker: Broker) -> None:
    """SIGKILL one worker mid-stream: what it had not acknowledged comes back to its next
    process (its persistent session) or was answered already (the shared table says so):
    every request answered, none twice."""
    pid = until_serving(gateway, 2)[0]["pid"]
    with Requester(broker.port).connect("kill/replies") as dev:
        wanted = {f"k{i}".encode() for i in range(80)}
        for n, corr in enumerate(sorted(wanted)):
            if n == 30:
                os.kill(int(str(pid)), signal.SIGKILL)
            dev.request(REQ, SAMPLE, response_topic="kill/replies", correlation=corr)
            time.sleep(0.005)
        until_replaced(gateway, pid, 30)
        got = answers(dev, "kill/replies", wanted, 90)
    counts = collections.Counter(r.correlation for r in got)
    assert set(counts) == wanted
    assert max(counts.values()) == 1, counts.most_common(3)


def test_the_gateway_status_and_metadata_come_from_one_connection(
    gateway: Daemon, broker: Broker
) -> None:
    """Retained ``status`` and model metadata are the supervisor's (a worker's connection
    has no will: a worker's restart never marks the gateway offline)."""
    with Requester(broker.port).connect(f"{ROOT}/status", f"{ROOT}/adapters/+/metadata") as dev:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(dev.snapshot()) < 2:
            time.sleep(0.05)
        got = dev.snapshot()
    assert [r.payload for r in got if r.topic.endswith("/status")] == [b"online"]
    assert any(r.topic == f"{ROOT}/adapters/digits/metadata" for r in got)
