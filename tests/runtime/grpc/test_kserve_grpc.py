"""tritonclient.grpc against the real gRPC listener over the ORT-backed test service.

The same models and adapters the HTTP tests use (`tests.runtime.http.service`): metadata,
config, raw and typed tensors of every datatype, statistics, and each error's status code
with the message HTTP gives for the same request.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import ml_dtypes
import numpy as np
import numpy.typing as npt
import pytest
import tritonclient.grpc as triton
from tritonclient.grpc import service_pb2 as tpb
from tritonclient.grpc import service_pb2_grpc as tstub
from tritonclient.utils import InferenceServerException

from tests.runtime.grpc.live import LiveGrpc, settings
from tests.runtime.http.models import ELEMENT_TYPES
from tests.runtime.http.server import LiveServer, build_app
from tests.runtime.http.service import OrtService
from tests.runtime.http.test_triton import sample
from wasmgate.runtime.grpc.convert import TYPED_FIELDS
from wasmgate.runtime.ops.metrics import Metrics

Array = npt.NDArray[Any]


@pytest.fixture
def stub(live: LiveGrpc) -> Iterator[tstub.GRPCInferenceServiceStub]:
    """tritonclient's own generated stub, for requests its high-level client never sends."""
    with grpc.insecure_channel(live.url) as channel:
        yield tstub.GRPCInferenceServiceStub(channel)


def raw_input(name: str, array: Array, datatype: str) -> triton.InferInput:
    tensor = triton.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor


def typed_request(model: str, inputs: dict[str, tuple[str, Array]]) -> tpb.ModelInferRequest:
    request = tpb.ModelInferRequest(model_name=model)
    for name, (datatype, array) in inputs.items():
        tensor = request.inputs.add(name=name, datatype=datatype, shape=array.shape)
        values = array.ravel().tolist()
        getattr(tensor.contents, TYPED_FIELDS[datatype]).extend(values)
    return request


def typed_output(response: tpb.ModelInferResponse, name: str) -> list[Any]:
    """An output's values as tritonclient's ``as_numpy`` reads them (raw, as Triton sends)."""
    assert len(response.raw_output_contents) == len(response.outputs)
    assert not any(o.contents.ListFields() for o in response.outputs)
    got = triton.InferResult(response).as_numpy(name)
    assert got is not None
    values: list[Any] = got.ravel().tolist()
    return values


def error_of(call: Any) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as err:
        call()
    return err.value.code(), err.value.details()


def test_health_and_metadata(client: triton.InferenceServerClient, service: OrtService) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("add")
    assert client.is_model_ready("add", "3")
    assert not client.is_model_ready("nope")
    assert not client.is_model_ready("add", "9")
    service.not_ready_models.add("add")
    assert not client.is_model_ready("add")
    service.is_ready = False
    assert not client.is_server_ready()
    meta = client.get_server_metadata(as_json=True)
    assert (meta["name"], meta["extensions"]) == ("wasmgate", ["binary_tensor_data"])
    model = client.get_model_metadata("add", as_json=True)
    assert model["versions"] == ["3"]
    assert model["inputs"] == [{"name": "INPUT0", "datatype": "FP32", "shape": ["-1", "4"]}]
    assert [o["name"] for o in model["outputs"]] == ["OUTPUT0", "OUTPUT1"]


def test_model_config_is_triton_shaped(client: triton.InferenceServerClient) -> None:
    config = client.get_model_config("add", as_json=True)["config"]
    assert config["max_batch_size"] == 8
    assert config["dynamic_batching"] == {"max_queue_delay_microseconds": "200"}
    assert config["input"] == [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": ["4"]}]
    unbatched = client.get_model_config("identity", as_json=True)["config"]
    assert "max_batch_size" not in unbatched  # proto3 default 0
    assert "dynamic_batching" not in unbatched
    by_name = {t["name"]: t for t in unbatched["input"]}
    assert by_name["in_BYTES"] == {"name": "in_BYTES", "data_type": "TYPE_STRING",
                                   "dims": ["-1", "3"]}  # fmt: skip


def test_raw_fp32_round_trip_with_id_and_selected_output(
    client: triton.InferenceServerClient,
) -> None:
    x = np.arange(8, dtype=np.float32).reshape(2, 4) / 3
    result = client.infer("add", [raw_input("INPUT0", x, "FP32")], request_id="r-42")
    response = result.get_response()
    assert (response.id, response.model_version) == ("r-42", "3")
    assert response.parameters["source"].string_param == "local"
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x + 1)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), x * 2)
    only = client.infer("add", [raw_input("INPUT0", x, "FP32")],
                        outputs=[triton.InferRequestedOutput("OUTPUT1")])  # fmt: skip
    assert [o.name for o in only.get_response().outputs] == ["OUTPUT1"]


def test_every_datatype_round_trips_raw(client: triton.InferenceServerClient) -> None:
    arrays = {name: sample(name, text_only=False) for name in ELEMENT_TYPES}
    inputs = [raw_input(f"in_{n}", a, n) for n, a in arrays.items()]
    result = client.infer("identity", inputs)
    for name, sent in arrays.items():
        got = result.as_numpy(f"out_{name}")
        assert got is not None, name
        assert got.dtype == sent.dtype, name
        np.testing.assert_array_equal(got, sent, err_msg=name)


def test_every_typed_datatype_round_trips_typed() -> None:
    # FP16 and BF16 have no typed field: an identity model over the other twelve.
    service = OrtService({n: t for n, t in ELEMENT_TYPES.items() if n in TYPED_FIELDS})
    arrays = {n: sample(n, text_only=False) for n in ELEMENT_TYPES if n in TYPED_FIELDS}
    request = typed_request("identity", {f"in_{n}": (n, a) for n, a in arrays.items()})
    with LiveGrpc(service, None) as live, grpc.insecure_channel(live.url) as channel:
        response = tstub.GRPCInferenceServiceStub(channel).ModelInfer(request)
    # A typed request gets its outputs raw, as from Triton (typed_output checks it).
    for name, sent in arrays.items():
        assert typed_output(response, f"out_{name}") == sent.ravel().tolist(), name


def test_fp16_and_bf16_travel_raw_only(
    client: triton.InferenceServerClient, stub: tstub.GRPCInferenceServiceStub
) -> None:
    x = sample("BF16", text_only=False)
    got = client.infer("bf16", [raw_input("in_BF16", x, "BF16")]).as_numpy("out_BF16")
    assert got is not None
    np.testing.assert_array_equal(got.view(np.uint16), x.view(np.uint16))
    request = tpb.ModelInferRequest(model_name="bf16")
    request.inputs.add(name="in_BF16", datatype="BF16", shape=[1, 3])
    code, message = error_of(lambda: stub.ModelInfer(request))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert message == "input 'in_BF16': BF16 has no typed contents: send raw_input_contents"
    assert got.dtype == ml_dtypes.bfloat16


def test_nan_and_inf_survive_both_encodings(
    client: triton.InferenceServerClient, stub: tstub.GRPCInferenceServiceStub
) -> None:
    x = np.array([[np.nan, np.inf, -np.inf, -0.0]], dtype=np.float32)
    raw = client.infer("add", [raw_input("INPUT0", x, "FP32")]).as_numpy("OUTPUT1")
    np.testing.assert_array_equal(raw, x * 2)
    typed = stub.ModelInfer(typed_request("add", {"INPUT0": ("FP32", x)}))
    np.testing.assert_array_equal(
        np.array(typed_output(typed, "OUTPUT1"), np.float32), x.ravel() * 2
    )


@pytest.mark.parametrize(
    ("datatype", "values", "field", "message"),
    [
        ("INT8", [127, 128, 0], "int_contents", "INT8 data cannot hold values like [127, 128, 0]"),
        ("UINT8", [1, 256, 0], "uint_contents", "UINT8 data cannot hold values like [1, 256, 0]"),
        ("INT8", [1, 2], "int_contents",
         "shape [1, 3] needs 3 elements, contents.int_contents has 2"),
        ("INT8", [1, 2, 3], "fp32_contents",
         "INT8 data goes in contents.int_contents, got ['fp32_contents']"),
    ],
)  # fmt: skip
def test_typed_values_are_checked_strictly(
    stub: tstub.GRPCInferenceServiceStub, datatype: str, values: list[Any], field: str,
    message: str,
) -> None:  # fmt: skip
    request = tpb.ModelInferRequest(model_name="identity")
    tensor = request.inputs.add(name=f"in_{datatype}", datatype=datatype, shape=[1, 3])
    getattr(tensor.contents, field).extend(values)
    code, details = error_of(lambda: stub.ModelInfer(request))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details == f"input 'in_{datatype}': {message}"


def _raw_request(datatype: str, shape: list[int], *raw: bytes) -> tpb.ModelInferRequest:
    request = tpb.ModelInferRequest(model_name="add", raw_input_contents=list(raw))
    request.inputs.add(name="INPUT0", datatype=datatype, shape=shape)
    return request


def test_malformed_raw_requests_say_what(stub: tstub.GRPCInferenceServiceStub) -> None:
    x = np.ones((1, 4), np.float32).tobytes()
    cases = {
        "raw_input_contents has 2 entries for 1 inputs": _raw_request("FP32", [1, 4], x, x),
        "FP32 shape [1, 4] needs 16 bytes, got 15": _raw_request("FP32", [1, 4], x[:-1]),
        "unknown datatype 'FP8'": _raw_request("FP8", [1, 4], x),
        "'shape' must be a list of non-negative integers": _raw_request("FP32", [-1, 4], x),
        "is out of range (at most 4294967296 elements)": _raw_request("FP32", [2**40, 4], x),
    }
    for expected, request in cases.items():
        code, details = error_of(lambda r=request: stub.ModelInfer(r))
        assert code == grpc.StatusCode.INVALID_ARGUMENT, expected
        assert details.startswith("input 'INPUT0': ") or "raw_input" in details, details
        assert expected in details
    assert stub.ServerLive(tpb.ServerLiveRequest()).live  # and it serves on


def _http_error(server: LiveServer, model: str, x: Array, datatype: str) -> str:
    reply = server.request(
        "POST", f"/v2/models/{model}/infer",
        body=(b'{"inputs": [{"name": "INPUT0", "datatype": "%s", "shape": %s, "data": %s}]}'
              % (datatype.encode(), str(list(x.shape)).encode(), str(x.ravel().tolist()).encode())),
    )  # fmt: skip
    assert reply.status == 400
    message: str = json.loads(reply.body)["error"]
    return message


@pytest.mark.parametrize(
    ("x", "datatype"),
    [(np.zeros((2, 5), np.float32), "FP32"), (np.zeros((2, 4), np.float64), "FP64")],
)
def test_wrong_shape_or_datatype_has_the_http_message(
    client: triton.InferenceServerClient, service: OrtService, x: Array, datatype: str
) -> None:
    with LiveServer(build_app(service, Metrics())) as http:
        expected = _http_error(http, "add", x, datatype)
    with pytest.raises(InferenceServerException) as err:
        client.infer("add", [raw_input("INPUT0", x, datatype)])
    assert err.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert err.value.message() == expected
    assert "input 'INPUT0': expected" in expected


def test_unknown_model_and_version_are_not_found(client: triton.InferenceServerClient) -> None:
    calls: list[Callable[[], object]] = [
        lambda: client.get_model_metadata("nope"),
        lambda: client.get_model_config("add", "9"),
        lambda: client.infer("nope", [raw_input("x", np.ones(1, np.float32), "FP32")]),
    ]
    for call in calls:
        with pytest.raises(InferenceServerException) as err:
            call()
        assert err.value.status() == "StatusCode.NOT_FOUND"


@pytest.mark.parametrize(
    ("adapter", "code", "message"),
    [
        ("busy", "UNAVAILABLE", "busy: 4 in flight, queue of 8 full"),
        ("fail", "INTERNAL", "fail: guest trapped (unreachable)"),
        ("crash", "INTERNAL", "internal server error"),
        ("toolarge", "RESOURCE_EXHAUSTED", "toolarge: payload over the manifest's max_input_bytes"),
    ],
)
def test_adapter_errors_map_to_the_table(
    client: triton.InferenceServerClient, adapter: str, code: str, message: str
) -> None:
    payload = np.array([b"p"], dtype=object)
    with pytest.raises(InferenceServerException) as err:
        client.infer(adapter, [raw_input("payload", payload, "BYTES")])
    assert err.value.status() == f"StatusCode.{code}"
    assert err.value.message() == message  # "secret internal detail" never leaves


def test_adapter_is_a_bytes_model_with_grpc_meta_and_key(
    client: triton.InferenceServerClient, service: OrtService
) -> None:
    payloads = np.array([b"\x01\x02", b"second"], dtype=object)
    result = client.infer("echo", [raw_input("payload", payloads, "BYTES")],
                          headers={"x-wasmgate-canary-key": "device-7"})  # fmt: skip
    np.testing.assert_array_equal(result.as_numpy("answer"), payloads)
    assert {r.meta["transport"] for r in service.adapter_requests} == {"grpc"}
    assert {r.key for r in service.adapter_requests} == {"device-7"}


def test_grpc_deadline_is_the_service_deadline(
    client: triton.InferenceServerClient, service: OrtService
) -> None:
    before = time.monotonic()
    client.infer("echo", [raw_input("payload", np.array([b"x"], dtype=object), "BYTES")],
                 client_timeout=30.0)  # fmt: skip
    (request,) = service.adapter_requests
    assert request.deadline is not None
    # gRPC core reads its clock once per batch of work: on a loaded machine its "now" is
    # up to ~0.1 s stale, so time_remaining() can exceed what our clock says is left
    # (seen: 30.1 s). The deadline still comes from the client's 30 s, not a default.
    assert before + 25 < request.deadline <= time.monotonic() + 30 + 1


def test_deadlines_give_deadline_exceeded(client: triton.InferenceServerClient) -> None:
    payload = [raw_input("payload", np.array([b"x"], dtype=object), "BYTES")]
    for kwargs in ({"client_timeout": 0.3}, {"timeout": 300_000}):  # gRPC's, then V2's (us)
        with pytest.raises(InferenceServerException) as err:
            client.infer("slow", payload, **kwargs)
        assert err.value.status() == "StatusCode.DEADLINE_EXCEEDED", kwargs
    assert client.is_server_live()


def test_inference_statistics(client: triton.InferenceServerClient) -> None:
    x = np.ones((1, 4), dtype=np.float32)
    for _ in range(2):
        client.infer("add", [raw_input("INPUT0", x, "FP32")])
    with pytest.raises(InferenceServerException):
        client.infer("add", [raw_input("INPUT0", np.ones((1, 5), np.float32), "FP32")])
    (entry,) = client.get_inference_statistics("add", as_json=True)["model_stats"]
    assert (entry["name"], entry["version"], entry["inference_count"]) == ("add", "3", "2")
    assert entry["inference_stats"]["success"]["count"] == "2"
    assert entry["inference_stats"]["fail"]["count"] == "1"
    assert entry["inference_stats"]["compute_infer"]["ns"] == str(2 * 300_000)
    every = client.get_inference_statistics(as_json=True)["model_stats"]
    assert {e["name"] for e in every} >= {"add", "identity", "echo"}


def test_message_over_the_limit_is_refused_and_the_listener_serves_on(
    service: OrtService,
) -> None:
    with LiveGrpc(service, None, settings(max_message_bytes=4096)) as live:
        client = triton.InferenceServerClient(live.url)
        try:
            big = np.zeros((2048, 4), np.float32)  # 32 KiB
            with pytest.raises(InferenceServerException) as err:
                client.infer("add", [raw_input("INPUT0", big, "FP32")])
            assert err.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
            assert "larger than max" in err.value.message()
            small = np.ones((1, 4), np.float32)
            out = client.infer("add", [raw_input("INPUT0", small, "FP32")]).as_numpy("OUTPUT0")
            np.testing.assert_array_equal(out, small + 1)
        finally:
            client.close()


def _failing_slow_call(client: triton.InferenceServerClient, payload: list[Any]) -> None:
    with pytest.raises(InferenceServerException):
        client.infer("slow", payload, timeout=2_000_000)  # 2 s


def test_rpcs_over_the_listener_cap_are_resource_exhausted(service: OrtService) -> None:
    payload = [raw_input("payload", np.array([b"x"], dtype=object), "BYTES")]
    with LiveGrpc(service, None, settings(max_concurrent_rpcs=1)) as live:
        client = triton.InferenceServerClient(live.url)
        try:
            holder = threading.Thread(target=_failing_slow_call, args=(client, payload))
            holder.start()
            end = time.monotonic() + 10
            while not service.adapter_requests:  # the slow call holds the one slot
                assert time.monotonic() < end
                time.sleep(0.01)
            with pytest.raises(InferenceServerException) as err:
                client.infer("echo", payload)
            holder.join()
            assert err.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
            assert client.infer("echo", payload).as_numpy("answer") is not None
        finally:
            client.close()
