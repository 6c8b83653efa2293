"""`SharedRecent`: the dedupe table a gateway's processes share, attacked from two views of
one file and from real processes (a claimant that dies by SIGKILL)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from wasmgate.runtime.mqtt.dedupe import NotAnswered
from wasmgate.runtime.mqtt.dedupe_shared import SharedRecent


def key(n: int) -> bytes:
    return n.to_bytes(4, "little") * 8


async def settled(fut: asyncio.Future[None], timeout_s: float) -> None:
    async with asyncio.timeout(timeout_s):
        await fut


@pytest.fixture
def views(tmp_path: Path) -> Iterator[list[SharedRecent]]:
    tables = [SharedRecent(tmp_path / "dedupe", 300, 100) for _ in range(2)]
    yield tables
    for t in tables:
        t.close()


async def test_the_second_view_waits_for_the_first_answer(views: list[SharedRecent]) -> None:
    a, b = views
    assert a.claim(key(1)) is None
    waiting = b.claim(key(1))
    assert waiting is not None
    await asyncio.sleep(0.02)
    assert not waiting.done()  # worked elsewhere: not acked before its answer
    a.answered(key(1))
    await settled(waiting, 1)
    again = b.claim(key(1))
    assert again is not None
    assert again.done()  # within the window: only acked
    assert len(a) == len(b) == 1


async def test_a_copy_of_an_unanswered_request_is_not_acked(views: list[SharedRecent]) -> None:
    a, b = views
    assert a.claim(key(2)) is None
    waiting = b.claim(key(2))
    assert waiting is not None
    a.forget(key(2), "not published")
    with pytest.raises(NotAnswered):
        await settled(waiting, 1)
    assert b.claim(key(2)) is None  # the redelivery is worked again


async def test_a_stored_answer_holds_until_delivered_then_for_the_window(tmp_path: Path) -> None:
    worker, supervisor = (SharedRecent(tmp_path / "d", 0.05, 100) for _ in range(2))
    assert worker.claim(key(3)) is None
    worker.hold(key(3))
    await asyncio.sleep(0.1)  # past the window: a held answer is still pending delivery
    held = supervisor.claim(key(3))
    assert held is not None
    assert held.done()
    supervisor.delivered(key(3))
    await asyncio.sleep(0.1)
    assert supervisor.claim(key(3)) is None  # the window after delivery ran out
    worker.close()
    supervisor.close()


async def test_answers_a_past_process_stored_are_held_unclaimed(tmp_path: Path) -> None:
    """A restarted supervisor holds the keys of the answers the store still has (no process
    claimed them in this table): their redeliveries are only acked, in every worker."""
    supervisor, worker = (SharedRecent(tmp_path / "d", 0.05, 100) for _ in range(2))
    supervisor.hold(key(7))
    await asyncio.sleep(0.1)
    held = worker.claim(key(7))
    assert held is not None
    assert held.done()
    supervisor.delivered(key(8))  # delivered unheld (a worker's answer): the window starts
    assert worker.claim(key(8)) is not None
    supervisor.close()
    worker.close()


async def test_a_claim_by_a_killed_process_is_taken_over(tmp_path: Path) -> None:
    path = tmp_path / "d"
    code = textwrap.dedent(f"""
        import asyncio, os, signal, sys
        from pathlib import Path
        from wasmgate.runtime.mqtt.dedupe_shared import SharedRecent
        async def main() -> None:
            table = SharedRecent(Path({str(path)!r}), 300, 100)
            assert table.claim({key(4)!r}) is None
            print("claimed", flush=True)
            sys.stdin.read()
        asyncio.run(main())
    """)
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    with proc:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"claimed\n"
        table = SharedRecent(path, 300, 100)
        waiting = table.claim(key(4))
        assert waiting is not None  # its claimant lives: wait
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        with pytest.raises(NotAnswered):  # died unanswered: this copy is not acked
            await settled(waiting, 2)
        assert table.claim(key(4)) is None  # and the redelivery is worked here
        table.close()


async def test_a_full_table_forgets_the_oldest_answers_not_the_work(tmp_path: Path) -> None:
    table = SharedRecent(tmp_path / "d", 300, 1)  # 64 slots (8 buckets), the smallest table
    for n in range(500):
        assert table.claim(key(n)) is None
        table.answered(key(n))
    recent = table.claim(key(499))
    assert recent is not None
    assert recent.done()  # the newest is remembered
    assert table.claim(key(0)) is None  # the oldest went
    working = [key(1000 + n) for n in range(200)]
    for k in working:
        assert table.claim(k) is None
    # Every slot worked: a new request is worked without an entry, never blocked; the
    # work that holds an entry still makes its copies wait.
    assert table.claim(key(5000)) is None
    assert table.claim(key(5000)) is None  # not remembered: nowhere to keep it
    waiting = [k for k in [key(0), *working] if table.claim(k) is not None]
    assert len(waiting) == 64  # every slot (key 0 was claimed again above)
    table.close()


def test_the_first_opener_sizes_the_table(tmp_path: Path) -> None:
    first = SharedRecent(tmp_path / "d", 300, 1000)
    second = SharedRecent(tmp_path / "d", 300, 10)  # a later view maps what exists
    assert (tmp_path / "d").stat().st_size == 2048 * 48
    first.close()
    second.close()
