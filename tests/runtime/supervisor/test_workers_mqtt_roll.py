"""MQTT requests while the workers change, with ``[workers] count = 2``: a QoS 1 stream
goes on through a SIGHUP, a roll (a removal through the API replaces every worker) and a
restart of the broker (persistent sessions on both sides); every request is answered.

The broker restart is a known difference (the 2-minute soak with two workers lost MQTT
answers): mosquitto 2.0.11 restores the workers' persistent sessions but not their shared
subscriptions, so what the device publishes before the workers have subscribed again is
dropped (PUBACK reason 16, no matching subscribers, in the broker's log); one process's
plain subscription is restored with its session (the same stream with
``WASMGATE_WORKERS__COUNT=1`` is answered in full). Without a reconnect spread the workers
are back before the device, and nothing is lost: what docs/deploy.md advises when the
broker serves this gateway alone."""

from __future__ import annotations

import signal
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.daemon import Daemon
from tests.fixtures.mosquitto import Broker
from tests.runtime.mqtt.requester import Requester
from tests.runtime.supervisor.test_workers_mqtt import until_mqtt_workers
from tests.runtime.supervisor.workerkit import SAMPLE, TOKEN, until_serving

pytestmark = pytest.mark.timeout(300)
REQ = "wasmgate/v1/gw-roll/adapters/digits/req"


@pytest.fixture
def gateway(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[Daemon, Broker]]:
    """A 2-worker gateway on a broker of its own; ``request.param``: more ``[mqtt]`` keys."""
    broker = Broker(tmp_path / "mosquitto")
    broker.start()
    mqtt = {"host": "127.0.0.1", "port": broker.port, "gateway_id": "gw-roll"}
    mqtt.update(getattr(request, "param", {}))
    config = {"workers": {"count": 2}, "mqtt": mqtt, "http": {"management_token": TOKEN}}
    (tmp_path / "gw").mkdir()
    daemon = Daemon(tmp_path / "gw", config, ("--demo",))
    try:
        daemon.start(timeout=240)
        until_serving(daemon, 2)
        until_mqtt_workers(daemon, 2)
        yield daemon, broker
    finally:
        daemon.stop()
        broker.stop()


def stream(dev: Requester, total: int, fault_at: int, fault: object) -> None:
    for i in range(total):
        if i == fault_at:
            fault()  # type: ignore[operator]
        dev.request(REQ, SAMPLE, response_topic="replies/roll", correlation=b"r%d" % i)
        time.sleep(0.02)


BROKER_RESTART_LOSES = pytest.mark.xfail(
    # Not strict: whether a request lands in the window before the workers subscribe again
    # is a race (most runs lose some; a CI run lost none and the strict mark failed it).
    strict=False,
    reason="the broker keeps no shared subscription over a restart",
)


@pytest.mark.parametrize(
    "fault", ["sighup", "roll", pytest.param("broker", marks=BROKER_RESTART_LOSES)]
)
def test_a_qos1_stream_through_a_change_of_the_workers_is_answered(
    gateway: tuple[Daemon, Broker], fault: str
) -> None:
    missing, card = _through(*gateway, fault)
    assert not missing, (sorted(missing), card)


@pytest.mark.parametrize("gateway", [{"reconnect_spread_s": 0}], indirect=True)
def test_without_a_reconnect_spread_a_broker_restart_loses_nothing(
    gateway: tuple[Daemon, Broker],
) -> None:
    """What docs/deploy.md tells an operator whose broker serves this gateway alone: with
    ``mqtt.reconnect_spread_s = 0`` the workers are back and subscribed before a device
    (paho's 1 s) publishes again. Measured with the default 5 s: 64, 127, 0 and 0 of 200
    lost in four runs; with 0: none in seven."""
    missing, card = _through(*gateway, "broker")
    assert not missing, (sorted(missing), card)


def _through(daemon: Daemon, broker: Broker, fault: str) -> tuple[set[bytes], object]:
    """The correlation data of the requests of a QoS 1 stream left unanswered when
    ``fault`` happens a third of the way through, and the MQTT card then."""
    assert daemon.proc is not None
    proc = daemon.proc

    def change() -> None:
        if fault == "sighup":
            proc.send_signal(signal.SIGHUP)
        elif fault == "broker":
            broker.restart()
        else:
            req = urllib.request.Request(
                f"{daemon.url}/v1/bundles/digits-pipeline",
                method="DELETE",
                headers={"Authorization": f"Bearer {TOKEN}"},
            )
            with urllib.request.urlopen(req, timeout=120) as answer:
                assert answer.status == 200

    total = 200
    with Requester(broker.port, client_id="dev-roll", persistent=True).connect(
        "replies/roll"
    ) as dev:
        stream(dev, total, 60, change)
        deadline = time.monotonic() + 45
        while time.monotonic() < deadline:
            got = {r.correlation for r in dev.snapshot()}
            if len(got) >= total:
                break
            time.sleep(0.2)
    missing = {b"r%d" % i for i in range(total)} - {r.correlation for r in dev.snapshot()}
    return missing, daemon.get_json("/v1/status")["components"]["mqtt"]
