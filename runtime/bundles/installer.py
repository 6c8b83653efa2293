"""The install pipeline: stage → compile → load models → selftest → commit → switch.

An install stages the bundle in the store (verified, blobs written, nothing recorded),
loads it from there and commits it (recorded, anti-rollback floor raised) only once it
works here; a bundle that fails is discarded and its blobs collected, so it is neither
served nor the installed version after a restart. Staging, commit and switch run under the
registry lock, one at a time; the slow middle (adapter compile, model loading, selftest)
holds only its name's lock, so a bundle that takes long to compile never holds installs of
other names behind it. A failure at any step keeps the serving version and is recorded in
the journal. The registry (`registry.py`) and the start-up (`startup.py`) both install
through here, so every install takes the same locks and leaves the same records.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from wasmgate.runtime.bundles.admission import Admission
from wasmgate.runtime.bundles.journal import Journal
from wasmgate.runtime.bundles.loader import BlobSource, LoaderDeps, load_bundle
from wasmgate.runtime.bundles.staged import Releases
from wasmgate.runtime.bundles.table import ServingTable
from wasmgate.runtime.errors import BundleRejected, DaemonError
from wasmgate.runtime.served.loaded import LoadedBundle
from wasmgate.signing.errors import RollbackError, SigningError
from wasmgate.signing.installs import InstalledBundle
from wasmgate.signing.manifest import Release

if TYPE_CHECKING:  # fleet documents load with the first one (see signing/__init__.py)
    from wasmgate.signing.fleetdoc import Downgrade

log = logging.getLogger("wasmgate.registry")


def is_rollback(err: BundleRejected) -> bool:
    """Refused only for being older than the installed version (retrying cannot help)."""
    return isinstance(err.__cause__, RollbackError)


class InstallStore(BlobSource, Protocol):
    """The part of `wasmgate.signing.BundleStore` an install uses."""

    def stage(
        self, data: bytes | Path, *, downgrades: Sequence[Downgrade] | None = None
    ) -> InstalledBundle: ...
    def commit(
        self, bundle: InstalledBundle, percent: int = 100, gates: Release | None = None
    ) -> None: ...
    def discard(self, bundle: InstalledBundle) -> None: ...
    def gc(self) -> Sequence[str]: ...


class Installer:
    """Installs bundles into one registry's serving table (its lock, journal and releases)."""

    def __init__(
        self,
        store: InstallStore,
        deps: LoaderDeps,
        *,
        table: ServingTable,
        lock: asyncio.Lock,
        journal: Journal,
        releases: Releases,
        admission: Admission,
        schedule_close: Callable[[LoadedBundle], None],
    ) -> None:
        self.table = table
        self._store = store
        self._deps = deps
        self._lock = lock
        self._journal = journal
        self._releases = releases
        self._admission = admission
        self._schedule_close = schedule_close
        self._by_name: dict[str, tuple[asyncio.Lock, list[int]]] = {}
        self.origins: dict[str, set[Path]] = {}
        """The bundle-dir files holding each name's bundle (a removal deletes them)."""

    async def install(
        self,
        data: bytes | Path,
        *,
        source: str,
        percent: int = 100,
        gates: Release | None = None,
        origin: Path | None = None,
        downgrades: Sequence[Downgrade] | None = None,
    ) -> LoadedBundle:
        """Stage, load, selftest, commit and switch; `BundleRejected` says why not.

        ``downgrades``: a fleet install passes its signed document's permissions (maybe
        none): only a matching one lets a version below the floor in (`BundleStore.stage`).

        ``percent`` < 100 stages it next to the serving version (a first version always
        serves fully), under the manifest's ``[release]`` gates tightened by ``gates``.
        ``origin`` is the bundle-dir file it came from: `remove` deletes it, so it does
        not come back at the next start.
        """
        async with self._lock:
            try:
                item = await asyncio.to_thread(
                    functools.partial(self._store.stage, data, downgrades=downgrades)
                )
            except SigningError as e:
                rollback = isinstance(e, RollbackError)
                msg = f"{e} (rollback)" if rollback else str(e)
                # An old file left in the bundle dir: one summary line at start, not one each.
                self._journal.record(
                    source, ok=False, message=msg, quiet=rollback and not self.table.started
                )
                raise BundleRejected(msg) from e
        try:
            async with self.name_lock(item.manifest.name):
                bundle = await self._load_and_commit(item, source, percent, gates)
        except BaseException:
            await asyncio.to_thread(self._drop, item)
            raise
        if origin is not None:
            self.adopt(bundle.name, origin)
        return bundle

    def adopt(self, name: str, origin: Path) -> None:
        """``origin`` holds bundle ``name``: `remove` deletes it, so it does not come back."""
        self.origins.setdefault(name, set()).add(origin)

    @contextlib.asynccontextmanager
    async def name_lock(self, name: str) -> AsyncIterator[None]:
        """Installs of one name, one at a time (versions must not race to the commit)."""
        entry = self._by_name.setdefault(name, (asyncio.Lock(), [0]))
        lock, users = entry
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if users[0] == 0:
                del self._by_name[name]

    async def _load_and_commit(
        self, item: InstalledBundle, source: str, percent: int, wanted: Release | None
    ) -> LoadedBundle:
        man = item.manifest
        slot = self.table.slots().get(man.name)
        if slot is not None and slot.current.digest == item.digest:
            await asyncio.to_thread(self._store.discard, item)
            return slot.current  # already serving exactly this bundle
        percent = percent if slot is not None else 100
        gates = _gates(man.release, wanted) if percent < 100 else None
        bundle = await self.prepare(item, source)
        async with self._lock:
            try:
                self._check_names(bundle, source)  # another bundle may have switched meanwhile
                await asyncio.to_thread(self._store.commit, item, percent, gates)
            except SigningError as e:  # a newer version committed meanwhile, disk full, ...
                self._schedule_close(bundle)
                self._journal.record(
                    source, ok=False, name=man.name, version=man.version, message=str(e)
                )
                raise BundleRejected(str(e)) from e
            self._admission.expired.pop(man.name, None)  # a fresh install is never expired
            self.switch(bundle, source, percent, gates)
        return bundle

    def _drop(self, item: InstalledBundle) -> None:
        """Forget a staged bundle that will not serve, and delete its blobs (blocking)."""
        self._store.discard(item)
        try:
            self._store.gc()
        except (OSError, SigningError) as e:  # only disk space is lost; the next gc retries
            log.warning("bundle store gc failed: %s", e)

    async def prepare(self, item: InstalledBundle, source: str) -> LoadedBundle:
        """Load (compile, models, selftest) and check names; nothing serves it yet."""
        man = item.manifest
        try:
            bundle = await asyncio.to_thread(load_bundle, self._deps, self._store, man, item.digest)
        except (DaemonError, SigningError) as e:  # SigningError: a blob missing or damaged
            self._journal.record(
                source, ok=False, name=man.name, version=man.version, message=str(e)
            )
            raise BundleRejected(str(e)) from e
        self._check_names(bundle, source)
        if bundle.adapter_name and bundle.adapter_name in bundle.models:
            log.warning(
                "%s: adapter %r shares its name with one of the bundle's models, so "
                "/v2/models/%s is the model; the adapter stays reachable at /v1/adapters/%s",
                man.label(),
                bundle.adapter_name,
                bundle.adapter_name,
                bundle.adapter_name,
            )
        return bundle

    def _check_names(self, bundle: LoadedBundle, source: str) -> None:
        """Refuse (and close) ``bundle`` if a name it claims is served by another bundle."""
        conflict = self.table.name_conflict(bundle)
        if conflict is not None:
            self._schedule_close(bundle)
            msg = f"{bundle.name}@{bundle.version}: {conflict}"
            self._journal.record(
                source, ok=False, name=bundle.name, version=bundle.version, message=msg
            )
            raise BundleRejected(msg)

    def switch(
        self, bundle: LoadedBundle, source: str, percent: int, gates: Release | None = None
    ) -> None:
        """Serve a prepared bundle at ``percent``, under its gates; record it."""
        self.table.activate(bundle, percent)
        self._releases.switched(bundle, percent, gates)
        self._journal.changed()
        staged = f" (staged at {percent}%)" if percent < 100 else ""
        msg = f"serving{staged}"
        self._journal.record(source, ok=True, name=bundle.name, version=bundle.version, message=msg)
        self._journal.clear_errors(bundle.name, source)


def _gates(declared: Release | None, wanted: Release | None) -> Release | None:
    """The manifest's gates tightened by the operator's; None when neither sets one."""
    both = (declared or Release()).tightened(wanted or Release())
    return both if both.any() else None
