"""`wake_or_timeout`: woken, timed out, and a cancel never lost (the loops it ends rely on it)."""

from __future__ import annotations

import asyncio

from wasmgate.runtime.ops.tasks import wake_or_timeout


async def test_woken_or_timed_out() -> None:
    wake = asyncio.Event()
    assert not await wake_or_timeout(wake, 0.01)
    wake.set()
    assert await wake_or_timeout(wake, None)


async def test_a_cancel_landing_with_the_wake_up_is_raised() -> None:
    """Whichever loop turn after ``set()`` the cancel lands in, the waiter is cancelled: 3.11's
    ``wait_for`` returned True instead when the event's own waiter had already finished."""
    for turns in range(4):
        wake = asyncio.Event()
        task = asyncio.create_task(wake_or_timeout(wake, 60))
        await asyncio.sleep(0)  # it waits
        wake.set()
        for _ in range(turns):
            await asyncio.sleep(0)
        asked = task.cancel()  # False: it had returned already (then True is right)
        done, _ = await asyncio.wait([task], timeout=5)
        assert task in done
        assert task.cancelled() == asked, f"a cancel {turns} turns after set() was dropped"
