"""The request-path ladder on a real daemon: raw ORT -> sandbox -> HTTP V2 -> MQTT.

``python -m bench.bench_ladder [--quick] [--json OUT]``

For the digits MLP and the MobileNet-class CNN, batch 1, closed loop, one client unless
noted; every figure's baseline is ``infer`` on the same ONNX file through the daemon's own
ONNX Runtime backend and device profile, in this process, measured in the same run (the
limit; `bench_sandbox` compares against the same model's raw `infer`):

- sandboxed adapter in-process (``Adapter.run`` + wasi-nn round trip; `bench_sandbox`);
- HTTP KServe V2 binary ``/v2/models/<m>/infer`` on a real ``wasmgate serve`` (no sandbox);
- HTTP raw adapter ``/v1/adapters/<m>`` (the sandboxed path, as devices use it);
- MQTT 5 request/response on ``adapters/<m>/req`` through a real mosquitto (QoS 1);
- HTTP V2 req/s with 8 clients against ORT from 8 threads.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from bench import bench_http, bench_sandbox
from bench.common import Figure, median, percentile, script_main
from bench.stack import BenchKit, payload
from tests.fixtures.daemon import Daemon
from tests.fixtures.models import get_models
from tests.fixtures.mosquitto import Broker
from tests.fixtures.zig import compile_c
from wasmgate.device_profiles import detect
from wasmgate.runtime.backends import LoadOptions, ModelSpec, create_backend
from wasmgate.sandbox import SandboxEngine

Array = npt.NDArray[Any]
GATEWAY = "bench"


def _nodelay(_c: paho.Client, _u: Any, sock: Any) -> None:
    # Nagle + delayed ACK would add ~40 ms per round trip (see bench_mqtt).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class MqttRequester:
    """One MQTT 5 requester: publish, wait for the answer with the same correlation data."""

    def __init__(self, port: int) -> None:
        self._event = threading.Event()
        self._want = b""
        self._ids = itertools.count()
        self.status: str | None = None
        self.reply_topic = f"bench/replies/{os.getpid()}/{id(self)}"
        self._client = paho.Client(CallbackAPIVersion.VERSION2, protocol=paho.MQTTv5)
        self._client.on_socket_open = _nodelay
        self._client.on_message = self._on_message
        subscribed = threading.Event()
        self._client.on_subscribe = lambda *_: subscribed.set()
        self._client.connect("127.0.0.1", port)
        self._client.loop_start()
        self._client.subscribe(self.reply_topic, qos=1)
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
        self._client.publish(topic, body, qos=1, properties=props)
        if not self._event.wait(timeout):
            raise TimeoutError(f"no MQTT answer on {topic} within {timeout}s")
        elapsed = time.perf_counter() - start
        if self.status != "200":
            raise RuntimeError(f"MQTT answer status {self.status} on {topic}")
        return elapsed

    def close(self) -> None:
        self._client.disconnect()
        self._client.loop_stop()


def served(
    url: str, body: bytes, headers: dict[str, str], clients: int, seconds: float
) -> list[float]:
    """Latencies of `bench_http.http_run`; a busy answer (429/503) here is a failure."""
    samples = bench_http.http_run(url, body, headers, clients, seconds)
    if samples.rejected:
        raise RuntimeError(f"{url}: {samples.rejected} requests refused as busy")
    return samples.latencies


def mqtt_latencies(port: int, topic: str, body: bytes, seconds: float) -> list[float]:
    requester = MqttRequester(port)
    try:
        for _ in range(5):
            requester.call(topic, body)
        out: list[float] = []
        stop = time.perf_counter() + seconds
        while time.perf_counter() < stop:
            out.append(requester.call(topic, body))
        return out
    finally:
        requester.close()


@contextlib.contextmanager
def running_stack(root: Path, models: dict[str, Path]) -> Iterator[tuple[Daemon, Broker]]:
    """mosquitto + a daemon serving one pass-through bundle per model, both stopped after."""
    broker = Broker(root / "mosquitto", extra_conf="set_tcp_nodelay true\n")
    broker.start()
    kit = BenchKit(root / "kit")
    for name, path in models.items():
        kit.build(name, path)
    mqtt = {"host": "127.0.0.1", "port": broker.port, "gateway_id": GATEWAY}
    daemon = kit.daemon(root / "daemon", config={"mqtt": mqtt})
    try:
        daemon.start(timeout=120)
        yield daemon, broker
    finally:
        try:
            daemon.stop()
        finally:
            broker.stop()


def backend_limit(path: Path, x: Array, clients: int, seconds: float) -> list[float]:
    """Latencies of ``infer`` on the daemon's own ONNX Runtime backend (detected device
    profile: same providers, threads and session options the daemon uses), from
    ``clients`` closed-loop threads: the limit any served path is compared with."""
    options = LoadOptions(detect().profile)
    model = create_backend("onnx").load(path.read_bytes(), ModelSpec(path.stem), options)
    try:
        for _ in range(20):
            model.infer([x])
        latencies: list[float] = []
        stop = time.perf_counter() + seconds

        def worker() -> None:
            mine = []
            while (start := time.perf_counter()) < stop:
                model.infer([x])
                mine.append(time.perf_counter() - start)
            latencies.extend(mine)  # list.extend is atomic under the GIL

        threads = [threading.Thread(target=worker) for _ in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return latencies
    finally:
        model.close()


def _p50(name: str, samples: list[float], label: str, raw: list[float], unit: str) -> Figure:
    scale = 1e3 if unit == "ms" else 1e6
    base = median(raw) * scale
    return Figure(label, name, median(samples) * scale, unit, "ORT backend p50", base)


def ladder(
    label: str, path: Path, x: Array, stack: tuple[Daemon, Broker], seconds: float
) -> list[Figure]:
    daemon, broker = stack
    unit = "us" if label == "digits" else "ms"
    raw = backend_limit(path, x, 1, seconds)
    rounds = 10 if seconds < 1 else (300 if label == "digits" else 30)  # as bench_sandbox
    with SandboxEngine(Path(tempfile.mkdtemp(prefix="wasmgate-bench-")) / "cache") as engine:
        wasm = compile_c([bench_sandbox.GUEST]).read_bytes()
        sandboxed = bench_sandbox.bench_model(engine, wasm, label, path.read_bytes(), x, rounds)
    in_proc = next(f for f in sandboxed if f.name == "sandboxed request")
    body, headers = bench_http.v2_body(x, "input")
    v2_url = f"{daemon.url}/v2/models/{label}/infer"
    v2 = served(v2_url, body, headers, 1, seconds)
    adapter = served(f"{daemon.url}/v1/adapters/{label}", payload(x), {}, 1, seconds)
    topic = f"wasmgate/v1/{GATEWAY}/adapters/{label}/req"
    mqtt = mqtt_latencies(broker.port, topic, payload(x), seconds)
    raw8 = backend_limit(path, x, 8, seconds)
    v2_8 = served(v2_url, body, headers, 8, seconds)
    scale = 1e3 if unit == "ms" else 1e6
    return [
        Figure(label, "sandboxed in-process p50", in_proc.value / (1e3 if unit == "ms" else 1),
               unit, "raw session.run p50", in_proc.baseline / (1e3 if unit == "ms" else 1)),
        _p50("HTTP V2 binary p50", v2, label, raw, unit),
        Figure(label, "HTTP V2 binary p99", percentile(v2, 99) * scale, unit, "ORT backend p99",
               percentile(raw, 99) * scale),
        _p50("HTTP raw adapter (sandboxed) p50", adapter, label, raw, unit),
        _p50("MQTT 5 adapter (sandboxed) p50", mqtt, label, raw, unit),
        Figure(label, "HTTP V2 req/s, 8 clients", len(v2_8) / seconds, "/s", "ORT 8 threads",
               len(raw8) / seconds, lower_is_better=False),
    ]  # fmt: skip


def inputs() -> dict[str, tuple[Path, Array]]:
    m, rng = get_models(), np.random.default_rng(0)
    return {
        "digits": (m.digits_fp32, rng.uniform(0, 16, (1, 64)).astype(np.float32)),
        "mobilenet": (m.mobilenet_fp32, rng.standard_normal((1, 3, 128, 128)).astype(np.float32)),
    }


def run(quick: bool) -> list[Figure]:
    """Both models through every rung; ``quick``: short windows (checks that it runs)."""
    seconds = 0.3 if quick else 5.0
    cases = inputs()
    with (
        tempfile.TemporaryDirectory(prefix="wasmgate-bench-") as tmp,
        running_stack(Path(tmp), {k: v[0] for k, v in cases.items()}) as stack,
    ):
        return [f for k, (p, x) in cases.items() for f in ladder(k, p, x, stack, seconds)]


def main() -> None:
    script_main(__doc__, run, "short windows")


if __name__ == "__main__":
    main()
