"""The gateway's ports as one gateway's: the gRPC port held for the workers, and a watch
for listeners outside the gateway.

With workers, each worker's gRPC server binds the gateway's gRPC port with
``SO_REUSEPORT`` (grpcio binds its own sockets: it cannot take a listening socket from the
supervisor as the HTTP side does). Linux lets any process of the same user join such a
group and take a share of the connections, so the supervisor first checks that the port
is free (a plain bind: what another gateway, or anything else, holds makes it fail), then
keeps a socket of its own bound to it, with ``SO_REUSEPORT`` but never listening (it takes
no connection): from then on a bind without the option — another wasmgate (single or
supervisor, which both check first), almost any server — fails, even while every worker
restarts. What still could join, a same-user process asking for ``SO_REUSEPORT`` itself
(grpcio's default, for one), is found by `GatewayPorts.outside`: the listening sockets on
the gateway's ports (``/proc/net/tcp``, ``tcp6``) that no process of the gateway holds.
The start fails on one; later, ``/v1/status`` names the port under ``attention``.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
from pathlib import Path

from wasmgate.runtime.errors import ConfigError
from wasmgate.runtime.ops.config import Settings
from wasmgate.typed import replace

__all__ = ["GatewayPorts", "listening_inodes"]

log = logging.getLogger("wasmgate.supervisor")

_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's ``st`` column


class GatewayPorts:
    """Owns the gRPC port's reservation (``reserve_grpc`` … ``close``)."""

    def __init__(self, settings: Settings, http_port: int) -> None:
        self._settings = settings
        self.http_port = http_port
        self.grpc_port: int | None = None
        self._held: list[socket.socket] = []

    def reserve_grpc(self) -> Settings:
        """Check and hold ``http.host:grpc.port`` (port 0: the kernel's choice); the
        settings the workers get (with that port). Unchanged without gRPC."""
        settings = self._settings
        if settings.grpc.port is None:
            return settings
        host, port = settings.http.host, settings.grpc.port
        where = f"{host}:{port}"
        try:
            infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                       flags=socket.AI_PASSIVE)  # fmt: skip
            if port:
                for info in infos:
                    _bind(info, reuseport=False).close()  # held by anyone: refused
            for info in infos:
                sock = _bind(info, reuseport=True, port=port)
                self._held.append(sock)
                port = sock.getsockname()[1]
        except OSError as e:
            self.close()
            hint = "address already in use" if e.errno == errno.EADDRINUSE else e.strerror or str(e)
            raise ConfigError(f"cannot listen on {where} for gRPC: {hint}; set grpc.port") from e
        self.grpc_port = port
        return replace(settings, grpc=replace(settings.grpc, port=port))

    def close(self) -> None:
        for sock in self._held:
            sock.close()
        self._held.clear()

    def outside(self) -> list[int]:
        """The gateway's ports on which a process outside the gateway listens too (empty
        when this cannot be known: a worker's descriptors unreadable)."""
        ports = [p for p in (self.http_port, self.grpc_port) if p]
        listening = {port: listening_inodes(port) for port in ports}
        ours = _gateway_sockets()
        if ours is None:
            return []
        return [port for port, inodes in listening.items() if inodes - ours]

    def check(self) -> None:
        """Refuse a start that found another process listening on a port of the gateway."""
        shared = self.outside()
        if shared:
            ports = ", ".join(str(p) for p in shared)
            raise ConfigError(
                f"port {ports} is also listened on by a process outside this gateway "
                f"(SO_REUSEPORT: it would take a share of the connections; "
                f"ss -ltnp 'sport = :{shared[0]}')"
            )

    def grpc_status(self, workers: int) -> dict[str, object]:
        """The gateway's ``grpc`` card: its port, served by the workers."""
        http = self._settings.http
        return {
            "port": self.grpc_port,
            "tls": http.tls_cert is not None and http.tls_key is not None,
            "served_by": f"{workers} workers (SO_REUSEPORT)",
            "shared": self.grpc_port in self.outside(),
        }


def _bind(info: tuple[object, ...], *, reuseport: bool, port: int = 0) -> socket.socket:
    family, kind, proto, _name, addr = info
    sock = socket.socket(family, kind, proto)  # type: ignore[arg-type]
    try:
        if reuseport:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        else:  # the check: as the listener binds, so TIME_WAIT leftovers don't count
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # The held socket has no SO_REUSEADDR: with it, a bound socket that does not listen
        # lets any other SO_REUSEADDR socket bind the port (aiohttp's default, for one).
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # as grpc binds
        sock.bind((addr[0], port or addr[1], *addr[2:]))  # type: ignore[index]
    except OSError:
        sock.close()
        raise
    return sock


def listening_inodes(port: int) -> set[int]:
    """The inodes of the TCP sockets listening on ``port`` in this network namespace."""
    found: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table, encoding="ascii") as rows:  # noqa: PTH123
            next(rows, None)  # the header
            for row in rows:
                cols = row.split()
                if cols[3] == _LISTEN and int(cols[1].rpartition(":")[2], 16) == port:
                    found.add(int(cols[9]))
    return found


def _gateway_sockets() -> set[int] | None:
    """The socket inodes the supervisor and its children hold; None if one is unreadable."""
    own = os.getpid()
    pids = {own, *_children(own)}
    inodes: set[int] = set()
    for pid in pids:
        try:
            links = _links(Path(f"/proc/{pid}/fd"))
        except PermissionError:
            return None
        inodes |= {int(t[8:-1]) for t in links if t.startswith("socket:[")}
    return inodes


def _links(fds: Path) -> list[str]:
    found = []
    with contextlib.suppress(FileNotFoundError):  # the process ended meanwhile
        for fd in fds.iterdir():
            with contextlib.suppress(FileNotFoundError):  # closed meanwhile
                found.append(str(fd.readlink()))
    return found


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            found |= {int(c) for c in (task / "children").read_text().split()}
    return found
