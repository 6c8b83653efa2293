"""Spans of the request being served, for every layer that opens one.

The daemon's tracing owner (``wasmgate.runtime.ops.tracing``) puts its OpenTelemetry
`Tracer` into the OpenTelemetry context of each traced request (`with_tracer`); code on the
request path opens child spans with `span` or records a stage that already ended with
`record`. The tracer travels with the request's context (contextvars) instead of through
every constructor, so a thread hop that copies the context (the worker pool, the batcher)
keeps both the parent span and the tracer, and two daemons in one process share nothing.

With no tracer in the context (tracing off, or work outside a request) `span` returns a
shared no-op context manager and `record` returns at once: one contextvar read each. Only
the OpenTelemetry *API* is imported here; the SDK stays unimported unless tracing is on.
This is the lowest layer that opens spans (wasi-nn ``compute``), so the contract lives here.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager

from opentelemetry import context as otel_context
from opentelemetry import trace

__all__ = [
    "Attributes",
    "LazyAttributes",
    "current_tracer",
    "joint_span",
    "record",
    "span",
    "with_tracer",
]

Attributes = Mapping[str, str | int | float | bool]
LazyAttributes = Attributes | Callable[[], Attributes] | None
"""Attributes, or a function computing them: called only when the request is traced."""

_TRACER_KEY = otel_context.create_key("wasmgate-tracer")
_NOTHING: AbstractContextManager[None] = contextlib.nullcontext()


def with_tracer(
    tracer: trace.Tracer, ctx: otel_context.Context | None = None
) -> otel_context.Context:
    """``ctx`` (default: the current context) with ``tracer`` as the request's tracer."""
    return otel_context.set_value(_TRACER_KEY, tracer, ctx)


def current_tracer(ctx: otel_context.Context | None = None) -> trace.Tracer | None:
    """The tracer of the request ``ctx`` (default: the current one) belongs to, if traced."""
    # get_value(key, ctx) is get_current().get(key) and two calls more, on every request
    tracer = (otel_context.get_current() if ctx is None else ctx).get(_TRACER_KEY)
    # None first: isinstance against the Tracer ABC costs more than the rest of the call.
    return None if tracer is None or not isinstance(tracer, trace.Tracer) else tracer


def span(
    name: str,
    attributes: LazyAttributes = None,
    *,
    kind: trace.SpanKind = trace.SpanKind.INTERNAL,
    parent: otel_context.Context | None = None,
    links: Sequence[trace.Link] = (),
) -> AbstractContextManager[trace.Span | None]:
    """A child span of the current one (or of ``parent``), made current while open.

    Yields None when the request is not traced. An exception leaving the block is recorded
    on the span and sets its status to error (the API's default)."""
    tracer = current_tracer(parent)
    if tracer is None:
        return _NOTHING
    if callable(attributes):
        attributes = attributes()
    opened = tracer.start_as_current_span(
        name, context=parent, kind=kind, attributes=attributes, links=links
    )
    return opened if parent is None else _within(parent, opened)


@contextlib.contextmanager
def _within(
    ctx: otel_context.Context, opened: AbstractContextManager[trace.Span]
) -> Iterator[trace.Span]:
    """``opened`` with ``ctx`` attached around it: the span is made current on top of the
    request's context (its tracer included), not on top of this thread's own context."""
    token = otel_context.attach(ctx)
    try:
        with opened as current:
            yield current
    finally:
        otel_context.detach(token)


def joint_span(
    name: str, contexts: Sequence[otel_context.Context], attributes: LazyAttributes = None
) -> AbstractContextManager[trace.Span | None]:
    """One span for work done for several requests at once (a batch), from their captured
    contexts: a child of the first traced one, linked to the spans of all the others, so
    each request's trace leads to the shared work."""
    traced = [c for c in contexts if current_tracer(c) is not None]
    if not traced:
        return _NOTHING
    links = [trace.Link(trace.get_current_span(c).get_span_context()) for c in traced[1:]]
    return span(name, attributes, parent=traced[0], links=links)


def record(name: str, seconds: float, attributes: LazyAttributes = None) -> None:
    """A child span of the current one for a stage that just ended after ``seconds``."""
    tracer = current_tracer()
    if tracer is None:
        return
    if callable(attributes):
        attributes = attributes()
    end = time.time_ns()
    started = tracer.start_span(
        name, start_time=end - int(max(0.0, seconds) * 1e9), attributes=attributes
    )
    started.end(end)
