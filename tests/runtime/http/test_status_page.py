"""The status page as an operator sees it: a real daemon serving the demo bundles with a
real mosquitto, rendered by headless Chromium at a laptop's and a phone's width, measured
in the browser (tests/runtime/http/probe.js over the DevTools protocol), and the MQTT and
process series of ``/metrics`` against a broker that is stopped and started.

CI needs Debian's ``chromium`` and ``mosquitto``; without them these tests fail (no skip).
"""

from __future__ import annotations

import json
import re
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.fixtures.daemon import Daemon
from tests.fixtures.mosquitto import Broker
from tests.fixtures.waits import until
from tests.runtime.http.cdp import probe
from tests.runtime.stack import host_profile_name
from wasmgate.guest_adapters.examples import example_dir
from wasmgate.runtime.bundles.demo import prepare_demo

RUNS = 40  # requests to each of two adapters; each run calls its model once
DIRECT = 2  # requests to digits-mlp itself (V2)


@dataclass
class Demo:
    daemon: Daemon
    broker: Broker


def post(url: str, body: bytes) -> bytes:
    req = urllib.request.Request(url, data=body, method="POST")
    with urllib.request.urlopen(req, timeout=30) as reply:
        data: bytes = reply.read()
        return data


def scrape(daemon: Daemon) -> dict[str, float]:
    """``/metrics`` as ``{'name{label="v"}': value}`` (labels sorted, as the daemon writes them)."""
    with urllib.request.urlopen(f"{daemon.url}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


def wait_until(check: Callable[[], bool], what: str, timeout: float = 30) -> None:
    until(check, what, timeout, every_s=0.05)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    """One demo daemon (MQTT configured, broker up) with adapter and model traffic."""
    tmp = tmp_path_factory.mktemp("demo")
    broker = Broker(tmp / "mosquitto")
    broker.start()
    setup = prepare_demo(tmp / "demo-data")
    paths = {"bundle_dir": setup.bundle_dir, "trust_file": setup.trust_file,
             "state_dir": setup.state_dir, "cache_dir": setup.cache_dir}  # fmt: skip
    mqtt = {"host": broker.host, "port": broker.port, "gateway_id": "gw1"}
    (tmp / "edge").mkdir()
    daemon = Daemon(tmp / "edge", {"paths": paths, "profile": host_profile_name(), "mqtt": mqtt})
    try:
        daemon.start()
        wait_until(lambda: scrape(daemon).get("wasmgate_mqtt_connected") == 1, "mqtt connected")
        digits = (example_dir("digits") / "samples" / "zero.json").read_bytes()
        spike = (example_dir("vibration-anomaly") / "samples" / "spike.json").read_bytes()
        for _ in range(RUNS):
            post(f"{daemon.url}/v1/adapters/digits", digits)
            post(f"{daemon.url}/v1/adapters/vibration-anomaly", spike)
        v2 = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 64],
                          "data": json.loads(digits)}]}  # fmt: skip
        for _ in range(DIRECT):
            post(f"{daemon.url}/v2/models/digits-mlp/infer", json.dumps(v2).encode())
        yield Demo(daemon, broker)
    finally:
        daemon.stop()
        broker.stop()


def test_model_calls_by_adapters_are_counted_per_model(demo: Demo) -> None:
    rows = {row["name"]: row for row in demo.daemon.get_json("/v1/status")["models"]}
    assert rows["digits"]["requests"] == RUNS
    # The model ran once per adapter request, and twice on its own: two different numbers.
    assert (rows["digits-mlp"]["adapter_calls"], rows["digits-mlp"]["requests"]) == (RUNS, DIRECT)
    assert rows["anomaly"]["adapter_calls"] == RUNS
    assert rows["pipeline-gate"]["adapter_calls"] == 0  # its adapter never ran
    assert rows["digits"]["adapter_calls"] is None  # an adapter is not called by adapters
    metrics = scrape(demo.daemon)
    assert metrics['wasmgate_model_calls_total{model="digits-mlp"}'] == RUNS
    assert metrics['wasmgate_model_calls_total{model="anomaly"}'] == RUNS
    # Requests stay what arrived at a bridge: the adapter's runs are not model requests.
    direct = (
        'wasmgate_requests_total{kind="model",name="digits-mlp",source="local",transport="http"}'
    )
    assert metrics[direct] == DIRECT


@pytest.mark.parametrize("width", [1280, 390])  # a laptop and a phone
def test_page_reads_at_a_glance(demo: Demo, tmp_path: Path, width: int) -> None:
    shot = tmp_path / f"status-{width}.png"
    found = probe(tmp_path, f"{demo.daemon.url}/", width, shot)
    assert shot.stat().st_size > 10_000  # looked at by a person too: see the module doc
    assert not found["hscroll"], "the page scrolls sideways"
    # (a phone's tables end with a line saying they scroll sideways: 2 lines more)
    assert found["height"] < 2600, f"{found['height']} px tall at {width} px"
    assert found["perChar"] == [], "text wrapped one character per line"
    assert found["brokenNumbers"] == [], "a number broken across lines"
    assert found["rawNumbers"] == [], "an unformatted number (epoch, byte count > 9999)"
    assert found["lowContrast"] == [], "text about as dark as its background"
    assert found["words"] == [], "raw JSON values (true/false/null, braces) on the page"
    texts = [b["text"] for b in found["badges"]]
    assert "no" in texts  # trust.root_signed = false, as a word on a visible badge
    assert found["mqttBadge"] == "MQTT connected"
    mlp = found["models"]["digits-mlp"]
    assert (mlp["adapter-calls"], mlp["requests"]) == (str(RUNS), str(DIRECT))
    assert found["adapters"]["digits"]["requests"] == str(RUNS)


def test_the_probe_finds_what_it_looks_for(tmp_path: Path) -> None:
    """The defects the page once had, on a page made to have them: the probe reports each."""
    page = (
        "<body data-state='loaded'>"
        "<div style='width:9px;overflow-wrap:anywhere'>confidence_threshold</div>"
        "<span class='badge' style='color:#b91c1c;background:#b91c1c'>false</span>"
        "<p>since 1796420401.94</p><p>max_bytes 67108864</p>"
        "<div style='width:30px'>67&nbsp;MiB 1.25 ms</div></body>"
    )
    found = probe(tmp_path, "data:text/html," + urllib.parse.quote(page), 390)
    assert "confidence_threshold" in found["perChar"]
    assert {"text": "false", "ratio": 1.0} in found["lowContrast"]
    assert "false" in found["words"]
    assert found["rawNumbers"] == ["since 1796420401.94", "max_bytes 67108864"]
    assert "1.25 ms" in found["brokenNumbers"]


def mqtt_series(daemon: Daemon) -> tuple[float | None, float | None, float | None]:
    m = scrape(daemon)
    return (m.get("wasmgate_mqtt_connected"), m.get("wasmgate_mqtt_connects_total"),
            m.get("wasmgate_mqtt_disconnects_total"))  # fmt: skip


def test_mqtt_and_process_series_follow_a_real_broker(tmp_path: Path) -> None:
    """Down at start, up, stopped, up again: the gauge and both counters follow; the page
    shows a current error while down and only dated history once connected."""
    broker = Broker(tmp_path / "mosquitto")  # not started yet: the daemon starts without it
    mqtt = {
        "host": broker.host,
        "port": broker.port,
        "reconnect_max_s": 0.5,
        "reconnect_spread_s": 0,
    }
    (tmp_path / "edge").mkdir()
    daemon = Daemon(tmp_path / "edge", {"mqtt": mqtt})
    before = time.time()
    try:
        daemon.start()
        ready = time.time()
        wait_until(lambda: mqtt_series(daemon) == (0, 0, 0), "disconnected from the start")
        wait_until(lambda: daemon.get_json("/v1/status")["components"]["mqtt"]["client"]
                   ["last_error"] is not None, "a failed connect recorded")  # fmt: skip
        down = probe(tmp_path, f"{daemon.url}/", 390)
        assert down["mqttBadge"] == "MQTT disconnected"  # the MQTT card's word
        assert len(down["mqttErrors"]) == 1
        assert "ConnectionRefusedError" in down["mqttErrors"][0]
        broker.start()
        wait_until(lambda: mqtt_series(daemon) == (1, 1, 0), "connected")
        up = probe(tmp_path, f"{daemon.url}/", 1280)
        assert up["mqttBadge"] == "MQTT connected"
        assert up["mqttErrors"] == []  # the old refusal is no current error ...
        history = up["mqttHistory"]  # ... but history, with its time on hover
        assert len(history) == 1
        assert re.match(
            r"last error (just now|\d+ s ago): ConnectionRefusedError", history[0]["text"]
        )
        assert history[0]["hover"]
        broker.stop()
        wait_until(lambda: mqtt_series(daemon) == (0, 1, 1), "connection lost")
        broker.start()
        wait_until(lambda: mqtt_series(daemon) == (1, 2, 1), "connected again")
        m = scrape(daemon)
    finally:
        daemon.stop()
        broker.stop()
    assert before - 1 <= m["process_start_time_seconds"] <= ready + 1
    assert m["process_resident_memory_bytes"] > 20 * 2**20
    assert m["process_open_fds"] >= 3
    assert m["process_cpu_seconds_total"] > 0
