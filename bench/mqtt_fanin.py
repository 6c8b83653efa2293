"""MQTT fan-in load: N closed-loop MQTT 5 requesters on one topic, every request timed.

``python -m bench.mqtt_fanin PORT TOPIC CLIENTS SECONDS PAYLOAD_FILE`` prints one JSON
line: per request its publish and answer times (seconds, one clock), the requests sent
during warm-up excluded. Each requester is a paho client with TCP_NODELAY, QoS 0 requests
and a QoS 0 reply subscription (a requester that cannot stall its own link), and sends its
next request from the callback that received the last answer: no requester thread, so the
load generator's own GIL hand-offs stay out of the figures as far as Python allows.
`bench.bench_cores` runs it in a child process pinned to a CPU of its own.
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from bench.bench_mqtt import _nodelay
from wasmgate.runtime.mqtt._paho_private import close_threaded

WARMUP_S = 0.5


class Requester:
    """One closed-loop requester; `samples` holds (published, answered) pairs."""

    def __init__(self, port: int, topic: str, body: bytes, stop: float, done: Any) -> None:
        self._topic, self._body, self._stop, self._done = topic, body, stop, done
        self._ids = itertools.count()
        self._want = b""
        self._sent = 0.0
        self.samples: list[tuple[float, float]] = []
        self.reply = f"bench/fanin/{uuid.uuid4().hex}"
        self.client = paho.Client(CallbackAPIVersion.VERSION2, protocol=paho.MQTTv5)
        self.client.on_socket_open = _nodelay
        self.client.on_message = self._on_message
        subscribed = threading.Event()
        self.client.on_subscribe = lambda *_: subscribed.set()
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        self.client.subscribe(self.reply, qos=0)
        if not subscribed.wait(10):
            raise TimeoutError("MQTT subscribe not acknowledged")

    def send(self) -> None:
        self._want = str(next(self._ids)).encode()
        props = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
        props.ResponseTopic, props.CorrelationData = self.reply, self._want
        self._sent = time.perf_counter()
        self.client.publish(self._topic, self._body, qos=0, properties=props)

    def _on_message(self, _c: Any, _u: Any, msg: paho.MQTTMessage) -> None:
        if getattr(msg.properties, "CorrelationData", None) != self._want:
            return
        now = time.perf_counter()
        status = dict(getattr(msg.properties, "UserProperty", []) or []).get("status")
        if status not in (None, "200"):
            print(f"answer status {status}: {msg.payload[:200]!r}", file=sys.stderr)
        self.samples.append((self._sent, now))
        if now < self._stop:
            self.send()
        else:
            self._done()


def fan_in(port: int, topic: str, clients: int, seconds: float, body: bytes) -> dict[str, Any]:
    """Run ``clients`` requesters for ``seconds`` after a warm-up; the timed requests."""
    finished = threading.Semaphore(0)
    stop = float("inf")
    requesters = [Requester(port, topic, body, stop, finished.release) for _ in range(clients)]
    start = time.perf_counter()
    stop = start + WARMUP_S + seconds
    for r in requesters:
        r._stop = stop  # noqa: SLF001 - our own class, set once all are connected
        r.send()
    for _ in requesters:
        if not finished.acquire(timeout=seconds + 60):
            raise TimeoutError("a requester got no answer for a minute")
    for r in requesters:
        close_threaded(r.client)
    timed = [s for r in requesters for s in r.samples if s[0] >= start + WARMUP_S]
    return {"samples": timed, "seconds": seconds}


def main() -> None:
    port, topic, clients, seconds, payload = sys.argv[1:6]
    out = fan_in(int(port), topic, int(clients), float(seconds), Path(payload).read_bytes())
    print(json.dumps(out))


if __name__ == "__main__":
    main()
