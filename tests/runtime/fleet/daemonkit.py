"""A fleet site for daemon tests: real mosquitto, docker-registry, Ed25519 keys and daemons.

``Site`` holds the operator's side: the `FleetKit` keys (root, fleet role scoped to
``probe*``/``other*``, the bundle signer), the root-signed trust file every daemon pins,
bundles pushed to the registry (`push` returns the pinned ref) and signed documents
(`document`). `wait_report` polls a daemon's ``/v1/status`` ``fleet`` section.
"""

from __future__ import annotations

import json
import queue
import time
import urllib.request
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import nacl.signing
import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion

from tests.fixtures.daemon import Daemon
from tests.fixtures.mosquitto import Broker
from tests.fixtures.registry import Registry
from tests.reliability.conftest import TOKEN, put
from tests.runtime.bundlekit import BundleKit
from tests.runtime.fleet.ocikit import push
from tests.runtime.stack import host_profile_name
from tests.signing.fleetkit import FleetKit
from wasmgate.runtime.mqtt._paho_private import close_threaded
from wasmgate.signing import DesiredBundle
from wasmgate.typed import replace

GATEWAY, GROUP, PREFIX = "gw-1", "g1", "wasmgate/v1"
OWN = f"{PREFIX}/{GATEWAY}/desired"
GROUP_TOPIC = f"{PREFIX}/fleet/{GROUP}/desired"
REPORT = f"{PREFIX}/{GATEWAY}/deployment"
Report = dict[str, Any]
Factory = Callable[..., Daemon]
"""The ``daemon_factory`` fixture: ``daemon_factory(config=site.config(), name="gw")``."""


def publish(broker: Broker, topic: str, payload: bytes) -> None:
    """A retained publish by the operator (a client of its own)."""
    client = paho.Client(CallbackAPIVersion.VERSION2)
    client.connect(broker.host, broker.port)
    client.loop_start()
    try:
        client.publish(topic, payload, qos=1, retain=True).wait_for_publish(10)
    finally:
        close_threaded(client)


def retained(broker: Broker, topic: str, timeout: float = 10) -> bytes | None:
    """The retained payload of ``topic`` (None when none arrives in ``timeout``)."""
    got: queue.Queue[bytes] = queue.Queue()
    client = paho.Client(CallbackAPIVersion.VERSION2)
    client.on_message = lambda _c, _u, msg: got.put(bytes(msg.payload))
    client.connect(broker.host, broker.port)
    client.loop_start()
    try:
        client.subscribe(topic, qos=1)
        return got.get(timeout=timeout)
    except queue.Empty:
        return None
    finally:
        close_threaded(client)


def wait_retained(broker: Broker, topic: str, timeout: float = 60) -> Report:
    """The retained JSON of ``topic`` once there is one (polled: it may come later)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        payload = retained(broker, topic, timeout=1)
        if payload:
            found: Report = json.loads(payload)
            return found
    raise AssertionError(f"nothing retained on {topic} after {timeout}s")


class Site:
    """The operator's keys, registry and broker, and the config of a member daemon."""

    def __init__(self, tmp: Path, broker: Broker, registry: Registry) -> None:
        self.fk = FleetKit(names=["probe*", "other*"], signer_names=["*"])
        self.kit = BundleKit(tmp / "kit")
        self.broker, self.registry = broker, registry
        self.trust = tmp / "trust.json"
        self.trust.write_bytes(self.fk.trust_bytes())

    def bundle(self, name: str, version: int, **kw: Any) -> Path:
        """A bundle signed by the site's signer (``other``: adapter ``echo``, no model)."""
        if name.startswith("other") or name == "mine":
            kw = {"model": False, "sections": {"routes": {"http": f"{name}-echo"}}, **kw}
        return self.kit.build(name, version, key=self.fk.signer, **kw)

    def push(self, name: str, version: int, **kw: Any) -> str:
        """Build and push ``name`` ``version``; the ref pinned by its manifest digest."""
        art = push(self.registry, self.bundle(name, version, **kw), f"fleet/{name}:v{version}")
        return f"{self.registry.address}/fleet/{name}@{art.digest}"

    def document(
        self,
        serial: int,
        bundles: dict[str, tuple[int, str]],
        *,
        keys: list[nacl.signing.SigningKey] | None = None,
        downgrades: dict[str, int] | None = None,
        issued: datetime | None = None,
        expires_in: timedelta = timedelta(days=1),
        gateways: list[str] | None = None,
        group: str = GROUP,
    ) -> bytes:
        """A signed document for ``bundles`` (name -> (version, ref)), for ``group``."""
        doc = self.fk.doc(
            serial,
            {n: v for n, (v, _) in bundles.items()},
            downgrades=downgrades,
            group=None if gateways else group,
            gateways=gateways,
            issued=issued,
            expires_in=expires_in,
        )
        wants = [
            DesiredBundle(name=b.name, version=b.version, ref=bundles[b.name][1])
            for b in doc.bundles
        ]
        return self.fk.signed(replace(doc, bundles=wants), keys)

    def config(self, **extra: Any) -> dict[str, Any]:
        return {
            "paths": {"trust_file": self.trust},
            "profile": host_profile_name(),
            "http": {"management_token": TOKEN},
            "mqtt": {
                "host": self.broker.host,
                "port": self.broker.port,
                "gateway_id": GATEWAY,
                "reconnect_max_s": 1,
                "reconnect_spread_s": 0,
            },
            "fleet": {"groups": [GROUP], "retry_initial_s": 0.2, "retry_max_s": 1.0},
            "registry": {"insecure": True, "retries": 0, "backoff_s": 0.1},
            **extra,
        }


def fleet_report(daemon: Daemon) -> Report:
    report: Report = daemon.get_json("/v1/status")["components"]["fleet"]
    return report


def wait_report(daemon: Daemon, until: Callable[[Report], bool], timeout: float = 120) -> Report:
    """Poll ``/v1/status`` until the fleet report satisfies ``until``; the report."""
    deadline = time.monotonic() + timeout
    report = fleet_report(daemon)
    while not until(report):
        if time.monotonic() > deadline:
            raise AssertionError(f"fleet report never matched: {json.dumps(report)}")
        time.sleep(0.1)
        report = fleet_report(daemon)
    return report


def settled(serial: int) -> Callable[[Report], bool]:
    """The document ``serial`` was worked through (applied or failed)."""
    return lambda r: r["serial"] == serial and r["state"] in ("applied", "failed")


def put_desired(daemon: Daemon, data: bytes) -> tuple[int, bytes]:
    return put(daemon, "/v1/desired", data)


def desired(daemon: Daemon) -> dict[str, Any]:
    """``GET /v1/desired`` (with the management token)."""
    req = urllib.request.Request(
        f"{daemon.url}/v1/desired", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        body: dict[str, Any] = json.loads(r.read())
    return body
