"""Bundle verification: one streaming pass in the order the design fixes.

Order: size caps (whole file, manifest, signature) -> signature by a trusted, unrevoked key
-> manifest schema, name scope (every claimed name), limit ceilings, bundle revocation ->
issued not in the future and not expired, both against max(now, clock floor) -> version
against the anti-rollback floor -> each member: type, name, duplicates, size caps, listed,
declared size, SHA-256 -> nothing missing.

The signature, time and version checks are `checks.py`'s (the store reruns them on its
records); this module reads the archive around them.

Invariants:
- Nothing from the manifest is parsed before its signature verifies.
- Every byte handed to a :class:`FileSink` is hashed exactly as written; a file is only
  accepted once its full length has been hashed and matched.
- Verification has no side effects; the caller commits only after :func:`verify_stream`
  returns.
- :func:`verify_bundle` stores nothing, so it may hash a file through a read-only mapping
  (:func:`~wasmgate.signing.source.map_source`); whatever stores bytes reads them into
  private buffers first (:func:`~wasmgate.signing.source.open_source`).
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import msgspec

from wasmgate._compat import UTC
from wasmgate.signing.archive import CHUNK, ArchiveReader, Chunk
from wasmgate.signing.checks import authenticate, check_fresh
from wasmgate.signing.envelope import EnvelopeFormatError, parse_envelope
from wasmgate.signing.errors import (
    BundleTooLargeError,
    DuplicateMemberError,
    FileHashError,
    FileSizeError,
    MalformedArchiveError,
    ManifestError,
    MissingFileError,
    UnlistedFileError,
)
from wasmgate.signing.manifest import Manifest, parse_manifest
from wasmgate.signing.source import map_source, open_source
from wasmgate.signing.state import StateDoc
from wasmgate.signing.trust import TrustStore

if TYPE_CHECKING:  # fleet documents load with the first one (see signing/__init__.py)
    from wasmgate.signing.fleetdoc import Downgrade

MAX_MANIFEST_BYTES = 64 * 1024
MAX_SIGNATURE_BYTES = 16 * 1024
DISCARD_CHUNK = 4 * CHUNK
"""Hash slice when nothing consumes the bytes: few, large ``update`` calls (GIL released)."""


class VerifiedBundle(msgspec.Struct, frozen=True):
    """A bundle whose signature, freshness and files all verified."""

    manifest: Manifest
    digest: str
    """SHA-256 (hex) of the exact ``manifest.json`` bytes: the bundle's identity."""
    key_id: str
    manifest_bytes: bytes
    signature_bytes: bytes


class FileSink(Protocol):
    """Receives the bytes of one member as they are hashed."""

    def write(self, chunk: Chunk) -> Callable[[], None]:
        """Start consuming ``chunk``; the returned function waits until that is done.

        ``chunk`` may be a reused buffer: it must not be touched after the wait returns.
        """

    def finish(self, sha256: str) -> None:
        """The member verified; ``sha256`` is its digest."""


SinkFactory = Callable[[str], FileSink]


def _read_named(reader: ArchiveReader, label: str, name: str, cap: int) -> bytes:
    member = reader.next_member()
    if member is None or member.name != name:
        found = "end of archive" if member is None else repr(member.name)
        raise MalformedArchiveError(label, f"expected member {name!r}, found {found}")
    if member.size > cap:
        raise BundleTooLargeError(label, f"{name} is {member.size} bytes, cap is {cap}")
    return reader.read_all()


def _stream_files(reader: ArchiveReader, manifest: Manifest, sink_for: SinkFactory | None) -> None:
    label = manifest.label()
    seen: set[str] = set()
    while (member := reader.next_member()) is not None:
        if member.name in seen or member.name in ("manifest.json", "manifest.sig"):
            raise DuplicateMemberError(label, f"member {member.name!r} appears twice")
        seen.add(member.name)
        entry = manifest.files.get(member.name)
        if entry is None:
            raise UnlistedFileError(label, f"file {member.name!r} is not listed in the manifest")
        if member.size != entry.size:
            raise FileSizeError(
                label, f"file {member.name!r} is {member.size} bytes, manifest says {entry.size}"
            )
        sink = sink_for(member.name) if sink_for else None
        if _member_sha256(reader, sink) != entry.sha256:
            raise FileHashError(label, f"file {member.name!r}: SHA-256 does not match")
        if sink is not None:
            sink.finish(entry.sha256)
    missing = sorted(set(manifest.files) - seen)
    if missing:
        raise MissingFileError(label, f"listed but not in the archive: {', '.join(missing)}")


def _member_sha256(reader: ArchiveReader, sink: FileSink | None) -> str:
    h = hashlib.sha256()
    if sink is None:
        for chunk in reader.chunks(DISCARD_CHUNK):
            h.update(chunk)
        return h.hexdigest()
    for chunk in reader.chunks():
        wait = sink.write(chunk)  # copying (other thread) overlaps with hashing
        h.update(chunk)
        wait()
    return h.hexdigest()


def verify_stream(
    f: io.BufferedIOBase | memoryview,
    total: int,
    label: str,
    trust: TrustStore,
    *,
    max_bundle_bytes: int,
    state: StateDoc | None = None,
    now: datetime | None = None,
    sink_for: SinkFactory | None = None,
    downgrades: Sequence[Downgrade] | None = None,
) -> VerifiedBundle:
    """Verify one archive from ``f``; every file's bytes go to ``sink_for(name)`` if given.

    ``downgrades``: the fleet document's signed permissions (see `checks.check_fresh`).
    """
    reader = ArchiveReader(f, total, label, max_bundle_bytes)
    manifest_bytes = _read_named(reader, label, "manifest.json", MAX_MANIFEST_BYTES)
    sig_bytes = _read_named(reader, label, "manifest.sig", MAX_SIGNATURE_BYTES)
    manifest, key_id, digest = authenticate(manifest_bytes, sig_bytes, trust, label)
    if manifest.total_size() > max_bundle_bytes:
        raise BundleTooLargeError(
            manifest.label(),
            f"listed files exceed the bundle size cap of {max_bundle_bytes} bytes "
            "(limits.max_bundle_bytes)",
        )
    check_fresh(manifest, digest, state, now or datetime.now(UTC), downgrades)
    _stream_files(reader, manifest, sink_for)
    return VerifiedBundle(manifest, digest, key_id, manifest_bytes, sig_bytes)


def verify_bundle(
    source: bytes | Path,
    trust: TrustStore,
    *,
    max_bundle_bytes: int,
    state: StateDoc | None = None,
    now: datetime | None = None,
) -> VerifiedBundle:
    """Fully verify a bundle without installing it (``state`` adds the anti-rollback check).

    A file is hashed straight from a read-only mapping: this stores nothing, so bytes that
    change underneath can only make verification fail (see :func:`map_source`).
    """
    with map_source(source, max_bundle_bytes) as (f, total, label):
        return verify_stream(
            f, total, label, trust, max_bundle_bytes=max_bundle_bytes, state=state, now=now
        )


class BundleInfo(msgspec.Struct, frozen=True):
    """What ``inspect`` shows: the manifest as stated, *not* verified."""

    manifest: Manifest
    digest: str
    key_ids: list[str]
    size: int


def inspect_bundle(source: bytes | Path, *, max_bundle_bytes: int) -> BundleInfo:
    """Read a bundle's manifest and signer key ids without verifying anything else.

    The archive structure and the manifest schema are still checked strictly; use
    :func:`verify_bundle` before trusting what this returns.
    """
    with open_source(source, max_bundle_bytes) as (f, total, label):
        reader = ArchiveReader(f, total, label, max_bundle_bytes)
        manifest_bytes = _read_named(reader, label, "manifest.json", MAX_MANIFEST_BYTES)
        sig_bytes = _read_named(reader, label, "manifest.sig", MAX_SIGNATURE_BYTES)
    try:
        key_ids = [s.key_id for s in parse_envelope(sig_bytes).signatures]
    except EnvelopeFormatError as e:
        raise ManifestError(label, f"manifest.sig: {e}") from e
    manifest = parse_manifest(manifest_bytes, label)
    return BundleInfo(manifest, hashlib.sha256(manifest_bytes).hexdigest(), key_ids, total)
