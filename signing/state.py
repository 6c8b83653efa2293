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
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from wasmgate.signing.errors import StateCorruptedError
from wasmgate.signing.manifest import Release

STATE_FILE = "state.json"
PREV_FILE = "state.prev.json"
_HEX64 = r"^[0-9a-f]{64}$"


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


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class ActiveBundle(_Strict):
    """The installed version of one name and its manifest digest."""

    version: int = Field(ge=0)
    digest: str = Field(pattern=_HEX64)


class StagedBundle(_Strict):
    """A candidate answering ``percent`` of the requests next to the active version."""

    version: int = Field(ge=0)
    digest: str = Field(pattern=_HEX64)
    percent: int = Field(ge=1, le=99)
    gates: Release | None = None
    """The metric gates in force (manifest tightened by the operator), None = manual."""


class NameState(_Strict):
    """Per-name record: highest version seen (and its digest), what is active (None if removed),
    the staged candidate (if any)."""

    floor: int = Field(ge=0)
    floor_digest: str = Field(pattern=_HEX64)
    active: ActiveBundle | None = None
    staged: StagedBundle | None = None


class StateDoc(_Strict):
    """The whole anti-rollback state."""

    format: Literal["wasmgate-state/1"] = "wasmgate-state/1"
    generation: int = Field(default=0, ge=0)
    clock_floor: AwareDatetime | None = None
    clock_set_by_trust: int = Field(default=0, ge=0)
    """Version of the root-signed trust document whose ``clock_floor`` was applied last."""
    bundles: dict[str, NameState] = Field(default_factory=dict)

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
    state = doc.model_dump(mode="json")
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
    return StateDoc.model_validate_json(json.dumps(body["state"]))


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
            except (OSError, ValueError, ValidationError, RecursionError) as e:
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
