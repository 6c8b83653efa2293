"""The composed daemon with the MQTT bridge on a real mosquitto: one request path, two bridges."""

from __future__ import annotations

import queue
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion

from tests.fixtures.daemon import Daemon
from tests.fixtures.mosquitto import Broker
from tests.runtime.bundlekit import BundleKit
from tests.runtime.stack import host_profile_name
from wasmgate.runtime.mqtt._paho_private import close_threaded

ROOT = "wasmgate/v1/gw-test"


def test_mqtt_and_http_share_the_service(
    tmp_path: Path, mosquitto: Broker, daemon_factory: Callable[..., Daemon]
) -> None:
    kit = BundleKit(tmp_path / "kit")
    bundles = tmp_path / "d" / "data" / "bundles"
    bundles.mkdir(parents=True)
    kit.build("probe", 1, out_dir=bundles)
    config = {
        "paths": {"trust_file": kit.save_trust(tmp_path / "trust.json")},
        "profile": host_profile_name(),
        "mqtt": {"host": mosquitto.host, "port": mosquitto.port, "gateway_id": "gw-test"},
    }
    daemon = daemon_factory(config=config, name="d")

    got: queue.Queue[tuple[str, bytes]] = queue.Queue()
    client = paho.Client(CallbackAPIVersion.VERSION2, protocol=paho.MQTTv311)

    def on_message(_c: paho.Client, _u: Any, msg: paho.MQTTMessage) -> None:
        got.put((msg.topic, bytes(msg.payload)))

    client.on_message = on_message
    client.connect(mosquitto.host, mosquitto.port)
    client.subscribe([(f"{ROOT}/adapters/probe/res/c1", 1), (f"{ROOT}/status", 1)])
    client.loop_start()
    try:
        assert got.get(timeout=20) == (f"{ROOT}/status", b"online")
        client.publish(f"{ROOT}/adapters/probe/req/c1", b"M", qos=1).wait_for_publish(10)
        assert got.get(timeout=20) == (f"{ROOT}/adapters/probe/res/c1", b"v1:2,4,6,8")
        req = urllib.request.Request(f"{daemon.url}/v1/adapters/probe", data=b"Phttp")
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.read() == b"v1:http"
        with urllib.request.urlopen(f"{daemon.url}/metrics", timeout=10) as r:
            metrics = r.read().decode()
        for transport in ("mqtt", "http"):
            line = (
                f'wasmgate_requests_total{{kind="adapter",name="probe",source="local",'
                f'transport="{transport}"}} 1.0'
            )
            assert line in metrics, [m for m in metrics.splitlines() if "requests_total" in m]
        assert daemon.stop() == 0
        assert got.get(timeout=20) == (f"{ROOT}/status", b"offline")
    finally:
        close_threaded(client)
