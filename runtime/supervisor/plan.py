"""How many data-plane workers a gateway runs, and on which CPU each interpreter sits.

``[workers] count = auto`` is one worker per CPU of the process's affinity
(``os.sched_getaffinity``: systemd's ``CPUAffinity=``, taskset, a cpuset; not
``os.cpu_count()``, the machine's), bounded by memory: ``MemAvailable`` / 256 MiB caps the
count (a worker that held its own copy of everything measured 150-250 MB with the demo
bundles; forked from the zygote, with the weights shared, about 50 MB PSS: the plan keeps
the margin for bundles larger than the demo's). One CPU
(or one worker's worth of memory) means one process, exactly as with ``count = 1``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from wasmgate.runtime.ops.config import HttpSettings, LimitSettings, Settings
from wasmgate.runtime.ops.cpus import CpuPlan
from wasmgate.typed import replace

__all__ = [
    "WORKER_MIB",
    "WorkerPlan",
    "plan_workers",
    "share_connections",
    "share_limits",
    "shares",
]

WORKER_MIB = 256
"""The memory a worker is planned at (``auto``): the demo's measured 150-250 MB, rounded up."""

_MEMINFO = Path("/proc/meminfo")


@dataclass(frozen=True)
class WorkerPlan:
    """``count`` workers; worker ``i`` runs its Python threads on ``cpu_of(i)``."""

    count: int
    cpus: CpuPlan
    why: str

    def cpu_of(self, index: int) -> frozenset[int]:
        """Worker 0 on the last allowed CPU (CPU 0 takes most interrupts), 1 the one
        before, and so on round the allowed set."""
        allowed = sorted(self.cpus.allowed)
        return frozenset({allowed[(len(allowed) - 1 - index) % len(allowed)]})


def plan_workers(settings: Settings, cpus: CpuPlan, meminfo: Path = _MEMINFO) -> WorkerPlan:
    """The worker count ``[workers] count`` asks for, with the reason (for the log)."""
    wanted = settings.workers.count
    if wanted != "auto":
        return WorkerPlan(wanted, cpus, f"workers.count = {wanted}")
    by_memory = _available_mib(meminfo) // WORKER_MIB
    count = max(1, min(cpus.count, by_memory))
    why = f"auto: {cpus.count} CPUs in the affinity"
    if by_memory < cpus.count:
        why += f", memory for {by_memory} ({WORKER_MIB} MiB each)"
    return WorkerPlan(count, cpus, why)


def _available_mib(meminfo: Path) -> int:
    """``MemAvailable`` in MiB; unknown (no /proc) counts as plenty."""
    try:
        for line in meminfo.read_text(encoding="ascii").splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return 1 << 30


def shares(total: int, parts: int, index: int) -> int:
    """``index``'s share of a gateway-wide cap split over ``parts`` (the shares add up to
    ``total`` when it is at least ``parts``; each at least 1)."""
    return max(1, total // parts + (1 if index < total % parts else 0))


def share_limits(limits: LimitSettings, part: int, parts: int) -> LimitSettings:
    """Part ``part`` of the gateway's queue (``max_in_flight`` is counted over all the
    processes exactly: `wasmgate.runtime.serving.slots`)."""
    queue = shares(limits.queue_size, parts, part) if limits.queue_size else 0
    return replace(limits, queue_size=queue)


def share_connections(http: HttpSettings, count: int, index: int) -> HttpSettings:
    """Worker ``index``'s part of the gateway's connection caps (only workers take HTTP
    connections); a peer's connections spread over the workers by port, so a peer may
    meet its share on one worker before its total."""
    return replace(
        http,
        max_connections=shares(http.max_connections, count, index),
        max_connections_per_peer=shares(http.max_connections_per_peer, count, index),
    )
