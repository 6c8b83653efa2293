"""A data-plane worker's door to the control plane: what it does not serve itself.

With ``[workers] count`` > 1 each worker accepts on the gateway's port and serves the data
plane itself (`LOCAL_ROUTES`: inference, model metadata and readiness, health). Every other
request that reaches it from outside — the status page, ``/metrics``, the management and
repository APIs, shared-memory registration, fleet documents — is the whole gateway's
business and goes, as it came, to the supervisor's Unix socket, whose answer goes back.
Requests on the worker's own Unix socket (the supervisor's probes and fan-out) are served
locally: that is how the supervisor applies a management call on every worker.
"""

from __future__ import annotations

import logging

import aiohttp
from aiohttp import web

from wasmgate._compat import Self
from wasmgate.runtime.errors import NotReady

__all__ = ["LOCAL_ROUTES", "Forwarder"]

log = logging.getLogger("wasmgate.forward")

LOCAL_ROUTES = frozenset(
    {
        "/v2/models/{model}/infer",
        "/v2/models/{model}/versions/{version}/infer",
        "/v1/adapters/{name}",
        "/v2",
        "/v2/health/live",
        "/v2/health/ready",
        "/v2/models/{model}",
        "/v2/models/{model}/ready",
        "/v2/models/{model}/config",
        "/v2/models/{model}/versions/{version}",
        "/v2/models/{model}/versions/{version}/ready",
        "/v2/models/{model}/versions/{version}/config",
        "/v1/outcomes",
    }
)
"""What a worker answers itself, from its own copy of what the gateway serves."""

_HOP = frozenset(
    {
        "connection", "keep-alive", "transfer-encoding", "te", "upgrade", "trailer",
        "proxy-authorization", "proxy-authenticate", "content-length", "content-encoding",
    }
)  # fmt: skip


class Forwarder:
    """Sends a request on to the supervisor's socket; one connection pool per worker."""

    def __init__(self, control: str, timeout_s: float) -> None:
        self._control = control
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._http: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Self:
        self._http = aiohttp.ClientSession(
            connector=aiohttp.UnixConnector(path=self._control, limit=32),
            timeout=self._timeout,
            auto_decompress=False,
        )
        return self

    async def __aexit__(self, *_exc: object) -> None:
        if self._http is not None:
            await self._http.close()

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        if self._http is None:
            raise NotReady("the worker is stopping")
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        peer = request.remote or ""
        headers["X-Forwarded-For"] = peer
        body = request.content.iter_chunked(1 << 16) if request.body_exists else None
        if request.content_length is not None:
            headers["Content-Length"] = str(request.content_length)
        try:
            async with self._http.request(
                request.method, f"http://gateway{request.path_qs}", headers=headers, data=body
            ) as answer:
                data = await answer.read()
                out = {k: v for k, v in answer.headers.items() if k.lower() not in _HOP}
                return web.Response(status=answer.status, body=data, headers=out)
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            log.warning("control plane unreachable: %s", e)
            raise NotReady(f"the gateway's control plane is unavailable: {e}") from e


def from_outside(request: web.Request) -> bool:
    """True on the public listener (a TCP peer), False on the worker's own Unix socket."""
    transport = request.transport
    return transport is not None and not isinstance(transport.get_extra_info("sockname"), str)
