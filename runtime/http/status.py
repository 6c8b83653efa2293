"""The status page: ``GET /`` (static HTML + JS, no build step) fed by ``GET /v1/status``.

``/v1/status`` joins the service's `list_models()` (version, bundle, EP, precision, ready)
with the request counters and recent latency of `Metrics.snapshot()`, the recent failed
requests (``errors``: `wasmgate.runtime.ops.failures`), what needs attention while ready
(``attention``: `wasmgate.runtime.http.attention`) and the optional status sections other
components register (MQTT connection, cloud breaker, ...):

    status.add_provider(app, "mqtt", bridge.status)   # () -> JSON-able mapping

A provider that raises shows up as ``{"error": "..."}`` in its section; the page stays up.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from importlib.resources import files
from pathlib import Path
from typing import Any

from aiohttp import web

import wasmgate
from wasmgate.runtime.http import edge
from wasmgate.runtime.http.attention import attention
from wasmgate.runtime.http.history import HISTORY, history_ctx
from wasmgate.runtime.http.keys import LIVE, METRICS, SERVICE, STATUS_PROVIDERS, StatusProvider
from wasmgate.runtime.ops.recent import NameStats
from wasmgate.runtime.protocol import jsonio
from wasmgate.runtime.served.api import ModelInfo

log = logging.getLogger(__name__)

STARTED = web.AppKey("status_started", float)
"""``time.monotonic()`` when the status routes were set up (for the uptime figure)."""


def static_dir() -> Path:
    return Path(str(files("wasmgate.runtime.http") / "static"))


def add_provider(app: web.Application, name: str, provider: StatusProvider) -> None:
    """Show ``provider()`` as section ``name`` of ``/v1/status``.

    After `setup` ran, this only mutates the existing dict, so it is fine from a cleanup_ctx
    at start-up (no change to a frozen app)."""
    app.setdefault(STATUS_PROVIDERS, {})[name] = provider


def _model_row(info: ModelInfo, stats: NameStats | None, calls: int | None) -> dict[str, Any]:
    """``adapter_calls``: runs of a model that adapters started through wasi-nn (None for an
    adapter); ``requests`` counts only what came to the model directly (V2, gRPC)."""
    row: dict[str, Any] = {
        "name": info.name,
        "kind": info.kind,
        "version": info.version,
        "bundle": info.bundle,
        "platform": info.platform,
        "provider": info.details.get("provider", ""),
        "precision": info.details.get("precision", ""),
        # Where the nodes run (EP and share) and every fallback taken, in the EPs' words.
        "placement": info.details.get("placement", ""),
        "notes": info.details.get("notes", ""),
        "ready": info.ready,
        "max_batch_size": info.max_batch_size,
        "requests": 0,
        "adapter_calls": calls if info.kind == "model" else None,
        "errors": 0,
        "p50_ms": None,
        "p99_ms": None,
        "last_ms": None,
        "sources": {},
    }
    if stats is not None:
        row |= {
            "requests": stats.requests,
            "errors": stats.errors,
            "p50_ms": stats.p50_ms,
            "p99_ms": stats.p99_ms,
            "last_ms": stats.last_ms,
            "sources": dict(stats.sources),
        }
    return row


def _components(app: web.Application) -> dict[str, Any]:
    sections: dict[str, Any] = {}
    for name, provider in app.get(STATUS_PROVIDERS, {}).items():
        try:
            sections[name] = dict(provider())
        except Exception as exc:
            log.warning("status provider %r failed: %s", name, exc)
            sections[name] = {"error": f"{type(exc).__name__}: {exc}"}
    return sections


def _history(app: web.Application) -> dict[str, Any] | None:
    history = app.get(HISTORY)
    if history is None:
        return None
    if history.due():  # nobody looked for a while, or the first look: a fresh point now
        history.sample()
    return history.as_json()


def _gateway(app: web.Application) -> str | None:
    """The gateway id (``mqtt.gateway_id``, else the host name): the topics, the fleet and
    the page's title name the gateway by it, so several gateways' tabs tell apart."""
    live = app.get(LIVE)
    return live.settings.mqtt.resolved_gateway_id() if live is not None else None


async def status_json(request: web.Request) -> web.Response:
    body = document(request.app)
    return web.json_response(body, headers={"Cache-Control": "no-store"}, dumps=jsonio.dumps_text)


def document(app: web.Application) -> dict[str, Any]:
    """This process's ``/v1/status`` document."""
    service = app.get(SERVICE)
    metrics = app.get(METRICS)
    snapshot = metrics.snapshot() if metrics is not None else {}
    calls = metrics.model_calls.counts() if metrics is not None else {}
    infos = service.list_models() if service is not None else []
    components = _components(app)
    return {
        "name": "wasmgate",
        "gateway": _gateway(app),
        "version": wasmgate.__version__,
        "ready": bool(service is not None and service.ready),
        "uptime_s": round(time.monotonic() - app[STARTED], 1),
        "time": time.time(),
        "models": [
            _model_row(info, snapshot.get((info.kind, info.name)), calls.get(info.name, 0))
            for info in infos
        ],
        "components": components,
        "attention": attention(components),
        "errors": metrics.failures.as_json() if metrics is not None else None,
        "history": _history(app),
    }


# A fixed list rather than a static directory route: no request path ever becomes a file
# path, and it works where the package files are symlinks (an editable install), which
# aiohttp's static route refuses to follow.
_ASSETS = (
    "status.css", "format.js", "charts.js", "components.js", "attention.js", "fleet.js",
    "status.js",
)  # fmt: skip


def _file(name: str) -> Callable[[web.Request], Awaitable[web.FileResponse]]:
    async def serve(_request: web.Request) -> web.FileResponse:
        return web.FileResponse(static_dir() / name, headers={"Cache-Control": "no-cache"})

    return serve


def setup(app: web.Application) -> None:
    """``GET /``, ``GET /static/*`` and ``GET /v1/status``.

    Reads ``app[SERVICE]`` and, when present, ``app[METRICS]`` and ``app[STATUS_PROVIDERS]``.
    """
    routes = edge.routes(app)
    app[STARTED] = time.monotonic()
    app.setdefault(STATUS_PROVIDERS, {})
    app.cleanup_ctx.append(history_ctx)
    routes.add_get("/", _file("index.html"))
    routes.add_get("/v1/status", status_json)
    for name in _ASSETS:
        routes.add_get(f"/static/{name}", _file(name))
