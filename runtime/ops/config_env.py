"""The environment's part of the daemon settings: ``WASMGATE_<SECTION>__<FIELD>=value``.

pydantic-settings did this until it was measured: dropping it took the daemon's imports
plus settings from 564 to 524 ms (fastest of 10 alternating in-process rounds) and idle
RSS with 3 bundles from 127.4 to 126.1 MB (same-run `bench_daemon` pair), for the one
source the daemon reads besides its TOML file. The rules are the ones it applied:

- names are case-insensitive; ``__`` separates the levels (``WASMGATE_STORE__DEFAULTS__...``);
- a name without ``__`` sets a top-level field, and is ignored unless it names one (other
  tools' ``WASMGATE_BUILD_CACHE``); an unknown section is the caller's error to report;
- a value for a list, tuple, dict or section is JSON (``WASMGATE_HTTP__ALLOWED_HOSTS=["a"]``),
  any other value is the string itself, which the model validates (``"9000"`` is a port);
- a section set as JSON and variables of its fields merge (the fields' win);
- the environment wins over the file, section by section (a deep merge of the two).
"""

from __future__ import annotations

import json
import os
import types
from collections.abc import Mapping
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel

from wasmgate.runtime.errors import ConfigError

PREFIX = "WASMGATE_"
_CONTAINERS = (list, tuple, dict, set, frozenset)


def env_paths(environ: Mapping[str, str] | None = None) -> dict[tuple[str, ...], str]:
    """Config-looking variables by the key path they set (lower case) -> their names."""
    env = os.environ if environ is None else environ
    return {
        tuple(name[len(PREFIX) :].lower().split("__")): name
        for name in env
        if name.upper().startswith(PREFIX)
    }


def env_data(model: type[BaseModel], environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """What the environment sets in ``model``'s fields, as nested dicts of raw values."""
    env = os.environ if environ is None else environ
    data: dict[str, Any] = {}
    for path, name in sorted(env_paths(env).items()):
        if path[0] not in model.model_fields:
            continue  # another tool's variable, or an unknown section (load_settings says so)
        target = data
        for key in path[:-1]:
            inner = target.setdefault(key, {})
            # A section's JSON and its fields' variables merge; a field's variable beside a
            # section set to something else (not an object) replaces it: the model says no.
            if not isinstance(inner, dict):
                inner = target[key] = {}
            target = inner
        target[path[-1]] = _value(name, env[name], _annotation(model, path))
    return data


def merged(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``over`` on top, dicts merged key by key (``over`` wins)."""
    out = dict(base)
    for key, value in over.items():
        below = out.get(key)
        if isinstance(value, Mapping) and isinstance(below, Mapping):
            out[key] = merged(below, value)
        else:
            out[key] = value
    return out


def _annotation(model: type[BaseModel], path: tuple[str, ...]) -> Any:
    """The type a key path ends at (None past a field nobody declared)."""
    annotation: Any = model
    for key in path:
        annotation = _step(annotation, key)
        if annotation is None:
            return None
    return annotation


def _step(annotation: Any, key: str) -> Any:
    for arg in _alternatives(annotation):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            field = arg.model_fields.get(key)
            return None if field is None else field.annotation
        if get_origin(arg) is dict:
            return get_args(arg)[1]
    return None


def _alternatives(annotation: Any) -> tuple[Any, ...]:
    """``X | None`` and ``Annotated[X, ...]`` unwrapped to the types a value may have."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _alternatives(get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        return tuple(a for arg in get_args(annotation) for a in _alternatives(arg))
    return (annotation,)


def _is_complex(annotation: Any) -> bool:
    for arg in _alternatives(annotation):
        if get_origin(arg) in _CONTAINERS or arg in _CONTAINERS:
            return True
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return True
    return False


def _value(name: str, raw: str, annotation: Any) -> Any:
    if raw == "" or annotation is None or not _is_complex(annotation):
        return raw
    try:
        return json.loads(raw)
    except ValueError as e:
        raise ConfigError(f"environment variable {name}: not valid JSON: {e}") from e
