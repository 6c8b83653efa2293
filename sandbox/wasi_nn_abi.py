"""The wasi-nn core ABI as wasmgate implements it: errno values, encodings, tensor types and
the checks of a guest's tensor record (shared by every wasi-nn host function).

Invariants (the sandbox contract of ``docs/design.md``): the tensor record is 20 bytes with the
type read as *one byte* at offset 8; a declared type is accepted under either numbering
(current witx or pre-2023 legacy) only if it names the model's real input type; the byte
length must equal ``prod(dims) * itemsize``.
"""

from __future__ import annotations

import functools
import math
import struct
from typing import Any

import numpy as np

from wasmgate.sandbox.memory import GuestMemory
from wasmgate.sandbox.models import TensorSpec, numpy_dtype, shape_matches


class NnErrno:
    """witx ``nn_errno`` values."""

    SUCCESS = 0
    INVALID_ARGUMENT = 1
    INVALID_ENCODING = 2
    MISSING_MEMORY = 3
    BUSY = 4
    RUNTIME_ERROR = 5
    UNSUPPORTED_OPERATION = 6
    TOO_LARGE = 7
    NOT_FOUND = 8
    END_OF_SEQUENCE = 100
    """WasmEdge's extension: ``compute_single`` has no further step to run."""


ENCODINGS = {1: "onnx", 4: "tensorflowlite", 5: "autodetect"}
UNSUPPORTED_ENCODINGS = {0: "openvino", 2: "tensorflow", 3: "pytorch"}
TARGETS = {0: "cpu", 1: "gpu", 2: "tpu"}
_CURRENT_TYPES = {0: "FP16", 1: "FP32", 2: "FP64", 3: "UINT8", 4: "INT32", 5: "INT64"}
_LEGACY_TYPES = {0: "FP16", 1: "FP32", 2: "UINT8", 3: "INT32"}
TENSOR = struct.Struct("<IIB3xII")
MAX_RANK = 16
_DIMS = [struct.Struct(f"<{n}I") for n in range(MAX_RANK + 1)]
F32 = 1  # wasi-nn tensor type FP32 (both numberings)
STRING_TENSOR = (
    "the model's tensor is a string tensor (BYTES): wasi-nn has no string tensor type, "
    "so an adapter cannot pass or read it; call the model over KServe V2 instead"
)
"""Why a guest is refused a model's BYTES input or output (neither ABI numbers one)."""
_E = NnErrno


class NnError(Exception):
    """An errno with the reason logged for the operator."""

    def __init__(self, errno: int, reason: str) -> None:
        """``errno`` goes back to the guest, ``reason`` into the request log."""
        super().__init__(reason)
        self.errno = errno


def checked(
    mem: GuestMemory, spec: TensorSpec, fields: tuple[int, int, int, int, int]
) -> tuple[tuple[int, ...], np.dtype[Any]]:
    """Check a tensor (dims pointer, rank, type, data pointer, length) against ``spec``;
    the dims and the little-endian dtype to read the data with."""
    dims_ptr, rank, ty, _data_ptr, data_len = fields
    if not 0 <= rank <= MAX_RANK:  # the fused call's rank is a signed i32
        raise NnError(_E.INVALID_ARGUMENT, f"tensor rank {rank} outside 0..{MAX_RANK}")
    dims = _DIMS[rank].unpack(mem.read(dims_ptr, 4 * rank))
    dtype = _check_type(ty, spec.datatype)
    _check_shape(dims, spec.shape)
    if math.prod(dims) * dtype.itemsize != data_len:
        need = math.prod(dims) * dtype.itemsize
        raise NnError(_E.INVALID_ARGUMENT, f"data is {data_len} bytes, dims need {need}")
    return dims, dtype


def encoding_of(enc: int) -> str:
    if enc in ENCODINGS:
        return ENCODINGS[enc]
    name = UNSUPPORTED_ENCODINGS.get(enc, f"#{enc & 0xFFFF_FFFF}")
    raise NnError(_E.INVALID_ENCODING, f"graph encoding {name} is not supported")


@functools.cache  # only accepted pairs are kept (a refusal raises): a few types x models
def _check_type(ty: int, datatype: str) -> np.dtype[Any]:
    if datatype == "BYTES":
        raise NnError(_E.INVALID_ARGUMENT, STRING_TENSOR)
    accepted = {_CURRENT_TYPES.get(ty), _LEGACY_TYPES.get(ty)}
    if datatype == "INT8" and "UINT8" in accepted:
        accepted.add("INT8")
    if datatype not in accepted:
        named = " or ".join(sorted({t for t in accepted if t is not None})) or "unknown"
        msg = f"tensor type {named} (wasi-nn type {ty}) does not match the model's {datatype}"
        raise NnError(_E.INVALID_ARGUMENT, msg)
    little: np.dtype[Any] = numpy_dtype(datatype).newbyteorder("<")  # Any in numpy 2.3+'s stubs
    return little  # under mypy's 3.10 (they use typing.Self)


def _check_shape(dims: tuple[int, ...], shape: tuple[int, ...]) -> None:
    if not shape_matches(shape, dims):
        raise NnError(
            _E.INVALID_ARGUMENT, f"dims {list(dims)} do not fit model shape {list(shape)}"
        )
