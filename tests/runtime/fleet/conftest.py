"""A real mosquitto, fleet keys and a fleet of simulated gateways behind it.

`Fleet` is the operator's side of a test: it publishes the signed starting group document
(``digits`` v1), starts `FleetSim` gateways that converge on it, and runs rollouts through
the real driver over a real MQTT connection. ``shelf`` is a stand-in registry of kit-built
bundles for the in-process reconciler tests (``reconcilekit``).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from tests.fixtures.fleetsim import Failing, FleetSim, _never
from tests.fixtures.mosquitto import Broker
from tests.runtime.bundlekit import BundleKit
from tests.runtime.fleet.reconcilekit import Shelf
from tests.signing.fleetkit import FleetKit
from wasmgate.runtime.fleet.driver import Rollout, RolloutPlan, RolloutResult
from wasmgate.runtime.fleet.opclient import BrokerSettings, OperatorClient
from wasmgate.runtime.fleet.rollout import Wanted, parse_size, parse_waves
from wasmgate.typed import replace

PREFIX = "wasmgate/v1"
GROUP = "g1"
REPO = "127.0.0.1:5000/wasmgate/digits"


def ref(version: int) -> str:
    """A pinned reference whose digest says which version it is (the resolver's job)."""
    return f"{REPO}@sha256:{version:064x}"


def names(n: int) -> list[str]:
    return [f"gw-{i:03d}" for i in range(n)]


class Fleet:
    """One broker, one kit of keys, N simulated gateways of group ``g1`` on ``digits`` v1."""

    def __init__(self, broker: Broker, kit: FleetKit) -> None:
        self.broker = broker
        self.kit = kit
        self.sim: FleetSim | None = None

    def settings(self) -> BrokerSettings:
        return BrokerSettings(self.broker.host, self.broker.port)

    def start(self, n: int, failing: Failing = _never, offline: tuple[str, ...] = ()) -> FleetSim:
        doc = self.kit.doc(1, {"digits": 1}, group=GROUP)
        doc = replace(doc, bundles=[replace(b, ref=ref(1)) for b in doc.bundles])
        with OperatorClient(self.settings()) as client:
            client.publish(f"{PREFIX}/fleet/{GROUP}/desired", self.kit.signed(doc))
        sim = FleetSim(
            self.broker.host,
            self.broker.port,
            self.kit.trust(),
            {g: [GROUP] for g in names(n)},
            failing=failing,
        )
        self.sim = sim
        sim.start()
        assert sim.wait(lambda gws: all(g.last_serial == 1 for g in gws if g.name not in offline))
        for name in offline:
            sim.set_online(name, False)
        return sim

    def rollout(
        self,
        version: int = 2,
        *,
        waves: str = "1,10%,50%,100%",
        abort: str = "10%",
        min_done: int = 1,
        timeout: float = 60.0,
        group: str = GROUP,
        allow_downgrade: bool = False,
    ) -> RolloutResult:
        new = Wanted("digits", version, ref(version))
        sizes, threshold = parse_waves(waves), parse_size(abort)
        plan = RolloutPlan(
            group, new, sizes, threshold, min_done, timeout, timedelta(days=1), allow_downgrade
        )
        with OperatorClient(self.settings()) as client:
            return Rollout(client, PREFIX, self.kit.fleet[:1]).run(plan)


@pytest.fixture
def fleet(mosquitto: Broker) -> Iterator[Fleet]:
    f = Fleet(mosquitto, FleetKit(n_fleet=1))
    yield f
    if f.sim is not None:
        f.sim.stop()


@pytest.fixture
def shelf(tmp_path: Path) -> Shelf:
    return Shelf(BundleKit(tmp_path / "kit"))
