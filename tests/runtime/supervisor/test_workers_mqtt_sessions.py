"""The broker sessions a gateway leaves behind when its worker count changes.

mosquitto hands a shared group's requests round-robin to its members' persistent sessions,
connected or not, and a persistent session keeps its subscriptions: so a gateway that
went from one process to workers would have its supervisor handed every request (the one
process's session, same client id), and one that went from 3 workers to 2 would leave a
third of the requests queued for a worker that never comes back. One data directory, one
real mosquitto, the count changed between starts as an operator would."""

from __future__ import annotations

import collections
import time
from pathlib import Path

import pytest

from tests.fixtures.daemon import Daemon
from tests.fixtures.mosquitto import Broker, running_broker
from tests.runtime.mqtt.requester import Requester
from tests.runtime.supervisor.test_workers_mqtt import until_mqtt_workers
from tests.runtime.supervisor.workerkit import SAMPLE, until_serving
from wasmgate.runtime.mqtt.sessions import FILE_NAME

pytestmark = pytest.mark.timeout(300)
REQ = "wasmgate/v1/gw-s/adapters/digits/req"


def start(root: Path, broker: Broker, count: int, started: list[Daemon]) -> Daemon:
    """The gateway with ``count`` workers, once it takes requests: its workers' connections
    up, or one process's subscriptions made (its retained ``online`` follows them)."""
    mqtt = {"host": "127.0.0.1", "port": broker.port, "gateway_id": "gw-s", "keepalive_s": 5}
    daemon = Daemon(root, {"workers": {"count": count}, "mqtt": mqtt}, ("--demo",))
    started.append(daemon)
    with Requester(broker.port).connect("wasmgate/v1/gw-s/status") as watch:
        daemon.start(timeout=240)
        if count > 1:
            until_serving(daemon, count)
            until_mqtt_workers(daemon, count)
        deadline = time.monotonic() + 60
        while all(r.payload != b"online" for r in watch.snapshot()):
            assert time.monotonic() < deadline, "the gateway never said online"
            time.sleep(0.05)
    return daemon


def record(root: Path) -> str:
    """The worker sessions the gateway last used (``--demo`` keeps its state in its own
    data folder)."""
    (found,) = root.rglob(FILE_NAME)
    return found.read_text().strip()


def answered(broker: Broker, tag: str, total: int) -> collections.Counter[bytes | None]:
    """``total`` requests; how many answers each got within 30 s."""
    with Requester(broker.port).connect(f"{tag}/replies") as dev:
        for i in range(total):
            dev.request(REQ, SAMPLE, response_topic=f"{tag}/replies", correlation=b"%d" % i)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(dev.snapshot()) < total:
            time.sleep(0.05)
        time.sleep(0.5)  # a second answer to any of them would arrive now
        return collections.Counter(r.correlation for r in dev.snapshot())


def test_changing_the_worker_count_leaves_no_session_that_takes_requests(
    tmp_path: Path,
) -> None:
    root = tmp_path / "gw"
    root.mkdir()
    started: list[Daemon] = []
    with running_broker(tmp_path / "mosquitto") as broker:
        try:
            one = start(root, broker, 1, started)  # a session with the request subscriptions
            assert set(answered(broker, "a", 5).values()) == {1}
            one.stop()

            three = start(root, broker, 3, started)
            got = answered(broker, "b", 30)
            card = three.get_json("/v1/status")["components"]["mqtt"]
            three.stop()
            assert (len(got), set(got.values())) == (30, {1})
            # Every request reached a worker, none the supervisor (its session was the one
            # process's).
            assert card["received"] == sum(int(w["received"]) for w in card["workers"])

            two = start(root, broker, 2, started)  # worker 2's session must not take a third
            got = answered(broker, "c", 30)
            two.stop()
            assert (len(got), set(got.values())) == (30, {1})
            assert record(root) == "2"

            one = start(root, broker, 1, started)
            time.sleep(2)  # the sessions of workers 0 and 1 end in the background
            got = answered(broker, "d", 10)
            one.stop()
            assert (len(got), set(got.values())) == (10, {1})
            assert record(root) == "0"
        finally:
            for daemon in started:
                daemon.stop()  # a stopped one: nothing to do
