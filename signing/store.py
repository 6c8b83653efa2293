"""The bundle store: verified install into a content-addressed blob store, anti-rollback.

Layout of ``state_dir`` (mode 0700): ``blobs/<sha256>`` (file bytes, named by their hash),
``records/<manifest digest>.json`` (manifest and signature bytes of each install),
``records/staged/<digest>.json`` (the same for staged candidates: not counted when floors
are rebuilt from the records, since staging does not raise a floor),
``state.json``/``state.prev.json`` (see ``state.py``), ``files.json`` (a cache: ``seen.py``),
``tmp/`` (staging), ``lock``.

Invariants:
- ``stage`` streams the archive once: each member is hashed while it is copied into a
  staging file; only after every check has passed are the blobs renamed into place.
  ``commit`` re-checks anti-rollback, writes the record, then the state (the commit
  point). ``install`` = stage + commit. Any failure before the commit leaves installed
  versions and floors untouched (at worst, unreferenced blobs remain until ``gc``).
- No archive member name ever becomes a filesystem path: blobs are named by SHA-256,
  records by manifest digest (both validated hex).
- Installs are serialised by a thread lock plus an ``flock`` on ``state_dir/lock``, and
  re-read the state under the lock, so several processes can share one store.
- Floors never go down: install records are written before the state, so when
  ``state.json`` is damaged the previous copy is used and raised to the highest record of
  each name. With no readable state at all the store refuses to open
  (:class:`StateCorruptedError`) unless ``repair_state=True`` rebuilds it from the records.
- Staged releases: ``commit(b, percent<100)`` records ``b`` as the name's candidate (floor
  unchanged); ``promote`` makes it the active version and raises the floor; ``abort``
  forgets it. Each is one atomic state write, so a crash leaves the old or the new state.
- Downgrades: a version below the floor installs only with a signed fleet permission
  (``Downgrade``, name and exact version) passed to ``stage``/``install``; it always
  becomes the active version (never a staged candidate), the floor follows it down, and
  the event is logged and returned (``InstalledBundle.downgraded_from``). A rebuild of the
  state from the install records (damaged ``state.json``) raises the floor again to the
  highest record: the fail-safe direction; the fleet then has to re-send its permission.
- ``verified_blob`` re-hashes a blob so a model is checked right before it is loaded; the
  digest it returns is computed from those very bytes, never taken from the caller.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from wasmgate._compat import UTC
from wasmgate.signing.checks import check_fresh
from wasmgate.signing.errors import (
    BlobNotFoundError,
    FleetDowngradeError,
    SigningError,
    StoreIOError,
)
from wasmgate.signing.installs import InstalledBundle, Installs
from wasmgate.signing.manifest import Release
from wasmgate.signing.records import VerifiedBlob, read_blob, recheck_records, verified_blob
from wasmgate.signing.seen import SeenFiles
from wasmgate.signing.source import StagedFile, close_all, open_source, place_blobs
from wasmgate.signing.state import StateDoc
from wasmgate.signing.trust import TrustStore
from wasmgate.signing.verify import VerifiedBundle, verify_stream

if TYPE_CHECKING:  # fleet documents load with the first one (see signing/__init__.py)
    from wasmgate.signing.fleetdoc import Downgrade

log = logging.getLogger("wasmgate.signing")


class BundleStore(Installs):
    """Installs verified bundles and serves their blobs to the runtime.

    What is installed, staged and each floor (and promote, abort, remove) are
    :class:`~wasmgate.signing.installs.Installs`'s; this class verifies what comes in.
    """

    def __init__(
        self,
        state_dir: Path,
        trust: TrustStore,
        *,
        max_bundle_bytes: int,
        repair_state: bool = False,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        """Open (creating) the store in ``state_dir``.

        Raises :class:`StateCorruptedError` if the anti-rollback state is unreadable, unless
        ``repair_state``: then floors are rebuilt from the install records (never reset).
        """
        super().__init__(state_dir, clock or (lambda: datetime.now(UTC)), repair_state)
        self.trust = trust
        self.max_bundle_bytes = max_bundle_bytes
        self._staged: dict[str, VerifiedBundle] = {}
        self._downgrades: dict[str, tuple[Downgrade, ...]] = {}
        """The fleet permissions each staged digest was staged with (fleet installs only)."""
        self.seen_files = SeenFiles(state_dir)
        """What each bundle-dir file held when verified (skips re-reading unchanged ones)."""
        self.use_trust(trust)

    def use_trust(self, trust: TrustStore) -> None:
        """Verify against ``trust`` from now on; apply its root-signed ``clock_floor`` once.

        This is how an operator repairs a clock floor that went too far ahead: a new
        root-signed trust version with ``clock_floor`` set (see ``state.py``).
        """
        self.trust = trust
        floor = trust.doc.clock_floor
        if floor is not None and trust.signed:
            self._set_clock_floor(floor, trust.doc.version)

    def install(
        self,
        data: bytes | Path,
        *,
        downgrades: Sequence[Downgrade] | None = None,
        expect: tuple[str, int] | None = None,
    ) -> InstalledBundle:
        """Verify ``data`` fully (see ``verify.py`` for the order) and install it atomically.

        Same as :meth:`stage` then :meth:`commit`.
        """
        bundle = self.stage(data, downgrades=downgrades, expect=expect)
        self.commit(bundle)
        return bundle

    def stage(
        self,
        data: bytes | Path,
        *,
        downgrades: Sequence[Downgrade] | None = None,
        expect: tuple[str, int] | None = None,
    ) -> InstalledBundle:
        """Verify ``data`` and store its files, without changing what is installed.

        For two-phase activation: load and self-test the staged bundle, then
        :meth:`commit` it (or :meth:`discard` it). Floors and the active version are
        untouched until the commit; a crash in between only leaves unreferenced blobs.
        ``downgrades`` (a fleet install: its document's ``downgrades``, maybe empty) may
        permit a version below the floor; without a matching one that is a
        :class:`FleetDowngradeError` (a local install, None: :class:`RollbackError`).
        ``expect`` (a fleet install: the document's name and version for the ref it fetched)
        refuses any other bundle, or one claiming a name outside the fleet role's, with
        :class:`FleetScopeError`.
        """
        with self._file_lock():
            state = self._load_state()
            staged: list[Path] = []
            try:
                verified, blobs = self._verify_into_tmp(data, state, staged, downgrades)
                if expect is not None:
                    from wasmgate.signing.fleetdoc import check_delivered  # noqa: PLC0415

                    role = self.trust.fleet_role()
                    check_delivered(*expect, verified.manifest, role.names if role else [])
                place_blobs(blobs, self.state_dir / "blobs")
            except OSError as e:
                raise StoreIOError(f"bundle store {self.state_dir}: {e}") from e
            finally:
                for p in staged:
                    with contextlib.suppress(OSError):  # best effort; reopening cleans tmp/
                        p.unlink(missing_ok=True)
            self._staged[verified.digest] = verified
            if downgrades is not None:
                self._downgrades[verified.digest] = tuple(downgrades)
            m = verified.manifest
            entry = state.bundles.get(m.name)
            lowered = entry.floor if entry is not None and m.version < entry.floor else None
            return InstalledBundle(m, verified.digest, lowered)

    def commit(
        self, bundle: InstalledBundle, percent: int = 100, gates: Release | None = None
    ) -> None:
        """Make a staged bundle the installed version of its name (the commit point).

        With ``percent`` < 100 and a version active, it becomes the name's candidate instead
        (floor unchanged; see :meth:`promote`). The anti-rollback checks run again against
        the current state, so a higher version committed meanwhile (by any process) makes
        this raise :class:`RollbackError`. A permitted downgrade is never staged: it is the
        way back from a bad version, so it replaces the active one at once.
        """
        with self._file_lock():
            verified = self._staged.get(bundle.digest)
            if verified is None:
                raise BlobNotFoundError(f"bundle {bundle.manifest.label()}: not staged here")
            state = self._load_state()
            permits = self._downgrades.get(bundle.digest)
            lowered = check_fresh(verified.manifest, verified.digest, state, self._clock(), permits)
            if lowered is not None and percent < 100:
                raise FleetDowngradeError(
                    verified.manifest.label(),
                    "a downgrade replaces the active version, never staged",
                )
            for entry in verified.manifest.files.values():
                if not (self.state_dir / "blobs" / entry.sha256).is_file():
                    raise BlobNotFoundError(f"blob {entry.sha256}: removed before the commit")
            try:
                self._record_install(verified, state, percent, gates)
            except OSError as e:
                raise StoreIOError(f"bundle store {self.state_dir}: {e}") from e
            del self._staged[bundle.digest]
            self._downgrades.pop(bundle.digest, None)
        if lowered is not None:
            log.warning(
                "downgraded bundle %s from version %d by a signed fleet permission (%s)",
                verified.manifest.label(), lowered, verified.digest,
            )  # fmt: skip
        log.info("installed bundle %s (%s)", verified.manifest.label(), verified.digest)

    def discard(self, bundle: InstalledBundle) -> None:
        """Forget a staged bundle (its blobs go at the next :meth:`gc`)."""
        with self._lock:
            self._staged.pop(bundle.digest, None)
            self._downgrades.pop(bundle.digest, None)

    def gc(self) -> list[str]:
        """Delete blobs that no installed or staged bundle references; returns their names."""
        with self._file_lock():
            self._state = self._load_state()
            live = [*self.installed(), *(c.bundle for c in self.candidates())]
            keep = {f.sha256 for b in live for f in b.manifest.files.values()}
            for v in self._staged.values():
                keep |= {f.sha256 for f in v.manifest.files.values()}
            removed = []
            for blob in (self.state_dir / "blobs").iterdir():
                if blob.name not in keep:
                    blob.unlink(missing_ok=True)
                    removed.append(blob.name)
            return sorted(removed)

    def _verify_into_tmp(
        self,
        data: bytes | Path,
        state: StateDoc,
        staged: list[Path],
        downgrades: Sequence[Downgrade] | None,
    ) -> tuple[VerifiedBundle, list[StagedFile]]:
        sinks: list[StagedFile] = []
        with (
            open_source(data, self.max_bundle_bytes) as (f, total, label),
            ThreadPoolExecutor(1, thread_name_prefix="wasmgate-blob") as pool,
        ):

            def sink_for(_name: str) -> StagedFile:
                sinks.append(StagedFile(self.state_dir / "tmp", pool, staged))
                return sinks[-1]

            try:
                verified = verify_stream(
                    f, total, label, self.trust, max_bundle_bytes=self.max_bundle_bytes,
                    state=state, now=self._clock(), sink_for=sink_for, downgrades=downgrades,
                )  # fmt: skip
            finally:
                close_all(sinks)
        return verified, sinks

    def recheck(self, staged: bool = False) -> dict[str, SigningError]:
        """Apply a fresh install's checks to every active bundle (start-up, trust reload).

        Signature by a trusted, unrevoked key whose scope covers every claimed name, bundle
        revocation, limit ceilings, then issue time and expiry against max(now, clock
        floor). Returns the refusals by name; the caller decides what to do with them
        (an :class:`ExpiredError` is subject to the daemon's expiry policy). With
        ``staged``, the staged candidates are checked instead.
        """
        return recheck_records(self.state_dir / "records", self._state, self.trust,
                               self._clock(), staged=staged)  # fmt: skip

    def open_blob(self, sha256: str) -> bytes:
        """The bytes of blob ``sha256`` (no re-hash; see :meth:`verified_blob`)."""
        return read_blob(self.state_dir / "blobs", sha256)

    def verified_blob(self, sha256: str) -> VerifiedBlob:
        """Blob ``sha256`` re-hashed now, with that digest (a load need not hash it again)."""
        return verified_blob(self.state_dir / "blobs", sha256)

    def verify_blob_again(self, sha256: str) -> bytes:
        """The bytes of blob ``sha256`` after re-hashing them; raise if they changed."""
        return self.verified_blob(sha256).data
