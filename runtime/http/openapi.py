"""``GET /openapi.json``: the OpenAPI 3.0 description of the daemon's HTTP API.

The document is package data (``openapi.json`` next to this module), written by hand to
match the routes; ``tests/reliability/test_openapi.py`` drives the daemon with
schemathesis from it.
"""

from __future__ import annotations

from importlib import resources

from aiohttp import web

from wasmgate.runtime.http import edge


def document() -> bytes:
    return (
        resources.files(__package__ or "wasmgate.runtime.http")
        .joinpath("openapi.json")
        .read_bytes()
    )


async def openapi(_request: web.Request) -> web.Response:
    return web.Response(body=document(), content_type="application/json")


def setup(app: web.Application) -> None:
    edge.routes(app).add_get("/openapi.json", openapi)
