"""Start-up loading: serve again what the store holds, then install the bundle files.

`StartUp` owns the daemon's first fill of the serving table (`Registry.start`): it clears
the leftovers of an install a crash interrupted, has the store re-verify its bundles
(`Admission.admits` decides what still serves), loads the admitted ones side by side (one
per core, largest first) with their staged candidates, then has `StartFiles`
(`startfiles.py`) install the bundle directory's files. It drives the registry's install
pipeline (`installer.py`), so the locks and records are the ones every install uses.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from wasmgate._compat import TaskGroup
from wasmgate.runtime.bundles.admission import Admission
from wasmgate.runtime.bundles.installer import Installer
from wasmgate.runtime.bundles.journal import Journal
from wasmgate.runtime.bundles.progress import LoadProgress
from wasmgate.runtime.bundles.startfiles import SeenStore, StartFiles
from wasmgate.runtime.bundles.table import ServingTable
from wasmgate.runtime.errors import BundleRejected
from wasmgate.signing.errors import SigningError
from wasmgate.signing.installs import InstalledBundle, StagedInstall

log = logging.getLogger("wasmgate.registry")


class StoredBundles(SeenStore, Protocol):
    """The part of the bundle store (`registry.Store`) the start-up reads and cleans."""

    def installed(self) -> Sequence[InstalledBundle]: ...
    def candidates(self) -> Sequence[StagedInstall]: ...
    def recheck(self, staged: bool = False) -> Mapping[str, SigningError]: ...
    def abort(self, name: str) -> None: ...
    def gc(self) -> Sequence[str]: ...

    state_dir: Path


class StartUp:
    """The start-up loading of one registry (`run` once, before serving)."""

    def __init__(
        self,
        store: StoredBundles,
        table: ServingTable,
        journal: Journal,
        admission: Admission,
        installer: Installer,
    ) -> None:
        self._store = store
        self._table = table
        self._journal = journal
        self._admission = admission
        self._installer = installer
        self.progress = LoadProgress()
        self._files = StartFiles(store, table, installer, self.progress)
        # Start-up loads at once: one per core (more only raise the peak of model buffers).
        self._loads = asyncio.Semaphore(max(1, os.cpu_count() or 1))

    async def run(
        self, bundle_files: Sequence[Path], progress: Callable[[str], None], *, collect: bool
    ) -> list[Path]:
        """`Registry.start`: serve the store's bundles, then the files; the files refused."""
        began = time.monotonic()
        if collect:
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
            if self._admission.admits(
                item.manifest.name, verdicts.get(item.manifest.name), "start-up"
            )
        ]
        self.progress.begin(len(admitted) + len(bundle_files))
        await self._load_all(admitted, step, progress)
        files = await self._files.run(bundle_files, len(stored), step, verdicts)
        self._table.started = True
        self.progress.end()
        self._journal.changed()  # expired bundles, even when nothing at all was loaded
        if files.older:
            log.warning(
                "skipped %d bundle files older than the installed versions (anti-rollback): "
                "%s; delete them from %s (`wasmgate doctor` lists them)",
                len(files.older),
                ", ".join(files.older),
                bundle_files[0].parent,
            )
        log.info(
            "start-up bundles loaded: %d serving, %d refused, %d older skipped, "
            "%d files unchanged, %.1f s",
            len(self._table.slots()),
            len(files.refused),
            len(files.older),
            files.unchanged,
            time.monotonic() - began,
        )
        return files.refused

    async def _load_all(
        self,
        admitted: list[tuple[int, InstalledBundle]],
        step: Callable[[int, str], None],
        progress: Callable[[str], None],
    ) -> None:
        """Load the admitted stored bundles, with their candidates (the files come after)."""
        refusals = await asyncio.to_thread(self._store.recheck, staged=True)
        staged = {
            s.bundle.manifest.name: s for s in await asyncio.to_thread(self._store.candidates)
        }
        for name in sorted(staged.keys() - {item.manifest.name for _, item in admitted}):
            await self._restore(staged.pop(name), refusals.get(name))  # kept staged, or aborted
        # The bundles load side by side (compiles, ORT sessions, hashing and file reads
        # release the GIL): the start takes about the slowest bundle, not their sum.
        # Largest first: with a load per core, the big model is not left to start last.
        # The files are staged only after: staging writes blobs, and a file must not
        # re-supply a stored bundle's missing blobs before its load has found (and named)
        # them — the operator learns the state directory was damaged. A file naming a
        # stored bundle still replaces it when newer, and a staged candidate is back beside
        # its serving version (each load holds its name lock until its candidate is back).
        admitted.sort(key=lambda pair: -pair[1].manifest.total_size())
        async with TaskGroup() as group:
            for i, item in admitted:
                name = item.manifest.name
                held = contextlib.AsyncExitStack()
                await held.enter_async_context(self._installer.name_lock(name))
                candidate = staged.get(name)
                group.create_task(
                    self._start_stored(
                        held, item, functools.partial(step, i, item.manifest.label()),
                        None if candidate is None else (candidate, refusals.get(name)),
                        progress,
                    )
                )  # fmt: skip

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
                label = item.manifest.label()
                self.progress.started(label)
                try:
                    with contextlib.suppress(BundleRejected):
                        bundle = await self._installer.prepare(item, "store")
                        self._installer.switch(bundle, "store", 100, None)
                finally:
                    self.progress.finished(label)
            if candidate is not None:
                progress(f"loading {candidate[0].bundle.manifest.label()} (staged)")
                await self._restore(*candidate)

    async def _restore(self, staged: StagedInstall, why: SigningError | None) -> None:
        """Serve a candidate the store holds (at start) next to its serving version, unless
        the store's re-verification refused it (``why``): then it is aborted."""
        man = staged.bundle.manifest
        record = self._journal.record
        if why is not None and self._admission.refuses_candidate(why):
            await asyncio.to_thread(self._store.abort, man.name)
            msg = f"staged version aborted: not accepted at start-up: {why}"
            record("start-up", ok=False, name=man.name, version=man.version, message=msg)
            return
        if man.name not in self._table.slots():
            msg = f"{man.label()}: staged, but its serving version is not loaded; kept staged"
            record("store", ok=False, name=man.name, version=man.version, message=msg)
            return
        try:
            bundle = await self._installer.prepare(staged.bundle, "store")
        except BundleRejected:
            await asyncio.to_thread(self._store.abort, man.name)  # recorded by the prepare step
            return
        self._installer.switch(bundle, "store", staged.percent, staged.gates)

    def _collect_leftovers(self) -> None:
        """Blobs of an install interrupted by a crash (blocking; at start)."""
        # ``staging/``: the throw-away stores of daemons before two-phase installs
        shutil.rmtree(self._store.state_dir / "staging", ignore_errors=True)
        try:
            self._store.gc()
        except (OSError, SigningError) as e:
            log.warning("bundle store gc failed: %s", e)
