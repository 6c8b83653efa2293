"""The operator's MQTT connection: read retained fleet topics, publish retained documents.

Synchronous on purpose: a CLI run is one short conversation (subscribe, read what the broker
retains, publish, wait for reports), so paho's own network thread feeds a topic -> payload
map under a condition variable and the caller waits on it with a deadline. The daemon's
asyncio bridge (``runtime/mqtt/client.py``) is the wrong shape for that.

The end of the retained burst is detected with a marker: after subscribing, the client
publishes one message to a topic of its own that it also subscribes to; a broker forwards a
client's messages in order, so when the marker comes back the retained messages queued
before it are in, and a short quiet period covers brokers that interleave.
"""

from __future__ import annotations

import ssl
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode

from wasmgate._compat import Self
from wasmgate.runtime.mqtt._paho_private import close_threaded

_CONNECT_TIMEOUT_S = 10.0
_QUIET_S = 0.3
_IN_FLIGHT = 100
"""QoS 1 messages on the wire before a PUBACK (paho's default is 20): a rollout's wave."""


class BrokerError(Exception):
    """The broker could not be reached or refused us; the message says which."""


@dataclass(frozen=True)
class BrokerSettings:
    """Where the broker is and how to log in (TLS optional)."""

    host: str
    port: int
    username: str | None = None
    password: str | None = None
    tls: bool = False
    ca: Path | None = None


def parse_broker(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too) as (host, port); ValueError when malformed."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"broker {text!r}: expected HOST:PORT")
    return host.strip("[]"), int(port)


class OperatorClient:
    """One MQTT connection of the CLI; use as a context manager (connects, disconnects)."""

    def __init__(self, settings: BrokerSettings) -> None:
        self._settings = settings
        self._cond = threading.Condition()
        self._messages: dict[str, bytes] = {}
        self._changed: set[str] = set()
        """Topics that got a message since the last `wait_for_changes` check."""
        self._marker = f"wasmgate-fleet-cli/{uuid.uuid4().hex}"
        self._client = paho.Client(
            CallbackAPIVersion.VERSION2,
            client_id=f"wasmgate-fleet-{uuid.uuid4().hex[:12]}",
            protocol=paho.MQTTv311,
        )
        self._client.on_message = self._on_message
        self._client.on_connect = self._on_connect
        self._client.max_inflight_messages_set(_IN_FLIGHT)
        self._connected: bool | None = None
        self._listeners: list[Callable[[str, bytes], None]] = []

    def __enter__(self) -> Self:
        s = self._settings
        if s.username is not None:
            self._client.username_pw_set(s.username, s.password)
        if s.tls or s.ca is not None:
            self._client.tls_set(ca_certs=str(s.ca) if s.ca else None, cert_reqs=ssl.CERT_REQUIRED)
        try:
            self._client.connect(s.host, s.port, keepalive=30)
        except (OSError, ValueError) as e:
            raise BrokerError(f"broker {s.host}:{s.port}: {e}") from e
        self._client.loop_start()
        if not self._wait(lambda: self._connected is not None, _CONNECT_TIMEOUT_S):
            self.close()
            raise BrokerError(f"broker {s.host}:{s.port}: no CONNACK in {_CONNECT_TIMEOUT_S}s")
        if not self._connected:
            self.close()
            raise BrokerError(f"broker {s.host}:{s.port}: connection refused")
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        close_threaded(self._client)

    def _on_connect(self, _c: object, _u: object, _f: object, rc: object, _p: object) -> None:
        with self._cond:
            self._connected = not getattr(rc, "is_failure", False)
            self._cond.notify_all()

    def _on_message(self, _c: object, _u: object, msg: paho.MQTTMessage) -> None:
        with self._cond:
            self._messages[msg.topic] = bytes(msg.payload)
            self._changed.add(msg.topic)
            listeners = list(self._listeners)
            self._cond.notify_all()
        for listener in listeners:
            listener(msg.topic, bytes(msg.payload))

    def on_message(self, listener: Callable[[str, bytes], None]) -> None:
        """Call ``listener(topic, payload)`` for every message from now on (network thread)."""
        with self._cond:
            self._listeners.append(listener)

    def _wait(self, predicate: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def wait_for(self, predicate: Callable[[dict[str, bytes]], bool], timeout: float) -> bool:
        """Wait until ``predicate(messages)`` holds (checked on every message) or timeout."""
        return self._wait(lambda: predicate(self._messages), timeout)

    def wait_for_changes(
        self, predicate: Callable[[dict[str, bytes], set[str]], bool], timeout: float
    ) -> bool:
        """`wait_for`, with the topics that got a message since the previous check: a caller
        watching thousands of topics looks at those, not at every one per message."""

        def check() -> bool:  # runs under the condition's lock, as `_on_message` writes
            changed, self._changed = self._changed, set()
            return predicate(self._messages, changed)

        return self._wait(check, timeout)

    def snapshot(self) -> dict[str, bytes]:
        """The latest payload of every topic seen so far (empty bytes: cleared)."""
        with self._cond:
            return dict(self._messages)

    def collect(self, filters: list[str], timeout: float) -> dict[str, bytes]:
        """Subscribe to ``filters`` and return what the broker retains for them."""
        for f in [*filters, self._marker]:
            self._client.subscribe(f, qos=1)
        self._client.publish(self._marker, b"end", qos=1)
        self._wait(lambda: self._marker in self._messages, timeout)
        count = -1
        while count != len(self._messages):  # bounded: each pass waits on a new topic
            count = len(self._messages)
            time.sleep(_QUIET_S)
        with self._cond:
            self._messages.pop(self._marker, None)
            return dict(self._messages)

    def publish(self, topic: str, payload: bytes, timeout: float = _CONNECT_TIMEOUT_S) -> None:
        """Publish retained at QoS 1 and wait for the broker's PUBACK."""
        self.publish_many([(topic, payload)], timeout)

    def publish_many(
        self, messages: Iterable[tuple[str, bytes]], timeout: float = _CONNECT_TIMEOUT_S
    ) -> None:
        """Publish each retained at QoS 1, then wait for every PUBACK (``timeout`` each).

        Not one round trip per message: a wave of 9,000 gateway documents waited ~4 ms for
        each PUBACK in turn (40 s at 10,000 gateways, minutes at 100,000); paho keeps up to
        its in-flight window on the wire and queues the rest."""
        sent = []
        for topic, payload in messages:
            info = self._client.publish(topic, payload, qos=1, retain=True)
            if info.rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
                raise BrokerError(f"publish {topic}: {paho.error_string(info.rc)}")
            sent.append((topic, info))
        for topic, info in sent:
            info.wait_for_publish(timeout)
            if not info.is_published():
                raise BrokerError(f"publish {topic}: no PUBACK in {timeout}s")
