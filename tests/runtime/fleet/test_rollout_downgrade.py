"""A rollback on purpose: ``fleet rollout --allow-downgrade`` to an older version.

Simulated gateways on a real mosquitto verify every document and keep an anti-rollback
floor, so a gateway goes below its floor only with the signed downgrade the document
grants. Without ``--allow-downgrade`` a lower version is refused before anything is sent.
"""

from __future__ import annotations

import pytest

from tests.fixtures.fleetsim import FleetSim
from tests.runtime.fleet.conftest import GROUP, PREFIX, Fleet, names
from wasmgate.runtime.fleet.driver import RolloutRefused
from wasmgate.signing import Downgrade


def _on_v2(fleet: Fleet, n: int) -> FleetSim:
    sim = fleet.start(n)
    result = fleet.rollout(2, waves="1,100%")
    assert result.applied_everywhere
    assert sim.wait(lambda gws: all(g.last_serial == result.serials[-1] for g in gws))
    return sim


def test_an_older_version_is_refused_without_allow_downgrade(fleet: Fleet) -> None:
    sim = _on_v2(fleet, 3)
    before = {g.name: (g.own_documents, g.last_serial) for g in sim.gateways.values()}
    with pytest.raises(RolloutRefused, match=r"below v2, which gw-000 .* --allow-downgrade"):
        fleet.rollout(1)
    after = {g.name: (g.own_documents, g.last_serial) for g in sim.gateways.values()}
    assert after == before  # nothing was sent
    assert all(g.installed == {"digits": 2} for g in sim.gateways.values())


def test_allow_downgrade_rolls_the_group_back_in_waves(fleet: Fleet) -> None:
    sim = _on_v2(fleet, 4)
    result = fleet.rollout(1, waves="1,100%", allow_downgrade=True)
    assert result.applied_everywhere, result.rows
    assert [r.version for r in result.rows] == [1, 1, 1, 1]
    group_serial = result.serials[-1]
    assert sim.wait(lambda gws: all(g.last_serial == group_serial for g in gws))
    for gw in sim.gateways.values():
        assert gw.installed == {"digits": 1}
        assert gw.floors["digits"] == 2  # below its floor: only the signed grant allows that
        assert gw.applied[-1].target.group == GROUP
        assert gw.applied[-1].downgrades == [Downgrade(name="digits", version=1)]
        assert f"{PREFIX}/{gw.name}/desired" not in gw.held


def test_a_rollback_that_fails_goes_forward_again(fleet: Fleet) -> None:
    """The abort of a rollback returns the moved gateways to the newer version they ran."""
    sim = fleet.start(3)
    assert fleet.rollout(2, waves="100%").applied_everywhere
    sim.failing = lambda gw, _name, version: "bad" if version == 1 and gw == "gw-000" else None
    result = fleet.rollout(1, waves="1,100%", abort="0%", allow_downgrade=True)
    assert result.aborted_at == 1
    assert sim.wait(lambda _g: sim.gateways["gw-000"].last_serial == result.serials[-1])
    assert {g: sim.gateways[g].installed["digits"] for g in names(3)} == {
        "gw-000": 2, "gw-001": 2, "gw-002": 2,
    }  # fmt: skip
