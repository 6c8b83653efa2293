"""Bounds-checked access to a guest's linear memory from host functions.

Invariants:
- Every pointer/length a guest hands to the host is read as an unsigned 32-bit value and
  checked against the memory's current size *before* any byte is read or written; a bad
  one raises ``GuestPointerError`` (callers turn it into an errno or an ``oob`` trap).
- Nothing here keeps a raw pointer across calls: memory may grow (and move) between calls.
"""

from __future__ import annotations

import ctypes
import struct
from typing import Any

import numpy as np
import numpy.typing as npt
import wasmtime

__all__ = ["GuestMemory", "GuestPointerError", "MissingMemoryError"]

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_MASK32 = 0xFFFF_FFFF


class GuestPointerError(Exception):
    """A guest-supplied pointer/length lies outside its linear memory."""


class MissingMemoryError(Exception):
    """The calling guest exports no ``memory``."""


class GuestMemory:
    """A view of the calling instance's exported ``memory`` for one host call."""

    def __init__(self, store: wasmtime.Caller | wasmtime.Store, memory: Any = None) -> None:
        """Bind to ``memory`` or, if not given, the caller's ``memory`` export."""
        if memory is None and isinstance(store, wasmtime.Caller):
            memory = store.get("memory")
        if not isinstance(memory, wasmtime.Memory):
            raise MissingMemoryError("guest exports no memory")
        self._store = store
        self._memory = memory
        self.size = memory.data_len(store)
        self._base = ctypes.addressof(memory.data_ptr(store).contents)

    def check(self, ptr: int, length: int) -> int:
        """Return ``ptr`` as unsigned after checking ``[ptr, ptr+length)`` is inside memory."""
        ptr &= _MASK32
        length &= _MASK32
        if ptr + length > self.size:
            raise GuestPointerError(
                f"range 0x{ptr:x}+{length} is outside linear memory of {self.size} bytes"
            )
        return ptr

    def read(self, ptr: int, length: int) -> bytes:
        """Copy ``length`` bytes out of guest memory."""
        ptr = self.check(ptr, length)
        return ctypes.string_at(self._base + ptr, length & _MASK32)

    def write(self, ptr: int, data: bytes) -> None:
        """Copy ``data`` into guest memory at ``ptr``."""
        ptr = self.check(ptr, len(data))
        ctypes.memmove(self._base + ptr, data, len(data))

    def write_array(self, ptr: int, array: npt.NDArray[Any]) -> None:
        """Copy a C-contiguous numpy array's raw bytes into guest memory (no extra copy)."""
        arr = np.ascontiguousarray(array)
        ptr = self.check(ptr, arr.nbytes)
        ctypes.memmove(self._base + ptr, arr.ctypes.data, arr.nbytes)

    def u32(self, ptr: int) -> int:
        """Read a little-endian u32."""
        return int(_U32.unpack(self.read(ptr, 4))[0])

    def u64(self, ptr: int) -> int:
        """Read a little-endian u64."""
        return int(_U64.unpack(self.read(ptr, 8))[0])

    def put_u32(self, ptr: int, value: int) -> None:
        """Write a little-endian u32."""
        self.write(ptr, _U32.pack(value & _MASK32))
