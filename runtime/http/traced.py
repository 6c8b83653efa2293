"""The ``http receive`` span and W3C trace context of the inference routes.

Opened by `wasmgate.runtime.http.edge` outside the error mapping, so error answers carry
``traceparent`` too. Only the inference routes are
traced (V2 ``…/infer`` and ``POST /v1/adapters/{name}``); health checks, metrics scrapes
and the management API are not. What goes in and out: `wasmgate.runtime.ops.tracing`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from wasmgate.runtime.ops.tracing import Tracing, mark_status

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

TRACED_ROUTES = frozenset(
    {
        "/v2/models/{model}/infer",
        "/v2/models/{model}/versions/{version}/infer",
        "/v1/adapters/{name}",
    }
)


async def around(tracing: Tracing, request: web.Request, answer: Handler) -> web.StreamResponse:
    """``answer(request)`` inside the request's span; the answer carries ``traceparent``."""
    info = request.match_info
    route = info.route.resource
    attributes = {
        "http.request.method": request.method,
        "http.route": route.canonical if route is not None else "",
        "wasmgate.model": info.get("model") or info.get("name") or "",
    }
    with tracing.receive("http", request.headers, attributes) as current:
        response = await answer(request)
        mark_status(current, "http.response.status_code", response.status)
        source = response.headers.get("X-Wasmgate-Source")
        if current is not None and source is not None:
            current.set_attribute("wasmgate.source", source)
        response.headers.update(tracing.answer_carrier())
        return response
