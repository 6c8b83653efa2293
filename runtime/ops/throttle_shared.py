"""The rate limits of repeated log lines, held for a whole gateway (``[workers] count`` > 1).

`wasmgate.runtime.ops.logs.Throttled` writes a repeating warning (a client's 4xx answers,
once a minute per transport and status) at most once per period and key. Kept per process,
a gateway with N workers wrote it up to N times a period, each line's ``suppressed=`` only
that process's share: the journal no longer said what the gateway did. `SharedThrottle`
keeps the decision in one small file that the supervisor and every worker map (beside the
gateway's slot table, in its private run directory): a row per key (an 8-byte digest),
when the key may be logged next (``time.monotonic()``: CLOCK_MONOTONIC, one clock for every
process of the machine) and how many lines were left out meanwhile, read and written under
``flock`` (the kernel drops a dead process's lock) and a thread lock (a process's transports
log from several threads, and ``flock`` does not tell threads of one process apart).
Only lines that repeat reach it, so its cost (two ``flock`` calls) is paid per logged
failure, never per request served.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import struct
import threading
from pathlib import Path

from wasmgate.runtime.ops.lock import flocked

__all__ = ["SharedThrottle"]

ROWS = 256
"""Keys are few (a transport and a status, an adapter name); a full table logs per process."""
_ROW = struct.Struct("<8sdQ")  # key digest, next allowed (monotonic s), suppressed
_EMPTY = b"\0" * 8


class SharedThrottle:
    """This process's view of the gateway's throttle table at ``path``."""

    def __init__(self, path: Path) -> None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            with flocked(fd):  # the first opener sizes it, the others map it
                if os.fstat(fd).st_size < ROWS * _ROW.size:
                    os.ftruncate(fd, ROWS * _ROW.size)
            self._map = mmap.mmap(fd, ROWS * _ROW.size)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._lock = threading.Lock()
        self._closed = False

    def close(self) -> None:
        """Unmap; a line offered later (a thread still ending) is logged."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._map.close()
                os.close(self._fd)

    def admit(self, key: str, now: float, every_s: float) -> int | None:
        """None: ``key`` was logged by some process of the gateway less than ``every_s``
        ago (counted as suppressed). Else the line is this caller's to write: how many were
        suppressed since the last one (the count starts again at 0)."""
        digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
        with self._lock:
            return 0 if self._closed else self._admit(digest, now, every_s)

    def _admit(self, digest: bytes, now: float, every_s: float) -> int | None:
        with flocked(self._fd):
            at = self._row(digest)
            if at is None:
                return 0  # table full: logged as one process would
            _, next_at, suppressed = _ROW.unpack_from(self._map, at)
            if now < next_at:
                _ROW.pack_into(self._map, at, digest, next_at, suppressed + 1)
                return None
            _ROW.pack_into(self._map, at, digest, now + every_s, 0)
            return int(suppressed)

    def _row(self, digest: bytes) -> int | None:
        """The offset of ``digest``'s row, claimed on first use (open addressing)."""
        start = int.from_bytes(digest, "little") % ROWS
        for step in range(ROWS):
            at = (start + step) % ROWS * _ROW.size
            found = self._map[at : at + 8]
            if found == _EMPTY:
                _ROW.pack_into(self._map, at, digest, 0.0, 0)
                return at
            if found == digest:
                return at
        return None
