"""2000 requests with random bad names (HTTP and MQTT) leave the number of series constant."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable
from pathlib import Path

from tests.fixtures.daemon import Daemon
from tests.fixtures.mosquitto import Broker
from tests.runtime.edges.probe import probe_daemon, request
from tests.runtime.edges.test_mqtt_edges import ROOT, mqtt_config, status_counter, wait_online
from tests.runtime.mqtt.requester import Requester

ROUNDS = 500  # x 2 HTTP forms x 2 MQTT forms = 2000 requests


def _series(daemon: Daemon) -> set[str]:
    text = request(daemon.port, "GET", "/metrics").body.decode()
    return {line.rsplit(" ", 1)[0] for line in text.splitlines() if line.startswith("wasmgate_")}


def _http_round(daemon: Daemon, name: str) -> None:
    # Refused before lookup (bad header), and refused by lookup (unknown name).
    bad = request(
        daemon.port, "POST", f"/v1/adapters/{name}", b"x", {"X-Wasmgate-Timeout-Ms": "nan"}
    )
    assert bad.status == 400, bad
    unknown = request(daemon.port, "POST", f"/v2/models/{name}/infer", b"{}")
    assert unknown.status == 404, unknown


def _mqtt_round(dev: Requester, name: str, expired: str) -> None:
    dev.request(
        f"{ROOT}/adapters/{name}/req", b"x", response_topic="r/x", user=[("deadline", expired)]
    )
    dev.request(f"{ROOT}/models/{name * 40}/infer", b"{}", response_topic="r/x")  # 8 KB level


async def test_bad_names_do_not_grow_the_series(
    tmp_path: Path, mosquitto: Broker, daemon_factory: Callable[..., Daemon]
) -> None:
    daemon = probe_daemon(tmp_path, daemon_factory, mqtt_config(mosquitto))
    await wait_online(mosquitto)
    ok = request(daemon.port, "POST", "/v1/adapters/probe", b"Pok")
    assert ok.status == 200
    expired = str(time.time() - 60)
    with Requester(mosquitto.port).connect("r/x") as dev:
        _http_round(daemon, "warm-up")  # the "-" series exist from here on
        _mqtt_round(dev, "warm-up", expired)
        await status_counter(daemon, "errors", 2)
        before = _series(daemon)
        for i in range(ROUNDS):
            name = secrets.token_hex(100)
            _http_round(daemon, name)
            _mqtt_round(dev, name, expired)
            if i % 100 == 99:
                await asyncio.sleep(0)  # let the requester's network thread keep up
        await status_counter(daemon, "errors", 2 + 2 * ROUNDS, limit_s=60)
        after = _series(daemon)
    assert after == before, sorted(after - before)[:5]
    assert any('name="probe"' in s for s in after)  # known names still get their own series
