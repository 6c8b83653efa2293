"""The gateway's running slots over several processes (`wasmgate.runtime.serving.slots`)
and an admission gate that counts them (`Gate` with ``slots``)."""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from pathlib import Path

import pytest

from wasmgate._compat import timeout
from wasmgate.runtime.errors import Busy
from wasmgate.runtime.serving.admission import Gate
from wasmgate.runtime.serving.slots import GatewaySlots


def test_the_cap_counts_every_column(tmp_path: Path) -> None:
    a, b = GatewaySlots(tmp_path / "slots", 1), GatewaySlots(tmp_path / "slots", 2)
    try:
        assert a.take("adapter:x", 3)
        assert b.take("adapter:x", 3)
        assert a.take("adapter:x", 3)
        assert not b.take("adapter:x", 3)  # three run, in two processes
        assert b.take("model:y", 1)  # another tenant has its own row
        a.give("adapter:x")
        assert b.take("adapter:x", 3)
        assert a.running("adapter:x") == 3
    finally:
        a.close()
        b.close()


def test_a_dead_processs_column_is_forgotten(tmp_path: Path) -> None:
    supervisor, worker = GatewaySlots(tmp_path / "s", 0), GatewaySlots(tmp_path / "s", 1)
    try:
        assert worker.take("k", 2)
        assert worker.take("k", 2)
        assert not supervisor.take("k", 2)
        supervisor.forget(1)  # the worker was killed holding both
        assert supervisor.take("k", 2)
        worker.give("k")  # a late give of a forgotten slot never goes below zero
        assert supervisor.running("k") == 1
    finally:
        supervisor.close()
        worker.close()


def _hammer(path: str, column: int, cap: int, rounds: int, over: multiprocessing.Value) -> None:  # type: ignore[valid-type]
    slots = GatewaySlots(Path(path), column)
    for _ in range(rounds):
        if slots.take("adapter:hot", cap):
            if slots.running("adapter:hot") > cap:
                with over.get_lock():  # type: ignore[attr-defined]
                    over.value += 1  # type: ignore[attr-defined]
            slots.give("adapter:hot")
    slots.close()


def test_processes_racing_never_exceed_the_cap(tmp_path: Path) -> None:
    """Four real processes take and give as fast as they can: the count never passes 2."""
    ctx = multiprocessing.get_context("spawn")
    over = ctx.Value("i", 0)
    path = str(tmp_path / "slots")
    GatewaySlots(Path(path), 0).close()
    procs = [ctx.Process(target=_hammer, args=(path, c, 2, 3000, over)) for c in range(1, 5)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    assert over.value == 0
    left = GatewaySlots(Path(path), 0)
    assert left.running("adapter:hot") == 0
    left.close()


def test_a_gate_refuses_when_another_process_holds_the_slots(tmp_path: Path) -> None:
    async def scenario() -> None:
        here = Gate("adapter:x", 1, 0, slots=GatewaySlots(tmp_path / "s", 1))
        there = Gate("adapter:x", 1, 1, slots=GatewaySlots(tmp_path / "s", 2))
        await here.enter(None)
        with pytest.raises(Busy):
            await Gate("adapter:x", 1, 0, slots=GatewaySlots(tmp_path / "s", 3)).enter(None)
        # With room in its queue it waits, and gets the slot once the other process's ends.
        waiting = asyncio.ensure_future(there.enter(time.monotonic() + 5))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        here.leave()
        async with timeout(1):
            assert await waiting >= 0.0
        there.leave()

    asyncio.run(scenario())
