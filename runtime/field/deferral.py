"""Deferred cloud fallbacks: a request the cloud could not take, kept until it can.

When a bundle's ``fallback.defer`` (with ``send_payload``) and ``cloud.defer`` allow it, an
adapter request that has no local answer and whose cloud call failed because the cloud is
unreachable (connection refused, timeout, 5xx/429, breaker open; not a 4xx refusal) is
appended to the store's ``cloud`` stream: payload, content type, adapter (HTTP and MQTT
names), reason and time. The client is answered at once: source ``deferred``, HTTP 202 /
MQTT ``status`` 202, body ``{"deferred": <id>, "topic": "<where the answer will be>"}``.

The MQTT bridge drains the stream when both the broker and the cloud are reachable
(`wasmgate.runtime.mqtt.deferred`): each request is sent to the cloud in order and its answer
published to ``<root>/deferred/<adapter>`` with user properties ``deferred-id`` (the id
above), ``status`` and ``source=cloud``; the entry is acked on that publish's PUBACK.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import msgspec

from wasmgate.runtime.field.store import Store
from wasmgate.runtime.protocol import jsonio
from wasmgate.runtime.served.api import AdapterAnswer, AdapterRequest

CLOUD = "cloud"
DEFERRED_ID = "deferred-id"
"""User property (MQTT) naming the deferred request an answer belongs to."""


class Deferral(msgspec.Struct, frozen=True):
    """What the fallback runner needs to know about the bundle of a deferred request."""

    adapter: str
    """The HTTP route name: what the cloud is called with."""
    mqtt_name: str
    """The MQTT route name: the answer's topic is ``deferred/<mqtt_name>``."""
    version: int
    content_type: str
    """The bundle's answer content type (the cloud's answer is published with it)."""


class StoredDeferrals:
    """Appends deferred requests to the store's ``cloud`` stream."""

    def __init__(self, store: Store, topic_of: Callable[[str], str]) -> None:
        self._store = store
        self._topic_of = topic_of
        self.deferred = 0

    async def defer(self, what: Deferral, req: AdapterRequest, reason: str) -> AdapterAnswer:
        """Keep ``req`` (StoreError when refused); the immediate answer for its client."""
        meta = {
            "adapter": what.adapter,
            "mqtt": what.mqtt_name,
            "content_type": req.content_type,
            "answer_type": what.content_type,
            "reason": reason,
            "at": time.time(),
        }
        rid = await self._store.append(CLOUD, req.payload, meta)
        self.deferred += 1
        body = {"deferred": rid, "topic": self._topic_of(what.mqtt_name), "reason": reason}
        return AdapterAnswer(
            jsonio.dumps(body),
            "application/json",
            "deferred",
            what.version,
            fallback_reason=reason,
        )
