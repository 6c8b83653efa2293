"""One MQTT request through the data plane, and the message that answers it.

`Requests.result` admits a request (payload size, QoS 0 flow, expiry), reads what its
topic and MQTT 5 properties say besides the payload (canary key, pinned version, the V2
binary header length, trace context), runs it as a raw adapter request or a V2 inference
through the `DataPlane` HTTP and gRPC share, and turns any error into the answer every
transport gives (`wasmgate.runtime.protocol.error_table`). `Requests.message` addresses
that answer: the Response Topic with its Correlation Data, else the paired reply topic,
else (an adapter's fire-and-forget request) the adapter's events topic.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import Any

from wasmgate.runtime import errors
from wasmgate.runtime.dataplane.plane import MAX_KEY_CHARS, DataPlane
from wasmgate.runtime.dataplane.plane import Route as CallRoute
from wasmgate.runtime.mqtt.messages import (
    JSON,
    Incoming,
    Outgoing,
    RequestId,
    deadline_of,
    error_body,
    with_id,
)
from wasmgate.runtime.mqtt.state import BridgeState
from wasmgate.runtime.mqtt.topics import Route, Topics
from wasmgate.runtime.ops.config import MqttSettings
from wasmgate.runtime.ops.tracing import Tracing, mark_status
from wasmgate.runtime.protocol import codec as v2
from wasmgate.runtime.protocol.error_table import log_failure, public_message, status_of

log = logging.getLogger("wasmgate.mqtt")

HEADER_LENGTH = "Inference-Header-Content-Length"
CANARY_KEY = "canary-key"
"""User property: the key whose hash picks the side of a staged release (else the client id
of the 3.1.1 topic form, else a random draw)."""
PIN_VERSION = "version"
"""User property: pin the request to this serving or staged version."""

Props = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Reply:
    """Where a request's answer goes: its Response Topic (or paired reply topic), its
    Correlation Data, and the payload's ``id`` (3.1.1 requesters correlate by it)."""

    topic: str | None
    correlation: bytes | None
    rid: RequestId | None


@dataclass(frozen=True)
class Result:
    status: int
    body: bytes
    content_type: str
    props: Props = ()


class Requests:
    """The bridge's request work (one per bridge; no state of its own but `BridgeState`'s
    counters)."""

    def __init__(
        self,
        settings: MqttSettings,
        plane: DataPlane,
        topics: Topics,
        state: BridgeState,
        tracing: Tracing | None,
    ) -> None:
        self._settings = settings
        self._plane = plane
        self._topics = topics
        self._state = state
        self._tracing = tracing

    async def result(
        self, msg: Incoming, route: Route, obj: dict[str, Any] | None, reply: Reply
    ) -> Result:
        """The answer to ``msg``, in its trace when it brings one (user property
        ``traceparent``; the answer then carries the trace context as user properties)."""
        tracing = self._tracing
        if tracing is None or not tracing.wants(msg.user_properties):
            return await self._result(msg, route, obj, reply)
        attrs = {"messaging.destination.name": msg.topic, "wasmgate.model": route.name}
        with tracing.receive("mqtt", msg.user_properties, attrs) as current:
            result = await self._result(msg, route, obj, reply)
            mark_status(current, "wasmgate.status", result.status)
            trace_props = tuple(tracing.answer_carrier().items())
        return dataclasses.replace(result, props=(*result.props, *trace_props))

    def message(self, route: Route, reply: Reply, result: Result) -> Outgoing | None:
        """The answer's message, or None when it has nowhere to go (logged if an error)."""
        qos = self._settings.qos
        props = (("status", str(result.status)), *result.props)
        if reply.topic is not None:
            body = result.body
            if not reply.correlation:
                body = with_id(result.body, result.content_type, reply.rid)
            return Outgoing(reply.topic, body, qos, correlation_data=reply.correlation,
                            content_type=result.content_type, user_properties=props)  # fmt: skip
        if result.status in {200, 202} and route.kind == "adapter":  # fire-and-forget: results
            return Outgoing(self._topics.events(route.name), result.body, qos)
        if result.status != 200:
            log.warning("mqtt request on %s: %s (no reply address)", route.name, result.body[:200])
        return None

    async def _result(
        self, msg: Incoming, route: Route, obj: dict[str, Any] | None, reply: Reply
    ) -> Result:
        try:
            if route.kind == "adapter":
                return await self._run_adapter(msg, route, obj)
            return await self._infer_model(msg, route, obj)
        except Exception as e:
            answer = status_of(e)
            log_failure("mqtt", msg.topic, e, answer)
            body = error_body(public_message(e, answer), answer.status, reply.rid)
            return Result(answer.status, body, JSON)

    def _admit(self, msg: Incoming, obj: dict[str, Any] | None) -> float | None:
        """Refuse oversize and expired requests before any work; returns the deadline."""
        if len(msg.payload) > self._settings.max_payload_bytes:
            raise errors.PayloadTooLarge(
                f"payload of {len(msg.payload)} bytes exceeds mqtt.max_payload_bytes "
                f"({self._settings.max_payload_bytes})"
            )
        if msg.qos == 0 and self._state.in_flight > self._settings.receive_maximum:
            # QoS 0 has no flow control: beyond Receive Maximum, refuse rather than pile up.
            raise errors.Busy(
                f"more than {self._settings.receive_maximum} requests in flight; "
                "send QoS 1 requests to let the broker hold the backlog"
            )
        deadline = deadline_of(msg, obj)
        if deadline is not None and deadline <= time.monotonic():
            self._state.expired += 1
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
        self._state.busy_retries += 1

    async def _run_adapter(self, msg: Incoming, route: Route, obj: dict[str, Any] | None) -> Result:
        async with self._plane.adapter("mqtt", route.name) as call:
            deadline = self._admit(msg, obj)
            ans = await call.run_adapter(
                msg.payload, msg.content_type, self._route(msg, route, deadline), "mqtt"
            )
        props = _answered_by(ans.source, ans.version, ans.fallback_reason)
        status = 202 if ans.source == "deferred" else 200  # kept for the cloud: accepted
        return Result(status, ans.body, ans.content_type, props)

    async def _infer_model(self, msg: Incoming, route: Route, obj: dict[str, Any] | None) -> Result:
        async with self._plane.v2("mqtt", route.name, None) as call:
            deadline = self._admit(msg, obj)
            parsed = v2.parse_request(msg.payload, _header_length(msg))
            ans = await call.infer(parsed, self._route(msg, route, deadline))
            enc = v2.encode_response(
                route.name, str(ans.version), ans.outputs, parsed, parameters={"source": ans.source}
            )
        props = _answered_by(ans.source, ans.version, ans.fallback_reason)
        if enc.header_length is not None:
            props = (*props, (HEADER_LENGTH, str(enc.header_length)))
        return Result(200, enc.body, enc.content_type, props)


def _answered_by(source: str, version: int | str, fallback_reason: str | None) -> Props:
    """The user properties saying who answered: source, version, why the cloud did."""
    props: Props = (("source", source), ("version", str(version)))
    if fallback_reason:
        props = (*props, ("fallback_reason", fallback_reason))
    return props


def _header_length(msg: Incoming) -> int | None:
    header = msg.user_properties.get(HEADER_LENGTH)
    try:
        return int(header) if header is not None else None
    except ValueError as e:
        raise errors.BadRequest(f"{HEADER_LENGTH} must be an integer, got {header!r}") from e
