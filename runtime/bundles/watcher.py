"""Watch the bundle directory and the trust file by polling (no inotify dependency; works on
every filesystem).

A ``*.wgb`` file is installed once its `file_key` (size, mtime, ctime, inode, device) stayed
the same for one poll interval, so a bundle still being copied in is not read half-written
(an atomic rename into the directory is installed on the next poll). ctime is in the key because no
unprivileged program can set it: a same-size file rewritten in place with its mtime put
back (``cp -p``, ``os.utime``) is still a change. A file is tried once per change; a
rejected file is tried again when it changes, when the trust file changes (``wasmgate trust
add`` may be what it was waiting for) and on SIGHUP (``rescan(retry_refused=True)``).
Removing a file does not unload its bundle (``DELETE /v1/bundles/{name}`` does, and deletes
the file).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from wasmgate.runtime.bundles.installer import is_rollback
from wasmgate.runtime.errors import BundleRejected
from wasmgate.runtime.ops.tasks import background
from wasmgate.signing.seen import Stamp, stamp

log = logging.getLogger("wasmgate.watcher")

Installer = Callable[[Path], Awaitable[object]]
TrustReload = Callable[[], Awaitable[object]]
FileKey = Stamp


def bundle_files(directory: Path) -> list[Path]:
    """The ``*.wgb`` files in ``directory`` (sorted; empty when it does not exist)."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.glob("*.wgb") if p.is_file())


def file_key(path: Path) -> FileKey | None:
    """``path``'s `Stamp` (size, mtime, ctime, inode, device; the store's own notion of an
    unchanged file), None unless it is a regular file: a change detector."""
    return stamp(path)


class DirWatcher:
    """Polls ``directory`` every ``interval`` seconds and installs new or changed bundles;
    calls ``on_trust_change`` once ``trust_file`` changed and settled (then retries the
    refused files)."""

    def __init__(
        self,
        directory: Path,
        install: Installer,
        interval: float = 1.0,
        *,
        trust_file: Path | None = None,
        on_trust_change: TrustReload | None = None,
    ) -> None:
        self._dir = directory
        self._install = install
        self._interval = interval
        self._seen: dict[Path, FileKey] = {}
        self._pending: dict[Path, FileKey] = {}
        self._refused: set[Path] = set()
        self._trust_file = trust_file
        self._on_trust_change = on_trust_change
        self._trust_key = file_key(trust_file) if trust_file is not None else None
        self._trust_pending: FileKey | None = None

    @property
    def refused(self) -> list[Path]:
        """Files whose last install attempt was refused (sorted)."""
        return sorted(self._refused)

    def mark_seen(self, paths: Sequence[Path], refused: Sequence[Path] = ()) -> None:
        """Files handled at start-up: do not install them again until they change (or, for
        the ``refused`` ones, until the trust changes)."""
        for path in paths:
            key = file_key(path)
            if key is not None:
                self._seen[path] = key
        self._refused.update(refused)

    async def poll_once(self) -> None:
        await self._poll_trust()
        current = {p: k for p in bundle_files(self._dir) if (k := file_key(p)) is not None}
        for path in [p for p in self._seen if p not in current]:
            del self._seen[path]
            self._refused.discard(path)
        for path, key in current.items():
            if self._seen.get(path) == key:
                continue
            if self._pending.get(path) != key:
                self._pending[path] = key  # changed since last poll: wait until it settles
                continue
            del self._pending[path]
            self._seen[path] = key
            await self._try(path)

    async def _poll_trust(self) -> None:
        if self._trust_file is None or self._on_trust_change is None:
            return
        key = file_key(self._trust_file)
        if key == self._trust_key:
            self._trust_pending = None
            return
        if key is not None and self._trust_pending != key:
            self._trust_pending = key  # still being written: wait one interval
            return
        self._trust_key, self._trust_pending = key, None
        try:
            await self._on_trust_change()
        except Exception:
            log.exception("reloading the changed trust file failed")

    def trust_seen(self) -> None:
        """The trust file was (re)loaded by someone else (SIGHUP): no second reload."""
        if self._trust_file is not None:
            self._trust_key, self._trust_pending = file_key(self._trust_file), None

    async def rescan(self, *, retry_refused: bool = False) -> None:
        """Install every new or changed file now, without waiting for it to settle (SIGHUP);
        with ``retry_refused`` also the unchanged files refused before (the trust changed)."""
        for path in bundle_files(self._dir):
            key = file_key(path)
            retry = retry_refused and path in self._refused
            if key is None or (self._seen.get(path) == key and not retry):
                continue
            self._pending.pop(path, None)
            self._seen[path] = key
            await self._try(path)

    async def _try(self, path: Path) -> None:
        self._refused.discard(path)
        try:
            await self._install(path)
        except BundleRejected as e:
            # Recorded by the registry; retried as the docstring says, unless only older.
            if not is_rollback(e):
                self._refused.add(path)
        except Exception:
            self._refused.add(path)
            log.exception("installing a dropped bundle failed", extra={"file": str(path)})

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            await self.poll_once()

    def running(self) -> contextlib.AbstractAsyncContextManager[None]:
        return background(self.run(), "bundle-dir-watcher")
