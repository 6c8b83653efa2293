"""A fleet member with ``[workers] count = 2``: the supervisor applies the document, the
workers are replaced to serve it, and the report says ``applied`` only once they all do.

Real mosquitto, docker-registry and keys (`tests.runtime.fleet.daemonkit`); every check is
a request on a fresh connection (the kernel spreads them over both workers)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.mosquitto import Broker
from tests.fixtures.registry import Registry
from tests.runtime.fleet.daemonkit import OWN, Factory, Site, publish, settled, wait_report
from tests.runtime.trustkit import echo

pytestmark = pytest.mark.timeout(300)


def test_applied_is_said_once_every_worker_serves_the_document(
    tmp_path: Path, mosquitto: Broker, registry: Registry, daemon_factory: Factory
) -> None:
    site = Site(tmp_path, mosquitto, registry)
    v1, v2 = site.push("probe", 1), site.push("probe", 2)
    daemon = daemon_factory(config=site.config(workers={"count": 2}), name="gw")
    for serial, version, ref in ((1, 1, v1), (2, 2, v2)):
        publish(mosquitto, OWN, site.document(serial, {"probe": (version, ref)}, gateways=["gw-1"]))
        # The first look that finds "applied" (polled every 0.1 s) finds every worker serving.
        assert wait_report(daemon, settled(serial))["state"] == "applied"
        assert {echo(daemon, "probe") for _ in range(20)} == {(200, f"v{version}:hi".encode())}
