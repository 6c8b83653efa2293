"""Tensor data of the KServe V2 protocol: a tensor's declared shape and datatype (checked
alike for every transport), JSON ``data`` lists and raw binary tensors.

Strict on purpose: integers are never truncated from floats or wrapped on overflow, BOOL
bytes must be 0 or 1, byte counts must match the shape exactly. Every error names the
tensor (``label``) and says expected vs got.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from wasmgate.runtime.errors import BadRequest
from wasmgate.runtime.protocol.bulkjson import Doubles
from wasmgate.sandbox.models import DATATYPES, datatype_of

Array = npt.NDArray[Any]

_LENGTH = struct.Struct("<I")
# JSON number kinds a target dtype accepts without silent loss (numpy dtype.kind letters).
_JSON_KINDS = {"b": "b", "i": "iu", "u": "iu", "f": "iuf"}
# The largest finite value of each float type narrower than a JSON number (`_as_float`).
_FLOAT_MAX = {np.dtype(t): float(np.finfo(t).max) for t in (np.float16, np.float32)}


MAX_RANK = 16
MAX_ELEMENTS = 2**32
"""Parsing limits on a declared shape (whatever the body holds): numpy refuses larger ones
with an error that would otherwise surface as a 500. Zero dims count as 1 here, because
numpy checks the product of the others even for an empty array."""


def checked_shape(shape: object, what: str) -> tuple[int, ...]:
    """A declared tensor shape (any transport's): non-negative ints within the limits."""
    if isinstance(shape, list | tuple):
        # A loop, not all() over a generator: every request's every tensor comes here.
        for d in shape:
            if not isinstance(d, int) or isinstance(d, bool) or d < 0:
                break
        else:
            return _within_limits(tuple(shape), what)
    raise BadRequest(f"{what}: 'shape' must be a list of non-negative integers, got {shape!r}")


def _within_limits(shape: tuple[int, ...], what: str) -> tuple[int, ...]:
    if len(shape) > MAX_RANK:
        raise BadRequest(f"{what}: 'shape' has {len(shape)} dimensions, at most {MAX_RANK}")
    elements = 1
    for d in shape:  # at most MAX_RANK of them
        elements *= d or 1
    if elements > MAX_ELEMENTS:
        shown = repr(list(shape))[:100]
        raise BadRequest(
            f"{what}: 'shape' {shown} is out of range (at most {MAX_ELEMENTS} elements)"
        )
    return shape


def checked_datatype(datatype: object, what: str) -> str:
    """A V2 datatype name (any transport's), else BadRequest."""
    if not isinstance(datatype, str) or datatype not in DATATYPES:
        raise BadRequest(f"{what}: unknown datatype {datatype!r}")
    return datatype


def array_datatype(array: Array) -> str:
    """The V2 datatype name of a numpy array (``str``/``bytes`` arrays are BYTES)."""
    try:
        return datatype_of(array.dtype)
    except KeyError:
        raise BadRequest(f"numpy dtype {array.dtype} has no KServe V2 datatype") from None


def element_count(shape: Sequence[int]) -> int:
    return math.prod(shape)


def _flatten(data: Any) -> Iterator[Any]:
    if isinstance(data, list):
        for item in data:
            yield from _flatten(item)
    else:
        yield data


def _json_bytes(data: Any, label: str) -> Array:
    items: list[bytes] = []
    for item in _flatten(data):
        if isinstance(item, bytes):  # gRPC's bytes_contents (JSON never gives bytes)
            items.append(item)
            continue
        if not isinstance(item, str):
            raise BadRequest(f"{label}: BYTES elements in JSON must be strings, got {item!r}")
        try:
            items.append(item.encode())
        except UnicodeEncodeError:  # a lone surrogate ("\ud800"), which a JSON parser may let by
            raise BadRequest(f"{label}: BYTES element {len(items)} is not valid text") from None
    result = np.empty(len(items), dtype=np.object_)
    result[:] = items
    return result


def _in_range(raw: Array, dtype: np.dtype[Any]) -> bool:
    if raw.size == 0 or dtype.kind not in "iu":
        return True
    info = np.iinfo(dtype)
    return bool(int(raw.min()) >= info.min and int(raw.max()) <= info.max)


def _exact_ints(data: Any, raw: Array, datatype: str, label: str) -> Array:
    # numpy turns [0, 2**64 - 1] into float64; Python ints convert exactly one by one.
    items = list(_flatten(data))
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in items):
        sample = raw.ravel()[:3].tolist()
        raise BadRequest(f"{label}: {datatype} data cannot hold values like {sample}")
    lo, hi = min(items), max(items)
    i64, u64 = np.iinfo(np.int64), np.iinfo(np.uint64)
    if lo < i64.min or hi > u64.max or (lo < 0 and hi > i64.max):
        raise BadRequest(f"{label}: {datatype} data cannot hold values like {[lo, hi]}")
    return np.array(items, dtype=np.uint64 if hi > i64.max else np.int64)


def _json_numbers(data: Any, datatype: str, dtype: np.dtype[Any], label: str) -> Array:
    try:
        raw = np.array(data)
    except ValueError:
        raise BadRequest(f"{label}: 'data' is not a regular nested list") from None
    if raw.size == 0:
        return raw.astype(dtype).ravel()
    if dtype.kind in "iu" and raw.dtype.kind in "fO":
        raw = _exact_ints(data, raw, datatype, label)
    accepted = _JSON_KINDS.get(dtype.kind, "")
    if dtype.kind == "b" and raw.dtype.kind in "iu" and set(np.unique(raw).tolist()) <= {0, 1}:
        accepted = raw.dtype.kind
    if raw.dtype.kind not in accepted or not _in_range(raw, dtype):
        sample = raw.ravel()[:3].tolist()
        raise BadRequest(f"{label}: {datatype} data cannot hold values like {sample}")
    if dtype.kind == "f":
        # Integers reach a float tensor through float64, as every number read by
        # `bulkjson` does: the same request gives the same tensor on both paths.
        return _as_float(raw.astype(np.float64, copy=False), dtype, datatype, label)
    return raw.astype(dtype).ravel()


def _as_float(raw: Array, dtype: np.dtype[Any], datatype: str, label: str) -> Array:
    """``raw`` (float64) as a flat ``dtype`` array; a finite number beyond the type's range
    is refused, not turned into an infinity."""
    flat = raw.ravel()
    limit = _FLOAT_MAX.get(dtype)
    # Every number within the largest finite value: the cast cannot overflow (a NaN or an
    # infinity, which the stdlib path reads, fails this and gets the close look).
    if limit is None or not flat.size or np.abs(flat).max() <= limit:
        return flat.astype(dtype)
    with np.errstate(over="ignore"):
        cast = flat.astype(dtype)
    over = np.isinf(cast) & np.isfinite(flat)
    if over.any():
        sample = flat[over][:3].tolist()
        raise BadRequest(f"{label}: {datatype} data cannot hold values like {sample}")
    return cast


def _check_count(flat: Array, shape: Sequence[int], label: str, unit: str) -> None:
    want = element_count(shape)
    if flat.size != want:
        raise BadRequest(
            f"{label}: shape {list(shape)} needs {want} elements, {unit} has {flat.size}"
        )


def decode_json(
    data: Any,
    datatype: str,
    dtype: np.dtype[Any],
    shape: Sequence[int],
    label: str,
    *,
    unit: str = "'data'",
) -> Array:
    """A JSON ``data`` value (nested or flat, row-major) as an array of ``shape``; gRPC's
    typed contents (a flat list) decode here too, named ``unit`` in errors."""
    if datatype == "BF16":
        raise BadRequest(f"{label}: BF16 travels as binary data only (binary_data_size)")
    if isinstance(data, Doubles):  # a flat list of numbers for a float tensor: see bulkjson
        flat = _as_float(data.values, dtype, datatype, label)
    elif datatype == "BYTES":
        flat = _json_bytes(data, label)
    else:
        flat = _json_numbers(data, datatype, dtype, label)
    _check_count(flat, shape, label, unit)
    return flat.reshape(tuple(shape))


def _binary_bytes(chunk: bytes, shape: Sequence[int], label: str) -> Array:
    items: list[bytes] = []
    offset = 0
    while offset < len(chunk):
        if offset + _LENGTH.size > len(chunk):
            raise BadRequest(f"{label}: BYTES data ends inside a 4-byte length prefix")
        (length,) = _LENGTH.unpack_from(chunk, offset)
        offset += _LENGTH.size
        if offset + length > len(chunk):
            raise BadRequest(
                f"{label}: BYTES element {len(items)} claims {length} bytes, "
                f"{len(chunk) - offset} left"
            )
        items.append(chunk[offset : offset + length])
        offset += length
    flat = np.empty(len(items), dtype=np.object_)
    flat[:] = items
    _check_count(flat, shape, label, "the binary data")
    return flat.reshape(tuple(shape))


def decode_binary(
    chunk: bytes, datatype: str, dtype: np.dtype[Any], shape: Sequence[int], label: str
) -> Array:
    """Raw little-endian tensor bytes as an array of ``shape`` (read-only, no copy)."""
    if datatype == "BYTES":
        return _binary_bytes(chunk, shape, label)
    want = element_count(shape) * dtype.itemsize
    if len(chunk) != want:
        raise BadRequest(
            f"{label}: {datatype} shape {list(shape)} needs {want} bytes, got {len(chunk)}"
        )
    if datatype == "BOOL" and np.frombuffer(chunk, dtype=np.uint8).max(initial=0) > 1:
        raise BadRequest(f"{label}: BOOL bytes must be 0 or 1")
    wire = dtype.newbyteorder("<") if dtype.itemsize > 1 and dtype.kind != "V" else dtype
    flat = np.frombuffer(chunk, dtype=wire)
    if wire != dtype:  # big-endian host: convert to native order
        flat = flat.astype(dtype)
    return flat.reshape(tuple(shape))


def _element_bytes(item: Any, label: str) -> bytes:
    if isinstance(item, bytes):
        return item
    if isinstance(item, str):
        return item.encode()
    raise BadRequest(f"{label}: BYTES elements must be bytes or str, got {type(item).__name__}")


def encode_binary(array: Array, datatype: str, label: str = "tensor") -> bytes:
    """Raw little-endian, row-major bytes of ``array`` (BYTES: length-prefixed elements)."""
    if datatype == "BYTES":
        parts: list[bytes] = []
        for item in array.ravel():
            raw = _element_bytes(item, label)
            parts += (_LENGTH.pack(len(raw)), raw)
        return b"".join(parts)
    dtype = array.dtype
    wire = dtype.newbyteorder("<") if dtype.itemsize > 1 and dtype.kind != "V" else dtype
    return np.ascontiguousarray(array, dtype=wire).tobytes()


def encode_json(array: Array, datatype: str, label: str) -> list[Any]:
    """Flat row-major JSON ``data`` of ``array``."""
    if datatype == "BF16":
        raise BadRequest(f"{label} is BF16, which travels as binary only: ask binary_data")
    if datatype != "BYTES":
        data: list[Any] = array.ravel().tolist()  # a list already (ravel: at least 1-D)
        return data
    result: list[str] = []
    for item in array.ravel():
        try:
            result.append(_element_bytes(item, label).decode())
        except UnicodeDecodeError:
            raise BadRequest(
                f"{label} holds bytes that are not UTF-8 text: ask binary_data"
            ) from None
    return result
