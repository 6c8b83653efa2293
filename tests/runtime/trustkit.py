"""Tenants on one gateway: a root key, one signing key per tenant, a root-signed trust file.

``Tenants(tmp, {"victim": ["victim"], "acme": ["acme-*"]})`` gives each tenant its own
Ed25519 key trusted only for its patterns; ``write_trust(path)`` writes the trust file
signed by the root key (a daemon pins it); ``build("acme", "acme-evil", 1, ...)`` signs a
bundle with the tenant's key (everything else as `BundleKit.build`). ``mqtt_call`` makes
one MQTT adapter request to a daemon with ``mqtt.gateway_id = GATEWAY``.
"""

from __future__ import annotations

import queue
from datetime import datetime
from pathlib import Path
from typing import Any

import nacl.signing
import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion

from tests.fixtures.daemon import Daemon
from tests.fixtures.mosquitto import Broker
from tests.reliability.conftest import TOKEN, post
from tests.runtime.bundlekit import BundleKit
from tests.runtime.stack import host_profile_name
from wasmgate.runtime.mqtt._paho_private import close_threaded
from wasmgate.signing import TrustDoc, encode_public, key_id_of, sign_trust
from wasmgate.typed import convert

GATEWAY = "gw-trust"
ROOT = f"wasmgate/v1/{GATEWAY}"


class Tenants:
    """Keys and trust for several tenants; bundles built with the shared `BundleKit` parts."""

    def __init__(self, root: Path, scopes: dict[str, list[str]]) -> None:
        self.kit = BundleKit(root)
        self.root_key = nacl.signing.SigningKey.generate()
        self.scopes = scopes
        self.keys = {t: nacl.signing.SigningKey.generate() for t in scopes}
        self.revoked_keys: list[str] = []
        self.revoked_bundles: list[str] = []

    def key_id(self, tenant: str) -> str:
        return key_id_of(self.keys[tenant].verify_key)

    def doc(self, version: int, clock_floor: datetime | None = None) -> TrustDoc:
        root = self.root_key.verify_key
        signers = {
            key_id_of(k.verify_key): {"public": encode_public(k.verify_key), "names": scope}
            for k, scope in ((self.keys[t], s) for t, s in self.scopes.items())
        }
        doc: dict[str, Any] = {
            "version": version,
            "root": {"keys": {key_id_of(root): encode_public(root)}, "threshold": 1},
            "signers": signers,
            "revoked": {"keys": self.revoked_keys, "bundles": self.revoked_bundles},
        }
        if clock_floor is not None:
            doc["clock_floor"] = clock_floor.isoformat()
        return convert(doc, TrustDoc)

    def write_trust(
        self, path: Path, version: int = 1, clock_floor: datetime | None = None
    ) -> Path:
        path.write_bytes(sign_trust(self.doc(version, clock_floor), [self.root_key]))
        return path

    def build(self, tenant: str, name: str, version: int, **kw: Any) -> Path:
        return self.kit.build(name, version, key=self.keys[tenant], **kw)


def daemon_config(trust: Path, **extra: Any) -> dict[str, Any]:
    """A daemon config with ``trust`` as its trust file and the management API on."""
    return {
        "paths": {"trust_file": trust},
        "profile": host_profile_name(),
        "http": {"management_token": TOKEN},
        **extra,
    }


def echo(daemon: Daemon, adapter: str) -> tuple[int, bytes]:
    """The probe guest's echo over HTTP: (200, b"<tag>:hi") when ``adapter`` serves."""
    status, _, body = post(f"{daemon.url}/v1/adapters/{adapter}", b"Phi")
    return status, body


def bundle_status(daemon: Daemon) -> dict[str, Any]:
    """The ``bundles`` section of ``/v1/status`` (serving, failures, expired)."""
    section: dict[str, Any] = daemon.get_json("/v1/status")["components"]["bundles"]
    return section


def serving(daemon: Daemon) -> dict[str, int]:
    """Bundle name -> version serving, from ``/v1/status``."""
    listing = bundle_status(daemon)["serving"]
    return {b["name"]: b["version"] for b in listing}


def mqtt_call(broker: Broker, adapter: str, payload: bytes, timeout: float = 20) -> bytes | None:
    """An MQTT 3.1.1 request to ``adapters/<adapter>/req/c1``; the answer, None if none came."""
    got: queue.Queue[bytes] = queue.Queue()
    client = paho.Client(CallbackAPIVersion.VERSION2, protocol=paho.MQTTv311)
    client.on_message = lambda _c, _u, msg: got.put(bytes(msg.payload))
    client.connect(broker.host, broker.port)
    client.loop_start()
    try:
        client.subscribe(f"{ROOT}/adapters/{adapter}/res/c1", qos=1)[1]
        client.publish(f"{ROOT}/adapters/{adapter}/req/c1", payload, qos=1).wait_for_publish(10)
        try:
            return got.get(timeout=timeout)
        except queue.Empty:
            return None
    finally:
        close_threaded(client)
