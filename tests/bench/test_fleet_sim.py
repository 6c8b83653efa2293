"""The fleet simulator at CI scale (issue 53): 120 simulated gateways in 2 processes on the
real fleet path (real mosquitto, docker-registry, ``wasmgate fleet rollout``/``status`` as
subprocesses), checked by the final tables, not by timings.

One run: seed v1, roll v2 out in waves, roll v3 out while 3 % of the gateways fail their
pull (the abort trips in the first wave past 2 % and those gateways go back to v2), then
a forged document (a key outside the trust file, claiming a huge serial) and a replayed
genuine one (an old serial) on gateways' own topics change nothing: ``fleet status``
still lists every gateway applied on v2, with the two refusals named.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import nacl.signing
import pytest

from bench.fleetsim.fleet import PREFIX, Run, SimFleet, sim_fleet
from bench.fleetsim.observe import Observer
from bench.fleetsim.run import offline_timeout, parse
from bench.fleetsim.scenarios import offline_end, on, table_states
from tests.fixtures.models import REPO
from wasmgate.runtime.cli.fleet import rollout_table
from wasmgate.runtime.fleet.driver import RolloutResult
from wasmgate.runtime.fleet.opclient import BrokerSettings, OperatorClient
from wasmgate.runtime.fleet.waves import Row

N = 120
DOC = REPO / "docs" / "benchmarks.md"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimFleet]:
    root = tmp_path_factory.mktemp("fleetsim")
    with sim_fleet(root, N, per_worker=60, spread_s=0) as f:
        f.wait_reports(lambda r: len(r) >= N, 60)
        yield f


def _publish(f: SimFleet, topic: str, payload: bytes) -> None:
    with OperatorClient(BrokerSettings(f.broker.host, f.broker.port)) as client:
        client.publish(topic, payload)


@pytest.mark.timeout(240)
def test_rollout_abort_and_attacks_end_in_the_right_tables(fleet: SimFleet) -> None:
    f = fleet
    refs = [f.push(v) for v in (1, 2, 3)]
    assert f.rollout(refs[0], "--waves", "100%").code == 0
    # the rollout ends by publishing the group document and clearing the gateways' own:
    # wait until every gateway applied that one too, so its reports are not counted below
    f.wait_reports(lambda r: len({x.serial for x in r.values()}) == 1 and on(1)(r), 60)

    observer = Observer(f.broker.host, f.broker.port, PREFIX)
    try:
        run = f.rollout(refs[1], "--waves", "1,1%,10%,100%", "--abort-failed", "2%")
        f.wait_reports(on(2), 60)
        time.sleep(1.0)
        counts = observer.report_counts()
    finally:
        observer.close()
    # two documents per gateway (its own, then the group's): "applying" and the verdict of
    # each; 8 before the reports were coalesced (a stale "applying", the bundle, then the
    # document applied, each a message)
    assert len(counts) == N
    assert max(counts.values()) <= 4, sorted(counts.items())[:10]
    assert (run.code, table_states(run.out)) == (0, {"applied": N}), run.err[-2000:]
    assert on(2)(f.wait_reports(on(2), 60))

    names = f.names()
    failing = names[5:12:3]  # 3 of the first 12: past 2 % in wave 3 (10 % = 12 gateways)
    f.all("fail", failing)
    run = f.rollout(refs[2], "--waves", "1,1%,10%,100%", "--abort-failed", "2%")
    f.all("fail", [])
    assert run.code == 1, run.err[-2000:]
    assert "aborted in wave 3" in run.err
    # the failing three never left v2: their rollback document applies as well
    assert table_states(run.out) == {"rolled back": 12, "untouched": N - 12}, run.out
    reports = f.wait_reports(on(2), 60)
    assert on(2)(reports)
    assert len(reports) == N

    forged_key = nacl.signing.SigningKey.generate()
    forged = f.keys.signed(f.keys.doc(2**53 - 1, {"probe": 3}, gateways=[names[20]]), [forged_key])
    replayed = f.keys.signed(f.keys.doc(1, {"probe": 1}, gateways=[names[21]]))
    _publish(f, f"{PREFIX}/{names[20]}/desired", forged)
    _publish(f, f"{PREFIX}/{names[21]}/desired", replayed)
    refused = f.wait_reports(lambda r: all(r[n].refused is not None for n in names[20:22]), 60)
    assert all(refused[n].refused is not None for n in names[20:22])

    status = f.status()
    assert status.code == 0, status.err
    rows = re.findall(r"^(gw-\d+)\s+(.+?)\s+\d{10,}\s.*\s(v\d+)\s*$", status.out, re.MULTILINE)
    assert len(rows) == N, status.out[-2000:]
    shown = {gw: (state, v) for gw, state, v in rows}
    assert {gw for gw, s in shown.items() if s != ("applied", "v2")} == set(failing), shown
    assert {shown[gw] for gw in failing} == {("failed, rolled back", "v2")}, shown
    for gw in names[20:22]:
        assert re.search(rf"^{gw}: .*refused", status.out, re.MULTILINE), status.out[-3000:]


def documented_command() -> list[str]:
    """CI's line of docs/benchmarks.md's fleet-sim block, run verbatim (this interpreter
    for ``python``)."""
    lines = DOC.read_text(encoding="utf-8").splitlines()
    (line,) = [ln for ln in lines if ln.startswith("python -m bench fleet-sim --gateways 60 ")]
    argv = shlex.split(line.split("#", 1)[0])
    return [sys.executable, *argv[1:]]


@pytest.mark.timeout(240)
def test_the_documented_ci_line_runs_every_scenario(tmp_path: Path) -> None:
    """Every scenario ends in the state it must (exit 0: no WRONG line) and has figures."""
    out = tmp_path / "sim.json"
    done = subprocess.run(
        [*documented_command(), "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=220, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    doc = json.loads(out.read_text())
    scenarios = {f["scenario"].split()[-1] for f in doc["figures"]}
    assert scenarios == {"setup", "rollout", "abort", "status", "restart", "offline"}
    assert doc["problems"] == []


def _table(states: dict[str, str], code: int, err: str = "") -> Run:
    """A rollout's run as the CLI prints it (its own table code), one gateway per wave."""
    rows = [Row(gw, 1, state, 3 if state == "applied" else None) for gw, state in states.items()]
    return Run(code, rollout_table(RolloutResult(rows)), err, 0.0, 0.0, 0.0)


def test_the_offline_scenario_fails_on_any_other_end_than_exactly_the_offline_timed_out() -> None:
    names = [f"gw-{i:05d}" for i in range(20)]
    away = set(names[5::10])
    right = {gw: "timeout" if gw in away else "applied" for gw in names}
    assert offline_end(_table(right, 1), names, away) is None
    # the 10,000-gateway run with a fixed 30 s: the last wave timed out and was rolled back
    aborted = right | dict.fromkeys(names[10:], "rolled back")
    assert offline_end(_table(aborted, 1, "aborted in wave 4: ..."), names, away) is not None
    assert offline_end(_table(right, 1, "aborted in wave 4: ..."), names, away) is not None
    assert offline_end(_table(right | {names[3]: "timeout"}, 1), names, away) is not None
    assert offline_end(_table(right | {names[5]: "applied"}, 1), names, away) is not None
    assert offline_end(_table(dict(list(right.items())[1:]), 1), names, away) is not None
    assert offline_end(_table(right, 0), names, away) is not None


def test_the_offline_wave_timeout_grows_with_the_fleet_unless_given() -> None:
    assert offline_timeout(60) == 30.0
    assert offline_timeout(10_000) == pytest.approx(120.0)
    assert parse(["--gateways", "10000"]).offline_timeout is None  # derived in main
    assert parse(["--gateways", "60", "--offline-timeout", "5"]).offline_timeout == 5.0
