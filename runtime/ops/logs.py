"""Structured logging to stderr, plain or JSON lines (journald keeps either).

Much of what is logged is chosen by others: guest log lines and error messages, fallback
reasons, MQTT topics, HTTP paths. In the plain format a newline in such text would start a
forged journal line, so control characters in the message and the ``key=value`` extras are
escaped (``\n``, ``\x1b``, ...). Only a traceback, our own text, spans lines. JSON lines
are escaped by JSON itself.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal

from wasmgate.runtime.ops.throttle_shared import SharedThrottle

_ESCAPES: dict[int, str] = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, 0x85)}
_ESCAPES |= {0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t", 0x2028: "\\u2028", 0x2029: "\\u2029"}


def one_line(text: str) -> str:
    """``text`` with every control character escaped: it cannot span or rewrite lines."""
    return text.translate(_ESCAPES)


_RESERVED = frozenset(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _RESERVED}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg plus any ``extra=`` fields."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": round(record.created, 6),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        doc.update(_extras(record))
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


def plain_value(value: Any) -> str:
    """A ``key=value`` value for a person: lists comma-separated, ``true``/``false``,
    ``none`` (also for an empty list); never a Python repr (``['a']``,
    ``('127.0.0.1', 8080)``, ``{'k': …}``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    if isinstance(value, (list, tuple, set, frozenset, dict)) and not value:
        return "none"
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=str) if isinstance(value, (set, frozenset)) else value
        return ",".join(plain_value(v) for v in items)
    if isinstance(value, dict):
        return ",".join(f"{k}:{plain_value(v)}" for k, v in value.items())
    return str(value)


class PlainFormatter(logging.Formatter):
    """``time level logger: message key=value ...`` (values as `plain_value` writes them)."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(record.created))
        extras = " ".join(f"{k}={one_line(plain_value(v))}" for k, v in _extras(record).items())
        line = f"{stamp} {record.levelname:<7} {record.name}: {one_line(record.getMessage())}"
        if extras:
            line = f"{line} {extras}"
        if record.exc_info:
            line = f"{line}\n{self.formatException(record.exc_info)}"
        return line


class Throttled:
    """At most one warning per ``every_s`` for each key; the next one carries
    ``suppressed=N``, how many were left out meanwhile.

    For a condition that repeats on every request while it lasts (the cloud away, its
    circuit breaker open): logged per request, an hour-long outage at a few hundred requests
    per second writes a million identical journal lines. Keys are few (adapter names)."""

    def __init__(
        self,
        log: logging.Logger,
        every_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log, self._every_s, self._clock = log, every_s, clock
        self._next: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}
        self._shared: SharedThrottle | None = None

    def share(self, shared: SharedThrottle) -> None:
        """Decide with the other processes of the gateway: one line per period and key for
        the whole gateway (`wasmgate.runtime.ops.throttle_shared`), not one per process."""
        self._shared = shared

    def warning(self, key: str, msg: str, extra: Mapping[str, Any]) -> None:
        now = self._clock()
        if self._shared is not None:
            shared = self._shared.admit(key, now, self._every_s)
            if shared is not None:
                self._log.warning(msg, extra={**extra, "suppressed": shared} if shared else extra)
            return
        if now < self._next.get(key, now):
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return
        self._next[key] = now + self._every_s
        suppressed = self._suppressed.pop(key, 0)
        self._log.warning(msg, extra={**extra, "suppressed": suppressed} if suppressed else extra)


def setup_logging(fmt: Literal["plain", "json"], level: str) -> None:
    """Send every log record to stderr in the chosen format (idempotent)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else PlainFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
