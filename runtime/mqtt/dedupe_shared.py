"""Recently seen requests shared by every process of a gateway (``[workers] count`` > 1), so
a QoS 1 redelivery is answered once even when the broker hands it to another worker.

The workers share the gateway's request topics through an MQTT 5 shared subscription; a
worker that dies or loses its connection with requests unacknowledged gets them again, or
another worker does. `SharedRecent` is `RecentRequests`' contract over one small file that
the supervisor and its workers map: an open-addressed table of fixed-size slots (the
request's 32-byte dedupe key, its state, the pid working it, when it expires), each call
under ``flock`` (the kernel drops a dead process's lock). A key is claimed atomically: the
first process to claim it works it, a copy elsewhere waits (polling the slot) for the
answer and is then only acknowledged. A copy whose first worker died unanswered is not
acknowledged (the broker redelivers it, and the next claim works it), as in one process.

An answer kept in the store while the broker is away (`hold`) stays "answered" until the
supervisor delivered it (`delivered`), then for the window. A key lives in one bucket of
`_BUCKET` slots (chosen by its hash), so a lookup reads 8 slots however full the table
is (a linear probe of up to 128 slots cost ~0.4 ms a request once the window filled the
table, measured: 1.5x the CPU of a request); when the bucket is full its oldest answered
entry goes, and when all of it is being worked the request is worked without an entry
(not deduplicated).
"""

from __future__ import annotations

import asyncio
import fcntl
import math
import mmap
import os
import struct
import time
from pathlib import Path

from wasmgate.runtime.mqtt.dedupe import KEY_BYTES, NotAnswered
from wasmgate.runtime.ops.lock import flocked

__all__ = ["SharedRecent"]

_SLOT = struct.Struct(f"<{KEY_BYTES}sBxxxid")  # key, state, owner pid, expires (monotonic)
_EMPTY, _WORKING, _ANSWERED, _GONE = 0, 1, 2, 3
_BUCKET = 8
_POLL_S = 0.005
_HELD = math.inf


class SharedRecent:
    """This process's view of the gateway's dedupe table at ``path``."""

    def __init__(self, path: Path, window_s: float, max_entries: int) -> None:
        self._window_s = window_s
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # the first opener sizes it, the others map it
            size = os.fstat(fd).st_size
            if size == 0:
                size = _capacity(max_entries) * _SLOT.size
                os.ftruncate(fd, size)
            fcntl.flock(fd, fcntl.LOCK_UN)
            self._map = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._slots = size // _SLOT.size
        self._pid = os.getpid()

    def close(self) -> None:
        self._map.close()
        os.close(self._fd)

    def __len__(self) -> int:
        now = time.monotonic()
        with flocked(self._fd):
            return sum(1 for i in range(self._slots) if self._live(self._read(i), now))

    # -- the contract the bridge uses (`wasmgate.runtime.mqtt.dedupe.RecentRequests`) -------

    def claim(self, key: bytes) -> asyncio.Future[None] | None:
        """None when this process is the first to see ``key`` (it works the request and must
        then call `answered`, `hold` or `forget`); else a future done once the first copy
        was answered (`NotAnswered` when it was not)."""
        now = time.monotonic()
        with flocked(self._fd):
            found, free = self._find(key, now)
            if found is not None:
                _, state, owner, _ = self._read(found)
                if state == _ANSWERED:
                    return _done()
                if state == _WORKING and _alive(owner):
                    return asyncio.ensure_future(self._wait(found, key))
                free = found  # worked by a process that died: ours now
            if free is not None:
                self._write(free, key, _WORKING, self._pid, _HELD)
        return None

    def answered(self, key: bytes) -> None:
        self._settle(key, _ANSWERED, time.monotonic() + self._window_s)

    def hold(self, key: bytes) -> None:
        """The answer waits in the store: copies are only acknowledged until `delivered`
        (also for a key not claimed here: the supervisor's, for what a past process kept)."""
        self._put(key, _HELD)

    def delivered(self, key: bytes) -> None:
        """A stored answer reached the broker (the supervisor's drain): the window starts."""
        self._put(key, time.monotonic() + self._window_s)

    def forget(self, key: bytes, why: str) -> None:
        """The request was not answered: a redelivery must be worked again."""
        del why  # the waiting copies see `NotAnswered`; the worker logged the cause
        self._settle(key, _GONE, 0.0)

    # -- internals -------------------------------------------------------------------------

    def _put(self, key: bytes, expires: float) -> None:
        """``key`` answered until ``expires``, claimed here or not."""
        with flocked(self._fd):
            found, free = self._find(key, time.monotonic())
            at = found if found is not None else free
            if at is not None:
                self._write(at, key, _ANSWERED, self._pid, expires)

    def _settle(self, key: bytes, state: int, expires: float) -> None:
        with flocked(self._fd):
            found, _ = self._find(key, time.monotonic())
            if found is not None:
                self._write(found, key, state, self._pid, expires)

    async def _wait(self, slot: int, key: bytes) -> None:
        while True:
            await asyncio.sleep(_POLL_S)  # another process answers it: nothing to wait on
            with flocked(self._fd):
                found, state, owner, _ = self._read(slot)
            if found != key or state == _GONE or (state == _WORKING and not _alive(owner)):
                raise NotAnswered("the first copy was not answered")
            if state == _ANSWERED:
                return

    def _find(self, key: bytes, now: float) -> tuple[int | None, int | None]:
        """(the slot holding ``key`` live, or None; the slot a new entry goes to, or None).
        Only ``key``'s bucket is read: a full table costs as little as an empty one."""
        first = int.from_bytes(key[:8], "little") % (self._slots // _BUCKET) * _BUCKET
        view = self._map[first * _SLOT.size : (first + _BUCKET) * _SLOT.size]
        free: int | None = None
        oldest: tuple[float, int] | None = None
        for at, entry in enumerate(_SLOT.iter_unpack(view), first):
            if not self._live(entry, now):
                free = at if free is None else free
            elif entry[0] == key:
                return at, None
            elif entry[1] == _ANSWERED and (oldest is None or entry[3] < oldest[0]):
                oldest = (entry[3], at)
        if free is None and oldest is not None:
            free = oldest[1]  # the bucket is full: its oldest answered entry goes
        return None, free

    def _live(self, entry: tuple[bytes, int, int, float], now: float) -> bool:
        state, expires = entry[1], entry[3]
        return state == _WORKING or (state == _ANSWERED and expires > now)

    def _read(self, slot: int) -> tuple[bytes, int, int, float]:
        key, state, owner, expires = _SLOT.unpack_from(self._map, slot * _SLOT.size)
        return key, state, owner, expires

    def _write(self, slot: int, key: bytes, state: int, owner: int, expires: float) -> None:
        _SLOT.pack_into(self._map, slot * _SLOT.size, key, state, owner, expires)


def _capacity(max_entries: int) -> int:
    """Twice the entries, a power of two (whole buckets): room in most buckets."""
    return 1 << max(6, (2 * max_entries - 1).bit_length())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _done() -> asyncio.Future[None]:
    fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    fut.set_result(None)
    return fut
