"""What the status page and Triton's statistics show per adapter/model: a bounded history.

`Metrics.observe_request` feeds one `Recent` per name, under its lock; Prometheus has no
quantiles, so the p50/p99 here come from the last ``size`` answered requests.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Mapping

import msgspec


class NameStats(msgspec.Struct, frozen=True):
    """What the status page shows per adapter/model."""

    requests: int
    errors: int
    last_ms: float | None
    p50_ms: float | None
    p99_ms: float | None
    sources: Mapping[str, int]
    ok_seconds: float = 0.0
    """Summed latency of answered requests (Triton's ``success.ns``)."""
    error_seconds: float = 0.0
    stage_seconds: Mapping[str, float] = msgspec.field(default_factory=dict)
    """Summed ``timings`` per stage of answered requests."""
    last_unix_ms: int = 0


class Recent:
    """Bounded per-name request history for the status page (Prometheus has no quantiles)."""

    def __init__(self, size: int) -> None:
        self.latencies: deque[float] = deque(maxlen=size)
        self.requests = 0
        self.errors = 0
        self.sources: dict[str, int] = {}
        self.ok_seconds = 0.0
        self.error_seconds = 0.0
        self.stage_seconds: dict[str, float] = {}
        self.last_unix_ms = 0

    def add(
        self, seconds: float, source: str | None, error: str | None, timings: Mapping[str, float]
    ) -> None:
        self.requests += 1
        self.last_unix_ms = int(time.time() * 1000)
        if error is not None:
            self.errors += 1
            self.error_seconds += seconds
            return
        self.latencies.append(seconds)
        self.ok_seconds += seconds
        for stage, value in timings.items():
            self.stage_seconds[stage] = self.stage_seconds.get(stage, 0.0) + value
        if source is not None:
            self.sources[source] = self.sources.get(source, 0) + 1

    def stats(self) -> NameStats:
        ms = sorted(v * 1000 for v in self.latencies)
        return NameStats(
            requests=self.requests,
            errors=self.errors,
            last_ms=self.latencies[-1] * 1000 if self.latencies else None,
            p50_ms=statistics.median(ms) if ms else None,
            p99_ms=ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))] if ms else None,
            sources=dict(self.sources),
            ok_seconds=self.ok_seconds,
            error_seconds=self.error_seconds,
            stage_seconds=dict(self.stage_seconds),
            last_unix_ms=self.last_unix_ms,
        )
