"""Watch the bundle directory by polling (no inotify dependency; works on every filesystem).

A ``*.wgb`` file is installed once its size and mtime stayed the same for one poll
interval, so a bundle still being copied in is not read half-written (an atomic rename
into the directory is installed on the next poll). A file is tried once per change: a
rejected file is retried only when it changes again. Removing a file does not unload its
bundle (``DELETE /v1/bundles/{name}`` does, and deletes the file).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from wasmgate.runtime.errors import BundleRejected

log = logging.getLogger("wasmgate.watcher")

Installer = Callable[[Path], Awaitable[object]]
_Key = tuple[int, int]  # (size, mtime_ns)


def bundle_files(directory: Path) -> list[Path]:
    """The ``*.wgb`` files in ``directory`` (sorted; empty when it does not exist)."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.glob("*.wgb") if p.is_file())


def _key(path: Path) -> _Key | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns)


class DirWatcher:
    """Polls ``directory`` every ``interval`` seconds and installs new or changed bundles."""

    def __init__(self, directory: Path, install: Installer, interval: float = 1.0) -> None:
        self._dir = directory
        self._install = install
        self._interval = interval
        self._seen: dict[Path, _Key] = {}
        self._pending: dict[Path, _Key] = {}

    def mark_seen(self, paths: list[Path]) -> None:
        """Files handled at start-up: do not install them again until they change."""
        for path in paths:
            key = _key(path)
            if key is not None:
                self._seen[path] = key

    async def poll_once(self) -> None:
        current = {p: k for p in bundle_files(self._dir) if (k := _key(p)) is not None}
        for path in [p for p in self._seen if p not in current]:
            del self._seen[path]
        for path, key in current.items():
            if self._seen.get(path) == key:
                continue
            if self._pending.get(path) != key:
                self._pending[path] = key  # changed since last poll: wait until it settles
                continue
            del self._pending[path]
            self._seen[path] = key
            await self._try(path)

    async def rescan(self) -> None:
        """Install every new or changed file now, without waiting for it to settle (SIGHUP)."""
        for path in bundle_files(self._dir):
            key = _key(path)
            if key is None or self._seen.get(path) == key:
                continue
            self._pending.pop(path, None)
            self._seen[path] = key
            await self._try(path)

    async def _try(self, path: Path) -> None:
        try:
            await self._install(path)
        except BundleRejected:
            pass  # recorded by the registry; retried when the file changes
        except Exception:
            log.exception("installing a dropped bundle failed", extra={"file": str(path)})

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            await self.poll_once()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        task = asyncio.create_task(self.run(), name="bundle-dir-watcher")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
