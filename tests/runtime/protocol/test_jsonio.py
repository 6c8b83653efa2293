"""orjson on the request path keeps the stdlib's meaning for every input it treats apart."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from wasmgate.runtime.protocol import jsonio
from wasmgate.runtime.protocol.codec import encode_response, parse_request

ODD = [
    b'{"x": [NaN, Infinity, -Infinity]}',
    b'{"x": 1e400}',
    b'{"x": "\\ud800"}',
    '{"x": "utf-16"}'.encode("utf-16"),
    b"[" * 1100 + b"]" * 1100,
]


@pytest.mark.parametrize("text", ODD)
def test_loads_reads_what_the_stdlib_reads(text: bytes) -> None:
    try:
        want = json.loads(text)
    except RecursionError:
        with pytest.raises(RecursionError):
            jsonio.loads(text)
        return
    got = jsonio.loads(text)
    assert json.dumps(got) == json.dumps(want)
    assert type(got["x"]) is type(want["x"])


@pytest.mark.parametrize("text", [b"{", b"\xff", b'{"a": tru}', b""])
def test_loads_refuses_what_the_stdlib_refuses(text: bytes) -> None:
    with pytest.raises(ValueError):  # json.JSONDecodeError and UnicodeDecodeError
        jsonio.loads(text)


def test_integers_beyond_64_bits_read_as_the_nearest_double() -> None:
    assert jsonio.loads(b'{"x": 123456789012345678901234567890}') == {"x": 1.2345678901234568e29}
    assert jsonio.loads(b'{"x": 18446744073709551615}') == {"x": 2**64 - 1}  # still an int


def test_dumps_keeps_non_finite_floats_and_lone_surrogates() -> None:
    assert jsonio.dumps({"x": [math.nan]}, finite=False) == b'{"x":[NaN]}'
    assert json.loads(jsonio.dumps({"x": "\ud800"})) == {"x": "\ud800"}


def test_v2_json_answer_with_nan_output_says_nan_not_null() -> None:
    req = parse_request(b'{"inputs": [{"name": "a", "datatype": "FP32", "shape": [2], '
                        b'"data": [NaN, 1.5]}]}', None)  # fmt: skip
    assert np.isnan(req.inputs["a"][0])
    out = encode_response("m", "1", {"y": np.array([np.nan, np.inf], np.float32)}, req)
    assert (
        json.loads(out.body)["outputs"][0]["data"][0]
        != json.loads(out.body)["outputs"][0]["data"][0]
    )
    assert b"null" not in out.body
