"""Real keys for fleet tests: a root, fleet keys, a bundle signer and the root-signed trust
file that gives each its role; signed fleet documents (also hand-made hostile payloads).

Shared by every fleet test (signing, CLI, daemon): build the trust file here, not by hand.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import nacl.signing

from wasmgate.signing import (
    FLEET_PAYLOAD_TYPE,
    DesiredBundle,
    Downgrade,
    Envelope,
    FleetDoc,
    Target,
    TrustDoc,
    TrustStore,
    encode_public,
    key_id_of,
    sign,
    sign_fleet,
    sign_trust,
)
from wasmgate.typed import convert

DIGEST = "ab" * 32
REF = f"127.0.0.1:5000/wasmgate/digits@sha256:{DIGEST}"


def _keys(keys: list[nacl.signing.SigningKey]) -> dict[str, str]:
    return {key_id_of(k.verify_key): encode_public(k.verify_key) for k in keys}


def signed_payload(
    payload: bytes, keys: list[nacl.signing.SigningKey], payload_type: str = FLEET_PAYLOAD_TYPE
) -> bytes:
    """An envelope over arbitrary ``payload`` bytes: validly signed, whatever they hold."""
    sigs = [sign(k, payload_type, payload) for k in keys]
    b64 = base64.b64encode(payload).decode()
    return Envelope(payload_type=payload_type, payload=b64, signatures=sigs).to_json()


@dataclass
class FleetKit:
    """A root key, ``n_fleet`` fleet keys (threshold ``threshold``) scoped to ``names``, and
    a bundle signer for ``signer_names``."""

    n_fleet: int = 2
    threshold: int = 1
    names: list[str] = field(default_factory=lambda: ["digits*"])
    signer: nacl.signing.SigningKey = field(default_factory=nacl.signing.SigningKey.generate)
    signer_names: list[str] = field(default_factory=lambda: ["digits*"])
    root: nacl.signing.SigningKey = field(default_factory=nacl.signing.SigningKey.generate)
    fleet: list[nacl.signing.SigningKey] = field(init=False)

    def __post_init__(self) -> None:
        self.fleet = [nacl.signing.SigningKey.generate() for _ in range(self.n_fleet)]

    def trust_doc(self, version: int = 1, **extra: object) -> TrustDoc:
        """The trust document: root, the fleet role, the bundle signer (plus ``extra``)."""
        signer = {"public": encode_public(self.signer.verify_key), "names": self.signer_names}
        data = {
            "version": version,
            "root": {"keys": _keys([self.root]), "threshold": 1},
            "fleet": {"keys": _keys(self.fleet), "threshold": self.threshold, "names": self.names},
            "signers": {key_id_of(self.signer.verify_key): signer},
            **extra,
        }
        return convert(data, TrustDoc)

    def trust_bytes(self, version: int = 1, **extra: object) -> bytes:
        """The root-signed trust file."""
        return sign_trust(self.trust_doc(version, **extra), [self.root])

    def trust(self, version: int = 1, **extra: object) -> TrustStore:
        """The root-signed trust store."""
        return TrustStore.from_bytes(self.trust_bytes(version, **extra))

    def doc(
        self,
        serial: int = 1,
        bundles: dict[str, int] | None = None,
        *,
        downgrades: dict[str, int] | None = None,
        group: str | None = "g1",
        gateways: list[str] | None = None,
        issued: datetime | None = None,
        expires_in: timedelta = timedelta(days=1),
    ) -> FleetDoc:
        """A fleet document for ``bundles`` (name -> version; default digits 6)."""
        issued = issued or datetime.now(UTC)
        wanted = bundles if bundles is not None else {"digits": 6}
        target = Target(gateways=gateways) if gateways else Target(group=group)
        return FleetDoc(
            serial=serial,
            issued=issued,
            expires=issued + expires_in,
            target=target,
            bundles=[DesiredBundle(name=n, version=v, ref=REF) for n, v in wanted.items()],
            downgrades=[Downgrade(name=n, version=v) for n, v in (downgrades or {}).items()],
        )

    def signed(self, doc: FleetDoc, keys: list[nacl.signing.SigningKey] | None = None) -> bytes:
        """``doc`` signed by ``keys`` (default: the first ``threshold`` fleet keys)."""
        return sign_fleet(doc, keys if keys is not None else self.fleet[: self.threshold])
