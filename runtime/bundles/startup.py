"""Start-up loading: serve again what the store holds, then install the bundle files.

`StartUp` owns the daemon's first fill of the serving table (`Registry.start`): it clears
the leftovers of an install a crash interrupted, has the store re-verify its bundles
(`Admission.admits` decides what still serves), loads the admitted ones side by side (one
per core, largest first) with their staged candidates, and meanwhile installs the bundle
directory's files one by one through the registry's install pipeline. A file older than
the installed version is skipped with one summary line (`is_rollback`), not one each.

A file unchanged since it was verified (the store's `SeenFiles`: same size, mtime, ctime,
inode, device) that held the bundle serving now is not read again: installing it would only
find that bundle and discard the copy (tens of ms of reading, hashing and staging per file).
It is skipped only when that install could not have had another outcome: the serving
bundle passed this start's re-verification (no verdict), is not below its name's floor, and
the file is within the size cap. What serves is the store's copy, verified as always, so a
forged entry or stamp can at most skip re-installing the version already serving.

It drives the registry's install steps through `Steps` (the registry's own methods,
bound), so the pipeline's locks and records are the ones every install uses.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import shutil
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import msgspec

from wasmgate._compat import TaskGroup
from wasmgate.runtime.bundles.admission import Admission
from wasmgate.runtime.bundles.journal import Journal
from wasmgate.runtime.bundles.progress import LoadProgress
from wasmgate.runtime.bundles.table import ServingTable
from wasmgate.runtime.errors import BundleRejected
from wasmgate.runtime.served.loaded import LoadedBundle
from wasmgate.signing.errors import RollbackError, SigningError
from wasmgate.signing.installs import InstalledBundle, StagedInstall
from wasmgate.signing.manifest import Release
from wasmgate.signing.seen import SeenFiles, Stamp, stamp

log = logging.getLogger("wasmgate.registry")


def is_rollback(err: BundleRejected) -> bool:
    """Refused only for being older than the installed version (retrying cannot help)."""
    return isinstance(err.__cause__, RollbackError)


class StoredBundles(Protocol):
    """The part of the bundle store (`registry.Store`) the start-up reads and cleans."""

    def installed(self) -> Sequence[InstalledBundle]: ...
    def candidates(self) -> Sequence[StagedInstall]: ...
    def recheck(self, staged: bool = False) -> Mapping[str, SigningError]: ...
    def abort(self, name: str) -> None: ...
    def gc(self) -> Sequence[str]: ...
    def floors(self) -> Mapping[str, int]: ...

    state_dir: Path
    seen_files: SeenFiles
    max_bundle_bytes: int


class InstallFile(Protocol):
    def __call__(self, data: Path, *, source: str, origin: Path) -> Awaitable[LoadedBundle]: ...


class Steps(msgspec.Struct, frozen=True):
    """The registry's install steps the start-up drives."""

    name_lock: Callable[[str], AbstractAsyncContextManager[None]]
    """Installs of one name, one at a time."""
    prepare: Callable[[InstalledBundle, str], Awaitable[LoadedBundle]]
    """Load and check a stored bundle; nothing serves it yet (`BundleRejected`: recorded)."""
    switch: Callable[[LoadedBundle, str, int, Release | None], None]
    """Serve a prepared bundle at a percentage, under its gates."""
    install: InstallFile
    """The whole pipeline for a bundle file (`Registry.install`)."""
    adopt: Callable[[str, Path], None]
    """A file holds the serving bundle of this name (`Registry.remove` deletes it)."""


@dataclass
class FileOutcome:
    """What became of the bundle files at start."""

    refused: list[Path] = field(default_factory=list)
    older: list[str] = field(default_factory=list)
    """Skipped as older than the installed version: ``"file (why)"``."""
    unchanged: int = 0
    """Not read: unchanged since verified, holding the bundle that serves."""


class StartUp:
    """The start-up loading of one registry (`run` once, before serving)."""

    def __init__(
        self,
        store: StoredBundles,
        table: ServingTable,
        journal: Journal,
        admission: Admission,
        steps: Steps,
    ) -> None:
        self._store = store
        self._table = table
        self._journal = journal
        self._admission = admission
        self._steps = steps
        self.progress = LoadProgress()
        # Start-up loads at once: one per core (more only raise the peak of model buffers).
        self._loads = asyncio.Semaphore(max(1, os.cpu_count() or 1))

    async def run(
        self, bundle_files: Sequence[Path], progress: Callable[[str], None]
    ) -> list[Path]:
        """`Registry.start`: serve the store's bundles, then the files; the files refused."""
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
            if self._admission.admits(
                item.manifest.name, verdicts.get(item.manifest.name), "start-up"
            )
        ]
        self.progress.begin(len(admitted) + len(bundle_files))
        await self._load_all(admitted, step, progress)
        files = await self._start_files(bundle_files, len(stored), step, verdicts)
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
                await held.enter_async_context(self._steps.name_lock(name))
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
                        bundle = await self._steps.prepare(item, "store")
                        self._steps.switch(bundle, "store", 100, None)
                finally:
                    self.progress.finished(label)
            if candidate is not None:
                progress(f"loading {candidate[0].bundle.manifest.label()} (staged)")
                await self._restore(*candidate)

    async def _start_files(
        self,
        files: Sequence[Path],
        offset: int,
        step: Callable[[int, str], None],
        verdicts: Mapping[str, SigningError],
    ) -> FileOutcome:
        out = FileOutcome()
        seen = self._store.seen_files
        for i, path in enumerate(files, offset + 1):
            step(i, path.name)
            self.progress.started(path.name)
            try:
                await self._start_file(path, out, verdicts)
            finally:
                self.progress.finished(path.name)
        await asyncio.to_thread(seen.save, files)
        return out

    async def _start_file(
        self, path: Path, out: FileOutcome, verdicts: Mapping[str, SigningError]
    ) -> None:
        """One bundle file at start: adopted when unchanged, else installed (`FileOutcome`)."""
        seen = self._store.seen_files
        # Stamped before the install reads it: a write after the stamp moves ctime.
        before, digest = await asyncio.to_thread(_look_up, seen, path)
        name = self._serving_unchanged(before, digest, verdicts)
        if name is not None:
            self._steps.adopt(name, path)
            out.unchanged += 1
            return
        try:
            bundle = await self._steps.install(path, source=f"file {path.name}", origin=path)
        except BundleRejected as e:
            if is_rollback(e):
                out.older.append(f"{path.name} ({e})")
            else:
                out.refused.append(path)
            return
        if before is not None:
            seen.remember(path, before, bundle.digest)

    def _serving_unchanged(
        self, before: Stamp | None, digest: str | None, verdicts: Mapping[str, SigningError]
    ) -> str | None:
        """The name whose serving bundle an unchanged file holds, when installing the file
        again could only find that bundle (see the module docstring); else None."""
        if before is None or digest is None or before.size > self._store.max_bundle_bytes:
            return None
        floors = self._store.floors()
        for name, slot in self._table.slots().items():
            current = slot.current
            if current.digest == digest:
                fresh = name not in verdicts and current.version >= floors.get(name, 0)
                return name if fresh else None
        return None

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
            bundle = await self._steps.prepare(staged.bundle, "store")
        except BundleRejected:
            await asyncio.to_thread(self._store.abort, man.name)  # recorded by the prepare step
            return
        self._steps.switch(bundle, "store", staged.percent, staged.gates)

    def _collect_leftovers(self) -> None:
        """Blobs of an install interrupted by a crash (blocking; at start)."""
        # ``staging/``: the throw-away stores of daemons before two-phase installs
        shutil.rmtree(self._store.state_dir / "staging", ignore_errors=True)
        try:
            self._store.gc()
        except (OSError, SigningError) as e:
            log.warning("bundle store gc failed: %s", e)


def _look_up(seen: SeenFiles, path: Path) -> tuple[Stamp | None, str | None]:
    """(the stamp of ``path`` now, the bundle digest it held with that stamp) (blocking)."""
    now = stamp(path)
    return now, None if now is None else seen.digest(path, now)
