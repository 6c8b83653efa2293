"""The cloud breaker's state, held for a whole gateway (``[workers] count`` > 1).

Kept per process, a gateway with N workers sent the cloud N times the failures that open
its breaker, half-opened N times after each ``reset_s`` with N probes, and a worker that
had never called the cloud went on sending while the others had given up: the breaker no
longer said what the gateway did. `SharedCell` keeps a breaker's fields (`BreakerFields`)
in one small file that the supervisor and every worker map, beside the gateway's slot
table in its private run directory: the state, when it opened (``time.monotonic()``:
CLOCK_MONOTONIC, one clock for every process of the machine), the consecutive failures,
the probes out and the last ``window`` outcomes, read and written under ``flock`` (the
kernel drops a dead process's lock) and a thread lock. Its cost, two ``flock`` calls, is
paid per cloud call, beside a network round trip.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

from wasmgate.runtime.cloud.breaker import BreakerFields, BreakerState
from wasmgate.runtime.ops.lock import flocked

__all__ = ["SharedCell"]

_HEAD = struct.Struct("<BdIII")  # state, opened_at, consecutive, probing, outcomes kept
_STATES = (BreakerState.CLOSED, BreakerState.HALF_OPEN, BreakerState.OPEN)


class SharedCell:
    """This process's view of the gateway's breaker file at ``path`` (``window`` outcomes;
    every process of a gateway has the same settings)."""

    def __init__(self, path: Path, window: int) -> None:
        self._size = _HEAD.size + window
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            with flocked(fd):  # the first opener sizes it (zeros: closed), the others map it
                if os.fstat(fd).st_size < self._size:
                    os.ftruncate(fd, self._size)
            self._map = mmap.mmap(fd, self._size)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            if not self._map.closed:
                self._map.close()
                os.close(self._fd)

    @contextlib.contextmanager
    def held(self) -> Iterator[BreakerFields]:
        """The fields, this process alone holding them until the block ends."""
        with self._lock, flocked(self._fd):
            fields = self._read()
            yield fields
            self._write(fields)

    def _read(self) -> BreakerFields:
        state, opened_at, consecutive, probing, kept = _HEAD.unpack_from(self._map, 0)
        kept = min(kept, self._size - _HEAD.size)
        raw = self._map[_HEAD.size : _HEAD.size + kept]
        return BreakerFields(
            _STATES[state] if state < len(_STATES) else BreakerState.CLOSED,
            opened_at, consecutive, probing, [b == 1 for b in raw],
        )  # fmt: skip

    def _write(self, f: BreakerFields) -> None:
        outcomes = bytes(1 if ok else 0 for ok in f.outcomes[-(self._size - _HEAD.size) :])
        state = _STATES.index(f.state)
        _HEAD.pack_into(self._map, 0, state, f.opened_at, f.consecutive, f.probing, len(outcomes))
        self._map[_HEAD.size : _HEAD.size + len(outcomes)] = outcomes
