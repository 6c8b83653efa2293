"""The demo bundles in a real daemon: built from source, signed by the demo key, installed,
answering over HTTP and MQTT (real mosquitto), low confidence answered by a fake cloud.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.fixtures.daemon import Daemon
from tests.fixtures.models import ModelFiles
from tests.fixtures.mosquitto import Broker
from tests.fixtures.waits import until
from tests.runtime.mqtt.requester import Reply, Requester
from tests.runtime.stack import host_profile_name
from wasmgate.guest_adapters.examples import example_dir
from wasmgate.runtime.bundles.demo import DemoSetup, prepare_demo

ROOT = "wasmgate/v1/gw1"
CLOUD_ANSWER = b'{"digit": 4, "confidence": 0.99, "by": "fake-cloud"}'


@dataclass
class FakeCloud:
    """A loopback stand-in for the cloud endpoint (``cloud.protocol = "raw"``)."""

    server: ThreadingHTTPServer
    calls: list[tuple[str, str | None, bytes]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def cloud() -> Iterator[FakeCloud]:
    calls: list[tuple[str, str | None, bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            calls.append((self.path, self.headers.get("X-Wasmgate-Fallback-Reason"), body))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(CLOUD_ANSWER)))
            self.end_headers()
            self.wfile.write(CLOUD_ANSWER)

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield FakeCloud(server, calls)
    finally:
        server.shutdown()
        server.server_close()


def post(url: str, payload: bytes, ctype: str | None = None) -> tuple[int, bytes, dict[str, str]]:
    headers = {"Content-Type": ctype} if ctype else {}
    req = urllib.request.Request(url, data=payload, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


def wait_replies(req: Requester, count: int, timeout: float = 15.0) -> list[Reply]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if len(got := req.snapshot()) >= count:
            return got
        time.sleep(0.02)
    raise TimeoutError(f"{len(req.snapshot())} of {count} MQTT replies after {timeout}s")


def _streams(daemon: Daemon) -> dict[str, dict[str, Any]]:
    """The store's streams on the status page (none when the store is off)."""
    store: dict[str, Any] = daemon.get_json("/v1/status")["components"].get("store", {})
    return store.get("streams", {})  # type: ignore[no-any-return]


def demo_config(setup: DemoSetup) -> dict[str, Any]:
    """The config of a daemon serving the demo bundles (add mqtt, cloud, ... to it)."""
    return {
        "paths": {
            "bundle_dir": setup.bundle_dir,
            "trust_file": setup.trust_file,
            "state_dir": setup.state_dir,
            "cache_dir": setup.cache_dir,
        },
        "profile": host_profile_name(),
    }


def start_demo_daemon(
    factory: Callable[..., Daemon], setup: DemoSetup, broker: Broker, cloud: FakeCloud
) -> Daemon:
    config = demo_config(setup) | {
        "mqtt": {"host": broker.host, "port": broker.port, "gateway_id": "gw1"},
        "cloud": {"url": cloud.url, "protocol": "raw"},
    }
    return factory(config=config, name="edge")


def test_examples_over_http_mqtt_and_fallback(  # noqa: PLR0915 - one demo daemon, every path
    tmp_path: Path,
    daemon_factory: Callable[..., Daemon],
    mosquitto: Broker,
    cloud: FakeCloud,
    models: ModelFiles,
) -> None:
    setup = prepare_demo(tmp_path / "demo-data")
    daemon = start_demo_daemon(daemon_factory, setup, mosquitto, cloud)
    http = f"{daemon.url}/v1/adapters"

    # Known digits from the held-out set, over HTTP.
    data = np.load(models.digits_test)
    x, y = data["x"][:60], data["y"][:60]
    hits = local = 0
    for row, label in zip(x, y, strict=True):
        status, body, headers = post(f"{http}/digits", json.dumps([int(v) for v in row]).encode())
        assert status == 200, body
        if headers["X-Wasmgate-Source"] == "local":
            local += 1
            hits += json.loads(body)["digit"] == int(label)
        else:
            assert body == CLOUD_ANSWER  # low confidence went to the cloud
    # Confident answers stay local and are right; the few unsure ones went to the cloud.
    assert local >= 50
    assert hits >= local - 1

    # Low confidence: the adapter asks, the policy allows, the fake cloud answers.
    ambiguous = (example_dir("digits") / "samples" / "ambiguous.json").read_bytes()
    before = len(cloud.calls)
    status, body, headers = post(f"{http}/digits", ambiguous, "application/json")
    assert (status, body, headers["X-Wasmgate-Source"]) == (200, CLOUD_ANSWER, "cloud")
    assert cloud.calls[before:] == [("/v1/adapters/digits", "low confidence", ambiguous)]

    # A confident raw image stays local and is JSON.
    three = (example_dir("digits") / "samples" / "three.bin").read_bytes()
    status, body, headers = post(f"{http}/digits", three, "application/octet-stream")
    assert (status, headers["X-Wasmgate-Source"]) == (200, "local")
    assert headers["Content-Type"].startswith("application/json")
    assert json.loads(body)["digit"] == 3

    # Malformed input is the client's fault: 400 with the adapter's message, never the cloud.
    before = len(cloud.calls)
    status, body, _ = post(f"{http}/digits", b'{"pixels": [1, 2, 3]}')
    assert status == 400
    assert b"expected an array of 64 numbers" in body
    assert len(cloud.calls) == before

    # The pipeline answers noise after the gate alone.
    noise = (example_dir("digits-pipeline") / "samples" / "noise.json").read_bytes()
    status, body, _ = post(f"{http}/digits-pipeline", noise)
    assert status == 200
    assert json.loads(body)["is_digit"] is False

    # The Zig adapter serves the same classifier under its own names.
    status, body, _ = post(f"{http}/digits-zig", three)
    assert status == 200
    assert json.loads(body)["digit"] == 3

    # Direct V2 inference on a model the demo ships.
    v2 = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 64],
                      "data": [float(v) for v in x[0]]}]}  # fmt: skip
    status, body, _ = post(f"{daemon.url}/v2/models/digits-mlp/infer", json.dumps(v2).encode())
    assert status == 200
    assert int(np.argmax(json.loads(body)["outputs"][0]["data"])) == int(y[0])

    # MQTT: request/response with correlation, and the anomaly published to events/.
    with Requester(mosquitto.port).connect(f"{ROOT}/events/#", "test/res/#") as req:
        spike = models.anomaly_samples["spike"].read_bytes()
        normal = models.anomaly_samples["normal"].read_bytes()
        topic = f"{ROOT}/adapters/vibration-anomaly/req"
        req.request(topic, spike, response_topic="test/res/a", correlation=b"c-spike")
        req.request(topic, normal, response_topic="test/res/a", correlation=b"c-normal")
        req.request(
            f"{ROOT}/adapters/digits/req",
            three,
            response_topic="test/res/d",
            correlation=b"c-three",
        )
        wait_replies(req, 4)
        # A fence instead of a quiet window: once the store holds nothing unsent (if it is
        # on) an event any run emitted has gone out on the daemon's one connection, so it
        # reaches us before the answer to a request sent now.
        until(lambda: all(s["depth"] == 0 for s in _streams(daemon).values()), "store drained")
        req.request(topic, normal, response_topic="test/res/f", correlation=b"c-fence")
        until(lambda: any(r.correlation == b"c-fence" for r in req.snapshot()), "the fence")
        replies = req.snapshot()
    answers = {r.correlation: json.loads(r.payload) for r in replies if r.topic.startswith("test/")}
    assert answers[b"c-spike"]["anomaly"] is True
    assert answers[b"c-normal"]["anomaly"] is False
    assert answers[b"c-three"]["digit"] == 3
    events = [r for r in replies if r.topic == f"{ROOT}/events/vibration-anomaly"]
    assert len(events) == 1
    assert json.loads(events[0].payload)["device"] == json.loads(spike)["device"]


def test_demo_is_cached_and_trusts_only_the_examples(tmp_path: Path) -> None:
    first = prepare_demo(tmp_path)
    examples = {"digits", "digits-pipeline", "digits-zig", "vibration-anomaly"}
    assert set(first.rebuilt) == set(first.names) == examples
    stamps = {p.name: p.stat().st_mtime_ns for p in first.bundle_dir.iterdir()}
    second = prepare_demo(tmp_path)
    assert second.rebuilt == ()
    assert second.key_id == first.key_id  # the key is made once and reused
    assert {p.name: p.stat().st_mtime_ns for p in second.bundle_dir.iterdir()} == stamps
    trust = json.loads(first.trust_file.read_text())
    (entry,) = trust["signers"].values()
    # The examples and their models' names (a key must cover every name a bundle serves).
    models = {"digits-mlp", "digits-zig-mlp", "pipeline-gate", "pipeline-digits", "anomaly"}
    assert set(entry["names"]) == examples | models
    assert "*" not in "".join(entry["names"])
