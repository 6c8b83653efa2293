"""Error mapping: every daemon error reaches the client once, with its status and a V2 body."""

from __future__ import annotations

import json

import pytest

from tests.runtime.http.server import MAX_BODY, LiveServer, Reply
from tests.runtime.http.service import OrtService
from wasmgate.runtime.protocol.error_table import INTERNAL_MESSAGE

ADD_JSON = {
    "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]
}


def error_of(reply: Reply) -> str:
    assert reply.headers["Content-Type"].startswith("application/json")
    body = json.loads(reply.body)
    assert set(body) == {"error"}
    message: str = body["error"]
    return message


def infer(server: LiveServer, model: str, doc: object, **headers: str) -> Reply:
    return server.request("POST", f"/v2/models/{model}/infer", json.dumps(doc).encode(), headers)


@pytest.mark.parametrize(
    ("adapter", "status", "message"),
    [
        ("busy", 429, "busy: 4 in flight"),
        ("fail", 500, "fail: guest trapped"),
        ("toolarge", 413, "max_input_bytes"),
        ("nope", 404, "Request for unknown model: 'nope' is not found"),
    ],
)
def test_adapter_errors_map_to_status(
    server: LiveServer, adapter: str, status: int, message: str
) -> None:
    reply = server.request("POST", f"/v1/adapters/{adapter}", b"payload")
    assert reply.status == status
    assert message in error_of(reply)


def test_deadline_gives_504(server: LiveServer) -> None:
    reply = server.request("POST", "/v1/adapters/slow", b"x", {"X-Wasmgate-Timeout-Ms": "50"})
    assert reply.status == 504
    assert "deadline" in error_of(reply)


def test_v2_timeout_parameter_is_a_deadline(server: LiveServer) -> None:
    doc = {
        "parameters": {"timeout": 50_000},
        "inputs": [{"name": "payload", "datatype": "BYTES", "shape": [1], "data": ["x"]}],
    }
    reply = infer(server, "slow", doc)
    assert reply.status == 504


def test_unexpected_exception_is_generic_500(
    server: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    reply = server.request("POST", "/v1/adapters/crash", b"x")
    assert reply.status == 500
    assert error_of(reply) == INTERNAL_MESSAGE
    assert b"secret" not in reply.body
    assert any("secret internal detail" in (r.exc_text or "") for r in caplog.records)


def test_not_ready_daemon_and_model_give_503(server: LiveServer, service: OrtService) -> None:
    assert server.request("GET", "/v2/health/ready").status == 200
    service.is_ready = False
    reply = server.request("GET", "/v2/health/ready")
    assert reply.status == 503
    assert "not ready" in error_of(reply)
    assert server.request("GET", "/v2/health/live").status == 200
    service.not_ready_models.add("add")
    assert server.request("GET", "/v2/models/add/ready").status == 503


def test_body_over_limit_gives_413(server: LiveServer) -> None:
    """The one line names the setting to raise, with its value."""
    for path in ("/v1/adapters/echo", "/v2/models/add/infer"):
        reply = server.request("POST", path, b"x" * (MAX_BODY + 1))
        assert reply.status == 413
        assert error_of(reply) == f"request body exceeds http.max_body_bytes ({MAX_BODY} bytes)"


def test_unknown_route_and_method_get_json_errors(server: LiveServer) -> None:
    assert server.request("GET", "/v2/nothing/here").status == 404
    reply = server.request("GET", "/v2/models/add/infer")
    assert reply.status == 405
    error_of(reply)


@pytest.mark.parametrize(
    ("body", "headers", "message"),
    [
        (b"{not json", {}, "inference request is not valid JSON"),
        (b"[1, 2]", {}, "must be a JSON object"),
        (b'{"inputs": 3}', {}, "'inputs' must be a list of objects"),
        (b'{"inputs": []}', {}, "model 'add' needs input 'INPUT0'"),
        (b"{}", {"Inference-Header-Content-Length": "x"}, "must be an integer"),
        (b"{}", {"Inference-Header-Content-Length": "99"}, "outside the body"),
    ],
)
def test_malformed_requests_say_what(
    server: LiveServer, body: bytes, headers: dict[str, str], message: str
) -> None:
    reply = server.request("POST", "/v2/models/add/infer", body, headers)
    assert reply.status == 400
    assert message in error_of(reply)


@pytest.mark.parametrize(
    ("tensor", "message"),
    [
        (
            {"datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3]},
            "needs 4 elements, 'data' has 3",
        ),
        ({"datatype": "FP99", "shape": [1, 4], "data": [1, 2, 3, 4]}, "unknown datatype 'FP99'"),
        ({"datatype": "FP32", "shape": [1, -4], "data": []}, "non-negative integers"),
        ({"datatype": "FP32", "shape": [1, 4], "data": ["a", 1, 2, 3]}, "cannot hold values"),
        ({"datatype": "FP32", "shape": [1, 4]}, "needs 'data' or parameters.binary_data_size"),
        (
            {"datatype": "FP32", "shape": [1, 4], "parameters": {"binary_data_size": 16}},
            "binary_data_size 16 does not fit the 0 binary bytes left",
        ),
    ],
)
def test_bad_tensors_name_the_input(
    server: LiveServer, tensor: dict[str, object], message: str
) -> None:
    reply = infer(server, "add", {"inputs": [{"name": "INPUT0", **tensor}]})
    assert reply.status == 400
    text = error_of(reply)
    assert "input 'INPUT0'" in text
    assert message in text


def test_unknown_output_and_extra_keys(server: LiveServer) -> None:
    reply = infer(server, "add", {**ADD_JSON, "outputs": [{"name": "OUTPUT9"}]})
    assert reply.status == 400
    assert "has no output 'OUTPUT9'" in error_of(reply)
    # the kserve SDK sends model_name in the body: tolerated, like unknown parameters
    ok = infer(server, "add", {**ADD_JSON, "model_name": "add", "parameters": {"custom": "x"}})
    assert ok.status == 200, ok.body


def test_binary_bytes_not_claimed_are_refused(server: LiveServer) -> None:
    head = json.dumps(ADD_JSON).encode()
    reply = server.request(
        "POST",
        "/v2/models/add/infer",
        head + b"\x00" * 8,
        {"Inference-Header-Content-Length": str(len(head))},
    )
    assert reply.status == 400
    assert "8 binary bytes after the JSON header" in error_of(reply)
