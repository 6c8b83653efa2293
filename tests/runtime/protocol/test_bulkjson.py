"""`bulkjson`: a large V2 request means exactly what the orjson path says it means.

Every case decodes the same body twice through `codec.parse_request`: once with the
simdjson walk on for every size, once with it off. Both must give the same tensors (dtype
and bits) or the same refusal, word for word.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wasmgate.runtime.errors import BadRequest
from wasmgate.runtime.protocol import bulkjson, codec

Outcome = tuple[str, Any]


def _decode(body: bytes, monkeypatch: pytest.MonkeyPatch, fast: bool) -> Outcome:
    monkeypatch.setattr(bulkjson, "MIN_BYTES", 0 if fast else 1 << 62)
    try:
        req = codec.parse_request(body)
    except BadRequest as e:
        return "refused", str(e)
    return "ok", {k: (v.dtype.str, v.shape, _content(v)) for k, v in req.inputs.items()}


def _content(array: Any) -> Any:
    return array.tolist() if array.dtype == object else array.tobytes()  # bits, not values


def _same(body: bytes, monkeypatch: pytest.MonkeyPatch) -> Outcome:
    fast = _decode(body, monkeypatch, fast=True)
    assert fast == _decode(body, monkeypatch, fast=False), body[:200]
    return fast


def _body(data: Any, datatype: str = "FP32", shape: list[int] | None = None) -> bytes:
    entry = {"name": "x", "datatype": datatype, "shape": shape or [len(data)], "data": data}
    return json.dumps({"inputs": [entry]}).encode()


def test_a_flat_float_list_takes_the_buffer_and_gives_the_same_tensor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    body = _body(x.ravel().tolist(), shape=list(x.shape))
    assert len(body) < bulkjson.MIN_BYTES
    assert isinstance(bulkjson.loads(body)["inputs"][0]["data"], list)  # too small to walk
    monkeypatch.setattr(bulkjson, "MIN_BYTES", 0)
    assert isinstance(bulkjson.loads(body)["inputs"][0]["data"], bulkjson.Doubles)
    kind, tensors = _same(body, monkeypatch)
    assert kind == "ok"
    assert tensors["x"][2] == x.tobytes()


@pytest.mark.parametrize(
    "raw",
    [
        b'{"inputs":[{"name":"x","datatype":"FP32","shape":[2],"data":[1, NaN]}]}',
        b'{"inputs":[{"name":"x","datatype":"FP32","shape":[2],"data":[1, Infinity]}]}',
        b'{"inputs":[{"name":"x","datatype":"FP32","shape":[2],"data":[1, 1e400]}]}',
        b'{"inputs":[{"name":"x","datatype":"FP64","shape":[1],"data":[1e999999]}]}',
        b'{"inputs":[{"name":"\\ud800","datatype":"FP32","shape":[1],"data":[1]}]}',
        b'{"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[1]}]} trailing',
        b'{"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[1e39]}]}',
        b'{"inputs":[{"name":"x","datatype":"FP16","shape":[2],"data":[65520, 1]}]}',
        b'{"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[100000000000000000000]}]}',
        b'{"inputs":[{"name":"x","datatype":"FP32","shape":[2],"data":[true, 1.0]}]}',
        b'{"inputs":[{"name":"x","datatype":"FP32","shape":[2],"data":[true, false]}]}',
        b'{"inputs":[{"name":"x","datatype":"FP32","shape":[2],"data":[null, 1.0]}]}',
        b'{"inputs":[{"name":"x","datatype":"FP32","shape":[2],"data":["1", 1.0]}]}',
        b'{"inputs":[{"name":"x","datatype":"FP32","shape":[2],"data":[1, [2]]}]}',
        b'{"inputs":[{"name":"x","datatype":"FP32","shape":[2],"data":[[], [1, 2]]}]}',
        b'{"inputs":[{"name":"x","datatype":"FP32","shape":[2],"data":[[1], [2]]}]}',
        b'{"inputs":[{"name":"x","datatype":"FP32","shape":[3],"data":[[1], [2, 3]]}]}',
        b'{"inputs":[{"name":"x","datatype":"FP32","shape":[2,2],"data":[[1, 2], [3, 4]]}]}',
        b'{"inputs":[{"name":"x[","datatype":"FP32","shape":[2],"data":[1, [2]]}]}',
        b'{"inputs":[{"name":"x[]","datatype":"FP32","shape":[2],"data":[1, 2]}]}',
        b'{"inputs":[{"name":"\\u005b","datatype":"FP32","shape":[2],"data":[[1], 2]}]}',
        b'{"inputs":[{"name":"x","datatype":"FP32","shape":[0],"data":[]}]}',
        b'{"inputs":[{"name":"x","datatype":"FP32","shape":[3],"data":[1, 2]}]}',
        # a repeated key: the last one wins, whatever its position or kind
        b'{"inputs":[{"name":"x","datatype":"INT8","shape":[1],"data":[300],"datatype":"FP32"}]}',
        b'{"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[1],"data":[[2]]}]}',
        b'{"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[1]}],"inputs":[]}',
        b'{"inputs":[],"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[2.5]}]}',
        # integers past 2**53 reach a float tensor through float64 on both paths
        b'{"inputs":[{"name":"x","datatype":"FP32","shape":[2],"data":[9007199254740993, 1]}]}',
        b'{"inputs":[{"name":"x","datatype":"FP16","shape":[2],"data":[65519, -0.0]}]}',
        (
            b'{"inputs":[{"name":"x","datatype":"FP64","shape":[2],'
            b'"data":[18446744073709551615, 5e-324]}]}'
        ),
        b'{"inputs":[{"name":"x","datatype":"INT64","shape":[1],"data":[9223372036854775807]}]}',
        b'{"inputs":[{"name":"x","datatype":"BF16","shape":[1],"data":[1.0]}]}',
        b'{"inputs":[{"name":"x","datatype":"BYTES","shape":[1],"data":["a["]}]}',
        b'{"inputs":[null]}',
        b'{"inputs":{"name":"x"}}',
        b"[1, 2]",
        b'"just a string"',
        b'{"inputs":[{"name":"x","datatype":{"FP32":1},"shape":[1],"data":[1]}]}',
    ],
)
def test_odd_bodies_mean_the_same_on_both_paths(
    raw: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    _same(raw, monkeypatch)


@pytest.mark.parametrize(
    ("datatype", "data"),
    [("FP32", [1.0, 3.5e38]), ("FP32", [-1e39]), ("FP16", [65520.0]), ("FP16", [1.0, -7e4])],
)
def test_a_finite_number_beyond_the_float_type_is_refused_not_made_infinite(
    datatype: str, data: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    kind, message = _same(_body(data, datatype), monkeypatch)
    assert kind == "refused"
    assert f"{datatype} data cannot hold values like [{data[-1]!r}]" in message


def test_large_finite_numbers_that_fit_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    big = float(np.finfo(np.float32).max)
    kind, tensors = _same(_body([big, -big, 1.0, float("inf")], "FP32"), monkeypatch)
    assert kind == "ok"
    got = np.frombuffer(tensors["x"][2], dtype=np.float32)
    assert got.tolist() == [big, -big, 1.0, float("inf")]  # an inf sent stays an inf


def test_nesting_beyond_any_parser_is_refused_the_same_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    deep = b"[" * 5000 + b"1" + b"]" * 5000
    raw = b'{"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":' + deep + b"}]}"
    kind, message = _same(raw, monkeypatch)
    assert kind == "refused"
    assert "nested too deeply" in message or "not valid JSON" in message


_numbers = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
)
_leaf = st.one_of(_numbers, st.booleans(), st.none(), st.text(max_size=3))
_data = st.one_of(
    st.lists(_numbers, max_size=12),
    st.lists(st.one_of(_numbers, st.lists(_leaf, max_size=3)), max_size=6),
    st.lists(st.lists(_numbers, min_size=2, max_size=2), max_size=4),
)


@settings(max_examples=300, deadline=None)
@given(
    data=_data,
    datatype=st.sampled_from(["FP32", "FP64", "FP16", "INT64", "UINT8", "BOOL", "BYTES"]),
    name=st.text(max_size=4),
    extra_shape=st.booleans(),
)
def test_generated_bodies_mean_the_same_on_both_paths(
    data: list[Any], datatype: str, name: str, extra_shape: bool
) -> None:
    count = sum(len(d) if isinstance(d, list) else 1 for d in data)
    entry = {"name": name, "datatype": datatype, "shape": [count + extra_shape], "data": data}
    body = json.dumps({"inputs": [entry], "id": name}).encode()
    with pytest.MonkeyPatch.context() as mp:
        _same(body, mp)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=4096) | st.text(alphabet='[]{}\\"a1, ', max_size=512).map(str.encode))
def test_the_bracket_count_is_the_byte_count(body: bytes) -> None:
    # The flatness check compares this count with the arrays the walk found: any byte it
    # miscounts would let a nested list through as a flat one, or refuse a flat one.
    assert bulkjson.open_brackets(body) == body.count(b"[")
