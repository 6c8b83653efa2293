"""The four per-request metric families, counted in plain numbers and built when scraped.

``wasmgate_requests_total``, ``wasmgate_request_errors_total``,
``wasmgate_request_duration_seconds`` and ``wasmgate_stage_duration_seconds`` change on
every request. Through prometheus-client's own metric objects one request cost ~13 µs: a
lock per counter and per histogram sum and bucket, and a child lookup per family — as much
as the whole inference of a tiny model. Here a request takes one lock and updates a few
lists (`bisect` picks the bucket); `RequestFamilies.collect` turns them into the same
families (cumulative buckets, ``+Inf``, ``_sum``, ``_count``) that prometheus-client would
have exposed, through its public `Collector` interface.
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

Labels = tuple[str, ...]


@dataclass
class _Histogram:
    """Per-bucket (not cumulative) counts, the last one ``+Inf``, and the sum."""

    counts: list[int]
    total: float = 0.0


@dataclass
class _Count:
    value: int = 0
    created: float = field(default_factory=time.time)


class RequestFamilies(Collector):
    """Counts requests and their latencies; thread-safe (one lock per request)."""

    def __init__(self, buckets: Sequence[float], stages: Sequence[str]) -> None:
        self._bounds = tuple(buckets)
        self._stages = frozenset(stages)
        self._lock = threading.Lock()
        self._requests: dict[Labels, _Count] = {}  # transport, kind, name, source
        self._errors: dict[Labels, _Count] = {}  # transport, kind, name, error
        self._latency: dict[Labels, _Histogram] = {}  # transport, kind, name
        self._stage: dict[Labels, _Histogram] = {}  # kind, name, stage

    def answered(
        self, series: tuple[str, str, str], source: str, total: float,
        timings: Mapping[str, float],
    ) -> None:  # fmt: skip
        """One answered request of ``series`` (transport, kind, name): its source,
        end-to-end seconds and stage timings."""
        transport, kind, name = series
        with self._lock:
            self._count(self._requests, (transport, kind, name, source))
            self._observe(self._latency, series, total)
            stages, table = self._stages, self._stage
            for stage, value in timings.items():
                if stage in stages:
                    self._observe(table, (kind, name, stage), value)

    def _observe(self, table: dict[Labels, _Histogram], labels: Labels, value: float) -> None:
        """`_Histogram.observe` of ``labels``' histogram, made on first use (one call, not
        two, per figure: three figures on every request)."""
        hist = table.get(labels)
        if hist is None:
            hist = table[labels] = _Histogram([0] * (len(self._bounds) + 1))
        if not math.isnan(value):  # in no bucket, as in prometheus-client, nor in the sum
            hist.counts[bisect.bisect_left(self._bounds, value)] += 1
            hist.total += value

    def failed(self, transport: str, kind: str, name: str, error: str) -> None:
        with self._lock:
            self._count(self._errors, (transport, kind, name, error))

    @staticmethod
    def _count(table: dict[Labels, _Count], labels: Labels) -> None:
        count = table.get(labels)
        if count is None:
            count = table[labels] = _Count()
        count.value += 1

    def collect(self) -> Iterator[Metric]:
        with self._lock:  # a consistent copy; the families are built outside the lock
            requests = {k: (c.value, c.created) for k, c in self._requests.items()}
            errors = {k: (c.value, c.created) for k, c in self._errors.items()}
            latency = {k: (list(h.counts), h.total) for k, h in self._latency.items()}
            stage = {k: (list(h.counts), h.total) for k, h in self._stage.items()}
        yield _counter(
            "wasmgate_requests", "Requests answered, by transport, kind, name and source.",
            ["transport", "kind", "name", "source"], requests,
        )  # fmt: skip
        yield _counter(
            "wasmgate_request_errors", "Requests that failed, by error type.",
            ["transport", "kind", "name", "error"], errors,
        )  # fmt: skip
        yield self._histograms(
            "wasmgate_request_duration_seconds", "End-to-end request latency at the bridge.",
            ["transport", "kind", "name"], latency,
        )  # fmt: skip
        yield self._histograms(
            "wasmgate_stage_duration_seconds", "Latency per stage (STAGES).",
            ["kind", "name", "stage"], stage,
        )  # fmt: skip

    def _histograms(
        self, name: str, doc: str, labels: list[str],
        series: Mapping[Labels, tuple[list[int], float]],
    ) -> HistogramMetricFamily:  # fmt: skip
        family = HistogramMetricFamily(name, doc, labels=labels)
        # repr() writes these bounds as prometheus-client does (its floatToGoString differs
        # only past 1e6 and for non-finite values, which the buckets never are).
        edges = [*(repr(float(b)) for b in self._bounds), "+Inf"]
        for values, (counts, total) in series.items():
            cumulative, running = [], 0
            for edge, count in zip(edges, counts, strict=True):
                running += count
                cumulative.append((edge, float(running)))
            family.add_metric(list(values), cumulative, total)
        return family


def _counter(
    name: str, doc: str, labels: list[str], series: Mapping[Labels, tuple[int, float]]
) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=labels)
    for values, (value, created) in series.items():
        family.add_metric(list(values), value, created=created)
    return family
