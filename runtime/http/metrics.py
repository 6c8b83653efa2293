"""``GET /metrics``: the Prometheus text exposition of the app's `Metrics` registry."""

from __future__ import annotations

from aiohttp import web

from wasmgate.runtime.http import edge
from wasmgate.runtime.http.keys import METRICS


async def metrics(request: web.Request) -> web.Response:
    body, content_type = request.app[METRICS].exposition()
    return web.Response(body=body, headers={"Content-Type": content_type})


def setup(app: web.Application) -> None:
    """Register ``GET /metrics``; expects ``app[METRICS]`` (a `Metrics`)."""
    routes = edge.routes(app)
    routes.add_get("/metrics", metrics)
