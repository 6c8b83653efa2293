"""Operator variables: the ``params`` a signed manifest lets a site override, and the check
every operator value passes before it can reach the guest.

A manifest's ``[variables.<name>]`` declares one overridable param: its type (``int``,
``float``, ``bool``, ``string``, ``enum``), its range (``min``/``max``, required for numbers),
its allowed ``values`` (enum), and its default (``default``, else the ``[params]`` value of
the same name). Params not declared here are signed values no operator can change.

Invariants:
- :meth:`Variable.check` is the one validation of a value, wherever it comes from (config,
  management API, MQTT): exact JSON/TOML type (no ``"3"`` for 3, no ``true`` for 1), finite
  numbers inside ``[min, max]``, bounded strings, enum members only.
- A declaration is itself checked when the manifest is parsed: its default passes
  :meth:`check`, and a ``[params]`` value of the same name equals it.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

import msgspec

from wasmgate.typed import Document

VarType = Literal["int", "float", "bool", "string", "enum"]
# Converted strictly (``convert``): each JSON value keeps its own type, so ``true`` stays a
# bool, ``3`` an int and ``3.0`` a float (check_declarations compares the types).
Value = bool | int | float | str
Number = int | float
MAX_STRING = 4096
_MAX_INT = 2**53  # what every JSON reader keeps exactly


class VariableError(ValueError):
    """A value an operator may not set (its message names the variable and the reason)."""


class Variable(Document, kw_only=True):
    """One overridable param (``[variables.<name>]`` in bundle.toml)."""

    type: VarType
    min: Number | None = None
    max: Number | None = None
    values: Annotated[list[str], msgspec.Meta(min_length=1, max_length=256)] | None = None
    max_length: Annotated[int, msgspec.Meta(ge=1, le=MAX_STRING)] = 256
    default: Value | None = None
    description: Annotated[str, msgspec.Meta(max_length=500)] = ""

    def __post_init__(self) -> None:
        numeric = self.type in ("int", "float")
        if numeric and (self.min is None or self.max is None):
            raise ValueError(f"a {self.type} variable needs min and max")
        if not numeric and (self.min is not None or self.max is not None):
            raise ValueError(f"min/max only apply to int and float, not {self.type}")
        if numeric and not _finite(self.min, self.max):
            raise ValueError("min and max must be finite")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError("min is above max")
        if (self.type == "enum") != (self.values is not None):
            raise ValueError("values is required for an enum and only for an enum")

    def check(self, name: str, value: object) -> bool | int | float | str:
        """``value`` if this variable may take it, else :class:`VariableError`."""
        checker = getattr(self, f"_check_{self.type}")
        ok: bool | int | float | str = checker(name, value)
        return ok

    def _check_int(self, name: str, value: object) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or abs(value) > _MAX_INT:
            raise VariableError(f"{name}: want an integer, got {_show(value)}")
        return int(self._in_range(name, value))

    def _check_float(self, name: str, value: object) -> float:
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise VariableError(f"{name}: want a number, got {_show(value)}")
        if isinstance(value, int) and abs(value) > _MAX_INT:
            raise VariableError(f"{name}: {_show(value)} is out of range")
        if not math.isfinite(value):
            raise VariableError(f"{name}: want a finite number, got {_show(value)}")
        return float(self._in_range(name, value))

    def _check_bool(self, name: str, value: object) -> bool:
        if not isinstance(value, bool):
            raise VariableError(f"{name}: want true or false, got {_show(value)}")
        return value

    def _check_string(self, name: str, value: object) -> str:
        if not isinstance(value, str):
            raise VariableError(f"{name}: want a string, got {_show(value)}")
        if len(value) > self.max_length or "\0" in value:
            raise VariableError(f"{name}: want at most {self.max_length} characters, no NUL")
        return value

    def _check_enum(self, name: str, value: object) -> str:
        allowed = self.values or []
        if not isinstance(value, str) or value not in allowed:
            raise VariableError(f"{name}: want one of {allowed}, got {_show(value)}")
        return value

    def _in_range(self, name: str, value: float) -> float:
        lo, hi = self.min, self.max
        if lo is not None and hi is not None and not lo <= value <= hi:
            raise VariableError(f"{name}: {value} is outside [{lo}, {hi}]")
        return value


def _finite(*numbers: float | None) -> bool:
    return all(n is None or (math.isfinite(n) and abs(n) <= _MAX_INT) for n in numbers)


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_declarations(
    variables: dict[str, Variable], params: dict[str, bool | int | float | str]
) -> dict[str, bool | int | float | str]:
    """Each variable's default (declared, else its ``[params]`` value), checked; ValueError."""
    defaults: dict[str, bool | int | float | str] = {}
    for name, var in variables.items():
        signed = params.get(name)
        default = var.default if var.default is not None else signed
        if default is None:
            raise ValueError(f"variables.{name}: needs a default (or a [params] value)")
        if signed is not None and (type(signed) is not type(default) or signed != default):
            raise ValueError(f"variables.{name}: default differs from params.{name}")
        try:
            defaults[name] = var.check(name, default)
        except VariableError as e:
            raise ValueError(f"variables.{e}") from e
    return defaults
