"""``GET /metrics`` after real traffic, and the `Metrics` API the service calls."""

from __future__ import annotations

import json

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from tests.runtime.http.server import MAX_BODY, LiveServer
from wasmgate.runtime.ops.metrics import Metrics

ADD = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(text: str, metric: str, **labels: str) -> float | None:
    return samples(text).get((metric, frozenset(labels.items())))


def test_metrics_count_requests_errors_and_stages(server: LiveServer) -> None:
    for _ in range(3):
        assert (
            server.request("POST", "/v2/models/add/infer", json.dumps(ADD).encode()).status == 200
        )
    assert server.request("POST", "/v1/adapters/cloud", b"x").status == 200
    assert server.request("POST", "/v1/adapters/busy", b"x").status == 429
    assert server.request("POST", "/v1/adapters/probe-1", b"x").status == 404
    assert server.request("POST", "/v1/adapters/probe-2", b"x").status == 404
    assert server.request("POST", "/v1/adapters/echo", b"x" * (MAX_BODY + 1)).status == 413
    assert server.request("POST", "/v1/adapters/crash", b"x").status == 500
    reply = server.request("GET", "/metrics")
    assert reply.status == 200
    assert reply.headers["Content-Type"].startswith("text/plain")
    text = reply.body.decode()
    model = {"transport": "http", "kind": "model", "name": "add"}
    assert value(text, "wasmgate_requests_total", **model, source="local") == 3
    assert value(text, "wasmgate_request_duration_seconds_count", **model) == 3
    cloud = {"transport": "http", "kind": "adapter", "name": "cloud", "source": "cloud"}
    assert value(text, "wasmgate_requests_total", **cloud) == 1
    busy = {"transport": "http", "kind": "adapter", "name": "busy", "error": "Busy"}
    assert value(text, "wasmgate_request_errors_total", **busy) == 1
    unknown = {"transport": "http", "kind": "adapter", "name": "-", "error": "NotFound"}
    assert value(text, "wasmgate_request_errors_total", **unknown) == 2  # no label per probe
    too_large = {"transport": "http", "kind": "adapter", "name": "echo", "error": "PayloadTooLarge"}
    assert value(text, "wasmgate_request_errors_total", **too_large) == 1
    crash = {"transport": "http", "kind": "adapter", "name": "crash", "error": "InternalError"}
    assert value(text, "wasmgate_request_errors_total", **crash) == 1
    stage = {"kind": "adapter", "name": "cloud", "stage": "fallback"}
    assert value(text, "wasmgate_stage_duration_seconds_count", **stage) == 1


def test_service_side_metrics() -> None:
    metrics = Metrics(CollectorRegistry())
    metrics.observe_batch("add", 4)
    metrics.watch_gates(lambda: {"echo": (2, 3)})  # (running, waiting), read when scraped
    metrics.observe_fallback("echo", "busy", ok=True)
    metrics.watch_breaker(lambda: "open")
    metrics.observe_trap("echo", "fuel")
    metrics.set_model_backend("add", 3, "CPUExecutionProvider", "fp32")
    metrics.set_model_backend("add", 4, "XnnpackExecutionProvider", "int8")
    text = metrics.exposition()[0].decode()
    assert value(text, "wasmgate_batch_size_sum", model="add") == 4
    assert value(text, "wasmgate_queue_depth", name="echo") == 3
    assert value(text, "wasmgate_in_flight", name="echo") == 2
    assert value(text, "wasmgate_fallbacks_total", name="echo", reason="busy", outcome="ok") == 1
    assert value(text, "wasmgate_fallback_breaker_state") == 2
    assert value(text, "wasmgate_sandbox_traps_total", adapter="echo", cause="fuel") == 1
    new = {"model": "add", "version": "4", "provider": "XnnpackExecutionProvider"}
    assert value(text, "wasmgate_model_backend_info", **new, precision="int8") == 1
    old = {"model": "add", "version": "3", "provider": "CPUExecutionProvider"}
    assert value(text, "wasmgate_model_backend_info", **old, precision="fp32") is None
    metrics.forget_model("add")
    assert "XnnpackExecutionProvider" not in metrics.exposition()[0].decode()


def test_two_instances_do_not_share_state() -> None:
    first, second = Metrics(), Metrics()
    first.observe_request("model", "add", "local", {"inference": 0.001})
    text = second.exposition()[0].decode()
    labels = {"transport": "http", "kind": "model", "name": "add", "source": "local"}
    assert value(text, "wasmgate_requests_total", **labels) is None
    stats = first.snapshot()[("model", "add")]
    assert stats.requests == 1
    assert stats.p50_ms is not None
    assert abs(stats.p50_ms - 1.0) < 1e-9
