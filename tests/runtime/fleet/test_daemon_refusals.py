"""Every bad fleet document is refused with its own error and changes nothing, whether it
comes over MQTT (retained, on the gateway's topic) or by ``PUT /v1/desired``."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.fixtures.daemon import Daemon
from tests.fixtures.mosquitto import Broker
from tests.fixtures.registry import Registry
from tests.runtime.fleet.daemonkit import (
    OWN,
    REPORT,
    Factory,
    Report,
    Site,
    desired,
    publish,
    put_desired,
    retained,
    settled,
    wait_report,
)
from tests.runtime.trustkit import echo
from wasmgate.runtime.fleet.state import peek_serial

Send = Callable[[bytes], None]


def bad_documents(site: Site, ref1: str, ref2: str) -> list[tuple[str, bytes]]:
    """(expected error class, document); the daemon has accepted serial 10 (probe v2)."""
    long_ago = datetime.now(UTC) - timedelta(days=3)
    probe2 = {"probe": (2, ref2)}
    return [
        ("FleetReplayError", site.document(9, {"probe": (2, ref2), "other": (1, ref1)})),
        ("FleetExpiredError", site.document(11, probe2, issued=long_ago)),
        ("FleetSignatureError", site.document(12, probe2, keys=[site.fk.signer])),
        ("FleetSignatureError", site.document(13, probe2, keys=[site.fk.root])),
        ("FleetScopeError", site.document(14, {**probe2, "evil": (1, ref1)})),
        ("FleetScopeError", site.document(15, probe2, gateways=["gw-other"])),
        ("FleetDowngradeError", site.document(16, {"probe": (1, ref1)})),
    ]


@pytest.mark.parametrize("transport", ["mqtt", "http"])
def test_each_bad_document_is_refused_with_its_error_and_changes_nothing(
    tmp_path: Path,
    mosquitto: Broker,
    registry: Registry,
    daemon_factory: Factory,
    transport: str,
) -> None:
    site = Site(tmp_path, mosquitto, registry)
    ref1, ref2 = site.push("probe", 1), site.push("probe", 2)
    daemon = daemon_factory(config=site.config(), name="gw")
    assert put_desired(daemon, site.document(10, {"probe": (2, ref2)}))[0] == 202
    wait_report(daemon, settled(10))
    before = desired(daemon)
    send = mqtt_sender(mosquitto) if transport == "mqtt" else http_sender(daemon)
    for error, doc in bad_documents(site, ref1, ref2):
        send(doc)
        report = wait_report(daemon, refused_with(error, doc))
        assert (report["serial"], report["state"]) == (10, "applied")
        assert echo(daemon, "probe") == (200, b"v2:hi")
        assert desired(daemon)["document"] == before["document"]
    if transport == "mqtt":  # the retained report says the same
        published = json.loads(retained(mosquitto, REPORT) or b"{}")
        assert published["refused"]["error"].startswith("FleetDowngradeError")
    assert "Traceback" not in daemon.log()


def refused_with(error: str, doc: bytes) -> Callable[[Report], bool]:
    """The report's ``refused`` names ``error`` for this document (by its serial)."""
    serial = peek_serial(doc)

    def check(report: Report) -> bool:
        refused = report["refused"]
        return (
            refused is not None
            and refused["serial"] == serial
            and refused["error"].startswith(f"{error}: ")
        )

    return check


def mqtt_sender(broker: Broker) -> Send:
    return lambda doc: publish(broker, OWN, doc)


def http_sender(daemon: Daemon) -> Send:
    def send(doc: bytes) -> None:
        status, body = put_desired(daemon, doc)
        assert status == 422, body
        assert json.loads(body)["error"].startswith("Fleet")  # the class names the check

    return send


def test_hostile_payloads_are_refused_and_the_daemon_keeps_applying(
    tmp_path: Path, mosquitto: Broker, registry: Registry, daemon_factory: Factory
) -> None:
    site = Site(tmp_path, mosquitto, registry)
    ref1 = site.push("probe", 1)
    daemon = daemon_factory(config=site.config(), name="gw")
    nested = b'{"payload_type": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    nan = b'{"payload_type": NaN, "payload": "", "signatures": []}'
    hostile = [b"not json", nested, nan, b"[]", b"{}", b"\xff\xfe"]
    for body in hostile:
        status, answer = put_desired(daemon, body)
        assert (status, json.loads(answer)["error"][:17]) == (422, "FleetFormatError:"), body[:40]
    status, _ = put_desired(daemon, b"{" + b" " * 300_000 + b"}")  # fleet.max_document_bytes
    assert status == 413
    for body in [*hostile, b"x" * 300_000]:
        publish(mosquitto, OWN, body)
    publish(mosquitto, OWN, site.document(1, {"probe": (1, ref1)}))
    assert wait_report(daemon, settled(1))["state"] == "applied"
    assert echo(daemon, "probe") == (200, b"v1:hi")
    assert "Traceback" not in daemon.log()
