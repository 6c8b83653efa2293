"""The raw adapter endpoint: payload in, adapter output out, with source/version/timing headers."""

from __future__ import annotations

import json
import re

from tests.runtime.http.server import LiveServer
from tests.runtime.http.service import OrtService


def test_raw_payload_round_trip_with_headers(server: LiveServer, service: OrtService) -> None:
    payload = bytes(range(256))
    reply = server.request(
        "POST", "/v1/adapters/echo", payload, {"Content-Type": "application/x-sensor"}
    )
    assert reply.status == 200
    assert reply.body == payload
    assert reply.headers["Content-Type"] == "application/x-sensor"
    assert reply.headers["X-Wasmgate-Source"] == "local"
    assert reply.headers["X-Wasmgate-Version"] == "2"
    timing = reply.headers["Server-Timing"]
    stages = dict(re.findall(r"(\w+);dur=([\d.]+)", timing))
    assert set(stages) == {"queue", "sandbox", "inference", "total"}
    assert float(stages["inference"]) == 0.3  # 0.0003 s from the service, in ms
    (request,) = service.adapter_requests
    assert request.content_type == "application/x-sensor"
    assert request.meta == {"transport": "http", "client": "127.0.0.1"}
    assert request.deadline is None


def test_no_content_type_reaches_the_adapter_as_none(
    server: LiveServer, service: OrtService
) -> None:
    reply = server.request("POST", "/v1/adapters/echo", b"")
    assert reply.status == 200
    assert reply.body == b""
    assert service.adapter_requests[0].content_type is None


def test_cloud_answer_says_so(server: LiveServer) -> None:
    reply = server.request("POST", "/v1/adapters/cloud", b"{}", {"Content-Type": "text/plain"})
    assert reply.status == 200
    assert reply.headers["X-Wasmgate-Source"] == "cloud"
    assert reply.headers["X-Wasmgate-Fallback-Reason"] == "low confidence"
    assert "fallback;dur=4.000" in reply.headers["Server-Timing"]


def test_adapter_via_v2_json_with_content_type(server: LiveServer, service: OrtService) -> None:
    doc = {
        "id": "abc",
        "inputs": [
            {
                "name": "payload",
                "datatype": "BYTES",
                "shape": [1],
                "parameters": {"content_type": "text/csv"},
                "data": ["1,2,3"],
            }
        ],
    }
    reply = server.request("POST", "/v2/models/cloud/infer", json.dumps(doc).encode())
    assert reply.status == 200
    body = json.loads(reply.body)
    assert body["id"] == "abc"
    assert body["model_name"] == "cloud"
    assert body["parameters"] == {"source": "cloud"}
    assert body["outputs"] == [
        {"name": "answer", "datatype": "BYTES", "shape": [1], "data": ["1,2,3"]}
    ]
    assert service.adapter_requests[0].content_type == "text/csv"
    assert reply.headers["X-Wasmgate-Source"] == "cloud"


def test_adapter_v2_batch_of_payloads_keeps_shape(server: LiveServer) -> None:
    doc = {
        "inputs": [{"name": "payload", "datatype": "BYTES", "shape": [3], "data": ["a", "b", "c"]}],
        "outputs": [{"name": "answer", "parameters": {"binary_data": False}}],
    }
    reply = server.request("POST", "/v2/models/echo/infer", json.dumps(doc).encode())
    assert reply.status == 200, reply.body
    out = json.loads(reply.body)["outputs"][0]
    assert out["shape"] == [3]
    assert out["data"] == ["a", "b", "c"]


def test_adapter_v2_refuses_non_bytes_input(server: LiveServer) -> None:
    doc = {"inputs": [{"name": "payload", "datatype": "FP32", "shape": [1], "data": [1.0]}]}
    reply = server.request("POST", "/v2/models/echo/infer", json.dumps(doc).encode())
    assert reply.status == 400
    assert "expected datatype BYTES, got FP32" in json.loads(reply.body)["error"]
