"""The ``wasmgate fleet`` command line: ``status`` (table, ``--json``, drift, junk reports) and
``rollout`` (exit codes, the final table) against simulated gateways."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.runtime.fleet.conftest import GROUP, PREFIX, Fleet, ref
from wasmgate.runtime.cli import fleet as fleet_cli
from wasmgate.runtime.cli import main
from wasmgate.runtime.fleet.driver import RolloutResult
from wasmgate.runtime.fleet.opclient import OperatorClient
from wasmgate.runtime.fleet.rollout import Wanted
from wasmgate.runtime.fleet.waves import Row
from wasmgate.signing.keys import write_private_key


def _fails_v1_on_gw002(gw: str, _name: str, version: int) -> str | None:
    return "selftest failed: wrong answer" if gw == "gw-002" and version == 1 else None


def _status(fleet: Fleet, capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    broker = f"{fleet.broker.host}:{fleet.broker.port}"
    assert main(["fleet", "status", "--broker", broker, "--wait", "5", *extra]) == 0
    return capsys.readouterr().out


def _junk(fleet: Fleet) -> None:
    """A report that is not JSON, one that claims to be another gateway, and the report of
    a daemon that has had no document yet (state and serial null)."""
    lying: dict[str, object] = {
        "format": "wasmgate-deployment/1",
        "gateway": "gw-000",
        "groups": [GROUP],
    }
    with OperatorClient(fleet.settings()) as client:
        client.publish(f"{PREFIX}/gw-junk/deployment", b"\xff{not json")
        client.publish(f"{PREFIX}/gw-liar/deployment", json.dumps(lying).encode())
        fresh = lying | {"gateway": "gw-new", "serial": None, "state": None, "bundles": {}}
        client.publish(f"{PREFIX}/gw-new/deployment", json.dumps(fresh).encode())


def test_status_table_shows_versions_drift_and_unreadable_reports(
    fleet: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet.start(4, failing=_fails_v1_on_gw002)
    _junk(fleet)
    lines = _status(fleet, capsys, "--group", GROUP).splitlines()
    assert lines[0].split() == ["gateway", "state", "serial", "last", "seen", "drift", "digits"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert set(rows) == {"gw-000", "gw-001", "gw-002", "gw-003", "gw-junk", "gw-liar", "gw-new"}
    assert rows["gw-new"].split() == ["gw-new", "-", "-", "-", "yes", "-"]
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
    broker = f"{fleet.broker.host}:{fleet.broker.port}"
    for extra in ([], ["--json"]):  # a group nobody reports is a typo, not an empty table
        argv = ["fleet", "status", "--broker", broker, "--wait", "2", "--group", "line3"]
        assert main([*argv, *extra]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert f"no gateway reports group 'line3' under {PREFIX}/" in captured.err
        assert f"(groups reported: {GROUP})" in captured.err


def test_status_with_no_broker_fails_clearly(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.fixtures.net import free_port  # noqa: PLC0415

    assert main(["fleet", "status", "--broker", f"127.0.0.1:{free_port()}"]) == 1
    assert "broker 127.0.0.1" in capsys.readouterr().err
    assert main(["fleet", "status", "--broker", "nocolon"]) == 2


def _rollout_cli(fleet: Fleet, key: Path, *extra: str) -> int:
    broker = f"{fleet.broker.host}:{fleet.broker.port}"
    argv = ["fleet", "rollout", "--broker", broker, "--group", GROUP, "--key", str(key)]
    return main([*argv, *extra, "127.0.0.1:5000/wasmgate/digits:2"])


@pytest.fixture
def cli_key(tmp_path: Path, fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fleet key as a file, and the registry lookup answered without a registry."""
    path = tmp_path / "fleet.key"
    write_private_key(path, fleet.kit.fleet[0], None)
    monkeypatch.setattr(
        fleet_cli, "resolve_bundle", lambda _ref, **_kw: Wanted("digits", 2, ref(2))
    )
    return path


def test_rollout_cli_exit_codes_and_final_table(
    fleet: Fleet, cli_key: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet.start(12, failing=lambda gw, _n, v: "boom" if gw == "gw-005" and v == 2 else None)
    assert _rollout_cli(fleet, cli_key, "--waves", "1,50%", "--abort-failed", "50%") == 1
    table, _, errors = capsys.readouterr().out.partition("\n\n")
    out = table.splitlines()
    assert out[0].split() == ["gateway", "wave", "state", "version"]
    rows = {line.split()[0]: line.split() for line in out[1:]}
    assert len(rows) == 12
    assert rows["gw-000"][1:4] == ["1", "applied", "v2"]
    assert rows["gw-005"][1:] == ["2", "failed", "v1"]  # under the threshold: goes on
    assert rows["gw-011"][1:4] == ["3", "applied", "v2"]
    assert errors.splitlines() == ["gw-005: boom"]  # each error whole, below the table


def test_rollout_table_keeps_each_error_whole() -> None:
    """A long error (the hint is at its end) is printed whole, never cut to a cell width."""
    hint = "give --insecure (config: registry.insecure = true)"
    error = (
        f"RegistryPlainHttp: GET https://127.0.0.1:5000/v2/x/manifests/sha256:{'4d' * 32}: {hint}"
    )
    result = RolloutResult([Row("gw-3", 1, "rolled back", 1, error), Row("gw-4", 2, "untouched")])
    lines = fleet_cli.rollout_table(result).splitlines()
    assert lines[-1] == f"gw-3: {error}"
    assert all(len(line) < 60 for line in lines[:3])  # the table itself stays narrow


def test_rollout_cli_aborts_with_1_and_refuses_with_2(
    fleet: Fleet, cli_key: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet.start(4, failing=lambda _gw, _n, v: "boom" if v == 2 else None)
    assert _rollout_cli(fleet, cli_key, "--waves", "x") == 2
    assert "wave 'x'" in capsys.readouterr().err
    assert _rollout_cli(fleet, cli_key, "--group", "nobody") == 2
    assert "no gateway reports group 'nobody'" in capsys.readouterr().err
    assert _rollout_cli(fleet, cli_key, "--abort-failed", "0%") == 1
    captured = capsys.readouterr()
    assert "aborted in wave 1" in captured.err
    states = [line.split()[2] for line in captured.out.split("\n\n")[0].splitlines()[1:]]
    assert states == ["rolled", "untouched", "untouched", "untouched"]
