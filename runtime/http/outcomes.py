"""``GET /v1/outcomes`` on a data-plane worker's own socket: what each bundle version it
serves answered (requests, errors, the recent latencies), for the supervisor, whose staged
releases judge their gates on the whole gateway's traffic (`wasmgate.runtime.bundles.release`).
Not a public route: on the gateway's port it is not found, like any unknown path."""

from __future__ import annotations

from aiohttp import web

from wasmgate.runtime.http import edge
from wasmgate.runtime.http.forward import from_outside
from wasmgate.runtime.http.keys import REGISTRY

__all__ = ["setup"]


async def outcomes(request: web.Request) -> web.Response:
    if from_outside(request):
        raise web.HTTPNotFound
    rows = []
    for slot in request.app[REGISTRY].table.slots().values():
        for bundle in slot.versions():
            out = bundle.outcomes
            rows.append({
                "name": bundle.name, "version": bundle.version, "requests": out.requests,
                "errors": out.errors, "latencies": list(out.latencies),
            })  # fmt: skip
    return web.json_response(rows)


def setup(app: web.Application) -> None:
    """Register the route (a worker's app only)."""
    edge.routes(app).add_get("/v1/outcomes", outcomes)
