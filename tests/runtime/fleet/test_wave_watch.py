"""A wave's documents leave without a round trip each, and its wait looks at the gateways
whose report changed, not at every pending one on every message (issue 53). The check was
O(pending) per message, so a last wave of N gateways cost ~N^2/2 verdicts: 4 * 10^9 at
90,000 gateways, hours of CLI CPU; and each document waited for its own PUBACK, ~4 ms each
on a loaded machine, 40 s for a wave of 9,000.

Real mosquitto and the real `OperatorClient`; the reports are published one by one while
the wave waits, as gateways finishing one after the other do.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from tests.fixtures.mosquitto import Broker
from wasmgate.runtime.fleet import waves
from wasmgate.runtime.fleet.opclient import BrokerSettings, OperatorClient
from wasmgate.runtime.fleet.rollout import Outcome, Wanted
from wasmgate.runtime.fleet.status import Report
from wasmgate.runtime.fleet.waves import Row, WaveWatch

PREFIX = "wasmgate/v1"
N = 120
SERIAL = 7


def _report(gw: str) -> bytes:
    bundle = {"version": 2, "digest": None, "state": "applied", "error": None}
    return json.dumps({
        "format": "wasmgate-deployment/1", "gateway": gw, "groups": ["g1"],
        "serial": SERIAL, "state": "applied", "bundles": {"digits": bundle},
    }).encode()  # fmt: skip


def _publish_one_by_one(broker: Broker, names: list[str]) -> None:
    with OperatorClient(BrokerSettings(broker.host, broker.port)) as client:
        for gw in names:
            client.publish(f"{PREFIX}/{gw}/deployment", _report(gw))
            time.sleep(0.005)  # one wake-up of the waiting side per report


def test_each_report_is_judged_once_not_every_pending_gateway_per_message(
    mosquitto: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    verdict = waves._verdict  # noqa: SLF001 - the work counted is this function's

    def counting(report: Report | None, *args: object, **kw: bool) -> Outcome | None:
        calls.append(report.gateway if report is not None else "")
        return verdict(report, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(waves, "_verdict", counting)
    names = [f"gw-{i:03d}" for i in range(N)]
    rows = {gw: Row(gw, 1) for gw in names}
    with OperatorClient(BrokerSettings(mosquitto.host, mosquitto.port)) as client:
        client.collect([f"{PREFIX}/+/deployment"], 5)
        watch = WaveWatch(client, PREFIX, lambda _row: None)
        sender = threading.Thread(target=_publish_one_by_one, args=(mosquitto, names))
        sender.start()
        try:
            got = watch.wait(names, SERIAL, Wanted("digits", 2, "r"), 30, rows, final=True)
        finally:
            sender.join()
    assert got == dict.fromkeys(names, Outcome.APPLIED)
    # one look at each pending gateway when the wait starts, then one per report that came
    assert len(calls) <= 2 * N + 5, len(calls)


def test_a_wave_of_documents_is_published_and_retained_whole(mosquitto: Broker) -> None:
    """`publish_many` (a wave's documents, a rollout's clearings) puts more than paho's
    in-flight window on the wire before the first PUBACK and returns once each is acked:
    every one is retained, in the order given (the last of two on one topic wins)."""
    topics = [f"{PREFIX}/gw-{i:03d}/desired" for i in range(N * 3)]
    settings = BrokerSettings(mosquitto.host, mosquitto.port)
    with OperatorClient(settings) as client:
        client.publish_many([(t, t.encode()) for t in topics] + [(topics[0], b"last")])
    with OperatorClient(settings) as reader:
        held = reader.collect([f"{PREFIX}/+/desired"], 10)
    assert held == {t: t.encode() for t in topics} | {topics[0]: b"last"}
