"""Content-addressed keeping of pulled artifacts: manifests and layers named by SHA-256.

Layout of the cache directory (mode 0700): ``<hex>`` files (a manifest's bytes or a layer's
bytes, named by the SHA-256 of those bytes, as in the bundle store's ``blobs/``) and
``tmp/`` for downloads in progress (emptied when the cache is opened).

Why not the bundle store's own ``blobs/``: that store deletes every blob no installed
bundle references (``gc`` at each start and after a discard), so a pulled ``.wgb`` kept
there would be gone after a restart and downloaded again. Here the same rules hold
(names are validated hex, bytes are fsync-ed and renamed into place, the directory is
fsync-ed) and the owner (fleetd) decides what to drop with :meth:`PullCache.prune`.

Invariants:
- A file under its digest's name holds those bytes: it is renamed into place only after
  the download hashed to that digest, and every read re-hashes it (:meth:`verified`), so
  a file damaged on disk counts as absent and is fetched again.
- A layer's file is written before its manifest's: a held manifest means a held layer.
"""

from __future__ import annotations

import os
import re
import secrets
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from wasmgate._compat import file_digest
from wasmgate.signing.state import atomic_write, fsync_dir

_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")


class PullCache:
    """The cache directory; every method blocks (the puller calls them on a thread)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._tmp = root / "tmp"
        self._tmp.mkdir(mode=0o700, parents=True, exist_ok=True)
        root.chmod(0o700)
        for leftover in self._tmp.iterdir():  # a download a crash or a kill cut short
            leftover.unlink(missing_ok=True)

    def path(self, digest: str) -> Path:
        """Where the bytes of ``sha256:<hex>`` live (ValueError for anything else)."""
        m = _DIGEST.fullmatch(digest)
        if m is None:
            raise ValueError(f"{digest[:80]!r} is not a sha256 digest")
        return self.root / m[1]

    def verified(self, digest: str) -> Path | None:
        """The file of ``digest`` if it is held and still hashes to it; else None (and a
        damaged file is deleted so that it is fetched again)."""
        path = self.path(digest)
        try:
            with path.open("rb") as f:
                actual = "sha256:" + file_digest(f, "sha256").hexdigest()
        except FileNotFoundError:
            return None
        if actual != digest:
            path.unlink(missing_ok=True)
            return None
        return path

    def put_bytes(self, digest: str, data: bytes) -> Path:
        """Keep small bytes (a manifest) that the caller checked hash to ``digest``."""
        path = self.path(digest)
        atomic_write(path, data)
        return path

    @contextmanager
    def writer(self, digest: str) -> Iterator[BinaryIO]:
        """A temporary file for the download of ``digest``: renamed into place when the
        block ends without an error (the caller has verified digest and size), else deleted.
        """
        final = self.path(digest)
        tmp = self._tmp / f"{secrets.token_hex(8)}.part"
        try:
            with tmp.open("xb") as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            tmp.replace(final)
        finally:
            tmp.unlink(missing_ok=True)
        fsync_dir(self.root)

    def prune_stale(self, max_age_s: float, keep: Iterable[str] = ()) -> list[str]:
        """Delete held files older than ``max_age_s`` (by write time) unless in ``keep``.

        Why by age: a pulled bundle is only needed until the store has installed it (or a
        restart resumes the document that wanted it), so the cache must not grow with every
        digest a long-lived gateway ever pulled; a day covers any resume."""
        cutoff = time.time() - max_age_s
        recent = [
            f"sha256:{e.name}"
            for e in self.root.iterdir()
            if e.is_file() and e.stat().st_mtime >= cutoff
        ]
        return self.prune([*keep, *recent])

    def prune(self, keep: Iterable[str]) -> list[str]:
        """Delete every held file whose digest is not in ``keep``; returns the deleted."""
        wanted = {self.path(d).name for d in keep}
        removed = []
        for entry in self.root.iterdir():
            if entry.is_file() and entry.name not in wanted:
                entry.unlink(missing_ok=True)
                removed.append(f"sha256:{entry.name}")
        return sorted(removed)
