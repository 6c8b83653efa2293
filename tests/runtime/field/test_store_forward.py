"""The forwarder on a real store, the link played by the test: the in-flight window is
never exceeded, nothing is sent while the link is down, an entry is acked only once
confirmed, and a failed send re-sends from the oldest unacked entry, in order."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from tests.fixtures.waits import until_async
from wasmgate.runtime.field.forward import Forwarder, Pace
from wasmgate.runtime.field.store import Record, Store, StreamLimits


class Link:
    """Records every send; the test resolves or fails each one."""

    def __init__(self) -> None:
        self.up = asyncio.Event()
        self.sent: list[tuple[bytes, asyncio.Future[None]]] = []
        self.most_in_flight = 0

    def send(self, rec: Record) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.sent.append((rec.payload, fut))
        self.most_in_flight = max(self.most_in_flight, self.in_flight())
        return fut

    def in_flight(self) -> int:
        return sum(not f.done() for _, f in self.sent)

    def confirm_all(self, error: Exception | None = None) -> None:
        for _, fut in self.sent:
            if not fut.done():
                fut.set_exception(error) if error else fut.set_result(None)


async def _until(check: Callable[..., object]) -> None:
    await until_async(check, "the condition", 10, every_s=0.005)


def _parked(task: asyncio.Task[None]) -> bool:
    """The task is suspended in ``wake_or_timeout`` (its idle wait for a wake-up), read from
    its chain of awaited coroutines."""
    coro: Any = task.get_coro()
    while coro is not None and hasattr(coro, "cr_code"):
        if coro.cr_code.co_name == "wake_or_timeout":
            return True
        coro = coro.cr_await
    return False


@contextlib.asynccontextmanager
async def forwarding(tmp_path: Path, link: Link) -> AsyncIterator[tuple[Store, Forwarder]]:
    async with Store(tmp_path / "s.db", {"events": StreamLimits(1 << 20)}) as store:
        fwd = Forwarder(store, "events", link.send, link.up, window=4, pace=Pace(1e6, 64))
        task = asyncio.create_task(fwd.run())
        try:
            yield store, fwd
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def test_window_link_and_acks(tmp_path: Path) -> None:
    link = Link()
    async with forwarding(tmp_path, link) as (store, fwd):
        for i in range(10):
            await store.append("events", b"%d" % i)
        await asyncio.sleep(0.05)  # quiet window: with the link down nothing may leave
        assert link.sent == []
        link.up.set()
        await _until(lambda: len(link.sent) == 4)
        await asyncio.sleep(0.05)  # quiet window: no 5th send while none is confirmed
        assert len(link.sent) == 4  # the window is full until something is confirmed
        assert store.stats()["events"].depth == 10  # sent is not delivered
        while fwd.stats.delivered < 10:
            link.confirm_all()
            await asyncio.sleep(0.01)
        await _until(lambda: store.stats()["events"].depth == 0)
    assert [p for p, _ in link.sent] == [b"%d" % i for i in range(10)]
    assert link.most_in_flight == 4


async def test_a_failed_send_resends_from_the_oldest_unacked(tmp_path: Path) -> None:
    link = Link()
    link.up.set()
    async with forwarding(tmp_path, link) as (store, fwd):
        for i in range(6):
            await store.append("events", b"%d" % i)
        await _until(lambda: len(link.sent) == 4)
        link.sent[0][1].set_result(None)  # 0 delivered; 1 fails; 2 and 3 were in flight
        link.sent[1][1].set_exception(ConnectionError("dropped"))
        link.sent[2][1].set_result(None)
        link.sent[3][1].set_exception(ConnectionError("dropped"))
        await _until(lambda: len(link.sent) >= 7)
        while store.stats()["events"].depth:
            link.confirm_all()
            await asyncio.sleep(0.01)
        assert fwd.stats.failed == 2
    again = [p for p, _ in link.sent[4:]]
    assert again == [b"1", b"3", b"4", b"5"]  # 0 and 2 were acked: never sent twice


async def test_a_cancel_landing_with_a_confirmation_ends_the_forwarder(tmp_path: Path) -> None:
    """The owner's cancel ends `run` even when it lands in the loop turn a confirmation wakes
    the idle wait: 3.11's ``wait_for`` returned the wake-up and dropped such a cancel
    (gh-86296), so the forwarder ran on and the daemon's shutdown waited for it for ever."""
    link = Link()
    link.up.set()
    async with Store(tmp_path / "s.db", {"events": StreamLimits(1 << 20)}) as store:
        for turns in range(4):  # how many loop turns after the confirmation the cancel lands
            await store.append("events", b"%d" % turns)
            fwd = Forwarder(store, "events", link.send, link.up, window=4, pace=Pace(1e6, 64))
            task = asyncio.create_task(fwd.run())
            try:
                await _until(lambda f=fwd: f.stats.sent >= 1)
                await _until(lambda t=task: _parked(t))  # nothing more to send: it waits
                link.confirm_all()
                for _ in range(turns):
                    await asyncio.sleep(0)
                task.cancel()
                done, _ = await asyncio.wait([task], timeout=5)
                assert task in done, f"cancel {turns} turns after the confirmation was lost"
            finally:
                task.cancel()
                await asyncio.wait([task], timeout=5)
