"""Request/response through a real mosquitto: paho MQTT 5, paho 3.1.1, mosquitto_pub/sub."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

from tests.fixtures.mosquitto import Broker
from tests.runtime.mqtt.conftest import ROOT, bridge_settings
from tests.runtime.mqtt.requester import Requester
from tests.runtime.mqtt.service import FakeService
from wasmgate.runtime.mqtt import MqttBridge


async def test_mqtt5_request_response_with_properties(
    mosquitto: Broker, service: FakeService
) -> None:
    async with MqttBridge(bridge_settings(mosquitto.port), service) as bridge:
        async with asyncio.timeout(10):
            await bridge.wait_connected()
        with Requester(mosquitto.port).connect("client/a/res") as dev:
            dev.request(
                f"{ROOT}/adapters/sum/req",
                b'{"values": [1, 2, 3.5]}',
                response_topic="client/a/res",
                correlation=b"\x00c1",
            )
            dev.request(
                f"{ROOT}/adapters/sum/req",
                b"10,20",
                response_topic="client/a/res",
                correlation=b"c2",
            )
            replies = {r.correlation: r for r in await dev.wait_for(2)}
    assert json.loads(replies[b"\x00c1"].payload) == {"sum": 6.5}
    assert json.loads(replies[b"c2"].payload) == {"sum": 30.0}
    first = replies[b"\x00c1"]
    assert first.content_type == "application/json"
    assert first.props == {"status": "200", "source": "local", "version": "3"}
    assert bridge.state.answered == 2


async def test_mqtt5_model_inference_runs_onnx(mosquitto: Broker, service: FakeService) -> None:
    request = {
        "id": "r1",
        "inputs": [
            {
                "name": "x",
                "datatype": "FP32",
                "shape": [2, 4],
                "data": [0, 1, 2, 3, -1, -2, 0.5, 10],
            }
        ],
    }
    async with MqttBridge(bridge_settings(mosquitto.port), service) as bridge:
        async with asyncio.timeout(10):
            await bridge.wait_connected()
        with Requester(mosquitto.port).connect("client/m") as dev:
            dev.request(
                f"{ROOT}/models/affine/infer",
                json.dumps(request).encode(),
                response_topic="client/m",
                correlation=b"m1",
            )
            (reply,) = await dev.wait_for(1)
    doc = json.loads(reply.payload)
    assert reply.props["status"] == "200"
    assert doc["id"] == "r1"
    assert doc["model_name"] == "affine"
    assert doc["outputs"][0]["name"] == "y"
    assert doc["outputs"][0]["shape"] == [2, 4]
    assert doc["outputs"][0]["data"] == [1, 3, 5, 7, -1, -3, 2, 21]


async def test_mqtt311_topic_pairs_echo_id(mosquitto: Broker, service: FakeService) -> None:
    async with MqttBridge(bridge_settings(mosquitto.port, protocol="3.1.1"), service) as bridge:
        async with asyncio.timeout(10):
            await bridge.wait_connected()
        with Requester(mosquitto.port, v5=False).connect(
            f"{ROOT}/adapters/sum/res/dev7", f"{ROOT}/models/affine/result/dev7"
        ) as dev:
            dev.request(f"{ROOT}/adapters/sum/req/dev7", b'{"id": "a-1", "values": [4, 5]}')
            x = {
                "id": "m-1",
                "inputs": [
                    {"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1, 1, 1, 1]}
                ],
            }
            dev.request(f"{ROOT}/models/affine/infer/dev7", json.dumps(x).encode())
            replies = {r.topic: r for r in await dev.wait_for(2)}
    assert json.loads(replies[f"{ROOT}/adapters/sum/res/dev7"].payload) == {"id": "a-1", "sum": 9.0}
    model = json.loads(replies[f"{ROOT}/models/affine/result/dev7"].payload)
    assert model["id"] == "m-1"
    assert model["outputs"][0]["data"] == [3, 3, 3, 3]


async def _cli_round_trip(
    broker: Broker, service: FakeService, sub_args: list[str], pub_args: list[str]
) -> bytes:
    """One answer through the mosquitto_sub / mosquitto_pub command-line clients."""
    where = ["-h", "127.0.0.1", "-p", str(broker.port)]
    async with MqttBridge(bridge_settings(broker.port), service) as bridge:
        async with asyncio.timeout(10):
            await bridge.wait_connected()
        sub = await asyncio.create_subprocess_exec(
            "mosquitto_sub", *where, "-i", "cli-sub", "-C", "1", "-W", "10", *sub_args,
            stdout=subprocess.PIPE,
        )  # fmt: skip
        topic = sub_args[sub_args.index("-t") + 1]
        await asyncio.to_thread(broker.wait_subscribed, "cli-sub", topic)
        pub = await asyncio.create_subprocess_exec("mosquitto_pub", *where, "-q", "1", *pub_args)
        assert await pub.wait() == 0
        out, _ = await sub.communicate()
        assert sub.returncode == 0
    return out


async def test_mosquitto_cli_clients(mosquitto: Broker, service: FakeService) -> None:
    v5 = ["-V", "mqttv5"]
    out = await _cli_round_trip(
        mosquitto,
        service,
        [*v5, "-t", "cli/answer", "-F", "%p|%C|%P"],
        [*v5, "-t", f"{ROOT}/adapters/sum/req", "-m", "1,2,3",
         "-D", "publish", "response-topic", "cli/answer",
         "-D", "publish", "correlation-data", "corr-9"],
    )  # fmt: skip
    payload, content_type, props = out.decode().strip().split("|")
    assert json.loads(payload) == {"sum": 6.0}
    assert content_type == "application/json"
    assert "status:200" in props


async def test_mosquitto_cli_311_pair(mosquitto: Broker, service: FakeService) -> None:
    out = await _cli_round_trip(
        mosquitto,
        service,
        ["-t", f"{ROOT}/adapters/sum/res/cli"],
        ["-t", f"{ROOT}/adapters/sum/req/cli", "-m", '{"id": 7, "values": [2, 2]}'],
    )
    assert json.loads(out) == {"id": 7, "sum": 4.0}


async def test_username_password_and_refusal_reason(tmp_path: Path, service: FakeService) -> None:
    passwords = tmp_path / "passwd"
    subprocess.run(["mosquitto_passwd", "-b", "-c", str(passwords), "gw", "right"], check=True)
    broker = Broker(tmp_path / "broker", extra_conf=f"password_file {passwords}\n")
    broker.start()
    try:
        wrong = bridge_settings(broker.port, username="gw", password="wrong", client_id="wg-a")
        async with MqttBridge(wrong, service) as bridge:
            for _ in range(200):
                if bridge.state.client.last_error:
                    break
                await asyncio.sleep(0.02)
            assert not bridge.state.client.connected
            assert "authori" in (bridge.state.client.last_error or "").lower()
        right = bridge_settings(broker.port, username="gw", password="right", client_id="wg-b")
        async with MqttBridge(right, service) as bridge:
            async with asyncio.timeout(10):
                await bridge.wait_connected()
            with Requester(broker.port).connect("c/auth") as dev:
                dev.request(
                    f"{ROOT}/adapters/sum/req", b"2,3", response_topic="c/auth", correlation=b"a"
                )
                (reply,) = await dev.wait_for(1)
        assert json.loads(reply.payload) == {"sum": 5.0}
    finally:
        broker.stop()
