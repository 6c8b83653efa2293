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
import logging
import random
import socket
import time
from collections.abc import Callable
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import MQTTErrorCode
from paho.mqtt.subscribeoptions import SubscribeOptions

from wasmgate._compat import timeout
from wasmgate.runtime.mqtt._paho_private import check_paho
from wasmgate.runtime.mqtt.connection import ClientState, LoopSockets, connect_blocking
from wasmgate.runtime.mqtt.messages import Incoming, Outgoing
from wasmgate.runtime.mqtt.paho_adapt import build_client, incoming, publish_properties
from wasmgate.runtime.ops.config import MqttSettings
from wasmgate.runtime.ops.tasks import mark_retrieved

log = logging.getLogger("wasmgate.mqtt")

_MISC_INTERVAL_S = 1.0  # paho's keepalive bookkeeping granularity
_MIN_BACKOFF_S = 0.2
_LAST_PUBLISH_S = 2.0  # how long a clean stop waits for the retained ``offline`` PUBACK
_CONNECT_WAIT_S = 6.0
"""How long `stop` lets a connect still running in the executor finish: paho's TCP connect
timeout (5 s) and a margin. A slower DNS lookup is left to the loop's executor shutdown."""


class NotPublished(Exception):
    """The message was not handed to the broker (disconnected, or paho's queue is full)."""


class MqttClient:
    """One persistent-session connection, reconnected for ever with capped backoff."""

    def __init__(
        self,
        settings: MqttSettings,
        client_id: str,
        *,
        will: Outgoing | None,
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
        self._client = build_client(settings, client_id, will)
        self._client.on_connect = self._on_connect
        self._client.on_disconnect = self._on_disconnect
        self._client.on_message = self._on_message
        self._client.on_publish = self._on_publish
        self._sockets = LoopSockets(self._loop, self._client)

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
        self._sockets.close()
        for fut in self._pending.values():
            fut.cancel()
        self._pending.clear()

    async def _supervise(self) -> None:
        delay, spread = _MIN_BACKOFF_S, 0.0
        while not self._stopping:  # `stop` sets the flag and cancels: either ends it
            try:
                await self._open()
                delay, spread = _MIN_BACKOFF_S, 0.0
                await self._lost.wait()
                # Every gateway of a fleet loses its connection in the same instant when the
                # broker restarts: a random share of the window keeps them from all coming
                # back in the same second (a quick restart is over before the first try).
                spread = self._settings.reconnect_spread_s
                await asyncio.sleep(random.uniform(0, spread))
            except (OSError, TimeoutError, ConnectionError) as e:
                self.state.failed(f"{type(e).__name__}: {e}")
                # after a loss, a try that finds the broker still down draws a new share of the
                # window: the backoff's lockstep would regroup every gateway that tried then
                wait = max(delay * random.uniform(0.8, 1.2), random.uniform(0, spread))
                log.warning("mqtt connect to %s failed (%s); retry in %.1fs", self.broker, e, wait)
                self._sockets.close()
                await asyncio.sleep(wait)
                delay = min(delay * 2, self._settings.reconnect_max_s)

    async def _open(self) -> None:
        self._lost.clear()
        self._connack = self._loop.create_future()
        self._connack.add_done_callback(mark_retrieved)
        # Shielded: a cancel (`stop`) must not walk away from a thread still creating the
        # socket that `stop` is about to close (`_connect_finished`).
        self._connecting = self._loop.run_in_executor(None, self._connect_blocking)
        # A `stop` landing during the connect leaves its failure to nobody: without this,
        # asyncio logs "Future exception was never retrieved" with a traceback at exit.
        self._connecting.add_done_callback(mark_retrieved)
        await asyncio.shield(self._connecting)
        # Not `wait_for`: on 3.11 it drops a cancel (`stop`) landing in the loop turn the
        # CONNACK arrives (gh-86296), and the supervisor then waits on `_lost` for ever.
        async with timeout(self._settings.keepalive_s):
            await asyncio.shield(self._connack)

    def _connect_blocking(self) -> None:
        connect_blocking(self._client, self._settings)

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

    def _schedule_misc(self) -> None:
        self._misc = self._loop.call_later(_MISC_INTERVAL_S, self._tick)

    def _tick(self) -> None:
        if not self._opening:
            self._client.loop_misc()
        self._schedule_misc()

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
        self._guard(self._on_message_cb, incoming(message, self._generation, self._v5))

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
        props = publish_properties(msg) if self._v5 else None
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

    def unsubscribe(self, filters: list[str]) -> None:
        self._client.unsubscribe(filters)

    def ack(self, msg: Incoming) -> bool:
        """Acknowledge ``msg`` if it came on the current connection (else the broker resends)."""
        if msg.qos == 0:
            return True
        if msg.generation != self._generation or not self.state.connected:
            return False
        return self._client.ack(msg.mid, msg.qos) == MQTTErrorCode.MQTT_ERR_SUCCESS
