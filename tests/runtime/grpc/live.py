"""The real gRPC listener over a test `ServiceAPI`, on a loopback port in its own thread."""

from __future__ import annotations

from typing import Any

from tests.fixtures.loop_thread import LoopThread
from wasmgate.runtime.grpc.server import GrpcListener
from wasmgate.runtime.ops.config import GrpcSettings, HttpSettings, Settings
from wasmgate.runtime.ops.metrics import Metrics
from wasmgate.runtime.served.api import ServiceAPI


def settings(**grpc: Any) -> Settings:
    """Loopback, a free port, and the given ``grpc`` section keys."""
    return Settings(
        http=HttpSettings(host="127.0.0.1"), grpc=GrpcSettings(port=0, **grpc), drain_s=1
    )


class LiveGrpc(LoopThread):
    """``with LiveGrpc(service, metrics) as live: live.url``; stops the listener on exit."""

    def __init__(
        self, service: ServiceAPI, metrics: Metrics | None, config: Settings | None = None
    ) -> None:
        super().__init__("live-grpc")
        self.listener = GrpcListener(config or settings(), service, metrics)

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.listener.port}"

    def serving(self) -> GrpcListener:
        return self.listener
