"""A fleet document that fails verification never shadows one that passes (real daemon).

Precedence (the gateway's own topic over the groups, the highest serial among groups) is
decided among the documents that verify for this gateway. Each test puts a refused document
where the old rule would have chosen it (the gateway's topic; a group topic with a claimed
serial of 10⁹; a refused ``PUT /v1/desired`` or desired file) and checks that a valid one
still applies, that requests answer from it, and that the refusal is reported.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Callable
from pathlib import Path

import nacl.signing

from tests.fixtures.daemon import Daemon
from tests.fixtures.mosquitto import Broker
from tests.fixtures.registry import Registry
from tests.runtime.fleet.daemonkit import (
    GROUP_TOPIC,
    OWN,
    PREFIX,
    Factory,
    Report,
    Site,
    publish,
    put_desired,
    settled,
    wait_report,
)
from tests.runtime.trustkit import echo

G2 = "g2"
G2_TOPIC = f"{PREFIX}/fleet/{G2}/desired"


def stranger() -> list[nacl.signing.SigningKey]:
    """A key no trust file names: what any client with publish rights could sign with."""
    return [nacl.signing.SigningKey.generate()]


def refusals(daemon: Daemon, error: str) -> float:
    with urllib.request.urlopen(f"{daemon.url}/metrics", timeout=10) as r:
        text = r.read().decode()
    series = f'wasmgate_fleet_refusals_total{{error="{error}"}} '
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(series))


def refused(error: str, serial: int) -> Callable[[Report], bool]:
    """The report's ``refused`` is ``error`` for the document of ``serial``."""

    def check(report: Report) -> bool:
        got = report["refused"]
        return got is not None and got["serial"] == serial and got["error"].startswith(error)

    return check


def test_a_refused_gateway_document_then_a_valid_group_document_applies(
    tmp_path: Path, mosquitto: Broker, registry: Registry, daemon_factory: Factory
) -> None:
    site = Site(tmp_path, mosquitto, registry)
    v1, v2 = site.push("probe", 1), site.push("probe", 2)
    publish(mosquitto, GROUP_TOPIC, site.document(1, {"probe": (1, v1)}))
    daemon = daemon_factory(config=site.config(), name="gw")
    assert wait_report(daemon, settled(1))["state"] == "applied"
    forged = site.document(99, {"probe": (2, v2)}, gateways=["gw-1"], keys=stranger())
    publish(mosquitto, OWN, forged)  # retained on the gateway's own topic
    report = wait_report(daemon, refused("FleetSignatureError", 99))
    assert (report["serial"], report["state"]) == (1, "applied")
    assert refusals(daemon, "FleetSignatureError") == 1
    publish(mosquitto, GROUP_TOPIC, site.document(30, {"probe": (2, v2)}))
    assert wait_report(daemon, settled(30))["state"] == "applied"  # no restart needed
    assert echo(daemon, "probe") == (200, b"v2:hi")
    assert refusals(daemon, "FleetSignatureError") == 1  # reported once, not per pass
    assert "Traceback" not in daemon.log()


def test_a_forged_huge_serial_on_a_second_group_does_not_beat_a_valid_group_document(
    tmp_path: Path, mosquitto: Broker, registry: Registry, daemon_factory: Factory
) -> None:
    site = Site(tmp_path, mosquitto, registry)
    v1, v2 = site.push("probe", 1), site.push("probe", 2)
    forged = site.document(10**9, {"probe": (1, v1)}, group=G2, keys=stranger())
    publish(mosquitto, G2_TOPIC, forged)
    publish(mosquitto, GROUP_TOPIC, site.document(5, {"probe": (1, v1)}))
    config = site.config()
    config["fleet"] = {**config["fleet"], "groups": ["g1", G2]}
    daemon = daemon_factory(config=config, name="gw")
    report = wait_report(daemon, settled(5))
    assert report["state"] == "applied"
    assert echo(daemon, "probe") == (200, b"v1:hi")
    wait_report(daemon, refused("FleetSignatureError", 10**9))
    publish(mosquitto, GROUP_TOPIC, site.document(6, {"probe": (2, v2)}))  # still followed
    assert wait_report(daemon, settled(6))["state"] == "applied"
    assert echo(daemon, "probe") == (200, b"v2:hi")


def test_a_valid_gateway_document_still_wins_over_a_valid_group_document(
    tmp_path: Path, mosquitto: Broker, registry: Registry, daemon_factory: Factory
) -> None:
    site = Site(tmp_path, mosquitto, registry)
    v1, v2 = site.push("probe", 1), site.push("probe", 2)
    publish(mosquitto, OWN, site.document(3, {"probe": (1, v1)}, gateways=["gw-1"]))
    publish(mosquitto, GROUP_TOPIC, site.document(8, {"probe": (2, v2)}))
    daemon = daemon_factory(config=site.config(), name="gw")
    report = wait_report(daemon, settled(3))
    assert report["state"] == "applied"
    assert echo(daemon, "probe") == (200, b"v1:hi")
    assert report["refused"] is None  # the group document is not refused, only outranked
    publish(mosquitto, OWN, b"")  # the operator clears the gateway's own document
    assert wait_report(daemon, settled(8))["state"] == "applied"
    assert echo(daemon, "probe") == (200, b"v2:hi")


def test_refused_documents_by_put_and_by_file_do_not_block_a_valid_one(
    tmp_path: Path, mosquitto: Broker, registry: Registry, daemon_factory: Factory
) -> None:
    site = Site(tmp_path, mosquitto, registry)
    v1, v2 = site.push("probe", 1), site.push("probe", 2)
    desired_file = tmp_path / "desired.json"
    desired_file.write_bytes(site.document(10**9, {"probe": (1, v1)}, keys=stranger()))
    config = site.config()
    config["fleet"] = {**config["fleet"], "desired_file": desired_file}
    daemon = daemon_factory(config=config, name="gw")
    wait_report(daemon, refused("FleetSignatureError", 10**9))
    publish(mosquitto, GROUP_TOPIC, site.document(4, {"probe": (1, v1)}))
    assert wait_report(daemon, settled(4))["state"] == "applied"
    status, body = put_desired(daemon, site.document(10**8, {"probe": (2, v2)}, keys=stranger()))
    assert (status, b"FleetSignatureError" in body) == (422, True)
    publish(mosquitto, GROUP_TOPIC, site.document(5, {"probe": (2, v2)}))
    assert wait_report(daemon, settled(5))["state"] == "applied"
    assert echo(daemon, "probe") == (200, b"v2:hi")
    assert put_desired(daemon, site.document(6, {"probe": (2, v2)}))[0] == 202  # PUT still works
    assert wait_report(daemon, settled(6))["state"] == "applied"
