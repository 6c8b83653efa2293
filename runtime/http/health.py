"""Liveness and readiness: ``{"live": true}`` / ``{"ready": true}`` (the kserve SDK wants JSON)."""

from __future__ import annotations

from aiohttp import web


async def live(_request: web.Request) -> web.Response:
    return web.json_response({"live": True})


async def ready(_request: web.Request) -> web.Response:
    return web.json_response({"ready": True})


def setup(app: web.Application) -> None:
    app.router.add_get("/v2/health/live", live)
    app.router.add_get("/v2/health/ready", ready)
