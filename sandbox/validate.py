"""Load-time validation of a daemon adapter module against Guest ABI v1.

Invariants:
- ``probe_abi``: the module instantiates under the ceilings (start function included, within
  at most 1 s) and ``wasmgate_abi_version()`` returns ``ABI_VERSION``.
- Every import is WASI preview1, ``wasi_ephemeral_nn`` or ``wasmgate`` (else
  ``AdapterLoadError`` naming it); the v1 exports exist with their exact types; initial
  memory and tables fit the engine's ceilings; ``_initialize``, if exported, is ``() -> ()``.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import wasmtime

from wasmgate.sandbox.errors import AdapterLoadError
from wasmgate.sandbox.host_api import (
    HOST_FUNCTIONS,
    HOST_MODULE,
    HOST_STATE_FUNCTIONS,
    RequestState,
)
from wasmgate.sandbox.instance import new_store
from wasmgate.sandbox.limits import GuestLimits
from wasmgate.sandbox.models import NoModels
from wasmgate.sandbox.rawcall import RawFunc
from wasmgate.sandbox.traps import translate
from wasmgate.sandbox.wasi import WASI_FUNCTIONS
from wasmgate.sandbox.wasi_nn import HOST_NN_FUNCTIONS, NN_FUNCTIONS, NN_MODULE, NnSession

if TYPE_CHECKING:
    from wasmgate.sandbox.engine import SandboxEngine
    from wasmgate.sandbox.limits import Ceilings

__all__ = ["ABI_VERSION", "check_exports", "check_imports", "probe_abi"]

ABI_VERSION = 1

_I32 = str(wasmtime.ValType.i32())
_EXPORTS = {
    "wasmgate_abi_version": ([], [_I32]),
    "wasmgate_alloc": ([_I32], [_I32]),
    "wasmgate_handle": ([_I32, _I32], [_I32]),
}
_KNOWN = {
    "wasi_snapshot_preview1": WASI_FUNCTIONS,
    NN_MODULE: frozenset(NN_FUNCTIONS),
    HOST_MODULE: frozenset(HOST_FUNCTIONS)
    | frozenset(HOST_NN_FUNCTIONS)
    | frozenset(HOST_STATE_FUNCTIONS),
}


def check_imports(module: wasmtime.Module, name: str) -> None:
    """Refuse any import outside the three known modules, naming it."""
    for imp in module.imports:
        known = _KNOWN.get(imp.module)
        if known is None or imp.name not in known:
            hint = " (an unsupported wasi-nn extension)" if imp.module == NN_MODULE else ""
            raise AdapterLoadError(f"{name}: unknown import `{imp.module}::{imp.name}`{hint}")


def check_exports(module: wasmtime.Module, name: str, ceilings: Ceilings) -> bool:
    """Check the v1 exports and initial sizes; True if the module exports ``_initialize``."""
    exports = {e.name: e.type for e in module.exports}
    mem = exports.get("memory")
    if not isinstance(mem, wasmtime.MemoryType):
        raise AdapterLoadError(f"{name}: missing export `memory`")
    if mem.limits.min * 65536 > ceilings.memory_bytes:
        raise AdapterLoadError(
            f"{name}: initial memory of {mem.limits.min} pages exceeds the ceiling of "
            f"{ceilings.memory_bytes} bytes (limits.memory_mb)"
        )
    for ext in exports.values():
        if isinstance(ext, wasmtime.TableType) and ext.limits.min > ceilings.table_elements:
            raise AdapterLoadError(
                f"{name}: initial table of {ext.limits.min} elements exceeds the ceiling"
            )
    for fn, (params, results) in _EXPORTS.items():
        ty = exports.get(fn)
        if not isinstance(ty, wasmtime.FuncType):
            raise AdapterLoadError(f"{name}: missing export `{fn}`")
        if [str(p) for p in ty.params] != params or [str(r) for r in ty.results] != results:
            raise AdapterLoadError(f"{name}: export `{fn}` has the wrong signature")
    init = exports.get("_initialize")
    if init is not None and not (
        isinstance(init, wasmtime.FuncType) and not init.params and not init.results
    ):
        raise AdapterLoadError(f"{name}: export `_initialize` must be () -> ()")
    return init is not None


def probe_abi(
    engine: SandboxEngine, pre: wasmtime.InstancePre, tls: threading.local, name: str
) -> None:
    """Instantiate once under the ceilings and check ``wasmgate_abi_version() == 1``."""
    c = engine.ceilings
    lim = GuestLimits(
        memory_bytes=c.memory_bytes,
        table_elements=c.table_elements,
        deadline_s=min(1.0, c.deadline_s),
    )
    req = RequestState({}, lim)
    tls.req, tls.nn = req, NnSession(NoModels(), req.log)
    try:
        store = new_store(engine.engine, c, lim, [req], engine.deadline_ticks(lim.deadline_s))
        with engine.guest_running():
            instance = pre.instantiate(store)
            got = RawFunc(store, instance, "wasmgate_abi_version", (0, 1))(store)
    except (wasmtime.Trap, wasmtime.WasmtimeError) as e:
        err = translate(e, req, near_memory_limit=False)
        raise AdapterLoadError(f"{name}: fails at instantiation ({err.cause}): {err}") from e
    finally:
        tls.req = tls.nn = None
    if got != ABI_VERSION:
        raise AdapterLoadError(
            f"{name}: wasmgate_abi_version() is {got}, host supports {ABI_VERSION}"
        )
