"""One request's observation: the metrics series every transport reports the same way."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Literal

from wasmgate.runtime.errors import DaemonError, PayloadTooLarge
from wasmgate.runtime.ops.metrics import Kind, Metrics
from wasmgate.runtime.protocol.error_table import public_message, status_of
from wasmgate.runtime.served.api import Source

Transport = Literal["http", "grpc", "mqtt"]


def error_label(exc: BaseException) -> str:
    """The ``error`` label of a failed request: our error class, else what the transport's
    library said (an HTTP status), else ``InternalError`` (a bug: its name stays in logs)."""
    if isinstance(exc, DaemonError):
        return type(exc).__name__
    status = getattr(exc, "status", None)  # aiohttp's HTTPException, without importing it
    if status == 413:
        return PayloadTooLarge.__name__
    if isinstance(status, int) and 400 <= status < 600:
        return f"HTTP{status}"
    return "InternalError"


class Observation:
    """Times one request and reports it once to the daemon's `Metrics` (if any)."""

    __slots__ = ("_metrics", "_transport", "kind", "name", "start")

    def __init__(
        self, metrics: Metrics | None, transport: Transport, kind: Kind, name: str
    ) -> None:
        self._metrics = metrics
        self._transport: Transport = transport
        self.kind: Kind = kind
        self.name = name
        self.start = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def ok(self, source: Source, timings: Mapping[str, float]) -> None:
        if self._metrics is not None:
            self._metrics.observe_request(
                self.kind, self.name, source, timings,
                transport=self._transport, seconds=self.elapsed(),
            )  # fmt: skip

    def failed(self, exc: BaseException) -> None:
        if self._metrics is not None:
            self._metrics.observe_request(
                self.kind, self.name, None, {}, error_label(exc),
                transport=self._transport, seconds=self.elapsed(),
            )  # fmt: skip
            status, code, message = answer_of(exc)
            self._metrics.failures.add(
                self._transport, self.kind, self.name, status=status, code=code, message=message
            )


def answer_of(exc: BaseException) -> tuple[int, str, str]:
    """Status, code and message the client was answered for ``exc`` (the one table; an
    aiohttp HTTP exception keeps its own status, as `wasmgate.runtime.http.errors` answers)."""
    status = getattr(exc, "status", None)  # aiohttp's HTTPException, without importing it
    if not isinstance(exc, DaemonError) and isinstance(status, int) and 400 <= status < 600:
        return status, f"http_{status}", str(getattr(exc, "text", "") or exc)
    answer = status_of(exc)
    return answer.status, answer.code, public_message(exc, answer)
