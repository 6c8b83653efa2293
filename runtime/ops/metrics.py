"""Prometheus metrics of one daemon: a per-instance `CollectorRegistry`, no global state.

Who calls what (so nothing is counted twice):

- bridges (HTTP, MQTT) call `Metrics.observe_request` once per answered or failed request;
- the service calls `observe_fallback`, `observe_trap`, `set_model_backend` /
  `forget_model`, and hands `watch_gates` / `watch_inline` a read of its admission gates
  and inline counts (scrape time);
- the composition root hands `watch_breaker` a pure read of the cloud breaker, evaluated at
  scrape time (no other reader, such as the status page, changes a metric);
- the batcher calls `observe_batch`; the backends' watchdog `observe_cancelled`.

Label cardinality stays bounded: a request's name becomes a label only when it is a known
name (declared by the composition root with `set_known_names`: the installed adapters and
models) and was found; everything else, including names refused before any lookup (bad
headers, expired MQTT requests, 8 KB topic levels), counts under the name ``"-"``. Until
known names are declared (bridge tests without a registry) names pass as given.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Literal, Protocol

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from wasmgate.runtime.ops.counted import ModelCalls, MqttFigures, MqttGauge
from wasmgate.runtime.ops.failures import RecentFailures
from wasmgate.runtime.ops.pulled import GateFigures, GateGauge
from wasmgate.runtime.ops.recent import NameStats, Recent
from wasmgate.runtime.ops.request_metrics import RequestFamilies

Kind = Literal["adapter", "model"]
STAGES = ("queue", "sandbox", "inference", "fallback")
BREAKER_STATES = {"closed": 0, "half_open": 1, "open": 2}
UNKNOWN_NAME = "-"
# Edge inference spans ~100 µs (tiny model) to seconds (cloud fallback).
LATENCY_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0,
)  # fmt: skip
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)


class Metrics:
    """Every daemon metric; thread-safe (prometheus-client is, the recent-history lock too)."""

    def __init__(self, registry: CollectorRegistry | None = None, recent: int = 512) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._recent_size = recent
        self._recent: dict[tuple[Kind, str], Recent] = {}
        self._lock = threading.Lock()
        self._model_labels: dict[str, tuple[str, str, str, str]] = {}
        self._known: dict[str, frozenset[str]] | None = None
        self.failures = RecentFailures()
        """The last failed requests with their answers (``/v1/status``, the status page)."""
        self._build()

    def set_known_names(self, adapters: Iterable[str], models: Iterable[str]) -> None:
        """The names that may become labels (replaces the previous set)."""
        self._known = {"adapter": frozenset(adapters), "model": frozenset(models)}

    def _name_label(self, kind: Kind, name: str, error: str | None) -> str:
        known = self._known
        if error == "NotFound" or (known is not None and name not in known.get(kind, ())):
            return UNKNOWN_NAME
        return name

    def _build(self) -> None:
        reg = self.registry
        self._per_request = RequestFamilies(LATENCY_BUCKETS, STAGES)
        reg.register(self._per_request)
        self.batch = Histogram(
            "wasmgate_batch_size", "Requests merged into one backend run.",
            ["model"], buckets=BATCH_BUCKETS, registry=reg,
        )  # fmt: skip
        self.queue_depth = GateGauge(
            "wasmgate_queue_depth", "Requests waiting for admission or batching.", 1
        )
        self.in_flight = GateGauge("wasmgate_in_flight", "Requests running now.", 0)
        self.inline_runs = GateGauge(
            "wasmgate_inline_runs", "Runs made on the event loop (adapter:<name>, model).", 0,
            counter=True,
        )  # fmt: skip
        self.inline_strikes = GateGauge(
            "wasmgate_inline_strikes", "Inline runs past their budget, made again on the pool.",
            1, counter=True,
        )  # fmt: skip
        for pulled in (self.queue_depth, self.in_flight, self.inline_runs, self.inline_strikes):
            reg.register(pulled)
        self.fallbacks = Counter(
            "wasmgate_fallbacks", "Cloud fallbacks by reason and outcome.",
            ["name", "reason", "outcome"], registry=reg,
        )  # fmt: skip
        self.breaker = Gauge(
            "wasmgate_fallback_breaker_state", "Cloud breaker: 0 closed, 1 half-open, 2 open.",
            registry=reg,
        )  # fmt: skip
        self.traps = Counter(
            "wasmgate_sandbox_traps", "Guest traps by adapter and cause.",
            ["adapter", "cause"], registry=reg,
        )  # fmt: skip
        self.cancelled = Counter(
            "wasmgate_runs_cancelled", "Backend runs stopped at their request's deadline.",
            ["model"], registry=reg,
        )  # fmt: skip
        self.model_backend = Gauge(
            "wasmgate_model_backend_info", "1 for the EP and precision a model runs on.",
            ["model", "version", "provider", "precision"], registry=reg,
        )  # fmt: skip
        self.expired = Gauge(
            "wasmgate_bundle_expired",
            "1 for an installed bundle past its expires; action: serving (trust.expiry = warn) "
            "or stopped.", ["bundle", "action"], registry=reg,
        )  # fmt: skip
        self.release_decisions = Counter(
            "wasmgate_release_decisions", "Staged releases promoted or aborted by their gates.",
            ["bundle", "outcome"], registry=reg,
        )  # fmt: skip
        self.model_calls = ModelCalls()
        self.mqtt = MqttGauge()
        reg.register(self.model_calls)
        reg.register(self.mqtt)
        # process_cpu_seconds_total, process_resident_memory_bytes, process_open_fds, ...:
        # read from /proc at scrape time (nothing on other systems). Measured (docs/http.md):
        # ~20 us once at start, 0.2-0.3 ms per scrape (of a 5-7 ms scrape).
        ProcessCollector(registry=reg)
        self.release_measured = Gauge(
            "wasmgate_release_measured", "A staged candidate's numbers at its last gate decision.",
            ["bundle", "measure"], registry=reg,
        )  # fmt: skip

    # -- bridges -----------------------------------------------------------------------------

    def observe_request(
        self,
        kind: Kind,
        name: str,
        source: str | None,
        timings: Mapping[str, float],
        error: str | None = None,
        *,
        transport: str = "http",
        seconds: float | None = None,
    ) -> None:
        """One request at a bridge: ``error`` is the error class name (``"Busy"``) or None;
        ``seconds`` the bridge-measured total (default: the sum of ``timings``)."""
        name = self._name_label(kind, name, error)
        total = seconds if seconds is not None else sum(timings.values())
        if error is None:
            self._per_request.answered((transport, kind, name), source or "local", total, timings)
        else:
            self._per_request.failed(transport, kind, name, error)
        with self._lock:
            recent = self._recent.get((kind, name))
            if recent is None:
                recent = self._recent[(kind, name)] = Recent(self._recent_size)
            recent.add(total, source, error, timings)

    # -- service, batcher ---------------------------------------------------------------------

    def observe_cancelled(self, model: str) -> None:
        """The watchdog stopped a run of ``model`` (a loaded model's name) at its deadline."""
        self.cancelled.labels(model).inc()

    def observe_batch(self, model: str, size: int) -> None:
        self.batch.labels(model).observe(size)

    def watch_gates(self, read: Callable[[], Mapping[str, GateFigures]]) -> None:
        """Read every admission gate's ``(running, waiting)`` per name at scrape time."""
        self.queue_depth.watch(read)
        self.in_flight.watch(read)

    def watch_inline(self, read: Callable[[], Mapping[str, tuple[int, int]]]) -> None:
        """Read the inline ``(runs, strikes)`` per adapter and model at scrape time."""
        self.inline_runs.watch(read)
        self.inline_strikes.watch(read)

    def observe_fallback(self, name: str, reason: str, ok: bool) -> None:
        """``reason``: error/busy/deadline/missing_model/adapter_request."""
        self.fallbacks.labels(name, reason, "ok" if ok else "failed").inc()

    def watch_breaker(self, read: Callable[[], str]) -> None:
        """Read the cloud breaker's state at scrape time (``closed``, ``half_open``, ``open``).

        ``read`` must not change anything: scraping is observation only."""
        self.breaker.set_function(lambda: BREAKER_STATES[read()])

    def watch_store(self, read: Callable[[], Mapping[str, StoreFigures]]) -> None:
        """Read the store's per-stream figures at scrape time (depth, bytes, age, drops)."""
        self.registry.register(_StoreCollector(read))

    def watch_mqtt(self, read: Callable[[], MqttFigures]) -> None:
        """Read the MQTT client's connection state at scrape time."""
        self.mqtt.watch(read)

    def observe_trap(self, adapter: str, cause: str) -> None:
        self.traps.labels(adapter, cause).inc()

    def set_model_backend(self, model: str, version: int, provider: str, precision: str) -> None:
        """The EP and precision a model (version) really runs on; replaces the previous one."""
        labels = (model, str(version), provider, precision)
        with self._lock:
            old = self._model_labels.get(model)
            self._model_labels[model] = labels
        if old is not None and old != labels:
            self.model_backend.remove(*old)
        self.model_backend.labels(*labels).set(1)

    def forget_model(self, model: str) -> None:
        """A model was unloaded: drop its backend info series."""
        with self._lock:
            old = self._model_labels.pop(model, None)
        if old is not None:
            self.model_backend.remove(*old)

    def set_expired(self, expired: Mapping[str, Mapping[str, str]]) -> None:
        """The registry's expired bundles (name -> {"action": ...}); replaces the last set."""
        self.expired.clear()
        for bundle, entry in expired.items():
            self.expired.labels(bundle, entry["action"]).set(1)

    def observe_release(
        self, bundle: str, outcome: str, measured: Mapping[str, float | None]
    ) -> None:
        """A gate decision (``promote``/``abort``) and the numbers it was made on."""
        self.release_decisions.labels(bundle, outcome).inc()
        for measure, value in measured.items():
            if value is not None:
                self.release_measured.labels(bundle, measure).set(value)

    # -- readers ------------------------------------------------------------------------------

    def snapshot(self) -> dict[tuple[Kind, str], NameStats]:
        """Counters and recent latency per (kind, name), for the status page."""
        with self._lock:
            return {key: recent.stats() for key, recent in self._recent.items()}

    def exposition(self) -> tuple[bytes, str]:
        """The Prometheus text exposition and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class StoreFigures(Protocol):
    """What `watch_store` reads per stream (`wasmgate.runtime.field.store.StreamStatus`)."""

    @property
    def depth(self) -> int: ...
    @property
    def bytes(self) -> int: ...
    @property
    def oldest_age_s(self) -> float: ...
    @property
    def dropped_full(self) -> int: ...
    @property
    def dropped_expired(self) -> int: ...


class _StoreCollector(Collector):
    """The store's figures as metric families built at scrape time (no state kept here)."""

    def __init__(self, read: Callable[[], Mapping[str, StoreFigures]]) -> None:
        self._read = read

    def collect(self) -> Iterator[Metric]:
        depth = GaugeMetricFamily(
            "wasmgate_store_depth", "Entries waiting in a store stream.", labels=["stream"]
        )
        size = GaugeMetricFamily(
            "wasmgate_store_bytes", "Bytes waiting in a store stream.", labels=["stream"]
        )
        age = GaugeMetricFamily(
            "wasmgate_store_oldest_age_seconds",
            "Age of a store stream's oldest entry (0 when empty).", labels=["stream"],
        )  # fmt: skip
        dropped = CounterMetricFamily(
            "wasmgate_store_dropped",
            "Entries dropped undelivered: reason full (max_bytes) or expired (max_age_s).",
            labels=["stream", "reason"],
        )
        for stream, st in self._read().items():
            depth.add_metric([stream], st.depth)
            size.add_metric([stream], st.bytes)
            age.add_metric([stream], st.oldest_age_s)
            dropped.add_metric([stream, "full"], st.dropped_full)
            dropped.add_metric([stream, "expired"], st.dropped_expired)
        yield from (depth, size, age, dropped)
