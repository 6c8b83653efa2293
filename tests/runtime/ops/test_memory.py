"""`trim_heap` returns the pages a worker thread freed in its malloc arena (glibc, this host).

The check runs in a child process that first turns off glibc's own trimming on free()
(``mallopt(M_TRIM_THRESHOLD, …)``): otherwise whether free() already gave the pages back
depends on which arena a thread happens to get, and the premise (freed, still resident)
would hold only sometimes. The setting stays in the child, never in the test process.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys

from wasmgate.runtime.ops.memory import HeapKeeper

CHILD = r"""
import ctypes, threading
from pathlib import Path
from wasmgate.runtime.ops.memory import trim_heap

libc = ctypes.CDLL(None)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
assert libc.mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1  # free() never trims by itself
assert libc.mallopt(M_MMAP_THRESHOLD, 1 << 20) == 1  # 64 KiB blocks come from the arena
CHUNK = 64 * 1024

def rss_mib():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

keep = []
def churn():
    blocks = [b"\1" * CHUNK for _ in range(512)]  # 32 MiB, touched (calloc pages are not)
    keep.append(b"\1" * CHUNK)  # stays, above the freed blocks
    del blocks

before = rss_mib()
worker = threading.Thread(target=churn)
worker.start()
worker.join()
freed = rss_mib()
trim_heap()
print(round(freed - before, 1), round(rss_mib() - before, 1), all(len(b) == CHUNK for b in keep))
"""


def test_trim_returns_what_a_worker_thread_freed() -> None:
    out = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    freed_mib, trimmed_mib, kept = float(out[0]), float(out[1]), out[2]
    assert freed_mib > 16, out  # the premise: free() kept most of the 32 MiB resident
    assert trimmed_mib < 8, out  # and the trim gave it back
    assert kept == "True"  # live allocations are untouched


async def _trims(keeper: HeapKeeper, want: int) -> None:
    async with asyncio.timeout(10):
        while keeper.trims < want:
            await asyncio.sleep(0.01)


async def test_the_keeper_trims_after_a_budget_of_large_messages_or_when_quiet() -> None:
    keeper = HeapKeeper(budget_bytes=1 << 20, idle_s=0.05)
    async with keeper.running():
        for _ in range(1000):
            keeper.note(HeapKeeper.LARGE_BYTES - 1)  # ordinary messages: never counted
        await asyncio.sleep(0.2)  # quiet window: nothing pending, so no trim may come
        assert keeper.trims == 0
        for _ in range(16):
            keeper.note(64 * 1024)  # 1 MiB of large ones: the budget
        await _trims(keeper, 1)
        keeper.note(64 * 1024)  # below the budget: trimmed once it is quiet
        await _trims(keeper, 2)
