"""Typed documents: data from JSON or TOML into msgspec Structs, and one wording of errors.

Every document the package reads — signed manifests, trust and fleet documents, state
files, device profiles, the daemon's config — is a tree of `msgspec.Struct` classes and is
turned into one here, so the same rules hold everywhere alike:
- unknown fields are refused at every level (`Document`: ``forbid_unknown_fields``);
- `strict` conversion takes JSON's types as they are (no ``"3"`` for ``3``, no ``true``
  for ``1``): every signed document, and the daemon's config (its environment overrides,
  text by nature, are read as their fields' types before, in `config_env`). Device
  profiles, the fleet state file and gateway reports convert leniently (``"4"`` for
  ``4``), as they did before; a bool is never an int either way;
- bounds (`msgspec.Meta`) and patterns are checked by `convert` only, not when code builds
  a Struct itself; cross-field checks (``__post_init__``) run both times, and on `replace`;
- patterns end in ``\\Z``, never ``$``: ``re`` lets ``$`` match before a trailing newline;
- what is wrong is said once, the same way: ``where: what`` (`Invalid`), ``where`` the
  dotted path of the first bad value (``models.0.name``; a mapping's value ``files[...]``),
  or the document's own name.

Every subclass repeats ``kw_only=True``: msgspec does not pass it down (``frozen`` and
``forbid_unknown_fields`` it does).

msgspec replaced pydantic here: pydantic's import and model-class building were ~0.2 s of
every daemon start and ~9 MB of its memory (same-run A/B at the switch). msgspec builds a
Struct class in C and compiles a type's validator on first use.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from wasmgate._compat import dataclass_transform

__all__ = [
    "BadField",
    "Document",
    "Invalid",
    "convert",
    "fields",
    "plain",
    "replace",
    "where_what",
]

T = TypeVar("T")


if TYPE_CHECKING:
    # mypy does not carry a Struct base's ``frozen``/``kw_only`` over to its subclasses;
    # this tells it that every subclass is frozen and built by keyword, as at run time.
    @dataclass_transform(
        frozen_default=True, kw_only_default=True, field_specifiers=(msgspec.field,)
    )
    class Document(msgspec.Struct, frozen=True, kw_only=True):
        """Base of every typed document: unknown fields refused, immutable, keyword-built."""

else:

    class Document(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
        """Base of every typed document: unknown fields refused, immutable, keyword-built."""


class Invalid(ValueError):
    """A document is not valid: ``str(e)`` is ``where: what``; both are kept apart too."""

    def __init__(self, where: str, what: str) -> None:
        super().__init__(f"{where}: {what}")
        self.where = where
        self.what = what


class BadField(ValueError):
    """Raised by a ``__post_init__`` check of one field, so `where` names that field, not
    just its Struct (msgspec places a ``__post_init__`` error at the Struct)."""

    def __init__(self, field: str, what: str) -> None:
        super().__init__(what)
        self.field = field


# msgspec ends a message with " - at `$.a.b[0]`" (or "`key` in `$.a`" for a mapping key).
_AT = re.compile(r" - at `(?P<key>key` in `)?\$(?P<path>[^`]*)`$")
_STEP = re.compile(r"\.([^.\[]+)|\[(\d+|\.\.\.)\]")
_UNKNOWN = re.compile(r"^Object contains unknown field `(?P<name>[^`]*)`")


def where_what(err: msgspec.ValidationError, whole: str = "document") -> tuple[str, str]:
    """The dotted path of ``err``'s bad value (``whole`` at the top) and what is wrong.

    A mapping's values show as ``[...]`` (msgspec does not name the key): ``files[...].size``.
    """
    text = str(err)
    match = _AT.search(text)
    where = ""
    if match is not None:
        text = text[: match.start()]
        for name, index in _STEP.findall(match["path"]):
            where += "[...]" if index == "..." else f".{name or index}"
        if match["key"]:
            where += ".(key)"
    unknown = _UNKNOWN.match(text)
    if unknown is not None:  # where is the unknown field itself, as for any other value
        where += f".{unknown['name']}"
        text = "unknown field (not allowed here)"
    if isinstance(err.__cause__, BadField):  # msgspec chains what __post_init__ raised
        where += f".{err.__cause__.field}"
    return (where.lstrip(".") or whole), text


# msgspec's names of the JSON kinds, so a refused path reads like any other refused value.
_JSON_KINDS = {bool: "bool", int: "int", float: "float", dict: "object", list: "array"}


def _decode_hook(kind: type[Any], value: Any) -> Any:
    # Paths arrive as text (or, from Python callers, as Paths); nothing else non-JSON is
    # ever declared. A wrong value must be a TypeError: msgspec reports that as invalid,
    # while NotImplementedError escapes as is (a TOML ``data_dir = 3`` was a traceback).
    if kind is Path:
        if isinstance(value, Path):
            return value
        if isinstance(value, str):
            return Path(value)
        raise TypeError(f"Expected `str`, got `{_JSON_KINDS.get(type(value), 'value')}`")
    raise NotImplementedError(f"no conversion to {kind!r}")


def convert(data: Any, kind: type[T], *, strict: bool = True, whole: str = "document") -> T:
    """``data`` (JSON/TOML values) as ``kind``; `Invalid` names the first problem."""
    try:
        return msgspec.convert(data, kind, strict=strict, dec_hook=_decode_hook)
    except msgspec.ValidationError as e:
        raise Invalid(*where_what(e, whole)) from e


def _encode_hook(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    raise NotImplementedError(f"cannot encode {type(value).__name__}")


def plain(value: Any, *, omit_none: bool = False) -> Any:
    """``value`` as JSON values (dicts, lists, str, numbers, None); datetimes as RFC 3339.

    ``omit_none`` leaves out fields whose value is None, at every level."""
    out = msgspec.to_builtins(value, enc_hook=_encode_hook)
    return _drop_none(out) if omit_none else out


def _drop_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


def fields(kind: type[msgspec.Struct]) -> tuple[str, ...]:
    """The field names of a Struct class, in order."""
    return kind.__struct_fields__


replace = msgspec.structs.replace
"""A copy of a Struct with some fields changed (``replace(s, port=1)``): ``__post_init__``
runs again, the bounds are not checked."""
