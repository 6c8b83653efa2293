"""The gRPC listener: a ``grpc.aio`` server on the daemon's event loop.

`GrpcListener` is an async context manager the composition root enters once the service
exists: it binds ``http.host:grpc.port`` (TLS with ``http.tls_cert``/``http.tls_key`` when
both are set), starts, and on exit stops, giving in-flight RPCs ``drain_s``. grpc's
``SO_REUSEPORT`` default is turned off, so a second daemon on the same port fails to start
instead of silently sharing it. A data-plane worker's listener (``gateway`` given) turns it
on: each worker binds the gateway's port and the kernel spreads connections over them; its
supervisor holds the port meanwhile (`wasmgate.runtime.supervisor.ports`) so that nothing
outside the gateway shares it.
"""

from __future__ import annotations

import logging
from types import TracebackType
from typing import Any

import grpc

from wasmgate._compat import Self
from wasmgate.runtime.dataplane.repository import Repository
from wasmgate.runtime.errors import ConfigError
from wasmgate.runtime.grpc import shm
from wasmgate.runtime.grpc.gateway import Gateway
from wasmgate.runtime.grpc.kserve_v2_repository_service_pb2_grpc import (
    add_GRPCInferenceServiceServicer_to_server as add_repository_rpcs,
)
from wasmgate.runtime.grpc.kserve_v2_service_pb2_grpc import (
    add_GRPCInferenceServiceServicer_to_server,
)
from wasmgate.runtime.grpc.repository import RepositoryServicer
from wasmgate.runtime.grpc.servicer import InferenceServicer
from wasmgate.runtime.ops.config import Settings
from wasmgate.runtime.ops.metrics import Metrics
from wasmgate.runtime.ops.tracing import Tracing
from wasmgate.runtime.served.api import ServiceAPI
from wasmgate.runtime.shm.registry import Regions

log = logging.getLogger("wasmgate.grpc")


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _credentials(settings: Settings) -> Any:
    cert, key = settings.http.tls_cert, settings.http.tls_key
    if cert is None or key is None:
        return None
    try:
        pair = (key.read_bytes(), cert.read_bytes())
    except OSError as e:
        raise ConfigError(f"gRPC TLS: cannot read {e.filename}: {e.strerror}") from e
    return grpc.ssl_server_credentials([pair])


class GrpcListener:
    """Owns one ``grpc.aio.Server``; ``port`` is the bound port once entered."""

    def __init__(
        self,
        settings: Settings,
        service: ServiceAPI,
        metrics: Metrics | None,
        tracing: Tracing | None = None,
        regions: Regions | None = None,
        *,
        repository: Repository | None = None,
        gateway: Gateway | None = None,
    ) -> None:
        """``repository``: serve Triton's model repository RPCs over it (else they answer
        UNIMPLEMENTED). ``gateway``: this is a data-plane worker's listener, on the port its
        siblings share; the calls every worker must apply go through ``gateway``."""
        self._settings = settings
        self._servicer = InferenceServicer(service, metrics, tracing, regions)
        self._regions = regions
        self._gateway = gateway
        self._repository = None if repository is None else RepositoryServicer(repository, gateway)
        self._server: Any = None
        self.port = 0
        self.tls = False

    def _bind(self, server: Any) -> int:
        http, port = self._settings.http, self._settings.grpc.port or 0
        address = _address(http.host, port)
        credentials = _credentials(self._settings)
        self.tls = credentials is not None
        try:
            if credentials is None:
                bound: int = server.add_insecure_port(address)
            else:
                bound = server.add_secure_port(address, credentials)
        except RuntimeError as e:  # grpc raises RuntimeError for a port it cannot bind
            raise ConfigError(f"cannot listen on {address} for gRPC: {e}; set grpc.port") from e
        if bound == 0:  # older grpc versions answer 0 instead of raising
            raise ConfigError(f"cannot listen on {address} for gRPC; set grpc.port")
        return bound

    async def __aenter__(self) -> Self:
        size = self._settings.grpc.max_message_bytes
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", size),
                ("grpc.max_send_message_length", size),
                ("grpc.so_reuseport", int(self._gateway is not None)),
            ],
            maximum_concurrent_rpcs=self._settings.grpc.max_concurrent_rpcs,
        )
        # The generated registration is untyped (grpcio-tools writes no annotations).
        add_GRPCInferenceServiceServicer_to_server(self._servicer, server)  # type: ignore[no-untyped-call]
        server.add_generic_rpc_handlers((shm.handler(self._regions, self._gateway),))
        if self._repository is not None:  # a second part of the same service (see its proto)
            add_repository_rpcs(self._repository, server)  # type: ignore[no-untyped-call]
        self.port = self._bind(server)
        await server.start()
        self._server = server
        host = self._settings.http.host
        log.info("gRPC listening", extra={"address": _address(host, self.port), "tls": self.tls})
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop(self._settings.drain_s)

    async def stop(self, grace_s: float) -> None:
        """Stop accepting and refuse new RPCs at once; those running get ``grace_s`` (a
        worker that is replaced stops here while its HTTP side stops, before its service
        drains)."""
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace_s)

    def status(self) -> dict[str, object]:
        """The ``grpc`` section of ``/v1/status``."""
        return {"port": self.port, "tls": self.tls}
