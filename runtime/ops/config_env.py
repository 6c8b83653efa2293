"""The environment's part of the daemon settings: ``WASMGATE_<SECTION>__<FIELD>=value``.

pydantic-settings did this until it was measured: dropping it took the daemon's imports
plus settings from 564 to 524 ms (fastest of 10 alternating in-process rounds) and idle
RSS with 3 bundles from 127.4 to 126.1 MB (same-run `bench_daemon` pair), for the one
source the daemon reads besides its TOML file. The rules are the ones it applied:

- names are case-insensitive; ``__`` separates the levels (``WASMGATE_STORE__DEFAULTS__...``);
- a name without ``__`` sets a top-level field, and is ignored unless it names one (other
  tools' ``WASMGATE_BUILD_CACHE``); an unknown section is the caller's error to report;
- a value for a list, tuple, dict or section is JSON (``WASMGATE_HTTP__ALLOWED_HOSTS=["a"]``),
  taken with JSON's types as they are (like the TOML file's values);
- any other value is text, read as the field's type here, before the settings are checked:
  numbers and booleans as pydantic's lax mode read them (the config's parser until
  msgspec): Python's ``int()``/``float()`` rules (``1_000``, `` 9000``, ``+5``) and
  ``yes``/``no``, ``on``/``off``, ``t``/``f``, ``y``/``n`` besides ``true``/``false``/
  ``1``/``0``, in any case, so an ``Environment=`` line that worked goes on working; text
  that spells no such value is refused by the check, naming the variable;
- a section set as JSON and variables of its fields merge (the fields' win);
- the environment wins over the file, section by section (a deep merge of the two).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

import msgspec

from wasmgate.runtime.errors import ConfigError

PREFIX = "WASMGATE_"
_CONTAINERS = (list, tuple, dict, set, frozenset)
# The booleans pydantic read from text beyond the true/false/1/0 msgspec reads itself.
_WORDS = {"on": True, "t": True, "y": True, "yes": True}
_WORDS |= {"off": False, "f": False, "n": False, "no": False}
_KINDS = {"int": "an integer", "float": "a number", "bool": "a boolean (true or false)"}
_EXPECTED = re.compile(r"Expected `([^`]+)`, got `str`")


def env_paths(environ: Mapping[str, str] | None = None) -> dict[tuple[str, ...], str]:
    """Config-looking variables by the key path they set (lower case) -> their names."""
    env = os.environ if environ is None else environ
    return {
        tuple(name[len(PREFIX) :].lower().split("__")): name
        for name in env
        if name.upper().startswith(PREFIX)
    }


def env_data(
    model: type[msgspec.Struct], environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """What the environment sets in ``model``'s fields, as nested dicts of raw values."""
    env = os.environ if environ is None else environ
    data: dict[str, Any] = {}
    for path, name in sorted(env_paths(env).items()):
        if path[0] not in _field_types(model):
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


def _annotation(model: type[msgspec.Struct], path: tuple[str, ...]) -> Any:
    """The type a key path ends at (None past a field nobody declared)."""
    annotation: Any = model
    for key in path:
        annotation = _step(annotation, key)
        if annotation is None:
            return None
    return annotation


def _step(annotation: Any, key: str) -> Any:
    for arg in _alternatives(annotation):
        if _is_struct(arg):
            return _field_types(arg).get(key)
        if get_origin(arg) is dict:
            return get_args(arg)[1]
    return None


def _is_struct(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, msgspec.Struct)


@functools.cache
def _field_types(model: type[msgspec.Struct]) -> dict[str, Any]:
    """A Struct's fields by name -> their (resolved) types; the classes never change."""
    return {f.name: f.type for f in msgspec.structs.fields(model)}


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
        if _is_struct(arg):
            return True
    return False


def _value(name: str, raw: str, annotation: Any) -> Any:
    if annotation is None:
        return raw  # a key nobody declared: the model refuses it, naming the key
    if raw == "" or not _is_complex(annotation):
        return _scalar(raw, annotation)
    try:
        return json.loads(raw)
    except ValueError as e:
        raise ConfigError(f"environment variable {name}: not valid JSON: {e}") from e


def _scalar(raw: str, annotation: Any) -> Any:
    """The number or boolean ``raw`` spells where the field takes one (``9000``, `` 9000``,
    ``1_000``, ``+5``, ``1e3``, ``yes``, ``off``), else ``raw`` itself. The settings are then
    converted strictly, as the TOML file's typed values must be: text that spells no value
    of the field's type stays text and is refused there, naming the variable."""
    kinds = set(_alternatives(annotation))
    if str in kinds or Path in kinds:
        return raw  # the text is a value of its own (a host, a path), never a number
    if bool in kinds:
        word = raw.strip().lower()
        if word in _WORDS:
            return _WORDS[word]
        read = _read(raw, bool)
        if read is not None:
            return read
    for kind in (int, float):
        if kind in kinds:
            read = _read(raw, kind)
            if read is not None:
                return read
            with contextlib.suppress(ValueError):
                return kind(raw)
    return raw


def _read(raw: str, kind: type[Any]) -> Any:
    """``raw`` as msgspec's lenient conversion reads it as ``kind`` (None: it does not)."""
    try:
        return msgspec.convert(raw, kind, strict=False)
    except msgspec.ValidationError:
        return None


def text_problem(raw: str, problem: str) -> str:
    """msgspec's ``Expected `int`, got `str``` said for a variable's text: every variable
    is text, so the value is named with what it does not spell (``'abc' is not an
    integer``); any other problem is returned as it is."""
    found = _EXPECTED.fullmatch(problem)
    if found is None:
        return problem
    names = [k.strip() for k in found.group(1).split("|") if k.strip() != "null"]
    return f"{raw!r} is not " + " or ".join(_KINDS.get(k, f"a {k}") for k in names)
