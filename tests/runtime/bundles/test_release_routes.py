"""``routes.mqtt`` and ``routes.http`` route as declared, claim their names, and the MQTT
side of staged releases (canary key and pinning by user property), with the mosquitto CLI
clients against a real daemon subprocess and a real broker."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.daemon import Daemon
from tests.fixtures.mosquitto import Broker
from tests.runtime.bundlekit import BundleKit
from tests.runtime.bundles.releases import ask, call, put, start

ROOT = "wasmgate/v1/gw-rel"
ROUTES = {"routes": {"http": "probe-h", "mqtt": "probe-mq"}}


def _mqtt(broker: Broker, tool: str, *args: str) -> str:
    """Run ``mosquitto_<tool>`` against ``broker`` (bounded by its own -W timeout)."""
    where = ["-h", "127.0.0.1", "-p", str(broker.port)]
    done = subprocess.run(
        [f"mosquitto_{tool}", *where, *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _request(broker: Broker, name: str, payload: str, *props: tuple[str, str]) -> str:
    """One MQTT 5 request/response to adapter ``name``: ``payload|user properties``."""
    defs = [a for k, v in props for a in ("-D", "publish", "user-property", k, v)]
    return _mqtt(
        broker, "rr", "-t", f"{ROOT}/adapters/{name}/req", "-e", f"reply/{name}",
        "-m", payload, "-W", "20", "-F", "%p|%P", *defs,
    )  # fmt: skip


@pytest.fixture
def daemon(
    kit: BundleKit, tmp_path: Path, mosquitto: Broker, daemon_factory: Callable[..., Daemon]
) -> Daemon:
    mqtt = {"host": mosquitto.host, "port": mosquitto.port, "gateway_id": "gw-rel"}
    daemon = start(daemon_factory, kit, tmp_path, mqtt=mqtt)
    assert put(daemon, kit.build("probe", 1, sections=ROUTES))[0] == 201
    assert _mqtt(mosquitto, "sub", "-t", f"{ROOT}/status", "-C", "1", "-W", "20") == "online"
    return daemon


@pytest.mark.timeout(180)
def test_routes_are_used_as_declared(daemon: Daemon, mosquitto: Broker) -> None:
    assert call(daemon, "POST", "/v1/adapters/probe-h", b"Ph")[2] == b"v1:h"
    for other in ("probe", "probe-mq"):
        assert call(daemon, "POST", f"/v1/adapters/{other}", b"Ph")[0] == 404
    payload, props = _request(mosquitto, "probe-mq", "Pm").split("|")
    assert payload == "v1:m"
    assert "status:200" in props
    payload, props = _request(mosquitto, "probe-h", "Pm").split("|")
    assert "status:404" in props
    # the MQTT 3.1.1 pair and the retained metadata use the MQTT name too
    sub = subprocess.Popen(
        ["mosquitto_sub", "-h", "127.0.0.1", "-p", str(mosquitto.port), "-C", "1", "-W", "20",
         "-t", f"{ROOT}/adapters/probe-mq/res/dev1"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        for _ in range(50):  # publish again until mosquitto_sub had subscribed in time
            _mqtt(mosquitto, "pub", "-t", f"{ROOT}/adapters/probe-mq/req/dev1", "-m", "P3")
            try:
                out, _ = sub.communicate(timeout=0.4)
                break
            except subprocess.TimeoutExpired:
                continue
        else:
            pytest.fail("no answer on the 3.1.1 pair")
    finally:
        sub.kill()
        sub.wait()
    assert out.strip() == "v1:3"
    meta = _mqtt(
        mosquitto, "sub", "-t", f"{ROOT}/adapters/probe-mq/metadata", "-C", "1", "-W", "20"
    )
    doc = json.loads(meta)
    assert (doc["name"], doc["request_topic"]) == ("probe-h", f"{ROOT}/adapters/probe-mq/req")


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("routes", "model_name", "taken"),
    [
        ({"http": "probe-mq"}, "m2", "probe-mq"),
        ({"mqtt": "probe-h"}, "m2", "probe-h"),
        ({"mqtt": "double"}, "m2", "double"),
        ({}, "probe-mq", "probe-mq"),
    ],
    ids=["http-vs-mqtt", "mqtt-vs-http", "mqtt-vs-model", "model-vs-mqtt"],
)
def test_every_claimed_name_is_checked_at_install(
    daemon: Daemon, kit: BundleKit, routes: dict[str, str], model_name: str, taken: str
) -> None:
    other = kit.build("other", 1, model_name=model_name, sections={"routes": routes})
    status, body = put(daemon, other)
    assert status == 422, body
    assert f"name '{taken}' is already served by bundle 'probe'" in body["error"]
    assert ask(daemon, payload=b"P")[0] == 404  # nothing named probe over HTTP appeared
    assert call(daemon, "POST", "/v1/adapters/probe-h", b"Ph")[2] == b"v1:h"


@pytest.mark.timeout(180)
def test_mqtt_canary_key_and_version_pin(daemon: Daemon, mosquitto: Broker, kit: BundleKit) -> None:
    assert put(daemon, kit.build("probe", 2, sections=ROUTES), stage=50)[0] == 201
    for version in ("1", "2"):
        payload, props = _request(mosquitto, "probe-mq", "Px", ("version", version)).split("|")
        assert payload == f"v{version}:x"
        assert f"version:{version}" in props
    _, props = _request(mosquitto, "probe-mq", "Px", ("version", "9")).split("|")
    assert "status:404" in props
    # one key, one version: every answer for a key comes from the same version
    for key in ("dev-a", "dev-b", "dev-c", "dev-d"):
        seen = {
            _request(mosquitto, "probe-mq", "Px", ("canary-key", key)).split("|")[0]
            for _ in range(4)
        }
        assert len(seen) == 1, (key, seen)
