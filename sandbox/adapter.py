"""A validated daemon adapter and its per-request run (Guest ABI v1).

Invariants:
- Load-time validation (`wasmgate.sandbox.validate`): only known imports, the v1 exports
  with their exact types, initial memory/table within the ceilings, and
  ``wasmgate_abi_version()`` returns 1.
- ``fresh`` mode (default): every ``run`` gets an instance nobody used before, in its own
  ``Store``, so nothing leaks between requests. It is usually a *spare*
  (`wasmgate.sandbox.spares`) started on the engine's background thread after an earlier
  request, under the same memory/table/fuel limits, its deadline re-armed when the request
  takes it. Spares are only made while the adapter's start code (start function,
  ``_initialize``) calls no host function and writes nothing (it would have seen the
  request in fresh mode). A request with other limits, or with no spare ready,
  instantiates on its own path as without spares. Used instances are closed off the path.
- ``pooled`` mode keeps one instance per worker thread and reuses it; this saves
  instantiation and ``_initialize`` but lets guest globals, heap and wasi-nn handles persist
  between requests served by that thread — only for adapters whose authors ask for it. A
  pooled instance that fails in any way is discarded.
- Every ``run`` is bounded: memory/table/instance limits and fuel on the store before
  instantiation, an epoch deadline armed before instantiation (so start functions and
  ``_initialize`` are covered) and re-armed when a request takes a spare, capped
  output/log/events. Host functions run on the calling thread and find their request
  through a thread-local, so one adapter serves many threads at once.
- ``close()`` closes the adapter's spares (its owner, the loaded bundle, calls it when the
  version is unloaded); runs after ``close`` still work, without spares.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import wasmtime

from wasmgate.sandbox.errors import (
    AdapterLoadError,
    GuestResourceExhausted,
    GuestTrap,
    SandboxError,
)
from wasmgate.sandbox.host_api import RequestState, define_host_api
from wasmgate.sandbox.instance import Instance, instantiate, limits_key, new_store
from wasmgate.sandbox.limits import GuestLimits
from wasmgate.sandbox.memory import GuestPointerError
from wasmgate.sandbox.models import ModelProvider, NoModels
from wasmgate.sandbox.rawcall import CallbackKeeper
from wasmgate.sandbox.spares import Later, Spares, Unbound
from wasmgate.sandbox.state import AdapterState
from wasmgate.sandbox.traps import check_outcome, translate
from wasmgate.sandbox.validate import ABI_VERSION, check_exports, check_imports, probe_abi
from wasmgate.sandbox.wasi import define_restricted_wasi
from wasmgate.sandbox.wasi_nn import NnSession, define_wasi_nn

if TYPE_CHECKING:
    from wasmgate.sandbox.engine import SandboxEngine

__all__ = ["ABI_VERSION", "Adapter", "GuestResult", "NoModels"]


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
    model_calls: Mapping[str, int] = field(default_factory=dict)
    """Runs of each model the guest started through wasi-nn (name -> count)."""
    from_spare: bool = False
    """The instance was a spare made ready before the request (``instantiate_s`` is then
    only the time to take it)."""


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
        check_imports(module, name)
        self._has_initialize = check_exports(module, name, engine.ceilings)
        linker = wasmtime.Linker(engine.engine)
        self._keeper = CallbackKeeper()  # the raw host callbacks live as long as _pre
        define_restricted_wasi(linker, self._keeper, self._deadline, engine.ceilings.tick_s)
        # getattr partials: the thread's binding without a Python frame per host call
        define_wasi_nn(linker, self._keeper, functools.partial(getattr, self._tls, "nn"))
        define_host_api(linker, self._keeper, functools.partial(getattr, self._tls, "req"))
        try:
            self._pre = linker.instantiate_pre(module)
        except wasmtime.WasmtimeError as e:
            raise AdapterLoadError(f"{name}: cannot link: {e}") from e
        cap = (lambda: engine.ceilings.spare_instances) if mode == "fresh" else (lambda: 0)
        self._spares = Spares(self._make_spare, engine.background, cap)
        probe_abi(self._engine, self._pre, self._tls, name)

    def with_mode(self, mode: str) -> Adapter:
        """Return this adapter in ``fresh`` or ``pooled`` mode (validation is repeated)."""
        return Adapter(self._engine, self._module, name=self.name, mode=mode)

    @property
    def spares_ready(self) -> int:
        """Spare instances ready for the next requests (observability, tests)."""
        return self._spares.ready

    @property
    def spares_taken(self) -> int:
        """Requests that ran on a spare so far, failed ones included (observability, tests)."""
        return self._spares.taken

    @property
    def spares_waiting(self) -> int:
        """Used instances not closed yet (at most ``spare_instances - 1``; tests)."""
        return self._spares.waiting

    def close(self) -> None:
        """Close the spare instances (idempotent); later runs instantiate on their path."""
        self._spares.close()

    def run(
        self,
        payload: bytes,
        meta: Mapping[str, str],
        models: ModelProvider,
        limits: GuestLimits,
        *,
        state: AdapterState | None = None,
        after: Later | None = None,
    ) -> GuestResult:
        """Run one request; blocking, thread-safe. Raises ``GuestTrap`` (and subclasses).

        The limits are first capped by the engine's ceilings. An instance nobody used
        before runs the request unless the adapter is ``pooled``. Errors carry the logs
        captured so far. ``state`` is what the ``state_*`` imports reach (None: not granted).
        ``after`` runs the after-request work of fresh mode (close the used instance, start
        the next spare; default: the engine's background thread). A caller on an event
        loop passes its ``call_soon``: the work then follows the answer on the same thread
        instead of contending with it for the GIL.
        """
        lim = limits.capped(self._engine.ceilings)
        if lim.fuel is not None and not self._engine.ceilings.fuel_enabled:
            raise SandboxError("a fuel limit was requested but the engine has fuel disabled")
        req = RequestState(meta, lim, state=state)
        start = time.perf_counter()
        inst: Instance | None = None
        try:
            with self._engine.guest_running():
                inst, spare = self._acquire(req, models)
                ready = time.perf_counter()
                status = self._call(inst, req, payload)
        except (wasmtime.Trap, wasmtime.WasmtimeError) as e:
            req.flush()
            raise translate(e, req, near_memory_limit=self._near_memory_limit(inst, lim)) from e
        finally:
            self._tls.req = self._tls.nn = None
            req.flush()
            self._retire(inst, lim, after)
        done = time.perf_counter()
        check_outcome(req, status, lim)
        if self.mode == "pooled":
            self._tls.pooled = inst
        return GuestResult(
            status=status,
            output=req.output,
            fallback_reason=req.fallback_reason,
            events=req.events,
            logs=req.logs,
            instantiate_s=ready - start,
            run_s=done - ready,
            infer_s=inst.nn.infer_s,
            model_calls=inst.nn.calls,
            from_spare=spare,
        )

    def _acquire(self, req: RequestState, models: ModelProvider) -> tuple[Instance, bool]:
        pooled: Instance | None = getattr(self._tls, "pooled", None)
        self._tls.pooled = None
        if pooled is not None:
            self._reuse(pooled, req, models)
            return pooled, False
        c = self._engine.ceilings
        lim = req.limits
        nn = NnSession(models, req.log, c.max_nn_handles, c.max_nn_contexts)
        nn.deadline, nn.host_budget = req.deadline, lim.memory_bytes  # host tensors count too
        self._tls.req, self._tls.nn = req, nn  # before instantiation: _initialize may call us
        key = limits_key(lim)
        inst = self._spares.take(key) if self.mode == "fresh" else None
        if inst is not None:
            self._engine.arm(inst.store, lim.deadline_s)  # the request's own deadline, from now
            inst.slot[0], inst.nn = req, nn
            return inst, True
        slot = [req]
        ticks = self._engine.deadline_ticks(lim.deadline_s)
        store = new_store(self._engine.engine, c, lim, slot, ticks)
        return instantiate(self._pre, store, slot, key, nn, initialize=self._has_initialize), False

    def _reuse(self, inst: Instance, req: RequestState, models: ModelProvider) -> None:
        """Pooled mode: the same instance, this request's limits, deadline and bindings."""
        lim, c, store = req.limits, self._engine.ceilings, inst.store
        store.set_limits(lim.memory_bytes, lim.table_elements, instances=1, tables=4, memories=1)
        if c.fuel_enabled:
            store.set_fuel(lim.fuel if lim.fuel is not None else 2**63 - 1)
        self._engine.arm(store, lim.deadline_s)
        inst.slot[0] = req
        nn = inst.nn
        nn.provider, nn.log, nn.infer_s, nn.deadline = models, req.log, 0.0, req.deadline
        if nn.calls:  # a new dict: the last request's result keeps its own
            nn.calls = {}
        nn.host_budget = lim.memory_bytes
        self._tls.req, self._tls.nn = req, nn

    def _retire(self, inst: Instance | None, lim: GuestLimits, after: Later | None) -> None:
        """Fresh mode: close the used instance off the path and make the next one ready."""
        if self.mode != "fresh" or inst is None:
            return  # no instance: instantiation failed, a spare would fail the same way
        self._spares.recycle(inst, lim, after)

    def _make_spare(self, lim: GuestLimits) -> Instance | None:
        """On the background thread: a started instance under ``lim``, or None if it failed
        or its start code touched the host (then it would have depended on a request)."""
        init = RequestState({}, lim)  # catches WASI output of the start code
        unbound = Unbound()
        slot = [init]
        self._tls.req = self._tls.nn = unbound
        store: wasmtime.Store | None = None
        try:
            ticks = self._engine.deadline_ticks(lim.deadline_s)  # re-armed when taken
            store = new_store(self._engine.engine, self._engine.ceilings, lim, slot, ticks)
            with self._engine.guest_running():
                inst = instantiate(
                    self._pre, store, slot, limits_key(lim), NnSession(NoModels(), init.log),
                    initialize=self._has_initialize,
                )  # fmt: skip
        except (wasmtime.Trap, wasmtime.WasmtimeError):
            if store is not None:
                store.close()
            return None
        finally:
            self._tls.req = self._tls.nn = None
        if unbound.touched or init.logs or any(init.pending.values()):
            inst.close()
            return None
        return inst

    def _call(self, inst: Instance, req: RequestState, payload: bytes) -> int:
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

    def _near_memory_limit(self, inst: Instance | None, lim: GuestLimits) -> bool:
        if inst is None:
            return False
        return inst.memory.data_len(inst.store) + 65536 > lim.memory_bytes

    def _deadline(self) -> tuple[float, Any] | None:
        req: RequestState | None = getattr(self._tls, "req", None)
        if req is None:
            return None
        return req.deadline, lambda: setattr(req, "slept_past_deadline", True)
