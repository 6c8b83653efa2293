"""A model's weights in one sealed memfd, used in place by ONNX Runtime in every process.

With ``[workers] count`` > 1 every process that serves a model used to hold its weights in
ONNX Runtime's own tensors: N workers and the supervisor held them N + 1 times. Here the
checked, optimized graph is split once per gateway (`split`): its large initializers go to
one sealed memfd (*the weights*), the rest of the graph, with each of them marked as
external data, to another. Each process maps the weights read-only and hands ORT every
initializer as an ``OrtValue`` over that mapping with ``SessionOptions.add_initializer``
(ORT's shared initializers: used in place on the CPU), so the pages are the memfd's and
counted once for the gateway. (``add_external_initializers`` copies each tensor into one of
the session's own: measured +18 MB of anonymous memory for a 16 MB MobileNet.) The seals (no
write, grow, shrink or new seal), checked by every receiver (`SealedFile.adopt`), keep a
byte from changing after the check; the mapping is read-only, so a process cannot write it
either.

The graph is loaded with optimizations off, as an offline-optimized graph is (it already is
the optimized one: a constant folding or layout change at load would make new tensors of a
process's own). ORT's weight prepacking (MatMul, Gemm, some Conv kernels) still makes a
private copy of the tensors it packs; see docs/benchmarks.md for what that leaves.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from wasmgate.sealed import SealedFile

if TYPE_CHECKING:
    import onnx
    import onnxruntime as ort

__all__ = ["SHARE_MIN_BYTES", "Entry", "Mapped", "SharedWeights", "map_weights", "split"]

SHARE_MIN_BYTES = 1 << 20
"""Models whose large initializers add up to less load as before, a copy per process: the
split costs a load and its mapping a few µs per run (measured in docs/benchmarks.md)."""
TENSOR_MIN_BYTES = 4096
"""Smaller initializers (shapes, scales, biases) stay inside the graph."""
_ALIGN = 64  # every tensor starts on a cache line, as ORT's own allocations do
_FOLDER, _LOCATION = "/dev", "null"
"""Where the graph says its external data is. ORT checks that the file exists (in the
folder given for a graph loaded from bytes) but never reads it: each such tensor is
replaced by a shared initializer. Were one left out, ORT would read 0 bytes and refuse the
graph, never serve another file's bytes."""
_DTYPES = ("float32", "float16", "float64", "int8", "uint8", "int16", "uint16", "int32",
           "uint32", "int64", "uint64", "bool")  # fmt: skip
"""numpy has these natively; bfloat16 and float8 initializers stay inside the graph."""


class Entry(msgspec.Struct, frozen=True, array_like=True):
    """One initializer in the weights: where its bytes are and what they are."""

    name: str
    dtype: str
    dims: tuple[int, ...]
    offset: int
    length: int


@dataclass
class SharedWeights:
    """The graph without its large initializers, the weights, and where each one is."""

    graph: SealedFile
    weights: SealedFile
    index: list[Entry]

    def close(self) -> None:
        self.graph.close()
        self.weights.close()


@dataclass
class Mapped:
    """The read-only mapping and the OrtValues over it: kept alive with the session (ORT
    reads the mapped pages at every run and owns none of them)."""

    names: list[str]
    values: list[Any]
    arrays: list[np.ndarray[Any, Any]] = field(repr=False)
    mapping: mmap.mmap = field(repr=False)


def _large(tensor: onnx.TensorProto) -> str | None:
    """The numpy dtype of an initializer worth sharing, None to keep it inside the graph."""
    import onnx  # noqa: PLC0415 - only a process that splits needs it (~10 MB)

    size = len(tensor.raw_data)  # ORT writes every tensor of a graph it saves as raw data
    if not size or size < TENSOR_MIN_BYTES or tensor.data_location == onnx.TensorProto.EXTERNAL:
        return None
    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)).name
    except (KeyError, TypeError):
        return None
    return dtype if dtype in _DTYPES else None


def split(graph: bytes | memoryview, name: str) -> SharedWeights | None:
    """``graph`` (a checked, optimized ONNX graph) as a sealed graph and sealed weights, or
    None when its large initializers add up to less than `SHARE_MIN_BYTES`."""
    import onnx  # noqa: PLC0415

    model = onnx.load_model_from_string(bytes(graph))
    chosen = [(t, d) for t in model.graph.initializer if (d := _large(t)) is not None]
    if sum(len(t.raw_data) for t, _ in chosen) < SHARE_MIN_BYTES:
        return None
    index, end = [], 0
    for tensor, dtype in chosen:
        offset = end + (-end % _ALIGN)
        index.append(Entry(tensor.name, dtype, tuple(tensor.dims), offset, len(tensor.raw_data)))
        end = offset + len(tensor.raw_data)

    def fill(fd: int) -> None:  # straight into the memfd: no second buffer of the weights
        for (tensor, _), entry in zip(chosen, index, strict=True):
            _write_at(fd, tensor.raw_data, entry.offset)
            _external(tensor, entry)

    sealed = SealedFile.filled(end, fill, f"wasmgate-weights-{name}")
    try:
        rest = SealedFile.from_bytes(model.SerializeToString(), f"wasmgate-graph-{name}")
    except BaseException:
        sealed.close()
        raise
    return SharedWeights(rest, sealed, index)


def _write_at(fd: int, data: bytes, offset: int) -> None:
    with memoryview(data) as view:
        done = 0
        while done < len(view):
            done += os.pwrite(fd, view[done:], offset + done)


def _external(tensor: onnx.TensorProto, entry: Entry) -> None:
    """Mark ``tensor`` as external data at `_LOCATION` and drop its bytes from the graph."""
    import onnx  # noqa: PLC0415

    tensor.ClearField("raw_data")
    tensor.data_location = onnx.TensorProto.EXTERNAL
    del tensor.external_data[:]
    for key, value in (("location", _LOCATION), ("offset", str(entry.offset)),
                       ("length", str(entry.length))):  # fmt: skip
        tensor.external_data.add(key=key, value=value)


def map_weights(shared: SharedWeights) -> Mapped:
    """OrtValues over a read-only mapping of the weights (the memfd may be closed after)."""
    fd = shared.weights.fileno
    if fd is None:
        raise OSError("weights are not in a memfd")
    mapping = mmap.mmap(fd, shared.weights.size, prot=mmap.PROT_READ)  # MAP_SHARED
    try:
        arrays = [_array(mapping, e) for e in shared.index]
    except BaseException:
        mapping.close()
        raise
    import onnxruntime as ort  # noqa: PLC0415 - a thread at import when telemetry is on

    values = [ort.OrtValue.ortvalue_from_numpy(a) for a in arrays]
    return Mapped([e.name for e in shared.index], values, arrays, mapping)


def _array(mapping: mmap.mmap, entry: Entry) -> np.ndarray[Any, Any]:
    dtype = np.dtype(entry.dtype)
    count = int(np.prod(entry.dims, dtype=np.int64)) if entry.dims else 1
    if entry.dtype not in _DTYPES or count * dtype.itemsize != entry.length:
        raise OSError(f"weights index is inconsistent for {entry.name!r}")
    if entry.offset < 0 or entry.offset + entry.length > len(mapping):
        raise OSError(f"weights index points past the weights for {entry.name!r}")
    array = np.frombuffer(mapping, dtype=dtype, count=count, offset=entry.offset)
    return array.reshape(entry.dims)


def in_place_options(so: ort.SessionOptions, mapped: Mapped) -> None:
    """Hand ORT the mapped initializers, used in place; the graph is then loaded from its
    bytes (`SealedFile.data`: a few KB without its weights), so that ORT checks its
    external-data entries against `_FOLDER`."""
    so.add_session_config_entry("session.model_external_initializers_file_folder_path", _FOLDER)
    for name, value in zip(mapped.names, mapped.values, strict=True):
        so.add_initializer(name, value)
