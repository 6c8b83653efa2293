"""Bad requests get error answers where a reply address exists; the bridge keeps serving."""

from __future__ import annotations

import asyncio
import json
import time

from tests.fixtures.mosquitto import Broker
from tests.fixtures.waits import until_async
from tests.runtime.mqtt.conftest import ROOT, bridge_settings
from tests.runtime.mqtt.requester import Requester
from tests.runtime.mqtt.service import FakeService
from wasmgate.runtime.mqtt import MqttBridge

SUM = f"{ROOT}/adapters/sum/req"
AFFINE = f"{ROOT}/models/affine/infer"


async def test_bad_requests_get_error_answers(mosquitto: Broker, service: FakeService) -> None:
    cases: dict[bytes, tuple[str, bytes]] = {
        b"malformed": (SUM, b'{"values": [1, 2'),
        b"not-utf8": (SUM, b"\xff\xfe\x00garbage"),
        b"oversize": (SUM, b"1," * 3000),
        b"unknown": (f"{ROOT}/adapters/nope/req", b"1"),
        b"adapter-fails": (f"{ROOT}/adapters/fail/req", b"1"),
        b"wrong-v2": (AFFINE, b'{"inputs": "x"}'),
        b"not-json": (AFFINE, b"\x00\x01binary"),
        b"wrong-dtype": (
            AFFINE,
            json.dumps(
                {
                    "inputs": [
                        {"name": "x", "datatype": "INT64", "shape": [1, 4], "data": [1, 2, 3, 4]}
                    ]
                }
            ).encode(),
        ),
        b"unknown-model": (f"{ROOT}/models/nope/infer", b'{"inputs": []}'),
        b"good": (SUM, b"1,1"),
    }
    expected = {
        b"malformed": 400,
        b"not-utf8": 400,
        b"oversize": 413,
        b"unknown": 404,
        b"adapter-fails": 500,
        b"wrong-v2": 400,
        b"not-json": 400,
        b"wrong-dtype": 400,
        b"unknown-model": 404,
        b"good": 200,
    }
    async with MqttBridge(bridge_settings(mosquitto.port), service) as bridge:
        async with asyncio.timeout(10):
            await bridge.wait_connected()
        with Requester(mosquitto.port).connect("c/err") as dev:
            for corr, (topic, payload) in cases.items():
                dev.request(topic, payload, response_topic="c/err", correlation=corr)
            replies = {r.correlation: r for r in await dev.wait_for(len(cases))}
    for corr, code in expected.items():
        reply = replies[corr]
        assert reply.props["status"] == str(code), (corr, reply.payload)
        if code != 200:
            body = json.loads(reply.payload)
            assert body["code"] == code
            assert body["error"]
    assert "mqtt.max_payload_bytes" in json.loads(replies[b"oversize"].payload)["error"]
    assert bridge.state.errors == len(cases) - 1


async def test_311_error_on_paired_topic_with_id(mosquitto: Broker, service: FakeService) -> None:
    async with MqttBridge(bridge_settings(mosquitto.port), service) as bridge:
        async with asyncio.timeout(10):
            await bridge.wait_connected()
        with Requester(mosquitto.port, v5=False).connect(f"{ROOT}/adapters/+/res/d1") as dev:
            dev.request(f"{ROOT}/adapters/sum/req/d1", b'{"id": "x9", "values": "nan-list"}')
            dev.request(f"{ROOT}/adapters/ghost/req/d1", b"raw")
            replies = {r.topic: json.loads(r.payload) for r in await dev.wait_for(2)}
    assert replies[f"{ROOT}/adapters/sum/res/d1"]["code"] == 400
    assert replies[f"{ROOT}/adapters/sum/res/d1"]["id"] == "x9"
    assert replies[f"{ROOT}/adapters/ghost/res/d1"]["code"] == 404


async def test_expired_request_gets_504_without_work(
    mosquitto: Broker, service: FakeService
) -> None:
    past = str(time.time() - 5)
    async with MqttBridge(bridge_settings(mosquitto.port), service) as bridge:
        async with asyncio.timeout(10):
            await bridge.wait_connected()
        with Requester(mosquitto.port).connect("c/exp") as dev:
            dev.request(
                SUM, b"5,5", response_topic="c/exp", correlation=b"e1", user=[("deadline", past)]
            )
            dev.request(
                SUM, b"6,6", response_topic="c/exp", correlation=b"e2", user=[("timeout_ms", "0")]
            )
            dev.request(
                SUM,
                b"7,7",
                response_topic="c/exp",
                correlation=b"e3",
                user=[("timeout_ms", "60000")],
                expiry=60,
            )
            replies = {r.correlation: r for r in await dev.wait_for(3)}
    assert replies[b"e1"].props["status"] == "504"
    assert replies[b"e2"].props["status"] == "400"  # a budget must be positive
    assert replies[b"e3"].props["status"] == "200"
    assert service.calls == {b"7,7": 1}
    assert bridge.state.expired == 1


async def test_duplicate_correlation_is_answered_once(
    mosquitto: Broker, service: FakeService
) -> None:
    async with MqttBridge(bridge_settings(mosquitto.port), service) as bridge:
        async with asyncio.timeout(10):
            await bridge.wait_connected()
        with Requester(mosquitto.port).connect("c/dup") as dev:
            for _ in range(3):
                dev.request(
                    f"{ROOT}/adapters/slow/req",
                    b"once",
                    response_topic="c/dup",
                    correlation=b"same",
                )
            dev.request(
                f"{ROOT}/adapters/slow/req",
                b"other",
                response_topic="c/dup",
                correlation=b"different",
            )
            await dev.wait_for(2)
            # A fence, not a quiet window: a duplicate would be answered when the first one
            # is (both counted by then), so before this request, sent after, is answered.
            await until_async(lambda: bridge.state.duplicates == 2, "both duplicates seen")
            dev.request(
                f"{ROOT}/adapters/slow/req", b"fence", response_topic="c/dup", correlation=b"f"
            )
            await until_async(lambda: any(r.correlation == b"f" for r in dev.snapshot()), "f")
            replies = [r for r in dev.snapshot() if r.correlation != b"f"]
    assert sorted(r.correlation or b"" for r in replies) == [b"different", b"same"]
    assert service.calls == {b"once": 1, b"other": 1, b"fence": 1}
    assert bridge.state.duplicates == 2


async def test_reused_correlation_with_new_payload_is_answered(
    mosquitto: Broker, service: FakeService
) -> None:
    """A device whose counter restarted reuses correlation data: not a redelivery."""
    async with MqttBridge(bridge_settings(mosquitto.port), service) as bridge:
        async with asyncio.timeout(10):
            await bridge.wait_connected()
        with Requester(mosquitto.port).connect("c/reuse") as dev:
            dev.request(SUM, b"1,2", response_topic="c/reuse", correlation=b"1")
            await dev.wait_for(1)
            dev.request(SUM, b"3,4", response_topic="c/reuse", correlation=b"1")
            replies = await dev.wait_for(2)
    assert [json.loads(r.payload) for r in replies] == [{"sum": 3.0}, {"sum": 7.0}]
    assert bridge.state.duplicates == 0
