"""MQTT 5 request -> answer on a real daemon through mosquitto, per requester configuration.

``python -m bench.bench_mqtt [--quick] [--json OUT]``

A real ``wasmgate serve`` runs the sandboxed digits adapter (the pass-through bundle of
`tests.fixtures.benchkit`) behind a private mosquitto 2.0 on loopback, once with the **stock**
broker config (Nagle on, as every distribution ships it) and once with ``set_tcp_nodelay true``.
One request in flight, p50 per configuration, all in the same run:

- requester configurations side by side: TCP_NODELAY with QoS 0 requests and a QoS 0 reply
  subscription (a requester that cannot stall its own link), TCP_NODELAY with QoS 1 both
  ways, and Nagle on (paho's default socket) with QoS 1;
- a bare paho echo responder (QoS 1, NODELAY, no parsing, no inference) in the daemon's
  place: what any client of the same broker gets;
- the baseline of every figure: the broker's own round trip, a NODELAY QoS 0 client
  publishing to a topic it subscribes to itself.

Why the stock broker matters: mosquitto keeps Nagle on its sockets unless
``set_tcp_nodelay true``. After it sends a client a small packet (a PUBACK), its next small
packet to that client waits until the client's delayed ACK (~40 ms on Linux) arrives.
"""

from __future__ import annotations

import itertools
import os
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from bench.common import Figure, median, script_main
from tests.fixtures.benchkit import BenchKit, payload
from tests.fixtures.daemon import Daemon
from tests.fixtures.models import get_models
from tests.fixtures.mosquitto import Broker
from wasmgate.runtime.mqtt._paho_private import close_threaded

GATEWAY = "bench"
NODELAY_CONF = "set_tcp_nodelay true\n"


@dataclass(frozen=True)
class Style:
    """How a requester treats its own link: Nagle off or on, QoS of request and replies."""

    label: str
    nodelay: bool = True
    qos: int = 1


NODELAY_QOS0 = Style("NODELAY, QoS 0", nodelay=True, qos=0)
NODELAY_QOS1 = Style("NODELAY, QoS 1", nodelay=True, qos=1)
NAGLE_QOS1 = Style("Nagle on (paho default), QoS 1", nodelay=False, qos=1)


class MqttRequester:
    """One MQTT 5 requester: publish, wait for the answer with the same correlation data."""

    def __init__(self, port: int, style: Style = NODELAY_QOS1) -> None:
        self._event = threading.Event()
        self._want = b""
        self._ids = itertools.count()
        self._qos = style.qos
        self.status: str | None = None
        # Unique for good: the bridge answers a (reply topic, correlation) pair it has seen
        # once, and id(self) comes back for the next requester once this one is freed.
        self.reply_topic = f"bench/replies/{os.getpid()}/{uuid.uuid4().hex}"
        self._client = paho.Client(CallbackAPIVersion.VERSION2, protocol=paho.MQTTv5)
        if style.nodelay:
            self._client.on_socket_open = _nodelay
        self._client.on_message = self._on_message
        subscribed = threading.Event()
        self._client.on_subscribe = lambda *_: subscribed.set()
        self._client.connect("127.0.0.1", port)
        self._client.loop_start()
        self._client.subscribe(self.reply_topic, qos=style.qos)
        if not subscribed.wait(10):
            raise TimeoutError("MQTT subscribe not acknowledged")

    def _on_message(self, _c: Any, _u: Any, msg: paho.MQTTMessage) -> None:
        if getattr(msg.properties, "CorrelationData", None) == self._want:
            self.status = dict(getattr(msg.properties, "UserProperty", []) or []).get("status")
            self._event.set()

    def call(self, topic: str, body: bytes, timeout: float = 30.0) -> float:
        """Send one request and wait for its answer; seconds from publish to answer.

        Correlation data is unique per requester: the bridge answers a repeated
        (reply topic, correlation) pair once, as a redelivered duplicate."""
        self._event.clear()
        self._want = f"{next(self._ids)}".encode()
        props = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
        props.ResponseTopic, props.CorrelationData = self.reply_topic, self._want
        start = time.perf_counter()
        self._client.publish(topic, body, qos=self._qos, properties=props)
        if not self._event.wait(timeout):
            raise TimeoutError(f"no MQTT answer on {topic} within {timeout}s")
        elapsed = time.perf_counter() - start
        if self.status not in (None, "200"):
            raise RuntimeError(f"MQTT answer status {self.status} on {topic}")
        return elapsed

    def close(self) -> None:
        close_threaded(self._client)


def _nodelay(_c: paho.Client, _u: Any, sock: Any) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def latencies(
    port: int, topic: str | None, body: bytes, seconds: float, style: Style = NODELAY_QOS1
) -> list[float]:
    """Closed-loop request -> answer latencies for ``seconds`` (at least 5 samples);
    ``topic=None`` publishes to the requester's own reply topic (the broker round trip)."""
    requester = MqttRequester(port, style)
    try:
        target = topic or requester.reply_topic
        for _ in range(3):
            requester.call(target, body)
        out: list[float] = []
        stop = time.perf_counter() + seconds
        while time.perf_counter() < stop or len(out) < 5:
            out.append(requester.call(target, body))
        return out
    finally:
        requester.close()


def start_echo(port: int, qos: int = 1) -> paho.Client:
    """A bare paho responder: republish each request to its Response Topic (at ``qos``)."""
    client = paho.Client(CallbackAPIVersion.VERSION2, protocol=paho.MQTTv5)
    client.on_socket_open = _nodelay

    def on_message(c: paho.Client, _u: Any, msg: paho.MQTTMessage) -> None:
        request: Any = msg.properties
        props = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
        props.CorrelationData = request.CorrelationData
        c.publish(request.ResponseTopic, msg.payload, qos=qos, properties=props)

    subscribed = threading.Event()
    client.on_subscribe = lambda *_: subscribed.set()
    client.on_message = on_message
    client.connect("127.0.0.1", port)
    client.loop_start()
    client.subscribe("bench/echo", qos=qos)
    if not subscribed.wait(10):
        raise TimeoutError("echo subscribe not acknowledged")
    return client


@contextmanager
def daemon_behind(
    root: Path, conf: str, models: dict[str, Path]
) -> Iterator[tuple[Daemon, Broker]]:
    """mosquitto (``conf`` added to the fixture's config) and a daemon serving one
    pass-through bundle per model, connected to it; both stopped after."""
    broker = Broker(root / "mosquitto", extra_conf=conf)
    broker.start()
    try:
        kit = BenchKit(root / "kit")
        for name, path in models.items():
            kit.build(name, path)
        mqtt = {"host": "127.0.0.1", "port": broker.port, "gateway_id": GATEWAY}
        daemon = kit.daemon(root / "daemon", config={"mqtt": mqtt})
        daemon.start(timeout=120)
        try:
            yield daemon, broker
        finally:
            daemon.stop()
    finally:
        broker.stop()


def _figures(broker: str, port: int, body: bytes, seconds: float, echo: bool) -> list[Figure]:
    topic = f"wasmgate/v1/{GATEWAY}/adapters/digits/req"
    base = median(latencies(port, None, b"x" * len(body), seconds, NODELAY_QOS0)) * 1e3
    figures = []
    for style in (NODELAY_QOS0, NODELAY_QOS1, NAGLE_QOS1):
        p50 = median(latencies(port, topic, body, seconds, style)) * 1e3
        figures.append(Figure(f"mqtt {broker}", f"daemon p50, requester {style.label}", p50,
                              "ms", "broker round trip", base))  # fmt: skip
    if echo:
        client = start_echo(port)
        try:
            p50 = median(latencies(port, "bench/echo", body, seconds, NODELAY_QOS0)) * 1e3
        finally:
            close_threaded(client)
        figures.append(Figure(f"mqtt {broker}", f"bare paho echo p50, {NODELAY_QOS0.label}",
                              p50, "ms", "broker round trip", base))  # fmt: skip
    return figures


def run(quick: bool) -> list[Figure]:
    """Both broker configurations, every requester style; quick: short windows."""
    seconds = 0.3 if quick else 3.0
    x = np.random.default_rng(0).uniform(0, 16, (1, 64)).astype(np.float32)
    body = payload(x)
    figures: list[Figure] = []
    for name, conf in (("stock mosquitto", ""), ("mosquitto set_tcp_nodelay", NODELAY_CONF)):
        with (
            tempfile.TemporaryDirectory(prefix="wasmgate-bench-") as tmp,
            daemon_behind(Path(tmp), conf, {"digits": get_models().digits_fp32}) as (_, broker),
        ):
            figures += _figures(name, broker.port, body, seconds, echo=not conf)
    return figures


def main() -> None:
    script_main(__doc__, run, "short windows")


if __name__ == "__main__":
    main()
