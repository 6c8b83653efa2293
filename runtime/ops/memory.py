"""Give the C heap's free pages back to the kernel after bursts of large, short-lived buffers.

Loading a bundle reads each model file into memory more than once (the verified blob, the
cached optimized graph, the copy ORT parses), in worker threads. glibc keeps what those
threads freed in their malloc arenas: measured on the 3-bundle bench daemon, ~20 MB of
idle RSS that nothing used any more. ``malloc_trim(0)`` walks every arena and returns the
free pages (``madvise``); live allocations are not moved, so it is safe at any moment and
takes a few milliseconds. Called once the start-up bundles are loaded and after every
change of what serves (installs, swaps and unloads free the same kind of buffers), and by
`HeapKeeper` after bursts of large messages.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
from collections.abc import AsyncIterator

from wasmgate.runtime.ops.tasks import background, wake_or_timeout


def trim_heap() -> None:
    """Return the C heap's free pages to the kernel (nothing to do where there is no glibc)."""
    try:
        trim = ctypes.CDLL(None).malloc_trim  # the process's own libc (dlopen caches it)
    except (AttributeError, OSError):  # musl, macOS: no malloc_trim
        return
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    trim(0)


class HeapKeeper:
    """Trims the C heap after a burst of large, short-lived buffers on a transport.

    A flood of MQTT requests with 60 KB Response Topics and Correlation Data left RSS
    +227 MiB for good (1,200 requests; nothing referenced them: one ``malloc_trim(0)`` took
    it from 299 to 81 MiB). glibc serves such buffers from the paho thread's and the loop's
    arenas once its mmap threshold has risen (it does after the models' large frees) and keeps
    the freed pages. So a transport notes the size of each large message it took in; once
    ``budget_bytes`` of them passed, and twice more once the traffic went quiet for
    ``idle_s``, the heap is trimmed off the loop, at most once per ``idle_s``. What stays
    resident above the plateau is then bounded by the budget, not by the flood.
    """

    LARGE_BYTES = 16 * 1024
    """Messages below this are what every request costs: counting them is not worth it."""

    def __init__(self, budget_bytes: int = 8 << 20, idle_s: float = 1.0) -> None:
        self._budget = budget_bytes
        self._idle_s = idle_s
        self._pending = 0
        self._trailing = 0
        """Quiet-window trims still due: buffers of a burst are often freed a moment after
        the last message (answers awaiting their PUBACK), so a burst ends with two."""
        self._full = asyncio.Event()
        self.trims = 0

    def note(self, nbytes: int) -> None:
        """A message of ``nbytes`` was taken in (called on the loop)."""
        if nbytes >= self.LARGE_BYTES:
            self._pending += nbytes
            self._trailing = 2
            if self._pending >= self._budget:
                self._full.set()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        async with background(self._run(), "heap-keeper"):
            yield

    async def _run(self) -> None:
        while True:
            wait = self._idle_s if self._trailing else None
            full = await wake_or_timeout(self._full, wait)
            if not full:
                self._trailing -= 1
            self._full.clear()
            self._pending = 0
            await asyncio.to_thread(trim_heap)
            self.trims += 1
            await asyncio.sleep(self._idle_s)  # at most one trim per idle_s under a flood
