"""One request's use of shared memory: inputs read from regions, outputs written into them.

Every transport opens an `Attachment` around a V2 inference (``with Attachment(...)``) and
hands it to its decoder; it is consulted only for a tensor whose parameters name a region
(``shared_memory_region``, ``shared_memory_byte_size``, ``shared_memory_offset``: Triton's
extension), so a request without one never checks the caller. The first region named
checks the caller (`Regions.allow`); every region used is leased until the request ends, so
an unregister meanwhile unmaps it only afterwards.

An input is a read-only numpy view of the mapping (`tensors.decode_binary` on it: no copy,
the same checks of size and BOOL bytes as a binary body). An output asked into a region is
written there after the run (raw little-endian bytes, BYTES length-prefixed, as binary
data) and answered with its name, datatype and shape only, as Triton does (Triton's C++
HTTP client reads any ``parameters`` of an output as binary data).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

import numpy as np

from wasmgate._compat import Self
from wasmgate.runtime.errors import BadRequest
from wasmgate.runtime.protocol.tensors import Array, array_datatype, decode_binary, encode_binary
from wasmgate.runtime.shm.region import Region
from wasmgate.runtime.shm.registry import Regions
from wasmgate.sandbox.models import DATATYPES

REGION = "shared_memory_region"
BYTE_SIZE = "shared_memory_byte_size"
OFFSET = "shared_memory_offset"


def names_region(params: Mapping[str, Any]) -> bool:
    """Whether a tensor's parameters put it in shared memory."""
    return REGION in params or BYTE_SIZE in params


class Placement:
    """Where one tensor lives: region, offset and byte size, as a request named them."""

    def __init__(self, region: Region, offset: int, byte_size: int) -> None:
        self.region, self.offset, self.byte_size = region, offset, byte_size


class Attachment:
    """The regions one request uses (see the module doc); ``with`` releases them."""

    def __init__(
        self, regions: Regions | None, peer: str | None, authorization: str | None
    ) -> None:
        self._regions = regions
        self._peer, self._authorization = peer, authorization
        self._allowed = False
        self._leased: list[Region] = []
        self.targets: dict[str, Placement] = {}
        """Outputs asked into a region, by name (`want_outputs`)."""
        self.used = False
        """Whether any tensor of the request named a region (still true after the end)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        leased, self._leased = self._leased, []
        for region in leased:
            region.release()

    def _place(self, params: Mapping[str, Any], label: str) -> Placement:
        regions = self._regions
        if regions is None:
            raise BadRequest(f"{label}: system shared memory is not served here")
        if not self._allowed:
            regions.allow(self._peer, self._authorization)
            self._allowed = True
        name, size = params.get(REGION), params.get(BYTE_SIZE)
        if not isinstance(name, str) or size is None:
            raise BadRequest(f"{label}: {REGION} and {BYTE_SIZE} go together")
        size_n = _count(size, BYTE_SIZE, label)
        offset = _count(params.get(OFFSET, 0), OFFSET, label)
        region = regions.leased(name)
        self._leased.append(region)
        self.used = True
        return Placement(region, offset, size_n)

    def input(self, datatype: str, shape: Sequence[int], params: Mapping[str, Any], label: str
              ) -> Array:  # fmt: skip
        """The input tensor held in the region its parameters name (read-only, no copy)."""
        if "binary_data_size" in params:
            raise BadRequest(f"{label}: binary_data_size and {REGION} both given")
        at = self._place(params, label)
        view = at.region.view(at.offset, at.byte_size)
        # BYTES elements become objects anyway: copied out, so none keeps a view of the map.
        data = bytes(view) if datatype == "BYTES" else view
        return decode_binary(data, datatype, DATATYPES[datatype], shape, label)  # type: ignore[arg-type]

    def want_outputs(self, requested: Mapping[str, Mapping[str, Any]]) -> None:
        """Note the outputs asked into a region (name -> the output's parameters), before
        the run, so a wrong region is refused before any work."""
        for name, params in requested.items():
            if names_region(params):
                label = f"output '{name}'"
                if params.get("binary_data"):
                    raise BadRequest(f"{label}: binary_data and {REGION} both given")
                self.targets[name] = self._place(params, label)

    def write(self, outputs: Mapping[str, Array]) -> set[str]:
        """Write the outputs asked into regions; the names of those written."""
        placed: set[str] = set()
        for name, at in self.targets.items():
            array = outputs.get(name)
            if array is None:
                continue
            label = f"output '{name}'"
            datatype = array_datatype(array)
            size = array.nbytes if datatype != "BYTES" else None
            raw = encode_binary(array, datatype, label) if size is None else None
            need = len(raw) if raw is not None else int(array.nbytes)
            if need > at.byte_size:
                raise BadRequest(
                    f"{label} needs {need} bytes, its shared memory byte_size is {at.byte_size}"
                )
            view = at.region.view(at.offset, need, write=True)
            if raw is not None:
                view[:] = raw
            else:
                _copy_into(view, array)
            placed.add(name)
        return placed


def _copy_into(view: memoryview, array: Array) -> None:
    dtype = array.dtype
    wire = dtype.newbyteorder("<") if dtype.itemsize > 1 and dtype.kind != "V" else dtype
    target = np.frombuffer(view, dtype=wire).reshape(array.shape)
    np.copyto(target, array, casting="no" if wire == dtype else "equiv")


def _count(value: object, what: str, label: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise BadRequest(f"{label}: {what} must be a non-negative integer, got {value!r}")
    return value
