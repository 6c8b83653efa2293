"""The event loop's default executor (``asyncio.to_thread``, ``run_in_executor(None, …)``):
every one of its threads started with the daemon, none later.

asyncio's own default executor is a ``ThreadPoolExecutor`` that starts a thread whenever a
job finds none idle, up to ``min(32, os.cpu_count() + 4)``, and keeps each one for the
life of the process. So the daemon's thread count was a record of the most blocking jobs
that ever overlapped (a bundle loading off the loop while the MQTT bridge reconnects, a
store write, a large body decoded …): a peak that first came an hour in added a thread an
hour in. The 2-minute soak compares the threads at rest after warm-up and at the end, and
once saw 25 → 26 (``asyncio_3`` started during the faults). The threads now all start with
the daemon, before it serves, so a steady daemon's thread set is exactly its start-up set.

Why not end a thread when its job ends instead: several of these jobs run per request
(large bodies are decoded off the loop), and a thread start per job costs more than the
few idle threads do (a stack each, reserved but untouched). The size is asyncio's default,
counted from the CPUs this process may use (`wasmgate.runtime.ops.cpus`), not the
machine's.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

__all__ = ["NAME", "Offload", "install", "size_for"]

NAME = "wasmgate-offload"
"""The threads' name prefix (``wasmgate-offload_0`` …)."""
_START_TIMEOUT_S = 30.0


def size_for(cpus: int) -> int:
    """asyncio's default size (``min(32, CPUs + 4)``), from the CPUs the process may use."""
    return min(32, cpus + 4)


class Offload(ThreadPoolExecutor):
    """A ``ThreadPoolExecutor`` whose ``workers`` threads all run once it is built.

    A ``ThreadPoolExecutor`` starts a thread per ``submit`` that finds no idle one; so
    ``workers`` jobs that each wait until all of them run start exactly ``workers``
    threads, through its public API only. It never starts another: a later job always
    finds the pool at its maximum (the pool's own rule), and its threads end at
    ``shutdown``."""

    def __init__(self, workers: int, name: str = NAME) -> None:
        super().__init__(workers, thread_name_prefix=name)
        everyone = threading.Barrier(workers + 1, timeout=_START_TIMEOUT_S)
        started = [self.submit(everyone.wait) for _ in range(workers)]
        try:
            everyone.wait()
        except threading.BrokenBarrierError:
            self.shutdown(wait=False, cancel_futures=True)
            raise RuntimeError(f"{name}: {workers} threads did not start") from None
        for job in started:
            job.result()  # the barrier is passed: each returns at once


def install(loop: asyncio.AbstractEventLoop, cpus: int) -> Offload:
    """Make a started `Offload` ``loop``'s default executor (before any ``to_thread``);
    ``asyncio.run`` shuts it down with the loop."""
    pool = Offload(size_for(cpus))
    loop.set_default_executor(pool)
    return pool
