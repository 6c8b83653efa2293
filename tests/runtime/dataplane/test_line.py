"""Patient requests refused with `Busy` are admitted in arrival order, never overtaken by
later ones (`wasmgate.runtime.dataplane.line`), in front of a real admission `Gate`."""

from __future__ import annotations

import asyncio
import time

import pytest

from wasmgate.runtime.dataplane import line
from wasmgate.runtime.dataplane.line import Lines
from wasmgate.runtime.errors import Busy
from wasmgate.runtime.serving.admission import Gate

NAME = "adapter:a"


class Backend:
    """One request at a time through a real gate (no queue): the rest get `Busy`."""

    def __init__(self) -> None:
        self.gate = Gate("a", max_in_flight=1, queue_size=0)
        self.order: list[int] = []
        self.release = asyncio.Event()

    async def serve(self, n: int) -> int:
        async with self.gate.admit(None):
            self.order.append(n)
            await self.release.wait()
            self.release.clear()
        return n


async def _patient(lines: Lines, backend: Backend, n: int, patience_s: float = 30.0) -> int:
    try:
        return await lines.patiently(NAME, lambda: backend.serve(n), time.monotonic() + patience_s)
    finally:
        lines.freed(NAME)


async def _until(condition: object) -> None:
    for _ in range(2000):
        if callable(condition) and condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("condition never held")


async def test_refused_requests_are_admitted_in_arrival_order() -> None:
    lines, backend = Lines(), Backend()
    first = asyncio.create_task(_patient(lines, backend, 0))
    await _until(lambda: backend.order == [0])
    waiting = []
    for n in range(1, 6):  # refused one after the other while 0 runs
        waiting.append(asyncio.create_task(_patient(lines, backend, n)))
        await asyncio.sleep(0)
    await asyncio.sleep(0.01)
    for n in range(6):
        await _until(lambda n=n: len(backend.order) == n + 1)
        if n == 2:  # a newcomer while the line is not empty goes behind it
            waiting.append(asyncio.create_task(_patient(lines, backend, 6)))
            await asyncio.sleep(0)
        backend.release.set()
    await _until(lambda: len(backend.order) == 7)
    backend.release.set()
    assert await asyncio.gather(first, *waiting) == [0, 1, 2, 3, 4, 5, 6]
    assert backend.order == [0, 1, 2, 3, 4, 5, 6]


async def test_a_request_past_its_patience_gets_busy_and_leaves_the_line() -> None:
    lines, backend = Lines(), Backend()
    first = asyncio.create_task(_patient(lines, backend, 0))
    await _until(lambda: backend.order == [0])
    started = time.monotonic()
    with pytest.raises(Busy):
        await _patient(lines, backend, 1, patience_s=0.1)
    assert 0.1 <= time.monotonic() - started < 2.0
    later = asyncio.create_task(_patient(lines, backend, 2))  # not stuck behind a ghost
    backend.release.set()
    await _until(lambda: backend.order == [0, 2])
    backend.release.set()
    assert (await first, await later) == (0, 2)


async def test_a_slot_freed_elsewhere_is_found_by_polling() -> None:
    # The slot is freed by a request that never went through these lines (another transport).
    lines, backend = Lines(), Backend()
    other = asyncio.create_task(backend.serve(0))
    await _until(lambda: backend.order == [0])
    waiting = asyncio.create_task(_patient(lines, backend, 1))
    await asyncio.sleep(0.01)
    backend.release.set()
    await other
    await _until(lambda: backend.order == [0, 1])
    backend.release.set()
    assert await waiting == 1


async def test_two_slots_freed_in_one_turn_admit_two_waiting_requests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No polling to fall back on: each freed slot must reach its own waiting request.
    monkeypatch.setattr(line, "POLL_S", 60.0)
    lines, backend = Lines(), Backend()
    backend.gate = Gate("a", max_in_flight=2, queue_size=0)
    running = [asyncio.create_task(_patient(lines, backend, n)) for n in (0, 1)]
    await _until(lambda: backend.order == [0, 1])
    waiting = [asyncio.create_task(_patient(lines, backend, n)) for n in (2, 3)]
    await asyncio.sleep(0.01)
    backend.release.set()  # both running requests end in the same turn of the loop
    await asyncio.sleep(0)
    backend.release.set()
    await _until(lambda: len(backend.order) == 4)
    assert backend.order == [0, 1, 2, 3]
    backend.release.set()
    await asyncio.sleep(0)
    backend.release.set()
    assert await asyncio.gather(*running, *waiting) == [0, 1, 2, 3]
