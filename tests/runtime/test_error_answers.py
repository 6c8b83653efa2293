"""One error, one answer: the HTTP data plane and MQTT answer every error the same way.

A service that raises the error its adapter or model is named after sits behind the real
HTTP app and the real MQTT bridge (real mosquitto); the transports are under test.
"""

from __future__ import annotations

import asyncio
import json

from tests.fixtures.mosquitto import Broker
from tests.runtime.http.server import LiveServer, build_app
from tests.runtime.mqtt.conftest import ROOT, bridge_settings
from tests.runtime.mqtt.requester import Requester
from tests.runtime.protocol.test_error_table import DAEMON_ERRORS
from wasmgate.runtime import errors
from wasmgate.runtime.mqtt import MqttBridge
from wasmgate.runtime.ops.metrics import Metrics
from wasmgate.runtime.protocol.error_table import INTERNAL_MESSAGE, status_of
from wasmgate.runtime.served.api import (
    AdapterAnswer,
    AdapterRequest,
    ModelAnswer,
    ModelInfo,
    ModelRequest,
)
from wasmgate.sandbox.models import TensorSpec

SECRET = "/var/lib/wasmgate/secret.key"
BUG = "RuntimeError"
FAILURES: dict[str, Exception] = {
    cls.__name__: cls(f"{cls.__name__} at {SECRET}") for cls in DAEMON_ERRORS
}
FAILURES[BUG] = RuntimeError(f"bug at {SECRET}")


class RaisingService:
    """`ServiceAPI` whose every adapter and model fails with the error it is named after."""

    ready = True

    async def run_adapter(self, req: AdapterRequest) -> AdapterAnswer:
        raise FAILURES[req.adapter]

    async def infer_model(self, req: ModelRequest) -> ModelAnswer:
        raise FAILURES[req.model]

    def model_info(self, name: str, version: str | None = None) -> ModelInfo:
        if name not in FAILURES:
            raise errors.NotFound(name)
        x = (TensorSpec("x", "FP32", (-1, 2)),)
        return ModelInfo(name, 1, "onnxruntime_onnx", x, x)

    def list_models(self) -> list[ModelInfo]:
        return [self.model_info(name) for name in FAILURES]

    def adapter_names(self) -> list[str]:
        return list(FAILURES)


def _http_answers() -> dict[str, tuple[int, str]]:
    answers = {}
    doc = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}]}
    with LiveServer(build_app(RaisingService(), Metrics())) as server:
        for name in FAILURES:
            raw = server.request("POST", f"/v1/adapters/{name}", b"payload")
            model = server.request("POST", f"/v2/models/{name}/infer", json.dumps(doc).encode())
            assert raw.status == model.status
            assert raw.headers["Content-Type"] == "application/json"
            answers[name] = (raw.status, json.loads(raw.body)["error"])
            assert json.loads(model.body)["error"] == answers[name][1]
    return answers


async def _mqtt_answers(port: int) -> dict[str, tuple[int, str]]:
    settings = bridge_settings(port, busy_retry_s=0)
    async with MqttBridge(settings, RaisingService()) as bridge:
        async with asyncio.timeout(10):
            await bridge.wait_connected()
        with Requester(port).connect("c/errors") as dev:
            for name in FAILURES:
                topic = f"{ROOT}/adapters/{name}/req"
                dev.request(topic, b"payload", response_topic="c/errors", correlation=name.encode())
            replies = await dev.wait_for(len(FAILURES))
    answers = {}
    for reply in replies:
        assert reply.correlation is not None
        body = json.loads(reply.payload)
        assert reply.props["status"] == str(body["code"])
        answers[reply.correlation.decode()] = (body["code"], body["error"])
    return answers


async def test_http_and_mqtt_answer_every_error_alike(mosquitto: Broker) -> None:
    http = await asyncio.to_thread(_http_answers)
    mqtt = await _mqtt_answers(mosquitto.port)
    assert mqtt == http
    for name, (status, message) in http.items():
        answer = status_of(FAILURES[name])
        assert status == answer.status, name
        if answer.internal:
            assert message == INTERNAL_MESSAGE, name
        else:
            assert message == str(FAILURES[name]), name
    assert http[BUG] == (500, INTERNAL_MESSAGE)
    assert not any(SECRET in m for n, (_, m) in http.items() if status_of(FAILURES[n]).internal)
