"""An MQTT payload fuzzer against a real daemon: every topic kind, hostile payloads.

Topic kinds (``docs/mqtt-topics.md``): adapter requests in the MQTT 5 form (Response
Topic + Correlation Data) and the 3.1.1 ``/<client>`` form, model requests (V2 JSON) in
both forms, unknown adapters and models, and near-miss topics the bridge must ignore.
Payloads: random bytes, empty, huge (beyond ``mqtt.max_payload_bytes``), malformed JSON,
JSON of the wrong types, bad binary-header properties. Proves: no crash, every MQTT 5
request with a reply address gets an error answer (4xx, never 5xx), and the bridge still
answers a good request afterwards.

Several hundred requests arrive at once, so the last ones queue for seconds on a loaded
machine: the bundle and the daemon get a deadline far beyond that (``DEADLINE_MS``), so a
504 (deadline exceeded) can only be a real hang and fails the test like any other 5xx. A
requester's ``timeout_ms`` cannot do this: it only shortens the deadline the bundle's
``[limits] deadline_ms`` and the daemon's ``limits.deadline_ms`` allow.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable

import pytest

from tests.fixtures.benchkit import BenchKit
from tests.fixtures.daemon import Daemon
from tests.fixtures.mosquitto import Broker
from tests.reliability.conftest import example_bundle
from tests.runtime.mqtt.requester import Requester

ROOT = "wasmgate/v1/gw-fuzz"
REPLIES = "fuzz/replies"
MAX_PAYLOAD = 64 * 1024
DEADLINE_MS = 90_000  # beyond the waits below: an answer that late fails them, never as 504
GOOD = json.dumps([0, 0, 2, 14, 13, 3, 0, 0] * 8).encode()


def _payloads(rng: random.Random) -> list[bytes]:
    wrong_types: list[object] = [
        [], None, "x", 3.5, {"inputs": "x"}, {"inputs": [1, 2]}, {"id": {"a": 1}, "inputs": []},
        {"inputs": [{"name": 1, "shape": "a", "datatype": 5, "data": {}}]},
        {"inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP32", "data": ["a"] * 64}]},
        {"inputs": [{"name": "input", "shape": [-1, 64], "datatype": "FP32", "data": [0] * 64}]},
        {"inputs": [{"name": "input", "shape": [1, 64], "datatype": "INT8", "data": [999] * 64}]},
        {"inputs": [{"name": "input", "shape": [2**31, 64], "datatype": "FP32", "data": [0]}]},
        {"inputs": [{"name": "input", "shape": [1, 64], "datatype": "BYTES", "data": [[]]}]},
        {"inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP32",
                     "parameters": {"binary_data_size": 10**12}}]},
    ]  # fmt: skip
    out = [b"", b"\xff\xfe\x00", b"{", b'{"inputs": [', b"[1, 2,", b"NaN", b"1e999999"]
    out += [json.dumps(w).encode() for w in wrong_types]
    out += [rng.randbytes(rng.choice((1, 7, 64, 300, 4096))) for _ in range(12)]
    out += [b"{" * 5000 + b"}" * 5000, b"[" * 100_000, b"x" * (MAX_PAYLOAD + 1), b"\0" * 10**6]
    return out


def _code(body: bytes) -> int | None:
    """The ``code`` of a JSON error answer (3.1.1 has no status property), else None."""
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    return doc.get("code") if isinstance(doc, dict) else None


def _topics() -> list[tuple[str, bool]]:
    """(topic, is a request topic of ours)."""
    return [
        (f"{ROOT}/adapters/digits/req", True),
        (f"{ROOT}/adapters/digits/req/dev1", True),
        (f"{ROOT}/models/digits-mlp/infer", True),
        (f"{ROOT}/models/digits-mlp/infer/dev1", True),
        (f"{ROOT}/adapters/nope/req", True),
        (f"{ROOT}/models/nope/infer/dev1", True),
        (f"{ROOT}/adapters/digits/req/a/b", False),
        (f"{ROOT}/models/digits-mlp", False),
        (f"{ROOT}/adapters//req", False),
    ]


@pytest.mark.timeout(120)
async def test_fuzzed_payloads_on_every_topic_kind(
    tmp_path_factory: pytest.TempPathFactory,
    mosquitto: Broker,
    daemon_factory: Callable[..., Daemon],
) -> None:
    kit = BenchKit(tmp_path_factory.mktemp("kit"))
    example_bundle(kit, "digits", deadline_ms=DEADLINE_MS)
    mqtt = {"host": "127.0.0.1", "port": mosquitto.port, "gateway_id": "gw-fuzz",
            "max_payload_bytes": MAX_PAYLOAD}  # fmt: skip
    limits = {"deadline_ms": DEADLINE_MS}
    daemon = daemon_factory(config=kit.config({"mqtt": mqtt, "limits": limits}))
    rng = random.Random(9)
    payloads = _payloads(rng)
    dev = Requester(mosquitto.port, client_id="fuzzer").connect(REPLIES)
    old = Requester(mosquitto.port, v5=False, client_id="fuzz311").connect(
        f"{ROOT}/adapters/+/res/#", f"{ROOT}/models/+/result/#"
    )
    try:
        asked = 0
        for topic, ours in _topics():
            for i, body in enumerate(payloads):
                corr = f"{topic}#{i}".encode()
                user = [("Inference-Header-Content-Length", rng.choice(["x", "-5", "99999"]))]
                dev.request(topic, body, response_topic=REPLIES, correlation=corr,
                            user=user if i % 3 == 0 else None)  # fmt: skip
                asked += ours
                old.request(topic, body)
        replies = await dev.wait_for(asked, timeout=60)
        dev.request(f"{ROOT}/adapters/digits/req", GOOD, response_topic=REPLIES,
                    correlation=b"good")  # fmt: skip
        replies = await dev.wait_for(asked + 1, timeout=30)
        paired = await old.wait_for(3 * len(payloads), timeout=30)  # the 3 ".../dev1" topics
    finally:
        dev.close()
        old.close()
    statuses = {r.correlation: r.props.get("status") for r in replies}
    assert statuses.pop(b"good") == "200"
    # Random bytes may be a valid digits image (64 raw pixels): 200 is fine, 5xx never.
    bad = {c: s for c, s in statuses.items() if s is None or s[0] not in "24"}
    assert not bad, bad
    codes = [_code(r.payload) for r in paired]
    assert all(c is None or c < 500 for c in codes), codes
    assert len(statuses) == asked  # no answers to topics that are not ours
    assert daemon.proc is not None
    assert daemon.proc.poll() is None
    assert "Traceback" not in daemon.log()
