"""What the bridge does with one request message, from receipt to the ack decision.

`Inbound.serve` ignores (and lets the bridge ack) what must never be worked: a message on a
topic not ours, a retained request, Response Topic or Correlation Data over their byte
caps, a Response Topic outside ``mqtt.response_topics``. A redelivered request (same reply
address, correlation and payload within ``mqtt.dedupe_window_s``, see
`wasmgate.runtime.mqtt.dedupe`) is answered once: a copy waits for the first one's answer
and is only acked. Every other request is worked (`wasmgate.runtime.mqtt.requests`) and
its answer published, or kept in the store while the broker is away; one that could be
neither is left unacked, so the broker redelivers it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Literal

from wasmgate.runtime.field.store import StoreError
from wasmgate.runtime.mqtt.client import MqttClient, NotPublished
from wasmgate.runtime.mqtt.dedupe import NotAnswered, Recent, dedupe_key
from wasmgate.runtime.mqtt.messages import Incoming, json_object, request_id
from wasmgate.runtime.mqtt.requests import Reply, Requests
from wasmgate.runtime.mqtt.spool import Spool
from wasmgate.runtime.mqtt.state import BridgeState
from wasmgate.runtime.mqtt.topics import Route, Topics
from wasmgate.runtime.ops.config import MqttSettings
from wasmgate.runtime.ops.logs import Throttled
from wasmgate.runtime.ops.throttle_shared import SharedThrottle

log = logging.getLogger("wasmgate.mqtt")

Answered = Literal[True, False, "stored"]
"""How a request was answered: published, kept in the store (the broker was away), or not."""


class Inbound:
    """Request messages of one connected bridge (made once its client and spool exist)."""

    def __init__(
        self,
        settings: MqttSettings,
        topics: Topics,
        state: BridgeState,
        work: Requests,
        *,
        recent: Recent,
        client: MqttClient,
        spool: Spool | None,
        log_limits: SharedThrottle | None = None,
    ) -> None:
        self._settings = settings
        self._topics = topics
        self._state = state
        self._work = work
        self._recent = recent
        self._client = client
        self._spool = spool
        self._ignored = Throttled(log)
        if log_limits is not None:  # a worker: once a minute for the whole gateway
            self._ignored.share(log_limits)

    async def serve(self, msg: Incoming) -> bool:
        """Answer ``msg``; True when it may be acknowledged."""
        route = self._topics.parse(msg.topic)
        if route is None:
            log.warning("ignoring message on unexpected topic %r", msg.topic)
            return True
        refused = self._refusal(msg)
        if refused is not None:
            kind, why = refused
            # Throttled per kind: a hostile client sending oversize requests in a loop
            # would otherwise write a journal line per message (the counters count all).
            self._ignored.warning(kind, f"ignoring mqtt request on {msg.topic[:200]!r}: {why}",
                                  {"kind": kind})  # fmt: skip
            return True
        small = len(msg.payload) <= self._settings.max_payload_bytes
        obj = json_object(msg.payload) if small else None
        reply = self._reply_to(msg, route, obj)
        key = dedupe_key(
            reply.topic, reply.correlation, reply.rid, msg.payload, request_topic=msg.topic
        )
        if key is None:
            return bool(await self._answer_or_drop(msg, route, obj, reply))
        if self._spool is not None and self._spool.holds(key):
            self._state.duplicates += 1  # its answer waits in the store: ack, do not re-work
            return True
        seen = self._recent.claim(key)
        if seen is None:
            return await self._first(msg, route, obj, reply, key)
        self._state.duplicates += 1
        try:
            await asyncio.shield(seen)
        except NotAnswered:
            return False
        return True

    async def _first(
        self, msg: Incoming, route: Route, obj: dict[str, Any] | None, reply: Reply, key: bytes
    ) -> bool:
        """A request not seen within the window (claimed: remembered while it is worked, so a
        copy waits for this answer instead of working it again)."""
        if msg.dup:
            self._state.redelivered += 1
        try:
            answered = await self._answer_or_drop(msg, route, obj, reply, key)
        except BaseException as e:
            self._recent.forget(key, repr(e))
            raise
        if answered == "stored":
            self._recent.hold(key)
        elif answered:
            self._recent.answered(key)
        else:
            self._recent.forget(key, "answer neither published nor stored")
        return bool(answered)

    def _refusal(self, msg: Incoming) -> tuple[str, str] | None:
        """What kind of request ``msg`` is that is ignored (acked, never worked nor
        answered), and why; None when it is served."""
        if msg.retain:
            # A retained request would run again at every start and reconnect.
            self._state.retained_ignored += 1
            return "retained", "it is a retained message (publish requests without retain)"
        oversize = self._oversize(msg)
        if oversize is not None:
            self._state.oversize_refused += 1
            return oversize
        if msg.response_topic:
            why = self._topics.reply_refusal(msg.response_topic)
            if why is not None:
                self._state.replies_refused += 1
                topic = msg.response_topic[:200]
                return "reply refused", f"Response Topic {topic!r} refused: {why}"
        return None

    def _oversize(self, msg: Incoming) -> tuple[str, str] | None:
        cap = self._settings.max_response_topic_bytes
        topic = msg.response_topic
        if topic and len(topic) * 4 > cap:  # cheap first: at most 4 bytes per character
            size = len(topic.encode("utf-8", "surrogatepass"))
            if size > cap:
                why = f"Response Topic of {size} bytes exceeds mqtt.max_response_topic_bytes"
                return "oversize response topic", why
        data = msg.correlation_data
        if data is not None and len(data) > self._settings.max_correlation_bytes:
            why = f"Correlation Data of {len(data)} bytes exceeds mqtt.max_correlation_bytes"
            return "oversize correlation data", why
        return None

    def _reply_to(self, msg: Incoming, route: Route, obj: dict[str, Any] | None) -> Reply:
        rid = request_id(obj)
        if msg.response_topic:
            return Reply(msg.response_topic, msg.correlation_data, rid)
        return Reply(self._topics.paired_reply(route), None, rid)

    async def _answer_or_drop(
        self,
        msg: Incoming,
        route: Route,
        obj: dict[str, Any] | None,
        reply: Reply,
        key: bytes | None = None,
    ) -> Answered:
        """False when the answer was neither published nor stored: leave the request unacked."""
        try:
            return await self._work_and_answer(msg, route, obj, reply, key)
        except (NotPublished, StoreError) as e:
            log.warning("mqtt answer on %s not delivered: %s", route.name, e)
            return False

    async def _work_and_answer(
        self,
        msg: Incoming,
        route: Route,
        obj: dict[str, Any] | None,
        reply: Reply,
        key: bytes | None,
    ) -> Answered:
        # The adapter's events went to the store in the service (one path for every
        # transport); only the answer is the bridge's.
        result = await self._work.result(msg, route, obj, reply)
        code = str(result.status)
        self._state.by_status[code] = self._state.by_status.get(code, 0) + 1
        if result.status >= 400:
            self._state.errors += 1
        answer = self._work.message(route, reply, result)
        if answer is None:
            return True
        kept: Answered = True
        try:
            await self._client.publish(answer)
        except NotPublished:
            if self._spool is None:
                raise
            await self._spool.keep_answer(answer, key)
            self._state.stored += 1
            kept = "stored"
        self._state.answered += 1
        return kept
