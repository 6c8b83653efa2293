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
import threading
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


_local = threading.local()


def _scratch() -> tuple[Any, int, int]:
    """This thread's export slot for `caller_memory`: (extern, its address, its memory's).
    One per thread, not per call (an allocation saved per host call) and not one per
    process: the GIL may pass to another thread between two statements."""
    item = ffi.wasmtime_extern_t()
    at = ctypes.addressof(item)
    _local.scratch = scratch = (item, at, at + _OF)
    return scratch


def caller_memory(caller: int) -> GuestMemory:
    """The calling instance's exported ``memory`` (``MissingMemoryError`` if none)."""
    item, at, mem = getattr(_local, "scratch", None) or _scratch()
    if not FAST.caller_export_get(caller, _MEMORY, len(_MEMORY), at):
        raise MissingMemoryError("guest exports no memory")
    kind: Any = item.kind  # an int at run time (ctypes converts struct fields)
    if kind != MEMORY:
        raise MissingMemoryError("guest export `memory` is not a memory")
    ctx = FAST.caller_context(caller)
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

    # Slots are 16-byte wasmtime_val_raw_t; an i32 is the first 4 bytes of its slot. One
    # ctypes view per call serves both the arguments and the result.
    unpack = struct.Struct("<" + "i12x" * nparams).unpack_from
    view_of = (ctypes.c_int32 * (4 * max(1, nparams, nresults))).from_address

    def trampoline(_env: int, caller: int, slots: int, _n: int) -> int:
        view = view_of(slots)
        try:
            result = fn(caller, *unpack(view))
        except Exception:
            result = error  # a host bug must not become an exception inside ctypes
        if nresults:
            view[0] = result or 0
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
        self._at = ctypes.addressof(self._mem)
        self._ctx = ctypes.cast(context(store), ctypes.c_void_p).value  # fixed for the store

    def data_len(self, store: wasmtime.Store) -> int:  # noqa: ARG002 - the store it came from
        """Current size in bytes."""
        return int(FAST.memory_data_size(self._ctx, self._at))

    def view(self, store: wasmtime.Store) -> GuestMemory:  # noqa: ARG002 - see data_len
        """A bounds-checked view valid until the guest runs again."""
        size: int = FAST.memory_data_size(self._ctx, self._at)
        return GuestMemory((FAST.memory_data(self._ctx, self._at) or 0) if size else 0, size)


class RawFunc:
    """Calls an i32-only exported function without per-call type introspection.

    One instance serves one thread at a time (its instance's request): the argument slots
    and the trap slot are allocated once."""

    def __init__(
        self, store: wasmtime.Store, instance: wasmtime.Instance, name: str, sig: tuple[int, int]
    ) -> None:
        """Look up export ``name``, checked at load time to be ``(i32*sig[0]) -> (i32*sig[1])``."""
        nparams, nresults = sig
        self._func = export_of(store, instance, name, FUNC).func
        self._func_at = ctypes.addressof(self._func)
        self._nparams = nparams
        self._nresults = nresults
        self._nslots = max(1, nparams, nresults)
        self._slots = (ffi.wasmtime_val_raw_t * self._nslots)()
        self._result = ctypes.c_int32.from_buffer(self._slots)  # an i32 result: slot 0
        self._args = struct.Struct("<" + "i12x" * nparams)
        self._trap = ctypes.c_void_p()
        self._trap_at = ctypes.addressof(self._trap)
        self._ctx = ctypes.cast(context(store), ctypes.c_void_p).value  # fixed for the store

    def __call__(self, store: wasmtime.Store, *args: int) -> int | None:  # noqa: ARG002
        """Call; raises ``wasmtime.Trap`` / ``WasmtimeError`` (``ExitTrap``) like ``Func``.

        ``store`` must be the store the function was looked up in (its context is cached)."""
        slots = self._slots
        if self._nparams:
            self._args.pack_into(slots, 0, *args[: self._nparams])
        self._trap.value = None
        err = FAST.func_call_unchecked(self._ctx, self._func_at, slots, self._nslots, self._trap_at)
        if err:
            raise error_from(error_ptr(err))
        if self._trap.value:
            raise trap_from(ctypes.cast(self._trap.value, ctypes.POINTER(ffi.wasm_trap_t)))
        return self._result.value if self._nresults else None
