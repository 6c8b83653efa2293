"""``wasmgate doctor``'s broker check: connect as the daemon would, then time round trips.

Two clients play device and gateway: the device publishes a QoS 1 request, the gateway
client answers it with a QoS 1 publish, the device receives the answer: the pattern of a
real request. A broker that leaves Nagle's algorithm on (mosquitto's default, until
``set_tcp_nodelay true``) holds the answer behind its own PUBACK to the device until the
device's delayed ACK, 40 ms or more, so the median round trip shows it plainly.
"""

from __future__ import annotations

import os
import queue
import socket
import ssl
import statistics
import threading
import time
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion

from wasmgate.runtime.cli._checks import Finding
from wasmgate.runtime.mqtt._paho_private import close_threaded
from wasmgate.runtime.ops.config import MqttSettings

SLOW_MS = 10.0
ROUNDS = 7
NODELAY_FIX = (
    "in mosquitto.conf add `set_tcp_nodelay true` and restart the broker; devices: publish "
    "with TCP_NODELAY set (see docs/operator.md, MQTT latency)"
)


def _client(mqtt: MqttSettings, role: str) -> paho.Client:
    v5 = mqtt.protocol == "5"
    client = paho.Client(
        CallbackAPIVersion.VERSION2,
        client_id=f"wasmgate-doctor-{role}-{os.getpid()}",
        protocol=paho.MQTTv5 if v5 else paho.MQTTv311,
    )
    if mqtt.username is not None:
        client.username_pw_set(mqtt.username, mqtt.password)
    if mqtt.tls_ca is not None:
        ctx = ssl.create_default_context(cafile=str(mqtt.tls_ca))
        if mqtt.tls_cert is not None:
            ctx.load_cert_chain(str(mqtt.tls_cert), str(mqtt.tls_key) if mqtt.tls_key else None)
        client.tls_set_context(ctx)
    client.on_socket_open = _no_delay  # our side never delays: only the broker is measured
    return client


def _no_delay(_client: paho.Client, _userdata: Any, sock: Any) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def probe_broker(mqtt: MqttSettings, timeout: float = 5.0) -> Finding:
    """Reachability and the median request → answer round trip through ``mqtt.host``."""
    if mqtt.host is None:
        return Finding("mqtt broker", "skip", "not configured (mqtt.host is unset)")
    where = f"{mqtt.host}:{mqtt.port}"
    root = f"{mqtt.topic_prefix}/{mqtt.gateway_id or socket.gethostname()}/doctor/{os.getpid()}"
    device, gateway = _client(mqtt, "device"), _client(mqtt, "gateway")
    ready, answers = threading.Semaphore(0), queue.Queue[float]()
    device.on_message = lambda *_a: answers.put(time.perf_counter())

    def answer(_c: paho.Client, _u: Any, message: paho.MQTTMessage) -> None:
        gateway.publish(f"{root}/res", message.payload, qos=1)

    gateway.on_message = answer
    started: list[paho.Client] = []
    try:
        for client, topic in ((gateway, f"{root}/req"), (device, f"{root}/res")):
            client.on_subscribe = lambda *_a: ready.release()
            client.connect(mqtt.host, mqtt.port, keepalive=max(10, int(timeout) * 2))
            client.loop_start()
            started.append(client)
            client.subscribe(topic, qos=1)
            if not ready.acquire(timeout=timeout):
                return Finding(
                    "mqtt broker",
                    "error",
                    f"{where}: no answer to SUBSCRIBE within {timeout:.0f} s",
                    "check credentials, TLS and the broker's ACL",
                )
        return _measure(device, f"{root}/req", answers, where, timeout)
    except (OSError, ssl.SSLError) as e:
        return Finding(
            "mqtt broker",
            "error",
            f"{where}: cannot connect: {e}",
            "check mqtt.host/port, that the broker runs, the unit's IPAddressAllow",
        )
    finally:
        for client in started:
            close_threaded(client)


def _measure(
    device: paho.Client, topic: str, answers: queue.Queue[float], where: str, timeout: float
) -> Finding:
    trips = []
    for _ in range(ROUNDS):
        began = time.perf_counter()
        device.publish(topic, b"wasmgate doctor", qos=1)
        try:
            trips.append((answers.get(timeout=timeout) - began) * 1000)
        except queue.Empty:
            return Finding(
                "mqtt broker",
                "error",
                f"{where}: no answer through {topic}",
                "check the broker's ACL for the gateway's topics",
            )
    median = statistics.median(trips)
    message = f"{where}: reachable, request round trip {median:.1f} ms (median of {ROUNDS})"
    if median > SLOW_MS:
        return Finding("mqtt broker", "warn", f"{message}: over {SLOW_MS:.0f} ms", NODELAY_FIX)
    return Finding("mqtt broker", "ok", message)
