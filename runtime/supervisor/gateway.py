"""What the supervisor adds to its app so it answers for the whole gateway.

The supervisor's app is the single daemon's, on a private Unix socket the workers forward
to. Two steps wrap its handlers (aiohttp middlewares: they see every forwarded request):
a management call that changes what a worker holds in memory
(`wasmgate.runtime.http.forward.FAN_OUT`), once applied here, comes back from the worker
that forwarded it as ``POST /v1/fan-out`` and goes to every worker (`WorkerPool.fan_out`);
``GET /metrics`` adds the workers' counts to the supervisor's and to those of workers that
have ended (`GatewayCounts`, whose final counts a stopping worker posts to `RETIRED_PATH`);
``GET /v1/status`` adds their traffic and failures (`merge_status`) and gains
``components.workers`` (with the ports a process outside the gateway listens on too) and,
with gRPC, the gateway's ``components.grpc`` (its workers serve it).
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable

import aiohttp
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from wasmgate.runtime.http import status
from wasmgate.runtime.http.forward import (
    FAN_OUT,
    FAN_OUT_PATH,
    PEER_HEADER,
    REPLAY_HEADERS,
    RETIRED_PATH,
    WORKER_HEADER,
)
from wasmgate.runtime.http.variables import DOCUMENT_PATH, VARIABLES
from wasmgate.runtime.supervisor.children import unix_session
from wasmgate.runtime.supervisor.counts import GatewayCounts
from wasmgate.runtime.supervisor.pool import Call, WorkerPool
from wasmgate.runtime.supervisor.ports import GatewayPorts
from wasmgate.runtime.supervisor.rolling import peer_pid
from wasmgate.runtime.supervisor.status_merge import merge_status

__all__ = ["install", "relay_variables"]

Scraped = list[tuple[int, str]]
"""What the running workers answered: (pid, body)."""


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

    counts = GatewayCounts()
    pool.on_exit.append(counts.ended)

    def merged(path: str, merge: Callable[[web.Response, Scraped], web.Response]) -> Middleware:
        """``path``'s answer with every worker's answer to it merged in."""

        @web.middleware
        async def gateway_view(request: web.Request, handler: Handler) -> web.StreamResponse:
            answer = await handler(request)
            if request.path != path or answer.status != 200:
                return answer
            assert isinstance(answer, web.Response)  # noqa: S101 - the route's own
            workers = [(w.pid, w.private) for w in pool.workers if w.pid is not None]
            texts = await asyncio.gather(*(_scrape(private, path) for _, private in workers))
            got = [(pid, t) for (pid, _), t in zip(workers, texts, strict=True) if t]
            return merge(answer, got)

        return gateway_view

    def metrics(own: web.Response, workers: Scraped) -> web.Response:
        text = counts.merge(_body(own).decode(), workers)
        return web.Response(body=text, headers={"Content-Type": own.headers["Content-Type"]})

    gateway_metrics, gateway_status = merged("/metrics", metrics), merged("/v1/status", _status)
    app.middlewares.extend([fan_out, _retired(pool, counts), gateway_metrics, gateway_status])
    status.add_provider(
        app, "workers", lambda: {**pool.describe(), "shared_ports": ports.outside()}
    )
    if ports.grpc_port is not None:
        status.add_provider(app, "grpc", lambda: ports.grpc_status(len(pool.workers)))


def _retired(pool: WorkerPool, counts: GatewayCounts) -> Middleware:
    """``POST`` `RETIRED_PATH`: a stopping worker's final counts (only from a worker of
    this pool, known by the pid at the other end of the Unix socket)."""

    @web.middleware
    async def retired(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path != RETIRED_PATH:
            return await handler(request)
        pid = peer_pid(request)
        if request.method != "POST" or pid is None or not pool.known(pid):
            raise web.HTTPForbidden(text="only a worker of this gateway hands over its counts")
        counts.final(pid, (await request.read()).decode(errors="replace"))
        return web.Response(status=204)

    return retired


def _doc(call: Call) -> dict[str, object]:
    body = base64.b64encode(call.body).decode()
    return {"method": call.method, "path": call.path, "body": body, "headers": call.headers}


def relay_variables(app: web.Application, pool: WorkerPool) -> None:
    """The MQTT variables document the supervisor applied goes to every worker, now and
    later (its workers never subscribe to it: one applier, whatever their connections)."""
    sending: set[asyncio.Task[None]] = set()
    last: list[bytes] = []

    def relay(document: bytes) -> None:
        if last == [document]:
            return  # the retained document again, at a reconnect: already everywhere
        last[:] = [document]
        call = Call("POST", DOCUMENT_PATH, document, {})
        task = asyncio.get_running_loop().create_task(pool.fan_out(call))
        sending.add(task)
        task.add_done_callback(sending.discard)

    app[VARIABLES].on_document.append(relay)


def _status(own: web.Response, workers: Scraped) -> web.Response:
    doc = merge_status(json.loads(_body(own) or b"{}"), [json.loads(t) for _, t in workers])
    return web.json_response(doc, headers={"Cache-Control": "no-store"})


def _body(answer: web.Response) -> bytes:
    return answer.body if isinstance(answer.body, bytes) else b""


async def _scrape(private: str, path: str) -> str:
    try:
        async with (
            unix_session(private, 5.0) as http,
            http.get(f"http://localhost{path}") as answer,
        ):
            return await answer.text() if answer.status == 200 else ""
    except (aiohttp.ClientError, OSError, TimeoutError):
        return ""  # a worker restarting: its counts return with it (they start at 0)
