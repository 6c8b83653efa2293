"""The bundle registry: install (stage → compile → load models → selftest → commit → switch).

Bundles arrive from three places: the store's installed bundles and the bundle directory at
start, a file dropped into the directory later (`DirWatcher`), the management API. Staging,
commit and switch run one at a time (the registry lock); the slow middle (adapter compile,
model loading, selftest) does not hold that lock, so a bundle that takes long to compile
never holds other installs behind it: only installs of the same name wait for each other.
At start the store's bundles load side by side (one per core, largest first) while the
bundle files are staged; READY still waits for all of them (`start` returns after).
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
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import shutil
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from wasmgate.runtime.bundles.loaded import LoadedBundle
from wasmgate.runtime.bundles.loader import BlobSource, LoaderDeps, load_bundle
from wasmgate.runtime.bundles.release import Verdict, Watches, measure
from wasmgate.runtime.bundles.table import ServingTable
from wasmgate.runtime.errors import BundleRejected, DaemonError, NotFound
from wasmgate.runtime.ops.metrics import Metrics
from wasmgate.signing.errors import ExpiredError, RollbackError, SigningError
from wasmgate.signing.fleetdoc import Downgrade
from wasmgate.signing.manifest import Release
from wasmgate.signing.store import InstalledBundle, StagedInstall
from wasmgate.signing.trust import TrustStore

log = logging.getLogger("wasmgate.registry")

ExpiryPolicy = Literal["stop", "warn"]
"""What an expired bundle that was already installed does: stop serving, or keep serving
with a warning (a fresh install of an expired bundle is always refused)."""


class Store(BlobSource, Protocol):
    """The part of `wasmgate.signing.BundleStore` the registry uses."""

    def stage(
        self, data: bytes | Path, *, downgrades: Sequence[Downgrade] | None = None
    ) -> InstalledBundle: ...
    def commit(
        self, bundle: InstalledBundle, percent: int = 100, gates: Release | None = None
    ) -> None: ...
    def promote(self, name: str) -> InstalledBundle: ...
    def abort(self, name: str) -> None: ...
    def candidates(self) -> Sequence[StagedInstall]: ...
    def discard(self, bundle: InstalledBundle) -> None: ...
    def gc(self) -> Sequence[str]: ...
    def installed(self) -> Sequence[InstalledBundle]: ...
    def remove(self, name: str) -> None: ...
    def recheck(self, staged: bool = False) -> Mapping[str, SigningError]: ...
    def use_trust(self, trust: TrustStore) -> None: ...

    trust: TrustStore
    state_dir: Path


@dataclass
class Event:
    """One install attempt or removal, for the status page and the management API."""

    at: float
    source: str
    ok: bool
    name: str | None = None
    version: int | None = None
    message: str = ""


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
        self._metrics = metrics
        self._watches = Watches(self._versions, self._on_verdict)
        self._gates: dict[str, Release] = {}
        """The gates of each staged candidate that has some."""
        self.verdicts: dict[str, Verdict] = {}
        """The last gate decision per bundle name."""
        self._store = store
        self._deps = deps
        self.expiry = expiry
        """The expiry policy (``trust.expiry``); SIGHUP may change it."""
        self.expired: dict[str, dict[str, str]] = {}
        """Installed bundles found expired: name -> {"action": "serving"|"stopped", "message"}."""
        self._lock = asyncio.Lock()
        self._by_name: dict[str, tuple[asyncio.Lock, list[int]]] = {}
        self._closing: set[asyncio.Future[None]] = set()
        # Start-up loads at once: one per core (more only raise the peak of model buffers).
        self._loads = asyncio.Semaphore(max(1, os.cpu_count() or 1))
        self._errors: dict[str, Event] = {}
        self.events: list[Event] = []
        self._origins: dict[str, set[Path]] = {}
        self.on_change: list[Callable[[], None]] = []
        """Called after every switch or removal (MQTT metadata, metrics)."""

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
        began = time.monotonic()
        await asyncio.to_thread(self._collect_leftovers)
        stored = await asyncio.to_thread(self._store.installed)
        verdicts = await asyncio.to_thread(self._store.recheck)
        total = len(stored) + len(bundle_files)
        log.info(
            "loading %d bundles (%d installed, %d files)", total, len(stored), len(bundle_files)
        )

        def step(done: int, what: str) -> None:
            progress(f"loading {what} ({done}/{total})")
            elapsed = time.monotonic() - began
            log.info("loading bundle %d/%d: %s (%.1f s so far)", done, total, what, elapsed)

        admitted = [
            (i, item)
            for i, item in enumerate(stored, 1)
            if self._admits(item.manifest.name, verdicts.get(item.manifest.name), "start-up")
        ]
        refused, older = await self._load_at_start(
            admitted, bundle_files, len(stored), step, progress
        )
        self.table.started = True
        self._changed()  # expired bundles, even when nothing at all was loaded
        if older:
            log.warning(
                "skipped %d bundle files older than the installed versions (anti-rollback): "
                "%s; delete them from %s (`wasmgate doctor` lists them)",
                len(older),
                ", ".join(older),
                bundle_files[0].parent,
            )
        log.info(
            "start-up bundles loaded: %d serving, %d refused, %d older skipped, %.1f s",
            len(self.table.slots()),
            len(refused),
            len(older),
            time.monotonic() - began,
        )
        return refused

    async def _load_at_start(
        self,
        admitted: list[tuple[int, InstalledBundle]],
        files: Sequence[Path],
        offset: int,
        step: Callable[[int, str], None],
        progress: Callable[[str], None],
    ) -> tuple[list[Path], list[str]]:
        """Load the admitted stored bundles (with their candidates) and install ``files``;
        (files refused, files skipped as older)."""
        refusals = await asyncio.to_thread(self._store.recheck, staged=True)
        staged = {
            s.bundle.manifest.name: s for s in await asyncio.to_thread(self._store.candidates)
        }
        for name in sorted(staged.keys() - {item.manifest.name for _, item in admitted}):
            await self._restore(staged.pop(name), refusals.get(name))  # kept staged, or aborted
        # The bundles load side by side (compiles, ORT sessions, hashing and file reads
        # release the GIL): the start takes about the slowest bundle, not their sum. The
        # files are staged meanwhile; one naming a stored bundle waits for that bundle's
        # name lock (taken here, before the files start), so a newer file still replaces
        # what the store held, and a staged candidate is back beside its serving version.
        # Largest first: with a load per core, the big model is not left to start last.
        admitted.sort(key=lambda pair: -pair[1].manifest.total_size())
        async with asyncio.TaskGroup() as group:
            for i, item in admitted:
                name = item.manifest.name
                held = contextlib.AsyncExitStack()
                await held.enter_async_context(self._name_lock(name))
                candidate = staged.get(name)
                group.create_task(
                    self._start_stored(
                        held, item, functools.partial(step, i, item.manifest.label()),
                        None if candidate is None else (candidate, refusals.get(name)),
                        progress,
                    )
                )  # fmt: skip
            staging = group.create_task(self._start_files(files, offset, step))
        return staging.result()

    async def _start_stored(
        self,
        held: contextlib.AsyncExitStack,
        item: InstalledBundle,
        announce: Callable[[], None],
        candidate: tuple[StagedInstall, SigningError | None] | None,
        progress: Callable[[str], None],
    ) -> None:
        """Serve a stored bundle, then its staged candidate; ``held``: its name lock."""
        async with held:
            async with self._loads:
                announce()
                with contextlib.suppress(BundleRejected):
                    self._switch(await self._prepare(item, "store"), "store", 100)
            if candidate is not None:
                progress(f"loading {candidate[0].bundle.manifest.label()} (staged)")
                await self._restore(*candidate)

    async def _start_files(
        self, files: Sequence[Path], offset: int, step: Callable[[int, str], None]
    ) -> tuple[list[Path], list[str]]:
        refused: list[Path] = []
        older: list[str] = []
        for i, path in enumerate(files, offset + 1):
            step(i, path.name)
            try:
                await self.install(path, source=f"file {path.name}", origin=path)
            except BundleRejected as e:
                if is_rollback(e):
                    older.append(f"{path.name} ({e})")
                else:
                    refused.append(path)
        return refused, older

    async def close(self, wait_s: float) -> None:
        """Stop serving everything; wait up to ``wait_s`` for unloads, then give up."""
        await self._watches.close()
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
                self._record(
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
            self._origins.setdefault(bundle.name, set()).add(origin)
        return bundle

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
                self._record(source, ok=False, name=man.name, version=man.version, message=str(e))
                raise BundleRejected(str(e)) from e
            self.expired.pop(man.name, None)  # a fresh install is never expired
            self._switch(bundle, source, percent, gates)
        return bundle

    async def _restore(self, staged: StagedInstall, why: SigningError | None) -> None:
        """Serve a candidate the store holds (at start) next to its serving version, unless
        the store's re-verification refused it (``why``): then it is aborted."""
        man = staged.bundle.manifest
        if why is not None and self._refuses_candidate(why):
            await asyncio.to_thread(self._store.abort, man.name)
            msg = f"staged version aborted: not accepted at start-up: {why}"
            self._record("start-up", ok=False, name=man.name, version=man.version, message=msg)
            return
        if man.name not in self.table.slots():
            msg = f"{man.label()}: staged, but its serving version is not loaded; kept staged"
            self._record("store", ok=False, name=man.name, version=man.version, message=msg)
            return
        try:
            bundle = await self._prepare(staged.bundle, "store")
        except BundleRejected:
            await asyncio.to_thread(self._store.abort, man.name)  # recorded by _prepare
            return
        self._switch(bundle, "store", staged.percent, staged.gates)

    def _drop(self, item: InstalledBundle) -> None:
        """Forget a staged bundle that will not serve, and delete its blobs (blocking)."""
        self._store.discard(item)
        try:
            self._store.gc()
        except (OSError, SigningError) as e:  # only disk space is lost; the next gc retries
            log.warning("bundle store gc failed: %s", e)

    def _collect_leftovers(self) -> None:
        """Blobs of an install interrupted by a crash (blocking; at start)."""
        # ``staging/``: the throw-away stores of daemons before two-phase installs
        shutil.rmtree(self._store.state_dir / "staging", ignore_errors=True)
        try:
            self._store.gc()
        except (OSError, SigningError) as e:
            log.warning("bundle store gc failed: %s", e)

    async def _prepare(self, item: InstalledBundle, source: str) -> LoadedBundle:
        """Load (compile, models, selftest) and check names; nothing serves it yet."""
        man = item.manifest
        try:
            bundle = await asyncio.to_thread(load_bundle, self._deps, self._store, man, item.digest)
        except (DaemonError, SigningError) as e:  # SigningError: a blob missing or damaged
            self._record(source, ok=False, name=man.name, version=man.version, message=str(e))
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
            self._record(source, ok=False, name=bundle.name, version=bundle.version, message=msg)
            raise BundleRejected(msg)

    def _switch(
        self, bundle: LoadedBundle, source: str, percent: int, gates: Release | None = None
    ) -> None:
        self.table.activate(bundle, percent)
        self._watches.stop(bundle.name)
        self._gates.pop(bundle.name, None)
        if percent < 100 and gates is not None:
            self._gates[bundle.name] = gates
            self._watches.start(bundle.name, bundle, gates)
        self._changed()
        staged = f" (staged at {percent}%)" if percent < 100 else ""
        msg = f"serving{staged}"
        self._record(source, ok=True, name=bundle.name, version=bundle.version, message=msg)
        self._errors.pop(bundle.name, None)
        self._errors.pop(source, None)

    async def remove(self, name: str) -> LoadedBundle:
        """Stop serving ``name``; it stays off across restarts until installed again."""
        async with self._lock:
            slot = self.table.remove(name)
            self._release_done(name)
            self._changed()
            await asyncio.to_thread(self._store.remove, name)
            for path in self._origins.pop(name, set()):
                path.unlink(missing_ok=True)
            self._record("api", ok=True, name=name, version=slot.current.version, message="removed")
            return slot.current

    async def apply_trust(self, trust: TrustStore) -> list[str]:
        """Use a reloaded trust store; unload bundles it no longer accepts (revocations)."""
        async with self._lock:
            await asyncio.to_thread(self._store.use_trust, trust)
            return await self._enforce("trust")

    async def enforce(self, source: str) -> list[str]:
        """Apply a fresh install's checks to what serves (e.g. when a bundle expires)."""
        async with self._lock:
            return await self._enforce(source)

    async def _enforce(self, source: str) -> list[str]:
        verdicts = await asyncio.to_thread(self._store.recheck)
        unloaded = []
        for name in list(self.table.slots()):
            if not self._admits(name, verdicts.get(name), source):
                slot = self.table.remove(name)
                unloaded.append(name)
                why = verdicts[name]
                msg = f"unloaded: the trust store no longer accepts it: {why}"
                if isinstance(why, ExpiredError):
                    msg = f"unloaded (trust.expiry = stop): {why}"
                self._record(source, ok=False, name=name, version=slot.current.version, message=msg)
        for name, why in (await asyncio.to_thread(self._store.recheck, staged=True)).items():
            held = self.table.slots().get(name)
            if held is not None and held.candidate is not None and self._refuses_candidate(why):
                await self._drop_candidate(name, source, f"no longer accepted: {why}")
        self._changed()
        return unloaded

    def _refuses_candidate(self, why: SigningError) -> bool:
        """A candidate's refusal counts unless it only expired under ``trust.expiry = warn``."""
        return not (isinstance(why, ExpiredError) and self.expiry == "warn")

    def _admits(self, name: str, why: SigningError | None, source: str) -> bool:
        """Whether an installed bundle may (keep) serving, given the store's verdict."""
        if why is None:
            self.expired.pop(name, None)
            return True
        if isinstance(why, ExpiredError):
            action = "serving" if self.expiry == "warn" else "stopped"
            if self.expired.get(name, {}).get("action") != action:
                log.warning("bundle expired (expiry = %s): %s", self.expiry, why)
            self.expired[name] = {"action": action, "message": str(why)}
            if self.expiry == "warn":
                return True
        if source == "start-up":
            self._record(source, ok=False, name=name, message=f"not loaded: {why}")
        return False

    def next_expiry(self) -> float | None:
        """The earliest ``expires`` (POSIX time) among serving bundles not yet found expired."""
        times = [
            b.expires
            for name, slot in self.table.slots().items()
            if name not in self.expired
            for b in slot.versions()
        ]
        return min(times, default=None)

    async def promote(
        self, name: str, source: str = "api", only: LoadedBundle | None = None
    ) -> LoadedBundle:
        """The candidate of ``name`` takes all traffic; the floor rises to its version.

        ``only``: do nothing unless this is still the candidate (a gate decision)."""
        async with self._lock:
            candidate = self._candidate(name, only)
            await asyncio.to_thread(self._store.promote, name)
            self.table.promote(name)
            self._release_done(name)
            self._changed()
            self._record(source, ok=True, name=name, version=candidate.version, message="promoted")
            return candidate

    async def abort(
        self, name: str, source: str = "api", why: str = "", only: LoadedBundle | None = None
    ) -> LoadedBundle:
        """Drop the candidate of ``name``; requests on it finish; the floor is unchanged."""
        async with self._lock:
            self._candidate(name, only)
            return await self._drop_candidate(name, source, why)

    async def _drop_candidate(self, name: str, source: str, why: str) -> LoadedBundle:
        """Abort the candidate of ``name`` (durably first); the caller holds the lock."""
        await asyncio.to_thread(self._store.abort, name)
        candidate = self.table.abort(name)
        self._release_done(name)
        self._changed()
        msg = f"staged version aborted{': ' + why if why else ''}"
        self._record(source, ok=True, name=name, version=candidate.version, message=msg)
        return candidate

    def _candidate(self, name: str, only: LoadedBundle | None) -> LoadedBundle:
        candidate = self.table.slot(name).candidate
        if candidate is None or (only is not None and candidate is not only):
            raise NotFound(f"bundle {name!r} has no staged version")
        return candidate

    def _release_done(self, name: str) -> None:
        self._watches.stop(name)
        self._gates.pop(name, None)

    def _versions(self, name: str) -> tuple[LoadedBundle, LoadedBundle | None] | None:
        slot = self.table.slots().get(name)
        return None if slot is None else (slot.current, slot.candidate)

    async def _on_verdict(self, verdict: Verdict, candidate: LoadedBundle) -> None:
        self.verdicts[verdict.name] = verdict
        level = logging.INFO if verdict.outcome == "promote" else logging.WARNING
        log.log(level, "%s", verdict.message(), extra={"bundle": verdict.name})
        if self._metrics is not None:
            self._metrics.observe_release(verdict.name, verdict.outcome, vars(verdict.measured))
        with contextlib.suppress(NotFound):  # promoted or aborted by hand meanwhile
            if verdict.outcome == "promote":
                await self.promote(verdict.name, "gates", candidate)
            else:
                await self.abort(verdict.name, "gates", "; ".join(verdict.reasons), candidate)

    # -- status -----------------------------------------------------------------------

    def status(self) -> list[dict[str, Any]]:
        """One entry per bundle name: serving version, staged candidate, last error."""
        out = []
        for name, slot in sorted(self.table.slots().items()):
            entry = describe(slot.current)
            if slot.candidate is not None:
                gates = self._gates.get(name)
                entry["staged"] = {
                    **describe(slot.candidate),
                    "percent": slot.percent,
                    "gates": gates.model_dump() if gates is not None else None,
                    "measured": vars(measure(slot.candidate, slot.current)),
                }
            if name in self.verdicts:
                entry["release"] = self.verdicts[name].as_dict()
            if name in self._errors:
                entry["last_error"] = asdict(self._errors[name])
            out.append(entry)
        return out

    def failures(self) -> list[Event]:
        """Last failed install per bundle name (or source, when the name is unknown)."""
        return list(self._errors.values())

    # -- internals --------------------------------------------------------------------

    def _record(
        self, source: str, *, ok: bool, name: str | None = None, quiet: bool = False, **kw: Any
    ) -> None:
        event = Event(at=time.time(), source=source, ok=ok, name=name, **kw)
        self.events = [*self.events[-49:], event]
        if not ok:
            self._errors[name or source] = event
            level = logging.DEBUG if quiet else logging.WARNING
            log.log(level, "bundle not installed: %s", event.message, extra={"source": source})
        else:
            log.info("bundle %s", event.message, extra={"bundle": name, "version": event.version})

    def _changed(self) -> None:
        for hook in self.on_change:
            try:
                hook()
            except Exception:
                log.exception("registry change hook failed")

    def _schedule_close(self, bundle: LoadedBundle) -> None:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.run_in_executor(None, bundle.close)
        self._closing.add(fut)
        fut.add_done_callback(self._closing.discard)


def is_rollback(err: BundleRejected) -> bool:
    """Refused only for being older than the installed version (retrying cannot help)."""
    return isinstance(err.__cause__, RollbackError)


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
