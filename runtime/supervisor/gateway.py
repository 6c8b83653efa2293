"""What the supervisor adds to its app so it answers for the whole gateway.

The supervisor's app is the single daemon's, on a private Unix socket the workers forward
to. Two steps wrap its handlers (aiohttp middlewares: they see every forwarded request):
a management call that changes what a worker holds in memory
(`wasmgate.runtime.http.forward.FAN_OUT`), once applied here, comes back from the worker
that forwarded it as ``POST /v1/fan-out`` and goes to every worker (`WorkerPool.fan_out`);
``GET /metrics`` adds the workers' counts to the supervisor's (`merge_expositions`);
``GET /v1/status`` adds their traffic and failures (`merge_status`) and gains
``components.workers`` (with the ports a process outside the gateway listens on too) and,
with gRPC, the gateway's ``components.grpc`` (its workers serve it).
"""

from __future__ import annotations

import asyncio
import base64
import json

import aiohttp
from aiohttp import web
from aiohttp.typedefs import Handler

from wasmgate.runtime.http import status
from wasmgate.runtime.http.forward import (
    FAN_OUT,
    FAN_OUT_PATH,
    PEER_HEADER,
    REPLAY_HEADERS,
    WORKER_HEADER,
)
from wasmgate.runtime.supervisor.children import unix_session
from wasmgate.runtime.supervisor.metrics_merge import merge_expositions
from wasmgate.runtime.supervisor.pool import Call, WorkerPool
from wasmgate.runtime.supervisor.ports import GatewayPorts
from wasmgate.runtime.supervisor.status_merge import merge_status

__all__ = ["install"]


def install(app: web.Application, pool: WorkerPool, ports: GatewayPorts) -> None:
    """Wrap ``app`` (before its runner is set up) to answer for ``pool``'s gateway."""

    @web.middleware
    async def fan_out(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path != FAN_OUT_PATH:
            return await handler(request)
        if request.method == "GET":  # a starting worker catching up
            private = request.headers.get(WORKER_HEADER, "")
            return web.json_response([_doc(c) for c in pool.replay_log(private)])
        method, path = (
            request.headers.get("X-Wasmgate-Method"),
            request.headers.get("X-Wasmgate-Path"),
        )
        if (
            request.method != "POST"
            or method is None
            or path is None
            or not FAN_OUT.match(path.partition("?")[0])
        ):
            raise web.HTTPBadRequest(text="not a call every worker applies")
        keep = (*REPLAY_HEADERS, PEER_HEADER)
        headers = {k: request.headers[k] for k in keep if k in request.headers}
        await pool.fan_out(Call(method, path, await request.read(), headers))
        return web.Response(status=204)

    @web.middleware
    async def gateway_metrics(request: web.Request, handler: Handler) -> web.StreamResponse:
        answer = await handler(request)
        if request.path != "/metrics" or answer.status != 200:
            return answer
        assert isinstance(answer, web.Response)  # noqa: S101 - the metrics route's
        own = answer.body if isinstance(answer.body, bytes) else b""
        texts = await asyncio.gather(*(_scrape(w.private, "/metrics") for w in pool.workers))
        merged = merge_expositions(own.decode(), [t for t in texts if t])
        return web.Response(body=merged, headers={"Content-Type": answer.headers["Content-Type"]})

    @web.middleware
    async def gateway_status(request: web.Request, handler: Handler) -> web.StreamResponse:
        answer = await handler(request)
        if request.path != "/v1/status" or answer.status != 200:
            return answer
        assert isinstance(answer, web.Response)  # noqa: S101 - the status route's
        own = json.loads(answer.body if isinstance(answer.body, bytes) else b"{}")
        texts = await asyncio.gather(*(_scrape(w.private, "/v1/status") for w in pool.workers))
        merged = merge_status(own, [json.loads(t) for t in texts if t])
        return web.json_response(merged, headers={"Cache-Control": "no-store"})

    app.middlewares.extend([fan_out, gateway_metrics, gateway_status])
    status.add_provider(
        app, "workers", lambda: {**pool.describe(), "shared_ports": ports.outside()}
    )
    if ports.grpc_port is not None:
        status.add_provider(app, "grpc", lambda: ports.grpc_status(len(pool.workers)))


def _doc(call: Call) -> dict[str, object]:
    body = base64.b64encode(call.body).decode()
    return {"method": call.method, "path": call.path, "body": body, "headers": call.headers}


async def _scrape(private: str, path: str) -> str:
    try:
        async with (
            unix_session(private, 5.0) as http,
            http.get(f"http://localhost{path}") as answer,
        ):
            return await answer.text() if answer.status == 200 else ""
    except (aiohttp.ClientError, OSError, TimeoutError):
        return ""  # a worker restarting: its counts return with it (they start at 0)
