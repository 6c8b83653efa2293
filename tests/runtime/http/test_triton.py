"""tritonclient.http against the real aiohttp app: metadata, config, JSON and binary inference."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import ml_dtypes
import numpy as np
import numpy.typing as npt
import pytest
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

from tests.runtime.http.models import ELEMENT_TYPES
from tests.runtime.http.server import LiveServer
from tests.runtime.http.service import OrtService

Array = npt.NDArray[Any]
MODES = [(False, False), (False, True), (True, False), (True, True)]  # (binary in, binary out)


@pytest.fixture
def client(server: LiveServer) -> Iterator[triton.InferenceServerClient]:
    client = triton.InferenceServerClient(server.url, network_timeout=30.0)
    try:
        yield client
    finally:
        client.close()


def sample(datatype: str, text_only: bool) -> Array:
    """A [2, 3] array with the datatype's extremes (BYTES: UTF-8, as a model's string tensor
    holds; with a NUL byte unless text_only)."""
    if datatype == "BOOL":
        return np.array([[True, False, True], [False, False, True]])
    if datatype == "BYTES":
        last = "grüße".encode() if text_only else b"\x00raw \xc2\xb5"
        return np.array([[b"a", b"", b"hello"], [b"x" * 300, "µs".encode(), last]], dtype=object)
    if datatype == "BF16":
        return np.array([[1.5, -2.0, 0.0], [3.25, 1e-3, -7.0]], dtype=ml_dtypes.bfloat16)
    dtype = triton.triton_to_np_dtype(datatype)
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        return np.array([[info.min, 0, info.max], [1, 2, 3]], dtype=dtype)
    return np.array([[0.5, -1.25, 3e4], [np.pi, 0.0, -0.0]], dtype=dtype)


def as_input(name: str, array: Array, datatype: str, binary: bool) -> triton.InferInput:
    tensor = triton.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array, binary_data=binary)
    return tensor


def test_server_and_model_metadata(client: triton.InferenceServerClient) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("add")
    meta = client.get_server_metadata()
    assert meta["name"] == "wasmgate"
    assert meta["extensions"] == ["binary_tensor_data"]
    model = client.get_model_metadata("add")
    assert model["name"] == "add"
    assert model["versions"] == ["3"]
    assert model["inputs"] == [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, 4]}]
    assert [o["name"] for o in model["outputs"]] == ["OUTPUT0", "OUTPUT1"]


def test_model_config_is_triton_shaped(client: triton.InferenceServerClient) -> None:
    config = client.get_model_config("add")
    assert config["max_batch_size"] == 8
    assert config["dynamic_batching"] == {"max_queue_delay_microseconds": 200}
    assert config["input"] == [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]}]
    unbatched = client.get_model_config("identity")
    assert unbatched["max_batch_size"] == 0
    assert "dynamic_batching" not in unbatched
    by_name = {t["name"]: t for t in unbatched["input"]}
    assert by_name["in_BYTES"] == {"name": "in_BYTES", "data_type": "TYPE_STRING", "dims": [-1, 3]}


@pytest.mark.parametrize(("binary_in", "binary_out"), MODES)
def test_add_round_trip(
    client: triton.InferenceServerClient, binary_in: bool, binary_out: bool
) -> None:
    x = np.arange(8, dtype=np.float32).reshape(2, 4) / 3
    outputs = [
        triton.InferRequestedOutput(n, binary_data=binary_out) for n in ("OUTPUT0", "OUTPUT1")
    ]
    result = client.infer(
        "add", [as_input("INPUT0", x, "FP32", binary_in)], outputs=outputs, request_id="r-42"
    )
    assert result.get_response()["id"] == "r-42"
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x + 1)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), x * 2)


def test_default_request_is_binary_both_ways(server: LiveServer) -> None:
    client = triton.InferenceServerClient(server.url)
    try:
        x = np.ones((3, 4), dtype=np.float32)
        result = client.infer("add", [as_input("INPUT0", x, "FP32", True)])
        response = result.get_response()
        assert all("binary_data_size" in o["parameters"] for o in response["outputs"])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x + 1)
    finally:
        client.close()


def test_selected_output_only(client: triton.InferenceServerClient) -> None:
    x = np.ones((1, 4), dtype=np.float32)
    result = client.infer(
        "add",
        [as_input("INPUT0", x, "FP32", True)],
        outputs=[triton.InferRequestedOutput("OUTPUT1")],
    )
    assert [o["name"] for o in result.get_response()["outputs"]] == ["OUTPUT1"]
    assert result.as_numpy("OUTPUT0") is None


@pytest.mark.parametrize(("binary_in", "binary_out"), MODES)
def test_every_datatype_round_trips(
    client: triton.InferenceServerClient, binary_in: bool, binary_out: bool
) -> None:
    text_only = not (binary_in and binary_out)
    arrays = {name: sample(name, text_only) for name in ELEMENT_TYPES}
    inputs = [as_input(f"in_{n}", a, n, binary_in) for n, a in arrays.items()]
    outputs = [triton.InferRequestedOutput(f"out_{n}", binary_data=binary_out) for n in arrays]
    result = client.infer("identity", inputs, outputs=outputs)
    for name, sent in arrays.items():
        got = result.as_numpy(f"out_{name}")
        assert got is not None, name
        want = sent
        if name == "BYTES" and not binary_out:  # JSON BYTES come back as text
            want = np.vectorize(lambda b: b.decode(), otypes=[object])(sent)
        assert got.dtype == want.dtype, name
        np.testing.assert_array_equal(got, want, err_msg=name)


def test_bf16_binary_round_trip(client: triton.InferenceServerClient) -> None:
    x = sample("BF16", text_only=False)
    result = client.infer("bf16", [as_input("in_BF16", x, "BF16", True)])
    got = result.as_numpy("out_BF16")
    assert got is not None
    assert got.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(got.view(np.uint16), x.view(np.uint16))


def test_bf16_output_as_json_is_refused(client: triton.InferenceServerClient) -> None:
    x = sample("BF16", text_only=False)
    with pytest.raises(InferenceServerException, match="BF16") as err:
        client.infer(
            "bf16",
            [as_input("in_BF16", x, "BF16", True)],
            outputs=[triton.InferRequestedOutput("out_BF16", binary_data=False)],
        )
    assert err.value.status() == "400"


def test_adapter_is_a_bytes_model(
    client: triton.InferenceServerClient, service: OrtService
) -> None:
    meta = client.get_model_metadata("echo")
    assert meta["inputs"] == [{"name": "payload", "datatype": "BYTES", "shape": [-1]}]
    payloads = np.array([b"\x01\x02", b"second"], dtype=object)
    result = client.infer("echo", [as_input("payload", payloads, "BYTES", True)])
    np.testing.assert_array_equal(result.as_numpy("answer"), payloads)
    assert sorted(r.payload for r in service.adapter_requests) == [b"\x01\x02", b"second"]
    assert all(r.meta["transport"] == "http" for r in service.adapter_requests)


def test_versioned_paths(client: triton.InferenceServerClient) -> None:
    x = np.zeros((1, 4), dtype=np.float32)
    result = client.infer("add", [as_input("INPUT0", x, "FP32", True)], model_version="3")
    assert result.get_response()["model_version"] == "3"
    assert client.is_model_ready("add", model_version="3")
    with pytest.raises(InferenceServerException) as err:
        client.get_model_metadata("add", model_version="9")
    assert err.value.status() == "404"
    assert err.value.message().startswith("Request for unknown model: 'add' version 9 is not")


def test_wrong_shape_names_input_and_both_shapes(client: triton.InferenceServerClient) -> None:
    x = np.zeros((2, 5), dtype=np.float32)
    with pytest.raises(InferenceServerException) as err:
        client.infer("add", [as_input("INPUT0", x, "FP32", True)])
    assert err.value.status() == "400"
    assert "input 'INPUT0': expected shape [-1, 4] (-1 = any), got [2, 5]" in str(err.value)


def test_wrong_datatype_names_both(client: triton.InferenceServerClient) -> None:
    x = np.zeros((2, 4), dtype=np.float64)
    with pytest.raises(InferenceServerException) as err:
        client.infer("add", [as_input("INPUT0", x, "FP64", False)])
    assert "input 'INPUT0': expected datatype FP32, got FP64" in str(err.value)


def test_unknown_model_is_404(client: triton.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as err:
        client.get_model_metadata("nope")
    assert err.value.status() == "404"
    assert not client.is_model_ready("nope")


def test_large_tensors_round_trip(client: triton.InferenceServerClient) -> None:
    # 320 KB in, 640 KB out: above OFFLOAD_BYTES, so decoding and encoding run off the loop
    x = np.random.default_rng(1).normal(size=(20_000, 4)).astype(np.float32)
    result = client.infer("add", [as_input("INPUT0", x, "FP32", True)])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x + 1)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), x * 2)


def test_inference_statistics(client: triton.InferenceServerClient) -> None:
    x = np.ones((1, 4), dtype=np.float32)
    for _ in range(2):
        client.infer("add", [as_input("INPUT0", x, "FP32", True)])
    with pytest.raises(InferenceServerException):
        client.infer("add", [as_input("INPUT0", np.ones((1, 5), np.float32), "FP32", True)])
    (entry,) = client.get_inference_statistics("add")["model_stats"]
    assert (entry["name"], entry["version"], entry["inference_count"]) == ("add", "3", 2)
    assert entry["inference_stats"]["success"]["count"] == 2
    assert entry["inference_stats"]["success"]["ns"] > 0
    assert entry["inference_stats"]["fail"]["count"] == 1
    assert entry["inference_stats"]["compute_infer"]["ns"] == 2 * 300_000  # 0.3 ms each
    every = client.get_inference_statistics()["model_stats"]
    assert {e["name"] for e in every} >= {"add", "identity", "echo"}
    assert "statistics" not in client.get_server_metadata()["extensions"]
