"""`Lines`: patient requests that met `Busy` wait their turn in arrival order.

An MQTT backlog arrives all at once (64 devices, a restart, a burst): more requests than an
adapter admits (``max_in_flight`` + ``queue_size``) while the broker holds the rest. The
transport is patient for those (``Route.patience_s``). Retrying each refused request after
its own backoff (10 ms, doubling to 200 ms) lost its place: requests that came later were
admitted in the gaps, and at 64 clients one request in a hundred waited most of a second
behind hundreds of later ones (`bench/bench_cores.py`: p99 760 ms at p50 28 ms, a request
overtaken by 486 later ones).

Here a refused request joins its name's line instead, and a new patient request joins the
back of a line that is not empty rather than trying the gate before those waiting. The
head of the line tries again whenever a request of that name through this data plane ends
(a slot freed), or after `POLL_S` (a slot another transport freed wakes nobody here). A
head refused again keeps its place at the front. Everything runs on the event loop.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TypeVar

from wasmgate.runtime.errors import Busy

T = TypeVar("T")
POLL_S = 0.05
"""How long the head of a line waits for a freed slot before it tries again anyway."""


class _Waiter:
    """One request in a line: woken by its future; ``slot``: a freed slot is its to try."""

    __slots__ = ("slot", "woken")

    def __init__(self) -> None:
        self.woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.slot = False

    def wake(self) -> None:
        if not self.woken.done():
            self.woken.set_result(None)


class Lines:
    """The lines of one data plane, by request name; a line exists only while not empty."""

    def __init__(self) -> None:
        self._lines: dict[str, deque[_Waiter]] = {}

    def freed(self, name: str) -> None:
        """A request of ``name`` ended: the oldest waiting request without a slot gets it
        (two requests may end in one turn of the loop: each slot has its own taker)."""
        for waiter in self._lines.get(name, ()):
            if not waiter.slot:
                waiter.slot = True
                waiter.wake()
                return

    async def patiently(
        self,
        name: str,
        call: Callable[[], Awaitable[T]],
        give_up: float,
        on_retry: Callable[[], None] | None = None,
    ) -> T:
        """``call()``; refused with `Busy`, it waits in ``name``'s line (at most until
        ``give_up``, monotonic: then the last `Busy` is raised) and tries again in turn."""
        front = False
        if name not in self._lines:
            try:
                return await call()
            except Busy:
                if time.monotonic() >= give_up:
                    raise
        while True:
            await self._turn(name, front, give_up)
            if on_retry is not None:
                on_retry()
            try:
                return await call()
            except Busy:
                if time.monotonic() >= give_up:
                    raise
                front = True  # still the oldest: back to the front

    async def _turn(self, name: str, front: bool, give_up: float) -> None:
        """Wait in ``name``'s line until this request may try: a freed slot was handed to
        it, or it has been the head for `POLL_S` (only the head polls)."""
        line = self._lines.setdefault(name, deque())
        me = _Waiter()
        if front:
            line.appendleft(me)
        else:
            line.append(me)
        tried = False
        try:
            while not me.slot:
                left = give_up - time.monotonic()
                if left <= 0:
                    raise Busy(f"{name}: busy; no slot freed within the transport's patience")
                head = line[0] is me
                await asyncio.wait([me.woken], timeout=min(left, POLL_S) if head else left)
                if me.woken.done() and not me.slot:  # it became the head: it polls now
                    me.woken = asyncio.get_running_loop().create_future()
                elif head and not me.slot:
                    break  # polled: try anyway (a slot freed elsewhere wakes nobody here)
            tried = True
        finally:
            self._leave(name, line, me, tried)

    def _leave(self, name: str, line: deque[_Waiter], me: _Waiter, tried: bool) -> None:
        """Out of the line; a slot handed to it but not tried (deadline, cancel) goes to the
        next one, and a new head is told so (it polls from now on)."""
        was_head = line[0] is me
        line.remove(me)
        if not line:
            del self._lines[name]
            return
        if me.slot and not tried:
            self.freed(name)
        if was_head:
            line[0].wake()
