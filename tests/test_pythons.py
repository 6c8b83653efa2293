"""The smoke set on every Python a gateway ships: 3.10 (JetPack 6), 3.11, 3.12 (Ubuntu
24.04) and 3.13 (Debian 13). The full suite runs on one Python; this is what must hold on all.

`.ci/pythons-setup` provides (and caches) one venv per Python with the runtime dependencies
(it needs PyPI); `.ci/run` exports what it prints. Here the checkout's wheel is built and
installed into each venv (offline, no dependencies), and on each Python
``wasmgate serve --demo`` (a scratch HOME and data dir) answers one request over HTTP, gRPC
and MQTT (a mosquitto of its own), installs a bundle signed by the demo key through the
management API, refuses a tampered bundle and one signed by a key it does not trust (the
served version untouched), and stops cleanly.

The demo compiles the example adapters with Zig on its first start. Zig's global cache is
kept in the test cache, so wasi-libc is built once per venv (~45 s: each venv's Zig has its
own path, part of Zig's key); warm, the four Pythons take ~1 min. ``bench/`` is where
start-up time is measured.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import paho.mqtt.client as mqtt
import pytest
import tritonclient.grpc as grpcclient
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from tests.fixtures.daemon import Daemon
from tests.fixtures.models import generator
from tests.fixtures.mosquitto import Broker
from tests.fixtures.net import free_port
from tests.fixtures.pythons import (
    VERSIONS,
    NoVenv,
    Venv,
    checkout_wheel,
    installed,
    scratch_env,
)
from wasmgate.guest_adapters.examples import models_dir

TOKEN = "smoke-management-token-0123456789"
# A cold Zig cache: the first start builds wasi-libc (~45 s per venv), then the examples.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    try:
        with checkout_wheel(tmp_path_factory.mktemp("wheel")) as built:
            yield built
    except NoVenv as e:
        pytest.fail(str(e))


@pytest.fixture(scope="module", params=VERSIONS, ids=[f"py{v}" for v in VERSIONS])
def venv(request: pytest.FixtureRequest, wheel: Path) -> Venv:
    try:
        return installed(request.param, wheel)
    except NoVenv as e:
        pytest.fail(str(e))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    b = Broker(tmp_path_factory.mktemp("broker"))
    b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def demo(venv: Venv, broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    work = tmp_path_factory.mktemp(f"py{venv.version}")
    config = {
        "http": {"management_token": TOKEN},
        "grpc": {"port": free_port()},
        "mqtt": {"host": broker.host, "port": broker.port, "gateway_id": f"py{venv.version}"},
    }
    env = scratch_env(work / "home")
    daemon = Daemon(work, config, ("--demo",), env, python=venv.python)
    try:
        daemon.start(timeout=500)
        yield daemon
    finally:
        daemon.kill()


def test_compat_keeps_the_311_semantics(venv: Venv, tmp_path: Path) -> None:
    """tests/pythons_probe.py on this Python: timeouts, task groups, cancels, StrEnum, TOML."""
    probe = (Path(__file__).parent / "pythons_probe.py").read_text()
    done = subprocess.run(
        [venv.python, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert "site-packages" in got["compat"]  # the wheel, not the checkout
    assert got["eager"] == []
    assert got["timeout"] == "builtins.TimeoutError"
    assert got["outer_cancel"] == "cancelled"
    assert got["group"] == ["ExceptionGroup", ["ValueError"]]
    assert got["dropped_cancels"] == []
    assert (got["str"], got["format"]) == ("red", "red|  red")
    assert got["toml"] == {"a": 1, "b": "x"}
    assert got["digest"] is True
    assert got["stdlib_own"] is (venv.version != "3.10")


@pytest.fixture(scope="module")
def transformer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The generated MatMul-heavy model (and its labelled set, test.npz beside it)."""
    gen = generator("gen_transformer")
    path = tmp_path_factory.mktemp("transformer") / "transformer-fp32.onnx"
    path.write_bytes(gen.transformer_onnx())
    x, y = gen.labelled(path.read_bytes())
    np.savez(path.with_name("test.npz"), x=x, y=y)
    return path


def test_int4_quantize_runs_on_this_python(venv: Venv, transformer: Path, tmp_path: Path) -> None:
    """ONNX Runtime's quantizer API differs between the versions the Pythons get."""
    out = tmp_path / "int4.onnx"
    labels = transformer.with_name("test.npz")
    done = subprocess.run(
        [venv.command("wasmgate"), "quantize", str(transformer), "--int4", "--labels",
         str(labels), "--no-progress", "--out", str(out)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "mode: int4 weight-only (MatMulNBits" in done.stdout
    ops = {node.op_type for node in onnx.load(str(out)).graph.node}
    assert "MatMulNBits" in ops
    assert "MatMul" not in ops


def _post(url: str, body: Any) -> Any:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


def _put_bundle(daemon: Daemon, path: Path) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        f"{daemon.url}/v1/bundles", data=path.read_bytes(), method="PUT",
        headers={"Authorization": f"Bearer {TOKEN}"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _served_version(daemon: Daemon, name: str) -> int:
    request = urllib.request.Request(
        f"{daemon.url}/v1/bundles", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        bundles = json.loads(answer.read())["bundles"]
    version: int = next(b["version"] for b in bundles if b["name"] == name)
    return version


def _digits() -> tuple[np.ndarray[Any, np.dtype[np.float32]], int]:
    """The first image of the test set the wheel ships, and its label."""
    with np.load(models_dir() / "digits-test.npz") as data:
        x: np.ndarray[Any, np.dtype[np.float32]] = data["x"][:1].astype(np.float32)
        return x, int(data["y"][0])


def test_the_demo_serves_http_on_this_python(venv: Venv, demo: Daemon) -> None:
    assert demo.proc is not None
    exe = Path(f"/proc/{demo.proc.pid}/exe").readlink()  # the interpreter behind the venv's link
    assert exe.name.startswith(f"python{venv.version}"), exe
    x, label = _digits()
    body = {"inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP32",
                        "data": x.ravel().tolist()}]}  # fmt: skip
    answer = _post(f"{demo.url}/v2/models/digits-mlp/infer", body)
    probs = np.array(answer["outputs"][0]["data"], dtype=np.float32)
    assert probs.shape == (10,)
    assert int(probs.argmax()) == label
    assert abs(float(probs.sum()) - 1.0) < 0.05  # int8: steps of 1/255


def test_grpc_answers_as_http(demo: Daemon) -> None:
    grpc_port = demo.get_json("/v1/status")["components"]["grpc"]["port"]
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
    try:
        x, _label = _digits()
        tensor = grpcclient.InferInput("input", [1, 64], "FP32")
        tensor.set_data_from_numpy(x)
        probs = client.infer("digits-mlp", [tensor]).as_numpy("probs")
    finally:
        client.close()
    body = {"inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP32",
                        "data": x.ravel().tolist()}]}  # fmt: skip
    over_http = _post(f"{demo.url}/v2/models/digits-mlp/infer", body)["outputs"][0]["data"]
    assert probs is not None
    np.testing.assert_allclose(probs.ravel(), over_http, rtol=1e-5, atol=1e-6)


def test_mqtt_request_is_answered(venv: Venv, demo: Daemon, broker: Broker) -> None:
    answered = threading.Event()
    got: list[mqtt.MQTTMessage] = []

    def on_message(_c: mqtt.Client, _u: object, message: mqtt.MQTTMessage) -> None:
        got.append(message)
        answered.set()

    client = mqtt.Client(CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
    client.on_message = on_message
    client.connect(broker.host, broker.port)
    client.loop_start()
    try:
        reply = f"smoke/{venv.version}/answers"
        client.subscribe(reply, qos=1)
        props = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
        props.ResponseTopic = reply
        props.CorrelationData = b"smoke-1"
        topic = f"wasmgate/v1/py{venv.version}/adapters/digits/req"
        payload = json.dumps([0.0] * 64)
        # Published until answered: the subscription and the daemon's may still be settling.
        for _ in range(20):
            client.publish(topic, payload, qos=1, properties=props).wait_for_publish(5)
            if answered.wait(1.5):
                break
    finally:
        client.loop_stop()
        client.disconnect()
    assert got, "no MQTT answer"
    assert got[0].properties.CorrelationData == b"smoke-1"  # type: ignore[union-attr]
    assert set(json.loads(got[0].payload)) == {"digit", "confidence"}


def _wasmgate(venv: Venv, demo: Daemon, *args: str) -> None:
    """The venv's own ``wasmgate`` command, as a user in the daemon's scratch HOME runs it."""
    cwd = demo.workdir / "ws"
    cwd.mkdir(exist_ok=True)
    env = {**os.environ, **scratch_env(demo.workdir / "home")}
    done = subprocess.run(
        [venv.command("wasmgate"), *args], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"wasmgate {' '.join(args)}:\n{done.stderr}"


def _build_digits(venv: Venv, demo: Daemon, key: Path, version: int, out: str) -> Path:
    """``adapter new`` + ``bundle build``: the example as an adapter author ships it."""
    if not (demo.workdir / "ws" / "digits").exists():
        _wasmgate(venv, demo, "adapter", "new", "digits", "--from", "digits")
    _wasmgate(venv, demo, "bundle", "build", "digits", "--key", str(key),
              "--version", str(version), "--out", out)  # fmt: skip
    return demo.workdir / "ws" / out


def test_a_signed_bundle_installs_through_the_management_api(venv: Venv, demo: Daemon) -> None:
    newer = _served_version(demo, "digits") + 1
    demo_key = demo.workdir / "data" / "demo" / "demo-signing.key"
    bundle = _build_digits(venv, demo, demo_key, newer, "digits-new.wgb")
    status, answer = _put_bundle(demo, bundle)
    assert status == 201, answer
    assert answer["installed"]["version"] == newer
    assert _served_version(demo, "digits") == newer
    assert set(_post(f"{demo.url}/v1/adapters/digits", [0.0] * 64)) == {"digit", "confidence"}


def test_tampered_and_untrusted_bundles_are_refused(venv: Venv, demo: Daemon) -> None:
    served = _served_version(demo, "digits")
    demo_key = demo.workdir / "data" / "demo" / "demo-signing.key"
    good = _build_digits(venv, demo, demo_key, served + 10, "digits-good.wgb")
    tampered = good.with_name("digits-tampered.wgb")
    data = bytearray(good.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit inside a signed file
    tampered.write_bytes(bytes(data))
    status, answer = _put_bundle(demo, tampered)
    assert status == 422, answer
    assert "does not match" in answer["error"]

    _wasmgate(venv, demo, "keygen", "--out", "stranger.key")
    stranger = _build_digits(
        venv, demo, demo.workdir / "ws" / "stranger.key", served + 20, "digits-stranger.wgb"
    )
    status, answer = _put_bundle(demo, stranger)
    assert 400 <= status < 500, answer
    assert "trust" in answer["error"], answer
    assert _served_version(demo, "digits") == served


def test_the_daemon_stops_cleanly(demo: Daemon) -> None:
    assert demo.stop(timeout=30) == 0, demo.log()[-3000:]
