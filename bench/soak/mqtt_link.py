"""The soak's MQTT clients (paho, each with its own network thread) and the bookkeeping
that matches answers to requests.

- ``r5``: MQTT 5 requests to ``adapters/digits/req`` with a Response Topic and Correlation
  Data (the request id); ``abuse`` the same with user property ``timeout_ms = 1``;
- ``r311``: MQTT 3.1.1 V2 JSON requests to ``models/digits/infer/<client>`` with ``id``;
- ``big``: MQTT 5 requests whose Response Topic and Correlation Data exceed the daemon's
  limits: the daemon must refuse them (count them) and answer nothing;
- ``events``: subscribes to ``events/events`` and collects the sequence numbers the
  adapter emitted (first FP32 of the request) and the ``store-id`` of each copy.

Every client keeps a persistent session (QoS 1, clean start off): a broker restart loses
nothing queued for it. Callbacks run on paho's threads and hand over to the event loop.
"""

from __future__ import annotations

import asyncio
import json
import struct
import time
from collections.abc import Callable
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from bench.soak.ledger import LOST_AFTER_S, OK, Ledger

ROOT = "wasmgate/v1/soak"
OVERSIZE_TOPIC = "soak/big/" + "t" * 2000  # over mqtt.max_response_topic_bytes (1024)
OVERSIZE_CORRELATION = b"c" * 1000  # over mqtt.max_correlation_bytes (256)
NEAR_RESTART_S = 5.0
"""A lost request sent this soon after a broker restart is named as such (a gateway of
several workers loses those: the broker keeps no shared subscription over a restart)."""


def _client(name: str, *, v5: bool) -> paho.Client:
    proto = paho.MQTTv5 if v5 else paho.MQTTv311
    kw: dict[str, Any] = {} if v5 else {"clean_session": False}
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id=f"soak-{name}", protocol=proto,
                         **kw)  # fmt: skip
    client.max_queued_messages_set(0)  # unlimited: publishes while the broker is away wait
    client.max_inflight_messages_set(100)
    client.reconnect_delay_set(1, 1)
    return client


class MqttLink:
    """The clients, their pending requests and what they received."""

    def __init__(self, loop: asyncio.AbstractEventLoop, ledger: Ledger, port: int) -> None:
        self._loop, self._ledger, self._port = loop, ledger, port
        self._pending: dict[str, tuple[str, float, asyncio.Future[str]]] = {}
        self._seen: dict[str, tuple[int, str]] = {}  # id -> (connection, transport) 1st answer
        self._lost: dict[str, str] = {}  # id -> transport of requests counted lost
        self._connects: dict[str, int] = {}
        self.broker_restarts: list[tuple[float, float]] = []
        """When each broker restart began and ended (``time.perf_counter``)."""
        self.events: dict[int, int] = {}  # sequence number -> copies received
        self.event_ids: dict[str, int] = {}  # store-id -> connection number
        self.event_duplicates = 0
        self.event_redelivered = 0
        self.big_answers = 0
        self.clients = {name: _client(name, v5=name != "r311")
                        for name in ("r5", "r311", "big", "events")}  # fmt: skip
        subs = {"r5": "soak/answers/#", "r311": f"{ROOT}/models/digits/result/r311",
                "big": "soak/big/#", "events": f"{ROOT}/events/events"}  # fmt: skip
        for name, client in self.clients.items():
            client.on_connect = self._on_connect(name, subs[name])
            client.on_message = self._on_message(name)

    def start(self) -> None:
        for client in self.clients.values():
            v5 = client.protocol == paho.MQTTv5
            props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
            if v5:
                props.SessionExpiryInterval = 3600
            kw: dict[str, Any] = {"clean_start": False, "properties": props} if v5 else {}
            client.connect("127.0.0.1", self._port, keepalive=30, **kw)
            client.loop_start()

    def close(self) -> None:
        for client in self.clients.values():
            client.disconnect()
            client.loop_stop()

    def _on_connect(self, name: str, topic: str) -> Callable[..., None]:
        def on_connect(client: paho.Client, *_: Any) -> None:
            self._connects[name] = self._connects.get(name, 0) + 1
            client.subscribe(topic, qos=1)

        return on_connect

    def _on_message(self, name: str) -> Callable[..., None]:
        def on_message(_c: paho.Client, _u: Any, msg: paho.MQTTMessage) -> None:
            conn = self._connects.get(name, 0)
            if name == "events":
                self._loop.call_soon_threadsafe(self._event, msg, conn)
            elif name == "big":
                self.big_answers += 1
            else:
                rid, status = _answer(name, msg)
                self._loop.call_soon_threadsafe(self._settle, rid, status, conn)

        return on_message

    def _settle(self, rid: str, status: str, conn: int) -> None:
        if rid in self._seen:
            first, transport = self._seen[rid]
            tally = self._ledger.tally(transport)
            if first == conn:
                tally.duplicates += 1
            else:
                tally.redelivered += 1
            return
        entry = self._pending.pop(rid, None)
        if entry is None:
            if rid in self._lost:  # answered after it was counted lost: it was late
                self._ledger.tally(self._lost.pop(rid)).late += 1
            return
        transport, began, future = entry
        self._seen[rid] = (conn, transport)
        self._ledger.answered(transport, status, time.perf_counter() - began)
        if not future.done():
            future.set_result(status)

    def _event(self, msg: paho.MQTTMessage, conn: int) -> None:
        seq = int(struct.unpack_from("<f", msg.payload)[0]) if len(msg.payload) >= 4 else -1
        self.events[seq] = self.events.get(seq, 0) + 1
        store_id = _user_property(msg, "store-id") or f"seq{seq}"
        if store_id in self.event_ids:
            if self.event_ids[store_id] == conn:
                self.event_duplicates += 1
            else:
                self.event_redelivered += 1
        else:
            self.event_ids[store_id] = conn

    async def request(self, transport: str, rid: str, publish: Callable[[], None]) -> None:
        """Send through ``publish`` and wait for the answer to ``rid`` (or count it lost)."""
        future: asyncio.Future[str] = self._loop.create_future()
        began = time.perf_counter()
        self._pending[rid] = (transport, began, future)
        self._ledger.sent(transport)
        publish()
        try:
            async with asyncio.timeout(LOST_AFTER_S):
                await future
        except TimeoutError:
            self._pending.pop(rid, None)
            self._lost[rid] = transport
            self._ledger.lost(transport, f"no answer in {LOST_AFTER_S:g} s{self._near(began)}")

    def _near(self, sent: float) -> str:
        """Why a request sent at ``sent`` may be lost: a broker restart just before."""
        for start, end in self.broker_restarts:
            if start <= sent <= end + NEAR_RESTART_S:
                return f" (sent within {NEAR_RESTART_S:g} s of a broker restart)"
        return ""

    def publish_r5(self, rid: str, body: bytes, timeout_ms: int | None = None) -> None:
        props = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
        props.ResponseTopic = f"soak/answers/{'abuse' if timeout_ms else 'r5'}"
        props.CorrelationData = rid.encode()
        if timeout_ms is not None:
            props.UserProperty = [("timeout_ms", str(timeout_ms))]
        self.clients["r5"].publish(f"{ROOT}/adapters/digits/req", body, qos=1, properties=props)

    def publish_r311(self, rid: str, doc: dict[str, Any]) -> None:
        body = json.dumps({"id": rid, **doc})
        self.clients["r311"].publish(f"{ROOT}/models/digits/infer/r311", body, qos=1)

    def publish_big(self, body: bytes) -> None:
        props = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
        props.ResponseTopic = OVERSIZE_TOPIC
        props.CorrelationData = OVERSIZE_CORRELATION
        self.clients["big"].publish(f"{ROOT}/adapters/digits/req", body, qos=1, properties=props)

    @property
    def pending(self) -> int:
        return len(self._pending)


def _user_property(msg: paho.MQTTMessage, key: str) -> str | None:
    props = getattr(msg, "properties", None)
    for k, v in getattr(props, "UserProperty", None) or []:
        if k == key:
            return str(v)
    return None


def _answer(name: str, msg: paho.MQTTMessage) -> tuple[str, str]:
    """(request id, ``ok`` or the error status) of an answer."""
    if name == "r5":
        rid = bytes(getattr(msg.properties, "CorrelationData", b"")).decode()
        status = _user_property(msg, "status") or "?"
        return rid, OK if status == "200" else status
    try:
        doc = json.loads(msg.payload)
    except ValueError:
        return "?", "not json"
    code = doc.get("code")
    return str(doc.get("id")), OK if "outputs" in doc else str(code)
