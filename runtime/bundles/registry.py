"""The bundle registry: install (stage → compile → load models → selftest → commit → switch).

Bundles arrive from three places: the store's installed bundles and the bundle directory at
start, a file dropped into the directory later (`DirWatcher`), the management API. Staging,
commit and switch run one at a time (the registry lock); the slow middle (adapter compile,
model loading, selftest) does not hold that lock, so a bundle that takes long to compile
never holds other installs behind it: only installs of the same name wait for each other.
At start the store's bundles load side by side (one per core, largest first), then the
bundle files are installed; READY still waits for all of them (`start` returns after).
A failure at any step keeps the serving version and is recorded
(`Registry.status()`, the log). A switch is atomic (`ServingTable.activate`); the replaced
version is unloaded off the loop once its last in-flight request finished.

An install stages the bundle in the store (verified, blobs written, nothing recorded),
loads it from there and commits it (recorded, anti-rollback floor raised) only once it
works here; a bundle that fails is discarded and its blobs collected, so it is neither
served nor the installed version after a restart.

A staged install (``percent`` < 100) commits the bundle as the name's candidate: durable, but
the anti-rollback floor rises only when it is promoted (by the API or its metric gates,
`release.py`); an abort drops it and leaves the floor where it was. At start the store's
candidates serve their share again.

This module owns the install pipeline and the registry's public face; the parts it is
composed of live beside it: the start-up loading (`startup.py`), the staged releases'
promote and abort (`staged.py`), the trust and expiry checks (`admission.py`), and the
events, last errors and change hooks (`journal.py`). `Event`, `ExpiryPolicy` and
`is_rollback` are re-exported here, where the rest of the daemon imports them from.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from wasmgate.runtime.bundles.admission import Admission, ExpiryPolicy
from wasmgate.runtime.bundles.journal import Event, Journal
from wasmgate.runtime.bundles.loader import BlobSource, LoaderDeps, load_bundle
from wasmgate.runtime.bundles.release import Verdict, measure
from wasmgate.runtime.bundles.staged import Releases
from wasmgate.runtime.bundles.startup import StartUp, Steps, StoredBundles, is_rollback
from wasmgate.runtime.bundles.table import ServingTable
from wasmgate.runtime.errors import BundleRejected, DaemonError
from wasmgate.runtime.ops.metrics import Metrics
from wasmgate.runtime.served.loaded import LoadedBundle
from wasmgate.signing.errors import RollbackError, SigningError
from wasmgate.signing.installs import InstalledBundle
from wasmgate.signing.manifest import Release
from wasmgate.signing.trust import TrustStore
from wasmgate.typed import plain

if TYPE_CHECKING:  # fleet documents load with the first one (see signing/__init__.py)
    from wasmgate.signing.fleetdoc import Downgrade

__all__ = ["Event", "ExpiryPolicy", "Registry", "Store", "describe", "is_rollback"]

log = logging.getLogger("wasmgate.registry")


class Store(BlobSource, StoredBundles, Protocol):
    """The part of `wasmgate.signing.BundleStore` the registry uses (with the start-up's)."""

    def stage(
        self, data: bytes | Path, *, downgrades: Sequence[Downgrade] | None = None
    ) -> InstalledBundle: ...
    def commit(
        self, bundle: InstalledBundle, percent: int = 100, gates: Release | None = None
    ) -> None: ...
    def promote(self, name: str) -> InstalledBundle: ...
    def discard(self, bundle: InstalledBundle) -> None: ...
    def remove(self, name: str) -> None: ...
    def use_trust(self, trust: TrustStore) -> None: ...

    trust: TrustStore


class Registry:
    """Owns the serving table's contents; every change goes through here."""

    def __init__(
        self,
        store: Store,
        deps: LoaderDeps,
        expiry: ExpiryPolicy = "warn",
        metrics: Metrics | None = None,
    ) -> None:
        self.table = ServingTable(self._schedule_close)
        self._store = store
        self._deps = deps
        self._lock = asyncio.Lock()
        self._by_name: dict[str, tuple[asyncio.Lock, list[int]]] = {}
        self._closing: set[asyncio.Future[None]] = set()
        self._origins: dict[str, set[Path]] = {}
        self._journal = Journal()
        self._releases = Releases(store, self.table, self._lock, self._journal, metrics)
        self._admission = Admission(
            store, self.table, self._lock, self._journal, self._releases, policy=expiry
        )
        steps = Steps(self._name_lock, self._prepare, self._switch, self.install, self._adopt)
        self._startup = StartUp(store, self.table, self._journal, self._admission, steps)

    # -- what the parts hold ------------------------------------------------------------

    @property
    def expiry(self) -> ExpiryPolicy:
        """The expiry policy (``trust.expiry``); SIGHUP may change it."""
        return self._admission.policy

    @expiry.setter
    def expiry(self, policy: ExpiryPolicy) -> None:
        self._admission.policy = policy

    @property
    def expired(self) -> dict[str, dict[str, str]]:
        """Installed bundles found expired: name -> {"action": "serving"|"stopped", "message"}."""
        return self._admission.expired

    @property
    def verdicts(self) -> dict[str, Verdict]:
        """The last gate decision per bundle name."""
        return self._releases.verdicts

    @property
    def loading(self) -> dict[str, object]:
        """How far the start-up loading has come (`LoadProgress.status`)."""
        return self._startup.progress.status()

    @property
    def events(self) -> list[Event]:
        """The last 50 install attempts, removals, promotions and aborts, oldest first."""
        return self._journal.events

    @property
    def on_change(self) -> list[Callable[[], None]]:
        """Called after every switch or removal (MQTT metadata, metrics)."""
        return self._journal.on_change

    # -- start and stop ---------------------------------------------------------------

    async def start(
        self,
        bundle_files: Sequence[Path] = (),
        progress: Callable[[str], None] = lambda _what: None,
    ) -> list[Path]:
        """Serve what the store holds, then the bundle files; never raises for one bundle.

        ``progress`` is told before each bundle (systemd: STATUS and a start-timeout extension);
        the log gets a line per bundle with the count and the time so far. Returns the files
        refused (not those skipped as older than the installed version: one line names them).
        """
        return await self._startup.run(bundle_files, progress)

    async def close(self, wait_s: float) -> None:
        """Stop serving everything; wait up to ``wait_s`` for unloads, then give up."""
        await self._releases.close()
        for name in list(self.table.slots()):
            self.table.remove(name)
        if self._closing:
            await asyncio.wait(self._closing, timeout=wait_s)

    # -- changes ----------------------------------------------------------------------

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
            async with self._name_lock(item.manifest.name):
                bundle = await self._load_and_commit(item, source, percent, gates)
        except BaseException:
            await asyncio.to_thread(self._drop, item)
            raise
        if origin is not None:
            self._adopt(bundle.name, origin)
        return bundle

    def _adopt(self, name: str, origin: Path) -> None:
        """``origin`` holds bundle ``name``: `remove` deletes it, so it does not come back."""
        self._origins.setdefault(name, set()).add(origin)

    @contextlib.asynccontextmanager
    async def _name_lock(self, name: str) -> AsyncIterator[None]:
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
        bundle = await self._prepare(item, source)
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
            self._switch(bundle, source, percent, gates)
        return bundle

    def _drop(self, item: InstalledBundle) -> None:
        """Forget a staged bundle that will not serve, and delete its blobs (blocking)."""
        self._store.discard(item)
        try:
            self._store.gc()
        except (OSError, SigningError) as e:  # only disk space is lost; the next gc retries
            log.warning("bundle store gc failed: %s", e)

    async def _prepare(self, item: InstalledBundle, source: str) -> LoadedBundle:
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

    def _switch(
        self, bundle: LoadedBundle, source: str, percent: int, gates: Release | None = None
    ) -> None:
        self.table.activate(bundle, percent)
        self._releases.switched(bundle, percent, gates)
        self._journal.changed()
        staged = f" (staged at {percent}%)" if percent < 100 else ""
        msg = f"serving{staged}"
        self._journal.record(source, ok=True, name=bundle.name, version=bundle.version, message=msg)
        self._journal.clear_errors(bundle.name, source)

    async def remove(self, name: str) -> LoadedBundle:
        """Stop serving ``name``; it stays off across restarts until installed again."""
        async with self._lock:
            slot = self.table.remove(name)
            self._releases.done(name)
            self._journal.changed()
            await asyncio.to_thread(self._store.remove, name)
            for path in self._origins.pop(name, set()):
                path.unlink(missing_ok=True)
            self._journal.record(
                "api", ok=True, name=name, version=slot.current.version, message="removed"
            )
            return slot.current

    async def apply_trust(self, trust: TrustStore) -> list[str]:
        """Use a reloaded trust store; unload bundles it no longer accepts (revocations)."""
        return await self._admission.apply_trust(trust)

    async def enforce(self, source: str) -> list[str]:
        """Apply a fresh install's checks to what serves (e.g. when a bundle expires)."""
        return await self._admission.enforce(source)

    def next_expiry(self) -> float | None:
        """The earliest ``expires`` (POSIX time) among serving bundles not yet found expired."""
        return self._admission.next_expiry()

    async def promote(
        self, name: str, source: str = "api", only: LoadedBundle | None = None
    ) -> LoadedBundle:
        """The candidate of ``name`` takes all traffic; the floor rises to its version.

        ``only``: do nothing unless this is still the candidate (a gate decision)."""
        return await self._releases.promote(name, source, only)

    async def abort(
        self, name: str, source: str = "api", why: str = "", only: LoadedBundle | None = None
    ) -> LoadedBundle:
        """Drop the candidate of ``name``; requests on it finish; the floor is unchanged."""
        return await self._releases.abort(name, source, why, only)

    # -- status -----------------------------------------------------------------------

    def status(self) -> list[dict[str, Any]]:
        """One entry per bundle name: serving version, staged candidate, last error."""
        out = []
        for name, slot in sorted(self.table.slots().items()):
            entry = describe(slot.current)
            if slot.candidate is not None:
                gates = self._releases.gates(name)
                entry["staged"] = {
                    **describe(slot.candidate),
                    "percent": slot.percent,
                    "gates": plain(gates),
                    "measured": msgspec.structs.asdict(measure(slot.candidate, slot.current)),
                }
            if name in self.verdicts:
                entry["release"] = self.verdicts[name].as_dict()
            error = self._journal.last_error(name)
            if error is not None:
                entry["last_error"] = asdict(error)
            out.append(entry)
        return out

    def failures(self) -> list[Event]:
        """Last failed install per bundle name (or source, when the name is unknown)."""
        return self._journal.failures()

    # -- internals --------------------------------------------------------------------

    def _schedule_close(self, bundle: LoadedBundle) -> None:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.run_in_executor(None, bundle.close)
        self._closing.add(fut)
        fut.add_done_callback(self._closing.discard)


def _gates(declared: Release | None, wanted: Release | None) -> Release | None:
    """The manifest's gates tightened by the operator's; None when neither sets one."""
    both = (declared or Release()).tightened(wanted or Release())
    return both if both.any() else None


def describe(bundle: LoadedBundle) -> dict[str, Any]:
    """JSON-ready facts about one loaded version."""
    return {
        "name": bundle.name,
        "version": bundle.version,
        "digest": bundle.digest,
        "adapter": bundle.adapter_name,
        "models": {
            name: {"loaded": m.handle is not None, **m.details} for name, m in bundle.models.items()
        },
        "in_flight": bundle.in_flight,
        "installed_at": bundle.installed_at,
    }
