"""The ``.wgb`` container: a plain, uncompressed POSIX ustar archive, read strictly.

Layout: ``manifest.json``, then ``manifest.sig``, then each listed file, then the
two-zero-block end marker (plus zero padding up to one 10 KiB tar record). Any ``tar``
can list it; wasmgate reads it with its own small reader instead of ``tarfile`` so every
rule below is explicit.

Invariants of :class:`ArchiveReader`:
- Only regular-file members (typeflag ``0``/NUL) are accepted. Links, devices, FIFOs,
  directories, pax/GNU extension headers and sparse files are refused by type.
- Names must be plain (:data:`~wasmgate.signing.manifest.FILE_NAME_RE`): absolute paths,
  ``..`` components and subdirectories are refused. Names are never used as paths.
- Header checksums are verified; a member's declared size is checked against the size
  cap and against the bytes left in the archive *before* any of its data is read.
- Data is streamed in bounded chunks; a short read is a truncation. After the end
  marker only zero padding (at most one record) may follow.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

import msgspec

from wasmgate.signing.errors import (
    MalformedArchiveError,
    OversizeMemberError,
    TruncatedArchiveError,
    UnsafeMemberError,
)
from wasmgate.signing.manifest import FILE_NAME_RE

BLOCK = 512
RECORD = 20 * BLOCK
CHUNK = 1024 * 1024
_ZERO = bytes(BLOCK)
Chunk = bytes | memoryview
_NAME = re.compile(FILE_NAME_RE)
_TYPES = {
    b"1": "a hard link",
    b"2": "a symbolic link",
    b"3": "a character device",
    b"4": "a block device",
    b"5": "a directory",
    b"6": "a FIFO",
    b"7": "a contiguous file",
    b"x": "a pax extended header",
    b"g": "a pax global header",
    b"L": "a GNU long-name header",
    b"K": "a GNU long-link header",
    b"S": "a GNU sparse file",
}


class Member(msgspec.Struct, frozen=True):
    """One archive member: its (validated) name and declared data size."""

    name: str
    size: int


def _octal(field: bytes) -> int:
    if field[:1] and field[0] & 0x80:  # base-256 (GNU) encoding of large numbers
        return int.from_bytes(bytes([field[0] & 0x7F]) + field[1:], "big")
    text = field.split(b"\0", 1)[0].strip(b" ")
    if not text or not re.fullmatch(rb"[0-7]+", text):
        raise ValueError(f"bad octal field {field!r}")
    return int(text, 8)


def _checksum_ok(hdr: bytes) -> bool:
    try:
        stored = _octal(hdr[148:156])
    except ValueError:
        return False
    return stored == sum(hdr[:148]) + 8 * 32 + sum(hdr[156:])


def _split(size: int, chunk: int) -> list[int]:
    return [min(chunk, size - off) for off in range(0, size, chunk)]


def check_member_name(bundle: str, raw: str) -> str:
    """Return ``raw`` if it is a plain file name, else raise :class:`UnsafeMemberError`."""
    if raw.startswith("/"):
        raise UnsafeMemberError(bundle, f"member {raw!r}: absolute path")
    if ".." in raw.split("/"):
        raise UnsafeMemberError(bundle, f"member {raw!r}: path traversal ('..')")
    if "/" in raw:
        raise UnsafeMemberError(bundle, f"member {raw!r}: directories are not allowed")
    if not _NAME.fullmatch(raw):
        raise UnsafeMemberError(bundle, f"member {raw!r}: not a plain file name")
    return raw


class ArchiveReader:
    """Sequential, strict reader of a ``.wgb`` archive of known total length.

    The source is a file (positioned at 0) or a memoryview of immutable bytes. With a
    memoryview, chunks are zero-copy slices of it.
    """

    def __init__(
        self, src: io.BufferedIOBase | memoryview, total: int, bundle: str, max_member: int
    ) -> None:
        """Read ``total`` bytes from ``src``; ``bundle`` labels errors."""
        self._f = None if isinstance(src, memoryview) else src
        self._view = src if isinstance(src, memoryview) else None
        self._total = total
        self._bundle = bundle
        self._max_member = max_member
        self._pos = 0
        self._pending: Member | None = None

    def _take(self, n: int) -> Chunk:
        if self._view is not None:
            return self._view[self._pos : self._pos + n]
        if self._f is None:
            raise RuntimeError("reader has no source")
        return self._f.read(n)

    def _read(self, n: int, what: str) -> Chunk:
        data = self._take(n)
        if len(data) != n:
            raise TruncatedArchiveError(self._bundle, f"archive ends inside {what}")
        self._pos += n
        return data

    def _header(self) -> bytes | None:
        if self._pos == 0 and self._total == 0:
            raise MalformedArchiveError(self._bundle, "empty file")
        if self._total - self._pos < BLOCK:
            raise TruncatedArchiveError(self._bundle, "archive ends without an end marker")
        hdr = bytes(self._read(BLOCK, "a header"))
        if hdr == _ZERO:
            self._finish()
            return None
        if not _checksum_ok(hdr) or hdr[257:263] != b"ustar\0":
            what = "not a .wgb archive" if self._pos == BLOCK else "corrupt member header"
            raise MalformedArchiveError(self._bundle, f"{what} at offset {self._pos - BLOCK}")
        return hdr

    def _finish(self) -> None:
        if self._read(BLOCK, "the end marker") != _ZERO:
            raise MalformedArchiveError(self._bundle, "incomplete end-of-archive marker")
        rest = self._total - self._pos
        if rest > RECORD or bytes(self._take(rest)).count(0) != rest:
            raise MalformedArchiveError(self._bundle, "data after the end-of-archive marker")

    def next_member(self) -> Member | None:
        """Parse the next header and validate type, name and size; None at the end marker."""
        if self._pending is not None:
            raise RuntimeError("previous member's data was not consumed")
        hdr = self._header()
        if hdr is None:
            return None
        try:
            name = hdr[0:100].split(b"\0", 1)[0].decode("utf-8")
            prefix = hdr[345:500].split(b"\0", 1)[0].decode("utf-8")
        except UnicodeDecodeError as e:
            raise UnsafeMemberError(self._bundle, "member name is not UTF-8") from e
        full = f"{prefix}/{name}" if prefix else name
        kind = _TYPES.get(hdr[156:157])
        if kind is not None or hdr[156:157] not in (b"0", b"\0"):
            kind = kind or f"type {hdr[156:157]!r}"
            raise UnsafeMemberError(self._bundle, f"member {full!r}: {kind} is not allowed")
        check_member_name(self._bundle, full)
        try:
            size = _octal(hdr[124:136])
        except ValueError as e:
            raise MalformedArchiveError(self._bundle, f"member {full!r}: bad size field") from e
        self._check_size(full, size)
        self._pending = Member(full, size)
        return self._pending

    def _check_size(self, name: str, size: int) -> None:
        if size > self._max_member:
            raise OversizeMemberError(
                self._bundle, f"member {name!r} declares {size} bytes, cap is {self._max_member}"
            )
        left = self._total - self._pos
        if size > left:
            raise TruncatedArchiveError(
                self._bundle, f"member {name!r} declares {size} bytes, only {left} remain"
            )

    def chunks(self, chunk: int = CHUNK) -> Iterator[Chunk]:
        """Yield the pending member's data in chunks, then skip its padding.

        From a file, large members are read one chunk ahead on a helper thread into two
        reused buffers, so reading overlaps with what the caller does with the current
        chunk. A yielded chunk is valid only until the next one is requested.
        """
        member = self._pending
        if member is None:
            raise RuntimeError("no member pending")
        what = f"member {member.name!r}"
        sizes = _split(member.size, chunk)
        if self._f is None or len(sizes) <= 1:  # bytes: zero-copy slices
            yield from (self._read(n, what) for n in sizes)
        else:
            yield from self._read_ahead(self._f, sizes, what)
        pad = -member.size % BLOCK
        if pad:
            self._read(pad, f"{what} padding")
        self._pending = None

    def _read_ahead(self, f: io.BufferedIOBase, sizes: list[int], what: str) -> Iterator[Chunk]:
        bufs = [memoryview(bytearray(sizes[0])) for _ in range(2)]

        def fill(i: int) -> tuple[memoryview, int]:
            view = bufs[i % 2][: sizes[i]]
            return view, f.readinto(view)

        with ThreadPoolExecutor(1, thread_name_prefix="wasmgate-read") as pool:
            ahead = pool.submit(fill, 0)
            for i, n in enumerate(sizes):
                view, got = ahead.result()
                if got != n:
                    raise TruncatedArchiveError(self._bundle, f"archive ends inside {what}")
                self._pos += n
                if i + 1 < len(sizes):
                    # The caller is done with the buffer of chunk i-1: refill it.
                    ahead = pool.submit(fill, i + 1)
                yield view

    def read_all(self) -> bytes:
        """Return the pending member's whole data (for small members only)."""
        return b"".join(self.chunks())


def write_archive(out: BinaryIO, members: Iterable[tuple[str, bytes | Path]]) -> None:
    """Write a ``.wgb`` archive of ``(name, bytes or file path)`` in the given order.

    Headers are deterministic (mode 0644, uid/gid 0, mtime 0) so equal inputs give equal
    archives.
    """
    import tarfile  # noqa: PLC0415 - only bundle builders write archives, not the daemon

    with tarfile.open(fileobj=out, mode="w|", format=tarfile.USTAR_FORMAT) as tf:
        for name, src in members:
            info = tarfile.TarInfo(name)
            info.mode, info.mtime, info.uname, info.gname = 0o644, 0, "", ""
            if isinstance(src, bytes):
                info.size = len(src)
                tf.addfile(info, io.BytesIO(src))
            else:
                info.size = src.stat().st_size
                with src.open("rb") as f:
                    tf.addfile(info, f)
