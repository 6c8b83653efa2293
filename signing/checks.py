"""The checks of a signed manifest that need no archive: who signed it, when, which version.

`authenticate` verifies the signature by a trusted, unrevoked key, then parses the manifest
and checks its name scope, limit ceilings and bundle revocation (nothing from the manifest
is parsed before its signature verifies); `check_time` refuses a manifest issued in the
future or expired, against max(now, clock floor); `check_fresh` adds the version against
the anti-rollback floor (a lower one only with a signed fleet downgrade). A fresh install
runs them inside `verify.verify_stream`; the store runs them again on its install records
(`records.recheck_records`: at start and when the trust store changes).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from wasmgate.signing.envelope import (
    BUNDLE_PAYLOAD_TYPE,
    EnvelopeFormatError,
    parse_envelope,
    verify_signature,
)
from wasmgate.signing.errors import (
    BadSignatureError,
    ExpiredError,
    FleetDowngradeError,
    FutureIssuedError,
    ManifestError,
    RollbackError,
    SigningError,
    UntrustedKeyError,
    VersionConflictError,
)
from wasmgate.signing.manifest import Manifest, parse_manifest
from wasmgate.signing.state import StateDoc
from wasmgate.signing.trust import TrustStore

if TYPE_CHECKING:  # fleet documents load with the first one (see signing/__init__.py)
    from wasmgate.signing.fleetdoc import Downgrade

MAX_ISSUE_SKEW = timedelta(minutes=5)
"""How far a manifest's ``issued_at`` may lie ahead of max(now, clock floor): clock skew
between the signing machine and the gateway, not more."""


def authenticate(
    manifest_bytes: bytes, sig_bytes: bytes, trust: TrustStore, label: str
) -> tuple[Manifest, str, str]:
    """Check the signature, then parse and check the manifest; returns (manifest, key, digest)."""
    try:
        env = parse_envelope(sig_bytes)
    except EnvelopeFormatError as e:
        raise ManifestError(label, f"manifest.sig: {e}") from e
    if env.payload_type != BUNDLE_PAYLOAD_TYPE or env.payload is not None:
        raise BadSignatureError(label, f"manifest.sig: wrong payload type {env.payload_type!r}")
    if not env.signatures:
        raise UntrustedKeyError(label, "manifest.sig holds no signature")
    problem: SigningError | None = None
    for sig in env.signatures:
        try:
            public = trust.signer_key(label, sig.key_id)
        except SigningError as e:
            problem = problem or e
            continue
        if not verify_signature(public, BUNDLE_PAYLOAD_TYPE, manifest_bytes, sig):
            problem = BadSignatureError(label, f"signature by key {sig.key_id} does not verify")
            continue
        return _checked_manifest(manifest_bytes, sig.key_id, trust, label)
    raise problem or UntrustedKeyError(label, "no usable signature")


def _checked_manifest(
    manifest_bytes: bytes, key_id: str, trust: TrustStore, label: str
) -> tuple[Manifest, str, str]:
    manifest = parse_manifest(manifest_bytes, label)
    if manifest.key_id != key_id:
        raise BadSignatureError(
            manifest.label(), f"manifest names key {manifest.key_id}, signed by {key_id}"
        )
    digest = hashlib.sha256(manifest_bytes).hexdigest()
    trust.check_manifest(manifest, key_id, digest)
    return manifest, key_id, digest


def check_time(manifest: Manifest, state: StateDoc | None, now: datetime) -> None:
    """Issued not in the future (beyond :data:`MAX_ISSUE_SKEW`), not expired.

    Both against max(now, clock floor). A bundle's own ``issued_at`` never moves the floor
    (see ``state.py``), so a claim far in the future is refused here instead of poisoning
    the clock for every other bundle.
    """
    label = manifest.label()
    if state is not None and state.clock_floor is not None:
        now = max(now, state.clock_floor)
    if manifest.issued_at > now + MAX_ISSUE_SKEW:
        raise FutureIssuedError(
            label,
            f"issued at {manifest.issued_at.isoformat()}, in the future (now {now.isoformat()}, "
            f"allowed skew {MAX_ISSUE_SKEW.total_seconds():g}s)",
        )
    if manifest.is_expired(now):
        raise ExpiredError(label, f"expired at {manifest.expires.isoformat()} (now {now})")


def check_fresh(
    manifest: Manifest,
    digest: str,
    state: StateDoc | None,
    now: datetime,
    downgrades: Sequence[Downgrade] | None = None,
) -> int | None:
    """:func:`check_time`, then version against the per-name floor.

    ``downgrades`` are the signed permissions of the fleet document behind this install
    (None for a local install). Returns the floor that installing would lower (only when a
    permission names exactly this name and version), else None. A lower version without
    one raises :class:`RollbackError`, or :class:`FleetDowngradeError` for a fleet install.
    """
    label = manifest.label()
    check_time(manifest, state, now)
    entry = state.bundles.get(manifest.name) if state else None
    if entry is None:
        return None
    if manifest.version < entry.floor:
        why = f"version {manifest.version} < installed {entry.floor}"
        if downgrades is None:
            raise RollbackError(label, why)
        # Imported here: only a fleet install passes downgrades (fleet documents' models
        # load with the first document, not at every start).
        from wasmgate.signing.fleetdoc import Downgrade  # noqa: PLC0415

        wanted = Downgrade(name=manifest.name, version=manifest.version)
        if wanted not in downgrades:
            raise FleetDowngradeError(label, f"{why}, and no signed downgrade permits it")
        return entry.floor
    if manifest.version == entry.floor and digest != entry.floor_digest:
        raise VersionConflictError(
            label, f"version {manifest.version} is installed with different content"
        )
    return None
