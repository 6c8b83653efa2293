"""End to end with real parts: docker-registry + mosquitto + 3 real daemons + the CLI.

A rollout in waves reaches every gateway, the reports say ``applied`` and every gateway
answers from the new version; a bundle whose selftest fails on the first wave aborts the
rollout: no gateway of a later wave is touched, the first wave serves the previous version.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.daemon import Daemon
from tests.fixtures.mosquitto import Broker
from tests.fixtures.registry import Registry
from tests.runtime.fleet.e2ekit import PREFIX, RealFleet, dump
from tests.runtime.trustkit import serving
from wasmgate.runtime.fleet.opclient import BrokerSettings, OperatorClient

pytestmark = [pytest.mark.slow, pytest.mark.timeout(480)]


@pytest.fixture
def real(
    tmp_path: Path,
    mosquitto: Broker,
    registry: Registry,
    daemon_factory: Callable[..., Daemon],
) -> RealFleet:
    fleet = RealFleet(tmp_path / "fleet", mosquitto, registry)
    fleet.start(daemon_factory, 3)
    assert fleet.rollout(fleet.push(1), "--waves", "100%") == 0, dump(fleet.reports())
    assert fleet.answers() == [b"v1:hi"] * 3
    return fleet


def test_rollout_in_waves_reaches_every_daemon(real: RealFleet) -> None:
    assert real.rollout(real.push(2), "--waves", "1,2,100%", "--min-done", "1") == 0
    reports = real.reports()
    assert all(r.state == "applied" for r in reports.values()), dump(reports)
    assert {r.bundles["probe"].version for r in reports.values()} == {2}
    assert real.answers() == [b"v2:hi"] * 3
    assert all(serving(d) == {"probe": 2} for d in real.daemons)


def _own_documents(real: RealFleet) -> dict[str, bytes]:
    """The per-gateway desired documents retained on the broker right now."""
    with OperatorClient(BrokerSettings(real.broker.host, real.broker.port)) as client:
        retained = client.collect([f"{PREFIX}/+/desired"], 10)
    return {t.split("/")[-2]: p for t, p in retained.items() if p}


def test_a_failing_selftest_on_the_first_wave_aborts_and_touches_no_later_wave(
    real: RealFleet,
) -> None:
    before = real.reports()
    bad = real.push(3, selftest=b"E")  # the adapter fails its selftest: never serves
    assert real.rollout(bad, "--waves", "1,100%", "--abort-failed", "0%") == 1
    after = real.reports()
    first, later = after["gw-0"], [after["gw-1"], after["gw-2"]]
    assert first.serial is not None
    assert first.serial > (before["gw-0"].serial or 0)
    assert first.state == "applied", dump(after)  # the rollback document applied
    for report in later:  # still on the document they had: nothing reached them
        assert report.serial == before[report.gateway].serial, dump(after)
    assert set(_own_documents(real)) == {"gw-0"}  # the rollback pin, nobody else's
    assert real.answers() == [b"v1:hi"] * 3
