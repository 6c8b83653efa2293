"""One guest instance of an adapter: its store, limits, WASI output slot and fast exports.

Invariants:
- ``new_store`` applies the memory/table/instance limits and the fuel budget *before*
  anything is instantiated in the store, and arms the epoch deadline (ticks from now, as
  `SandboxEngine.deadline_ticks` counts them) so start functions and ``_initialize`` run
  under it; a store gets exactly one instance.
- A request that starts on an instance made earlier (a spare) re-arms the deadline: it
  gets its own full deadline and the time the instance waited counts for nothing.
- An instance's WASI stdout/stderr write to whatever request is in its ``slot`` (set when a
  request takes the instance), never to a request that ran earlier.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import wasmtime

from wasmgate.sandbox.rawcall import RawFunc, RawMemory
from wasmgate.sandbox.wasi import restricted_wasi_config

if TYPE_CHECKING:
    from wasmgate.sandbox.host_api import RequestState
    from wasmgate.sandbox.limits import Ceilings, GuestLimits
    from wasmgate.sandbox.wasi_nn import NnSession

__all__ = ["Instance", "LimitsKey", "instantiate", "limits_key", "new_store"]

LimitsKey = tuple[int, int, int | None]
"""What a store's limits are made of once instantiated: memory, table elements, fuel."""


def limits_key(lim: GuestLimits) -> LimitsKey:
    """The limits an instance is built under (the deadline is re-armed per request)."""
    return (lim.memory_bytes, lim.table_elements, lim.fuel)


@dataclass
class Instance:
    """A live instance and what a request needs to drive it."""

    store: wasmtime.Store
    memory: RawMemory
    alloc: RawFunc
    handle: RawFunc
    slot: list[RequestState]  # the request its WASI stdout/stderr currently belong to
    key: LimitsKey
    nn: NnSession

    def close(self) -> None:
        """Free the store (and the instance's memory) now instead of at garbage collection."""
        self.store.close()


def new_store(
    engine: wasmtime.Engine,
    ceilings: Ceilings,
    lim: GuestLimits,
    slot: list[RequestState],
    ticks: int,
) -> wasmtime.Store:
    """A store with ``lim``'s limits and fuel, an epoch deadline ``ticks`` from now
    (`SandboxEngine.deadline_ticks`), and WASI output going to ``slot``."""
    store = wasmtime.Store(engine)
    store.set_limits(
        memory_size=lim.memory_bytes,
        table_elements=lim.table_elements,
        instances=1,
        tables=4,
        memories=1,
    )
    if ceilings.fuel_enabled:
        store.set_fuel(lim.fuel if lim.fuel is not None else 2**63 - 1)
    store.set_epoch_deadline(ticks)
    store.set_wasi(restricted_wasi_config(_slot_sink(slot, "stdout"), _slot_sink(slot, "stderr")))
    return store


def instantiate(
    pre: wasmtime.InstancePre,
    store: wasmtime.Store,
    slot: list[RequestState],
    key: LimitsKey,
    nn: NnSession,
    *,
    initialize: bool,
) -> Instance:
    """Instantiate ``pre`` in ``store``, run ``_initialize`` if exported, look up the ABI."""
    instance = pre.instantiate(store)
    if initialize:
        RawFunc(store, instance, "_initialize", (0, 0))(store)
    return Instance(
        store,
        RawMemory(store, instance, "memory"),
        RawFunc(store, instance, "wasmgate_alloc", (1, 1)),
        RawFunc(store, instance, "wasmgate_handle", (2, 1)),
        slot,
        key,
        nn,
    )


def _slot_sink(slot: list[RequestState], stream: str) -> Any:
    def write(data: bytes) -> None:
        slot[0].sink(stream)(data)

    return write
