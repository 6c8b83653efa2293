"""Variable declarations in the manifest and the one check every operator value passes."""

from __future__ import annotations

import math
from typing import Any

import pytest

from wasmgate.signing.variables import Variable, VariableError, check_declarations
from wasmgate.typed import Invalid, convert


def var(**kw: Any) -> Variable:
    return convert(kw, Variable)


@pytest.mark.parametrize(
    ("decl", "good", "bad"),
    [
        ({"type": "int", "min": -5, "max": 5}, [-5, 0, 5], [6, -6, 1.0, True, "1", None, 2**60]),
        (
            {"type": "float", "min": 0, "max": 1},
            [0, 0.5, 1, 1.0],
            [math.nan, math.inf, -math.inf, 1.0000001, 10**400, False, "0.5", [0.5]],
        ),
        ({"type": "bool"}, [True, False], [0, 1, "true", None]),
        ({"type": "string", "max_length": 3}, ["", "abc"], ["abcd", "a\0", 3, None]),
        ({"type": "enum", "values": ["low", "high"]}, ["low", "high"], ["LOW", "", 0, None]),
    ],
)
def test_check_accepts_exactly_the_declared_values(
    decl: dict[str, Any], good: list[object], bad: list[object]
) -> None:
    v = var(**decl)
    for value in good:
        assert v.check("x", value) == value
    for value in bad:
        with pytest.raises(VariableError, match=r"^x: "):
            v.check("x", value)


@pytest.mark.parametrize(
    "decl",
    [
        {"type": "int"},  # numbers need a range
        {"type": "float", "min": 0},
        {"type": "float", "min": 1, "max": 0},
        {"type": "float", "min": 0, "max": math.inf},
        {"type": "bool", "min": 0, "max": 1},
        {"type": "enum"},
        {"type": "string", "values": ["a"]},
        {"type": "int", "min": "0", "max": 1},
        {"type": "list"},
        {"type": "int", "min": 0, "max": 1, "secret": True},
        {"type": "int", "min": True, "max": 1},  # a bool is not a number
        {"type": "string", "max_length": True},
        {"type": "string", "max_length": 8.0},
        {"type": "enum", "values": []},
        {"type": "enum", "values": ["a", 1]},
        {"type": "bool", "default": [True]},
    ],
)
def test_bad_declarations_are_refused(decl: dict[str, Any]) -> None:
    with pytest.raises(Invalid):
        var(**decl)


def test_defaults_come_from_params_and_must_agree_and_fit() -> None:
    decl = {"t": var(type="float", min=0, max=1)}
    assert check_declarations(decl, {"t": 0.5}) == {"t": 0.5}
    with pytest.raises(ValueError, match="needs a default"):
        check_declarations(decl, {})
    with pytest.raises(ValueError, match="outside"):
        check_declarations(decl, {"t": 2.0})
    with_default = {"t": var(type="float", min=0, max=1, default=0.25)}
    assert check_declarations(with_default, {}) == {"t": 0.25}
    with pytest.raises(ValueError, match=r"differs from params\.t"):
        check_declarations(with_default, {"t": 0.5})
    with pytest.raises(ValueError, match="differs"):  # same number, other type
        check_declarations({"n": var(type="int", min=0, max=9, default=1)}, {"n": True})
