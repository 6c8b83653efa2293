"""Admission control: at most N requests running per adapter, at most Q waiting, the rest busy.

Never an unbounded queue: a request that finds N running and Q waiting is refused at once
with `Busy`; a waiting request whose deadline passes leaves the queue with
`DeadlineExceeded`. A request answered before its work ended (a deadline, a cancelled
client) hands that work to `Gate.hold`: its slot stays counted until the work is done, so
native runs past their deadline are charged to their own tenant, never to the others.
Everything here runs on the event loop (no locks needed).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from wasmgate._compat import timeout
from wasmgate.runtime.errors import Busy, DeadlineExceeded
from wasmgate.runtime.serving.slots import GatewaySlots

_POLL_S = 0.005


@dataclass
class GateStats:
    running: int
    waiting: int
    max_in_flight: int
    queue_size: int


class Gate:
    """One adapter's (or model's) admission gate."""

    def __init__(
        self,
        name: str,
        max_in_flight: int,
        queue_size: int,
        on_change: Callable[[str, GateStats], None] | None = None,
        slots: GatewaySlots | None = None,
    ) -> None:
        """``slots``: the gateway's slot table when several processes serve (workers):
        ``max_in_flight`` then counts the running requests of every process."""
        self.name = name
        self._on_change = on_change
        self._slots = slots
        self._polling = False
        self._max = max_in_flight
        self._queue_size = queue_size
        self._running = 0
        self._waiters: list[asyncio.Future[None]] = []

    def resize(self, max_in_flight: int, queue_size: int) -> None:
        """Apply new limits (a new bundle version); running requests are not disturbed."""
        self._max, self._queue_size = max_in_flight, queue_size
        self._wake()

    @property
    def stats(self) -> GateStats:
        return GateStats(self._running, len(self._waiters), self._max, self._queue_size)

    async def enter(self, deadline: float | None) -> float:
        """Take a running slot, queueing for one (`Busy` if the queue is full); the seconds
        spent queued (0 without waiting). Pair with `leave`."""
        if self._running < self._max and not self._waiters and self._take():
            self._running += 1
            self._changed()
            return 0.0
        start = time.monotonic()
        await self._wait(deadline)  # _wake() took the slot for us
        self._changed()
        return time.monotonic() - start

    def leave(self) -> None:
        """Give back the slot `enter` took."""
        self._running -= 1
        self._give()
        self._wake()
        self._changed()

    @contextlib.asynccontextmanager
    async def admit(self, deadline: float | None) -> AsyncIterator[float]:
        """Hold one running slot inside the block; yields the seconds spent queued."""
        queued = await self.enter(deadline)
        try:
            yield queued
        finally:
            self.leave()

    def hold(self, work: asyncio.Future[Any]) -> None:
        """Keep one running slot taken until ``work`` is done (called inside `admit`, whose
        own slot is then released as usual: the count never dips while the work runs)."""
        # The caller gave up on ``work``: its outcome (often the sandbox's own deadline
        # error) is retrieved here, or asyncio logs "exception was never retrieved".
        if work.done():
            _ = work.cancelled() or work.exception()
            return
        self._running += 1
        if self._slots is not None:
            self._slots.force(self.name)
        self._changed()

        def release(done: asyncio.Future[Any]) -> None:
            _ = done.cancelled() or done.exception()
            self._running -= 1
            self._give()
            self._wake()
            self._changed()

        work.add_done_callback(release)

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change(self.name, self.stats)

    async def _wait(self, deadline: float | None) -> None:
        if len(self._waiters) >= self._queue_size:
            raise Busy(f"{self.name}: busy ({self._running} running, {len(self._waiters)} queued)")
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        if self._slots is not None:
            self._wake()  # free here, taken elsewhere: start looking for a freed slot
        self._changed()
        wait_s = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            async with timeout(wait_s):  # not wait_for: wasmgate.runtime.ops.tasks
                await asyncio.shield(fut)  # a timeout leaves ``fut`` to the check below
        except BaseException as e:
            if fut.done():  # woken in the same instant: give the slot we were handed back
                self._running -= 1
                self._give()
                self._wake()
            else:
                fut.cancel()
                self._waiters.remove(fut)
            if isinstance(e, TimeoutError):
                raise DeadlineExceeded(f"{self.name}: deadline passed while queued") from None
            raise

    def _wake(self) -> None:
        while self._waiters and self._running < self._max and self._take():
            self._waiters.pop(0).set_result(None)
            self._running += 1  # the slot belongs to the woken waiter from now on
        if self._waiters and self._slots is not None and not self._polling:
            # A slot freed by another process wakes no one here: look again shortly.
            self._polling = True
            asyncio.get_running_loop().call_later(_POLL_S, self._poll)

    def _poll(self) -> None:
        self._polling = False
        self._wake()
        self._changed()

    def _take(self) -> bool:
        return self._slots is None or self._slots.take(self.name, self._max)

    def _give(self) -> None:
        if self._slots is not None:
            self._slots.give(self.name)
