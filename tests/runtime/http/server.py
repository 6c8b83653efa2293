"""A real aiohttp server on a loopback port, in its own thread, for synchronous clients."""

from __future__ import annotations

import contextlib
import http.client
from collections.abc import AsyncIterator
from dataclasses import dataclass

from aiohttp import web

from tests.fixtures.loop_thread import LoopThread
from wasmgate.runtime.http import errors, status, v2
from wasmgate.runtime.http import metrics as metrics_routes
from wasmgate.runtime.http.keys import METRICS, SERVICE
from wasmgate.runtime.ops.metrics import Metrics
from wasmgate.runtime.served.api import ServiceAPI

MAX_BODY = 1024 * 1024


def build_app(service: ServiceAPI, metrics: Metrics) -> web.Application:
    """Wired the way the composition root wires it (errors, V2, adapters, metrics, status)."""
    app = web.Application(client_max_size=MAX_BODY)
    app[SERVICE] = service
    app[METRICS] = metrics
    errors.setup(app)
    v2.setup(app)
    metrics_routes.setup(app)
    status.setup(app)
    return app


@dataclass
class Reply:
    status: int
    headers: http.client.HTTPMessage
    body: bytes


class LiveServer(LoopThread):
    """``with LiveServer(app) as server: server.url``; stops and cleans up the app on exit."""

    def __init__(self, app: web.Application) -> None:
        super().__init__("live-server")
        self.app = app
        self.port = 0

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.port}"

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        runner = web.AppRunner(self.app)
        await runner.setup()
        try:
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            self.port = runner.addresses[0][1]
            yield
        finally:
            await runner.cleanup()

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        """One plain HTTP request (no client-side cleverness: what is sent is what you see)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            response = conn.getresponse()
            return Reply(response.status, response.headers, response.read())
        finally:
            conn.close()
