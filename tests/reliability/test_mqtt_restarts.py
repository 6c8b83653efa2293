"""QoS 1 streams through a real daemon while the daemon is SIGKILLed and restarted.

The bridge alone (in process, fake service) is covered by
``tests/runtime/mqtt/test_reliability.py::test_broker_restart_mid_stream_every_request_answered``;
here the real ``wasmgate serve`` process either dies without warning (SIGKILL: no drain,
no DISCONNECT) mid-stream and starts again on the same data directory and MQTT client id,
or keeps running while mosquitto restarts under it. Requests published while the daemon
is down wait in its persistent session at the broker.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.fixtures.benchkit import BenchKit
from tests.fixtures.daemon import Daemon
from tests.fixtures.mosquitto import Broker
from tests.reliability.conftest import digits_payload
from tests.runtime.mqtt.requester import Reply, Requester

ROOT = "wasmgate/v1/gw-rel"
TOPIC = f"{ROOT}/adapters/digits/req"
TOPIC_FILTER = f"{ROOT}/adapters/+/req"  # the daemon's subscription that TOPIC matches
REPLIES = "devices/d1/replies"


def _mqtt(broker: Broker) -> dict[str, object]:
    return {
        "host": "127.0.0.1",
        "port": broker.port,
        "gateway_id": "gw-rel",
        "client_id": "wasmgate-rel",
        "reconnect_max_s": 0.5,
        "reconnect_spread_s": 0,
    }


def _by_correlation(replies: list[Reply]) -> dict[bytes, list[Reply]]:
    out: dict[bytes, list[Reply]] = collections.defaultdict(list)
    for r in replies:
        if r.topic == REPLIES and r.correlation is not None:
            out[r.correlation].append(r)
    return out


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fault", ["daemon-sigkill", "broker-restart"])
async def test_qos1_stream_survives(
    fault: str, kit: BenchKit, mosquitto: Broker, daemon_factory: Callable[..., Daemon]
) -> None:
    """120 QoS 1 requests at ~100/s; after 40 the daemon is SIGKILLed (restarted after 80),
    or the broker is restarted (persistent sessions on both sides).

    Proves: every request is answered (none lost, including the ones in flight at the
    fault and those published while no daemon ran), every answer is 200 and correct, and
    every extra copy is accounted for. QoS 1 is at least once, so copies are legitimate
    only where a message was in flight at the fault, and each kind is counted:
    - broker restart: the daemon works each request once (its ``answered`` counter is
      exact), so every extra copy is a re-sent message: one the broker redelivers to the
      requester (DUP set), or an answer whose PUBACK died with the broker, re-sent by the
      daemon's client (its ``resent`` counter);
    - SIGKILL: a request the dead daemon had answered but not yet acknowledged is
      redelivered (DUP set) and answered again by the new process, which counts it in
      ``redelivered``; no other copy may appear.
    """
    total, kill_at, restart_at = 120, 40, 80
    daemon = daemon_factory(config=kit.config({"mqtt": _mqtt(mosquitto)}))
    body = digits_payload()
    dev = Requester(mosquitto.port, client_id="dev-rel", persistent=True).connect(REPLIES)
    try:
        # The warm-up is published once: before the daemon's first SUBSCRIBE the broker
        # drops it (no session yet), which a loaded machine made happen once in five runs.
        wait_gateway_subscribed(mosquitto, daemon)
        await dev_wait_online(dev, body)
        for i in range(total):
            if i == kill_at:
                daemon.kill() if fault == "daemon-sigkill" else mosquitto.restart()
            if i == restart_at and fault == "daemon-sigkill":
                daemon.start()
            dev.request(TOPIC, body, response_topic=REPLIES, correlation=f"r{i}".encode())
            time.sleep(0.01)
        await dev.wait_for(total + 1, timeout=60)
        time.sleep(1.0)  # quiet window: a late redelivered answer after the fault
        answers = _by_correlation(dev.snapshot())
    finally:
        dev.close()
    wanted = {f"r{i}".encode() for i in range(total)}
    assert wanted - set(answers) == set(), "lost requests"
    reference = answers[b"r0"][0].payload
    for corr in wanted:
        replies = answers[corr]
        assert {r.props.get("status") for r in replies} == {"200"}, (corr, replies[0].payload)
        assert {r.payload for r in replies} == {reference}, corr
    _assert_copies_accounted(fault, answers, daemon.get_json("/v1/status")["components"]["mqtt"])
    assert "Traceback" not in daemon.log()


def _assert_copies_accounted(
    fault: str, answers: dict[bytes, list[Reply]], mqtt: dict[str, Any]
) -> None:
    extra = sum(len(replies) - 1 for replies in answers.values())
    redelivered_to_device = sum(r.dup for replies in answers.values() for r in replies)
    counts = (
        f"{extra} extra copies; device got {redelivered_to_device} with DUP; daemon: "
        f"answered {mqtt['answered']}, resent {mqtt['client']['resent']}, "
        f"redelivered {mqtt['redelivered']}"
    )
    if fault == "broker-restart":
        # One process throughout: every request (and the warm-up) worked exactly once.
        assert mqtt["answered"] == len(answers), counts
        assert extra <= redelivered_to_device + mqtt["client"]["resent"], counts
    else:
        # The new process's counters: what it answered again after the dead one.
        assert redelivered_to_device == 0, counts
        assert extra <= mqtt["redelivered"], counts


async def dev_wait_online(dev: Requester, body: bytes) -> None:
    """One request answered: the daemon's subscriptions are in place."""
    dev.request(TOPIC, body, response_topic=REPLIES, correlation=b"warm-up")
    await dev.wait_for(1, timeout=30)


def wait_gateway_subscribed(broker: Broker, daemon: Daemon) -> None:
    """Until the gateway's request subscription is in place: the daemon's own, or, with
    data-plane workers (``[workers] count`` > 1), every worker's share of it (client id
    ``<client_id>-w<i>``, group ``wasmgate-<gateway_id>``: docs/deploy.md "CPUs")."""
    workers = daemon.get_json("/v1/status")["components"].get("workers", {})
    count = int(workers.get("count", 1))
    if count == 1:
        broker.wait_subscribed("wasmgate-rel", TOPIC_FILTER, timeout=30)
    for i in range(count if count > 1 else 0):
        shared = f"$share/wasmgate-gw-rel/{TOPIC_FILTER}"
        broker.wait_subscribed(f"wasmgate-rel-w{i}", shared, timeout=30)
