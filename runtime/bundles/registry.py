"""The bundle registry: the serving table's owner and the daemon's one door to its bundles.

Bundles arrive from three places: the store's installed bundles and the bundle directory at
start, a file dropped into the directory later (`DirWatcher`), the management API. Each
goes through the install pipeline (`installer.py`: stage → load → selftest → commit →
switch). At start the store's bundles load side by side (one per core, largest first), then
the bundle files are installed; READY still waits for all of them (`start` returns after).
A failure at any step keeps the serving version and is recorded
(`Registry.status()`, the log). A switch is atomic (`ServingTable.activate`); the replaced
version is unloaded off the loop once its last in-flight request finished.

A staged install (``percent`` < 100) commits the bundle as the name's candidate: durable, but
the anti-rollback floor rises only when it is promoted (by the API or its metric gates,
`release.py`); an abort drops it and leaves the floor where it was. At start the store's
candidates serve their share again.

This module is the registry's public face; the parts it is composed of live beside it: the
install pipeline (`installer.py`), the start-up loading (`startup.py`), the staged
releases' promote and abort (`staged.py`), the trust and expiry checks (`admission.py`),
and the events, last errors and change hooks (`journal.py`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from wasmgate.runtime.bundles.admission import Admission, ExpiryPolicy
from wasmgate.runtime.bundles.installer import Installer, InstallStore
from wasmgate.runtime.bundles.journal import Event, Journal
from wasmgate.runtime.bundles.loader import LoaderDeps
from wasmgate.runtime.bundles.release import Verdict, measure
from wasmgate.runtime.bundles.staged import Releases
from wasmgate.runtime.bundles.startup import StartUp, StoredBundles
from wasmgate.runtime.bundles.table import ServingTable
from wasmgate.runtime.ops.metrics import Metrics
from wasmgate.runtime.served.loaded import LoadedBundle
from wasmgate.signing.installs import InstalledBundle
from wasmgate.signing.manifest import Release
from wasmgate.signing.trust import TrustStore
from wasmgate.typed import plain

if TYPE_CHECKING:  # fleet documents load with the first one (see signing/__init__.py)
    from wasmgate.signing.fleetdoc import Downgrade


class Store(InstallStore, StoredBundles, Protocol):
    """The part of `wasmgate.signing.BundleStore` the registry uses (with its parts')."""

    def promote(self, name: str) -> InstalledBundle: ...
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
        self._lock = asyncio.Lock()
        self._closing: set[asyncio.Future[None]] = set()
        self._journal = Journal()
        self._releases = Releases(store, self.table, self._lock, self._journal, metrics)
        self._admission = Admission(
            store, self.table, self._lock, self._journal, self._releases, policy=expiry
        )
        self._installer = Installer(
            store, deps, table=self.table, lock=self._lock, journal=self._journal,
            releases=self._releases, admission=self._admission,
            schedule_close=self._schedule_close,
        )  # fmt: skip
        self._startup = StartUp(store, self.table, self._journal, self._admission, self._installer)

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
        *,
        collect: bool = True,
    ) -> list[Path]:
        """Serve what the store holds, then the bundle files; never raises for one bundle.

        ``progress`` is told before each bundle (systemd: STATUS and a start-timeout extension);
        the log gets a line per bundle with the count and the time so far. Returns the files
        refused (not those skipped as older than the installed version: one line names them).
        ``collect``: first delete what a crash left of an install (False in a data-plane
        worker: what it would find is another process's install in progress).
        """
        return await self._startup.run(bundle_files, progress, collect=collect)

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
        """`Installer.install` (stage, load, selftest, commit, switch; its doc says what
        each argument does); `BundleRejected` says why not."""
        return await self._installer.install(
            data, source=source, percent=percent, gates=gates, origin=origin, downgrades=downgrades
        )

    async def remove(self, name: str) -> LoadedBundle:
        """Stop serving ``name``; it stays off across restarts until installed again."""
        async with self._lock:
            slot = self.table.remove(name)
            self._releases.done(name)
            self._journal.changed()
            await asyncio.to_thread(self._store.remove, name)
            for path in self._installer.origins.pop(name, set()):
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
