"""The bundle registry: install (verify → compile → load models → selftest → switch), remove.

Bundles arrive from three places: the store's installed bundles and the bundle directory at
start, a file dropped into the directory later (`DirWatcher`), the management API. One
install runs at a time. A failure at any step keeps the serving version and is recorded
(`Registry.status()`, the log). A switch is atomic (`ServingTable.activate`); the replaced
version is unloaded off the loop once its last in-flight request finished.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from wasmgate.runtime.bundles import LoadedBundle
from wasmgate.runtime.errors import BundleRejected, DaemonError
from wasmgate.runtime.loader import BlobSource, LoaderDeps, load_bundle
from wasmgate.runtime.registry_table import ServingTable
from wasmgate.signing.errors import SigningError
from wasmgate.signing.manifest import Manifest
from wasmgate.signing.trust import TrustStore

log = logging.getLogger("wasmgate.registry")


class Installed(Protocol):
    @property
    def manifest(self) -> Manifest: ...
    @property
    def digest(self) -> str: ...


class Store(BlobSource, Protocol):
    """The part of `wasmgate.signing.BundleStore` the registry uses."""

    def install(self, data: bytes | Path) -> Installed: ...
    def installed(self) -> Sequence[Installed]: ...
    def remove(self, name: str) -> None: ...
    def recheck(self) -> Mapping[str, SigningError]: ...

    trust: TrustStore


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
    ) -> None:
        self.table = ServingTable(self._schedule_close)
        self._store = store
        self._deps = deps
        self._lock = asyncio.Lock()
        self._closing: set[asyncio.Future[None]] = set()
        self._errors: dict[str, Event] = {}
        self.events: list[Event] = []
        self._origins: dict[str, set[Path]] = {}
        self.on_change: list[Callable[[], None]] = []
        """Called after every switch or removal (MQTT metadata, metrics)."""

    # -- start and stop ---------------------------------------------------------------

    async def start(self, bundle_files: Sequence[Path] = ()) -> None:
        """Serve what the store holds, then the bundle files; never raises for one bundle."""
        for item in await asyncio.to_thread(self._store.installed):
            with contextlib.suppress(BundleRejected):
                await self._load(item, source="store", percent=100)
        for path in bundle_files:
            with contextlib.suppress(BundleRejected):
                await self.install(path, source=f"file {path.name}", origin=path)
        self.table.started = True

    async def close(self, wait_s: float) -> None:
        """Stop serving everything; wait up to ``wait_s`` for unloads, then give up."""
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
        origin: Path | None = None,
    ) -> LoadedBundle:
        """Verify, load and switch to a bundle; `BundleRejected` says why it did not.

        ``origin`` is the bundle-directory file it came from: `remove` deletes it, so a
        removed bundle does not come back from the directory at the next start.
        """
        async with self._lock:
            try:
                item = await asyncio.to_thread(self._store.install, data)
            except SigningError as e:
                self._record(source, ok=False, message=str(e))
                raise BundleRejected(str(e)) from e
            bundle = await self._load(item, source=source, percent=percent)
            if origin is not None:
                self._origins.setdefault(bundle.name, set()).add(origin)
            return bundle

    async def _load(self, item: Installed, *, source: str, percent: int) -> LoadedBundle:
        man = item.manifest
        slot = self.table.slots().get(man.name)
        if slot is not None and slot.current.digest == item.digest:
            return slot.current  # already serving exactly this bundle
        try:
            bundle = await asyncio.to_thread(load_bundle, self._deps, self._store, man, item.digest)
        except DaemonError as e:
            self._record(source, ok=False, name=man.name, version=man.version, message=str(e))
            raise BundleRejected(str(e)) from e
        conflict = self.table.name_conflict(bundle)
        if conflict is not None:
            self._schedule_close(bundle)
            msg = f"{man.label()}: {conflict}"
            self._record(source, ok=False, name=man.name, version=man.version, message=msg)
            raise BundleRejected(msg)
        self.table.activate(bundle, percent)
        self._changed()
        staged = f" (staged at {percent}%)" if percent < 100 else ""
        self._record(
            source, ok=True, name=man.name, version=man.version, message=f"serving{staged}"
        )
        self._errors.pop(man.name, None)
        self._errors.pop(source, None)
        return bundle

    async def remove(self, name: str) -> LoadedBundle:
        """Stop serving ``name``; it stays off across restarts until installed again."""
        async with self._lock:
            slot = self.table.remove(name)
            self._changed()
            await asyncio.to_thread(self._store.remove, name)
            for path in self._origins.pop(name, set()):
                path.unlink(missing_ok=True)
            self._record("api", ok=True, name=name, version=slot.current.version, message="removed")
            return slot.current

    async def apply_trust(self, trust: TrustStore) -> list[str]:
        """Use a reloaded trust store; unload bundles it no longer accepts (revocations)."""
        async with self._lock:
            self._store.trust = trust
            refused = await asyncio.to_thread(self._store.recheck)
            for name, why in refused.items():
                if name in self.table.slots():
                    slot = self.table.remove(name)
                    msg = f"unloaded: the trust store no longer accepts it: {why}"
                    self._record(
                        "trust", ok=False, name=name, version=slot.current.version, message=msg
                    )
            if refused:
                self._changed()
            return sorted(refused)

    async def promote(self, name: str) -> LoadedBundle:
        async with self._lock:
            bundle = self.table.promote(name)
            self._changed()
            self._record("api", ok=True, name=name, version=bundle.version, message="promoted")
            return bundle

    # -- status -----------------------------------------------------------------------

    def status(self) -> list[dict[str, Any]]:
        """One entry per bundle name: serving version, staged candidate, last error."""
        out = []
        for name, slot in sorted(self.table.slots().items()):
            entry = describe(slot.current)
            if slot.candidate is not None:
                entry["staged"] = {**describe(slot.candidate), "percent": slot.percent}
            if name in self._errors:
                entry["last_error"] = asdict(self._errors[name])
            out.append(entry)
        return out

    def failures(self) -> list[Event]:
        """Last failed install per bundle name (or source, when the name is unknown)."""
        return list(self._errors.values())

    # -- internals --------------------------------------------------------------------

    def _record(self, source: str, *, ok: bool, name: str | None = None, **kw: Any) -> None:
        event = Event(at=time.time(), source=source, ok=ok, name=name, **kw)
        self.events = [*self.events[-49:], event]
        if not ok:
            self._errors[name or source] = event
            log.warning("bundle not installed: %s", event.message, extra={"source": source})
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
