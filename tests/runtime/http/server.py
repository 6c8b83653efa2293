"""A real aiohttp server on a loopback port, in its own thread, for synchronous clients.

tritonclient (gevent) and http.client block, so the server cannot share their thread.
"""

from __future__ import annotations

import asyncio
import http.client
import threading
from dataclasses import dataclass
from types import TracebackType
from typing import Self

from aiohttp import web

from wasmgate.runtime.http import errors, status, v2
from wasmgate.runtime.http import metrics as metrics_routes
from wasmgate.runtime.http.keys import METRICS, SERVICE
from wasmgate.runtime.ops.metrics import Metrics
from wasmgate.runtime.serving.api import ServiceAPI

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


class LiveServer:
    """``with LiveServer(app) as server: server.url``; stops and cleans up the app on exit."""

    def __init__(self, app: web.Application) -> None:
        self.app = app
        self.port = 0
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, name="live-server", daemon=True)

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> Self:
        self._thread.start()
        if not self._ready.wait(10):
            raise TimeoutError("the test server did not start in 10 s")
        if self._error is not None:
            raise self._error
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        runner = web.AppRunner(self.app)
        await runner.setup()
        try:
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            self.port = runner.addresses[0][1]
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            self._ready.set()
            await self._stop.wait()
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
