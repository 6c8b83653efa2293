"""Where bundle bytes come from and where installed bytes go before the commit.

Invariants:
- The size cap is checked (``fstat`` / ``len``) before a single byte is read, and a path
  must name a regular file.
- Bytes sources are read zero-copy (``bytes`` are immutable). Files are read into private
  buffers, so the bytes that are hashed are exactly the bytes that are stored, whoever
  rewrites the file meanwhile; a staged chunk is written before its buffer is reused.
- A :class:`StagedFile` is created exclusively in the store's private ``tmp/``; it is
  flushed and ``fsync``-ed before it can be renamed into the blob store.
"""

from __future__ import annotations

import io
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from wasmgate.signing.archive import Chunk
from wasmgate.signing.errors import BundleTooLargeError, MalformedArchiveError
from wasmgate.signing.state import fsync_dir


@contextmanager
def open_source(
    source: bytes | Path, max_bytes: int
) -> Iterator[tuple[io.BufferedIOBase | memoryview, int, str]]:
    """Open a bundle (path or bytes) after the size cap; yields (source, size, label).

    Bytes are read zero-copy (a view of an immutable ``bytes``). A file is read into
    private buffers, so what is hashed is exactly what is stored even if someone rewrites
    the file meanwhile.
    """
    if isinstance(source, bytes | bytearray):
        label = "<upload>"
        _cap(label, len(source), max_bytes)
        yield memoryview(bytes(source)), len(source), label
        return
    label = source.name
    try:
        f = source.open("rb")
    except OSError as e:
        raise MalformedArchiveError(label, f"cannot open ({e.strerror})") from e
    with f:
        size = _regular_size(f, label)
        _cap(label, size, max_bytes)
        yield f, size, label


def _regular_size(f: io.BufferedIOBase, label: str) -> int:
    st = os.fstat(f.fileno())
    if not stat.S_ISREG(st.st_mode):
        raise MalformedArchiveError(label, "not a regular file")
    return st.st_size


def _cap(label: str, size: int, max_bytes: int) -> None:
    if size > max_bytes:
        raise BundleTooLargeError(label, f"{size} bytes, cap is {max_bytes}")


class StagedFile:
    """Copies one member into ``tmp/`` on a writer thread while the caller hashes it."""

    def __init__(self, tmp_dir: Path, pool: ThreadPoolExecutor, staged: list[Path]) -> None:
        self.path = tmp_dir / f"{secrets.token_hex(8)}.part"
        staged.append(self.path)
        self._f: BinaryIO = self.path.open("xb")
        self._pool = pool
        self._pending: Future[object] | None = None
        self.sha256: str | None = None

    def write(self, chunk: Chunk) -> Callable[[], None]:
        """Write ``chunk`` on the writer thread; the returned function waits for it."""
        self._pending = self._pool.submit(self._f.write, chunk)
        return self._wait

    def _wait(self) -> None:
        if self._pending is not None:
            self._pending.result()
            self._pending = None

    def finish(self, sha256: str) -> None:
        """The member verified: make it durable and remember its digest."""
        self.close()
        self.sha256 = sha256

    def close(self) -> None:
        """Wait for the last write, then flush, fsync and close (idempotent).

        The file is closed even when a write failed (e.g. ENOSPC): an open descriptor on
        the unlinked staging file would keep its disk space until the daemon exits.
        """
        try:
            self._wait()
            if not self._f.closed:
                self._f.flush()
                os.fsync(self._f.fileno())
        finally:
            self._f.close()


def close_all(files: list[StagedFile]) -> None:
    """Close every staged file, then raise the first error, if any."""
    first: OSError | None = None
    for f in files:
        try:
            f.close()
        except OSError as e:
            first = first or e
    if first is not None:
        raise first


def prepare_store_dirs(state_dir: Path) -> None:
    """Create the store's private directories; delete what a crash left uncommitted."""
    for sub in (state_dir, state_dir / "blobs", state_dir / "records", state_dir / "tmp"):
        sub.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp_files = [*state_dir.glob(".*.tmp"), *state_dir.glob("records/.*.tmp")]
    for leftover in [*(state_dir / "tmp").iterdir(), *tmp_files]:
        leftover.unlink(missing_ok=True)


def place_blobs(blobs: list[StagedFile], blob_dir: Path) -> None:
    """Rename verified staging files to ``blob_dir/<sha256>`` and make that durable."""
    for staged in blobs:
        if staged.sha256 is None:
            raise RuntimeError("unverified staged file")
        staged.path.replace(blob_dir / staged.sha256)
    fsync_dir(blob_dir)
