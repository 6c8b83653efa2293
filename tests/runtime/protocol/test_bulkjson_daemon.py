"""A real daemon, a megabyte of V2 JSON, HTTP and MQTT: the fast decode changes no meaning.

The same MobileNet-class tensor sent as JSON (the `bulkjson` path: over 64 KiB) and as raw
binary tensors must give bit-identical logits; hostile large bodies get the same answer
over HTTP and over MQTT, and the daemon goes on serving.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from tests.fixtures.benchkit import BenchKit
from tests.fixtures.daemon import Daemon
from tests.fixtures.models import get_models
from tests.fixtures.mosquitto import Broker
from tests.runtime.mqtt.requester import Requester
from wasmgate.runtime.protocol import bulkjson

GW = "gw-bulk"
TOPIC = f"wasmgate/v1/{GW}/models/big/infer"
SHAPE = [1, 3, 128, 128]


def _json(data_text: str) -> bytes:
    head = '{"inputs":[{"name":"input","datatype":"FP32","shape":' + json.dumps(SHAPE) + ',"data":'
    return (head + data_text + "}]}").encode()


def _binary(x: npt.NDArray[np.float32]) -> tuple[bytes, int]:
    params = {"binary_data_size": x.nbytes}
    head = {"inputs": [{"name": "input", "datatype": "FP32", "shape": SHAPE,
                        "parameters": params}]}  # fmt: skip
    header = json.dumps(head).encode()
    return header + x.tobytes(), len(header)


def _http(daemon: Daemon, body: bytes, header_length: int | None = None) -> tuple[int, Any]:
    headers = (
        {} if header_length is None else {"Inference-Header-Content-Length": str(header_length)}
    )
    req = urllib.request.Request(f"{daemon.url}/v2/models/big/infer", data=body, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


async def _mqtt(dev: Requester, body: bytes, tag: str) -> tuple[int, Any]:
    before = len(dev.snapshot())
    dev.request(TOPIC, body, response_topic=f"replies/{tag}", correlation=tag.encode())
    replies = await dev.wait_for(before + 1, timeout=60)
    (reply,) = [r for r in replies if r.correlation == tag.encode()]
    return int(reply.props["status"]), json.loads(reply.payload)


def _message(answer: Any) -> str:
    return str(answer.get("error", answer))


async def test_large_json_is_exact_and_hostile_bodies_answer_alike_on_both_transports(
    tmp_path: Path, mosquitto: Broker, daemon_factory: Callable[..., Daemon]
) -> None:
    kit = BenchKit(tmp_path / "kit")
    kit.build("big", get_models().mobilenet_fp32)
    mqtt = {"host": mosquitto.host, "port": mosquitto.port, "gateway_id": GW,
            "response_topics": ["replies/#"]}  # fmt: skip
    daemon = daemon_factory(config=kit.config({"mqtt": mqtt}))
    x = np.random.default_rng(7).standard_normal(SHAPE).astype(np.float32)
    numbers = json.dumps(x.ravel().tolist())
    assert len(_json(numbers)) > 10 * bulkjson.MIN_BYTES

    status, by_json = _http(daemon, _json(numbers))
    assert status == 200, by_json
    status, by_binary = _http(daemon, *_binary(x))
    assert status == 200, by_binary
    assert by_json["outputs"][0]["data"] == by_binary["outputs"][0]["data"]  # every bit

    first, rest = numbers[1:].split(",", 1)
    hostile = {
        "ragged": ("[[" + first + "]," + rest, 400, "not a regular nested list"),
        "overflow": ("[1e39," + rest, 400, "FP32 data cannot hold values like [1e+39]"),
        "boolean": ("[true," + rest, 200, ""),  # numpy reads [true, 0.5] as floats
        "nan": ("[NaN," + rest, 200, ""),  # the stdlib path reads it; a float may be NaN
        "repeated": (numbers + ',"data":[1]', 400, "needs 49152 elements, 'data' has 1"),
        "short": ("[" + rest, 400, "needs 49152 elements, 'data' has 49151"),
    }
    with Requester(mosquitto.port).connect("replies/#") as dev:
        for tag, (data_text, want, words) in hostile.items():
            body = _json(data_text)
            over_http = _http(daemon, body)
            over_mqtt = await _mqtt(dev, body, tag)
            assert over_http[0] == over_mqtt[0] == want, (tag, over_http, over_mqtt)
            if want != 200:
                assert words in _message(over_http[1]), (tag, over_http)
                assert _message(over_http[1]) == _message(over_mqtt[1]), tag
        status, again = await _mqtt(dev, _json(numbers), "after")
        assert (status, again["outputs"]) == (200, by_json["outputs"])
    assert _http(daemon, _json(numbers)) == (200, by_json)  # still serving, same answer
