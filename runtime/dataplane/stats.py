"""Triton's statistics document, the same over HTTP (``…/stats``) and gRPC (ModelStatistics).

Built from `Metrics.snapshot()` (answered/failed counts and summed latencies since start).
"""

from __future__ import annotations

from typing import Any

from wasmgate.runtime.ops.metrics import Metrics
from wasmgate.runtime.ops.recent import NameStats
from wasmgate.runtime.served.api import ModelInfo, ServiceAPI


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
