"""Triton's system shared-memory extension over HTTP (what tritonclient.http calls).

- ``GET /v2/systemsharedmemory[/region/{name}]/status``: ``[{name, key, offset, byte_size}]``
- ``POST /v2/systemsharedmemory/region/{name}/register`` with ``{"key", "offset",
  "byte_size"}``
- ``POST /v2/systemsharedmemory[/region/{name}]/unregister`` (no name: every region)
- the same three under ``/v2/cudasharedmemory``, answered as a CPU-only Triton does
  (`wasmgate.runtime.shm.cuda`): no region, unregister succeeds, register is refused

Every call, and every inference naming a region, is checked by `Regions.allow`: the
extension on, a loopback peer, the token when one is set (docs/shared-memory.md). The
peer is the socket's, never a client's header (with workers, the one the worker that took
the connection wrote: `wasmgate.runtime.http.forward.peer_address`).
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from wasmgate.runtime.errors import BadRequest
from wasmgate.runtime.http import edge
from wasmgate.runtime.http.forward import peer_address
from wasmgate.runtime.shm.attach import Attachment
from wasmgate.runtime.shm.cuda import refuse_register
from wasmgate.runtime.shm.registry import Regions

REGIONS = web.AppKey("shm_regions", Regions)
"""The registered regions (`wasmgate.runtime.shm.registry`), owned by the composition root."""
MAX_REGISTER_BYTES = 4096
"""A register body is three small fields; anything longer is refused unread."""


def _peer(request: web.Request) -> str | None:
    return peer_address(request)


def attachment(request: web.Request) -> Attachment:
    """This request's use of shared memory (`Attachment`; nothing is checked until a tensor
    names a region)."""
    authorization = request.headers.get("Authorization")
    return Attachment(request.app.get(REGIONS), _peer(request), authorization)


def _allowed(request: web.Request) -> Regions:
    regions = request.app.get(REGIONS)
    if regions is None:
        raise BadRequest("system shared memory is not served here")
    regions.allow(_peer(request), request.headers.get("Authorization"))
    return regions


async def status(request: web.Request) -> web.Response:
    regions = _allowed(request)
    return web.json_response(regions.status(request.match_info.get("name")))


async def register(request: web.Request) -> web.Response:
    regions = _allowed(request)
    if (request.content_length or 0) > MAX_REGISTER_BYTES:
        raise BadRequest(f"a register body is at most {MAX_REGISTER_BYTES} bytes")
    doc = _body(await request.content.read(MAX_REGISTER_BYTES + 1))
    name = request.match_info["name"]
    regions.register(name, doc.get("key"), doc.get("offset", 0), doc.get("byte_size"))
    return web.json_response({})


def _body(raw: bytes) -> dict[str, Any]:
    if len(raw) > MAX_REGISTER_BYTES:
        raise BadRequest(f"a register body is at most {MAX_REGISTER_BYTES} bytes")
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BadRequest(f"register body is not valid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise BadRequest("register body must be a JSON object with key, offset and byte_size")
    return doc


async def unregister(request: web.Request) -> web.Response:
    regions = _allowed(request)
    regions.unregister(request.match_info.get("name"))
    return web.json_response({})


async def cuda_status(request: web.Request) -> web.Response:
    _allowed(request)
    return web.json_response([])


async def cuda_register(request: web.Request) -> web.Response:
    _allowed(request)
    raise refuse_register(request.match_info["name"])


async def cuda_unregister(request: web.Request) -> web.Response:
    _allowed(request)
    return web.json_response({})


def setup(app: web.Application) -> None:
    """Register the routes (they answer 400 until ``app[REGIONS]`` is set)."""
    router = edge.routes(app)
    base = "/v2/systemsharedmemory"
    router.add_get(f"{base}/status", status)
    router.add_get(f"{base}/region/{{name}}/status", status)
    router.add_post(f"{base}/region/{{name}}/register", register)
    router.add_post(f"{base}/unregister", unregister)
    router.add_post(f"{base}/region/{{name}}/unregister", unregister)
    cuda = "/v2/cudasharedmemory"
    router.add_get(f"{cuda}/status", cuda_status)
    router.add_get(f"{cuda}/region/{{name}}/status", cuda_status)
    router.add_post(f"{cuda}/region/{{name}}/register", cuda_register)
    router.add_post(f"{cuda}/unregister", cuda_unregister)
    router.add_post(f"{cuda}/region/{{name}}/unregister", cuda_unregister)
