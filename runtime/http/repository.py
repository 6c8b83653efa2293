"""Triton's model repository extension over HTTP (`wasmgate.runtime.dataplane.repository`).

- ``POST /v2/repository/index``: body empty or ``{"ready": true}`` (READY ones only);
  answers a JSON list of ``{"name", "version", "state", "reason"}``.
- ``POST /v2/repository/models/{name}/load``: serve a model or adapter again; 200, empty.
- ``POST /v2/repository/models/{name}/unload``: stop serving it; 200, empty.

All three need the management token (``Authorization: Bearer …``), checked before the body
is read; the body's JSON part is bounded by ``http.max_json_bytes``.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from wasmgate.runtime.dataplane.repository import Repository
from wasmgate.runtime.errors import BadRequest
from wasmgate.runtime.http import edge
from wasmgate.runtime.http.common import check_json_size, read_body
from wasmgate.runtime.http.keys import LIVE, REGISTRY


def _repository(request: web.Request) -> Repository:
    """The extension on this app's table, authorized (a stateless view: built per call)."""
    live = request.app[LIVE]
    repository = Repository(request.app[REGISTRY].table,
                            lambda: live.settings.http.management_token)  # fmt: skip
    repository.authorize(request.headers.get("Authorization"), request.remote)
    return repository


async def _document(request: web.Request) -> dict[str, Any]:
    check_json_size(request.content_length, request)
    body = await read_body(request)
    check_json_size(len(body), request)
    if not body.strip():
        return {}
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BadRequest(f"repository request is not valid JSON: {e}") from None
    except RecursionError:
        raise BadRequest("repository request is nested too deeply") from None
    if not isinstance(doc, dict):
        raise BadRequest(f"repository request must be a JSON object, got {type(doc).__name__}")
    return doc


def _parameters(doc: dict[str, Any]) -> dict[str, Any]:
    params = doc.get("parameters") or {}
    if not isinstance(params, dict):
        raise BadRequest("'parameters' must be an object")
    return params


async def index(request: web.Request) -> web.Response:
    repository = _repository(request)
    ready = (await _document(request)).get("ready", False)
    if not isinstance(ready, bool):
        raise BadRequest("'ready' must be true or false")
    rows = [
        {"name": e.name, "version": e.version, "state": e.state, "reason": e.reason}
        for e in repository.index(ready_only=ready)
    ]
    return web.json_response(rows)


async def load(request: web.Request) -> web.Response:
    repository = _repository(request)
    params = _parameters(await _document(request))
    repository.load(request.match_info["model"], params)
    return web.Response()


async def unload(request: web.Request) -> web.Response:
    repository = _repository(request)
    params = _parameters(await _document(request))
    repository.unload(request.match_info["model"], params)
    return web.Response()


def setup(app: web.Application) -> None:
    """Register the routes; they read ``app[REGISTRY]`` and ``app[LIVE]`` per request."""
    routes = edge.routes(app)
    routes.add_post("/v2/repository/index", index)
    routes.add_post("/v2/repository/models/{model}/load", load)
    routes.add_post("/v2/repository/models/{model}/unload", unload)
