"""Every use of wasmtime-py's private API, fenced in one module.

`wasmgate.sandbox.rawcall` calls wasmtime's "unchecked" C API for speed, which wasmtime-py
only exposes through its private ``_ffi`` bindings, a store's ``_context()``, an instance's
``_instance`` struct and the ``_from_ptr`` constructors of its errors. Those names are known
to exist in `SUPPORTED` (the pin in ``pyproject.toml``); `check_wasmtime` runs when a
`wasmgate.sandbox.SandboxEngine` starts and refuses any other wasmtime with one clear error,
instead of an ``AttributeError`` in the middle of a request.
"""

from __future__ import annotations

import ctypes
from importlib.metadata import version
from typing import Any

import wasmtime
from wasmtime import _ffi as ffi

from wasmgate.sandbox.errors import SandboxError

__all__ = [
    "FAST",
    "SUPPORTED",
    "check_wasmtime",
    "context",
    "error_from",
    "error_ptr",
    "ffi",
    "instance_struct",
    "raw_callback",
    "trap_from",
]

SUPPORTED = "wasmtime>=50,<51"
_MAJORS = range(50, 51)
_FFI_NAMES = (
    "wasmtime_extern_t", "wasmtime_caller_export_get", "wasmtime_caller_context",
    "wasmtime_memory_data_size", "wasmtime_memory_data", "wasmtime_func_unchecked_callback_t",
    "wasmtime_linker_define_func_unchecked", "wasmtime_instance_export_get",
    "wasmtime_val_raw_t", "wasm_trap_t", "wasmtime_func_call_unchecked",
    "WASMTIME_EXTERN_FUNC", "WASMTIME_EXTERN_MEMORY", "wasmtime_error_t", "dll",
)  # fmt: skip
_CLASS_NAMES = (
    (wasmtime.Store, "_context"),
    (wasmtime.WasmtimeError, "_from_ptr"),
    (wasmtime.Trap, "_from_ptr"),
)


class _Fast:
    """Own prototypes of a few C functions of wasmtime-py's library, with plain-address
    (``c_void_p``) arguments: a host call then passes ints instead of building typed ctypes
    pointers, and skips the wrapper frame wasmtime-py puts around each function. Fetched
    by name from the library, which gives new function objects, so the prototypes
    wasmtime-py set on its own (cached) ones stay untouched.

    The lookups (``caller_*``, ``memory_*``) are short, never block and never call back,
    so they keep the GIL (``PYFUNCTYPE``): releasing and taking it again cost more than
    the call itself. ``func_call_unchecked`` runs guest code,
    so it releases the GIL like any ctypes call: the epoch ticker needs it to interrupt
    the guest, and the host callbacks take it again."""

    def __init__(self) -> None:
        p, n = ctypes.c_void_p, ctypes.c_size_t
        self.caller_context = _held("wasmtime_caller_context", p, [p])
        self.caller_export_get = _held(
            "wasmtime_caller_export_get", ctypes.c_bool, [p, ctypes.c_char_p, n, p]
        )
        self.memory_data = _held("wasmtime_memory_data", p, [p, p])
        self.memory_data_size = _held("wasmtime_memory_data_size", n, [p, p])
        self.func_call_unchecked = _proto("wasmtime_func_call_unchecked", p, [p, p, p, n, p])


def _proto(name: str, restype: Any, argtypes: list[Any]) -> Any:
    fn = ffi.dll[name]
    fn.restype, fn.argtypes = restype, argtypes
    return fn


def _held(name: str, restype: Any, argtypes: list[Any]) -> Any:
    """``name`` called with the GIL held (only for short C functions that never block)."""
    return ctypes.PYFUNCTYPE(restype, *argtypes)((name, ffi.dll))


def _fast_or_none() -> _Fast | None:
    try:
        return _Fast()
    except AttributeError:
        return None  # a wasmtime-py without these symbols: check_wasmtime refuses it


FAST: _Fast = _fast_or_none()  # type: ignore[assignment]  # None only before the refusal
RAW_CALLBACK = ctypes.CFUNCTYPE(
    ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t
)
"""The unchecked host-callback signature with every pointer as a plain address."""


def raw_callback(fn: Any) -> tuple[Any, Any]:
    """(the ctypes callback to keep alive, the same as wasmtime-py's callback type)."""
    callback = RAW_CALLBACK(fn)
    return callback, ctypes.cast(callback, ffi.wasmtime_func_unchecked_callback_t)


def error_ptr(address: int) -> Any:
    """A typed ``wasmtime_error_t*`` for an address returned by a `FAST` function."""
    return ctypes.cast(address, ctypes.POINTER(ffi.wasmtime_error_t))


def check_wasmtime(installed: str | None = None) -> None:
    """Refuse a wasmtime-py outside `SUPPORTED` (or one missing a private name we use)."""
    found = installed or version("wasmtime")
    major = found.split(".", 1)[0]
    missing = [name for name in _FFI_NAMES if not hasattr(ffi, name)]
    missing += [f"{cls.__name__}.{name}" for cls, name in _CLASS_NAMES if not hasattr(cls, name)]
    missing += ["C functions of the fast path"] if _fast_or_none() is None else []
    if not major.isdigit() or int(major) not in _MAJORS or missing:
        gone = f" (missing: {', '.join(missing)})" if missing else ""
        raise SandboxError(
            f"wasmtime {found} is not supported: the sandbox's fast path uses wasmtime-py "
            f"internals known in {SUPPORTED}{gone}; install a version in that range"
        )


def context(store: wasmtime.Store) -> Any:
    """The store's ``wasmtime_context_t*``."""
    return store._context()  # noqa: SLF001 - the fence: no public accessor


def instance_struct(instance: wasmtime.Instance) -> Any:
    """The instance's ``wasmtime_instance_t`` struct."""
    return instance._instance  # noqa: SLF001 - the fence: no public accessor


def error_from(ptr: Any) -> wasmtime.WasmtimeError:
    """A ``WasmtimeError`` owning the C error ``ptr``."""
    return wasmtime.WasmtimeError._from_ptr(ptr)  # noqa: SLF001 - the fence


def trap_from(ptr: Any) -> wasmtime.Trap:
    """A ``Trap`` owning the C trap ``ptr``."""
    return wasmtime.Trap._from_ptr(ptr)  # noqa: SLF001 - the fence
