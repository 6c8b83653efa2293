"""Anti-rollback state: the version floor per bundle name, the active version, a clock floor,
and the staged (canary) candidate of each name with its share and metric gates.

File: ``<state_dir>/state.json`` plus the previous copy ``state.prev.json``. Each holds
``{"checksum": sha256(canonical state), "state": {...}}``.

Invariants:
- Writes are atomic and durable: temp file, ``fsync``, ``os.replace``, ``fsync`` of the
  directory. The previous copy is written (durably) before the new one replaces it.
- Loading picks the valid copy with the higher ``generation``. A copy is valid only if it
  parses, matches the schema and its checksum.
- If state files exist but none is valid, loading raises :class:`StateCorruptedError`:
  floors are never silently reset to zero. (``BundleStore`` can rebuild them from its
  install records on explicit request.)
- ``floor`` never decreases. ``clock_floor`` moves up only with the local clock (at each
  commit) and is set only by a root-signed trust document (``TrustDoc.clock_floor``, applied
  once per trust version): never from a bundle's own ``issued_at``, which any scoped signer
  could put years ahead and so make every other tenant's bundle look expired.
- A staged candidate does not raise the floor: only the promotion (or an install at 100 %)
  does, so aborting a candidate leaves the current version installable again.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from datetime import datetime
from pathlib import Path
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from wasmgate.signing.envelope import Instant, KeyId
from wasmgate.signing.errors import StateCorruptedError
from wasmgate.signing.manifest import Release
from wasmgate.typed import convert, plain

STATE_FILE = "state.json"
PREV_FILE = "state.prev.json"


def fsync_dir(path: Path) -> None:
    """``fsync`` a directory so a rename inside it is durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data`` atomically and durably (temp, fsync, rename, fsync dir)."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


class _Record(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """`wasmgate.typed.Document`'s rules, but mutable: the store edits a deep copy of the
    state in place. (Not a Document subclass with ``frozen=False``: type checkers refuse a
    mutable subclass of a frozen class. Assignments are not validated; what is saved is
    checked when it is read back.)"""


class ActiveBundle(_Record, kw_only=True):
    """The installed version of one name and its manifest digest."""

    version: Annotated[int, Meta(ge=0)]
    digest: KeyId


class StagedBundle(_Record, kw_only=True):
    """A candidate answering ``percent`` of the requests next to the active version."""

    version: Annotated[int, Meta(ge=0)]
    digest: KeyId
    percent: Annotated[int, Meta(ge=1, le=99)]
    gates: Release | None = None
    """The metric gates in force (manifest tightened by the operator), None = manual."""


class NameState(_Record, kw_only=True):
    """Per-name record: highest version seen (and its digest), what is active (None if removed),
    the staged candidate (if any)."""

    floor: Annotated[int, Meta(ge=0)]
    floor_digest: KeyId
    active: ActiveBundle | None = None
    staged: StagedBundle | None = None


class StateDoc(_Record, kw_only=True):
    """The whole anti-rollback state."""

    format: Literal["wasmgate-state/1"] = "wasmgate-state/1"
    generation: Annotated[int, Meta(ge=0)] = 0
    clock_floor: Instant | None = None
    clock_set_by_trust: Annotated[int, Meta(ge=0)] = 0
    """Version of the root-signed trust document whose ``clock_floor`` was applied last."""
    bundles: dict[str, NameState] = msgspec.field(default_factory=dict)

    def advance_clock(self, now: datetime) -> None:
        """Raise the clock floor to the local clock's ``now`` if it is later."""
        if self.clock_floor is None or now > self.clock_floor:
            self.clock_floor = now

    def set_clock(self, floor: datetime, trust_version: int) -> bool:
        """Apply a root-signed trust document's ``clock_floor`` once; True if it applied."""
        if trust_version <= self.clock_set_by_trust:
            return False
        self.clock_floor, self.clock_set_by_trust = floor, trust_version
        return True


def _encode(doc: StateDoc) -> bytes:
    state = plain(doc)
    canon = json.dumps(state, sort_keys=True, separators=(",", ":")).encode()
    body = {"checksum": hashlib.sha256(canon).hexdigest(), "state": state}
    return json.dumps(body, indent=1, sort_keys=True).encode() + b"\n"


def _decode(data: bytes) -> StateDoc:
    body = json.loads(data)
    if not isinstance(body, dict) or set(body) != {"checksum", "state"}:
        raise ValueError("not a state file")
    canon = json.dumps(body["state"], sort_keys=True, separators=(",", ":")).encode()
    if hashlib.sha256(canon).hexdigest() != body["checksum"]:
        raise ValueError("checksum mismatch")
    return convert(body["state"], StateDoc, whole="state")


class StateFile:
    """Reads and writes the anti-rollback state in ``state_dir``."""

    def __init__(self, state_dir: Path) -> None:
        """Use ``state_dir`` (must exist) for ``state.json`` and ``state.prev.json``."""
        self.path = state_dir / STATE_FILE
        self.prev_path = state_dir / PREV_FILE
        self.used_previous = False
        """Set by :meth:`load` when ``state.json`` was unusable and the previous copy won."""

    def exists(self) -> bool:
        """True if either copy exists (valid or not)."""
        return self.path.exists() or self.prev_path.exists()

    def load(self) -> StateDoc | None:
        """The newest valid copy; None if no copy exists; raise if copies exist but are bad."""
        found: list[StateDoc] = []
        problems: list[str] = []
        for p in (self.path, self.prev_path):
            try:
                found.append(_decode(p.read_bytes()))
            except FileNotFoundError:
                continue
            except (OSError, ValueError, RecursionError) as e:  # wasmgate.typed.Invalid too
                problems.append(f"{p}: {str(e).splitlines()[0]}")
        self.used_previous = bool(problems) or not self.path.exists()
        if found:
            return max(found, key=lambda d: d.generation)
        if problems:
            raise StateCorruptedError(
                "anti-rollback state unreadable (" + "; ".join(problems) + "); refusing to "
                "reset version floors - restore it or rebuild it from the install records"
            )
        return None

    def save(self, doc: StateDoc) -> None:
        """Persist ``doc`` with generation+1, keeping the current file as the previous copy."""
        try:
            current = self.path.read_bytes()
        except FileNotFoundError:
            current = None
        doc.generation += 1
        if current is not None:
            atomic_write(self.prev_path, current)
        atomic_write(self.path, _encode(doc))
