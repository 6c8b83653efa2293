"""JSON for the request path (V2 bodies, MQTT payloads, status): orjson, same meaning as json.

orjson parses and writes several times faster than the stdlib (a V2 body of a few hundred
numbers: tens of microseconds less per request). Where the two differ, the stdlib's answer
is kept, so a request means exactly what it meant before:

- `loads`: orjson refuses ``NaN``/``Infinity``, numbers beyond a double, lone surrogates
  and nesting deeper than 1024; the stdlib reads those (and the callers then refuse or
  accept the values themselves, naming the field), so a refusal by orjson is retried there.
  One difference is kept on purpose: an integer literal beyond 64 bits reads as the
  nearest double (as in most JSON parsers, RFC 8259 section 6), not as a Python int. Every
  integer field (shapes, ids, INT/UINT tensor data, timeouts) already refuses such values
  either way; a regex guard for them cost more than the parse (measured).
- `dumps`: orjson writes non-finite floats as ``null`` and refuses lone surrogates;
  ``finite=False`` (a float tensor with NaN/inf) or an error goes through the stdlib.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def loads(data: bytes) -> Any:
    """Parse JSON; raises what `json.loads` raises (ValueError, RecursionError)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def dumps(obj: Any, *, finite: bool = True) -> bytes:
    """Compact JSON bytes; ``finite=False`` when ``obj`` may hold NaN or infinities."""
    if finite:
        try:
            return orjson.dumps(obj)
        except TypeError:
            pass  # e.g. a lone surrogate in a str, or a type only json's default knows
    return json.dumps(obj, separators=(",", ":")).encode()


def dumps_text(obj: Any) -> str:
    """`dumps` as text: aiohttp's ``json_response(dumps=...)`` wants a str."""
    return dumps(obj).decode()
