"""Triton's statistics extension, read-only: ``GET /v2/models[/{m}[/versions/{v}]]/stats``.

Built from `Metrics.snapshot()` (answered/failed counts and summed latencies since start).
Not listed in ``/v2`` extensions on purpose: perf_analyzer then never asks for it (it aborts
on any stats body that is not exactly Triton's), while ``tritonclient``'s
``get_inference_statistics`` and curl get the numbers. No batch statistics.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from wasmgate.runtime.http import edge
from wasmgate.runtime.http.keys import METRICS, SERVICE
from wasmgate.runtime.ops.metrics import Metrics
from wasmgate.runtime.ops.recent import NameStats
from wasmgate.runtime.serving.api import ModelInfo, ServiceAPI


def _duration(count: int, seconds: float) -> dict[str, int]:
    return {"count": count, "ns": round(seconds * 1e9)}


def model_stats(info: ModelInfo, stats: NameStats | None) -> dict[str, Any]:
    """One ``model_stats`` entry in Triton's format."""
    if stats is None:
        stats = NameStats(0, 0, None, None, None, {})
    ok = stats.requests - stats.errors
    stage = stats.stage_seconds
    return {
        "name": info.name,
        "version": str(info.version),
        "last_inference": stats.last_unix_ms,
        "inference_count": ok,
        "execution_count": ok,
        "inference_stats": {
            "success": _duration(ok, stats.ok_seconds),
            "fail": _duration(stats.errors, stats.error_seconds),
            "queue": _duration(ok, stage.get("queue", 0.0)),
            "compute_input": _duration(ok, 0.0),
            "compute_infer": _duration(ok, stage.get("inference", 0.0)),
            "compute_output": _duration(ok, 0.0),
            "cache_hit": _duration(0, 0.0),
            "cache_miss": _duration(0, 0.0),
        },
        "batch_stats": [],
    }


def statistics(
    service: ServiceAPI, metrics: Metrics | None, name: str | None, version: str | None
) -> dict[str, Any]:
    """Triton's statistics document for one model (or every one when ``name`` is None);
    the gRPC ModelStatistics answer is the same document."""
    infos = service.list_models() if name is None else [service.model_info(name, version)]
    snapshot = metrics.snapshot() if metrics is not None else {}
    return {"model_stats": [model_stats(i, snapshot.get((i.kind, i.name))) for i in infos]}


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
