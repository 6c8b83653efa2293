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
import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from types import TracebackType
from typing import Any

from paho.mqtt.client import topic_matches_sub

from wasmgate._compat import Self
from wasmgate.runtime import errors
from wasmgate.runtime.dataplane.plane import MAX_KEY_CHARS, DataPlane
from wasmgate.runtime.dataplane.plane import Route as CallRoute
from wasmgate.runtime.field.store import StoreError
from wasmgate.runtime.mqtt.client import MqttClient, NotPublished
from wasmgate.runtime.mqtt.connection import ClientState
from wasmgate.runtime.mqtt.dedupe import NotAnswered, RecentRequests, dedupe_key
from wasmgate.runtime.mqtt.messages import (
    JSON,
    Incoming,
    Outgoing,
    RequestId,
    deadline_of,
    error_body,
    json_object,
    request_id,
    with_id,
)
from wasmgate.runtime.mqtt.metadata import MetadataPublisher
from wasmgate.runtime.mqtt.spool import Spool, Stored
from wasmgate.runtime.mqtt.topics import Route, Topics, gateway_id
from wasmgate.runtime.ops.config import MqttSettings
from wasmgate.runtime.ops.memory import HeapKeeper
from wasmgate.runtime.ops.metrics import Metrics
from wasmgate.runtime.ops.tracing import Tracing, mark_status
from wasmgate.runtime.protocol import codec as v2
from wasmgate.runtime.protocol.error_table import log_failure, public_message, status_of
from wasmgate.runtime.served.api import ServiceAPI

log = logging.getLogger("wasmgate.mqtt")

HEADER_LENGTH = "Inference-Header-Content-Length"
CANARY_KEY = "canary-key"
"""User property: the key whose hash picks the side of a staged release (else the client id
of the 3.1.1 topic form, else a random draw)."""
PIN_VERSION = "version"
"""User property: pin the request to this serving or staged version."""


@dataclass
class BridgeState:
    """Counters and connection facts for ``/metrics`` and the status page."""

    client: ClientState
    gateway: str
    received: int = 0
    answered: int = 0
    errors: int = 0
    duplicates: int = 0
    redelivered: int = 0
    """Requests the broker marked as redelivered (DUP) that were worked, not deduplicated: a
    restarted daemon cannot know it answered them before it died."""
    expired: int = 0
    in_flight: int = 0
    busy_retries: int = 0
    retained_ignored: int = 0
    """Retained requests (replayed by the broker at every subscribe) ignored, unanswered."""
    replies_refused: int = 0
    """Requests dropped because their Response Topic is refused (see mqtt.response_topics)."""
    oversize_refused: int = 0
    """Requests ignored because their Response Topic or Correlation Data is longer than
    mqtt.max_response_topic_bytes / mqtt.max_correlation_bytes."""
    stored: int = 0
    """Answers kept in the store because the broker was away (drained when it is back)."""
    by_status: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Channel:
    """Topics another owner reads over the bridge's connection (the fleet's retained
    desired documents): subscribed at every connect, never through ``$share`` (each daemon
    needs them all), retained messages included, acked on receipt. ``on_connect`` runs
    after every (re)connect (the fleet republishes its report)."""

    filters: tuple[str, ...]
    on_message: Callable[[Incoming], None]
    on_connect: Callable[[], None] = lambda: None


@dataclass(frozen=True)
class _Reply:
    topic: str | None
    correlation: bytes | None
    rid: RequestId | None


@dataclass(frozen=True)
class _Result:
    status: int
    body: bytes
    content_type: str
    props: tuple[tuple[str, str], ...] = ()


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
    ) -> None:
        if settings.host is None:
            raise errors.ConfigError("mqtt.host is not set: the MQTT bridge is off")
        self._settings = settings
        self._service = service
        self._drain_s = drain_s
        self._metrics = metrics
        self._channels = tuple(channels)
        self._tracing = tracing
        self.topics = Topics(settings)
        self._tasks: set[asyncio.Task[None]] = set()
        self._recent = RecentRequests(settings.dedupe_window_s, settings.dedupe_max_entries)
        self._plane = DataPlane(service, metrics)
        self._heap = HeapKeeper()
        self._closing = False
        self._client: MqttClient | None = None
        self.state = BridgeState(ClientState(), gateway_id(settings))
        self._metadata: MetadataPublisher | None = None
        self._stored = stored
        self._spool: Spool | None = None
        self._stack = contextlib.AsyncExitStack()

    async def __aenter__(self) -> Self:
        client_id = self._settings.client_id or f"wasmgate-{self.state.gateway}"
        will = Outgoing(self.topics.status, b"offline", qos=1, retain=True)
        self._client = MqttClient(
            self._settings,
            client_id,
            will=will,
            on_connect=self._on_connect,
            on_message=self._on_message,
        )
        self.state.client = self._client.state
        self._metadata = MetadataPublisher(self._client, self.topics, self._service)
        if self._stored is not None:
            self._spool = Spool(
                self._stored, self._client, self.topics, self._settings, self._delivered
            )
            await self._spool.load()  # before any request can be redelivered to us
            await self._stack.enter_async_context(self._spool.running())
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
            await self._client.stop(offline)

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
        self._mqtt.subscribe(self.topics.subscriptions(), self._settings.qos)
        for channel in self._channels:
            self._mqtt.subscribe(list(channel.filters), self._settings.qos)
        _detach(self._mqtt.publish(Outgoing(self.topics.status, b"online", qos=1, retain=True)))
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
            if await self._serve(msg):
                self._ack(msg)
        except Exception:
            # A bug here must not hold the broker's in-flight window for ever.
            log.exception("mqtt request on %s failed", msg.topic)
            self._ack(msg)
        finally:
            self.state.in_flight -= 1

    def _ack(self, msg: Incoming) -> None:
        self._mqtt.ack(msg)

    async def _serve(self, msg: Incoming) -> bool:
        """Answer ``msg``; True when it may be acknowledged."""
        route = self.topics.parse(msg.topic)
        if route is None:
            log.warning("ignoring message on unexpected topic %r", msg.topic)
            return True
        why = self._refusal(msg)
        if why is not None:
            log.warning("ignoring mqtt request on %r: %s", msg.topic[:200], why)
            return True
        small = len(msg.payload) <= self._settings.max_payload_bytes
        obj = json_object(msg.payload) if small else None
        reply = self._reply_to(msg, route, request_id(obj))
        key = dedupe_key(
            reply.topic, reply.correlation, reply.rid, msg.payload, request_topic=msg.topic
        )
        if key is None:
            return await self._answer_or_drop(msg, route, obj, reply)
        if self._spool is not None and self._spool.holds(key):
            self.state.duplicates += 1  # its answer waits in the store: ack, do not re-work
            return True
        seen = self._recent.recall(key)
        if seen is not None:
            self.state.duplicates += 1
            try:
                await asyncio.shield(seen)
            except NotAnswered:
                return False
            return True
        _ = self._recent.remember(key)
        if msg.dup:
            self.state.redelivered += 1
        try:
            answered = await self._answer_or_drop(msg, route, obj, reply, key)
        except BaseException as e:
            self._recent.forget(key, repr(e))
            raise
        if answered:
            self._recent.answered(key)
        else:
            self._recent.forget(key, "answer neither published nor stored")
        return answered

    def _delivered(self, key: bytes) -> None:
        """A stored answer reached the broker: its request's dedupe window starts now."""
        _ = self._recent.remember(key)
        self._recent.answered(key)

    def _refusal(self, msg: Incoming) -> str | None:
        """Why ``msg`` is ignored (acked, never worked nor answered), or None."""
        if msg.retain:
            # A retained request would run again at every start and reconnect.
            self.state.retained_ignored += 1
            return "it is a retained message (publish requests without retain)"
        why = self._oversize(msg)
        if why is not None:
            self.state.oversize_refused += 1
            return why
        if msg.response_topic:
            why = self.topics.reply_refusal(msg.response_topic)
            if why is not None:
                self.state.replies_refused += 1
                return f"Response Topic {msg.response_topic[:200]!r} refused: {why}"
        return None

    def _oversize(self, msg: Incoming) -> str | None:
        topic = msg.response_topic
        if topic and len(topic) * 4 > self._settings.max_response_topic_bytes:  # cheap first
            size = len(topic.encode("utf-8", "surrogatepass"))
            if size > self._settings.max_response_topic_bytes:
                return f"Response Topic of {size} bytes exceeds mqtt.max_response_topic_bytes"
        data = msg.correlation_data
        if data is not None and len(data) > self._settings.max_correlation_bytes:
            return f"Correlation Data of {len(data)} bytes exceeds mqtt.max_correlation_bytes"
        return None

    async def _answer_or_drop(
        self,
        msg: Incoming,
        route: Route,
        obj: dict[str, Any] | None,
        reply: _Reply,
        key: bytes | None = None,
    ) -> bool:
        """False when the answer was neither published nor stored: leave the request unacked."""
        try:
            await self._work_and_answer(msg, route, obj, reply, key)
        except (NotPublished, StoreError) as e:
            log.warning("mqtt answer on %s not delivered: %s", route.name, e)
            return False
        return True

    def _reply_to(self, msg: Incoming, route: Route, rid: RequestId | None) -> _Reply:
        if msg.response_topic:
            return _Reply(msg.response_topic, msg.correlation_data, rid)
        return _Reply(self.topics.paired_reply(route), None, rid)

    async def _work_and_answer(
        self,
        msg: Incoming,
        route: Route,
        obj: dict[str, Any] | None,
        reply: _Reply,
        key: bytes | None,
    ) -> None:
        # The adapter's events went to the store in the service (one path for every
        # transport); only the answer is the bridge's.
        tracing = self._tracing
        if tracing is not None and tracing.wants(msg.user_properties):
            result = await self._traced_result(tracing, msg, route, obj, reply)
        else:
            result = await self._result(msg, route, obj, reply)
        code = str(result.status)
        self.state.by_status[code] = self.state.by_status.get(code, 0) + 1
        if result.status >= 400:
            self.state.errors += 1
        answer = self._answer_message(route, reply, result)
        if answer is None:
            return
        try:
            await self._mqtt.publish(answer)
        except NotPublished:
            if self._spool is None:
                raise
            await self._spool.keep_answer(answer, key)
            self.state.stored += 1
        self.state.answered += 1

    async def _traced_result(
        self,
        tracing: Tracing,
        msg: Incoming,
        route: Route,
        obj: dict[str, Any] | None,
        reply: _Reply,
    ) -> _Result:
        """`_result` in the request's trace (MQTT 5 user property ``traceparent``); the
        answer carries the trace context as user properties too."""
        attrs = {"messaging.destination.name": msg.topic, "wasmgate.model": route.name}
        with tracing.receive("mqtt", msg.user_properties, attrs) as current:
            result = await self._result(msg, route, obj, reply)
            mark_status(current, "wasmgate.status", result.status)
            trace_props = tuple(tracing.answer_carrier().items())
        return dataclasses.replace(result, props=(*result.props, *trace_props))

    def _answer_message(self, route: Route, reply: _Reply, result: _Result) -> Outgoing | None:
        props = (("status", str(result.status)), *result.props)
        if reply.topic is not None:
            body = (
                result.body
                if reply.correlation
                else with_id(result.body, result.content_type, reply.rid)
            )
            return Outgoing(
                reply.topic,
                body,
                self._settings.qos,
                correlation_data=reply.correlation,
                content_type=result.content_type,
                user_properties=props,
            )
        if result.status in {200, 202} and route.kind == "adapter":  # fire-and-forget: results
            return Outgoing(self.topics.events(route.name), result.body, self._settings.qos)
        if result.status != 200:
            log.warning("mqtt request on %s: %s (no reply address)", route.name, result.body[:200])
        return None

    async def _result(
        self, msg: Incoming, route: Route, obj: dict[str, Any] | None, reply: _Reply
    ) -> _Result:
        try:
            if route.kind == "adapter":
                return await self._run_adapter(msg, route, obj)
            return await self._infer_model(msg, route, obj)
        except Exception as e:
            answer = status_of(e)
            log_failure("mqtt", msg.topic, e, answer)
            body = error_body(public_message(e, answer), answer.status, reply.rid)
            return _Result(answer.status, body, JSON)

    def _admit(self, msg: Incoming, obj: dict[str, Any] | None) -> float | None:
        """Refuse oversize and expired requests before any work; returns the deadline."""
        if len(msg.payload) > self._settings.max_payload_bytes:
            raise errors.PayloadTooLarge(
                f"payload of {len(msg.payload)} bytes exceeds mqtt.max_payload_bytes "
                f"({self._settings.max_payload_bytes})"
            )
        if msg.qos == 0 and self.state.in_flight > self._settings.receive_maximum:
            # QoS 0 has no flow control: beyond Receive Maximum, refuse rather than pile up.
            raise errors.Busy(
                f"more than {self._settings.receive_maximum} requests in flight; "
                "send QoS 1 requests to let the broker hold the backlog"
            )
        deadline = deadline_of(msg, obj)
        if deadline is not None and deadline <= time.monotonic():
            self.state.expired += 1
            raise errors.DeadlineExceeded("request expired before work started")
        return deadline

    def _route(self, msg: Incoming, route: Route, deadline: float | None) -> CallRoute:
        """The request's deadline, canary key (user property ``canary-key``, else the 3.1.1
        client suffix), pinned version (user property ``version``) and transport facts."""
        key = msg.user_properties.get(CANARY_KEY)
        if key is None and route.client is not None and len(route.client) <= MAX_KEY_CHARS:
            key = route.client
        return CallRoute(
            deadline=deadline,
            key=key,
            key_field=f"user property {CANARY_KEY!r}",
            pin=msg.user_properties.get(PIN_VERSION),
            pin_field=f"user property {PIN_VERSION!r}",
            meta={"transport": "mqtt", "topic": msg.topic, "client": route.client or ""},
            patience_s=self._settings.busy_retry_s,
            on_retry=self._busy_retry,
        )

    def _busy_retry(self) -> None:
        self.state.busy_retries += 1

    async def _run_adapter(
        self, msg: Incoming, route: Route, obj: dict[str, Any] | None
    ) -> _Result:
        async with self._plane.adapter("mqtt", route.name) as call:
            deadline = self._admit(msg, obj)
            ans = await call.run_adapter(
                msg.payload, msg.content_type, self._route(msg, route, deadline), "mqtt"
            )
        props: tuple[tuple[str, str], ...] = (("source", ans.source), ("version", str(ans.version)))
        if ans.fallback_reason:
            props = (*props, ("fallback_reason", ans.fallback_reason))
        status = 202 if ans.source == "deferred" else 200  # kept for the cloud: accepted
        return _Result(status, ans.body, ans.content_type, props)

    async def _infer_model(
        self, msg: Incoming, route: Route, obj: dict[str, Any] | None
    ) -> _Result:
        async with self._plane.v2("mqtt", route.name, None) as call:
            deadline = self._admit(msg, obj)
            header = msg.user_properties.get(HEADER_LENGTH)
            try:
                header_length = int(header) if header is not None else None
            except ValueError as e:
                raise errors.BadRequest(
                    f"{HEADER_LENGTH} must be an integer, got {header!r}"
                ) from e
            parsed = v2.parse_request(msg.payload, header_length)
            ans = await call.infer(parsed, self._route(msg, route, deadline))
            enc = v2.encode_response(
                route.name, str(ans.version), ans.outputs, parsed, parameters={"source": ans.source}
            )
        props: tuple[tuple[str, str], ...] = (("source", ans.source), ("version", str(ans.version)))
        if ans.fallback_reason:
            props = (*props, ("fallback_reason", ans.fallback_reason))
        if enc.header_length is not None:
            props = (*props, (HEADER_LENGTH, str(enc.header_length)))
        return _Result(200, enc.body, enc.content_type, props)


def _header_length(msg: Incoming) -> int | None:
    header = msg.user_properties.get(HEADER_LENGTH)
    try:
        return int(header) if header is not None else None
    except ValueError as e:
        raise errors.BadRequest(f"{HEADER_LENGTH} must be an integer, got {header!r}") from e


def _detach(fut: asyncio.Future[None]) -> None:
    """Fire-and-forget publish: retrieve its outcome so nothing is logged as unhandled."""
    fut.add_done_callback(lambda f: f.cancelled() or f.exception())


def _size(msg: Incoming) -> int:
    """Bytes of what a request brought (payload and the properties a requester sizes)."""
    topic = len(msg.response_topic) if msg.response_topic else 0
    data = len(msg.correlation_data) if msg.correlation_data else 0
    return len(msg.payload) + topic + data
