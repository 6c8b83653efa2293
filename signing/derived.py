"""Caches of derived artifacts, never trusted more than the verified bytes they came from.

A derivative (a compiled wasm module, an ONNX Runtime optimized graph) is loaded instead of
recomputing it from a verified blob, so it must be exactly what this daemon derived from
that blob with those options. Each entry is stored as ``MAGIC + tag + data`` where
``tag = HMAC-SHA256(key, source digest, options, data)`` and ``key`` is 32 random bytes in
``<folder>/.key`` (mode 0600), created on first use: only the daemon's user can produce a
valid tag, so an edited entry (and any rewritten checksum beside it) is refused.

Invariants:
- The folder is 0700 and owned by us (:func:`private_dir`); entries and the key are 0600.
- :meth:`DerivedCache.load` returns bytes only if the tag matches the caller's source digest
  and options; otherwise it logs the refusal, deletes the entry and returns None, and the
  caller rebuilds from verified bytes (and stores the result again).
- :meth:`DerivedCache.load_sealed` checks the tag over a sealed in-memory copy
  (:mod:`wasmgate.sealed`) and returns that copy: what was checked is what the
  caller's library reads, even if the cache file changes a moment later.
- Writes are atomic (temp file + rename): a torn write is a refused entry, never a mix.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from wasmgate.sealed import SealedFile
from wasmgate.signing.errors import StoreIOError

log = logging.getLogger("wasmgate.cache")
T = TypeVar("T")

MAGIC = b"WGDERIV1"
KEY_FILE = ".key"
_KEY_BYTES = 32
_TAG_BYTES = 32
_HEAD = len(MAGIC) + _TAG_BYTES


def private_dir(path: Path) -> None:
    """Create ``path`` 0700; refuse one owned by another user, tighten a group/world one."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.stat()
    if st.st_uid != os.getuid():
        raise StoreIOError(f"cache directory {path} is not owned by this user")
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        path.chmod(0o700)


def _load_key(path: Path) -> bytes:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        key = path.read_bytes()
        if len(key) == _KEY_BYTES and not path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            return key
        log.warning("cache key %s unusable (size or mode): a new key invalidates the cache", path)
        path.unlink()
        return _load_key(path)
    key = secrets.token_bytes(_KEY_BYTES)
    with os.fdopen(fd, "wb") as f:
        f.write(key)
    return key


def _pread(fd: int, offset: int, size: int) -> bytes:
    # One read of the body alone: slicing a whole-file read copied it (a 17 MB graph:
    # ~5 ms and 17 MB more at the peak).
    data = os.pread(fd, size, offset)
    if len(data) != size:
        raise OSError(f"entry ended {size - len(data)} bytes early")
    return data


def _read(path: Path, body: Callable[[int, int, int], T]) -> tuple[bytes, T] | None:
    """Header and ``body(fd, offset, size)`` of the regular file ``path``; None if it is
    not one or is shorter than a header."""
    # O_NONBLOCK: a FIFO planted here must not hang the start (regular files ignore it).
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size < _HEAD:
            return None
        return os.pread(fd, _HEAD, 0), body(fd, _HEAD, st.st_size - _HEAD)
    finally:
        os.close(fd)


class DerivedCache:
    """One private folder of derived artifacts, each bound to its source digest and options."""

    def __init__(self, folder: Path) -> None:
        """Use (creating) ``folder``; raises :class:`StoreIOError` if it is not ours."""
        self.folder = folder
        try:
            private_dir(folder)
            self._key = _load_key(folder / KEY_FILE)
        except OSError as e:
            raise StoreIOError(f"cache directory {folder}: {e}") from e

    def _tag(self, source_digest: str, options: str, data: bytes | bytearray | memoryview) -> bytes:
        mac = hmac.new(self._key, digestmod=hashlib.sha256)
        for part in (source_digest.encode(), options.encode()):
            mac.update(len(part).to_bytes(8, "big") + part)
        mac.update(data)
        return mac.digest()

    def load(self, name: str, source_digest: str, options: str) -> bytes | None:
        """The entry ``name`` if this daemon stored it for exactly this source and options."""
        path = self.folder / name
        try:
            found = _read(path, _pread)
        except FileNotFoundError:
            return None
        except OSError as e:
            log.warning("cache entry %s unreadable (%s): rebuilding it", path, e)
            return None
        if found is not None and self._genuine(found[0], source_digest, options, found[1]):
            return found[1]
        self._refuse(path, source_digest)
        return None

    def load_sealed(self, name: str, source_digest: str, options: str) -> SealedFile | None:
        """As :meth:`load`, as a sealed copy: the tag is checked over the very bytes returned.

        The copy is made in the kernel from the file, so no Python ``bytes`` of the entry
        exist; the caller closes the result."""
        path = self.folder / name
        try:
            found = _read(path, SealedFile.copy_of)
        except FileNotFoundError:
            return None
        except OSError as e:
            log.warning("cache entry %s unreadable (%s): rebuilding it", path, e)
            return None
        if found is not None:
            head, body = found
            with body.view() as data:
                good = self._genuine(head, source_digest, options, data)
            if good:
                return body
            body.close()
        self._refuse(path, source_digest)
        return None

    def _genuine(
        self, head: bytes, source_digest: str, options: str, data: bytes | memoryview
    ) -> bool:
        tag = head[len(MAGIC) :]
        return head[: len(MAGIC)] == MAGIC and hmac.compare_digest(
            tag, self._tag(source_digest, options, data)
        )

    def _refuse(self, path: Path, source_digest: str) -> None:
        log.warning(
            "cache entry %s refused: not what this daemon derived from source %s with these "
            "options (edited, torn or foreign); rebuilding it from the verified source",
            path, source_digest[:16],
        )  # fmt: skip
        try:
            path.unlink(missing_ok=True)
        except OSError as e:  # a directory planted under the name: the store replaces nothing
            log.warning("cannot remove refused cache entry %s: %s", path, e)

    def store(self, name: str, source_digest: str, options: str, data: bytes | bytearray) -> None:
        """Write entry ``name`` atomically; a failure is logged (it only costs a rebuild)."""
        path = self.folder / name
        tmp = path.with_name(f".{name}.{secrets.token_hex(6)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(MAGIC + self._tag(source_digest, options, data))
                f.write(data)
            tmp.replace(path)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            log.warning("could not save cache entry %s: %s", path, e)
