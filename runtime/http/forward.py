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

import base64
import logging
import re
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web

from wasmgate._compat import Self
from wasmgate.runtime.errors import NotReady

__all__ = [
    "LOCAL_ROUTES",
    "PEER_HEADER",
    "RETIRED_PATH",
    "WORKER_HEADER",
    "Forwarder",
    "from_outside",
    "peer_address",
]

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
        "x-wasmgate-peer",
    }
)  # fmt: skip
FAN_OUT = re.compile(
    r"^/v2/repository/models/[^/]+/(load|unload)$"
    r"|^/v2/(system|cuda)sharedmemory/(region/[^/]+/)?(register|unregister)$"
    r"|^/v1/bundles/[^/]+/variables$"
)
"""Calls that change a worker's memory, not the store: once the supervisor applied one, it
sends it to every worker (``POST`` `FAN_OUT_PATH` on its socket, with the body as sent)."""
FAN_OUT_PATH = "/v1/fan-out"
RETIRED_PATH = "/v1/retired"
"""``POST``: a stopping worker's final ``/metrics`` exposition, its counts kept by the
supervisor (`Forwarder.retire`)."""
REPLAY_HEADERS = ("Authorization", "Content-Type", "Host")
WORKER_HEADER = "X-Wasmgate-Worker"
"""``GET`` `FAN_OUT_PATH`: the private socket of the worker catching up."""
PEER_HEADER = "X-Wasmgate-Peer"
"""The client's address, set by the worker that forwarded a request (never the client's)."""


class Forwarder:
    """Sends a request on to the supervisor's socket; one connection pool per worker."""

    def __init__(self, control: str, timeout_s: float, private: str = "") -> None:
        """``private``: this worker's own socket (`catch_up` applies calls through it)."""
        self._control, self._private = control, private
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

    async def _fan_out(self, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
        """Ask the supervisor to apply the call it just answered on every worker (this one
        included) before the client hears back, so its next request finds it anywhere."""
        assert self._http is not None  # noqa: S101 - checked by the caller
        replay = {k: headers[k] for k in (*REPLAY_HEADERS, PEER_HEADER) if k in headers}
        replay |= {"X-Wasmgate-Method": method, "X-Wasmgate-Path": path}
        async with self._http.post(
            f"http://gateway{FAN_OUT_PATH}", headers=replay, data=body
        ) as answer:
            if answer.status >= 300:
                log.warning("fan-out of %s %s refused: %s", method, path, answer.status)

    async def apply(
        self, path: str, body: bytes, *, authorization: str | None, peer: str | None
    ) -> tuple[int, bytes]:
        """``POST path`` (a `FAN_OUT` call another transport received: gRPC's repository and
        shared-memory RPCs) to the supervisor, then to every worker as HTTP's are; the
        supervisor's status and body. Raises `NotReady` when the supervisor is unreachable."""
        if self._http is None:
            raise NotReady("the worker is stopping")
        # Host: a loopback name (the host check guards browsers; the gRPC caller is none).
        headers = {"Content-Type": "application/json", "Host": "localhost", PEER_HEADER: peer or ""}
        if authorization is not None:
            headers["Authorization"] = authorization
        try:
            async with self._http.post(
                f"http://gateway{path}", headers=headers, data=body
            ) as answer:
                status, data = answer.status, await answer.read()
            if status < 300 and FAN_OUT.match(path):
                await self._fan_out("POST", path, headers, body)
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            log.warning("control plane unreachable: %s", e)
            raise NotReady(f"the gateway's control plane is unavailable: {e}") from e
        return status, data

    async def retire(self, exposition: bytes) -> None:
        """Hand this worker's final counts to the supervisor (after its last answer), so
        the gateway's counters do not go back when it has ended."""
        if self._http is None:
            return
        try:
            async with self._http.post(f"http://gateway{RETIRED_PATH}", data=exposition) as answer:
                if answer.status >= 300:
                    log.warning("the supervisor refused this worker's counts: %s", answer.status)
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            log.warning("this worker's counts were not handed over: %s", e)

    async def catch_up(self) -> None:
        """Apply, in order, the calls the supervisor sent every worker so far (`FAN_OUT`:
        repository load/unload, shared-memory regions, variables), through this worker's
        own socket, before it accepts its first client."""
        assert self._http is not None  # noqa: S101 - entered before stage two
        headers = {WORKER_HEADER: self._private}
        async with self._http.get(f"http://gateway{FAN_OUT_PATH}", headers=headers) as answer:
            answer.raise_for_status()
            calls = await answer.json()
        connector = aiohttp.UnixConnector(path=self._private)
        async with aiohttp.ClientSession(connector=connector, timeout=self._timeout) as own:
            for call in calls:
                async with own.request(
                    call["method"], f"http://localhost{call['path']}",
                    data=base64.b64decode(call["body"]), headers=call["headers"],
                ) as done:  # fmt: skip
                    if done.status >= 300:
                        log.warning("catching up: %s %s refused: %s", call["method"],
                                    call["path"], done.status)  # fmt: skip

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        if self._http is None:
            raise NotReady("the worker is stopping")
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        headers[PEER_HEADER] = peer_address(request) or ""
        body = await _body(request)
        if request.content_length is not None and not isinstance(body, bytes):
            headers["Content-Length"] = str(request.content_length)  # not chunked: as sent
        try:
            async with self._http.request(
                request.method, f"http://gateway{request.path_qs}", headers=headers, data=body
            ) as answer:
                data = await answer.read()
                out = {k: v for k, v in answer.headers.items() if k.lower() not in _HOP}
                status = answer.status
            if status < 300 and isinstance(body, bytes | None) and _fans_out(request):
                await self._fan_out(request.method, request.path_qs, headers, body or b"")
            return web.Response(status=status, body=data, headers=out)
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            log.warning("control plane unreachable: %s", e)
            raise NotReady(f"the gateway's control plane is unavailable: {e}") from e


_READ_WHOLE = 1 << 20


async def _body(request: web.Request) -> bytes | AsyncIterator[bytes] | None:
    """A call every worker applies: whole (the supervisor sends it on; such bodies are
    small). Anything else streamed as it comes, so the supervisor sees an upload while it
    arrives (its caps on uploads in progress hold) and never waits for a stalled one here."""
    if not request.body_exists:
        return None
    size = request.content_length
    if _fans_out(request) and size is not None and size <= _READ_WHOLE:
        return await request.content.readexactly(size) if size else b""
    return request.content.iter_chunked(1 << 16)


def peer_address(request: web.Request) -> str | None:
    """The client's IP address: the socket's on the gateway's port; on a private Unix socket
    (a 0700 directory only the supervisor and its workers reach) the address the worker
    that took the connection wrote in `PEER_HEADER`."""
    transport = request.transport
    peer = transport.get_extra_info("peername") if transport is not None else None
    if isinstance(peer, tuple) and peer:
        return str(peer[0])
    if transport is not None and isinstance(transport.get_extra_info("sockname"), str):
        return request.headers.get(PEER_HEADER) or None
    return None


def _fans_out(request: web.Request) -> bool:
    return request.method in ("POST", "PUT", "DELETE") and bool(FAN_OUT.match(request.path))


def from_outside(request: web.Request) -> bool:
    """True on the public listener (a TCP peer), False on the worker's own Unix socket."""
    transport = request.transport
    return transport is not None and not isinstance(transport.get_extra_info("sockname"), str)
