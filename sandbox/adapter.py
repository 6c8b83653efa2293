"""A validated daemon adapter and its per-request run (Guest ABI v1).

Invariants:
- Load-time validation: every import is WASI preview1, ``wasi_ephemeral_nn`` or
  ``wasmgate`` (else ``AdapterLoadError`` naming it), the v1 exports exist with their exact
  types, initial memory/table fit the ceilings, and ``wasmgate_abi_version()`` returns 1.
- ``fresh`` mode (default): every ``run`` gets a new ``Store`` + instance, so nothing leaks
  between requests. ``pooled`` mode keeps one instance per worker thread and reuses it;
  this saves instantiation and ``_initialize`` but lets guest globals, heap and wasi-nn
  handles persist between requests served by that thread — only for adapters whose
  authors ask for it. A pooled instance that fails in any way is discarded.
- Every ``run`` is bounded: memory/table/instance limits on the store, an epoch deadline set
  before instantiation (so start functions and ``_initialize`` are covered), fuel when
  asked, capped output/log/events. Host functions run on the calling thread and find their
  request through a thread-local, so one adapter serves many threads concurrently.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import wasmtime

from wasmgate.sandbox.errors import (
    AdapterLoadError,
    GuestDeadlineExceeded,
    GuestOutputTooLarge,
    GuestResourceExhausted,
    GuestTrap,
    SandboxError,
)
from wasmgate.sandbox.host_api import (
    HOST_FUNCTIONS,
    HOST_MODULE,
    HOST_STATE_FUNCTIONS,
    RequestState,
    define_host_api,
)
from wasmgate.sandbox.limits import GuestLimits
from wasmgate.sandbox.memory import GuestPointerError
from wasmgate.sandbox.models import ModelHandle, ModelProvider
from wasmgate.sandbox.rawcall import CallbackKeeper, RawFunc, RawMemory
from wasmgate.sandbox.state import AdapterState
from wasmgate.sandbox.traps import translate
from wasmgate.sandbox.wasi import WASI_FUNCTIONS, define_restricted_wasi, restricted_wasi_config
from wasmgate.sandbox.wasi_nn import (
    HOST_NN_FUNCTIONS,
    NN_FUNCTIONS,
    NN_MODULE,
    NnSession,
    define_wasi_nn,
)

if TYPE_CHECKING:
    from wasmgate.sandbox.engine import SandboxEngine

__all__ = ["ABI_VERSION", "Adapter", "GuestResult", "NoModels"]

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


@dataclass
class GuestResult:
    """What one request produced (status 0 ok, 1 bad input, 2 adapter error)."""

    status: int
    output: bytes
    fallback_reason: str | None
    events: list[bytes] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)
    instantiate_s: float = 0.0
    run_s: float = 0.0
    infer_s: float = 0.0


class NoModels:
    """A ``ModelProvider`` that provides nothing (load-time probe, model-less adapters)."""

    def by_name(self, name: str) -> ModelHandle | None:  # noqa: ARG002
        """No model has a name."""
        return None

    def from_bytes(self, data: bytes, encoding: str, target: str) -> ModelHandle | None:  # noqa: ARG002
        """No bytes may be loaded."""
        return None


@dataclass
class _Instance:
    store: wasmtime.Store
    nn: NnSession
    memory: RawMemory
    alloc: RawFunc
    handle: RawFunc
    slot: list[RequestState]  # the request its WASI stdout/stderr currently belong to


class Adapter:
    """A compiled, validated adapter; ``run`` executes one request in the sandbox."""

    def __init__(
        self, engine: SandboxEngine, module: wasmtime.Module, *, name: str, mode: str = "fresh"
    ) -> None:
        """Validate ``module`` against Guest ABI v1 (use ``SandboxEngine.compile``)."""
        if mode not in ("fresh", "pooled"):
            raise ValueError(f"adapter mode must be 'fresh' or 'pooled', not {mode!r}")
        self.name = name
        self.mode = mode
        self._engine = engine
        self._module = module
        self._tls = threading.local()
        _check_imports(module, name)
        self._has_initialize = _check_exports(module, name, engine)
        linker = wasmtime.Linker(engine.engine)
        self._keeper = CallbackKeeper()  # the raw host callbacks live as long as _pre
        define_restricted_wasi(linker, self._keeper, self._deadline, engine.ceilings.tick_s)
        define_wasi_nn(linker, self._keeper, lambda: self._tls.nn)
        define_host_api(linker, self._keeper, lambda: self._tls.req)
        try:
            self._pre = linker.instantiate_pre(module)
        except wasmtime.WasmtimeError as e:
            raise AdapterLoadError(f"{name}: cannot link: {e}") from e
        self._probe()

    def with_mode(self, mode: str) -> Adapter:
        """Return this adapter in ``fresh`` or ``pooled`` mode (validation is repeated)."""
        return Adapter(self._engine, self._module, name=self.name, mode=mode)

    def run(
        self,
        payload: bytes,
        meta: Mapping[str, str],
        models: ModelProvider,
        limits: GuestLimits,
        *,
        state: AdapterState | None = None,
    ) -> GuestResult:
        """Run one request; blocking, thread-safe. Raises ``GuestTrap`` (and subclasses).

        The limits are first capped by the engine's ceilings. A fresh instance is used
        unless the adapter is ``pooled``. Errors carry the logs captured so far. ``state``
        is what the ``state_*`` imports reach (None: the adapter was granted none).
        """
        lim = limits.capped(self._engine.ceilings)
        if lim.fuel is not None and not self._engine.ceilings.fuel_enabled:
            raise SandboxError("a fuel limit was requested but the engine has fuel disabled")
        req = RequestState(meta, lim, state=state)
        start = time.perf_counter()
        inst: _Instance | None = None
        try:
            with self._engine.guest_running():
                inst = self._acquire(req, models)
                ready = time.perf_counter()
                status = self._call(inst, req, payload)
        except (wasmtime.Trap, wasmtime.WasmtimeError) as e:
            req.flush()
            raise translate(e, req, near_memory_limit=self._near_memory_limit(inst, lim)) from e
        finally:
            self._tls.req = self._tls.nn = None
            req.flush()
        done = time.perf_counter()
        _post_checks(req, status, lim)
        self._release(inst)
        return GuestResult(
            status=status,
            output=req.output,
            fallback_reason=req.fallback_reason,
            events=req.events,
            logs=req.logs,
            instantiate_s=ready - start,
            run_s=done - ready,
            infer_s=inst.nn.infer_s,
        )

    def _acquire(self, req: RequestState, models: ModelProvider) -> _Instance:
        inst: _Instance | None = getattr(self._tls, "pooled", None)
        self._tls.pooled = None
        if inst is None:
            store = wasmtime.Store(self._engine.engine)
            c = self._engine.ceilings
            nn = NnSession(models, req.log, c.max_nn_handles, c.max_nn_contexts)
            self._prepare(store, nn, req, models)
            slot = [req]
            store.set_wasi(
                restricted_wasi_config(_slot_sink(slot, "stdout"), _slot_sink(slot, "stderr"))
            )
            return self._instantiate(store, nn, slot)
        inst.slot[0] = req
        self._prepare(inst.store, inst.nn, req, models)
        return inst

    def _prepare(
        self, store: wasmtime.Store, nn: NnSession, req: RequestState, models: ModelProvider
    ) -> None:
        lim = req.limits
        store.set_limits(
            memory_size=lim.memory_bytes,
            table_elements=lim.table_elements,
            instances=1,
            tables=4,
            memories=1,
        )
        ticks = int(lim.deadline_s / self._engine.ceilings.tick_s) + 1
        store.set_epoch_deadline(ticks)
        if self._engine.ceilings.fuel_enabled:
            store.set_fuel(lim.fuel if lim.fuel is not None else 2**63 - 1)
        nn.provider, nn.log, nn.infer_s, nn.deadline = models, req.log, 0.0, req.deadline
        nn.host_budget = lim.memory_bytes  # host-side tensors count against the memory limit
        self._tls.req, self._tls.nn = req, nn

    def _instantiate(
        self, store: wasmtime.Store, nn: NnSession, slot: list[RequestState]
    ) -> _Instance:
        instance = self._pre.instantiate(store)
        if self._has_initialize:
            RawFunc(store, instance, "_initialize", (0, 0))(store)
        return _Instance(
            store,
            nn,
            RawMemory(store, instance, "memory"),
            RawFunc(store, instance, "wasmgate_alloc", (1, 1)),
            RawFunc(store, instance, "wasmgate_handle", (2, 1)),
            slot,
        )

    def _call(self, inst: _Instance, req: RequestState, payload: bytes) -> int:
        store = inst.store
        ptr = inst.alloc(store, len(payload))
        if not isinstance(ptr, int) or (ptr == 0 and payload):
            raise GuestResourceExhausted(
                f"{self.name}: wasmgate_alloc({len(payload)}) failed", cause="memory", logs=req.logs
            )
        try:
            inst.memory.view(store).write(ptr, payload)
        except GuestPointerError as e:
            raise GuestTrap(
                f"{self.name}: wasmgate_alloc returned a bad pointer: {e}",
                cause="oob",
                logs=req.logs,
            ) from e
        status = inst.handle(store, ptr, len(payload))
        return int(status) if isinstance(status, int) else -1

    def _release(self, inst: _Instance) -> None:
        if self.mode == "pooled":
            self._tls.pooled = inst

    def _near_memory_limit(self, inst: _Instance | None, lim: GuestLimits) -> bool:
        if inst is None:
            return False
        return inst.memory.data_len(inst.store) + 65536 > lim.memory_bytes

    def _deadline(self) -> tuple[float, Any] | None:
        req: RequestState | None = getattr(self._tls, "req", None)
        if req is None:
            return None
        return req.deadline, lambda: setattr(req, "slept_past_deadline", True)

    def _probe(self) -> None:
        """Instantiate once under the ceilings and check ``wasmgate_abi_version() == 1``."""
        c = self._engine.ceilings
        lim = GuestLimits(
            memory_bytes=c.memory_bytes,
            table_elements=c.table_elements,
            deadline_s=min(1.0, c.deadline_s),
        )
        req = RequestState({}, lim)
        try:
            store = wasmtime.Store(self._engine.engine)
            nn = NnSession(NoModels(), req.log)
            self._prepare(store, nn, req, NoModels())
            store.set_wasi(restricted_wasi_config(req.sink("stdout"), req.sink("stderr")))
            with self._engine.guest_running():
                instance = self._pre.instantiate(store)
                got = RawFunc(store, instance, "wasmgate_abi_version", (0, 1))(store)
        except (wasmtime.Trap, wasmtime.WasmtimeError) as e:
            err = translate(e, req, near_memory_limit=False)
            raise AdapterLoadError(
                f"{self.name}: fails at instantiation ({err.cause}): {err}"
            ) from e
        finally:
            self._tls.req = self._tls.nn = None
        if got != ABI_VERSION:
            raise AdapterLoadError(
                f"{self.name}: wasmgate_abi_version() is {got}, host supports {ABI_VERSION}"
            )


def _slot_sink(slot: list[RequestState], stream: str) -> Any:
    def write(data: bytes) -> None:
        slot[0].sink(stream)(data)

    return write


def _post_checks(req: RequestState, status: int, lim: GuestLimits) -> None:
    if req.violation is not None:
        raise GuestTrap(
            f"guest passed a bad pointer to the host: {req.violation}", cause="oob", logs=req.logs
        )
    if time.monotonic() > req.deadline:
        how = " (it slept in poll_oneoff past the deadline)" if req.slept_past_deadline else ""
        raise GuestDeadlineExceeded(
            f"adapter exceeded its deadline of {lim.deadline_s * 1000:.0f} ms{how}", logs=req.logs
        )
    if req.output_refused:
        raise GuestOutputTooLarge(
            f"adapter output exceeds the limit of {lim.max_output_bytes} bytes", logs=req.logs
        )
    if status not in (0, 1, 2):
        raise GuestTrap(
            f"wasmgate_handle returned unknown status {status}", cause="abi", logs=req.logs
        )


def _check_imports(module: wasmtime.Module, name: str) -> None:
    for imp in module.imports:
        known = _KNOWN.get(imp.module)
        if known is None or imp.name not in known:
            hint = " (an unsupported wasi-nn extension)" if imp.module == NN_MODULE else ""
            raise AdapterLoadError(f"{name}: unknown import `{imp.module}::{imp.name}`{hint}")


def _check_exports(module: wasmtime.Module, name: str, engine: SandboxEngine) -> bool:
    exports = {e.name: e.type for e in module.exports}
    mem = exports.get("memory")
    if not isinstance(mem, wasmtime.MemoryType):
        raise AdapterLoadError(f"{name}: missing export `memory`")
    if mem.limits.min * 65536 > engine.ceilings.memory_bytes:
        raise AdapterLoadError(
            f"{name}: initial memory of {mem.limits.min} pages exceeds the ceiling"
        )
    for ext in exports.values():
        if isinstance(ext, wasmtime.TableType) and ext.limits.min > engine.ceilings.table_elements:
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
