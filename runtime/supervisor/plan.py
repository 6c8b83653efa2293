"""How many data-plane workers a gateway runs, and on which CPU each interpreter sits.

``[workers] count = auto`` is one worker per CPU of the process's affinity
(``os.sched_getaffinity``: systemd's ``CPUAffinity=``, taskset, a cpuset; not
``os.cpu_count()``, the machine's), bounded by memory: each worker holds its own copy of
the sandbox, the interpreter and (until weights are shared) the models, measured at
150-250 MB with the demo bundles, so ``MemAvailable`` / 256 MiB caps the count. One CPU
(or one worker's worth of memory) means one process, exactly as with ``count = 1``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from wasmgate.runtime.ops.config import Settings
from wasmgate.runtime.ops.cpus import CpuPlan

__all__ = ["WORKER_MIB", "WorkerPlan", "plan_workers"]

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
