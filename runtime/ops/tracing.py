"""Traces: W3C trace context in and out of every transport, spans exported over OTLP/HTTP.

`Tracing` is the owner (started and closed by ``runtime/compose/app.py``). Each transport wraps a
request in `Tracing.receive` with the request's carrier (HTTP headers, MQTT 5 user
properties, gRPC metadata via `metadata_carrier`) and puts `Tracing.answer_carrier` on its
answer; the stages below open their spans through `wasmgate.sandbox.spans`, which finds the
tracer in the request's context.

- ``telemetry.otlp_endpoint`` unset (the default): no SDK, no exporter, no spans. A request
  that brings a ``traceparent`` still has it passed on unchanged: to the cloud fallback call
  and back on the answer (W3C Trace Context asks intermediaries to forward it). A request
  without one gets none. Cost on the request path: a header lookup.
- set: the OpenTelemetry SDK (imported only then), a parent-based ratio sampler, a
  `BatchSpanProcessor` whose queue is bounded (a slow or dead receiver costs dropped spans,
  never request latency: export runs on the processor's own thread) and the OTLP/HTTP
  exporter posting to ``<otlp_endpoint>/v1/traces``. Resource: ``service.name`` wasmgate,
  ``service.version``, ``wasmgate.gateway.id``. The answer's ``traceparent`` then names the
  daemon's receive span (same trace id as the request's).

A malformed ``traceparent`` is ignored (the W3C rule): the request starts a new trace.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

import wasmgate
from wasmgate._compat import Self
from wasmgate.runtime.ops.config import TelemetrySettings
from wasmgate.sandbox.spans import Attributes, with_tracer

__all__ = ["TRACEPARENT", "Tracing", "inject", "mark_status", "metadata_carrier"]

log = logging.getLogger("wasmgate.tracing")

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
_PROPAGATOR = TraceContextTextMapPropagator()  # stateless: W3C parsing and formatting only


def inject(carrier: dict[str, str]) -> None:
    """Add the current trace context (``traceparent``/``tracestate``) to outgoing headers;
    nothing when the request is not traced and brought none."""
    _PROPAGATOR.inject(carrier)


def metadata_carrier(metadata: Iterable[tuple[str, str | bytes]] | None) -> dict[str, str]:
    """gRPC invocation metadata as a carrier for `Tracing.receive` (binary keys skipped)."""
    return {k.lower(): v for k, v in metadata or () if isinstance(v, str)}


class Tracing:
    """Owner of the tracer provider: ``with Tracing(settings.telemetry, gateway) as t: ...``."""

    def __init__(self, settings: TelemetrySettings, gateway_id: str) -> None:
        self._settings = settings
        self._gateway_id = gateway_id
        self._provider: Any = None  # opentelemetry.sdk.trace.TracerProvider when enabled
        self._tracer: trace.Tracer | None = None

    @property
    def enabled(self) -> bool:
        """True when spans are recorded and exported."""
        return self._tracer is not None

    def __enter__(self) -> Self:
        endpoint = self._settings.otlp_endpoint
        if endpoint is not None:
            self._provider = _sdk_provider(self._settings, _traces_url(endpoint), self._gateway_id)
            self._tracer = self._provider.get_tracer("wasmgate", wasmgate.__version__)
            log.info("tracing on", extra={"otlp": _traces_url(endpoint)})
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Flush what is queued and stop the exporter, waiting at most ``export_timeout_s``:
        a dead receiver must not hold up the daemon's exit."""
        provider, self._provider, self._tracer = self._provider, None, None
        if provider is None:
            return
        closer = threading.Thread(target=provider.shutdown, name="wasmgate-otel-close")
        closer.daemon = True
        closer.start()
        closer.join(self._settings.export_timeout_s)

    def wants(self, carrier: Mapping[str, str]) -> bool:
        """Whether a request with ``carrier`` needs `receive` at all (the fast path)."""
        return self._tracer is not None or TRACEPARENT in carrier

    @contextlib.contextmanager
    def receive(
        self, transport: str, carrier: Mapping[str, str], attributes: Attributes
    ) -> Iterator[trace.Span | None]:
        """The request's context for its whole handling: its remote parent from ``carrier``
        (if valid) and, when tracing is on, a ``<transport> receive`` server span (yielded;
        None when off)."""
        ctx = _PROPAGATOR.extract(carrier) if TRACEPARENT in carrier else otel_context.Context()
        tracer = self._tracer
        token = otel_context.attach(ctx if tracer is None else with_tracer(tracer, ctx))
        try:
            if tracer is None:
                yield None
                return
            attrs = {"wasmgate.transport": transport, **attributes}
            # The answer's status marks the span (`mark_status`), not an exception passing
            # through: a client's mistake (a gRPC abort for a 4xx) is not the server's error.
            with tracer.start_as_current_span(
                f"{transport} receive",
                kind=trace.SpanKind.SERVER,
                attributes=attrs,
                set_status_on_exception=False,
            ) as current:
                yield current
        finally:
            otel_context.detach(token)

    @staticmethod
    def answer_carrier() -> dict[str, str]:
        """``traceparent`` (+ ``tracestate``) for the answer of the request being received."""
        carrier: dict[str, str] = {}
        inject(carrier)
        return carrier


def mark_status(current: trace.Span | None, key: str, status: int) -> None:
    """Put an answer's HTTP-like ``status`` on a receive span; 5xx marks it failed (a
    client's 4xx is not the server's error, as OpenTelemetry's conventions say)."""
    if current is None:
        return
    current.set_attribute(key, status)
    if status >= 500:
        current.set_status(trace.StatusCode.ERROR)


def _traces_url(endpoint: str) -> str:
    return endpoint.rstrip("/") + "/v1/traces"


def _sdk_provider(settings: TelemetrySettings, url: str, gateway_id: str) -> Any:
    """The SDK's provider with a bounded batch processor and the OTLP/HTTP exporter."""
    # Imported here only: with tracing off neither the SDK nor the exporter is loaded.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
        OTLPSpanExporter,
    )
    from opentelemetry.sdk.resources import Resource  # noqa: PLC0415
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: PLC0415
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased  # noqa: PLC0415

    resource = Resource.create(
        {
            "service.name": "wasmgate",
            "service.version": wasmgate.__version__,
            "wasmgate.gateway.id": gateway_id,
        }
    )
    provider = TracerProvider(
        resource=resource, sampler=ParentBased(TraceIdRatioBased(settings.sample_ratio))
    )
    exporter = OTLPSpanExporter(endpoint=url, timeout=settings.export_timeout_s)
    processor = BatchSpanProcessor(
        exporter,
        max_queue_size=settings.max_queue_spans,
        schedule_delay_millis=settings.export_delay_ms,
        max_export_batch_size=min(512, settings.max_queue_spans),
        export_timeout_millis=int(settings.export_timeout_s * 1000),
    )
    provider.add_span_processor(processor)
    return provider
