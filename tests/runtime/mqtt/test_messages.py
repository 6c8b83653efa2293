"""Topic parsing, request conventions and the dedupe window, without a broker."""

from __future__ import annotations

import json
import math
import re
import time

import pytest

from tests.runtime.mqtt.conftest import bridge_settings
from wasmgate.runtime.errors import BadRequest
from wasmgate.runtime.mqtt.dedupe import NotAnswered, RecentRequests, dedupe_key
from wasmgate.runtime.mqtt.messages import Incoming, deadline_of, json_object, request_id, with_id
from wasmgate.runtime.mqtt.topics import Route, Topics

R = "wasmgate/v1/gw1"


def _msg(**kw: object) -> Incoming:
    base: dict[str, object] = {
        "topic": "t",
        "payload": b"",
        "qos": 1,
        "dup": False,
        "mid": 1,
        "generation": 1,
        "received": 100.0,
    }
    base.update(kw)
    return Incoming(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("topic", "route"),
    [
        (f"{R}/adapters/digits/req", Route("adapter", "digits", None)),
        (f"{R}/adapters/digits/req/dev-1", Route("adapter", "digits", "dev-1")),
        (f"{R}/models/m/infer", Route("model", "m", None)),
        (f"{R}/models/m/infer/c", Route("model", "m", "c")),
        (f"{R}/adapters/digits/res/dev-1", None),
        (f"{R}/adapters//req", None),
        (f"{R}/adapters/a/req/b/c", None),
        ("wasmgate/v1/other/adapters/a/req", None),
        (f"{R}/models/m/metadata", None),
    ],
)
def test_parse(topic: str, route: Route | None) -> None:
    assert Topics(bridge_settings(1)).parse(topic) == route


def test_pairs_and_shared_subscriptions() -> None:
    topics = Topics(bridge_settings(1, shared_group="g1", topic_prefix="site/"))
    assert topics.root == "site/gw1"
    assert topics.paired_reply(Route("adapter", "a", "c")) == "site/gw1/adapters/a/res/c"
    assert topics.paired_reply(Route("model", "m", "c")) == "site/gw1/models/m/result/c"
    assert topics.paired_reply(Route("model", "m", None)) is None
    assert topics.subscriptions()[0] == "$share/g1/site/gw1/adapters/+/req"
    assert len(topics.subscriptions()) == 4


def test_deadline_sources_take_the_earliest() -> None:
    now = time.time()
    assert deadline_of(_msg(), None) is None
    assert deadline_of(_msg(expiry_s=5), None) == 105.0
    assert deadline_of(_msg(expiry_s=5, user_properties={"timeout_ms": "250"}), None) == 100.25
    absolute = deadline_of(_msg(user_properties={"deadline": str(now + 2)}), None, now)
    assert absolute == pytest.approx(102.0)
    assert deadline_of(_msg(), {"deadline": now - 1}, now) == pytest.approx(99.0)


@pytest.mark.parametrize(
    ("props", "obj", "field"),
    [
        ({"timeout_ms": "soon"}, None, "user property 'timeout_ms'"),
        ({"timeout_ms": "nan"}, None, "user property 'timeout_ms'"),
        ({"timeout_ms": "inf"}, None, "user property 'timeout_ms'"),
        ({"timeout_ms": "1e999"}, None, "user property 'timeout_ms'"),
        ({"timeout_ms": "-5"}, None, "user property 'timeout_ms'"),
        ({"timeout_ms": "0"}, None, "user property 'timeout_ms'"),
        ({"deadline": "NaN"}, None, "user property 'deadline'"),
        ({}, {"deadline": math.nan}, "payload field 'deadline'"),
        ({}, {"deadline": math.inf}, "payload field 'deadline'"),
        ({}, {"deadline": 10**400}, "payload field 'deadline'"),
        ({}, {"deadline": True}, "payload field 'deadline'"),
        ({}, {"deadline": time.time() + 10**7}, "payload field 'deadline'"),
    ],
)
def test_non_finite_or_out_of_range_deadlines_are_refused_naming_the_field(
    props: dict[str, str], obj: dict[str, object] | None, field: str
) -> None:
    with pytest.raises(BadRequest, match=re.escape(field)):
        deadline_of(_msg(user_properties=props), obj)


def test_json_id_echo() -> None:
    assert json_object(b'{"a": 1}') == {"a": 1}
    assert json_object(b"[1]") is None
    assert json_object(b"{broken") is None
    assert request_id({"id": 7}) == 7
    assert request_id({"id": True}) is None
    assert json.loads(with_id(b'{"sum": 1}', "application/json", 7)) == {"id": 7, "sum": 1}
    assert with_id(b'{"id": "x"}', "application/json", 7) == b'{"id": "x"}'
    assert with_id(b"raw", "application/octet-stream", 7) == b"raw"


def test_dedupe_key_identity() -> None:
    key = dedupe_key("r", b"c1", None, b"p", request_topic="q")
    assert key is not None
    assert key == dedupe_key("r", b"c1", None, b"p", request_topic="q")
    assert key != dedupe_key(
        "r", b"c1", None, b"q", request_topic="q"
    )  # reused correlation, new payload
    assert key != dedupe_key("r2", b"c1", None, b"p", request_topic="q")
    assert key != dedupe_key("r", b"c1", None, b"p", request_topic="q2")  # another model
    assert dedupe_key("r", None, 5, b"p", request_topic="q") == dedupe_key(
        "r", None, "5", b"p", request_topic="q"
    )
    assert dedupe_key(None, b"c1", None, b"p", request_topic="q") is None
    assert dedupe_key("r", None, None, b"p", request_topic="q") is None
    # A requester controls topic and correlation sizes: the key stays 32 bytes, and the
    # length-prefixed parts cannot be shifted into one another.
    huge = dedupe_key("t" * 100_000, b"c" * 100_000, None, b"p" * 100_000, request_topic="q")
    assert huge is not None
    assert len(huge) == len(key) == 32
    assert dedupe_key("r\0c", b"x", None, b"p", request_topic="q") != dedupe_key(
        "r", b"\0cx", None, b"p", request_topic="q"
    )


async def test_recent_requests_are_capped_oldest_first() -> None:
    recent = RecentRequests(window_s=600, max_entries=100)
    first = recent.remember(b"k0")
    for i in range(1, 2000):
        _ = recent.remember(b"k%d" % i)
    assert len(recent) == 100
    assert recent.recall(b"k0") is None
    assert recent.recall(b"k1999") is not None
    assert isinstance(first.exception(), NotAnswered)  # a copy waiting on it is not acked


async def test_recent_requests_window() -> None:
    recent = RecentRequests(window_s=60)
    fut = recent.remember(b"k")
    assert recent.recall(b"k") is fut
    recent.answered(b"k")
    assert fut.done()
    _ = recent.remember(b"gone")
    waiting = recent.recall(b"gone")
    recent.forget(b"gone", "dropped")
    assert waiting is not None
    assert isinstance(waiting.exception(), NotAnswered)
    assert recent.recall(b"gone") is None
    expiring = RecentRequests(window_s=0)
    _ = expiring.remember(b"k")
    assert expiring.recall(b"k") is None
    assert len(expiring) == 0
