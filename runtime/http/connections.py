"""Connection caps for the HTTP listener: a total cap and a per-peer cap, fair under attack.

aiohttp accepts every connection and keeps a half-sent request open until its keep-alive
timer (``http.header_timeout_s``) fires; thousands of slowloris sockets exhaust the file
descriptors and lock every client out. `ConnectionGuard` wraps aiohttp's protocol factory:

- a peer (IP address) already holding ``max_connections_per_peer`` connections makes room by
  losing its own oldest idle one, or is refused;
- at ``max_connections`` the oldest idle connection of the peer holding the most is closed,
  so an attacker's sockets are what goes, not a quiet client's one connection.

"Idle" means no request is being answered on it (waiting for headers, or kept alive);
`ConnectionGuard.mark` (called by `wasmgate.runtime.http.edge`) marks the connections
whose request is in a handler. A refused
connection gets a bare ``503`` and is closed.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import weakref
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, cast

from aiohttp import web

log = logging.getLogger("wasmgate.http")

REFUSED = b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class _Guarded(asyncio.Protocol):
    """Forwards every protocol callback to aiohttp's handler once the guard admitted it."""

    def __init__(self, guard: ConnectionGuard, inner: asyncio.Protocol) -> None:
        self._guard = guard
        self.inner = inner
        self.transport: asyncio.Transport | None = None
        self.peer = ""
        self.busy = 0
        self.admitted = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # a stream server's transport
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = str(peer[0]) if isinstance(peer, tuple) else "-"
        self._guard.settled(self)
        self.admitted = self._guard.admit(self)
        if self.admitted:
            # The transport looks data_received up on every read: the instance attribute
            # hands the bytes to aiohttp's handler directly, a Python frame less per read.
            self.data_received = self.inner.data_received  # type: ignore[method-assign]
            self.inner.connection_made(transport)
        else:
            transport.write(REFUSED)
            transport.close()

    def data_received(self, data: bytes) -> None:
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._guard.settled(self)
        self._guard.release(self)
        if self.admitted:
            self.inner.connection_lost(exc)


class ConnectionGuard:
    """Counts the listener's connections and decides admission (see the module docstring)."""

    def __init__(self, max_connections: int, max_per_peer: int) -> None:
        self._max = max_connections
        self._max_per_peer = max_per_peer
        self._open: dict[_Guarded, None] = {}  # insertion order = age
        self._per_peer: Counter[str] = Counter()
        self._by_transport: dict[Any, _Guarded] = {}
        self._starting: weakref.WeakSet[_Guarded] = weakref.WeakSet()
        """Taken from the listener, not yet made (a TLS handshake under way); weak, so
        one whose handshake fails (asyncio then never calls its protocol) is not kept."""
        self.refused = 0
        self.evicted = 0
        self.closing = False
        """Set when a data-plane worker stops accepting: each answer then closes its
        connection, so clients reconnect to the workers still accepting."""

    def __len__(self) -> int:
        return len(self._open)

    def factory(self, inner: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        """The protocol factory to give ``loop.create_server`` instead of aiohttp's."""

        def guarded() -> asyncio.Protocol:
            conn = _Guarded(self, inner())
            self._starting.add(conn)
            return conn

        return guarded

    def settled(self, conn: _Guarded) -> None:
        """``conn`` is made, or lost before it was."""
        self._starting.discard(conn)

    def unfinished(self) -> int:
        """Connections taken from the listener and not closed yet, those still being set
        up included: what a worker that stopped accepting waits for (`__len__` counts the
        admitted ones only)."""
        return len(self._open) + len(self._starting)

    def admit(self, conn: _Guarded) -> bool:
        if self._per_peer[conn.peer] >= self._max_per_peer and not self._evict(conn.peer):
            self.refused += 1
            return False
        if len(self._open) >= self._max and not self._evict(self._busiest_peer()):
            self.refused += 1
            return False
        self._open[conn] = None
        self._per_peer[conn.peer] += 1
        self._by_transport[conn.transport] = conn
        return True

    def release(self, conn: _Guarded) -> None:
        """Stop counting ``conn`` (closed, or being closed to make room)."""
        if self._open.pop(conn, False) is False:
            return
        self._by_transport.pop(conn.transport, None)
        self._per_peer[conn.peer] -= 1
        if self._per_peer[conn.peer] <= 0:
            del self._per_peer[conn.peer]

    def _busiest_peer(self) -> str:
        return self._per_peer.most_common(1)[0][0] if self._per_peer else ""

    def _evict(self, peer: str) -> bool:
        """Close ``peer``'s oldest idle connection; False when it has none."""
        for conn in self._open:
            if conn.peer == peer and not conn.busy and conn.transport is not None:
                self.release(conn)  # counted out now: the newcomer takes its place
                self.evicted += 1
                conn.transport.abort()  # aiohttp's handler hears of it in connection_lost
                return True
        return False

    def mark(self, request: web.Request, delta: int) -> None:
        conn = self._by_transport.get(request.transport)
        if conn is not None:
            conn.busy += delta


class GuardedSite(web.TCPSite):
    """aiohttp's TCP site with `ConnectionGuard` in front of its protocol factory."""

    def __init__(self, runner: web.BaseRunner, host: str, port: int, guard: ConnectionGuard,
                 **kw: Any) -> None:  # fmt: skip
        super().__init__(runner, host, port, **kw)
        self._guard = guard

    async def start(self) -> None:
        self._server = await asyncio.get_running_loop().create_server(
            await _guarded_factory(self, self._runner, self._guard),
            self._host,
            self._port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
        )
        sockets = self._server.sockets
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port

    async def stop(self) -> None:
        await _stop_listening(self._server)
        await super().stop()


class GuardedSockSite(web.SockSite):
    """aiohttp's site over a socket already listening (a data-plane worker's, inherited from
    the supervisor), with `ConnectionGuard` in front of its protocol factory."""

    def __init__(self, runner: web.BaseRunner, sock: socket.socket, guard: ConnectionGuard,
                 **kw: Any) -> None:  # fmt: skip
        super().__init__(runner, sock, **kw)
        self._guard = guard

    async def start(self) -> None:
        self._server = await asyncio.get_running_loop().create_server(
            await _guarded_factory(self, self._runner, self._guard),
            sock=self._sock, ssl=self._ssl_context,
            backlog=self._backlog,
        )  # fmt: skip

    async def stop(self) -> None:
        await _stop_listening(self._server)
        await super().stop()


async def _guarded_factory(
    site: web.BaseSite, runner: web.BaseRunner, guard: ConnectionGuard
) -> Callable[[], asyncio.Protocol]:
    """Register ``site`` with ``runner``; the runner's protocol factory behind ``guard``."""
    await web.BaseSite.start(site)
    server = runner.server
    if server is None:
        raise RuntimeError("set the runner up before starting its site")
    return guard.factory(server)


async def _stop_listening(server: asyncio.AbstractServer | None) -> None:
    """Stop reading the server's listeners, then give the connections already taken from
    them a turn of the loop to reach their protocols, before the server is closed.

    CPython's accept task attaches each accepted connection to its server on the loop's
    next turn; one whose server closed first is neither served nor closed (the attach
    asserts and the socket lingers until the process ends: its client, request sent, got a
    reset). A worker being replaced closes its server under load, so this turn matters; what
    is still in the kernel's queue stays there for the sibling sharing the listener."""
    if server is None:
        return
    loop = asyncio.get_running_loop()
    for sock in getattr(server, "sockets", ()):
        loop.remove_reader(sock.fileno())
    await asyncio.sleep(0)
