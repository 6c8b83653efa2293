"""Triton's statistics extension, read-only: ``GET /v2/models[/{m}[/versions/{v}]]/stats``.

Built from `Metrics.snapshot()` (answered/failed counts and summed latencies since start).
Not listed in ``/v2`` extensions on purpose: perf_analyzer then never asks for it (it aborts
on any stats body that is not exactly Triton's), while ``tritonclient``'s
``get_inference_statistics`` and curl get the numbers. No batch statistics.
"""

from __future__ import annotations

from aiohttp import web

from wasmgate.runtime.dataplane.stats import statistics
from wasmgate.runtime.http import edge
from wasmgate.runtime.http.keys import METRICS, SERVICE


async def stats(request: web.Request) -> web.Response:
    info = request.match_info
    return web.json_response(
        statistics(
            request.app[SERVICE], request.app.get(METRICS), info.get("model"), info.get("version")
        )
    )


def setup(app: web.Application) -> None:
    """Register the stats routes (before ``/v2/models/{model}``: ``stats`` is not a model)."""
    routes = edge.routes(app)
    routes.add_get("/v2/models/stats", stats)
    routes.add_get("/v2/models/{model}/stats", stats)
    routes.add_get("/v2/models/{model}/versions/{version}/stats", stats)
