"""Transport-neutral MQTT message shapes and the request/answer conventions of the bridge.

No paho here: `paho_adapt.py` converts to and from these. Conventions (``mqtt-topics.md``):

- MQTT 5: the answer goes to the Response Topic with the request's Correlation Data, a
  Content Type, and user properties ``status`` (HTTP-like code), ``source`` (local|cloud)
  and ``version``; a request's W3C trace context (user properties ``traceparent`` and
  ``tracestate``) comes back on its answer (see ``wasmgate.runtime.ops.tracing``).
  Requesters may bound the work with the Message Expiry Interval, a user
  property ``timeout_ms`` (relative) or ``deadline`` (absolute Unix time, seconds).
- MQTT 3.1.1: the answer goes to the paired topic; a JSON object payload may carry ``id``
  (echoed in the answer when the answer is a JSON object) and ``deadline`` (Unix seconds).
- Errors are JSON ``{"error": "...", "code": N}`` (plus ``id`` when known).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from wasmgate.runtime.protocol import jsonio
from wasmgate.runtime.served import timeouts

JSON = "application/json"


@dataclass(frozen=True)
class Incoming:
    """One received PUBLISH, as the bridge sees it."""

    topic: str
    payload: bytes
    qos: int
    dup: bool
    mid: int
    generation: int
    received: float
    """time.monotonic() when the message arrived."""
    response_topic: str | None = None
    correlation_data: bytes | None = None
    content_type: str | None = None
    expiry_s: int | None = None
    """Remaining Message Expiry Interval as forwarded by the broker."""
    user_properties: Mapping[str, str] = field(default_factory=dict)
    retain: bool = False
    """Delivered from the broker's retained store (a replay, not a fresh request)."""


@dataclass(frozen=True)
class Outgoing:
    """One PUBLISH to send. Properties are ignored on an MQTT 3.1.1 connection."""

    topic: str
    payload: bytes
    qos: int = 1
    retain: bool = False
    correlation_data: bytes | None = None
    content_type: str | None = None
    user_properties: tuple[tuple[str, str], ...] = ()


def json_object(payload: bytes) -> dict[str, Any] | None:
    """The payload as a JSON object, or None when it is not one (raw payloads are fine)."""
    if not payload.startswith(b"{"):
        return None
    try:
        value = jsonio.loads(payload)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None  # nested too deeply is not an object either: the adapter sees raw bytes
    return value if isinstance(value, dict) else None


RequestId = str | int


def request_id(obj: Mapping[str, Any] | None) -> RequestId | None:
    """The requester's ``id`` field (string or integer, echoed as given), if any."""
    if obj is None:
        return None
    value = obj.get("id")
    if isinstance(value, str | int) and not isinstance(value, bool):
        return value
    return None


def deadline_of(
    msg: Incoming, obj: Mapping[str, Any] | None, now: float | None = None
) -> float | None:
    """The earliest deadline the requester asked for, as a time.monotonic() value.

    A ``timeout_ms`` or ``deadline`` that is present but not a finite number in range is
    refused (`BadRequest`), never ignored: see `wasmgate.runtime.served.timeouts`."""
    mono = msg.received
    wall = time.time() if now is None else now
    candidates: list[float | None] = []
    if msg.expiry_s is not None:
        candidates.append(mono + msg.expiry_s)
    timeout_ms = msg.user_properties.get("timeout_ms")
    if timeout_ms is not None:
        candidates.append(mono + timeouts.budget_s(timeout_ms, "user property 'timeout_ms'"))
    for where, source in (("user property", msg.user_properties), ("payload field", obj or {})):
        absolute = source.get("deadline")
        if absolute is not None:
            field = f"{where} 'deadline'"
            candidates.append(timeouts.monotonic_of_unix(absolute, field, mono, wall))
            break
    return timeouts.earliest(*candidates)


def error_body(message: str, code: int, rid: RequestId | None) -> bytes:
    body: dict[str, Any] = {"error": message, "code": code}
    if rid is not None:
        body["id"] = rid
    return jsonio.dumps(body)


def with_id(body: bytes, content_type: str, rid: RequestId | None) -> bytes:
    """Echo the 3.1.1 requester's ``id`` into a JSON-object answer that lacks one."""
    if rid is None or "json" not in content_type:
        return body
    obj = json_object(body)
    if obj is None or "id" in obj:
        return body
    # The stdlib: the adapter's JSON may hold NaN, which orjson would write as null.
    return json.dumps({"id": rid, **obj}).encode()
