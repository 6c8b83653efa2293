"""Operator variables over the management API (same bearer token as ``/v1/bundles``).

- ``GET /v1/bundles/{name}/variables``: each declared variable with its value, where the
  value came from (``operator``, ``config``, ``default``), its default and declaration.
- ``PUT /v1/bundles/{name}/variables``: body ``{"<variable>": value, ...}``; ``null`` clears
  the operator's value (back to config or default). 200 with the new state; 400 naming the
  first refused variable (undeclared, signed and not overridable, wrong type, out of range,
  not finite) and nothing changes; 404 for a bundle that is not installed.
"""

from __future__ import annotations

import json

from aiohttp import web

from wasmgate.runtime.bundles.variables import Variables
from wasmgate.runtime.errors import BadRequest, PayloadTooLarge
from wasmgate.runtime.http import edge
from wasmgate.runtime.http.forward import from_outside
from wasmgate.runtime.http.keys import REGISTRY
from wasmgate.runtime.http.manage import guarded

VARIABLES = web.AppKey("variables", Variables)
MAX_BODY = 64 * 1024
DOCUMENT_PATH = "/v1/variables/document"


async def get_variables(request: web.Request) -> web.Response:
    slot = request.app[REGISTRY].table.slot(request.match_info["name"])
    return web.json_response({"variables": request.app[VARIABLES].describe(slot.current)})


async def put_variables(request: web.Request) -> web.Response:
    slot = request.app[REGISTRY].table.slot(request.match_info["name"])
    if request.content_length is not None and request.content_length > MAX_BODY:
        raise PayloadTooLarge(f"variables body over {MAX_BODY} bytes")
    body = await request.content.read(MAX_BODY + 1)
    if len(body) > MAX_BODY:
        raise PayloadTooLarge(f"variables body over {MAX_BODY} bytes")
    try:
        values = json.loads(body)
    except (ValueError, RecursionError) as e:
        raise BadRequest(f"variables: body is not JSON: {e}") from None
    if not isinstance(values, dict):
        raise BadRequest('variables: want a JSON object {"<variable>": value}')
    variables = request.app[VARIABLES]
    variables.update(slot.versions(), values)
    return web.json_response({"variables": variables.describe(slot.current)})


async def post_document(request: web.Request) -> web.Response:
    """A worker's own socket only: the MQTT document its supervisor applied (the supervisor
    alone subscribes to it), applied here by the same all-or-nothing rule."""
    if from_outside(request):
        raise web.HTTPNotFound
    table = request.app[REGISTRY].table
    applied = request.app[VARIABLES].apply_document(table, await request.read())
    return web.Response(status=204 if applied else 409)


def setup_worker(app: web.Application) -> None:
    """The supervisor's route on a worker's app."""
    edge.routes(app).add_post(DOCUMENT_PATH, post_document)


def setup(app: web.Application) -> None:
    """Register the routes; the composition root stores ``app[VARIABLES]``."""
    routes = edge.routes(app)
    routes.add_get("/v1/bundles/{name}/variables", guarded(get_variables))
    routes.add_put("/v1/bundles/{name}/variables", guarded(put_variables))
