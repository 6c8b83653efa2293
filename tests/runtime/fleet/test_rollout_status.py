"""``wasmgate fleet status``: the table and ``--json`` from retained reports, drift, junk."""

from __future__ import annotations

import json

import pytest

from tests.runtime.fleet.conftest import GROUP, PREFIX, Fleet
from wasmgate.runtime.cli import main
from wasmgate.runtime.fleet.opclient import OperatorClient


def _fails_v1_on_gw002(gw: str, _name: str, version: int) -> str | None:
    return "selftest failed: wrong answer" if gw == "gw-002" and version == 1 else None


def _status(fleet: Fleet, capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    broker = f"{fleet.broker.host}:{fleet.broker.port}"
    assert main(["fleet", "status", "--broker", broker, "--wait", "5", *extra]) == 0
    return capsys.readouterr().out


def _junk(fleet: Fleet) -> None:
    """A report that is not JSON, and one that claims to be another gateway."""
    lying = {"format": "wasmgate-deployment/1", "gateway": "gw-000", "groups": [GROUP]}
    with OperatorClient(fleet.settings()) as client:
        client.publish(f"{PREFIX}/gw-junk/deployment", b"\xff{not json")
        client.publish(f"{PREFIX}/gw-liar/deployment", json.dumps(lying).encode())


def test_status_table_shows_versions_drift_and_unreadable_reports(
    fleet: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet.start(4, failing=_fails_v1_on_gw002)
    _junk(fleet)
    lines = _status(fleet, capsys, "--group", GROUP).splitlines()
    assert lines[0].split() == ["gateway", "state", "serial", "last", "seen", "drift", "digits"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert set(rows) == {"gw-000", "gw-001", "gw-002", "gw-003", "gw-junk", "gw-liar"}
    assert rows["gw-000"].split()[1:3] == ["applied", "1"]
    assert rows["gw-000"].split()[-2:] == ["no", "v1"]
    assert "failed" in rows["gw-002"]
    assert " yes " in rows["gw-002"]
    assert "unreadable report" in rows["gw-junk"]
    assert "unreadable report" in rows["gw-liar"]


def test_status_json_and_group_filter(fleet: Fleet, capsys: pytest.CaptureFixture[str]) -> None:
    fleet.start(3, failing=_fails_v1_on_gw002)
    data = json.loads(_status(fleet, capsys, "--json"))
    gateways = {g["gateway"]: g for g in data["gateways"]}
    assert set(gateways) == {"gw-000", "gw-001", "gw-002"}
    assert gateways["gw-000"]["drift"] is False
    assert gateways["gw-000"]["bundles"]["digits"]["version"] == 1
    assert gateways["gw-002"]["drift"] is True
    assert gateways["gw-002"]["bundles"]["digits"]["error"] == "selftest failed: wrong answer"
    assert gateways["gw-001"]["time"] is not None
    assert data["desired"][GROUP]["serial"] == 1
    other = json.loads(_status(fleet, capsys, "--json", "--group", "other"))
    assert other["gateways"] == []
    assert other["desired"] == {}


def test_status_with_no_broker_fails_clearly(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.fixtures.net import free_port  # noqa: PLC0415

    assert main(["fleet", "status", "--broker", f"127.0.0.1:{free_port()}"]) == 1
    assert "broker 127.0.0.1" in capsys.readouterr().err
    assert main(["fleet", "status", "--broker", "nocolon"]) == 2
