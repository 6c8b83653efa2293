"""One background task for the length of a ``with`` block: started on entry, cancelled and
awaited on exit (so nothing outlives its owner and no "task was destroyed" warning); and
`wake_or_timeout`, the idle wait of such a task's loop that never drops that cancel; and
`process_gone`, a wait for another process's end."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any

from wasmgate._compat import timeout


@contextlib.asynccontextmanager
async def background(work: Coroutine[Any, Any, None], name: str) -> AsyncIterator[None]:
    task = asyncio.create_task(work, name=name)
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def wake_or_timeout(wake: asyncio.Event, timeout_s: float | None) -> bool:
    """Wait until ``wake`` is set (True) or ``timeout_s`` passed (False; None: no limit).

    Not ``asyncio.wait_for``: on 3.11 it returns the result and drops a cancel that lands in
    the loop turn the event is set (gh-86296). A ``while True`` loop ended by its owner's
    cancel then runs on, and the owner's shutdown waits for it for ever (a store forwarder
    cancelled as a PUBACK woke it). ``asyncio.timeout`` waits in the calling task, so a cancel
    always reaches it.
    """
    with contextlib.suppress(TimeoutError):
        async with timeout(timeout_s):
            return await wake.wait()
    return False


async def process_gone(pid: int, poll_s: float = 0.05) -> None:
    """Return once process ``pid`` has ended (a zombie counts as ended: its parent may
    reap it later). A pidfd where the kernel has one (5.3+), else polling."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except (AttributeError, OSError):  # no pidfd here: poll /proc
        while _running(pid):  # noqa: ASYNC110 - nothing to wait on without a pidfd
            await asyncio.sleep(poll_s)
        return
    loop = asyncio.get_running_loop()
    ended = asyncio.Event()
    loop.add_reader(fd, ended.set)  # readable once the process has ended
    try:
        await ended.wait()
    finally:
        loop.remove_reader(fd)
        os.close(fd)


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def mark_retrieved(fut: asyncio.Future[None]) -> None:
    """A done callback marking a future's exception as retrieved: its waiter may have timed
    out or been cancelled already, and asyncio would log the exception at exit."""
    if not fut.cancelled():
        fut.exception()
