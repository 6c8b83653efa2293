"""MQTT over mutual TLS against a real mosquitto, with certificates made by ``openssl``.

The broker's TLS listener demands a client certificate and takes its CN as the username, so
a session that works proves the bridge's CA *and* client certificate were used.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import ssl
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fixtures.mosquitto import Broker, BrokerTls
from tests.fixtures.waits import until_async
from tests.runtime.mqtt.conftest import ROOT, bridge_settings
from tests.runtime.mqtt.requester import Requester
from tests.runtime.mqtt.service import FakeService
from wasmgate.runtime.mqtt import MqttBridge

SUM = f"{ROOT}/adapters/sum/req"
_LEAF = "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
_SERVER_EXT = f"{_LEAF}extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n"
_CLIENT_EXT = f"{_LEAF}extendedKeyUsage=clientAuth\n"


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    ca: Path
    server: Pair
    bridge: Pair  # CN "gw1-bridge"
    device: Pair  # CN "device-1"
    other_ca: Path  # a CA that signed none of the above


def _openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True, timeout=30)


def _key(path: Path) -> Path:
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", path)
    return path


def _ca(d: Path, name: str) -> Pair:
    pair = Pair(d / f"{name}.crt", _key(d / f"{name}.key"))
    ext = "-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign"
    args = f"req -x509 -new -subj /CN={name} -days 2 {ext}".split()
    _openssl(*args, "-key", pair.key, "-out", pair.cert)
    return pair


def _leaf(d: Path, ca: Pair, cn: str, ext: str, serial: int) -> Pair:
    pair = Pair(d / f"{cn}.crt", _key(d / f"{cn}.key"))
    csr, extfile = d / f"{cn}.csr", d / f"{cn}.ext"
    extfile.write_text(ext)
    _openssl("req", "-new", "-subj", f"/CN={cn}", "-key", pair.key, "-out", csr)
    sign = f"x509 -req -days 2 -set_serial {serial}".split()
    _openssl(
        *sign, "-in", csr, "-CA", ca.cert, "-CAkey", ca.key, "-extfile", extfile, "-out", pair.cert
    )
    return pair


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    d = tmp_path / "pki"
    d.mkdir()
    ca = _ca(d, "test-ca")
    return Pki(
        ca=ca.cert,
        server=_leaf(d, ca, "broker", _SERVER_EXT, 1),
        bridge=_leaf(d, ca, "gw1-bridge", _CLIENT_EXT, 2),
        device=_leaf(d, ca, "device-1", _CLIENT_EXT, 3),
        other_ca=_ca(d, "other-ca").cert,
    )


@pytest.fixture
def tls_broker(tmp_path: Path, pki: Pki) -> Iterator[Broker]:
    broker = Broker(tmp_path / "mosquitto", tls=BrokerTls(pki.ca, pki.server.cert, pki.server.key))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def _device(broker: Broker, pki: Pki) -> Requester:
    return Requester(broker.port, tls=(pki.ca, pki.device.cert, pki.device.key))


async def _until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    await until_async(predicate, getattr(predicate, "__name__", "the condition"), timeout)


def _connect_failures(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "mqtt connect to" in r.getMessage()]


def _assert_down_and_retrying(bridge: MqttBridge) -> str:
    """Never connected, the supervisor still alive (no crash); returns ``last_error``."""
    state = bridge.state.client
    assert not state.connected
    assert state.connects == 0
    assert bridge.client.supervising
    assert state.last_error is not None
    return state.last_error


async def test_bridge_answers_over_mutual_tls(
    tls_broker: Broker, pki: Pki, service: FakeService
) -> None:
    settings = bridge_settings(
        tls_broker.port, tls_ca=pki.ca, tls_cert=pki.bridge.cert, tls_key=pki.bridge.key
    )
    async with MqttBridge(settings, service) as bridge:
        async with asyncio.timeout(10):
            await bridge.wait_connected()
        assert isinstance(bridge.client.current_socket(), ssl.SSLSocket)
        with _device(tls_broker, pki).connect("client/tls") as dev:
            dev.request(SUM, b"1,2,3.5", response_topic="client/tls", correlation=b"t1")
            (reply,) = await dev.wait_for(1)
    assert reply.correlation == b"t1"
    assert reply.props["status"] == "200"
    assert json.loads(reply.payload) == {"sum": 6.5}
    assert bridge.state.answered == 1
    # The broker took each client's certificate CN as its username.
    connects = [ln for ln in tls_broker.log_text().splitlines() if "New client connected" in ln]
    assert any("as wg-test " in ln and "u'gw1-bridge'" in ln for ln in connects), connects
    assert any("u'device-1'" in ln for ln in connects), connects


async def test_wrong_ca_fails_verification_and_bridge_keeps_retrying(
    tls_broker: Broker, pki: Pki, service: FakeService, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="wasmgate.mqtt")
    settings = bridge_settings(
        tls_broker.port, tls_ca=pki.other_ca, tls_cert=pki.bridge.cert, tls_key=pki.bridge.key
    )
    async with MqttBridge(settings, service) as bridge:
        await _until(lambda: len(_connect_failures(caplog)) >= 2)  # failed, and retried
        error = _assert_down_and_retrying(bridge)
        assert error.startswith("SSLCertVerificationError:"), error
        assert "certificate verify failed" in error
        assert "certificate verify failed" in _connect_failures(caplog)[0]
        # The broker is fine: a client trusting the right CA gets through meanwhile.
        with _device(tls_broker, pki).connect("client/ok"):
            pass
    # Log records hold the connect errors, whose tracebacks hold the sockets: drop them
    # so a socket left open by a failed handshake warns here (an error in this suite).
    caplog.clear()
    gc.collect()
    assert tls_broker.running


async def test_broker_refuses_bridge_without_client_certificate(
    tls_broker: Broker, pki: Pki, service: FakeService, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="wasmgate.mqtt")
    async with MqttBridge(bridge_settings(tls_broker.port, tls_ca=pki.ca), service) as bridge:
        await _until(lambda: len(_connect_failures(caplog)) >= 2)
        _assert_down_and_retrying(bridge)
    # TLS 1.3: the handshake completes on the client side and the broker's alert arrives
    # with the first read, so the reason is paho's socket error, logged by the bridge.
    paho_errors = [r.getMessage() for r in caplog.records if r.name == "wasmgate.mqtt.paho"]
    assert any("certificate required" in m for m in paho_errors), caplog.text
    assert "peer did not return a certificate" in tls_broker.log_text(), tls_broker.log_text()


async def test_a_gateways_workers_answer_over_mutual_tls(
    tmp_path: Path, tls_broker: Broker, pki: Pki
) -> None:
    """``[workers] count = 2``: each confined worker opens its own TLS connection with the
    gateway's CA, certificate and key (files it may read, nothing else of the data folder)."""
    from tests.fixtures.daemon import Daemon  # noqa: PLC0415 - only this test starts one
    from tests.runtime.supervisor.test_workers_mqtt import until_mqtt_workers  # noqa: PLC0415
    from tests.runtime.supervisor.workerkit import until_serving  # noqa: PLC0415

    mqtt = {"host": "127.0.0.1", "port": tls_broker.port, "gateway_id": "gw1",
            "tls_ca": pki.ca, "tls_cert": pki.bridge.cert, "tls_key": pki.bridge.key}  # fmt: skip
    (tmp_path / "gw").mkdir()
    daemon = Daemon(tmp_path / "gw", {"workers": {"count": 2}, "mqtt": mqtt}, ("--demo",))
    daemon.start(timeout=240)
    try:
        until_serving(daemon, 2)
        until_mqtt_workers(daemon, 2)
        sample = Path(__file__).resolve().parents[3] / "guest_adapters/examples/digits/samples"
        with _device(tls_broker, pki).connect("tls/replies") as dev:
            for i in range(10):
                dev.request(f"{ROOT}/adapters/digits/req", (sample / "zero.json").read_bytes(),
                            response_topic="tls/replies", correlation=b"%d" % i)  # fmt: skip
            got = await dev.wait_for(10, timeout=30)
        assert sorted(r.correlation or b"" for r in got) == sorted(b"%d" % i for i in range(10))
        workers = until_mqtt_workers(daemon, 2)["workers"]
        assert isinstance(workers, list)
        assert all(int(w["received"]) > 0 for w in workers), workers
    finally:
        daemon.stop()
