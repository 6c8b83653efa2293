"""The trust document schema and trust-file signing.

Invariants:
- Unknown fields are refused at every level and types are strict; duplicate JSON keys and
  NaN are refused (``loads_strict``), in a signed file's payload too.
- Every key id equals the SHA-256 of its public key.
- A root threshold never exceeds the number of root keys.
- Trust signatures use the trust payload type, so they can never pass as bundle signatures.
- The ``fleet`` role (keys that sign fleet documents, see ``fleetdoc.py``) is allowed only
  in a document with a ``root`` section and is honoured only once that document is
  root-signed (``TrustStore.fleet_keys``): a gateway's local, unsigned trust file can never
  hand an attacker the power to pick what the gateway installs.
"""

from __future__ import annotations

import base64
from typing import Annotated, Literal

import msgspec
import nacl.signing
from msgspec import Meta

from wasmgate.signing.envelope import (
    TRUST_PAYLOAD_TYPE,
    Envelope,
    EnvelopeFormatError,
    Instant,
    KeyId,
    count_valid,
    loads_strict,
    sign,
    to_json,
)
from wasmgate.signing.errors import (
    KeyFileError,
    SigningError,
    TrustFileError,
    TrustSignatureError,
)
from wasmgate.signing.keys import decode_public, key_id_of
from wasmgate.typed import Document, Invalid, convert

TRUST_FORMAT = "wasmgate-trust/1"
Pattern = Annotated[str, Meta(pattern=r"^[A-Za-z0-9._*?-]{1,64}\Z")]  # \Z: see envelope.py
LimitName = Literal[
    "memory_mb", "deadline_ms", "fuel", "max_input_bytes", "max_output_bytes",
    "max_in_flight", "queue_size", "weight",
]  # fmt: skip


Keys = Annotated[dict[KeyId, str], Meta(min_length=1, max_length=32)]
Patterns = Annotated[list[Pattern], Meta(min_length=1, max_length=64)]


class SignerEntry(Document, kw_only=True):
    """A bundle-signing key, the names it may sign and its optional limit ceilings."""

    public: str
    names: Patterns
    max_limits: dict[LimitName, int] = msgspec.field(default_factory=dict)
    comment: Annotated[str, Meta(max_length=200)] = ""


class RootSection(Document, kw_only=True):
    """Root keys (key id -> base64 public key) and how many must sign the trust file."""

    keys: Keys
    threshold: Annotated[int, Meta(ge=1)]


class FleetSection(Document, kw_only=True):
    """The fleet role: keys that sign fleet documents, k-of-n, and the bundle names they
    may ask for (fnmatch patterns, the same matching as signer scopes)."""

    keys: Keys
    threshold: Annotated[int, Meta(ge=1)] = 1
    names: Patterns


class Revoked(Document, kw_only=True):
    """Revoked signer key ids and revoked bundle manifest digests."""

    keys: list[KeyId] = msgspec.field(default_factory=list)
    bundles: list[KeyId] = msgspec.field(default_factory=list)


class TrustDoc(Document, kw_only=True):
    """The trust document (the payload of a signed trust file, or the plain file)."""

    format: Literal["wasmgate-trust/1"] = "wasmgate-trust/1"
    version: Annotated[int, Meta(ge=1)] = 1
    expires: Instant | None = None
    clock_floor: Instant | None = None
    """Root-signed files only: sets the daemon's clock floor (also lower, to repair one
    pushed too far ahead) the first time this trust version is applied."""
    root: RootSection | None = None
    fleet: FleetSection | None = None
    """Root-signed files only: the keys that may sign fleet documents (``fleetdoc.py``)."""
    signers: Annotated[dict[KeyId, SignerEntry], Meta(max_length=1024)] = msgspec.field(
        default_factory=dict
    )
    revoked: Revoked = msgspec.field(default_factory=Revoked)

    def __post_init__(self) -> None:
        pairs = [(k, s.public) for k, s in self.signers.items()]
        pairs += list(self.root.keys.items()) if self.root else []
        pairs += list(self.fleet.keys.items()) if self.fleet else []
        for kid, public in pairs:
            try:
                actual = key_id_of(decode_public(public))
            except KeyFileError as e:
                raise ValueError(str(e)) from e
            if actual != kid:
                raise ValueError(f"key id {kid[:16]}... does not match its public key")
        if self.root and self.root.threshold > len(self.root.keys):
            raise ValueError("root threshold is larger than the number of root keys")
        if self.clock_floor is not None and self.root is None:
            raise ValueError("clock_floor is honoured only in a root-signed trust file")
        if self.fleet is not None:
            if self.root is None:
                raise ValueError("the fleet role is accepted only in a root-signed trust file")
            if self.fleet.threshold > len(self.fleet.keys):
                raise ValueError("fleet threshold is larger than the number of fleet keys")

    def root_keys(self) -> dict[str, nacl.signing.VerifyKey]:
        """The root keys by key id (empty when unsigned)."""
        keys = self.root.keys.items() if self.root else ()
        return {k: decode_public(v) for k, v in keys}

    def to_json(self) -> bytes:
        """Serialise (stable field order, indented)."""
        return to_json(self)


def parse_doc(data: bytes, source: str) -> TrustDoc:
    """A trust document from JSON bytes (strict: ``loads_strict``, then ``convert``)."""
    try:
        return convert(loads_strict(data), TrustDoc)
    except (EnvelopeFormatError, Invalid) as e:
        raise TrustFileError(f"trust file {source}: {e}") from e


def verify_threshold(
    doc_bytes: bytes,
    env: Envelope,
    keys: dict[str, nacl.signing.VerifyKey],
    k: int,
    who: str,
    *,
    role: str = "root",
    payload_type: str = TRUST_PAYLOAD_TYPE,
    error: type[SigningError] = TrustSignatureError,
) -> set[str]:
    """Key ids of ``keys`` that validly signed ``doc_bytes`` under ``payload_type``; raise
    ``error`` unless there are at least ``k`` (each key counts once)."""
    good = count_valid(keys, payload_type, doc_bytes, env)
    if len(good) < k:
        strangers = sorted(s.key_id[:16] for s in env.signatures if s.key_id not in keys)
        extra = f" (not {role} keys: {', '.join(strangers)})" if strangers else ""
        raise error(f"{who}: {len(good)} valid {role} signature(s), need {k}{extra}")
    return good


def sign_trust(doc: TrustDoc, keys: list[nacl.signing.SigningKey]) -> bytes:
    """Return a signed trust file (envelope) for ``doc``, signed by every key in ``keys``."""
    payload = doc.to_json()
    sigs = [sign(k, TRUST_PAYLOAD_TYPE, payload) for k in keys]
    b64 = base64.b64encode(payload).decode()
    return Envelope(payload_type=TRUST_PAYLOAD_TYPE, payload=b64, signatures=sigs).to_json()
