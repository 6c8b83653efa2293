"""The status page's recent past: a bounded ring of samples of the daemon's own metrics.

Every ``interval_s`` (and when ``/v1/status`` finds the last sample too old) the app's
`History` reads `Metrics` — per adapter/model: request and error counters, answers from
the cloud, recent p50/p99; per model: batch sizes; per name: queue depth — and keeps the
last ``size`` samples (10 minutes by default). ``as_json()`` turns consecutive samples into
rates: requests/s, error and fallback percent, mean batch size per interval. One `History`
per app (``app[HISTORY]``, started and stopped by its cleanup context): nothing is global.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec
from aiohttp import web

from wasmgate.runtime.http.keys import METRICS
from wasmgate.runtime.ops.metrics import UNKNOWN_NAME, Metrics
from wasmgate.runtime.ops.tasks import background


class _Name(msgspec.Struct, frozen=True):
    kind: str
    requests: int
    errors: int
    cloud: int
    p50_ms: float | None
    p99_ms: float | None


class _Sample(msgspec.Struct, frozen=True):
    at: float
    names: dict[str, _Name]
    batches: dict[str, tuple[float, float]]  # model -> (sum, count), cumulative
    queues: dict[str, float]


def _families(metrics: Metrics) -> tuple[dict[str, tuple[float, float]], dict[str, float]]:
    """Batch-size histogram sums/counts per model and queue depth per name, read through
    prometheus-client's public ``collect()``."""
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    for family in metrics.batch.collect():
        for s in family.samples:
            if s.name.endswith("_sum"):
                sums[s.labels["model"]] = s.value
            elif s.name.endswith("_count"):
                counts[s.labels["model"]] = s.value
    queues = {s.labels["name"]: s.value for f in metrics.queue_depth.collect() for s in f.samples}
    return {m: (sums[m], counts.get(m, 0.0)) for m in sums}, queues


class History:
    """A ring of at most ``size`` samples taken ``interval_s`` apart."""

    def __init__(
        self,
        metrics: Metrics,
        interval_s: float = 5.0,
        size: int = 120,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval_s = interval_s
        self._metrics = metrics
        self._clock = clock
        # The first rate is measured from the moment the daemon started counting.
        self._samples: deque[_Sample] = deque([_Sample(clock(), {}, {}, {})], maxlen=size + 1)

    def due(self) -> bool:
        return len(self._samples) == 1 or self._clock() - self._samples[-1].at >= self.interval_s

    def sample(self) -> None:
        names = {
            name: _Name(
                kind, st.requests, st.errors, st.sources.get("cloud", 0), st.p50_ms, st.p99_ms
            )
            for (kind, name), st in self._metrics.snapshot().items()
            if name != UNKNOWN_NAME  # requests for names nobody installed: not a chart
        }
        batches, queues = _families(self._metrics)
        self._samples.append(_Sample(self._clock(), names, batches, queues))

    def as_json(self) -> dict[str, Any]:
        """``t``: seconds before now of each point; ``series``: name -> metric -> values
        (None where there is nothing to show, e.g. a rate over an interval without requests)."""
        now = self._clock()
        pairs = list(zip(list(self._samples)[:-1], list(self._samples)[1:], strict=True))
        names = sorted({n for _, cur in pairs for n in (*cur.names, *cur.batches, *cur.queues)})
        series = {name: _series(name, pairs) for name in names}
        return {
            "interval_s": self.interval_s,
            "t": [round(cur.at - now, 1) for _, cur in pairs],
            "series": series,
        }


def _pct(part: int, whole: int) -> float | None:
    return round(100 * part / whole, 2) if whole > 0 else None


def _series(name: str, pairs: list[tuple[_Sample, _Sample]]) -> dict[str, Any]:
    out: dict[str, list[float | None]] = {k: [] for k in (
        "rps", "p50_ms", "p99_ms", "error_pct", "fallback_pct", "batch", "queue")}  # fmt: skip
    kind = ""
    for prev, cur in pairs:
        zero = _Name("", 0, 0, 0, None, None)
        a, b = prev.names.get(name, zero), cur.names.get(name, zero)
        kind = b.kind or kind
        seconds = max(cur.at - prev.at, 1e-6)
        done = b.requests - a.requests
        out["rps"].append(round(done / seconds, 3))
        out["p50_ms"].append(b.p50_ms)
        out["p99_ms"].append(b.p99_ms)
        out["error_pct"].append(_pct(b.errors - a.errors, done))
        out["fallback_pct"].append(_pct(b.cloud - a.cloud, done))
        (s0, c0), (s1, c1) = prev.batches.get(name, (0.0, 0.0)), cur.batches.get(name, (0.0, 0.0))
        out["batch"].append(round((s1 - s0) / (c1 - c0), 2) if c1 > c0 else None)
        out["queue"].append(cur.queues.get(name))
    return {"kind": kind, **out}


HISTORY = web.AppKey("status_history", History)


async def history_ctx(app: web.Application) -> AsyncIterator[None]:
    """Own the app's `History`: sample on a timer while the app runs."""
    metrics = app.get(METRICS)
    if metrics is None:
        yield
        return
    history = app[HISTORY] = History(metrics)

    async def tick() -> None:
        while True:
            await asyncio.sleep(history.interval_s)
            history.sample()

    async with background(tick(), "status-history"):
        yield
