"""Where bundle bytes come from and where installed bytes go before the commit.

Invariants:
- The size cap is checked (``fstat`` / ``len``) before a single byte is read, and a path
  must name a regular file.
- Bytes sources are read zero-copy (``bytes`` are immutable). Files are read into private
  buffers, so the bytes that are hashed are exactly the bytes that are stored, whoever
  rewrites the file meanwhile; a staged chunk is written before its buffer is reused.
- Only the verify-only path (:func:`map_source`, nothing is stored) hashes a file through
  a read-only ``mmap``: a concurrent rewrite can at worst make verification fail, and a
  concurrent truncation can end the process with ``SIGBUS``; neither can put unverified
  bytes anywhere. No view of the mapping outlives the ``with`` block's results.
- A :class:`StagedFile` is created exclusively in the store's private ``tmp/``; it is
  flushed and ``fsync``-ed before it can be renamed into the blob store.
"""

from __future__ import annotations

import io
import mmap
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
    with _open_file(source, max_bytes) as opened:
        yield opened


@contextmanager
def map_source(
    source: bytes | Path, max_bytes: int
) -> Iterator[tuple[io.BufferedIOBase | memoryview, int, str]]:
    """Like :func:`open_source`, but a file is mapped read-only instead of read (no copy).

    For verification only: the mapped bytes can change under the reader, so they must
    never be stored (see the module invariants).
    """
    if isinstance(source, bytes | bytearray):
        with open_source(source, max_bytes) as opened:
            yield opened
        return
    with _open_file(source, max_bytes) as (f, size, label):
        if size == 0:  # mmap refuses empty files; the reader reports "empty file"
            yield memoryview(b""), 0, label
            return
        try:
            mapped = mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ)
        except OSError:  # a file system without mmap support: read it instead
            yield f, size, label
            return
        try:
            if _regular_size(f, label) < size:  # shrank since fstat: don't touch the pages
                raise MalformedArchiveError(label, "file shrank while being opened")
            with memoryview(mapped) as view:
                yield view, size, label
        finally:
            _unmap(mapped)


@contextmanager
def _open_file(path: Path, max_bytes: int) -> Iterator[tuple[io.BufferedIOBase, int, str]]:
    label = path.name
    try:
        f = path.open("rb")
    except OSError as e:
        raise MalformedArchiveError(label, f"cannot open ({e.strerror})") from e
    with f:
        size = _regular_size(f, label)
        _cap(label, size, max_bytes)
        yield f, size, label


def _unmap(mapped: mmap.mmap) -> None:
    try:
        mapped.close()
    except BufferError:
        # A chunk view is still referenced (e.g. by an exception's traceback); the mapping
        # is released with the last view.
        pass


def _regular_size(f: io.BufferedIOBase, label: str) -> int:
    st = os.fstat(f.fileno())
    if not stat.S_ISREG(st.st_mode):
        raise MalformedArchiveError(label, "not a regular file")
    return st.st_size


def _cap(label: str, size: int, max_bytes: int) -> None:
    if size > max_bytes:
        # Every caller passes the daemon's limits.max_bundle_bytes (the CLI its default).
        raise BundleTooLargeError(
            label, f"{size} bytes, cap is {max_bytes} (limits.max_bundle_bytes)"
        )


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
    records = state_dir / "records"
    for sub in (state_dir, state_dir / "blobs", records, records / "staged", state_dir / "tmp"):
        sub.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp_files = [
        *state_dir.glob(".*.tmp"),
        *records.glob(".*.tmp"),
        *records.glob("staged/.*.tmp"),
    ]
    for leftover in [*(state_dir / "tmp").iterdir(), *tmp_files]:
        leftover.unlink(missing_ok=True)


def place_blobs(blobs: list[StagedFile], blob_dir: Path) -> None:
    """Rename verified staging files to ``blob_dir/<sha256>`` and make that durable."""
    for staged in blobs:
        if staged.sha256 is None:
            raise RuntimeError("unverified staged file")
        staged.path.replace(blob_dir / staged.sha256)
    fsync_dir(blob_dir)
