"""Per-request guest limits and the daemon-wide ceilings that cap them.

Invariants:
- A guest never runs with a limit above the daemon's ``Ceilings``: ``Adapter.run`` always
  applies ``GuestLimits.capped(ceilings)`` first, whatever the manifest asked for.
- Every limit is finite: memory, table elements, wall-clock deadline, output bytes, captured
  log bytes. Fuel is optional and only enforced by an engine built with ``fuel_enabled``.
"""

from __future__ import annotations

from typing import Protocol

import msgspec

__all__ = ["MIB", "Ceilings", "GuestLimits", "ManifestLimits"]

MIB = 1024 * 1024


class Ceilings(msgspec.Struct, frozen=True):
    """Daemon-wide maxima and engine settings (one set per ``SandboxEngine``).

    ``tick_s`` is the epoch ticker period (deadline granularity). ``fuel_enabled`` builds the
    engine with fuel metering (needed for any ``GuestLimits.fuel``). ``max_module_bytes`` is
    the largest ``.wasm`` accepted by ``compile``; ``max_wasm_stack`` bounds guest recursion.
    ``max_nn_handles`` bounds wasi-nn graphs and ``max_nn_contexts`` execution contexts per
    instance (each context pins host tensor bytes, charged to the request's memory limit).
    With ``compile_timeout_s`` set, modules compile in a child process under that time and
    ``compile_memory_bytes`` (`wasmgate.sandbox.compiler`): the daemon sets it, because
    cranelift's compile time is superlinear for some small modules.
    """

    memory_bytes: int = 256 * MIB
    table_elements: int = 100_000
    deadline_s: float = 30.0
    fuel: int | None = None
    max_output_bytes: int = 16 * MIB
    max_log_bytes: int = 64 * 1024
    max_events: int = 64
    max_module_bytes: int = 32 * MIB
    max_wasm_stack: int = 512 * 1024
    max_nn_handles: int = 256
    max_nn_contexts: int = 16
    tick_s: float = 0.005
    fuel_enabled: bool = False
    compile_timeout_s: float | None = None
    """Compile in a child process killed after this long; None compiles in-process."""
    compile_memory_bytes: int = 512 * MIB
    """Memory the compile child may allocate (with ``compile_timeout_s`` only)."""
    spare_instances: int = 2
    """Never-used instances kept ready per fresh-mode adapter (0: instantiate per request
    on its path). Each holds the adapter's initial memory and an address-space reservation."""

    def __post_init__(self) -> None:
        """Refuse nonsensical ceilings early (they come from the operator's config)."""
        for name in ("memory_bytes", "table_elements", "max_output_bytes", "max_module_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"Ceilings.{name} must be positive")
        if self.spare_instances < 0:
            raise ValueError("Ceilings.spare_instances must not be negative")
        if self.deadline_s <= 0 or self.tick_s <= 0:
            raise ValueError("Ceilings.deadline_s and tick_s must be positive")


class ManifestLimits(Protocol):
    """The subset of a signed manifest's ``limits`` section the sandbox reads."""

    @property
    def memory_mb(self) -> int | None:
        """Linear memory limit in MiB."""
        ...

    @property
    def deadline_ms(self) -> int | None:
        """Wall-clock deadline in ms."""
        ...

    @property
    def fuel(self) -> int | None:
        """Fuel per request, if metered."""
        ...

    @property
    def max_output_bytes(self) -> int | None:
        """Largest response in bytes."""
        ...


class GuestLimits(msgspec.Struct, frozen=True):
    """Limits for one request's guest instance (after ``capped`` never above the ceilings).

    ``deadline_s`` is wall-clock time from the start of ``Adapter.run`` (instantiation
    included); the caller passes ``min(manifest deadline, time left for the request)``.
    """

    memory_bytes: int = 64 * MIB
    table_elements: int = 10_000
    deadline_s: float = 1.0
    fuel: int | None = None
    max_output_bytes: int = 1 * MIB
    max_log_bytes: int = 16 * 1024
    max_events: int = 16

    def within(self, deadline_s: float | None) -> GuestLimits:
        """These limits with the deadline lowered to ``deadline_s`` (time left), if sooner."""
        if deadline_s is None or deadline_s >= self.deadline_s:
            return self
        return msgspec.structs.replace(self, deadline_s=deadline_s)

    def capped(self, ceilings: Ceilings) -> GuestLimits:
        """Return these limits with every value lowered to the daemon's ceiling."""
        if self._within(ceilings):
            return self  # the usual case, without rebuilding a dataclass per request
        fuel = self.fuel
        if ceilings.fuel is not None:
            fuel = ceilings.fuel if fuel is None else min(fuel, ceilings.fuel)
        return msgspec.structs.replace(
            self,
            memory_bytes=min(self.memory_bytes, ceilings.memory_bytes),
            table_elements=min(self.table_elements, ceilings.table_elements),
            deadline_s=min(self.deadline_s, ceilings.deadline_s),
            fuel=fuel,
            max_output_bytes=min(self.max_output_bytes, ceilings.max_output_bytes),
            max_log_bytes=min(self.max_log_bytes, ceilings.max_log_bytes),
            max_events=min(self.max_events, ceilings.max_events),
        )

    def _within(self, c: Ceilings) -> bool:
        return (
            c.fuel is None
            and self.memory_bytes <= c.memory_bytes
            and self.table_elements <= c.table_elements
            and self.deadline_s <= c.deadline_s
            and self.max_output_bytes <= c.max_output_bytes
            and self.max_log_bytes <= c.max_log_bytes
            and self.max_events <= c.max_events
        )

    @classmethod
    def from_manifest(
        cls, limits: ManifestLimits, ceilings: Ceilings, *, deadline_s: float | None = None
    ) -> GuestLimits:
        """Build limits from a manifest's ``limits`` (unset fields keep defaults), capped.

        ``deadline_s`` (time left for the request) further lowers the manifest deadline.
        """
        base = cls()
        if limits.memory_mb is not None:
            base = msgspec.structs.replace(base, memory_bytes=limits.memory_mb * MIB)
        if limits.deadline_ms is not None:
            base = msgspec.structs.replace(base, deadline_s=limits.deadline_ms / 1000)
        if limits.max_output_bytes is not None:
            base = msgspec.structs.replace(base, max_output_bytes=limits.max_output_bytes)
        base = msgspec.structs.replace(base, fuel=limits.fuel)
        if deadline_s is not None:
            base = msgspec.structs.replace(base, deadline_s=min(base.deadline_s, deadline_s))
        return base.capped(ceilings)
