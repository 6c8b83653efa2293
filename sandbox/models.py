"""The shared tensor/model protocol between the sandbox, the runtime and the bridges.

Invariants:
- ``TensorSpec.datatype`` is always a KServe V2 datatype name (``DATATYPES``); ``-1`` in a
  shape marks a dynamic dimension.
- ``ModelHandle.infer`` is blocking and thread-safe; inputs arrive in ``inputs`` order and
  outputs come back in ``outputs`` order.
- A ``ModelProvider`` decides what one guest may load: the daemon's provider only returns
  models the bundle declares (raw bytes only when their sha256 matches a declared model).
- This module imports numpy and stdlib only; ``wasmgate.runtime`` implements these
  protocols, the sandbox merely calls them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

__all__ = [
    "DATATYPES",
    "ModelHandle",
    "ModelProvider",
    "TensorSpec",
    "datatype_of",
    "numpy_dtype",
]

# KServe V2 datatype name -> numpy dtype (BYTES is an object array of bytes).
_NUMPY: dict[str, np.dtype[np.generic]] = {
    "FP32": np.dtype(np.float32),
    "FP16": np.dtype(np.float16),
    "FP64": np.dtype(np.float64),
    "INT8": np.dtype(np.int8),
    "UINT8": np.dtype(np.uint8),
    "INT16": np.dtype(np.int16),
    "UINT16": np.dtype(np.uint16),
    "INT32": np.dtype(np.int32),
    "UINT32": np.dtype(np.uint32),
    "INT64": np.dtype(np.int64),
    "UINT64": np.dtype(np.uint64),
    "BOOL": np.dtype(np.bool_),
    "BYTES": np.dtype(np.object_),
}

DATATYPES: frozenset[str] = frozenset({*_NUMPY, "BF16"})


def numpy_dtype(datatype: str) -> np.dtype[np.generic]:
    """Return the numpy dtype for a KServe V2 datatype name (``KeyError`` if numpy has none).

    BF16 has no numpy dtype; callers carry it as raw 2-byte words.
    """
    return _NUMPY[datatype]


def datatype_of(dtype: npt.DTypeLike) -> str:
    """Return the KServe V2 datatype name for a numpy dtype (``KeyError`` if unsupported)."""
    want = np.dtype(dtype)
    for name, known in _NUMPY.items():
        if known == want:
            return name
    raise KeyError(f"no KServe V2 datatype for numpy dtype {want}")


@dataclass(frozen=True)
class TensorSpec:
    """One named input or output of a model.

    ``datatype`` is a KServe V2 name (FP32 FP16 BF16 FP64 INT8 UINT8 INT16 INT32 INT64 BOOL
    BYTES); ``shape`` uses ``-1`` for a dynamic (batch) dimension.
    """

    name: str
    datatype: str
    shape: tuple[int, ...]


@runtime_checkable
class ModelHandle(Protocol):
    """A loaded model that wasi-nn ``compute`` and the HTTP/MQTT bridges call."""

    name: str
    inputs: Sequence[TensorSpec]
    outputs: Sequence[TensorSpec]

    def infer(self, inputs: Sequence[npt.NDArray[Any]]) -> list[npt.NDArray[Any]]:
        """Run the model: blocking, thread-safe; inputs/outputs in spec order."""
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
