"""What the gateway says about itself is true (issue 50): failed requests, readiness with the
broker down, refused bundle files and the page's details.

A real demo daemon (gateway ``gw-7``) with three refused bundle files and a real mosquitto;
requests over HTTP and MQTT; the page rendered by headless Chromium at 1280 and 390 px.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.daemon import Daemon
from tests.fixtures.mosquitto import Broker
from tests.fixtures.waits import until
from tests.runtime.http.cdp import probe
from tests.runtime.mqtt.requester import Requester
from tests.runtime.stack import host_profile_name
from wasmgate.guest_adapters.examples import example_dir
from wasmgate.runtime.bundles.demo import prepare_demo
from wasmgate.runtime.ops.failures import DEFAULT_SIZE, MAX_MESSAGE, MAX_NAME

pytestmark = [pytest.mark.timeout(300)]

GATEWAY = "gw-7"
MARKER = "PAYLOAD-MARKER-7f3a"  # in every bad payload: must never show anywhere
OK_RUNS = 5
TOPIC = f"wasmgate/v1/{GATEWAY}"


@dataclass
class Gateway:
    daemon: Daemon
    broker: Broker


def post(url: str, body: bytes) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as e:
        with e:
            return e.code, e.read()


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as e:
        with e:
            return e.code, e.read()


def status(gw: Gateway) -> dict[str, Any]:
    doc: dict[str, Any] = gw.daemon.get_json("/v1/status")
    return doc


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("truth")
    broker = Broker(tmp / "mosquitto")
    broker.start()
    setup = prepare_demo(tmp / "demo-data")
    for i in range(3):
        (setup.bundle_dir / f"junk-{i}.wgb").write_bytes(b"not a bundle")
    paths = {"bundle_dir": setup.bundle_dir, "trust_file": setup.trust_file,
             "state_dir": setup.state_dir, "cache_dir": setup.cache_dir}  # fmt: skip
    mqtt = {"host": broker.host, "port": broker.port, "gateway_id": GATEWAY,
            "reconnect_max_s": 0.5, "reconnect_spread_s": 0}  # fmt: skip
    (tmp / "edge").mkdir()
    daemon = Daemon(tmp / "edge", {"paths": paths, "profile": host_profile_name(), "mqtt": mqtt})
    try:
        daemon.start()
        until(lambda: status(Gateway(daemon, broker))["components"]["mqtt"]["client"]
              ["connected"], "mqtt connected", 30, every_s=0.05)  # fmt: skip
        digits = (example_dir("digits") / "samples" / "zero.json").read_bytes()
        for _ in range(OK_RUNS):
            assert post(f"{daemon.url}/v1/adapters/digits", digits)[0] == 200
        yield Gateway(daemon, broker)
    finally:
        daemon.stop()
        broker.stop()


def test_failed_requests_over_http_and_mqtt_are_listed_without_their_payload(
    gw: Gateway,
) -> None:
    url = gw.daemon.url
    bad = json.dumps([1, 2, MARKER]).encode()
    assert post(f"{url}/v1/adapters/digits", bad)[0] == 400
    v2 = {"inputs": [{"name": MARKER, "datatype": "FP32", "shape": [1], "data": [1]}]}
    assert post(f"{url}/v2/models/digit-mlp/infer", json.dumps(v2).encode())[0] == 404
    with Requester(gw.broker.port).connect("client/truth/res") as dev:
        for topic in ("adapters/digits/req", "adapters/no-such/req"):
            info = dev.request(f"{TOPIC}/{topic}", bad, response_topic="client/truth/res",
                               correlation=b"c")  # fmt: skip
            info.wait_for_publish(10)
        until(lambda: len(dev.snapshot()) == 2, "two MQTT answers", 30, every_s=0.05)
    doc = status(gw)
    recent = doc["errors"]["recent"]
    seen = {(e["transport"], e["name"], e["status"], e["code"]) for e in recent}
    assert ("http", "digits", 400, "bad_request") in seen, recent
    assert ("http", "digit-mlp", 404, "not_found") in seen, recent
    assert ("mqtt", "digits", 400, "bad_request") in seen, recent
    assert ("mqtt", "no-such", 404, "not_found") in seen, recent
    first = next(e for e in recent if e["name"] == "digits")
    assert set(first) == {"at", "transport", "kind", "name", "status", "code", "message"}
    assert first["message"].startswith("digits: expected an array of 64 numbers")
    assert first["kind"] == "adapter"
    assert MARKER not in json.dumps(doc)  # never a byte of a payload
    log = gw.daemon.log()
    assert MARKER not in log
    # 4xx are logged now (once a minute per transport and status)
    assert re.search(r"wasmgate\.requests: http adapter digits -> 400 bad_request: digits:", log)
    assert "mqtt adapter no-such -> 404 not_found" in log


def test_the_list_stays_bounded_and_messages_short_under_a_flood(gw: Gateway) -> None:
    url = gw.daemon.url
    before = status(gw)["errors"]["total"]
    log_before = gw.daemon.log().count("-> 404 not_found")
    long_name = "x" * 3000  # echoed by the 404's message: clipped
    for i in range(3 * DEFAULT_SIZE):
        assert post(f"{url}/v2/models/{long_name}{i}/infer", b"{}")[0] == 404
    doc = status(gw)
    errors = doc["errors"]
    assert errors["total"] == before + 3 * DEFAULT_SIZE
    assert len(errors["recent"]) == DEFAULT_SIZE
    for e in errors["recent"]:
        assert len(e["name"]) <= MAX_NAME + 40  # the cut, then "… (N more characters)"
        assert len(e["message"]) <= MAX_MESSAGE + 40
        assert "more characters)" in e["message"]
    # one log line for the flood (the first 404s were logged by the earlier test's minute)
    assert gw.daemon.log().count("-> 404 not_found") - log_before <= 1
    assert get(f"{url}/v2/health/ready")[0] == 200  # and it serves on


def test_the_header_shows_refused_bundle_files_and_the_gateway(gw: Gateway, tmp_path: Path) -> None:
    doc = status(gw)
    assert doc["gateway"] == GATEWAY
    what = {a["what"]: a["message"] for a in doc["attention"]}
    assert what["bundles"].startswith("3 bundle files refused: ")
    for width in (1280, 390):
        found = probe(tmp_path, f"{gw.daemon.url}/", width, tmp_path / f"s-{width}.png")
        assert found["title"] == f"{GATEWAY} · wasmgate status"
        assert found["gateway"] == GATEWAY
        assert found["ready"] == {"text": "ready", "kind": "warn"}  # not a plain green ready
        assert "3 bundle files refused" in [b["text"] for b in found["badges"]]
        assert found["errors"], "the recent failed requests are listed"
        assert not any(MARKER in line for line in found["errors"])
        # versions that are timestamps read as dates, never as v1796476685
        versions = {r["version"] for r in found["adapters"].values()}
        assert all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", v) for v in versions), versions
        assert found["listRepr"] == [], "a Python list repr on the page"
        assert found["traffic"] != "no requests yet"
        # a table cut by the card's edge says it scrolls; one that fits says nothing
        for table in found["tables"]:
            assert table["hint"] == table["wide"], table
        if width == 390:
            assert any(t["wide"] for t in found["tables"]), found["tables"]


def test_ready_does_not_wait_for_the_broker_and_says_it_is_down(
    gw: Gateway, tmp_path: Path
) -> None:
    gw.broker.stop()
    try:
        until(lambda: not status(gw)["components"]["mqtt"]["client"]["connected"],
              "disconnected", 30, every_s=0.05)  # fmt: skip
        code, body = get(f"{gw.daemon.url}/v2/health/ready")
        assert (code, json.loads(body)) == (200, {"ready": True})  # local clients still served
        doc = status(gw)
        mqtt = [a["message"] for a in doc["attention"] if a["what"] == "mqtt"]
        assert len(mqtt) == 1, doc["attention"]
        assert mqtt[0].startswith(f"MQTT disconnected ({gw.broker.host}:{gw.broker.port})")
        found = probe(tmp_path, f"{gw.daemon.url}/", 390)
        assert found["mqttBadge"] == "MQTT disconnected"
        assert "disconnected" in found["cards"]["component-mqtt"]
        assert found["ready"]["kind"] == "warn"
    finally:
        gw.broker.start()
    until(lambda: status(gw)["components"]["mqtt"]["client"]["connected"], "connected again",
          30, every_s=0.05)  # fmt: skip
    assert not [a for a in status(gw)["attention"] if a["what"] == "mqtt"]
