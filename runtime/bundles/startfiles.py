"""The bundle directory's files at start: each installed, or adopted when unchanged.

`StartFiles` runs after the store's bundles are serving again (`startup.py`): each file
goes through the install pipeline (`installer.py`), one by one. A file older than the
installed version is skipped with one summary line (`is_rollback`), not one each.

A file unchanged since it was verified (the store's `SeenFiles`: same size, mtime, ctime,
inode, device) that held the bundle serving now is not read again: installing it would only
find that bundle and discard the copy (tens of ms of reading, hashing and staging per file).
It is skipped only when that install could not have had another outcome: the serving
bundle passed this start's re-verification (no verdict), is not below its name's floor, and
the file is within the size cap. What serves is the store's copy, verified as always, so a
forged entry or stamp can at most skip re-installing the version already serving.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from wasmgate.runtime.bundles.installer import Installer, is_rollback
from wasmgate.runtime.bundles.progress import LoadProgress
from wasmgate.runtime.bundles.table import ServingTable
from wasmgate.runtime.errors import BundleRejected
from wasmgate.signing.errors import SigningError
from wasmgate.signing.seen import SeenFiles, Stamp, stamp


class SeenStore(Protocol):
    """The part of the bundle store the files' start reads."""

    def floors(self) -> Mapping[str, int]: ...

    seen_files: SeenFiles
    max_bundle_bytes: int


@dataclass
class FileOutcome:
    """What became of the bundle files at start."""

    refused: list[Path] = field(default_factory=list)
    older: list[str] = field(default_factory=list)
    """Skipped as older than the installed version: ``"file (why)"``."""
    unchanged: int = 0
    """Not read: unchanged since verified, holding the bundle that serves."""


class StartFiles:
    """Installs the bundle files at start (`run` once, after the store's bundles)."""

    def __init__(
        self,
        store: SeenStore,
        table: ServingTable,
        installer: Installer,
        progress: LoadProgress,
    ) -> None:
        self._store = store
        self._table = table
        self._installer = installer
        self.progress = progress

    async def run(
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
            self._installer.adopt(name, path)
            out.unchanged += 1
            return
        try:
            bundle = await self._installer.install(path, source=f"file {path.name}", origin=path)
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


def _look_up(seen: SeenFiles, path: Path) -> tuple[Stamp | None, str | None]:
    """(the stamp of ``path`` now, the bundle digest it held with that stamp) (blocking)."""
    now = stamp(path)
    return now, None if now is None else seen.digest(path, now)
