"""The MQTT bridge: requests from the topic tree to the `ServiceAPI`, answers back.

Delivery contract (``docs/mqtt.md``): requests are acknowledged only after their
answer reached the broker (manual ack), so a crash or a lost connection means the broker
redelivers; a redelivered request (same reply address, correlation data / ``id`` and
payload within ``dedupe_window_s``) is answered once and only acknowledged again. Requests whose
deadline or Message Expiry passed get a 504 answer without work. Nothing a requester
sends (size, bytes, JSON) can stop the bridge: every failure becomes an error answer where
a reply address exists, and a log line otherwise.

With a `Store` (the daemon always passes one), answers made while the broker is away and
every adapter event wait on disk and are drained in order when it is back
(`wasmgate.runtime.mqtt.spool`); without one, such an answer is not sent and its request
stays unacknowledged, so the broker redelivers it.

Wiring::

    async with MqttBridge(settings.mqtt, service, stored=Stored(store, settings.store)) as b:
        ...                       # bridge.state for the status page and metrics
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from paho.mqtt.client import topic_matches_sub

from wasmgate._compat import Self
from wasmgate.runtime import errors
from wasmgate.runtime.dataplane.plane import DataPlane
from wasmgate.runtime.mqtt.client import MqttClient
from wasmgate.runtime.mqtt.connection import ClientState
from wasmgate.runtime.mqtt.dedupe import Recent, RecentRequests
from wasmgate.runtime.mqtt.inbound import Inbound
from wasmgate.runtime.mqtt.messages import Incoming, Outgoing
from wasmgate.runtime.mqtt.metadata import MetadataPublisher
from wasmgate.runtime.mqtt.requests import Requests
from wasmgate.runtime.mqtt.spool import Spool, Stored
from wasmgate.runtime.mqtt.state import BridgeState
from wasmgate.runtime.mqtt.topics import Topics, gateway_id
from wasmgate.runtime.ops.config import MqttSettings
from wasmgate.runtime.ops.memory import HeapKeeper
from wasmgate.runtime.ops.metrics import Metrics
from wasmgate.runtime.ops.throttle_shared import SharedThrottle
from wasmgate.runtime.ops.tracing import Tracing
from wasmgate.runtime.served.api import ServiceAPI

log = logging.getLogger("wasmgate.mqtt")


@dataclass(frozen=True)
class Channel:
    """Topics another owner reads over the bridge's connection (the fleet's retained
    desired documents): subscribed at every connect, never through ``$share`` (each daemon
    needs them all), retained messages included, acked on receipt. ``on_connect`` runs
    after every (re)connect (the fleet republishes its report)."""

    filters: tuple[str, ...]
    on_message: Callable[[Incoming], None]
    on_connect: Callable[[], None] = lambda: None


class MqttBridge:
    """Serves the ``adapters/…/req`` and ``models/…/infer`` topics of one gateway."""

    def __init__(
        self,
        settings: MqttSettings,
        service: ServiceAPI,
        *,
        drain_s: float = 5.0,
        metrics: Metrics | None = None,
        channels: Sequence[Channel] = (),
        tracing: Tracing | None = None,
        stored: Stored | None = None,
        recent: Recent | None = None,
        serves_requests: bool = True,
        speaks: bool = True,
        log_limits: SharedThrottle | None = None,
    ) -> None:
        """``recent``: the dedupe table (default: this process's own). ``serves_requests``:
        subscribe to the request topics (False in a supervisor whose workers serve them).
        ``speaks``: this connection is the gateway's voice: its status (and will),
        metadata and the drain of stored streams (False in a worker: the supervisor's).
        ``log_limits``: the gateway's table for ignored requests' warnings (a worker's)."""
        if settings.host is None:
            raise errors.ConfigError("mqtt.host is not set: the MQTT bridge is off")
        self._settings = settings
        self._service = service
        self._drain_s = drain_s
        self._channels = tuple(channels)
        self.topics = Topics(settings)
        self._tasks: set[asyncio.Task[None]] = set()
        if recent is None:  # not `or`: an empty table has len() 0
            recent = RecentRequests(settings.dedupe_window_s, settings.dedupe_max_entries)
        self._recent: Recent = recent
        self._serves_requests, self._speaks = serves_requests, speaks
        self._heap = HeapKeeper()
        self._closing = False
        self._client: MqttClient | None = None
        self.state = BridgeState(ClientState(), gateway_id(settings))
        plane = DataPlane(service, metrics)
        self._work = Requests(settings, plane, self.topics, self.state, tracing)
        self._inbound: Inbound | None = None
        self._metadata: MetadataPublisher | None = None
        self._stored = stored
        self._spool: Spool | None = None
        self._stack = contextlib.AsyncExitStack()
        self._log_limits = log_limits

    async def __aenter__(self) -> Self:
        client_id = self._settings.client_id or f"wasmgate-{self.state.gateway}"
        will = (
            Outgoing(self.topics.status, b"offline", qos=1, retain=True) if self._speaks else None
        )
        self._client = MqttClient(
            self._settings,
            client_id,
            will=will,
            on_connect=self._on_connect,
            on_message=self._on_message,
        )
        self.state.client = self._client.state
        if self._speaks:
            self._metadata = MetadataPublisher(self._client, self.topics, self._service)
        if self._stored is not None:
            self._spool = Spool(
                self._stored, self._client, self.topics, self._settings, self._delivered,
                drain=self._speaks,
            )  # fmt: skip
            if self._speaks:
                await self._spool.load()  # before any request can be redelivered to us
                for key in self._spool.held_keys():
                    self._recent.hold(key)  # the workers' copies are only acked
            await self._stack.enter_async_context(self._spool.running())
        self._inbound = Inbound(
            self._settings, self.topics, self.state, self._work,
            recent=self._recent, client=self._client, spool=self._spool,
            log_limits=self._log_limits,
        )  # fmt: skip
        await self._stack.enter_async_context(self._heap.running())
        self._client.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._closing = True
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=self._drain_s)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._stack.aclose()
        if self._client is not None:
            offline = Outgoing(self.topics.status, b"offline", qos=1, retain=True)
            await self._client.stop(offline if self._speaks else None)

    async def wait_connected(self) -> None:
        """Wait until connected and subscribed (wrap in ``asyncio.timeout``)."""
        await self._mqtt.wait_connected()

    @property
    def client(self) -> MqttClient:
        """The bridge's MQTT connection (inside ``async with``)."""
        return self._mqtt

    @property
    def _mqtt(self) -> MqttClient:
        if self._client is None:
            raise RuntimeError("use `async with MqttBridge(...)`")
        return self._client

    def status(self) -> dict[str, Any]:
        """`state` for the status page, the broker's address, plus each stored stream's
        drain counters (sent, delivered on PUBACK, failed, in flight)."""
        doc = self.state.as_dict()
        doc["broker"] = f"{self._settings.host}:{self._settings.port}"
        if self._spool is not None:
            doc["drain"] = self._spool.state()
        return doc

    def refresh_metadata(self) -> None:
        """Re-publish retained metadata after bundles changed (removed ones are cleared)."""
        if self._metadata is not None:
            self._metadata.publish()

    # -- connection and dispatch -----------------------------------------------------------

    def _on_connect(self, session_present: bool) -> None:
        log.info("mqtt connected (session present: %s)", session_present)
        if self._serves_requests:
            self._mqtt.subscribe(self.topics.subscriptions(), self._settings.qos)
        elif session_present:
            # The session may be the single process's (same client id), with its request
            # subscriptions: the broker would go on handing every request to the supervisor.
            self._mqtt.unsubscribe(self.topics.subscriptions())
        for channel in self._channels:
            self._mqtt.subscribe(list(channel.filters), self._settings.qos)
        if self._speaks:
            status = Outgoing(self.topics.status, b"online", qos=1, retain=True)
            _detach(self._mqtt.publish(status))
        if self._metadata is not None:
            self._metadata.publish()
        for channel in self._channels:
            channel.on_connect()

    def _on_message(self, msg: Incoming) -> None:
        if self._closing:
            return  # not acked: the broker redelivers it to us (or a group peer) later
        for channel in self._channels:
            if any(topic_matches_sub(f, msg.topic) for f in channel.filters):
                channel.on_message(msg)
                self._ack(msg)
                return
        self._heap.note(_size(msg))
        task = asyncio.get_running_loop().create_task(self._handle(msg))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _handle(self, msg: Incoming) -> None:
        self.state.received += 1
        self.state.in_flight += 1
        try:
            if await self._serving.serve(msg):
                self._ack(msg)
        except Exception:
            # A bug here must not hold the broker's in-flight window for ever.
            log.exception("mqtt request on %s failed", msg.topic)
            self._ack(msg)
        finally:
            self.state.in_flight -= 1

    def _ack(self, msg: Incoming) -> None:
        self._mqtt.ack(msg)

    @property
    def _serving(self) -> Inbound:
        if self._inbound is None:
            raise RuntimeError("use `async with MqttBridge(...)`")
        return self._inbound

    def _delivered(self, key: bytes) -> None:
        """A stored answer reached the broker: its request's dedupe window starts now."""
        self._recent.delivered(key)


def _detach(fut: asyncio.Future[None]) -> None:
    """Fire-and-forget publish: retrieve its outcome so nothing is logged as unhandled."""
    fut.add_done_callback(lambda f: f.cancelled() or f.exception())


def _size(msg: Incoming) -> int:
    """Bytes of what a request brought (payload and the properties a requester sizes)."""
    topic = len(msg.response_topic) if msg.response_topic else 0
    data = len(msg.correlation_data) if msg.correlation_data else 0
    return len(msg.payload) + topic + data
