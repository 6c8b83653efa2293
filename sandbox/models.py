"""The tensor and model contract shared by the sandbox, the runtime and the bridges.

Defined once, here (the lowest layer that needs it):
- ``DATATYPES``: every KServe V2 datatype name and the numpy dtype its arrays have (BF16 is
  ``ml_dtypes.bfloat16``, BYTES an object array of ``bytes``);
- ``TensorSpec``: one named input or output; ``-1`` in a shape marks a dynamic dimension;
- ``validate(specs, inputs)``: the one check of request tensors against a model's inputs
  (the service calls it once per request; wasi-nn checks each guest tensor as it is set);
  with ``text`` (models), a BYTES input leaves it as text (an object array of ``str``): a
  model's BYTES tensor is a string tensor (ONNX ``tensor(string)``), which ONNX Runtime
  reads only from ``str`` (handed ``bytes``, its string ops see ``"b'12'"``: ``Cast``
  fails with ``stoll``);
- ``ModelHandle.infer(inputs, *, deadline)``: blocking and thread-safe; inputs arrive in
  ``inputs`` order (already validated) and outputs come back in ``outputs`` order. A run
  still going at ``deadline`` (a ``time.monotonic()`` value) is stopped if the backend can
  stop it; a run that has not started by then never starts. Nothing in the contract needs a
  thread: a tiny model may be called inline.
- A ``ModelProvider`` decides what one guest may load: the daemon's provider only returns
  models the bundle declares (raw bytes only when their sha256 matches a declared model).
This module imports numpy, ml_dtypes, stdlib and the datatype names of
``wasmgate.signing.manifest`` (the one list); ``wasmgate.runtime`` implements these
protocols, the sandbox merely calls them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

import msgspec
import numpy as np
import numpy.typing as npt

from wasmgate.signing.manifest import DATATYPE_NAMES

__all__ = [
    "DATATYPES",
    "InputMismatch",
    "ModelHandle",
    "ModelProvider",
    "NoModels",
    "TensorSpec",
    "as_text",
    "datatype_of",
    "numpy_dtype",
    "shape_matches",
    "validate",
]

Array = npt.NDArray[Any]

_EAGER: Mapping[str, np.dtype[Any]] = MappingProxyType(
    {
        "BOOL": np.dtype(np.bool_),
        "UINT8": np.dtype(np.uint8),
        "UINT16": np.dtype(np.uint16),
        "UINT32": np.dtype(np.uint32),
        "UINT64": np.dtype(np.uint64),
        "INT8": np.dtype(np.int8),
        "INT16": np.dtype(np.int16),
        "INT32": np.dtype(np.int32),
        "INT64": np.dtype(np.int64),
        "FP16": np.dtype(np.float16),
        "FP32": np.dtype(np.float32),
        "FP64": np.dtype(np.float64),
        "BYTES": np.dtype(np.object_),
    }
)
_ORDER = DATATYPE_NAMES
"""The KServe V2 names in the order of the spec's table (BF16 before BYTES)."""
if set(_ORDER) != {*_EAGER, "BF16"}:  # one table: a name added on one side only is a bug
    raise RuntimeError(f"datatype tables differ: {sorted(set(_ORDER) ^ {*_EAGER, 'BF16'})}")


def _bfloat16() -> np.dtype[Any]:
    # Imported on first use: ml_dtypes cost ~4 ms and ~1.6 MB of every daemon start, and
    # only BF16 tensors need it (an array of that dtype exists only once it is imported).
    import ml_dtypes  # noqa: PLC0415

    bf16: np.dtype[Any] = np.dtype(ml_dtypes.bfloat16)
    return bf16


class _Datatypes(Mapping[str, np.dtype[Any]]):
    """`DATATYPES`: read-only, in the KServe order, BF16's dtype made on first use."""

    __slots__ = ()

    def __getitem__(self, name: str) -> np.dtype[Any]:
        found = _EAGER.get(name)
        if found is not None:
            return found
        if name == "BF16":
            return _bfloat16()
        raise KeyError(name)

    def __contains__(self, name: object) -> bool:
        return name in _EAGER or name == "BF16"

    def __iter__(self) -> Iterator[str]:
        return iter(_ORDER)

    def __len__(self) -> int:
        return len(_ORDER)


DATATYPES: Mapping[str, np.dtype[Any]] = _Datatypes()
"""KServe V2 datatype name -> numpy dtype of the arrays that carry it."""

_NAMES: Mapping[np.dtype[Any], str] = MappingProxyType(
    {dtype: name for name, dtype in _EAGER.items() if name != "BYTES"}
)
"""Numeric dtype -> name, without BF16 (`datatype_of` finds that one)."""


class InputMismatch(ValueError):
    """Request tensors that do not fit the model's inputs; the message names the tensor."""


def numpy_dtype(datatype: str) -> np.dtype[Any]:
    """The numpy dtype for a KServe V2 datatype name (``KeyError`` if unknown)."""
    return DATATYPES[datatype]


def datatype_of(dtype: npt.DTypeLike) -> str:
    """The KServe V2 datatype name for a numpy dtype (``KeyError`` if it has none).

    Object, ``bytes`` and ``str`` arrays are all BYTES.
    """
    want = np.dtype(dtype)
    if want.kind in "OSU":
        return "BYTES"
    name = _NAMES.get(want)
    if name is None and want.name == "bfloat16" and want == _bfloat16():
        return "BF16"
    if name is None:
        raise KeyError(f"no KServe V2 datatype for numpy dtype {want}")
    return name


def shape_matches(spec: Sequence[int], shape: Sequence[int]) -> bool:
    """True when ``shape`` has the spec's rank and every fixed (non ``-1``) dimension."""
    if len(spec) != len(shape):
        return False
    # A loop, not all(<genexpr>): 0.36 vs 0.61 us for a rank-2 tensor, on every request.
    for s, d in zip(spec, shape, strict=True):  # noqa: SIM110
        if s not in (d, -1):
            return False
    return True


class TensorSpec(msgspec.Struct, frozen=True):
    """One named input or output of a model.

    ``datatype`` is a ``DATATYPES`` name; ``shape`` uses ``-1`` for a dynamic dimension.
    """

    name: str
    datatype: str
    shape: tuple[int, ...]


def validate(
    specs: Sequence[TensorSpec],
    inputs: Mapping[str, Array],
    model: str = "model",
    *,
    text: bool = False,
) -> list[Array]:
    """The request's tensors in spec order; `InputMismatch` when a name, datatype or shape
    does not fit (unknown and missing names are listed, the rest names the tensor).

    ``text``: BYTES inputs come back as text (`as_text`), as a model's string tensors need;
    an adapter's payloads stay bytes."""
    if len(inputs) == len(specs):  # the usual request: every name given, nothing else
        try:
            ordered = [np.asarray(inputs[spec.name]) for spec in specs]
        except KeyError:
            pass  # a name is wrong: the lists below say which
        else:
            return _checked(specs, ordered, text=text)
    by_name = {spec.name: spec for spec in specs}
    unknown = sorted(set(inputs) - set(by_name))
    if unknown:
        raise InputMismatch(
            f"{model} has no input {', '.join(map(repr, unknown))}; "
            f"its inputs are {sorted(by_name)}"
        )
    missing = [spec.name for spec in specs if spec.name not in inputs]
    if missing:
        raise InputMismatch(f"{model} needs input {', '.join(map(repr, missing))}")
    return _checked(specs, [np.asarray(inputs[spec.name]) for spec in specs], text=text)


def _checked(specs: Sequence[TensorSpec], ordered: list[Array], *, text: bool) -> list[Array]:
    for index, (spec, array) in enumerate(zip(specs, ordered, strict=True)):
        _check(spec, array)
        if text and spec.datatype == "BYTES":
            ordered[index] = as_text(array, spec.name)
    return ordered


def as_text(array: Array, name: str) -> Array:
    """A BYTES tensor as an object array of ``str`` (UTF-8); `InputMismatch` naming the
    input and the element when one is not UTF-8 text."""
    flat = array.ravel()
    result = np.empty(flat.shape, dtype=np.object_)
    for index, item in enumerate(flat):
        if isinstance(item, str):
            result[index] = item
            continue
        try:
            result[index] = item.decode()  # bytes (or a subclass, as numpy's bytes_)
        except (AttributeError, UnicodeDecodeError):
            raise InputMismatch(
                f"input {name!r}: BYTES element {index} is not UTF-8 text "
                "(the model's input is a string tensor)"
            ) from None
    return result.reshape(array.shape)


def _check(spec: TensorSpec, array: Array) -> None:
    given = _NAMES.get(array.dtype)  # the usual numeric dtype, without `datatype_of`'s np.dtype()
    if given is None:
        try:
            given = datatype_of(array.dtype)
        except KeyError:
            given = str(array.dtype)
    if given != spec.datatype:
        raise InputMismatch(f"input {spec.name!r}: expected datatype {spec.datatype}, got {given}")
    if not shape_matches(spec.shape, array.shape):
        raise InputMismatch(
            f"input {spec.name!r}: expected shape {list(spec.shape)} (-1 = any), "
            f"got {list(array.shape)}"
        )


@runtime_checkable
class ModelHandle(Protocol):
    """A loaded model that wasi-nn ``compute`` and the service call."""

    name: str
    inputs: Sequence[TensorSpec]
    outputs: Sequence[TensorSpec]

    def infer(self, inputs: Sequence[Array], *, deadline: float | None = None) -> list[Array]:
        """Run the model on validated inputs (spec order); blocking, thread-safe.

        ``deadline`` (``time.monotonic()``): past it the run does not start, and a running
        one is stopped where the backend allows; either way the call raises instead of
        returning outputs. ``None``: no deadline.
        """
        ...


@runtime_checkable
class ModelProvider(Protocol):
    """What one request's guest may load (``load_by_name`` and ``load``)."""

    def by_name(self, name: str) -> ModelHandle | None:
        """Return the model registered under ``name``, or ``None`` if unknown."""
        ...

    def from_bytes(self, data: bytes, encoding: str, target: str) -> ModelHandle | None:
        """Return a model for raw model bytes, or ``None`` if they may not be loaded.

        ``encoding`` is a lower-case wasi-nn encoding name (``onnx``, ``tensorflowlite``, ...)
        and ``target`` one of ``cpu``, ``gpu``, ``tpu``. The daemon accepts the bytes only if
        their sha256 is a model the bundle declares; ``run-guest`` loads them.
        """
        ...


class NoModels:
    """A ``ModelProvider`` that provides nothing (load-time probe, model-less adapters)."""

    def by_name(self, name: str) -> ModelHandle | None:  # noqa: ARG002
        """No model has a name."""
        return None

    def from_bytes(self, data: bytes, encoding: str, target: str) -> ModelHandle | None:  # noqa: ARG002
        """No bytes may be loaded."""
        return None
