"""The raw adapter endpoint ``POST /v1/adapters/{name}``.

Body = device payload (any content type, or none), answer = the adapter's output with its
content type (202 with ``{"deferred": id, "topic": ...}`` when a cloud fallback was
deferred), plus ``X-Wasmgate-Source`` (local|cloud|deferred), ``X-Wasmgate-Version`` and
``Server-Timing`` (queue/sandbox/inference/fallback, ms). Adapters as V2 models are the
data plane's (`wasmgate.runtime.dataplane.adapters`).
"""

from __future__ import annotations

from aiohttp import hdrs, web

from wasmgate.runtime.dataplane.answer import answer_headers
from wasmgate.runtime.http import edge
from wasmgate.runtime.http.common import plane, read_body, route_of


async def raw_adapter(request: web.Request) -> web.Response:
    async with plane(request).adapter("http", request.match_info["name"]) as call:
        payload = await read_body(request)
        content_type = request.headers.get(hdrs.CONTENT_TYPE)
        answer = await call.run_adapter(payload, content_type, route_of(request), "http")
    headers = answer_headers(
        answer.source, answer.version, answer.timings, call.observation.elapsed(),
        answer.fallback_reason,
    )  # fmt: skip
    headers[hdrs.CONTENT_TYPE] = answer.content_type
    # Deferred: kept for the cloud, answered later on MQTT (the body names id and topic).
    status = 202 if answer.source == "deferred" else 200
    return web.Response(body=answer.body, status=status, headers=headers)


def setup(app: web.Application) -> None:
    """``POST /v1/adapters/{name}``; expects ``app[SERVICE]`` (optional ``app[METRICS]``)."""
    routes = edge.routes(app)
    routes.add_post("/v1/adapters/{name}", raw_adapter)
