"""The per-request families are exposed exactly as prometheus-client's own metrics would be."""

from __future__ import annotations

import math
import threading

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from wasmgate.runtime.ops.metrics import LATENCY_BUCKETS, STAGES, Metrics
from wasmgate.runtime.ops.request_metrics import RequestFamilies

# Bucket edges exactly, just past them, zero, negative (a clock step), huge and infinite.
VALUES = [
    *LATENCY_BUCKETS,
    *(b * 1.000001 for b in LATENCY_BUCKETS),
    0.0,
    -1.0,
    1e-9,
    1e9,
    math.inf,
    0.00042,
]


def _native(registry: CollectorRegistry) -> tuple[Counter, Counter, Histogram, Histogram]:
    return (
        Counter("wasmgate_requests", "Requests answered, by transport, kind, name and source.",
                ["transport", "kind", "name", "source"], registry=registry),
        Counter("wasmgate_request_errors", "Requests that failed, by error type.",
                ["transport", "kind", "name", "error"], registry=registry),
        Histogram("wasmgate_request_duration_seconds", "End-to-end request latency at the bridge.",
                  ["transport", "kind", "name"], buckets=LATENCY_BUCKETS, registry=registry),
        Histogram("wasmgate_stage_duration_seconds", "Latency per stage (STAGES).",
                  ["kind", "name", "stage"], buckets=LATENCY_BUCKETS, registry=registry),
    )  # fmt: skip


def _lines(registry: CollectorRegistry) -> list[str]:
    # _created is the one difference: its value is the creation time, ours has no histograms'.
    text = generate_latest(registry).decode()
    return sorted(line for line in text.splitlines() if "_created" not in line)


def test_the_exposition_is_prometheus_clients_own() -> None:
    ours_registry, native_registry = CollectorRegistry(), CollectorRegistry()
    ours = RequestFamilies(LATENCY_BUCKETS, STAGES)
    ours_registry.register(ours)
    requests, errors, latency, stages = _native(native_registry)
    for i, value in enumerate(VALUES):
        name, source = f"m{i % 3}", ("local", "cloud")[i % 2]
        timings = {"queue": value / 2, "inference": value, "not-a-stage": 1.0}
        ours.answered(("http", "model", name), source, value, timings)
        requests.labels("http", "model", name, source).inc()
        latency.labels("http", "model", name).observe(value)
        for stage in ("queue", "inference"):
            stages.labels("model", name, stage).observe(timings[stage])
        ours.failed("mqtt", "adapter", name, "Busy")
        errors.labels("mqtt", "adapter", name, "Busy").inc()
    assert _lines(ours_registry) == _lines(native_registry)


def test_a_nan_latency_poisons_no_sum() -> None:
    registry = CollectorRegistry()
    ours = RequestFamilies(LATENCY_BUCKETS, STAGES)
    registry.register(ours)
    ours.answered(("http", "model", "m"), "local", 0.001, {"inference": math.nan})
    ours.answered(("http", "model", "m"), "local", math.nan, {})
    text = generate_latest(registry).decode()
    assert "nan" not in text.lower()
    assert (
        'wasmgate_request_duration_seconds_count{kind="model",name="m",transport="http"} 1.0'
        in text
    )
    assert (
        'wasmgate_requests_total{kind="model",name="m",source="local",transport="http"} 2.0' in text
    )


def test_counts_from_many_threads_are_all_kept() -> None:
    metrics = Metrics()
    timings = {"queue": 0.0, "inference": 0.0001}

    def burst() -> None:
        for _ in range(2000):
            metrics.observe_request("model", "m", "local", timings, seconds=0.0002)

    threads = [threading.Thread(target=burst) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    text, _ = metrics.exposition()
    line = 'wasmgate_requests_total{kind="model",name="m",source="local",transport="http"} 8000.0'
    assert line in text.decode()
    assert (
        'wasmgate_stage_duration_seconds_count{kind="model",name="m",stage="inference"} 8000.0'
        in text.decode()
    )
