"""What a bundle store directory holds installed: its anti-rollback state, under the store lock.

The state (``state.json``, see ``state.py``) and the install records (``records/``) are the
store's memory of each name: the active version, a staged candidate and the floor. This
module owns reading them (recovering damaged state from the records, never lowering a
floor), the lock that serialises every change across threads and processes, and the changes
that need no verification: recording a verified install, promoting or aborting a candidate,
removing a name. ``store.py`` verifies bundles and places their blobs on top of it.
"""

from __future__ import annotations

import copy
import fcntl
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import msgspec

from wasmgate.signing.errors import NotStagedError, StateCorruptedError, StoreIOError
from wasmgate.signing.manifest import Manifest, Release
from wasmgate.signing.records import raise_floors, read_record, write_record
from wasmgate.signing.source import prepare_store_dirs
from wasmgate.signing.state import ActiveBundle, NameState, StagedBundle, StateDoc, StateFile
from wasmgate.signing.verify import VerifiedBundle

log = logging.getLogger("wasmgate.signing")


class InstalledBundle(msgspec.Struct, frozen=True):
    """An installed bundle: its manifest and manifest digest (sha256 of manifest.json)."""

    manifest: Manifest
    digest: str
    downgraded_from: int | None = None
    """The floor a signed fleet downgrade lowers (or lowered) to this version; else None."""


class StagedInstall(msgspec.Struct, frozen=True):
    """A staged candidate: the bundle, its share of requests, its metric gates (or None)."""

    bundle: InstalledBundle
    percent: int
    gates: Release | None


class Installs:
    """The installed, staged and floor state of one store directory, changed under its lock."""

    def __init__(self, state_dir: Path, clock: Callable[[], datetime], repair_state: bool) -> None:
        """Open (creating) ``state_dir``; see :class:`~wasmgate.signing.store.BundleStore`."""
        self.state_dir = state_dir
        self._clock = clock
        self._lock = threading.Lock()
        self.state_recovered = False
        """True once damaged or missing state was recovered from the install records."""
        try:
            prepare_store_dirs(state_dir)
        except OSError as e:
            raise StoreIOError(f"bundle store {state_dir}: {e}") from e
        self._state_file = StateFile(state_dir)
        with self._file_lock():
            self._state = self._load_state(repair_state)

    def _set_clock_floor(self, floor: datetime, trust_version: int) -> None:
        """Persist a root-signed trust document's clock floor (once per trust version)."""
        with self._file_lock():
            new = copy.deepcopy(self._load_state())
            before = new.clock_floor
            if not new.set_clock(floor, trust_version):
                return
            self._save(new)
        log.warning(
            "clock floor set to %s by root-signed trust version %d (was %s)",
            floor.isoformat(), trust_version, before.isoformat() if before else "unset",
        )  # fmt: skip

    @property
    def clock_floor(self) -> datetime | None:
        """The persisted clock floor: no manifest is checked against an earlier time."""
        return self._state.clock_floor

    def _load_state(self, repair: bool = False) -> StateDoc:
        """Current state from disk, reconciled with the install records when needed."""
        records = sorted((self.state_dir / "records").glob("*.json"))
        try:
            doc = self._state_file.load()
        except StateCorruptedError:
            if not repair:
                raise
            return self._reconcile(StateDoc(), records)
        if doc is None and records:
            if not repair:
                raise StateCorruptedError(
                    f"anti-rollback state missing in {self.state_dir} but "
                    f"{len(records)} install record(s) exist; refusing to reset floors"
                )
            return self._reconcile(StateDoc(), records)
        if doc is not None and self._state_file.used_previous:
            # The newest copy was damaged: the previous one may lag one install behind.
            return self._reconcile(doc, records)
        return doc or StateDoc()

    def _reconcile(self, doc: StateDoc, records: list[Path]) -> StateDoc:
        """Raise floors to the highest installed record of each name, then persist."""
        raise_floors(doc, records)
        log.error("anti-rollback state recovered using %d install records", len(records))
        self._state_file.save(doc)
        self.state_recovered = True
        return doc

    @contextmanager
    def _file_lock(self) -> Iterator[None]:
        with self._lock, (self.state_dir / "lock").open("a") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    def _record_install(
        self, v: VerifiedBundle, state: StateDoc, percent: int, gates: Release | None
    ) -> None:
        m = v.manifest
        new = copy.deepcopy(state)
        entry = new.bundles.get(m.name)
        if percent < 100 and entry is not None and entry.active is not None:
            records = self.state_dir / "records" / "staged"
            write_record(records, v.digest, v.manifest_bytes, v.signature_bytes)
            entry.staged = StagedBundle(
                version=m.version, digest=v.digest, percent=percent, gates=gates
            )
        else:
            write_record(self.state_dir / "records", v.digest, v.manifest_bytes, v.signature_bytes)
            active = ActiveBundle(version=m.version, digest=v.digest)
            new.bundles[m.name] = NameState(floor=m.version, floor_digest=v.digest, active=active)
            new.advance_clock(self._clock())  # never m.issued_at: a signer's claim (state.py)
        self._save(new)

    def _save(self, new: StateDoc) -> None:
        self._state_file.save(new)
        self._state = new

    def promote(self, name: str) -> InstalledBundle:
        """Make the candidate of ``name`` its active version and raise the floor to it."""
        with self._file_lock():
            state = self._load_state()
            entry = state.bundles.get(name)
            if entry is None or entry.staged is None:
                raise NotStagedError(f"bundle {name!r} has no staged version")
            staged = entry.staged
            src = self.state_dir / "records" / "staged" / f"{staged.digest}.json"
            try:
                manifest, manifest_bytes, sig_bytes = read_record(src)
                # the record first: floors rebuilt from records then include the promotion
                write_record(self.state_dir / "records", staged.digest, manifest_bytes, sig_bytes)
                new = copy.deepcopy(state)
                active = ActiveBundle(version=staged.version, digest=staged.digest)
                # staged.version >= floor: checked at the commit, and the floor only rises
                # through a promotion or a full install, which both clear the candidate
                new.bundles[name] = NameState(
                    floor=staged.version, floor_digest=staged.digest, active=active
                )
                new.advance_clock(self._clock())  # never issued_at (state.py)
                self._save(new)
            except OSError as e:
                raise StoreIOError(f"bundle store {self.state_dir}: {e}") from e
        log.info("promoted bundle %s (%s)", manifest.label(), staged.digest)
        return InstalledBundle(manifest, staged.digest)

    def abort(self, name: str) -> None:
        """Forget the candidate of ``name``; the active version and the floor stay."""
        with self._file_lock():
            state = self._load_state()
            entry = state.bundles.get(name)
            if entry is None or entry.staged is None:
                raise NotStagedError(f"bundle {name!r} has no staged version")
            new = copy.deepcopy(state)
            new.bundles[name].staged = None
            try:
                self._save(new)
            except OSError as e:
                raise StoreIOError(f"bundle store {self.state_dir}: {e}") from e

    def candidates(self) -> list[StagedInstall]:
        """The staged candidate of every name that has one and an active version."""
        out = []
        for name in sorted(self._state.bundles):
            entry = self._state.bundles[name]
            if entry.staged is not None and entry.active is not None:
                path = self.state_dir / "records" / "staged" / f"{entry.staged.digest}.json"
                bundle = InstalledBundle(read_record(path)[0], entry.staged.digest)
                out.append(StagedInstall(bundle, entry.staged.percent, entry.staged.gates))
        return out

    def installed(self) -> list[InstalledBundle]:
        """The active bundle of every name (latest installed version), sorted by name."""
        out = []
        for name in sorted(self._state.bundles):
            active = self._state.bundles[name].active
            if active is not None:
                path = self.state_dir / "records" / f"{active.digest}.json"
                out.append(InstalledBundle(read_record(path)[0], active.digest))
        return out

    def floors(self) -> dict[str, int]:
        """The anti-rollback floor (highest version ever installed) per name."""
        return {name: e.floor for name, e in self._state.bundles.items()}

    def remove(self, name: str) -> None:
        """Deactivate ``name``; its floor stays, so older versions remain refused."""
        with self._file_lock():
            state = self._load_state()
            entry = state.bundles.get(name)
            if entry is None or entry.active is None:
                return
            new = copy.deepcopy(state)
            new.bundles[name].active = None
            new.bundles[name].staged = None
            self._save(new)
