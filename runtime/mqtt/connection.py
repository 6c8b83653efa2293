"""The broker connection under the client: its facts, its dialling, its socket on the loop.

``ClientState`` is what the status page and metrics show of the connection;
``connect_blocking`` dials it (in an executor: DNS, TCP and TLS block); ``LoopSockets``
hands paho's socket to the asyncio loop (``add_reader``/``add_writer``).

paho announces its socket through callbacks (opened, closed, wants to write, done writing),
possibly from the executor thread that runs the blocking connect; each announcement hops to
the loop thread. The loop watches one fd at a time, tracked by number: asyncio's selector
would keep a stale key for a socket closed behind its back and silently ignore a new socket
that reuses the number, so registrations are dropped before paho closes the socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import MQTTErrorCode
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from wasmgate.runtime.mqtt._paho_private import BufferedClient, sock_close
from wasmgate.runtime.ops.config import MqttSettings


@dataclass
class ClientState:
    """Connection facts for the status page and metrics."""

    connected: bool = False
    connects: int = 0
    disconnects: int = 0
    session_present: bool = False
    resent: int = 0
    """QoS>0 messages in flight at a disconnect, re-sent by paho after the reconnect: each may
    reach its subscribers twice (at least once), which is why requesters match answers by
    correlation data."""
    last_error: str | None = None
    last_error_at: float | None = None
    """When ``last_error`` happened (POSIX time): the status page shows an error only with
    its time, and as history once connected again."""
    since: float = field(default_factory=time.time)
    """When ``connected`` last changed (POSIX time; at start, when the client was made)."""

    def failed(self, message: str) -> None:
        self.last_error, self.last_error_at = message, time.time()


def connect_blocking(client: paho.Client, settings: MqttSettings) -> None:
    """Dial the broker (DNS, TCP, TLS, CONNECT sent): blocks, so it runs in an executor."""
    s = settings
    host = s.host or "localhost"  # `MqttClient.broker` names the same default
    if s.protocol == "5":
        props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
        props.SessionExpiryInterval = s.session_expiry_s
        props.ReceiveMaximum = s.receive_maximum
        rc = client.connect(host, s.port, s.keepalive_s, clean_start=False, properties=props)
    else:
        rc = client.connect(host, s.port, s.keepalive_s)
    if rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
        raise ConnectionError(f"connect: {paho.error_string(rc)}")


def _quickack(sock: Any) -> None:
    """ACK what was just read at once instead of up to ~40 ms later (Linux only).

    A stock mosquitto keeps Nagle on (no ``set_tcp_nodelay``): after it sends us the PUBACK
    of an answer, its next small packet (the next request) waits for our delayed ACK.
    Linux leaves quick-ACK mode on its own, so it is re-armed after every read: one
    ``setsockopt`` per read. Measured in ``bench/bench_mqtt.py`` (docs/mqtt.md, Performance):
    set once at connect it did not help; answering at QoS 0 would drop the answer's
    delivery guarantee."""
    with contextlib.suppress(OSError, AttributeError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)


class LoopSockets:
    """Watches ``client``'s socket from ``loop``: reads and writes run on the loop thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop, client: BufferedClient) -> None:
        """Take over ``client``'s socket callbacks (call on the loop thread)."""
        self._loop = loop
        self._client = client
        self._fd: int | None = None
        self._loop_thread = threading.get_ident()
        client.on_socket_open = self._on_socket_open
        client.on_socket_close = self._on_socket_close
        client.on_socket_register_write = self._on_socket_register_write
        client.on_socket_unregister_write = self._on_socket_unregister_write

    def close(self) -> None:
        """Close paho's socket; paho calls ``on_socket_close`` first, so the loop lets go."""
        sock_close(self._client)
        self._unwatch(self._fd)

    def _in_loop(self, fn: Callable[..., None], *args: Any) -> None:
        if threading.get_ident() == self._loop_thread:
            fn(*args)
        else:
            self._loop.call_soon_threadsafe(fn, *args)

    def _on_socket_open(self, _client: paho.Client, _userdata: Any, sock: Any) -> None:
        # paho leaves Nagle on: a PUBACK followed by an answer would wait for the peer's
        # delayed ACK (~40 ms on Linux) before the answer leaves.
        with contextlib.suppress(OSError, AttributeError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._in_loop(self._watch, sock)

    def _watch(self, sock: socket.socket) -> None:
        if self._client.socket() is sock and sock.fileno() >= 0:
            self._unwatch(self._fd)
            self._fd = sock.fileno()
            self._loop.add_reader(self._fd, self._read, sock)

    def _read(self, sock: socket.socket) -> None:
        # Packets already in the client's read buffer wake no selector: read them all now.
        client = self._client
        client.loop_read()
        while client.buffered() and client.socket() is sock:
            client.loop_read()
        _quickack(sock)

    def _on_socket_close(self, _client: paho.Client, _userdata: Any, sock: Any) -> None:
        self._in_loop(self._unwatch, sock.fileno())

    def _unwatch(self, fd: int | None) -> None:
        if fd is not None and fd == self._fd:
            self._loop.remove_reader(fd)
            self._loop.remove_writer(fd)
            self._fd = None

    def _on_socket_register_write(self, _client: paho.Client, _userdata: Any, sock: Any) -> None:
        self._in_loop(self._want_write, sock)

    def _want_write(self, sock: socket.socket) -> None:
        if self._client.socket() is sock and self._fd is not None and sock.fileno() == self._fd:
            self._loop.add_writer(self._fd, self._client.loop_write)

    def _on_socket_unregister_write(self, _client: paho.Client, _userdata: Any, sock: Any) -> None:
        self._in_loop(self._drop_write, sock.fileno())

    def _drop_write(self, fd: int) -> None:
        if fd == self._fd:
            self._loop.remove_writer(fd)
