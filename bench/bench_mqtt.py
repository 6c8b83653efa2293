"""MQTT request -> reply through mosquitto on loopback: the bridge vs the broker's own round trip.

``python -m bench.bench_mqtt [--requests N] [--window W] [--json OUT]``

Starts a private mosquitto (the test fixture's `Broker`) and measures, in the same run:

- **echo** (baseline): a bare paho MQTT 5 client that republishes each request to its
  Response Topic with the Correlation Data (no parsing, no inference): the broker's round
  trip plus one minimal client.
- **bridge**: `MqttBridge` in front of a minimal `ServiceAPI` whose ``digits`` adapter parses
  64 CSV pixels and runs the digits MLP (ONNX Runtime, FP32) in a worker thread, answering
  ``{"digit": d, "p": p}``: everything the bridge adds (topic routing, dedupe, deadline,
  V2-style status properties, manual ack after PUBACK) plus a real small model.

The requester is a paho MQTT 5 client (QoS 1 both ways). Every socket has Nagle off
(mosquitto ``set_tcp_nodelay true``; the bridge sets TCP_NODELAY itself), otherwise each
figure is dominated by ~40 ms of delayed-ACK waits. Latency: one request in flight,
p50/p99. Throughput: ``--window`` requests in flight, requests/s. Ratios: bridge / echo;
the goal is <= 1 ms added at p50.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from bench.common import Figure, format_table, median, percentile, write_json
from tests.fixtures.mosquitto import Broker
from wasmgate.runtime.errors import NotFound
from wasmgate.runtime.mqtt import MqttBridge
from wasmgate.runtime.ops.config import MqttSettings
from wasmgate.runtime.serving.api import (
    AdapterAnswer,
    AdapterRequest,
    ModelAnswer,
    ModelInfo,
    ModelRequest,
)

ROOT = "wasmgate/v1/bench"
REPLY = "bench/replies"


class DigitsService:
    """`ServiceAPI` with one adapter, ``digits``: CSV pixels -> ORT digits MLP -> JSON."""

    def __init__(self, model: Path) -> None:
        self._session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])

    @property
    def ready(self) -> bool:
        return True

    def _classify(self, payload: bytes) -> bytes:
        x = np.array(payload.split(b","), dtype=np.float32).reshape(1, 64)
        probs = self._session.run(None, {"input": x})[0][0]
        digit = int(np.argmax(probs))
        return json.dumps({"digit": digit, "p": round(float(probs[digit]), 4)}).encode()

    async def run_adapter(self, req: AdapterRequest) -> AdapterAnswer:
        if req.adapter != "digits":
            raise NotFound(req.adapter)
        body = await asyncio.to_thread(self._classify, req.payload)
        return AdapterAnswer(body, "application/json", "local", 1)

    async def infer_model(self, req: ModelRequest) -> ModelAnswer:
        raise NotFound(req.model)

    def model_info(self, name: str, _version: str | None = None) -> ModelInfo:
        raise NotFound(name)

    def list_models(self) -> list[ModelInfo]:
        return []

    def adapter_names(self) -> list[str]:
        return ["digits"]


def _nodelay(_c: paho.Client, _u: Any, sock: Any) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _v5_client(port: int, name: str) -> paho.Client:
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id=name, protocol=paho.MQTTv5)
    client.on_socket_open = _nodelay
    client.connect("127.0.0.1", port)
    return client


def _subscribe(client: paho.Client, topic: str) -> None:
    done = threading.Event()
    client.on_subscribe = lambda *_: done.set()
    client.subscribe(topic, qos=1)
    if not done.wait(5):
        raise TimeoutError(f"no SUBACK for {topic}")


def start_echo(port: int) -> paho.Client:
    """The baseline responder: republish to the Response Topic, nothing else."""
    client = _v5_client(port, "bench-echo")

    def on_message(c: paho.Client, _u: Any, msg: paho.MQTTMessage) -> None:
        request: Any = msg.properties
        props = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
        props.CorrelationData = request.CorrelationData
        c.publish(request.ResponseTopic, msg.payload, qos=1, properties=props)

    client.on_message = on_message
    client.loop_start()
    _subscribe(client, f"{ROOT}/echo/req")
    return client


class Requester:
    """Closed-loop MQTT 5 requester with up to ``window`` requests in flight."""

    def __init__(self, port: int) -> None:
        self._client = _v5_client(port, "bench-req")
        self._cond = threading.Condition()
        self._done: dict[bytes, float] = {}
        self._runs = 0
        self._client.on_message = self._on_message
        self._client.loop_start()
        _subscribe(self._client, REPLY)

    def _on_message(self, _c: paho.Client, _u: Any, msg: paho.MQTTMessage) -> None:
        with self._cond:
            props: Any = msg.properties
            self._done[props.CorrelationData] = time.perf_counter()
            self._cond.notify_all()

    def close(self) -> None:
        self._client.disconnect()
        self._client.loop_stop()

    def run(self, topic: str, payload: bytes, total: int, window: int) -> tuple[list[float], float]:
        """Per-request latencies and requests/s for ``total`` requests."""
        sent: dict[bytes, float] = {}
        latencies: list[float] = []
        self._runs += 1  # fresh correlation data per run: the bridge deduplicates repeats
        began = time.perf_counter()
        for i in range(total):
            corr = f"{self._runs}-{i}".encode()
            with self._cond:
                if not self._cond.wait_for(lambda: self._harvest(sent, latencies) < window, 10):
                    raise TimeoutError(f"{len(sent)} replies missing")
            props = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
            props.ResponseTopic, props.CorrelationData = REPLY, corr
            sent[corr] = time.perf_counter()
            self._client.publish(topic, payload, qos=1, properties=props)
        with self._cond:
            if not self._cond.wait_for(lambda: self._harvest(sent, latencies) == 0, 30):
                raise TimeoutError(f"{len(sent)} replies missing")
        return latencies, total / (time.perf_counter() - began)

    def _harvest(self, sent: dict[bytes, float], latencies: list[float]) -> int:
        """Move answered requests to ``latencies``; returns how many are still out."""
        answered = [c for c in self._done if c in sent]
        latencies.extend(self._done.pop(c) - sent.pop(c) for c in answered)
        return len(sent)


def _measure(
    req: Requester, topic: str, payload: bytes, args: argparse.Namespace
) -> tuple[list[float], float]:
    req.run(topic, payload, 200, 1)  # warm-up
    lat, _ = req.run(topic, payload, args.requests, 1)
    _, rps = req.run(topic, payload, args.requests, args.window)
    return lat, rps


async def bench(port: int, model: Path, args: argparse.Namespace) -> list[Figure]:
    x = np.load(model.parent / "digits-test.npz")["x"][0]
    payload = ",".join(str(int(v)) for v in x).encode()
    settings = MqttSettings(host="127.0.0.1", port=port, gateway_id="bench", client_id="bench-gw")
    echo = start_echo(port)
    req = Requester(port)
    try:
        async with MqttBridge(settings, DigitsService(model)) as bridge:
            async with asyncio.timeout(10):
                await bridge.wait_connected()
            await asyncio.sleep(0.2)
            base_lat, base_rps = await asyncio.to_thread(
                _measure, req, f"{ROOT}/echo/req", payload, args
            )
            lat, rps = await asyncio.to_thread(
                _measure, req, f"{ROOT}/adapters/digits/req", payload, args
            )
    finally:
        req.close()
        echo.disconnect()
        echo.loop_stop()
    ms: Callable[[list[float], float], float] = lambda s, q: percentile(s, q) * 1e3  # noqa: E731
    added = (median(lat) - median(base_lat)) * 1e3
    print(f"added at p50 by bridge + digits: {added:.3f} ms (goal <= 1 ms)")
    return [
        Figure(
            "mqtt", "p50 request->reply", median(lat) * 1e3, "ms", "echo", median(base_lat) * 1e3
        ),
        Figure("mqtt", "p99 request->reply", ms(lat, 99), "ms", "echo", ms(base_lat, 99)),
        Figure(
            "mqtt",
            f"req/s window {args.window}",
            rps,
            "1/s",
            "echo",
            base_rps,
            lower_is_better=False,
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--window", type=int, default=16)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    from tests.fixtures.models import get_models  # noqa: PLC0415 - builds fixtures once

    model = get_models().digits_fp32
    with tempfile.TemporaryDirectory() as tmp:
        # Nagle off on the broker's sockets too, or every figure is ~40 ms of delayed ACK.
        broker = Broker(Path(tmp), extra_conf="set_tcp_nodelay true\n")
        broker.start()
        try:
            figures = asyncio.run(bench(broker.port, model, args))
        finally:
            broker.stop()
    print(format_table(figures))
    if args.json:
        write_json(figures, args.json, {"requests": args.requests, "window": args.window})


if __name__ == "__main__":
    main()
