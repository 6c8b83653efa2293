"""Staged releases: a name's candidate beside its serving version, until promoted or aborted.

`Releases` owns the candidates' gates, their metric watches (`release.Watches`) and the last
gate decision per name (``Registry.verdicts``). A promotion makes the candidate serve fully
and raises the store's anti-rollback floor to its version; an abort drops it (durably
first) and leaves the floor where it was. Both come from the management API or from the
candidate's gates (`release.py`); an abort also from the trust checks (`admission.py`).

The registry's lock is shared: `promote` and `abort` take it; `drop_candidate` expects
the caller to hold it (the trust checks drop candidates while holding it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Protocol

import msgspec

from wasmgate.runtime.bundles.journal import Journal
from wasmgate.runtime.bundles.release import Verdict, Watches
from wasmgate.runtime.bundles.table import ServingTable
from wasmgate.runtime.errors import NotFound
from wasmgate.runtime.ops.metrics import Metrics
from wasmgate.runtime.served.loaded import LoadedBundle
from wasmgate.signing.installs import InstalledBundle
from wasmgate.signing.manifest import Release

log = logging.getLogger("wasmgate.registry")


class ReleaseStore(Protocol):
    """The part of the bundle store (`registry.Store`) a staged release uses."""

    def promote(self, name: str) -> InstalledBundle: ...
    def abort(self, name: str) -> None: ...


class Releases:
    """The staged candidates' gates and watches, and their promotion or abort."""

    def __init__(
        self,
        store: ReleaseStore,
        table: ServingTable,
        lock: asyncio.Lock,
        journal: Journal,
        metrics: Metrics | None = None,
    ) -> None:
        self._store = store
        self._table = table
        self._lock = lock
        self._journal = journal
        self._metrics = metrics
        self._watches = Watches(self._versions, self._on_verdict)
        self._gates: dict[str, Release] = {}
        """The gates of each staged candidate that has some."""
        self.verdicts: dict[str, Verdict] = {}
        """The last gate decision per bundle name."""

    def switched(self, bundle: LoadedBundle, percent: int, gates: Release | None) -> None:
        """``bundle`` now serves (``percent`` < 100: as the candidate): watch its gates."""
        self.done(bundle.name)
        if percent < 100 and gates is not None:
            self._gates[bundle.name] = gates
            self._watches.start(bundle.name, bundle, gates)

    def gates(self, name: str) -> Release | None:
        """The gates of the candidate of ``name``, if it has some."""
        return self._gates.get(name)

    def done(self, name: str) -> None:
        """``name`` has no candidate any more (promoted, aborted, replaced or removed)."""
        self._watches.stop(name)
        self._gates.pop(name, None)

    async def close(self) -> None:
        await self._watches.close()

    async def promote(
        self, name: str, source: str = "api", only: LoadedBundle | None = None
    ) -> LoadedBundle:
        """The candidate of ``name`` takes all traffic; the floor rises to its version.

        ``only``: do nothing unless this is still the candidate (a gate decision)."""
        async with self._lock:
            candidate = self._candidate(name, only)
            await asyncio.to_thread(self._store.promote, name)
            self._table.promote(name)
            self.done(name)
            self._journal.changed()
            self._journal.record(
                source, ok=True, name=name, version=candidate.version, message="promoted"
            )
            return candidate

    async def abort(
        self, name: str, source: str = "api", why: str = "", only: LoadedBundle | None = None
    ) -> LoadedBundle:
        """Drop the candidate of ``name``; requests on it finish; the floor is unchanged."""
        async with self._lock:
            self._candidate(name, only)
            return await self.drop_candidate(name, source, why)

    async def drop_candidate(self, name: str, source: str, why: str) -> LoadedBundle:
        """Abort the candidate of ``name`` (durably first); the caller holds the lock."""
        await asyncio.to_thread(self._store.abort, name)
        candidate = self._table.abort(name)
        self.done(name)
        self._journal.changed()
        msg = f"staged version aborted{': ' + why if why else ''}"
        self._journal.record(source, ok=True, name=name, version=candidate.version, message=msg)
        return candidate

    def _candidate(self, name: str, only: LoadedBundle | None) -> LoadedBundle:
        candidate = self._table.slot(name).candidate
        if candidate is None or (only is not None and candidate is not only):
            raise NotFound(f"bundle {name!r} has no staged version")
        return candidate

    def _versions(self, name: str) -> tuple[LoadedBundle, LoadedBundle | None] | None:
        slot = self._table.slots().get(name)
        return None if slot is None else (slot.current, slot.candidate)

    async def _on_verdict(self, verdict: Verdict, candidate: LoadedBundle) -> None:
        self.verdicts[verdict.name] = verdict
        level = logging.INFO if verdict.outcome == "promote" else logging.WARNING
        log.log(level, "%s", verdict.message(), extra={"bundle": verdict.name})
        if self._metrics is not None:
            self._metrics.observe_release(
                verdict.name, verdict.outcome, msgspec.structs.asdict(verdict.measured)
            )
        with contextlib.suppress(NotFound):  # promoted or aborted by hand meanwhile
            if verdict.outcome == "promote":
                await self.promote(verdict.name, "gates", candidate)
            else:
                await self.abort(verdict.name, "gates", "; ".join(verdict.reasons), candidate)
