"""A gateway whose pull failed reads as failed everywhere, with the whole reason.

Real parts: docker-registry on plain HTTP, mosquitto, two real daemons, the CLI. ``gw-0``
has no ``registry.insecure``: its pull of the rollout's bundle fails (the registry speaks
plain HTTP), the rollout aborts in wave 1 and sends it back to its previous (empty) state,
which applies. Its report's ``state`` is then ``applied`` again, and ``fleet status``
used to show exactly that, with drift ``no``; it must read ``failed, rolled back`` with
the error and its hint, in ``fleet status``, in the rollout's table and in the gateway's
own ``/v1/status``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.daemon import Daemon
from tests.fixtures.mosquitto import Broker
from tests.fixtures.registry import Registry
from tests.runtime.fleet.e2ekit import GROUP, PREFIX, RealFleet, dump
from wasmgate.runtime.cli import main

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

HINT = "give --insecure (config: registry.insecure = true)"


@pytest.fixture
def failed(
    tmp_path: Path,
    mosquitto: Broker,
    registry: Registry,
    daemon_factory: Callable[..., Daemon],
    capsys: pytest.CaptureFixture[str],
) -> tuple[RealFleet, str]:
    """The fleet after the aborted rollout, and the rollout's printed table."""
    fleet = RealFleet(tmp_path / "fleet", mosquitto, registry)
    for name, insecure in (("gw-0", False), ("gw-1", True)):
        config = fleet.member_config(name, [GROUP])
        config["registry"] = {"insecure": insecure, "retries": 0, "backoff_s": 0.1}
        fleet.daemons.append(daemon_factory(config=config, name=name))
    assert fleet.wait_reports(lambda r: {"gw-0", "gw-1"} <= set(r)), dump(fleet.reports())
    capsys.readouterr()
    code = fleet.rollout(fleet.push(1), "--waves", "1,100%", "--abort-failed", "0%")
    out = capsys.readouterr().out
    assert code == 1, out
    return fleet, out


def test_a_failed_pull_reads_as_failed_with_its_whole_reason(
    failed: tuple[RealFleet, str], capsys: pytest.CaptureFixture[str]
) -> None:
    fleet, rollout_out = failed
    # the rollout's own table: the error below it, whole, hint included
    table, _, errors = rollout_out.partition("\n\n")
    assert "gw-0" in table
    assert "rolled back" in table
    gw0 = [line for line in errors.splitlines() if line.startswith("gw-0: ")]
    assert len(gw0) == 1, rollout_out
    assert "RegistryPlainHttp" in gw0[0]
    assert gw0[0].endswith(HINT), gw0[0]

    reports = fleet.reports()
    assert reports["gw-0"].state == "applied", dump(reports)  # the rollback document applied
    assert reports["gw-0"].last_failure is not None, dump(reports)

    assert main(["fleet", "status", "--broker", fleet.broker_address, "--wait", "3"]) == 0
    out = capsys.readouterr().out
    table, _, problems = out.partition("\n\n")
    rows = {line.split()[0]: line for line in table.splitlines()[1:]}
    assert "failed, rolled back" in rows["gw-0"], out
    assert " applied " not in rows["gw-0"], out
    lines = [line for line in problems.splitlines() if line.startswith("gw-0: ")]
    assert len(lines) == 1, out
    assert "failed (probe v1), rolled back: RegistryPlainHttp" in lines[0]
    assert lines[0].endswith(HINT), lines[0]

    # the gateway's own status: the report section and what needs attention
    status = fleet.daemons[0].get_json("/v1/status")
    failure = status["components"]["fleet"]["last_failure"]
    assert failure["bundle"] == "probe"
    assert failure["version"] == 1
    assert failure["error"].endswith(HINT)
    fleet_attention = [a for a in status["attention"] if a["what"] == "fleet"]
    assert len(fleet_attention) == 1, status["attention"]
    assert fleet_attention[0]["message"].endswith(HINT)

    # a group nobody reports: said, exit 2 (as rollout refuses it), no empty table
    assert main(["fleet", "status", "--broker", fleet.broker_address, "--group", "line3"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"no gateway reports group 'line3' under {PREFIX}/" in captured.err
