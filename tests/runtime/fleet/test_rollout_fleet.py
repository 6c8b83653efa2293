"""The rollout driver against 300 simulated gateways on a real mosquitto.

Every document is really signed and really verified by each simulated gateway (with the
anti-rollback floor), so "rolled back" means the gateway accepted a signed downgrade.
"""

from __future__ import annotations

import json

import pytest

from tests.fixtures.fleetsim import Failing, SimGateway
from tests.runtime.fleet.conftest import GROUP, PREFIX, Fleet, names, ref
from wasmgate.runtime.fleet.driver import RolloutRefused
from wasmgate.runtime.fleet.opclient import OperatorClient
from wasmgate.signing import Downgrade

N = 300


def _by_wave(rows: list[tuple[str, int]]) -> dict[int, int]:
    out: dict[int, int] = {}
    for _, wave in rows:
        out[wave] = out.get(wave, 0) + 1
    return out


def test_rollout_in_waves_reaches_all_300(fleet: Fleet) -> None:
    sim = fleet.start(N)
    result = fleet.rollout(2)
    assert result.applied_everywhere, [r for r in result.rows if r.state != "applied"][:3]
    assert _by_wave([(r.gateway, r.wave) for r in result.rows]) == {1: 1, 2: 29, 3: 120, 4: 150}
    assert all(r.version == 2 for r in result.rows)
    group_serial = result.serials[-1]
    # the per-gateway documents are cleared and every gateway falls back to the group one
    assert sim.wait(lambda gws: all(g.last_serial == group_serial for g in gws))
    for gw in sim.gateways.values():
        assert gw.installed == {"digits": 2}
        assert gw.own_documents == 1  # one wave document each, nothing else
        assert f"{PREFIX}/{gw.name}/desired" not in gw.held
        assert gw.applied[-1].target.group == GROUP
        assert [b.ref for b in gw.applied[-1].bundles] == [ref(2)]


def _fails_v2(bad: set[str]) -> Failing:
    def failing(gw: str, name: str, version: int) -> str | None:
        return "selftest failed" if gw in bad and version == 2 else None

    return failing


def _untouched(gw: SimGateway) -> bool:
    return gw.own_documents == 0 and gw.installed == {"digits": 1} and gw.last_serial == 1


def test_abort_threshold_stops_at_the_right_wave(fleet: Fleet) -> None:
    bad = {"gw-001", "gw-002", "gw-003", "gw-004"}  # 4 of wave 2's 29: 4/30 done > 10 %
    sim = fleet.start(N, failing=_fails_v2(bad))
    result = fleet.rollout(2)
    assert result.aborted_at == 2
    moved = names(30)
    rollback_serial = result.serials[-1]
    assert sim.wait(lambda _gws: all(sim.gateways[g].last_serial == rollback_serial for g in moved))
    for name in moved:
        gw = sim.gateways[name]
        assert gw.installed == {"digits": 1}, name
        assert gw.own_documents == 2  # the wave document, then the rollback
        assert gw.applied[-1].downgrades == [Downgrade(name="digits", version=1)]
        assert gw.floors["digits"] == (1 if name in bad else 2)  # went below its floor
    for name in names(N)[30:]:
        assert _untouched(sim.gateways[name]), name
    rows = {r.gateway: r for r in result.rows}
    assert {rows[g].state for g in moved} == {"rolled back"}
    assert {rows[g].state for g in names(N)[30:]} == {"untouched"}
    with OperatorClient(fleet.settings()) as client:  # the group document was never replaced
        retained = client.collect([f"{PREFIX}/fleet/{GROUP}/desired"], 10)
    assert (
        retained[f"{PREFIX}/fleet/{GROUP}/desired"]
        == sim.gateways["gw-299"].held[f"{PREFIX}/fleet/{GROUP}/desired"]
    )


def test_min_done_holds_the_abort_back(fleet: Fleet) -> None:
    bad = {"gw-001", "gw-002", "gw-003", "gw-004"}  # 4 failed of 150 done by wave 3: 2.7 %
    fleet.start(N, failing=_fails_v2(bad))
    result = fleet.rollout(2, min_done=50)
    assert result.aborted_at is None
    assert not result.applied_everywhere
    failed = {r.gateway for r in result.rows if r.state == "failed"}
    assert failed == bad
    assert all(r.error == "selftest failed" for r in result.rows if r.gateway in bad)


def test_timeouts_count_as_failed_and_an_offline_gateway_converges_later(fleet: Fleet) -> None:
    sim = fleet.start(5, offline=("gw-000",))
    result = fleet.rollout(2, waves="1,100%", abort="0%", timeout=3.0)
    assert result.aborted_at == 1
    rows = {r.gateway: r for r in result.rows}
    assert rows["gw-000"].state == "rollback timeout"
    assert "no report" in (rows["gw-000"].error or "")
    assert all(_untouched(sim.gateways[g]) for g in names(5)[1:])
    sim.set_online("gw-000", True)  # back: it reads its retained document, the rollback one
    assert sim.wait(lambda _gws: sim.gateways["gw-000"].last_serial == result.serials[-1])
    assert sim.gateways["gw-000"].installed == {"digits": 1}
    assert sim.gateways["gw-000"].floors["digits"] == 1  # v2 never touched it


def test_a_group_without_gateways_is_refused(fleet: Fleet) -> None:
    fleet.start(2)
    with pytest.raises(RolloutRefused, match="no gateway"):
        fleet.rollout(2, group="nobody")


def test_a_previous_state_signed_by_another_key_is_refused_and_nothing_sent(fleet: Fleet) -> None:
    sim = fleet.start(3)
    fleet.kit.fleet.append(fleet.kit.fleet.pop(0).__class__.generate())  # not the signer
    with pytest.raises(RolloutRefused, match="not signed by any --key") as info:
        fleet.rollout(2)
    # which key was given, which signed it, and the role a rollout's key needs
    assert "it is signed by" in str(info.value)
    assert "a key of the fleet role" in str(info.value)
    assert all(_untouched(gw) for gw in sim.gateways.values())


def test_a_report_claiming_the_last_serial_is_refused_and_nothing_sent(fleet: Fleet) -> None:
    sim = fleet.start(3)
    rogue = {"format": "wasmgate-deployment/1", "gateway": "gw-rogue", "groups": [GROUP]}
    with OperatorClient(fleet.settings()) as client:
        client.publish(
            f"{PREFIX}/gw-rogue/deployment", json.dumps(rogue | {"serial": 2**63 - 1}).encode()
        )
    with pytest.raises(RolloutRefused, match="no serial above"):
        fleet.rollout(2)
    assert all(_untouched(gw) for gw in sim.gateways.values())
