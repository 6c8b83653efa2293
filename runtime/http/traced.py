"""The ``http receive`` span and W3C trace context of the inference routes.

A middleware, outermost but for the connection guard, so error answers (written by the
error middleware inside it) carry ``traceparent`` too. Only the inference routes are
traced (V2 ``…/infer`` and ``POST /v1/adapters/{name}``); health checks, metrics scrapes
and the management API are not. What goes in and out: `wasmgate.runtime.ops.tracing`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from wasmgate.runtime.http.keys import TRACING
from wasmgate.runtime.ops.tracing import mark_status

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

TRACED_ROUTES = frozenset(
    {
        "/v2/models/{model}/infer",
        "/v2/models/{model}/versions/{version}/infer",
        "/v1/adapters/{name}",
    }
)


@web.middleware
async def tracing_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    tracing = request.app.get(TRACING)
    route = request.match_info.route.resource
    canonical = route.canonical if route is not None else ""
    if tracing is None or canonical not in TRACED_ROUTES or not tracing.wants(request.headers):
        return await handler(request)
    info = request.match_info
    attributes = {
        "http.request.method": request.method,
        "http.route": canonical,
        "wasmgate.model": info.get("model") or info.get("name") or "",
    }
    with tracing.receive("http", request.headers, attributes) as current:
        response = await handler(request)
        mark_status(current, "http.response.status_code", response.status)
        source = response.headers.get("X-Wasmgate-Source")
        if current is not None and source is not None:
            current.set_attribute("wasmgate.source", source)
        response.headers.update(tracing.answer_carrier())
        return response


def setup(app: web.Application) -> None:
    """Install after the error middleware, so it wraps it (call before the guard's insert)."""
    app.middlewares.insert(0, tracing_middleware)
