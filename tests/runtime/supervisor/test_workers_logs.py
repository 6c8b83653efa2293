"""A client's mistakes logged as one gateway's with ``[workers] count = 2``: a 4xx answer
is logged at most once a minute per transport and status, an ignored MQTT request once a
minute per kind, a failing cloud once a minute per adapter, whichever worker saw it
(`wasmgate.runtime.ops.throttle_shared`), as one process logs them; per process, a gateway
of N workers wrote each line N times."""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.fixtures.daemon import Daemon
from tests.fixtures.mosquitto import Broker, running_broker
from tests.runtime.bundlekit import BundleKit
from tests.runtime.cloud.test_daemon_fallback import FALLBACK, FailingCloud
from tests.runtime.mqtt.requester import Requester
from tests.runtime.stack import host_profile_name
from tests.runtime.supervisor.test_workers_mqtt import until_mqtt_workers
from tests.runtime.supervisor.workerkit import call, cpu_ticks, serving, until_serving
from wasmgate.runtime.ops.throttle_shared import ROWS, SharedThrottle

pytestmark = pytest.mark.timeout(300)
NOT_FOUND = re.compile(r" wasmgate\.requests: http adapter nope\d* -> 404 ")
OVERSIZE = "exceeds mqtt.max_response_topic_bytes"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    with running_broker(tmp_path_factory.mktemp("mosquitto")) as broker:
        yield broker


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with serving(Daemon(tmp_path_factory.mktemp("workers-logs"), {"workers": {"count": 2}})) as d:
        yield d


@pytest.fixture(scope="module")
def mqtt_gateway(tmp_path_factory: pytest.TempPathFactory, broker: Broker) -> Iterator[Daemon]:
    mqtt = {"host": "127.0.0.1", "port": broker.port, "gateway_id": "gw-logs"}
    config = {"workers": {"count": 2}, "mqtt": mqtt}
    daemon = Daemon(tmp_path_factory.mktemp("workers-logs-mqtt"), config)
    daemon.start(timeout=240)
    try:
        until_serving(daemon, 2)
        until_mqtt_workers(daemon, 2)
        yield daemon
    finally:
        daemon.stop()


def test_a_client_error_is_logged_once_a_minute_for_the_whole_gateway(gateway: Daemon) -> None:
    pids = [w["pid"] for w in until_serving(gateway, 2)]
    before = [cpu_ticks(p) for p in pids]
    # Fresh connections each: the kernel spreads them over both workers' sockets.
    statuses = [call(gateway, f"/v1/adapters/nope{i}", b"{}") for i in range(200)]
    assert statuses == [404] * 200
    used = [cpu_ticks(p) - b for p, b in zip(pids, before, strict=True)]
    assert min(used) >= 2, f"one worker answered (almost) nothing: CPU ticks {used}"
    assert gateway.get_json("/v1/status")["errors"]["total"] >= 200  # every one kept
    assert len(NOT_FOUND.findall(gateway.log())) == 1, gateway.log()


def test_an_ignored_mqtt_request_is_logged_once_a_minute_for_the_whole_gateway(
    mqtt_gateway: Daemon, broker: Broker
) -> None:
    """Requests whose response topic is over the cap are refused and counted each; the
    broker hands the shared subscription's messages to the workers in turn, so both see
    them, and the gateway writes the warning once."""
    topic = "wasmgate/v1/gw-logs/adapters/nope/req"
    with Requester(broker.port).connect("replies/#") as dev:
        for i in range(100):
            dev.request(
                topic, b"{}", response_topic="replies/" + "x" * 60_000, correlation=b"%d" % i
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            card = mqtt_gateway.get_json("/v1/status")["components"]["mqtt"]
            if card["oversize_refused"] >= 100:
                break
            time.sleep(0.1)
    assert card["oversize_refused"] == 100, card
    assert all(w["received"] > 0 for w in card["workers"]), card  # both workers saw some
    assert mqtt_gateway.log().count(OVERSIZE) == 1, mqtt_gateway.log()


def test_a_failing_cloud_is_logged_once_a_minute_for_the_whole_gateway(
    tmp_path: Path, daemon_factory: Callable[..., Daemon]
) -> None:
    """The guest asks for the cloud, the cloud fails: each worker serves the weak local
    answer, and the gateway writes "cloud fallback failed" once, not once per worker."""
    kit = BundleKit(tmp_path / "kit")
    bundle = kit.build("probe", 7, tag="edge", sections={"fallback": FALLBACK})
    with FailingCloud() as cloud:
        config = {
            "paths": {"trust_file": kit.save_trust(tmp_path / "trust.json")},
            "profile": host_profile_name(),
            "cloud": {"url": cloud.url},
            "workers": {"count": 2},
        }
        (tmp_path / "edge" / "data" / "bundles").mkdir(parents=True)
        bundle.rename(tmp_path / "edge" / "data" / "bundles" / bundle.name)
        edge = daemon_factory(config=config, name="edge")
        pids = [w["pid"] for w in until_serving(edge, 2)]
        before = [cpu_ticks(p) for p in pids]
        answers = [_post(f"{edge.url}/v1/adapters/probe", b"F") for _ in range(100)]
        used = [cpu_ticks(p) - b for p, b in zip(pids, before, strict=True)]
        assert cloud.calls >= 1
    assert answers == [b"edge:local"] * 100
    assert min(used) >= 2, f"one worker answered (almost) nothing: CPU ticks {used}"
    assert edge.log().count("cloud fallback failed") == 1, edge.log()


def _post(url: str, body: bytes) -> bytes:
    """A fresh connection each: the kernel spreads them over both workers' sockets."""
    with urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=30) as r:
        return bytes(r.read())


def test_the_table_is_one_decision_for_every_process(tmp_path: Path) -> None:
    """Two views of one file (two processes' ``open``): one line per period, the next one
    carries how many were left out in either."""
    path = tmp_path / "log-limits"
    one, other = SharedThrottle(path), SharedThrottle(path)
    try:
        assert one.admit("http 404", 100.0, 60.0) == 0
        assert other.admit("http 404", 101.0, 60.0) is None
        assert one.admit("http 404", 159.0, 60.0) is None
        assert other.admit("mqtt 404", 101.0, 60.0) == 0  # keys apart
        assert other.admit("http 404", 160.0, 60.0) == 2
        assert one.admit("http 404", 161.0, 60.0) is None
    finally:
        one.close()
        other.close()
    assert one.admit("http 404", 162.0, 60.0) == 0  # closed: logged, never lost


def test_a_full_table_logs_as_one_process_would(tmp_path: Path) -> None:
    table = SharedThrottle(tmp_path / "log-limits")
    try:
        assert all(table.admit(f"key {i}", 1.0, 60.0) == 0 for i in range(ROWS))
        assert table.admit("one more", 1.0, 60.0) == 0
        assert table.admit("one more", 2.0, 60.0) == 0  # not counted: no row for it
        assert table.admit("key 0", 2.0, 60.0) is None
    finally:
        table.close()
