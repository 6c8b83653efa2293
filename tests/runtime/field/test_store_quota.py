"""`Store.append_within`: a cap on appends that holds for every process using the file.

The samples' ``max_per_hour`` is such a cap: with ``[workers] count`` > 1 every worker
appends to the one store, so a count kept in each process let N workers keep N times the
cap. The attack is several processes racing for the last places at once."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from wasmgate.runtime.field.store import Quota, Store, StoreError, StreamLimits

LIMITS = {"samples": StreamLimits(1 << 20)}

_RACER = textwrap.dedent(
    """
    import asyncio, sys, time
    from pathlib import Path
    from wasmgate.runtime.field.store import Quota, Store, StreamLimits

    async def main() -> None:
        async with Store(Path(sys.argv[1]), {"samples": StreamLimits(1 << 20)}) as store:
            start = float(sys.argv[2])
            while time.time() < start:  # every racer starts in the same instant
                await asyncio.sleep(0.001)
            kept = await asyncio.gather(*(
                store.append_within("samples", b"x", {}, Quota("k", 10, 3600.0, time.time()))
                for _ in range(20)
            ))
            print(sum(rid is not None for rid in kept))

    asyncio.run(main())
    """
)


def test_processes_racing_for_a_quota_never_overshoot_it(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    start = time.time() + 2.0
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", _RACER, str(db), str(start)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    done = []
    for proc in racers:  # every one waited for (and its pipes closed) before any check
        with proc:
            done.append((*proc.communicate(timeout=120), proc.returncode))
    assert [code for _, _, code in done] == [0, 0, 0], [err for _, err, _ in done]
    assert sum(int(out) for out, _, _ in done) == 10  # 60 tries, a cap of 10 for the three


async def test_the_window_slides_and_keys_are_apart(tmp_path: Path) -> None:
    async with Store(tmp_path / "store.db", LIMITS) as store:

        async def put(key: str, at: float) -> int | None:
            return await store.append_within("samples", b"x", {}, Quota(key, 2, 3600.0, at))

        assert [await put("a", t) for t in (0.0, 10.0, 20.0)][2] is None
        assert await put("b", 20.0) is not None  # another key has its own count
        assert await put("a", 3599.9) is None  # both earlier ones are still in the hour
        assert await put("a", 3600.0) is not None  # the first left the window
        assert store.stats()["samples"].depth == 4


async def test_the_count_outlives_a_reopen(tmp_path: Path) -> None:
    """A restart (or a replaced worker) does not start a new hour."""
    for expected in (True, True, False):
        async with Store(tmp_path / "store.db", LIMITS) as store:
            rid = await store.append_within("samples", b"x", {}, Quota("k", 2, 3600.0, 100.0))
            assert (rid is not None) is expected


async def test_an_entry_too_big_is_refused_before_it_takes_a_place(tmp_path: Path) -> None:
    async with Store(tmp_path / "store.db", {"samples": StreamLimits(8)}) as store:
        with pytest.raises(StoreError, match="max_bytes"):
            await store.append_within("samples", b"y" * 64, {}, Quota("k", 1, 3600.0, 0.0))
        assert await store.append_within("samples", b"y", {}, Quota("k", 1, 3600.0, 0.0))
