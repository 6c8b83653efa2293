"""Fast host functions and export calls through wasmtime's "unchecked" C API.

wasmtime-py's ``Linker.define_func`` and ``Func.__call__`` convert every argument through
``Val`` objects and re-read the function type on every call: ~20x the cost of the call
itself (measured: 59 µs vs 3 µs per host call on the shared 2-vCPU VM). A request makes
about ten such crossings, so this module uses ``wasmtime_linker_define_func_unchecked`` and
``wasmtime_func_call_unchecked`` with raw i32 slots instead.

Invariants:
- Only i32-only signatures go through here; ``Adapter`` validates export types at load
  time and the host imports are all-i32 by the ABI, so the raw slots always match.
- A raw host callback never raises and never traps: a Python exception inside it would be
  swallowed by ctypes with no trap (and no wasmtime-py process-global is touched); every
  callback here catches its own errors and answers with an errno.
- The ctypes callback objects are owned by a ``CallbackKeeper`` that lives as long as the
  linker/``InstancePre`` that points at them.
- wasmtime-py's private API is reached only through `wasmgate.sandbox._wasmtime_private`,
  which checks the installed version at engine start; the sandbox tests exercise every path
  through here.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Callable
from typing import Any

import wasmtime

from wasmgate.sandbox._wasmtime_private import (
    FAST,
    context,
    error_from,
    error_ptr,
    ffi,
    instance_struct,
    raw_callback,
    trap_from,
)
from wasmgate.sandbox.memory import GuestMemory, MissingMemoryError

__all__ = ["CallbackKeeper", "RawFunc", "RawMemory", "caller_memory", "define_raw"]

RawHost = Callable[..., int | None]
_MEMORY = b"memory"
FUNC = ffi.WASMTIME_EXTERN_FUNC.value
MEMORY = ffi.WASMTIME_EXTERN_MEMORY.value
_OF = ffi.wasmtime_extern_t.of.offset


class CallbackKeeper:
    """Owns the ctypes callbacks a linker refers to (they must outlive every instance)."""

    def __init__(self) -> None:
        """Start empty."""
        self.callbacks: list[Any] = []
        self.finalizer = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(lambda _p: None)


def caller_memory(caller: int) -> GuestMemory:
    """The calling instance's exported ``memory`` (``MissingMemoryError`` if none)."""
    item = ffi.wasmtime_extern_t()
    if not FAST.caller_export_get(caller, _MEMORY, len(_MEMORY), ctypes.addressof(item)):
        raise MissingMemoryError("guest exports no memory")
    kind: Any = item.kind  # an int at run time (ctypes converts struct fields)
    if kind != MEMORY:
        raise MissingMemoryError("guest export `memory` is not a memory")
    ctx = FAST.caller_context(caller)
    mem = ctypes.addressof(item) + _OF  # the wasmtime_memory_t inside the extern
    size: int = FAST.memory_data_size(ctx, mem)
    return GuestMemory((FAST.memory_data(ctx, mem) or 0) if size else 0, size)


def define_raw(  # noqa: PLR0917 - mirrors Linker.define_func
    linker: wasmtime.Linker,
    keeper: CallbackKeeper,
    module: str,
    name: str,
    sig: tuple[int, int],
    fn: RawHost,
    *,
    error: int = 1,
) -> None:
    """Define ``module::name`` taking ``sig[0]`` i32s and returning ``sig[1]`` (0/1) i32s.

    ``fn(caller, *args)`` gets the raw ``wasmtime_caller_t*`` first (see
    ``caller_memory``) and should not raise; if it does anyway, the guest gets ``error``.
    """
    nparams, nresults = sig
    i32 = wasmtime.ValType.i32()
    ty = wasmtime.FuncType([i32] * nparams, [i32] * nresults)

    # Slots are 16-byte wasmtime_val_raw_t; an i32 is the first 4 bytes of its slot.
    params = struct.Struct("<" + "i12x" * nparams)
    result_slot = ctypes.c_int32

    def trampoline(_env: int, caller: int, slots: int, _n: int) -> int:
        try:
            args = params.unpack(ctypes.string_at(slots, params.size)) if nparams else ()
            result = fn(caller, *args)
        except Exception:
            result = error  # a host bug must not become an exception inside ctypes
        if nresults:
            result_slot.from_address(slots).value = result or 0
        return 0  # never a trap: see the module invariants

    keep, callback = raw_callback(trampoline)
    keeper.callbacks.append(keep)
    mod, nm = module.encode(), name.encode()
    err = ffi.wasmtime_linker_define_func_unchecked(
        linker.ptr(), mod, len(mod), nm, len(nm), ty.ptr(), callback, None, keeper.finalizer
    )
    if bool(err):  # a NULL ctypes pointer is falsy
        raise error_from(err)


def export_of(store: wasmtime.Store, instance: wasmtime.Instance, name: str, kind: int) -> Any:
    """The raw ``wasmtime_extern_t.of`` of export ``name`` (``KeyError`` if absent/other kind)."""
    item = ffi.wasmtime_extern_t()
    raw = name.encode()
    found = ffi.wasmtime_instance_export_get(
        context(store), ctypes.byref(instance_struct(instance)), raw, len(raw), ctypes.byref(item)
    )
    kind_now: Any = item.kind
    if not found or kind_now != kind:
        raise KeyError(name)
    return item.of


class RawMemory:
    """An exported memory, read without wrapper objects."""

    def __init__(self, store: wasmtime.Store, instance: wasmtime.Instance, name: str) -> None:
        """Look up export ``name`` (``KeyError`` if it is not a memory)."""
        self._mem = export_of(store, instance, name, MEMORY).memory

    def data_len(self, store: wasmtime.Store) -> int:
        """Current size in bytes."""
        return int(ffi.wasmtime_memory_data_size(context(store), ctypes.byref(self._mem)))

    def view(self, store: wasmtime.Store) -> GuestMemory:
        """A bounds-checked view valid until the guest runs again."""
        ctx = context(store)
        size = ffi.wasmtime_memory_data_size(ctx, ctypes.byref(self._mem))
        data = ffi.wasmtime_memory_data(ctx, ctypes.byref(self._mem))
        return GuestMemory(ctypes.addressof(data.contents) if size else 0, size)


class RawFunc:
    """Calls an i32-only exported function without per-call type introspection.

    One instance serves one thread at a time (its instance's request): the argument slots
    are allocated once."""

    def __init__(
        self, store: wasmtime.Store, instance: wasmtime.Instance, name: str, sig: tuple[int, int]
    ) -> None:
        """Look up export ``name``, checked at load time to be ``(i32*sig[0]) -> (i32*sig[1])``."""
        nparams, nresults = sig
        self._func = export_of(store, instance, name, FUNC).func
        self._nparams = nparams
        self._nresults = nresults
        self._nslots = max(1, nparams, nresults)
        self._slots = (ffi.wasmtime_val_raw_t * self._nslots)()
        self._args = struct.Struct("<" + "i12x" * nparams)
        self._ctx = ctypes.cast(context(store), ctypes.c_void_p).value  # fixed for the store

    def __call__(self, store: wasmtime.Store, *args: int) -> int | None:  # noqa: ARG002
        """Call; raises ``wasmtime.Trap`` / ``WasmtimeError`` (``ExitTrap``) like ``Func``.

        ``store`` must be the store the function was looked up in (its context is cached)."""
        slots = self._slots
        if self._nparams:
            self._args.pack_into(slots, 0, *args[: self._nparams])
        trap = ctypes.POINTER(ffi.wasm_trap_t)()
        err = FAST.func_call_unchecked(
            self._ctx, ctypes.addressof(self._func), slots, self._nslots, ctypes.addressof(trap)
        )
        if err:
            raise error_from(error_ptr(err))
        if bool(trap):  # a NULL ctypes pointer is falsy
            raise trap_from(trap)
        return int(slots[0].i32) if self._nresults else None
