"""One registered system shared-memory region: a POSIX shm object mapped once, checked at use.

The object is opened under ``/dev/shm`` by its POSIX name only (``/name`` or ``name``; no
directory, no ``..``, no symbolic link: ``O_NOFOLLOW``), must be a regular file, and is
mapped whole-page-aligned around ``[offset, offset + byte_size)`` once, at register. Every
request then gets a view of the mapping (read-only for inputs) without a copy.

The owner of the object can shrink it (``ftruncate``) or remove it (``shm_unlink``) while
it is registered. Touching a mapped page past the new end of a shrunk object raises SIGBUS,
which would kill the daemon; so every use first ``fstat``s the kept descriptor and refuses
a region whose object is now smaller than what was registered, or has no name any more
(removed: the client would be writing into a dead copy). What this cannot stop is a shrink
*during* a model's run on the region: that is the region owner's own request, and a client
that may register regions is trusted not to do it (docs/shared-memory.md).
"""

from __future__ import annotations

import errno
import mmap
import os
import re
import stat
import threading

from wasmgate.runtime.errors import BadRequest

SHM_DIR = "/dev/shm"  # noqa: S108 - where Linux keeps POSIX shared memory (glibc's shm_open)
_NAME = re.compile(r"[A-Za-z0-9_.:@+-]{1,255}\Z")
"""Safe characters for a POSIX shm name (no ``/``: one object, never a path)."""


def object_name(key: str) -> str:
    """The file name under ``/dev/shm`` of a POSIX shm key, else BadRequest."""
    bare = key.removeprefix("/")
    if not _NAME.match(bare) or bare in {".", ".."}:
        raise BadRequest(
            f"shared memory key {key[:80]!r} is not a POSIX shared memory name "
            "('/name': letters, digits, '_.:@+-', at most 255, no other '/')"
        )
    return bare


class Region:
    """A mapped region; `use` leases it to a request, `close` waits for the last lease."""

    def __init__(self, name: str, key: str, offset: int, byte_size: int) -> None:
        self.name, self.key, self.offset, self.byte_size = name, key, offset, byte_size
        self._fd, self.writable = _open(key)
        try:
            self._map, self._start = self._mapped()
        except BaseException:
            os.close(self._fd)
            raise
        self._lock = threading.Lock()
        self._leases = 0
        self._closing = False

    def _mapped(self) -> tuple[mmap.mmap, int]:
        size = os.fstat(self._fd).st_size
        end = self.offset + self.byte_size
        if self.byte_size <= 0 or self.offset < 0 or end > size:
            raise BadRequest(
                f"shared memory region {self.name!r}: offset {self.offset} + byte_size "
                f"{self.byte_size} is outside the object {self.key!r} of {size} bytes"
            )
        start = self.offset - self.offset % mmap.ALLOCATIONGRANULARITY
        access = mmap.ACCESS_WRITE if self.writable else mmap.ACCESS_READ
        return mmap.mmap(self._fd, end - start, offset=start, access=access), start

    def view(self, offset: int, size: int, *, write: bool = False) -> memoryview:
        """Bytes ``[offset, offset + size)`` of the region (checked first: see the module)."""
        if offset < 0 or size < 0 or offset + size > self.byte_size:
            raise BadRequest(
                f"shared memory region {self.name!r}: offset {offset} + byte_size {size} "
                f"is outside the region of {self.byte_size} bytes"
            )
        if write and not self.writable:
            raise BadRequest(f"shared memory region {self.name!r} is read-only to the daemon")
        self.check()
        begin = self.offset - self._start + offset
        whole = memoryview(self._map)[begin : begin + size]
        return whole if write else whole.toreadonly()

    def check(self) -> None:
        """Refuse the region when its object shrank under it or was removed (unlinked)."""
        try:
            st = os.fstat(self._fd)
        except OSError as e:  # closed under us: the region was unregistered
            raise BadRequest(f"shared memory region {self.name!r} is not registered") from e
        if st.st_nlink == 0:
            raise BadRequest(
                f"shared memory region {self.name!r}: its object {self.key!r} was removed "
                "by its owner; unregister the region"
            )
        if st.st_size < self.offset + self.byte_size:
            raise BadRequest(
                f"shared memory region {self.name!r}: its object {self.key!r} shrank to "
                f"{st.st_size} bytes under the registered {self.offset + self.byte_size}; "
                "unregister the region"
            )

    def lease(self) -> None:
        with self._lock:
            if self._closing:
                raise BadRequest(f"shared memory region {self.name!r} is not registered")
            self._leases += 1

    def release(self) -> None:
        with self._lock:
            self._leases -= 1
            last = self._closing and self._leases == 0
        if last:
            self._unmap()

    def close(self) -> None:
        """Forget the region: unmapped now, or when the last request using it ends."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
            idle = self._leases == 0
        if idle:
            self._unmap()

    def _unmap(self) -> None:
        try:
            self._map.close()
        except BufferError:
            pass  # an array still views it: the mapping goes with the last view
        os.close(self._fd)

    def status(self) -> dict[str, object]:
        return {
            "name": self.name,
            "key": self.key,
            "offset": self.offset,
            "byte_size": self.byte_size,
        }


def _open(key: str) -> tuple[int, bool]:
    """The object's descriptor, and whether it is writable (else inputs only)."""
    path = f"{SHM_DIR}/{object_name(key)}"
    # O_NONBLOCK: a FIFO someone put under /dev/shm must not hang the open.
    flags = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK
    writable = True
    try:
        fd = os.open(path, os.O_RDWR | flags)
    except PermissionError:
        fd, writable = _open_read_only(path, flags, key), False
    except OSError as e:
        raise BadRequest(_open_error(key, e)) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise BadRequest(f"shared memory key {key!r} is not a shared memory object")
    return fd, writable


def _open_read_only(path: str, flags: int, key: str) -> int:
    try:
        return os.open(path, os.O_RDONLY | flags)
    except OSError as e:
        raise BadRequest(_open_error(key, e)) from None


def _open_error(key: str, e: OSError) -> str:
    if e.errno == errno.ENOENT:
        return f"shared memory key {key!r}: no such shared memory object"
    if e.errno == errno.ELOOP:
        return f"shared memory key {key!r} is a symbolic link, refused"
    return f"shared memory key {key!r}: cannot open: {e.strerror}"
