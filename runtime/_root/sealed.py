"""Immutable copies of checked bytes that a native library can open by path.

A derivative is checked (a MAC) and then handed to a library that reads it itself (ONNX
Runtime opens a path). Checking one copy and handing over another would let the file change
in between, so the bytes are copied once into a sealed memfd and both the check and the
library read that: after ``F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`` no one,
not even this process, can change it. The copy from a cache file is made in the kernel
(``sendfile``), so a 17 MB graph never becomes a Python ``bytes`` object.

Where memfd is missing (another OS, a seccomp filter) a :class:`SealedFile` holds the bytes
themselves: Python ``bytes`` are as immutable, only without a path.
"""

from __future__ import annotations

import fcntl
import mmap
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType

from wasmgate._compat import Self

SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SEAL


def _memfd(name: str = "wasmgate-sealed") -> int | None:
    try:
        return os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    except (AttributeError, OSError):
        return None


def _write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    with memoryview(data) as view:
        written = 0
        while written < len(view):
            written += os.write(fd, view[written:])


def _copy_range(src: int, dst: int, offset: int, size: int) -> None:
    """``size`` bytes of ``src`` from ``offset`` onto ``dst``, in the kernel where it can."""
    done = 0
    while done < size:
        try:
            sent = os.sendfile(dst, src, offset + done, size - done)
        except OSError:  # a source sendfile cannot read: copy through user space
            _write_all(dst, os.pread(src, size - done, offset + done))
            return
        if sent == 0:
            raise OSError(f"source ended {size - done} bytes early")
        done += sent


def _seal(fd: int, size: int) -> None:
    if os.fstat(fd).st_size != size:
        raise OSError("sealed copy has the wrong size")
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)


def _check_sealed(fd: int) -> None:
    seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
    if seals & SEALS != SEALS:
        raise OSError(f"file is not sealed (seals {seals:#x}, needs {SEALS:#x})")


class SealedFile:
    """Bytes that cannot change any more, with a ``/proc/self/fd`` path when memfd exists."""

    def __init__(self, fd: int | None, data: bytes, size: int) -> None:
        """Use :meth:`from_bytes` or :meth:`copy_of`; this takes ownership of ``fd``."""
        self._fd = fd
        self._data = data
        self.size = size

    @classmethod
    def from_bytes(
        cls, data: bytes | bytearray | memoryview, name: str = "wasmgate-sealed"
    ) -> SealedFile:
        """``name`` shows in ``/proc/PID/maps`` and ``fd/`` as ``memfd:NAME``."""
        fd = _memfd(name)
        if fd is None:
            return cls(None, bytes(data), len(data))
        return cls._sealed(fd, lambda: _write_all(fd, data), len(data))

    @classmethod
    def copy_of(cls, src: int, offset: int, size: int) -> SealedFile:
        """``size`` bytes of the open file ``src`` from ``offset``; raises OSError if short."""
        fd = _memfd()
        if fd is None:
            data = os.pread(src, size, offset)
            if len(data) != size:
                raise OSError(f"source ended {size - len(data)} bytes early")
            return cls(None, data, size)
        return cls._sealed(fd, lambda: _copy_range(src, fd, offset, size), size)

    @classmethod
    def filled(cls, size: int, fill: Callable[[int], None], name: str) -> SealedFile:
        """A memfd of ``size`` bytes that ``fill(fd)`` writes in place (``os.pwrite``), then
        sealed: no buffer of the whole is ever made. OSError where memfd is missing."""
        fd = _memfd(name)
        if fd is None:
            raise OSError("memfd_create is not available")

        def sized() -> None:
            os.ftruncate(fd, size)
            fill(fd)

        return cls._sealed(fd, sized, size)

    @classmethod
    def adopt(cls, fd: int) -> SealedFile:
        """Own ``fd``, received from another process, only if it is sealed as this module
        seals: the seals, not a second check of the bytes, keep them the ones the sender
        checked. Raises OSError (and closes ``fd``) for any other file."""
        try:
            os.set_inheritable(fd, False)  # noqa: FBT003 - received ones come without CLOEXEC
            _check_sealed(fd)
            return cls(fd, b"", os.fstat(fd).st_size)
        except BaseException:
            os.close(fd)
            raise

    @property
    def fileno(self) -> int | None:
        """The memfd (still this object's to close), for sending to another process."""
        return self._fd

    @classmethod
    def _sealed(cls, fd: int, fill: Callable[[], None], size: int) -> SealedFile:
        try:
            fill()
            _seal(fd, size)
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, b"", size)

    @property
    def path(self) -> str | None:
        """A path a native library can open (each open is a new description of the same
        sealed file), or None where memfd is missing: then pass :attr:`data`."""
        return None if self._fd is None else f"/proc/self/fd/{self._fd}"

    @property
    def data(self) -> bytes:
        """The bytes, where there is no memfd (a copy is made otherwise: prefer :meth:`view`)."""
        if self._fd is None:
            return self._data
        return os.pread(self._fd, self.size, 0)

    @contextmanager
    def view(self) -> Iterator[memoryview]:
        """A read-only view of the bytes without copying them (a shared read-only map)."""
        if self._fd is None or self.size == 0:
            with memoryview(self._data) as view:
                yield view
            return
        with mmap.mmap(self._fd, self.size, prot=mmap.PROT_READ) as mapped:
            view = memoryview(mapped)
            try:
                yield view
            finally:
                view.release()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._data = b""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
