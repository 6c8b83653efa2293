"""The tracing owner and span helpers in-process: thread hops keep parentage, a batch links
every request it serves, malformed context is ignored, and with tracing off the daemon
process never imports the OpenTelemetry SDK or exporter (checked in a fresh interpreter)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer

from tests.runtime.batching.gated import GatedModel
from tests.runtime.batching.test_batcher import _model, _rows
from tests.runtime.stack import host_profile_name
from wasmgate.runtime.batching.batcher import Batcher
from wasmgate.runtime.batching.dispatch import BatchDispatcher
from wasmgate.runtime.ops.config import TelemetrySettings
from wasmgate.runtime.ops.tracing import Tracing, metadata_carrier
from wasmgate.runtime.serving.scheduler import FairPool
from wasmgate.sandbox.spans import span, with_tracer

GOOD = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def recorded() -> Iterator[tuple[Tracer, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        yield provider.get_tracer("test"), exporter
    finally:
        provider.shutdown()


def _by_name(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    return {s.name: s for s in exporter.get_finished_spans()}


def _parent_id(s: ReadableSpan) -> int | None:
    return s.parent.span_id if s.parent is not None else None


def test_a_worker_pool_job_is_a_child_of_the_request_span(
    recorded: tuple[Tracer, InMemorySpanExporter],
) -> None:
    tracer, exporter = recorded
    token = otel_context.attach(with_tracer(tracer))
    try:
        with FairPool(2) as pool, span("request"):

            def job() -> None:
                with span("in worker"):
                    pass

            pool.submit_as("t", 1.0, job).result(30)
    finally:
        otel_context.detach(token)
    spans = _by_name(exporter)
    request = spans["request"].context
    assert request is not None
    assert _parent_id(spans["in worker"]) == request.span_id
    assert spans["in worker"].context is not None
    assert spans["in worker"].context.trace_id == request.trace_id


def test_outside_a_traced_request_spans_are_nothing() -> None:
    with span("untraced", lambda: {"never": "computed"}) as current:
        assert current is None


def test_a_batch_is_a_child_of_its_first_request_and_links_the_others(
    recorded: tuple[Tracer, InMemorySpanExporter],
) -> None:
    tracer, exporter = recorded
    futures, parents = [], []
    # A blocker holds the one dispatcher thread (an idle worker would run "first" at once);
    # max_batch_size 2: the batch runs once both requests are queued and the thread is free.
    held = GatedModel(_model())
    with (
        BatchDispatcher(1, "traced") as dispatcher,
        Batcher(held, 1, 0, dispatcher=dispatcher) as holder,
        Batcher(_model(), 2, 10_000_000, dispatcher=dispatcher) as batcher,
    ):
        blocker = holder.submit([_rows(1)])
        assert held.entered.wait(5)
        for name in ("first", "second"):
            token = otel_context.attach(with_tracer(tracer, otel_context.Context()))
            try:
                with span(name) as current:
                    assert current is not None
                    parents.append(current.get_span_context())
                    futures.append(batcher.submit([_rows(1)]))
            finally:
                otel_context.detach(token)
        held.gate.set()
        blocker.result(30)
        for future in futures:
            future.result(30)
    spans = _by_name(exporter)
    batch = spans["batch"]
    assert batch.attributes is not None
    assert (
        batch.attributes["wasmgate.batch.size"],
        batch.attributes["wasmgate.batch.requests"],
    ) == (2, 2)
    assert batch.context is not None
    assert (batch.context.trace_id, _parent_id(batch)) == (parents[0].trace_id, parents[0].span_id)
    assert [link.context.span_id for link in batch.links] == [parents[1].span_id]
    backend = spans["backend"]
    assert _parent_id(backend) == batch.context.span_id  # the run, on the dispatcher thread
    assert backend.attributes is not None
    assert backend.attributes["wasmgate.rows"] == 2


@pytest.mark.parametrize(
    "value",
    [
        "",
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",  # zero span id
        "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01",  # upper case
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
        "0" * 10_000,
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\x00",
    ],
)
async def test_a_malformed_traceparent_is_ignored_with_tracing_off(value: str) -> None:
    with Tracing(TelemetrySettings(), "gw") as tracing:
        assert not tracing.enabled
        with tracing.receive("http", {"traceparent": value}, {}) as current:
            assert current is None
            assert tracing.answer_carrier() == {}


async def test_tracing_off_echoes_a_valid_context_and_invents_none() -> None:
    with Tracing(TelemetrySettings(), "gw") as tracing:
        assert not tracing.wants({})
        with tracing.receive("mqtt", {}, {}):
            assert tracing.answer_carrier() == {}
        carrier = {"traceparent": GOOD, "tracestate": "a=1,b=2"}
        assert tracing.wants(carrier)
        with tracing.receive("mqtt", carrier, {}):
            assert tracing.answer_carrier() == carrier
        assert tracing.answer_carrier() == {}  # detached again


def test_grpc_metadata_becomes_a_carrier() -> None:
    metadata: list[tuple[str, str | bytes]] = [
        ("TraceParent", GOOD),
        ("x-bin", b"\x00"),
        ("tracestate", "k=v"),
    ]
    assert metadata_carrier(metadata) == {"traceparent": GOOD, "tracestate": "k=v"}
    assert metadata_carrier(None) == {}


_PROBE = """
import asyncio, json, sys, urllib.request
from aiohttp import web
from wasmgate.runtime.compose.app import build_app
from wasmgate.runtime.ops.config import settings_from

async def main() -> None:
    settings = settings_from(json.loads(sys.argv[1]))
    runner = web.AppRunner(build_app(settings))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/adapters/none", data=b"x",
        headers={"traceparent": sys.argv[2]},
    )
    def call() -> str:
        try:
            urllib.request.urlopen(req, timeout=30)
        except urllib.error.HTTPError as e:
            return e.headers.get("traceparent", "")
        return "unexpected success"
    echoed = await asyncio.to_thread(call)
    await runner.cleanup()
    loaded = sorted(m for m in sys.modules if m.startswith(
        ("opentelemetry.sdk", "opentelemetry.exporter")))
    print(json.dumps({"echoed": echoed, "loaded": loaded}))

asyncio.run(main())
"""


@pytest.mark.parametrize("on", [False, True])
def test_with_tracing_off_the_daemon_never_imports_the_sdk(tmp_path: Path, on: bool) -> None:
    settings: dict[str, object] = {
        "paths": {"data_dir": str(tmp_path)},
        "profile": host_profile_name(),
    }
    if on:  # the counter-check: the same probe does see them when tracing is on
        settings["telemetry"] = {"otlp_endpoint": "http://127.0.0.1:9", "export_timeout_s": 1}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(settings), GOOD],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    result = json.loads(out.splitlines()[-1])
    if on:
        assert "opentelemetry.sdk.trace" in result["loaded"]
        assert result["echoed"].split("-")[1] == GOOD.split("-")[1]  # an error answer too
    else:
        assert result["loaded"] == []
        assert result["echoed"] == GOOD
