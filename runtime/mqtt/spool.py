"""What the MQTT bridge keeps on disk until the broker has it: answers made while the broker
was away, and every adapter event (whatever transport the request came over).

Two streams of the store (`wasmgate.runtime.field.store`), each drained by a `Forwarder`
while the link is up, in order, at QoS >= 1, acked in the store only on the broker's
PUBACK, at most ``store.drain_window`` in flight and ``store.drain_rate`` per second
together (live answers keep the link):

- ``answers``: an answer whose publish failed because the link was down is appended here,
  with its request's dedupe key. While it waits, a redelivery of that request (the broker
  resends unacked requests after a reconnect, even to a restarted daemon) is only
  acknowledged; once delivered, the key enters the in-memory dedupe window.
- ``events``: appended by `wasmgate.runtime.field.events.StoredEvents` for every request;
  published to ``events/<adapter>`` at ``mqtt.events_qos``.
- ``samples`` (with ``samples.mqtt``): hard examples kept for retraining
  (`wasmgate.runtime.field.samples`), one JSON document each, published at QoS >= 1 to
  ``samples/<adapter>`` or ``samples.mqtt_topic`` (``{adapter}`` replaced).
- ``cloud`` (with a cloud client): deferred cloud fallbacks, sent one at a time by
  `wasmgate.runtime.mqtt.deferred.DeferredSender`, their answers published to
  ``deferred/<adapter>``.

Every stored message carries user property ``store-id`` (MQTT 5): ids only grow, so a
subscriber drops the copy a crash between PUBACK and the ack's commit may re-send.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from wasmgate.runtime.cloud.policy import CloudClient
from wasmgate.runtime.field.deferral import CLOUD
from wasmgate.runtime.field.forward import Forwarder, Pace
from wasmgate.runtime.field.samples import SAMPLES
from wasmgate.runtime.field.store import Record, Store
from wasmgate.runtime.mqtt.client import MqttClient
from wasmgate.runtime.mqtt.deferred import DeferredSender
from wasmgate.runtime.mqtt.messages import Outgoing
from wasmgate.runtime.mqtt.topics import Topics
from wasmgate.runtime.ops.config import MqttSettings, StoreSettings

ANSWERS = "answers"
EVENTS = "events"
STORE_ID = "store-id"
_PAGE = 1000


def _meta_of(msg: Outgoing, key: bytes | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"topic": msg.topic, "qos": msg.qos}
    if msg.correlation_data is not None:
        meta["correlation"] = msg.correlation_data.hex()
    if msg.content_type is not None:
        meta["content_type"] = msg.content_type
    if msg.user_properties:
        meta["props"] = [list(p) for p in msg.user_properties]
    if key is not None:
        meta["dedupe"] = key.hex()
    return meta


def _answer_of(rec: Record) -> Outgoing:
    meta = rec.meta
    corr = meta.get("correlation")
    props = tuple((str(k), str(v)) for k, v in meta.get("props", ()))
    return Outgoing(
        str(meta["topic"]),
        rec.payload,
        max(1, int(meta.get("qos", 1))),  # stored streams leave at QoS >= 1: acked on PUBACK
        correlation_data=bytes.fromhex(corr) if corr is not None else None,
        content_type=meta.get("content_type"),
        user_properties=(*props, (STORE_ID, str(rec.id))),
    )


def _dedupe_of(rec: Record) -> bytes | None:
    key = rec.meta.get("dedupe")
    return bytes.fromhex(key) if isinstance(key, str) else None


@dataclass(frozen=True)
class Stored:
    """What the bridge needs to keep messages on disk (`MqttBridge(..., stored=...)`)."""

    store: Store
    settings: StoreSettings
    cloud: CloudClient | None = None
    """Set when deferred cloud fallbacks are on: the bridge drains the ``cloud`` stream."""
    cloud_retry_s: float = 30.0
    """Pause before retrying an unreachable cloud (``cloud.breaker_reset_s``)."""
    samples: bool = False
    """Ship the ``samples`` stream (``samples.mqtt``); False leaves it for export."""
    samples_topic: str | None = None
    """``samples.mqtt_topic`` (``{adapter}`` replaced); None: ``samples/<adapter>``."""


class Spool:
    """The bridge's stored streams and their forwarders (run with `running`)."""

    def __init__(
        self,
        stored: Stored,
        client: MqttClient,
        topics: Topics,
        mqtt: MqttSettings,
        on_answer_delivered: Callable[[bytes], None],
        *,
        drain: bool = True,
    ) -> None:
        """``drain`` False (a worker's spool): answers are kept, never sent from here (the
        supervisor's spool drains the store every process writes)."""
        store = stored.store
        self._store = store
        self._client = client
        self._topics = topics
        self._events_qos = mqtt.events_qos
        self._delivered_cb = on_answer_delivered
        self._held: dict[bytes, int] = {}
        """Dedupe keys of stored answers -> their store id."""
        self.forwarders: dict[str, Forwarder] = {}
        self.deferred: DeferredSender | None = None
        if drain:
            self._drains(stored, client, topics, mqtt)

    def _drains(
        self, stored: Stored, client: MqttClient, topics: Topics, mqtt: MqttSettings
    ) -> None:
        store, drain = stored.store, stored.settings
        pace = Pace(drain.drain_rate, drain.drain_window)
        link = client.link
        self.forwarders = {
            ANSWERS: Forwarder(
                store, ANSWERS, self._send_answer, link,
                window=drain.drain_window, pace=pace, on_delivered=self._answer_delivered,
            ),
            EVENTS: Forwarder(
                store, EVENTS, self._send_event, link, window=drain.drain_window, pace=pace
            ),
        }  # fmt: skip
        if stored.samples:
            self._samples_topic = stored.samples_topic or topics.samples("{adapter}")
            self._samples_qos = max(1, mqtt.qos)
            self.forwarders[SAMPLES] = Forwarder(
                store, SAMPLES, self._send_sample, link, window=drain.drain_window, pace=pace
            )
        if stored.cloud is not None:  # one at a time: the cloud sees them in order
            self.deferred = DeferredSender(
                stored.cloud, client.publish, topics.deferred,
                qos=mqtt.qos, retry_s=stored.cloud_retry_s,
            )  # fmt: skip
            send = self.deferred.send
            self.forwarders[CLOUD] = Forwarder(store, CLOUD, send, link, window=1, pace=pace)

    async def load(self) -> None:
        """Remember the dedupe keys of answers a previous process stored (before connect)."""
        after = 0
        while recs := await self._store.peek(ANSWERS, after=after, limit=_PAGE):
            for rec in recs:
                key = _dedupe_of(rec)
                if key is not None:
                    self._held[key] = rec.id
            after = recs[-1].id

    @contextlib.asynccontextmanager
    async def running(self) -> Any:
        tasks = [
            asyncio.create_task(f.run(), name=f"store-drain-{name}")
            for name, f in self.forwarders.items()
        ]
        try:
            yield self
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def keep_answer(self, msg: Outgoing, key: bytes | None) -> None:
        """Store an answer the broker could not take now; StoreError when refused."""
        rid = await self._store.append(ANSWERS, msg.payload, _meta_of(msg, key))
        if key is not None:
            self._held[key] = rid
            if len(self._held) % _PAGE == 0:
                self._forget_dropped()

    def _forget_dropped(self) -> None:
        """Keys of answers dropped from the store (full, expired) without delivery go."""
        first = self._store.first_id(ANSWERS)
        for key, rid in list(self._held.items()):
            if first is None or rid < first:
                del self._held[key]

    def holds(self, key: bytes) -> bool:
        """True while an answer to the request with this dedupe key waits in the store."""
        rid = self._held.get(key)
        if rid is None:
            return False
        first = self._store.first_id(ANSWERS)
        if first is None or rid < first:  # dropped (full or expired) without delivery
            del self._held[key]
            return False
        return True

    def held_keys(self) -> list[bytes]:
        """The dedupe keys of the answers waiting in the store."""
        return list(self._held)

    def _answer_delivered(self, rec: Record) -> None:
        # Any stored answer, not only those this process kept: a worker's go out here too.
        key = _dedupe_of(rec)
        if key is not None:
            self._held.pop(key, None)
            self._delivered_cb(key)

    def _send_answer(self, rec: Record) -> asyncio.Future[None]:
        return self._client.publish(_answer_of(rec))

    def _send_event(self, rec: Record) -> asyncio.Future[None]:
        topic = self._topics.events(str(rec.meta.get("adapter", "")))
        props = ((STORE_ID, str(rec.id)),)
        return self._client.publish(
            Outgoing(topic, rec.payload, self._events_qos, user_properties=props)
        )

    def _send_sample(self, rec: Record) -> asyncio.Future[None]:
        topic = self._samples_topic.replace("{adapter}", str(rec.meta.get("adapter", "")))
        props = ((STORE_ID, str(rec.id)),)
        msg = Outgoing(
            topic, rec.payload, self._samples_qos,
            content_type="application/json", user_properties=props,
        )  # fmt: skip
        return self._client.publish(msg)

    def state(self) -> dict[str, Any]:
        return {name: asdict(f.stats) for name, f in self.forwarders.items()}
