"""A device-side paho client for tests (threaded loop: it is not what is under test)."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from wasmgate.runtime.mqtt._paho_private import close_threaded

_ids = itertools.count()


@dataclass(frozen=True)
class Reply:
    topic: str
    payload: bytes
    correlation: bytes | None
    content_type: str | None
    props: dict[str, str]
    retain: bool
    dup: bool = False


class Requester:
    """Publishes requests and collects everything arriving on its subscriptions."""

    def __init__(
        self,
        port: int,
        *,
        v5: bool = True,
        client_id: str | None = None,
        persistent: bool = False,
        tls: tuple[Path, Path, Path] | None = None,
    ) -> None:
        """``tls``: (CA, client certificate, client key) PEM files for a TLS broker."""
        self.v5 = v5
        self.client_id = client_id or f"req-{next(_ids)}-{time.monotonic_ns()}"
        self.replies: list[Reply] = []
        self._lock = threading.Lock()
        self._port = port
        self._persistent = persistent
        self._tls = tls
        self._client = self._build()

    def _build(self) -> paho.Client:
        client = paho.Client(
            CallbackAPIVersion.VERSION2,
            client_id=self.client_id,
            protocol=paho.MQTTv5 if self.v5 else paho.MQTTv311,
            clean_session=None if self.v5 else not self._persistent,
        )
        client.on_message = self._on_message
        if self._tls is not None:
            ca, cert, key = self._tls
            client.tls_set(ca_certs=str(ca), certfile=str(cert), keyfile=str(key))
        return client

    def _on_message(self, _c: Any, _u: Any, msg: paho.MQTTMessage) -> None:
        props = msg.properties
        user = dict(getattr(props, "UserProperty", None) or [])
        reply = Reply(
            msg.topic,
            bytes(msg.payload),
            getattr(props, "CorrelationData", None),
            getattr(props, "ContentType", None),
            user,
            bool(msg.retain),
            bool(msg.dup),
        )
        with self._lock:
            self.replies.append(reply)

    def connect(self, *topics: str, qos: int = 1) -> Requester:
        if self.v5:
            props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
            props.SessionExpiryInterval = 600 if self._persistent else 0
            self._client.connect(
                "127.0.0.1", self._port, clean_start=not self._persistent, properties=props
            )
        else:
            self._client.connect("127.0.0.1", self._port)
        self._client.loop_start()
        done = threading.Event()
        self._client.on_subscribe = lambda *_: done.set()
        self._client.subscribe([(t, qos) for t in topics])
        if not done.wait(5):
            raise TimeoutError("subscribe not acknowledged")
        return self

    def close(self) -> None:
        close_threaded(self._client)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(
        self,
        topic: str,
        payload: bytes,
        *,
        response_topic: str | None = None,
        correlation: bytes | None = None,
        qos: int = 1,
        expiry: int | None = None,
        user: list[tuple[str, str]] | None = None,
        retain: bool = False,
    ) -> paho.MQTTMessageInfo:
        """Publish; ``.wait_for_publish(timeout)`` on the answer waits for the broker's PUBACK
        (QoS 1: the broker has it, retained and queued for offline sessions)."""
        props = None
        if self.v5:
            props = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
            if response_topic is not None:
                props.ResponseTopic = response_topic
            if correlation is not None:
                props.CorrelationData = correlation
            if expiry is not None:
                props.MessageExpiryInterval = expiry
            if user:
                props.UserProperty = user
        return self._client.publish(topic, payload, qos=qos, retain=retain, properties=props)

    def snapshot(self) -> list[Reply]:
        with self._lock:
            return list(self.replies)

    async def wait_for(self, count: int, timeout: float = 10.0) -> list[Reply]:
        """At least ``count`` replies, or TimeoutError naming how many arrived."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            got = self.snapshot()
            if len(got) >= count:
                return got
            await asyncio.sleep(0.01)
        raise TimeoutError(f"{len(self.snapshot())} of {count} replies after {timeout}s")
