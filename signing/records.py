"""Install records (the exact manifest and signature bytes of every committed bundle), blobs.

``records/<manifest digest>.json`` = ``{"manifest": base64, "signature": base64}``.

Invariants:
- A record is written (atomically, durably) before the state that makes its bundle
  active, so the records always include every committed version.
- Records are re-parsed with the strict manifest parser when read; the file name is the
  manifest digest (validated hex), never a name taken from an archive.
- Rebuilding floors from records only ever raises them.
- A `VerifiedBlob`'s digest is computed from its bytes when it is made; no caller supplies
  it, so whoever gets one (a backend keying a derived cache) can rely on it unhashed.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from wasmgate.signing.checks import authenticate, check_time
from wasmgate.signing.errors import BlobIntegrityError, BlobNotFoundError, SigningError
from wasmgate.signing.manifest import Manifest, parse_manifest
from wasmgate.signing.state import ActiveBundle, NameState, StateDoc, atomic_write
from wasmgate.signing.trust import TrustStore

log = logging.getLogger("wasmgate.signing")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def read_blob(blob_dir: Path, sha256: str) -> bytes:
    """The bytes of blob ``sha256``; :class:`BlobNotFoundError` for a bad or unknown name."""
    if not _HEX64.fullmatch(sha256):
        raise BlobNotFoundError(f"blob {sha256[:80]!r}: not a SHA-256 hex digest")
    try:
        return (blob_dir / sha256).read_bytes()
    except FileNotFoundError:
        raise BlobNotFoundError(f"blob {sha256}: not in the store") from None


@dataclass(frozen=True)
class VerifiedBlob:
    """Bytes and the SHA-256 (hex) they hashed to when this was made: ``VerifiedBlob(data)``
    computes it, and no constructor or ``replace`` takes a digest from the caller."""

    data: bytes = field(repr=False)
    sha256: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sha256", hashlib.sha256(self.data).hexdigest())


def verified_blob(blob_dir: Path, sha256: str) -> VerifiedBlob:
    """Blob ``sha256``, hashed now; :class:`BlobIntegrityError` if it no longer matches."""
    blob = VerifiedBlob(read_blob(blob_dir, sha256))
    if blob.sha256 != sha256:
        raise BlobIntegrityError(f"blob {sha256}: content now hashes to {blob.sha256}")
    return blob


def write_record(records_dir: Path, digest: str, manifest_bytes: bytes, sig: bytes) -> None:
    """Write the record of bundle ``digest`` atomically."""
    record = {
        "manifest": base64.b64encode(manifest_bytes).decode(),
        "signature": base64.b64encode(sig).decode(),
    }
    atomic_write(records_dir / f"{digest}.json", json.dumps(record).encode())


def read_record(path: Path) -> tuple[Manifest, bytes, bytes]:
    """(manifest, manifest bytes, signature bytes) of one record."""
    rec = json.loads(path.read_bytes())
    manifest_bytes = base64.b64decode(rec["manifest"], validate=True)
    sig_bytes = base64.b64decode(rec["signature"], validate=True)
    return parse_manifest(manifest_bytes, path.name), manifest_bytes, sig_bytes


def raise_floors(doc: StateDoc, records: list[Path]) -> None:
    """Raise each name's floor (and active version) to its highest record in ``doc``."""
    for path in records:
        try:
            manifest = read_record(path)[0]
        except (SigningError, OSError, ValueError, KeyError, TypeError) as e:
            log.warning("skipping unreadable install record %s: %s", path, e)
            continue
        entry = doc.bundles.get(manifest.name)
        if entry is None or manifest.version > entry.floor:
            active = ActiveBundle(version=manifest.version, digest=path.stem)
            doc.bundles[manifest.name] = NameState(
                floor=manifest.version, floor_digest=path.stem, active=active
            )


def recheck_records(
    records: Path, state: StateDoc, trust: TrustStore, now: datetime, *, staged: bool
) -> dict[str, SigningError]:
    """`BundleStore.recheck`: each active (or ``staged``) record's refusal by name."""
    problems: dict[str, SigningError] = {}
    folder = records / "staged" if staged else records
    for name, entry in sorted(state.bundles.items()):
        target = entry.staged if staged else entry.active
        if target is None:
            continue
        path = folder / f"{target.digest}.json"
        try:
            _, manifest_bytes, sig_bytes = read_record(path)
            manifest, _, digest = authenticate(manifest_bytes, sig_bytes, trust, name)
            if digest != target.digest:
                raise BlobIntegrityError(f"install record {path.name}: manifest changed")
            check_time(manifest, state, now)
        except SigningError as e:
            problems[name] = e
    return problems
