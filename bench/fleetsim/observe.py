"""What the simulator reads from the broker: ``$SYS`` counters and live (re)reports.

`Observer` holds a persistent session (clean session off, QoS 1) on every gateway's
deployment topic: a report a gateway republishes while the observer itself is reconnecting
after a broker restart is queued for it, so none is missed.
"""

from __future__ import annotations

import threading
import time

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion

from wasmgate.runtime.fleet.opclient import BrokerSettings, OperatorClient
from wasmgate.runtime.mqtt._paho_private import close_threaded

SYS = {
    # every packet (PINGREQ, PUBACK, ... too): the fleet's own messages are `Observer.total`
    "bytes_in": "$SYS/broker/bytes/received",
    "bytes_out": "$SYS/broker/bytes/sent",
    "retained": "$SYS/broker/retained messages/count",
}


def sys_counters(host: str, port: int) -> dict[str, float]:
    """The broker's counters now (``sys_interval 1``: at most a second old)."""
    time.sleep(1.1)
    with OperatorClient(BrokerSettings(host, port)) as client:
        got = client.collect(["$SYS/broker/#"], 5)
    return {k: float(got.get(t, b"0")) for k, t in SYS.items()}


class Observer:
    """Live (not retained) deployment reports, by gateway: the first arrival time of each."""

    def __init__(self, host: str, port: int, prefix: str) -> None:
        self.seen: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        """Live reports per gateway since the last `reset`."""
        self._lock = threading.Lock()
        self._topic = f"{prefix}/#"
        self.total = [0, 0]
        """Messages and payload bytes published on the fleet's topics (live ones)."""
        self._client = paho.Client(
            CallbackAPIVersion.VERSION2, client_id="fleetsim-observer",
            protocol=paho.MQTTv311, clean_session=False,
        )  # fmt: skip
        self._client.reconnect_delay_set(1, 1)  # paho's floor: arrivals up to 1 s late
        self._client.on_message = self._on_message
        self._client.on_connect = lambda c, *_: c.subscribe(self._topic, qos=1)
        self._client.connect(host, port)
        self._client.loop_start()

    def _on_message(self, _c: object, _u: object, msg: paho.MQTTMessage) -> None:
        if msg.retain:
            return
        with self._lock:
            self.total[0] += 1
            self.total[1] += len(msg.payload)
        if not msg.topic.endswith("/deployment"):
            return
        gw = msg.topic.split("/")[-2]
        with self._lock:
            self.seen.setdefault(gw, time.time())
            self.counts[gw] = self.counts.get(gw, 0) + 1

    def reset(self) -> None:
        with self._lock:
            self.seen, self.counts, self.total = {}, {}, [0, 0]

    def snapshot(self) -> dict[str, float]:
        with self._lock:
            return dict(self.seen)

    def totals(self) -> tuple[int, int]:
        with self._lock:
            return self.total[0], self.total[1]

    def report_counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)

    def close(self) -> None:
        close_threaded(self._client)
