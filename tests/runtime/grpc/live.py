"""The real gRPC listener over a test `ServiceAPI`, on a loopback port in its own thread.

tritonclient.grpc blocks, so the listener's event loop cannot share its thread.
"""

from __future__ import annotations

import asyncio
import threading
from types import TracebackType
from typing import Any, Self

from wasmgate.runtime.grpc.server import GrpcListener
from wasmgate.runtime.ops.config import GrpcSettings, HttpSettings, Settings
from wasmgate.runtime.ops.metrics import Metrics
from wasmgate.runtime.serving.api import ServiceAPI


def settings(**grpc: Any) -> Settings:
    """Loopback, a free port, and the given ``grpc`` section keys."""
    return Settings(
        http=HttpSettings(host="127.0.0.1"), grpc=GrpcSettings(port=0, **grpc), drain_s=1
    )


class LiveGrpc:
    """``with LiveGrpc(service, metrics) as live: live.url``; stops the listener on exit."""

    def __init__(
        self, service: ServiceAPI, metrics: Metrics | None, config: Settings | None = None
    ) -> None:
        self.listener = GrpcListener(config or settings(), service, metrics)
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, name="live-grpc", daemon=True)

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.listener.port}"

    def __enter__(self) -> Self:
        self._thread.start()
        if not self._ready.wait(10):
            raise TimeoutError("the gRPC test listener did not start in 10 s")
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
        async with self.listener:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            self._ready.set()
            await self._stop.wait()
