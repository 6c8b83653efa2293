"""Linking wasi-nn into a guest: the import names and arities, and the raw host callbacks
that turn every failure into an errno (a host function never raises into wasm).

``NN_FUNCTIONS`` is the one list of ``wasi_ephemeral_nn`` imports a guest may use: the
loader refuses any other import of that module, ``run-guest`` and the daemon alike.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import wasmtime

from wasmgate.sandbox.host_api import HOST_MODULE
from wasmgate.sandbox.memory import GuestPointerError, MissingMemoryError
from wasmgate.sandbox.rawcall import CallbackKeeper, caller_memory, define_raw
from wasmgate.sandbox.wasi_nn_abi import NnErrno, NnError

if TYPE_CHECKING:
    from wasmgate.sandbox.wasi_nn import NnSession

NN_MODULE = "wasi_ephemeral_nn"
_E = NnErrno

Call = Callable[..., int]
NN_FUNCTIONS: dict[str, int] = {
    "load": 5,
    "load_by_name": 3,
    "init_execution_context": 2,
    "set_input": 3,
    "compute": 1,
    "get_output": 5,
    "unload": 1,
    "finalize_execution_context": 1,
    # WasmEdge's extensions (its wasinnfunc.cpp signatures; semantics in NnSession).
    "load_by_name_with_config": 5,
    "compute_single": 1,
    "get_output_single": 5,
    "fini_single": 1,
}
_NEEDS_MEMORY = {
    "load",
    "load_by_name",
    "init_execution_context",
    "set_input",
    "get_output",
    "infer_f32",
    "load_by_name_with_config",
    "get_output_single",
}
HOST_NN_FUNCTIONS: dict[str, tuple[str, int]] = {"nn_infer_f32": ("infer_f32", 8)}
"""The fused calls in the ``wasmgate`` module: import name -> (session method, arity)."""


def define_wasi_nn(
    linker: wasmtime.Linker, keeper: CallbackKeeper, current: Callable[[], NnSession]
) -> None:
    """Define the 12 ``wasi_ephemeral_nn`` functions and the fused ``wasmgate.nn_*`` ones;
    ``current()`` gives the caller's session."""
    for name, arity in NN_FUNCTIONS.items():
        call = _host(name, current)
        define_raw(linker, keeper, NN_MODULE, name, (arity, 1), call, error=_E.RUNTIME_ERROR)
    for name, (method, arity) in HOST_NN_FUNCTIONS.items():
        call = _host(method, current)
        define_raw(linker, keeper, HOST_MODULE, name, (arity, 1), call, error=_E.RUNTIME_ERROR)


def _host(name: str, current: Callable[[], NnSession]) -> Call:
    needs_memory = name in _NEEDS_MEMORY

    def call(caller: Any, *args: int) -> int:
        try:
            session = current()
        except Exception:
            return _E.RUNTIME_ERROR  # no request is bound to this thread: never raise
        try:
            method = getattr(session, name)
            result = method(caller_memory(caller), *args) if needs_memory else method(*args)
        except NnError as e:
            session.log(f"wasi-nn {name}: {e}")
            return e.errno
        except GuestPointerError as e:
            session.log(f"wasi-nn {name}: bad pointer: {e}")
            return _E.INVALID_ARGUMENT
        except MissingMemoryError:
            return _E.MISSING_MEMORY
        except Exception as e:
            session.log(f"wasi-nn {name}: host error: {e!r}")
            return _E.RUNTIME_ERROR
        return int(result) if isinstance(result, int) else _E.SUCCESS

    return call
