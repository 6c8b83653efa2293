"""The recent failed requests: what ``/v1/status`` and the status page list, and the
throttled log line of a client's mistake.

A failed request used to leave only a counter: its status and message went to the client
alone (4xx were never logged), so an operator could not tell why a device's requests fail.
`RecentFailures` keeps the last ``size`` failures of every transport, newest last, each
with what the client was answered (status, code, message), the transport, the adapter or
model name and the time, and never any byte of the request's payload: a message is the
answer's text, the name is the one the request addressed.

Bounds (a flood of bad requests must cost nothing but a counter): the list holds ``size``
entries, a message at most `MAX_MESSAGE` characters and a name `MAX_NAME`, both on one line.
4xx answers are logged (``wasmgate.requests``, the logger 5xx go to) at most once a minute
per transport and status, the next line carrying ``suppressed=N``; 5xx are logged where
they are answered (``error_table.log_failure``), so they are only listed here.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import msgspec

from wasmgate.runtime.ops.logs import Throttled
from wasmgate.runtime.ops.throttle_shared import SharedThrottle

MAX_MESSAGE = 300
MAX_NAME = 80
DEFAULT_SIZE = 50

log = logging.getLogger("wasmgate.requests")


class Failure(msgspec.Struct, frozen=True):
    """One failed request as the operator sees it."""

    at: float
    """POSIX seconds."""
    transport: str
    kind: str
    name: str
    status: int
    code: str
    message: str


def clip(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters with the count of the rest."""
    line = " ".join(text.split())
    if len(line) <= limit:
        return line
    return f"{line[:limit]}… ({len(line) - limit} more characters)"


class RecentFailures:
    """The last ``size`` failures (thread-safe: transports answer on several threads)."""

    def __init__(
        self,
        size: int = DEFAULT_SIZE,
        *,
        every_s: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._items: deque[Failure] = deque(maxlen=size)
        self._total = 0
        self._lock = threading.Lock()
        self._clock = clock
        self._log = Throttled(log, every_s)

    def share_log_limit(self, shared: SharedThrottle) -> None:
        """Log a client error once a minute per transport and status for the whole gateway
        (its workers and supervisor), not per process."""
        self._log.share(shared)

    def add(
        self, transport: str, kind: str, name: str, *, status: int, code: str, message: str
    ) -> None:
        """Keep one failure; a client error (4xx) is also logged, at a bounded rate."""
        failure = Failure(
            self._clock(), transport, kind, clip(name, MAX_NAME), status, code,
            clip(message, MAX_MESSAGE),
        )  # fmt: skip
        with self._lock:
            self._items.append(failure)
            self._total += 1
        if 400 <= status < 500:
            # keyed by transport and status only: a name is the client's, unbounded
            line = f"{transport} {kind} {failure.name} -> {status} {code}: {failure.message}"
            fields = {"transport": transport, "status": status, "code": code}
            self._log.warning(f"{transport} {status}", line, fields)

    def as_json(self) -> dict[str, Any]:
        """``{"total": N, "recent": [failure, ...]}``, newest last."""
        with self._lock:
            items, total = list(self._items), self._total
        return {"total": total, "recent": [msgspec.structs.asdict(f) for f in items]}
