"""A real fleet on loopback: docker-registry, mosquitto, real daemons, real keys.

`RealFleet` builds the ``probe`` bundle (each version answers ``v<N>:...``) signed by the
bundle signer of a `FleetKit`, pushes it with ``wasmgate bundle push``, starts daemons that
are members of group ``g1`` with the root-signed trust file that holds the fleet role, and
runs ``wasmgate fleet rollout`` exactly as an operator would. Shared by the end-to-end
tests and ``bench/bench_fleet.py``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.fixtures.daemon import Daemon
from tests.fixtures.mosquitto import Broker
from tests.fixtures.registry import Registry
from tests.runtime.bundlekit import BundleKit
from tests.runtime.trustkit import daemon_config, echo
from tests.signing.fleetkit import FleetKit
from wasmgate.runtime.cli import main
from wasmgate.runtime.fleet.opclient import BrokerSettings, OperatorClient
from wasmgate.runtime.fleet.status import Report, parse_report
from wasmgate.signing.keys import write_private_key
from wasmgate.typed import plain

GROUP = "g1"
PREFIX = "wasmgate/v1"
REPO = "wasmgate/probe"

DaemonFactory = Callable[..., Daemon]


class RealFleet:
    """Keys, bundles in the registry, and member daemons ``gw-0``, ``gw-1``, ..."""

    def __init__(self, root: Path, broker: Broker, registry: Registry) -> None:
        self.root = root
        self.broker = broker
        self.registry = registry
        self.keys = FleetKit(n_fleet=1, names=["probe*"], signer_names=["*"])
        self.bundles = BundleKit(root / "bundles")
        self.trust = root / "trust.json"
        self.trust.write_bytes(self.keys.trust_bytes())
        self.key_file = root / "fleet.key"
        write_private_key(self.key_file, self.keys.fleet[0])
        self.daemons: list[Daemon] = []

    @property
    def broker_address(self) -> str:
        return f"{self.broker.host}:{self.broker.port}"

    def push(self, version: int, **build: Any) -> str:
        """Build probe ``version`` (``build``: e.g. a failing ``selftest``), push it, its tag."""
        path = self.bundles.build("probe", version, key=self.keys.signer, **build)
        ref = f"{self.registry.address}/{REPO}:{version}"
        assert main(["bundle", "push", str(path), ref, "--insecure"]) == 0
        return ref

    def member_config(self, name: str, groups: list[str]) -> dict[str, Any]:
        mqtt = {"host": self.broker.host, "port": self.broker.port, "gateway_id": name}
        fleet = {"groups": groups, "retry_initial_s": 0.2, "retry_max_s": 1.0}
        return daemon_config(self.trust, mqtt=mqtt, fleet=fleet, registry={"insecure": True})

    def start(self, factory: DaemonFactory, n: int = 3) -> list[Daemon]:
        """``n`` member daemons; returns once each has published its first report."""
        for i in range(len(self.daemons), len(self.daemons) + n):
            config = self.member_config(f"gw-{i}", [GROUP])
            self.daemons.append(factory(config=config, name=f"gw-{i}"))
        names = [f"gw-{i}" for i in range(len(self.daemons))]
        assert self.wait_reports(lambda r: all(n in r for n in names)), self.reports()
        return self.daemons

    def rollout(self, ref: str, *args: str) -> int:
        """``wasmgate fleet rollout`` for group g1; its exit code."""
        argv = ["fleet", "rollout", "--broker", self.broker_address, "--group", GROUP]
        argv += ["--key", str(self.key_file), "--insecure", "--wave-timeout", "120", *args, ref]
        return main(argv)

    def _collect(self, client: OperatorClient) -> dict[str, Report]:
        out: dict[str, Report] = {}
        for topic, payload in client.snapshot().items():
            report = parse_report(payload)
            if topic.endswith("/deployment") and report is not None:
                out[report.gateway] = report
        return out

    def wait_reports(self, done: Callable[[dict[str, Report]], bool], timeout: float = 120) -> bool:
        """Wait until ``done(reports by gateway)`` holds on the retained reports."""
        settings = BrokerSettings(self.broker.host, self.broker.port)
        with OperatorClient(settings) as client:
            client.collect([f"{PREFIX}/+/deployment"], 10)
            return client.wait_for(lambda _m: done(self._collect(client)), timeout)

    def reports(self) -> dict[str, Report]:
        settings = BrokerSettings(self.broker.host, self.broker.port)
        with OperatorClient(settings) as client:
            client.collect([f"{PREFIX}/+/deployment"], 10)
            return self._collect(client)

    def answers(self) -> list[bytes]:
        """What each daemon's probe answers (``b"v2:hi"`` from version 2)."""
        return [echo(d, "probe")[1] for d in self.daemons]


def dump(reports: dict[str, Report]) -> str:
    """Reports as JSON, for assertion messages."""
    return json.dumps({g: plain(r) for g, r in reports.items()}, indent=1)
