"""The transport-neutral V2 codec on its own: strictness and the exact error messages."""

from __future__ import annotations

import json
import struct
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from wasmgate.runtime.errors import BadRequest
from wasmgate.runtime.protocol import codec as v2


def one(tensor: dict[str, Any], blob: bytes = b"") -> np.ndarray[Any, Any]:
    head = json.dumps({"inputs": [{"name": "x", **tensor}]}).encode()
    request = v2.parse_request(head + blob, len(head) if blob else None)
    return request.inputs["x"]


def refused(tensor: dict[str, Any], blob: bytes = b"") -> str:
    with pytest.raises(BadRequest) as err:
        one(tensor, blob)
    return str(err.value)


def test_nested_and_flat_json_are_the_same_tensor() -> None:
    nested = one({"datatype": "INT32", "shape": [2, 2], "data": [[1, 2], [3, 4]]})
    flat = one({"datatype": "INT32", "shape": [2, 2], "data": [1, 2, 3, 4]})
    np.testing.assert_array_equal(nested, flat)
    assert nested.dtype == np.int32


def test_json_integers_are_exact_and_never_wrap_or_truncate() -> None:
    big = one({"datatype": "UINT64", "shape": [2], "data": [0, 2**64 - 1]})
    assert big.tolist() == [0, 2**64 - 1]
    assert "INT8 data cannot hold values like [200]" in refused(
        {"datatype": "INT8", "shape": [1], "data": [200]}
    )
    assert "cannot hold" in refused({"datatype": "INT32", "shape": [1], "data": [1.5]})
    assert "cannot hold" in refused({"datatype": "UINT64", "shape": [2], "data": [-1, 2**64 - 1]})


def test_json_bool_accepts_true_false_and_0_1_only() -> None:
    assert one({"datatype": "BOOL", "shape": [2], "data": [True, 0]}).tolist() == [True, False]
    assert "cannot hold" in refused({"datatype": "BOOL", "shape": [1], "data": [2]})


def test_empty_tensor() -> None:
    empty = one({"datatype": "FP32", "shape": [0, 4], "data": []})
    assert empty.shape == (0, 4)


def test_binary_bool_bytes_must_be_0_or_1() -> None:
    assert "BOOL bytes must be 0 or 1" in refused(
        {"datatype": "BOOL", "shape": [2], "parameters": {"binary_data_size": 2}}, b"\x01\x02"
    )


def test_binary_size_must_match_shape() -> None:
    message = refused(
        {"datatype": "FP32", "shape": [2], "parameters": {"binary_data_size": 4}}, b"\x00" * 4
    )
    assert "input 'x': FP32 shape [2] needs 8 bytes, got 4" in message


@pytest.mark.parametrize(
    ("blob", "message"),
    [
        (b"\x05\x00", "ends inside a 4-byte length prefix"),
        (struct.pack("<I", 9) + b"abc", "BYTES element 0 claims 9 bytes, 3 left"),
        (struct.pack("<I", 1) + b"a", "shape [2] needs 2 elements, the binary data has 1"),
    ],
)
def test_binary_bytes_framing_errors(blob: bytes, message: str) -> None:
    tensor = {"datatype": "BYTES", "shape": [2], "parameters": {"binary_data_size": len(blob)}}
    assert message in refused(tensor, blob)


def test_bf16_is_binary_only_and_decodes_to_ml_dtypes() -> None:
    assert "BF16 travels as binary data only" in refused(
        {"datatype": "BF16", "shape": [1], "data": [1.0]}
    )
    raw = np.array([1.5, -2], dtype=ml_dtypes.bfloat16).tobytes()
    x = one({"datatype": "BF16", "shape": [2], "parameters": {"binary_data_size": 4}}, raw)
    assert x.dtype == ml_dtypes.bfloat16
    assert x.astype(np.float32).tolist() == [1.5, -2.0]


def test_request_level_checks() -> None:
    head = b'{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1]}, '
    dup = head + b'{"name": "x", "datatype": "FP32", "shape": [1], "data": [1]}]}'
    with pytest.raises(BadRequest, match="input 'x' appears twice"):
        v2.parse_request(dup)
    classify = b'{"inputs": [], "outputs": [{"name": "y", "parameters": {"classification": 3}}]}'
    with pytest.raises(BadRequest, match="classification extension is not supported"):
        v2.parse_request(classify)
    with pytest.raises(BadRequest, match="'id' must be a string"):
        v2.parse_request(b'{"id": 5, "inputs": []}')


def test_encode_response_json_only_when_binary_not_allowed() -> None:
    request = v2.parse_request(
        b'{"id": "q", "inputs": [], "parameters": {"binary_data_output": true}}'
    )
    outputs = {"y": np.arange(3, dtype=np.int16), "s": np.array(["é", b"b"], dtype=object)}
    binary = v2.encode_response("m", None, outputs, request)
    assert binary.content_type == v2.BINARY_CONTENT_TYPE
    assert binary.header_length is not None
    head = json.loads(binary.body[: binary.header_length])
    assert "model_version" not in head
    assert head["id"] == "q"
    assert len(binary.body) - binary.header_length == 6 + (4 + 2) + (4 + 1)
    text = v2.encode_response("m", "2", outputs, request, allow_binary=False)
    assert text.header_length is None
    doc = json.loads(text.body)
    assert doc["outputs"][1]["data"] == ["é", "b"]
    assert doc["model_version"] == "2"


def test_non_utf8_bytes_cannot_go_out_as_json() -> None:
    outputs = {"y": np.array([b"\xff"], dtype=object)}
    with pytest.raises(BadRequest, match="output 'y' holds bytes that are not UTF-8"):
        v2.encode_response("m", None, outputs)
