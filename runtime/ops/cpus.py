"""Where the daemon's threads run: the interpreter's threads on one CPU, native pools on all.

One CPython interpreter runs Python on one CPU at a time (the GIL), and the daemon's
Python threads (the event loop, the guest and batch pools, the epoch ticker, the sandbox's
background builder, the MQTT and gRPC threads) hand the GIL to each other several times per
request. On one CPU a hand-off is a switch on a warm core, made when the holder blocks. Spread
over several CPUs, every GIL release (each socket call of the loop, each host call of a
guest) lets a thread spinning up on another CPU take it, and the releaser then waits for it
back: a futex wake across cores, 15 context switches per adapter request instead of 3.
Measured on a 2-vCPU machine (`bench/bench_cores.py`, a fresh ``serve --demo`` per cell,
the digits adapter at 16 connections): the same daemon served 0.55-0.70x as many requests
on both CPUs as on one.

So when the process may run on several CPUs, `CpuPlan.apply` puts every thread it has on
one of them (the last of its affinity: on the boards we target CPU 0 takes most interrupts
and system work), and threads created later inherit that. Native pools that run without
the GIL (ONNX Runtime's intra-op threads, LiteRT's) are created inside `CpuPlan.native`,
which widens the creating thread to every allowed CPU for the duration, so inference still
spreads over the cores. Using more cores for Python itself takes more processes.

The allowed set is the process's affinity at start (``os.sched_getaffinity``: systemd's
``CPUAffinity=``, ``taskset``, a cgroup's cpuset), not ``os.cpu_count()``, which counts the
machine's CPUs whatever the process may use; pool sizes derive from it too.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CpuPlan"]

log = logging.getLogger("wasmgate.cpus")

_TASKS = Path("/proc/self/task")


@dataclass(frozen=True)
class CpuPlan:
    """The CPUs the process may use and the one its Python threads run on."""

    allowed: frozenset[int]
    python: frozenset[int]

    @classmethod
    def current(cls) -> CpuPlan:
        """Today's affinity, every CPU for Python (nothing pinned: see `one_cpu`)."""
        allowed = _affinity()
        return cls(allowed, allowed)

    def one_cpu(self) -> CpuPlan:
        """The same allowed set, Python on its last CPU (unchanged where threads cannot be
        pinned: not Linux)."""
        if not hasattr(os, "sched_setaffinity"):
            return self
        return CpuPlan(self.allowed, frozenset({max(self.allowed)}))

    @property
    def count(self) -> int:
        """How many CPUs the process may use (sizes thread pools)."""
        return len(self.allowed)

    @property
    def pinned(self) -> bool:
        return self.python != self.allowed

    def apply(self) -> int:
        """Move every thread of this process onto ``python``; returns how many moved."""
        if not self.pinned:
            return 0
        moved = 0
        for tid in _threads():
            try:
                os.sched_setaffinity(tid, self.python)
            except OSError:  # a thread that ended meanwhile
                continue
            moved += 1
        return moved

    @contextmanager
    def native(self) -> Iterator[None]:
        """Run the block with the calling thread on every allowed CPU: the threads a
        native library starts in it (ONNX Runtime's intra-op pool) inherit that set."""
        if not self.pinned:
            yield
            return
        os.sched_setaffinity(0, self.allowed)
        try:
            yield
        finally:
            os.sched_setaffinity(0, self.python)

    def describe(self) -> dict[str, object]:
        """For the status document and the start log."""
        return {
            "allowed": sorted(self.allowed),
            "python": sorted(self.python),
            "pinned": self.pinned,
        }


def _affinity() -> frozenset[int]:
    getter = getattr(os, "sched_getaffinity", None)
    if getter is None:  # not Linux: nothing to pin, one "CPU" per os.cpu_count()
        return frozenset(range(os.cpu_count() or 1))
    return frozenset(getter(0))


def _threads() -> list[int]:
    try:
        return [int(t.name) for t in _TASKS.iterdir()]
    except OSError:  # no /proc: this thread only
        return [0]
