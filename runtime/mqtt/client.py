"""A paho-mqtt 2.x client driven by the asyncio loop (the bridge's `Communicator`).

Why the loop drives paho instead of paho's own thread: every client call (publish, ack,
subscribe) then happens on the one loop thread, so paho's locks never contend and no
callback can block or deadlock a network thread (paho issues #354, #177, #636). The
socket is handed to the loop with ``add_reader``/``add_writer`` and ``loop_misc()`` runs
on a one-second timer; only the blocking connect (DNS, TCP, TLS) runs in the default
executor, and its socket callbacks hop back with ``call_soon_threadsafe``.

Delivery: one paho client lives for the whole bridge, so QoS>0 messages in flight at a
disconnect are re-sent by paho after reconnect. A message published while disconnected
fails at once with `NotPublished`: what must wait for the broker waits on disk, in the
store-and-forward queue (`wasmgate.runtime.mqtt.spool`), the one bounded mechanism.
`publish()` returns a future resolved when the broker confirmed the message
(PUBACK/PUBCOMP; QoS 0: on hand-off).
Incoming messages carry the connection *generation*: `ack()` refuses a message from an
older connection, whose packet id means nothing any more (the broker redelivers it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions

from wasmgate._compat import timeout
from wasmgate.runtime.mqtt._paho_private import BufferedClient, check_paho, sock_close
from wasmgate.runtime.mqtt.messages import Incoming, Outgoing
from wasmgate.runtime.ops.config import MqttSettings

log = logging.getLogger("wasmgate.mqtt")

_MISC_INTERVAL_S = 1.0  # paho's keepalive bookkeeping granularity
_MIN_BACKOFF_S = 0.2
_LAST_PUBLISH_S = 2.0  # how long a clean stop waits for the retained ``offline`` PUBACK
_CONNECT_WAIT_S = 6.0
"""How long `stop` lets a connect still running in the executor finish: paho's TCP connect
timeout (5 s) and a margin. A slower DNS lookup is left to the loop's executor shutdown."""


class NotPublished(Exception):
    """The message was not handed to the broker (disconnected, or paho's queue is full)."""


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


class _ClosingSSLSocket(ssl.SSLSocket):
    """Closes itself when the TLS handshake fails.

    paho's ``_ssl_wrap_socket`` raises out of ``do_handshake()`` without closing the socket
    it wrapped, so every refused handshake (wrong CA, expired certificate) would leave an
    open socket behind until garbage collection, with a ResourceWarning per retry.
    """

    def do_handshake(self, block: bool = False) -> None:
        try:
            super().do_handshake(block)
        except BaseException:
            self.close()
            raise


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


def _consume(fut: asyncio.Future[None]) -> None:
    """Mark a future's exception as retrieved (its waiter may have timed out already)."""
    if not fut.cancelled():
        fut.exception()


def _make_properties(msg: Outgoing) -> Properties | None:
    if msg.correlation_data is None and msg.content_type is None and not msg.user_properties:
        return None
    props = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
    if msg.correlation_data is not None:
        props.CorrelationData = msg.correlation_data
    if msg.content_type is not None:
        props.ContentType = msg.content_type
    if msg.user_properties:
        props.UserProperty = list(msg.user_properties)
    return props


def _incoming(message: paho.MQTTMessage, generation: int, v5: bool) -> Incoming:
    props = message.properties if v5 else None
    user: dict[str, str] = {}
    for key, value in getattr(props, "UserProperty", None) or []:
        user[str(key)] = str(value)
    expiry = getattr(props, "MessageExpiryInterval", None)
    try:
        topic = message.topic
    except UnicodeDecodeError:
        topic = ""
    return Incoming(
        topic=topic,
        payload=bytes(message.payload),
        qos=message.qos,
        dup=bool(message.dup),
        mid=message.mid,
        generation=generation,
        received=time.monotonic(),
        response_topic=getattr(props, "ResponseTopic", None),
        correlation_data=getattr(props, "CorrelationData", None),
        content_type=getattr(props, "ContentType", None),
        expiry_s=int(expiry) if expiry is not None else None,
        user_properties=user,
        retain=bool(message.retain),
    )


class MqttClient:
    """One persistent-session connection, reconnected for ever with capped backoff."""

    def __init__(
        self,
        settings: MqttSettings,
        client_id: str,
        *,
        will: Outgoing,
        on_connect: Callable[[bool], None],
        on_message: Callable[[Incoming], None],
    ) -> None:
        check_paho()  # a clear refusal now, not an AttributeError at a reconnect
        self._settings = settings
        self._v5 = settings.protocol == "5"
        self._on_connect_cb = on_connect
        self._on_message_cb = on_message
        self.state = ClientState()
        self._generation = 0
        self._pending: dict[int, asyncio.Future[None]] = {}
        self._connack: asyncio.Future[None] | None = None
        self._lost = asyncio.Event()
        self._connected = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._task: asyncio.Task[None] | None = None
        self._misc: asyncio.TimerHandle | None = None
        self._connecting: asyncio.Future[None] | None = None  # the executor's connect
        self._stopping = False
        self._fd: int | None = None
        self._loop_thread = threading.get_ident()
        self._client = self._build(client_id, will)

    def _build(self, client_id: str, will: Outgoing) -> BufferedClient:
        s = self._settings
        client = BufferedClient(
            CallbackAPIVersion.VERSION2,
            client_id=client_id,
            protocol=paho.MQTTv5 if self._v5 else paho.MQTTv311,
            clean_session=None if self._v5 else False,
            manual_ack=True,
            reconnect_on_failure=False,
        )
        if s.username is not None:
            client.username_pw_set(s.username, s.password)
        if s.tls_ca is not None:
            ctx = ssl.create_default_context(cafile=str(s.tls_ca))
            ctx.sslsocket_class = _ClosingSSLSocket
            if s.tls_cert is not None:
                ctx.load_cert_chain(str(s.tls_cert), str(s.tls_key) if s.tls_key else None)
            client.tls_set_context(ctx)
        # paho reports socket errors only through its logger; without this a broker that
        # refuses our TLS client certificate shows up only as "Unspecified error".
        client.enable_logger(log.getChild("paho"))
        client.will_set(will.topic, will.payload, qos=will.qos, retain=will.retain)
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        client.on_message = self._on_message
        client.on_publish = self._on_publish
        client.on_socket_open = self._on_socket_open
        client.on_socket_close = self._on_socket_close
        client.on_socket_register_write = self._on_socket_register_write
        client.on_socket_unregister_write = self._on_socket_unregister_write
        return client

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Start connecting in the background; returns at once (the broker may be down)."""
        self._task = self._loop.create_task(self._supervise(), name="mqtt-supervisor")
        self._schedule_misc()

    async def wait_connected(self) -> None:
        await self._connected.wait()

    @property
    def connected(self) -> bool:
        return self.state.connected

    @property
    def broker(self) -> str:
        """``host:port`` as this client dials it (``[v6]:port``): what every warning names."""
        host = self._settings.host or "localhost"
        return f"[{host}]:{self._settings.port}" if ":" in host else f"{host}:{self._settings.port}"

    @property
    def link(self) -> asyncio.Event:
        """Set while connected: what a forwarder of stored messages waits on (read only)."""
        return self._connected

    @property
    def supervising(self) -> bool:
        """True while the reconnecting supervisor runs (it only ends at `stop`)."""
        return self._task is not None and not self._task.done()

    def current_socket(self) -> socket.socket | None:
        """The connected socket, if any (what the transport really is: TCP or TLS)."""
        sock = self._client.socket()
        return sock if isinstance(sock, socket.socket) else None

    async def stop(self, last: Outgoing | None) -> None:
        """Publish ``last`` (e.g. retained ``offline``) if connected, disconnect, release all."""
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._connect_finished()
        if self._misc is not None:
            self._misc.cancel()
        if last is not None and self.state.connected:
            try:
                async with timeout(_LAST_PUBLISH_S):
                    await self.publish(last)
            except (TimeoutError, NotPublished):
                log.warning("could not publish %s before disconnect", last.topic)
        self._client.disconnect()
        self._client.loop_write()  # flush DISCONNECT now; the loop may stop any moment
        sock_close(self._client)
        self._unwatch(self._fd)
        for fut in self._pending.values():
            fut.cancel()
        self._pending.clear()

    async def _supervise(self) -> None:
        delay = _MIN_BACKOFF_S
        while not self._stopping:  # `stop` sets the flag and cancels: either ends it
            try:
                await self._open()
                delay = _MIN_BACKOFF_S
                await self._lost.wait()
            except (OSError, TimeoutError, ConnectionError) as e:
                self.state.failed(f"{type(e).__name__}: {e}")
                log.warning("mqtt connect to %s failed (%s); retry in %.1fs", self.broker, e, delay)
                self._drop_socket()
                await asyncio.sleep(delay * random.uniform(0.8, 1.2))
                delay = min(delay * 2, self._settings.reconnect_max_s)

    async def _open(self) -> None:
        self._lost.clear()
        self._connack = self._loop.create_future()
        self._connack.add_done_callback(_consume)
        # Shielded: a cancel (`stop`) must not walk away from a thread still creating the
        # socket that `stop` is about to close (`_connect_finished`).
        self._connecting = self._loop.run_in_executor(None, self._connect_blocking)
        # A `stop` landing during the connect leaves its failure to nobody: without this,
        # asyncio logs "Future exception was never retrieved" with a traceback at exit.
        self._connecting.add_done_callback(_consume)
        await asyncio.shield(self._connecting)
        # Not `wait_for`: on 3.11 it drops a cancel (`stop`) landing in the loop turn the
        # CONNACK arrives (gh-86296), and the supervisor then waits on `_lost` for ever.
        async with timeout(self._settings.keepalive_s):
            await asyncio.shield(self._connack)

    def _connect_blocking(self) -> None:
        s = self._settings
        host = s.host or "localhost"  # `broker` names the same default
        if self._v5:
            props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
            props.SessionExpiryInterval = s.session_expiry_s
            props.ReceiveMaximum = s.receive_maximum
            rc = self._client.connect(
                host, s.port, s.keepalive_s, clean_start=False, properties=props
            )
        else:
            rc = self._client.connect(host, s.port, s.keepalive_s)
        if rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
            raise ConnectionError(f"connect: {paho.error_string(rc)}")

    @property
    def _opening(self) -> bool:
        """A connect runs in the executor: paho's state is that thread's until it returns."""
        return self._connecting is not None and not self._connecting.done()

    async def _connect_finished(self) -> None:
        """Let a connect still in the executor return before `stop` closes its socket."""
        fut = self._connecting
        if fut is not None and not fut.done():
            await asyncio.wait([fut], timeout=_CONNECT_WAIT_S)
            if not fut.done():
                log.warning("mqtt connect still running at stop; its socket may outlive it")

    def _drop_socket(self) -> None:
        # paho calls _on_socket_close first: the loop lets go of the descriptor.
        sock_close(self._client)
        self._unwatch(self._fd)

    def _schedule_misc(self) -> None:
        self._misc = self._loop.call_later(_MISC_INTERVAL_S, self._tick)

    def _tick(self) -> None:
        if not self._opening:
            self._client.loop_misc()
        self._schedule_misc()

    # -- socket hand-off (paho may call these from the executor thread) -------------------
    # The loop watches one fd at a time, tracked by number: asyncio's selector would keep a
    # stale key for a socket closed behind its back and silently ignore a new socket that
    # reuses the number, so registrations are dropped before paho closes the socket.

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

    # -- paho callbacks (loop thread; never raise, never block) --------------------------

    def _on_connect(
        self, _client: paho.Client, _userdata: Any, flags: Any, rc: Any, _props: Any
    ) -> None:
        if rc.is_failure:
            self.state.failed(f"broker refused connection: {rc}")
            if self._connack is not None and not self._connack.done():
                self._connack.set_exception(ConnectionError(self.state.last_error))
            return
        self._generation += 1
        self.state.connected = True
        self.state.connects += 1
        self.state.session_present = bool(flags.session_present)
        self.state.resent += len(self._pending)  # paho re-sends every unacked QoS>0 publish
        self.state.since = time.time()
        self._connected.set()
        if self._connack is not None and not self._connack.done():
            self._connack.set_result(None)
        self._guard(self._on_connect_cb, self.state.session_present)

    def _on_disconnect(
        self, _client: paho.Client, _userdata: Any, _flags: Any, rc: Any, _props: Any
    ) -> None:
        if self.state.connected and not self._stopping:
            self.state.disconnects += 1
            log.warning("mqtt connection to %s lost: %s", self.broker, rc)
        if self.state.connected:
            self.state.since = time.time()
        self.state.connected = False
        self._connected.clear()
        self._lost.set()
        if self._connack is not None and not self._connack.done():
            self._connack.set_exception(ConnectionError(f"connection closed: {rc}"))

    def _on_message(self, _client: paho.Client, _userdata: Any, message: paho.MQTTMessage) -> None:
        self._guard(self._on_message_cb, _incoming(message, self._generation, self._v5))

    def _on_publish(
        self, _client: paho.Client, _userdata: Any, mid: int, _rc: Any, _props: Any
    ) -> None:
        fut = self._pending.pop(mid, None)
        if fut is not None and not fut.done():
            fut.set_result(None)

    def _guard(self, fn: Callable[[Any], None], arg: Any) -> None:
        try:
            fn(arg)
        except Exception:
            log.exception("mqtt callback failed")

    # -- publish / subscribe / ack ---------------------------------------------------------

    def publish(self, msg: Outgoing) -> asyncio.Future[None]:
        """Send ``msg``; the future resolves once the broker has it (or fails if dropped)."""
        fut: asyncio.Future[None] = self._loop.create_future()
        if self.state.connected:
            self._send(msg, fut)
        else:
            fut.set_exception(NotPublished("not connected to the broker"))
        return fut

    def _send(self, msg: Outgoing, fut: asyncio.Future[None]) -> None:
        props = _make_properties(msg) if self._v5 else None
        info = self._client.publish(msg.topic, msg.payload, msg.qos, msg.retain, props)
        if info.rc == MQTTErrorCode.MQTT_ERR_QUEUE_SIZE:
            fut.set_exception(NotPublished("paho queue full"))
        elif msg.qos == 0:
            fut.set_result(None)
        else:
            self._pending[info.mid] = fut

    def subscribe(self, filters: list[str], qos: int) -> None:
        if self._v5:
            opts = SubscribeOptions(qos=qos)
            self._client.subscribe([(f, opts) for f in filters])
        else:
            self._client.subscribe([(f, qos) for f in filters])

    def ack(self, msg: Incoming) -> bool:
        """Acknowledge ``msg`` if it came on the current connection (else the broker resends)."""
        if msg.qos == 0:
            return True
        if msg.generation != self._generation or not self.state.connected:
            return False
        return self._client.ack(msg.mid, msg.qos) == MQTTErrorCode.MQTT_ERR_SUCCESS
