"""wasmgate.typed: strict conversion, refused unknown fields, and the ``where: what`` wording."""

from __future__ import annotations

import importlib
import math
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import msgspec
import pytest

from wasmgate.typed import Document, Invalid, convert, fields, plain, replace


class Inner(Document):
    n: Annotated[int, msgspec.Meta(ge=1)] = 1
    where: Path | None = None


class Outer(Document):
    inner: Inner = msgspec.field(default_factory=Inner)
    items: list[Inner] = msgspec.field(default_factory=list)
    by_name: dict[str, Inner] = msgspec.field(default_factory=dict)
    ratio: float = 0.5
    at: Annotated[datetime, msgspec.Meta(tz=True)] | None = None


def invalid(data: Any, *, strict: bool = True) -> Invalid:
    with pytest.raises(Invalid) as caught:
        convert(data, Outer, strict=strict, whole="outer")
    return caught.value


@pytest.mark.parametrize(
    ("data", "where"),
    [
        ({"inner": {"n": 0}}, "inner.n"),  # a bound
        ({"inner": {"n": True}}, "inner.n"),  # bool is not an int
        ({"inner": {"n": "2"}}, "inner.n"),  # no text for numbers when strict
        ({"inner": {"n": 2.0}}, "inner.n"),  # no float for an int
        ({"items": [{}, {"n": "x"}]}, "items.1.n"),
        ({"by_name": {"a": {"n": 0}}}, "by_name[...].n"),
        ({"ratio": "0.5"}, "ratio"),
        ({"ratio": None}, "ratio"),
        ({"at": "2026-01-01T00:00:00"}, "at"),  # a datetime without its time zone
        ({"at": 1767225600}, "at"),  # no epoch numbers for a datetime
        ({"inner": []}, "inner"),
        ([], "outer"),  # the whole document
    ],
)
def test_a_bad_value_is_refused_and_named(data: Any, where: str) -> None:
    err = invalid(data)
    assert err.where == where
    assert str(err) == f"{where}: {err.what}"
    assert err.what


@pytest.mark.parametrize(
    ("data", "where"),
    [
        ({"extra": 1}, "extra"),
        ({"inner": {"n": 2, "extra": 1}}, "inner.extra"),
        ({"items": [{"n": 1}, {"extra": None}]}, "items.1.extra"),
        ({"by_name": {"a": {"extra": 1}}}, "by_name[...].extra"),
    ],
)
def test_an_unknown_field_is_refused_at_every_level(data: Any, where: str) -> None:
    err = invalid(data)
    assert err.where == where
    assert "unknown field" in err.what


def test_lenient_conversion_takes_text_for_numbers_but_keeps_the_bounds() -> None:
    assert convert({"inner": {"n": "3"}}, Outer, strict=False).inner.n == 3
    assert invalid({"inner": {"n": "0"}}, strict=False).where == "inner.n"
    assert invalid({"extra": "1"}, strict=False).where == "extra"  # unknown: still refused


def test_an_int_is_a_float_and_nan_stays_nan() -> None:
    # JSON writes 1.0 as 1 in many encoders; the loaders refuse NaN before this point.
    assert convert({"ratio": 1}, Outer).ratio == 1.0
    assert math.isnan(convert({"ratio": math.nan}, Outer).ratio)


def test_paths_times_and_plain_values_round_trip() -> None:
    doc = convert(
        {"inner": {"where": "/var/lib/x"}, "at": "2026-01-02T03:04:05Z"}, Outer, whole="outer"
    )
    assert doc.inner.where == Path("/var/lib/x")
    assert doc.at == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    out = plain(doc)
    assert out["inner"] == {"n": 1, "where": "/var/lib/x"}
    assert out["at"] == "2026-01-02T03:04:05Z"
    assert convert(out, Outer) == doc
    assert "at" in out
    assert "at" not in plain(Outer(), omit_none=True)
    assert "where" not in plain(Outer(), omit_none=True)["inner"]


def test_documents_are_frozen_and_replace_copies() -> None:
    doc = Outer()
    with pytest.raises(AttributeError):
        doc.ratio = 2.0  # type: ignore[misc]  # what mypy refuses must fail at run time too
    changed = replace(doc, ratio=0.25)
    assert (changed.ratio, doc.ratio) == (0.25, 0.5)
    assert fields(Outer) == ("inner", "items", "by_name", "ratio", "at")


def test_a_deeply_nested_document_is_an_error_not_a_crash() -> None:
    deep: Any = {"n": 1}
    for _ in range(50_000):
        deep = [deep]
    with pytest.raises(Invalid):
        convert({"items": deep}, Outer)


def _patterns(info: msgspec.inspect.Type, seen: set[int]) -> list[str]:
    """Every string pattern inside a type, Struct fields and containers included."""
    if id(info) in seen:
        return []
    seen.add(id(info))
    if isinstance(info, msgspec.inspect.StrType):
        return [info.pattern] if info.pattern is not None else []
    inner: list[msgspec.inspect.Type] = []
    if isinstance(info, msgspec.inspect.StructType):
        inner = [f.type for f in info.fields]
    elif isinstance(info, msgspec.inspect.UnionType):
        inner = list(info.types)
    elif isinstance(info, msgspec.inspect.DictType):
        inner = [info.key_type, info.value_type]
    elif isinstance(info, (msgspec.inspect.ListType, msgspec.inspect.VarTupleType)):
        inner = [info.item_type]
    return [p for t in inner for p in _patterns(t, seen)]


def test_no_document_pattern_lets_a_trailing_newline_through() -> None:
    # re's ``$`` matches before a final "\n": "digits\n" would pass as a bundle name.
    for module in ("signing.manifest", "signing.trustdoc", "signing.fleetdoc", "signing.state"):
        importlib.import_module(f"wasmgate.{module}")
    for module in ("runtime.ops.config", "runtime.fleet.state", "runtime.fleet.status"):
        importlib.import_module(f"wasmgate.{module}")
    importlib.import_module("wasmgate.device_profiles.schema")
    structs = [
        cls
        for name in sorted(sys.modules)
        if name.startswith("wasmgate.")
        for cls in vars(sys.modules[name]).values()
        if isinstance(cls, type) and issubclass(cls, msgspec.Struct) and cls is not Document
    ]
    assert len(structs) > 50  # the manifest, trust, fleet, state, profile and config trees
    patterns = {p for s in structs for p in _patterns(msgspec.inspect.type_info(s), set())}
    assert patterns
    for pattern in patterns:
        assert pattern.endswith("\\Z"), pattern
