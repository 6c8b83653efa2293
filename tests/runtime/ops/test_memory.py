"""`trim_heap` returns the pages a worker thread freed in its malloc arena (glibc, this host)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from wasmgate.runtime.ops.memory import trim_heap

CHUNK = 64 * 1024  # below glibc's mmap threshold: served from the thread's arena


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _churn(keep: list[bytes]) -> None:
    # 32 MiB in small blocks (one arena heap), then one block that stays: the arena's top
    # is in use, so free() alone cannot shrink it and the pages stay resident until a trim.
    blocks = [bytes(CHUNK) for _ in range(512)]
    keep.append(bytes(CHUNK))
    del blocks


def _in_a_thread(keep: list[bytes]) -> None:
    worker = threading.Thread(target=_churn, args=(keep,))
    worker.start()
    worker.join()


def test_trim_returns_what_a_worker_thread_freed() -> None:
    keep: list[bytes] = []
    for _ in range(5):  # which arena a new thread gets varies; the premise needs a reused one
        trim_heap()
        before = _rss_mib()
        _in_a_thread(keep)
        if _rss_mib() - before > 16:  # the premise: free() kept most of the 32 MiB resident
            trim_heap()
            assert _rss_mib() - before < 8  # and the trim gave it back
            assert all(len(b) == CHUNK for b in keep)  # live allocations are untouched
            return
    pytest.fail("free() returned the blocks itself in every round: nothing left to trim")
