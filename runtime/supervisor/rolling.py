"""Replace the workers after every change of what serves (`WorkerPool.roll`), and let a
management call that made the change wait until every worker serves it.

An install, removal, promotion or abort through the API answers only once the workers
that serve the gateway's port have been replaced, so a client that installs and then asks
is answered by the new version whichever worker takes its request, as with one process.
Changes from elsewhere (the bundle folder, the fleet, expiry) roll the same way; nobody
waits for them.
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import struct
from collections.abc import Callable

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from wasmgate._compat import Self, timeout
from wasmgate.runtime.supervisor.pool import WorkerPool

__all__ = ["CHANGES", "Rolling"]

log = logging.getLogger("wasmgate.supervisor")

CHANGES = re.compile(r"^/v1/bundles(/[^/]+(/promote|/abort)?)?$")
"""The management calls that change what serves (PUT, POST or DELETE on these paths)."""
_SETTLE_S = 300.0
_CREDS = struct.Struct("3i")  # struct ucred: pid, uid, gid


class Rolling:
    def __init__(self, pool: WorkerPool) -> None:
        self._pool = pool
        self._wanted = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None
        self._relaying: int | None = None
        """The pid of the worker that relayed the last change through the API."""
        self.on_settled: list[Callable[[], None]] = []
        """Called once every worker serves what changed (systemd's ``STATUS=``)."""

    def changed(self) -> None:
        """The registry's change hook: a roll is due."""
        self._idle.clear()
        self._wanted.set()

    async def settled(self) -> None:
        """Until no roll is due or running (at most `_SETTLE_S`)."""
        try:
            async with timeout(_SETTLE_S):
                await self._idle.wait()
        except TimeoutError:
            log.warning("workers not replaced after %.0f s; answering anyway", _SETTLE_S)

    async def __aenter__(self) -> Self:
        self._task = asyncio.create_task(self._run(), name="worker-roll")
        return self

    async def __aexit__(self, *_exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            await self._wanted.wait()
            await asyncio.sleep(0.2)  # an install is several changes in a row
            self._wanted.clear()
            log.info("what serves changed: replacing the workers one at a time")
            last, self._relaying = self._relaying, None
            await self._pool.roll(last)
            if not self._wanted.is_set():
                log.info("every worker serves what changed")
                self._idle.set()
                for hook in self.on_settled:
                    hook()

    def middleware(self) -> Middleware:
        """Answer a change made through the API once every worker serves it."""

        @web.middleware
        async def settle(request: web.Request, handler: Handler) -> web.StreamResponse:
            changes = request.method in ("PUT", "POST", "DELETE") and CHANGES.match(request.path)
            if changes:
                # Its worker is replaced last: replaced first, it would have ended (after
                # drain_s) before the others were, taking the client's answer with it.
                self._relaying = peer_pid(request)
            answer = await handler(request)
            if changes and answer.status < 300:
                await self.settled()
            return answer

        return settle


def peer_pid(request: web.Request) -> int | None:
    """The pid of the process at the other end of ``request``'s Unix socket (a worker)."""
    transport = request.transport
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None or sock.family != socket.AF_UNIX:
        return None
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CREDS.size)
    pid, _uid, _gid = _CREDS.unpack(creds)
    return int(pid)
