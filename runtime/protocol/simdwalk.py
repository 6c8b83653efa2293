"""The simdjson walk of `wasmgate.runtime.protocol.bulkjson` (which says what it returns and
when a body goes the orjson way instead). A module of its own so that simdjson is imported
once, with the first large body, not at start-up."""

from __future__ import annotations

from typing import Any

import numpy as np
import simdjson

from wasmgate.runtime.protocol.bulkjson import Doubles

__all__ = ["walk"]

_FLOATS = frozenset({"FP16", "FP32", "FP64"})


def walk(body: bytes) -> dict[str, Any] | None:
    """``body`` as `bulkjson.loads` describes it, or None when it is not a JSON object;
    raises what simdjson raises (ValueError, TypeError, RuntimeError) on what it refuses."""
    root = simdjson.Parser().parse(body)
    if not isinstance(root, simdjson.Object):
        return None
    doc = _lazy(root)
    for key, value in doc.items():
        if key == "inputs" and isinstance(value, simdjson.Array):
            doc[key] = [_entry(e) for e in value]
        else:
            doc[key] = _plain(value)
    return doc


class _Repeated(ValueError):
    """A key repeats: `jsonio.loads` decides (the last one wins there)."""


def _lazy(obj: Any) -> dict[str, Any]:
    """The members of ``obj``, containers left unread (``items()`` would read every value
    into Python, and indexing finds the first of duplicate keys, hence `_Repeated`)."""
    keys = list(obj.keys())
    if len(set(keys)) != len(keys):
        raise _Repeated
    return {key: obj[key] for key in keys}


def _entry(element: Any) -> Any:
    if not isinstance(element, simdjson.Object):
        return _plain(element)
    entry = _lazy(element)
    floats = entry.get("datatype") in _FLOATS
    for key, value in entry.items():
        if key == "data" and floats and isinstance(value, simdjson.Array):
            entry[key] = _doubles(value)
        else:
            entry[key] = _plain(value)
    return entry


def _doubles(data: Any) -> Doubles | list[Any]:
    try:
        values = np.frombuffer(data.as_buffer(of_type="d"), dtype=np.float64)
    except TypeError:  # a bool, string or null in it: the list path decides
        return list(data.as_list())
    if len(values) != len(data):  # nested: numpy checks that it is regular
        return list(data.as_list())
    return Doubles(values)


def _plain(value: Any) -> Any:
    if isinstance(value, simdjson.Object):
        return value.as_dict()
    if isinstance(value, simdjson.Array):
        return value.as_list()
    return value
