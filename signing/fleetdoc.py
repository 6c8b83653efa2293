"""Fleet documents: the signed desired state of a group of gateways (or of named gateways).

A fleet document says which bundles (name, version, OCI reference by digest, optional
staged share) the targeted gateways should run, until when it is valid (``expires``), and
its ``serial``. It travels as a signature envelope (``envelope.py``) with payload type
:data:`~wasmgate.signing.envelope.FLEET_PAYLOAD_TYPE`, signed by keys of the ``fleet`` role
of the root-signed trust file (``trustdoc.FleetSection``): k-of-n like the root role.

Invariants (checked by :func:`verify_fleet`, in this order; each refusal is its own
:class:`~wasmgate.signing.errors.FleetDocError` and changes nothing):
- Size cap, then strict envelope JSON (no duplicate keys, NaN/Infinity, deep nesting).
- Signatures first: a threshold of distinct, unrevoked fleet keys must have signed
  ``PAE(FLEET_PAYLOAD_TYPE, payload)``; nothing in the payload is parsed before. A trust-file
  or bundle signature can never count (other payload type), nor can a root or signer key
  that is not also a fleet key.
- Strict schema (unknown fields refused); then serial strictly above the last applied one
  (replay), not expired, every bundle and downgrade name inside the role's ``names``.
- The bundle fetched from a ``ref`` must be exactly the name and version asked for
  and claim no name outside the role's scope (:func:`check_delivered`;
  ``BundleStore.stage(..., expect=(name, version))``).
- A ``Downgrade`` is the only thing that lets a store install a lower version of a name
  (``BundleStore.stage(..., downgrades=doc.downgrades)``); it names the exact version, and
  that version must be the one the document asks for.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Literal

import msgspec
import nacl.signing
from msgspec import Meta

from wasmgate.signing.envelope import (
    FLEET_PAYLOAD_TYPE,
    Envelope,
    EnvelopeFormatError,
    Instant,
    loads_strict,
    parse_envelope,
    sign,
    to_json,
)
from wasmgate.signing.errors import (
    FleetExpiredError,
    FleetFormatError,
    FleetReplayError,
    FleetScopeError,
    FleetSignatureError,
)
from wasmgate.signing.manifest import NAME_RE, Manifest
from wasmgate.signing.scope import claimed_names, listed, matches
from wasmgate.signing.trust import TrustStore
from wasmgate.signing.trustdoc import verify_threshold
from wasmgate.typed import Document, Invalid, convert

FLEET_FORMAT: Literal["wasmgate-fleet/1"] = "wasmgate-fleet/1"
MAX_FLEET_BYTES = 1024 * 1024
MAX_SERIAL = 2**63 - 1
REF_RE = (
    r"^([A-Za-z0-9.-]+|\[[0-9A-Fa-f:]+\])(:[0-9]{1,5})?"
    r"/[a-z0-9]+([._/-]+[a-z0-9]+)*@sha256:[0-9a-f]{64}\Z"
)
"""``HOST[:PORT]/REPO@sha256:<manifest digest>``: always pinned by digest, never a tag."""
TOPIC_LEVEL_RE = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z"
"""A group or gateway id: one MQTT topic level, so never ``/``, ``+``, ``#`` or empty."""
BundleName = Annotated[str, Meta(pattern=NAME_RE)]
TopicLevel = Annotated[str, Meta(pattern=TOPIC_LEVEL_RE)]
Version = Annotated[int, Meta(ge=0, le=2**53)]


class DesiredBundle(Document, kw_only=True):
    """One wanted bundle: exact version, where to pull it, optional staged share (1-99 %)."""

    name: BundleName
    version: Version
    ref: Annotated[str, Meta(pattern=REF_RE, max_length=512)]
    staged_percent: Annotated[int, Meta(ge=1, le=99)] | None = None


class Downgrade(Document, kw_only=True):
    """Permission to install exactly ``version`` of ``name`` below its anti-rollback floor."""

    name: BundleName
    version: Version


class Target(Document, kw_only=True):
    """Who the document is for: a gateway group or a list of gateway ids (exactly one)."""

    group: TopicLevel | None = None
    gateways: Annotated[list[TopicLevel], Meta(min_length=1, max_length=4096)] | None = None

    def __post_init__(self) -> None:
        if (self.group is None) == (self.gateways is None):
            raise ValueError("give exactly one of target.group and target.gateways")
        if self.gateways is not None and len(set(self.gateways)) != len(self.gateways):
            raise ValueError("target.gateways lists a gateway twice")


class FleetDoc(Document, kw_only=True):
    """The desired state (the payload of a signed fleet document)."""

    format: Literal["wasmgate-fleet/1"] = FLEET_FORMAT
    serial: Annotated[int, Meta(ge=1, le=MAX_SERIAL)]
    issued: Instant
    expires: Instant
    target: Target
    bundles: Annotated[list[DesiredBundle], Meta(max_length=256)]
    downgrades: Annotated[list[Downgrade], Meta(max_length=256)] = msgspec.field(
        default_factory=list
    )

    def __post_init__(self) -> None:
        if self.expires <= self.issued:
            raise ValueError("expires is not after issued")
        names = [b.name for b in self.bundles]
        if len(set(names)) != len(names):
            raise ValueError("a bundle name appears twice in bundles")
        if len({d.name for d in self.downgrades}) != len(self.downgrades):
            raise ValueError("a bundle name appears twice in downgrades")
        wanted = {(b.name, b.version): b for b in self.bundles}
        for d in self.downgrades:
            # A permission for a version the document does not ask for would sit unused
            # until some later install matched it by accident: refuse it outright.
            b = wanted.get((d.name, d.version))
            if b is None:
                raise ValueError(f"downgrade {d.name}@{d.version} is not among the bundles")
            if b.staged_percent is not None:
                raise ValueError(f"downgrade {d.name}@{d.version} cannot be staged (a way back)")

    def names(self) -> list[tuple[str, str]]:
        """Every (field, bundle name) the document asks for, for the scope check.

        Downgrades first: a downgrade's name is also a bundle's, and the error should say
        that the stronger power (lowering a floor) was asked for outside the scope.
        """
        out = [(f"downgrades[{i}]", d.name) for i, d in enumerate(self.downgrades)]
        return out + [(f"bundles[{i}]", b.name) for i, b in enumerate(self.bundles)]

    def to_json(self) -> bytes:
        """Serialise (stable field order; None fields left out)."""
        return to_json(self)


def sign_fleet(doc: FleetDoc, keys: list[nacl.signing.SigningKey]) -> bytes:
    """The signed fleet document (envelope JSON) for ``doc``, signed by every key of ``keys``."""
    payload = doc.to_json()
    sigs = [sign(k, FLEET_PAYLOAD_TYPE, payload) for k in keys]
    b64 = base64.b64encode(payload).decode()
    return Envelope(payload_type=FLEET_PAYLOAD_TYPE, payload=b64, signatures=sigs).to_json()


def _envelope(data: bytes) -> tuple[Envelope, bytes]:
    if len(data) > MAX_FLEET_BYTES:
        raise FleetFormatError(f"fleet document: {len(data)} bytes, cap is {MAX_FLEET_BYTES}")
    try:
        env = parse_envelope(data)
        payload = env.payload_bytes()
    except EnvelopeFormatError as e:
        raise FleetFormatError(f"fleet document: {e}") from e
    if env.payload_type != FLEET_PAYLOAD_TYPE:
        raise FleetSignatureError(
            f"fleet document: payload type {env.payload_type!r} is not {FLEET_PAYLOAD_TYPE!r}"
        )
    return env, payload


def _authenticate(env: Envelope, payload: bytes, trust: TrustStore) -> set[str]:
    role = trust.fleet_role()
    if role is None:
        raise FleetSignatureError(
            "fleet document: the trust store has no fleet role (a root-signed trust file "
            "with a 'fleet' section)"
        )
    keys = trust.fleet_keys()
    try:
        return verify_threshold(
            payload, env, keys, role.threshold, "fleet document",
            role="fleet", payload_type=FLEET_PAYLOAD_TYPE, error=FleetSignatureError,
        )  # fmt: skip
    except FleetSignatureError as e:
        # Name the role each other signer holds here: a document signed with the bundle
        # signer's key (the common slip) says so, instead of only "not fleet keys".
        others = sorted({s.key_id for s in env.signatures if s.key_id not in keys})
        roles = "; ".join(f"key {k[:16]} is {trust.describe_key(k)}" for k in others)
        if not roles:
            raise
        raise FleetSignatureError(
            f"{e}: {roles}; a fleet document needs a key of the fleet role"
        ) from None


def parse_fleet(payload: bytes) -> FleetDoc:
    """Parse a fleet document payload strictly; :class:`FleetFormatError` says what is wrong."""
    try:
        return convert(loads_strict(payload), FleetDoc)
    except (EnvelopeFormatError, Invalid) as e:
        raise FleetFormatError(f"fleet document: {e}") from e


def check_delivered(name: str, version: int, manifest: Manifest, patterns: Sequence[str]) -> None:
    """Raise :class:`FleetScopeError` unless ``manifest`` is the bundle the document asked for.

    A ``ref`` is only where to fetch: the bundle found there must be exactly the name and
    version the signed document names, or a fleet key scoped to ``acme-*`` could point a
    ref at another tenant's bundle and install it. Every name the bundle claims (routes,
    models: ``scope.claimed_names``) must also lie inside the fleet role's ``patterns``.
    """
    if (manifest.name, manifest.version) != (name, version):
        raise FleetScopeError(
            f"bundle {manifest.label()}: the fleet document asks for {name}@{version} here"
        )
    for field, claimed in claimed_names(manifest):
        if not matches(claimed, patterns):
            raise FleetScopeError(
                f"bundle {manifest.label()}: {field} {claimed!r} is outside the fleet role's "
                f"names ({listed(patterns)})"
            )


def peek_fleet(data: bytes) -> FleetDoc:
    """The document inside a signed fleet file, signatures NOT checked (for display and the
    operator's own checks; a gateway always uses :func:`verify_fleet`)."""
    return parse_fleet(_envelope(data)[1])


def verify_fleet(
    data: bytes, trust: TrustStore, *, last_serial: int | None, now: datetime
) -> FleetDoc:
    """The fleet document in ``data`` once every check of the module docstring passed.

    ``last_serial`` is the serial of the last applied document (None if none yet).
    """
    env, payload = _envelope(data)
    _authenticate(env, payload, trust)
    doc = parse_fleet(payload)
    label = f"fleet document serial {doc.serial}"
    if last_serial is not None and doc.serial <= last_serial:
        raise FleetReplayError(f"{label}: not above the last applied serial {last_serial}")
    if doc.expires <= now:
        raise FleetExpiredError(f"{label}: expired at {doc.expires.isoformat()}")
    role = trust.fleet_role()
    patterns = role.names if role else []
    for field, name in doc.names():
        if not matches(name, patterns):
            raise FleetScopeError(
                f"{label}: {field} {name!r} is outside the fleet role's names ({listed(patterns)})"
            )
    return doc
