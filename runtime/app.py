"""The composition root: settings in, a fully wired aiohttp application out."""

from __future__ import annotations

from aiohttp import web

from wasmgate.runtime.config import Settings
from wasmgate.runtime.http import health
from wasmgate.runtime.http.keys import SETTINGS


def build_app(settings: Settings) -> web.Application:
    """Build the aiohttp app; every long-lived resource is owned by a cleanup_ctx entry."""
    app = web.Application(client_max_size=settings.http.max_body_bytes)
    app[SETTINGS] = settings
    health.setup(app)
    return app
