"""The durable store: order, acks, limits with counters, restarts, SIGKILL, bad files."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from wasmgate.runtime.errors import ConfigError
from wasmgate.runtime.field import db as db_module
from wasmgate.runtime.field.setup import build_store
from wasmgate.runtime.field.store import Store, StoreError, StreamLimits
from wasmgate.runtime.ops.config import Settings
from wasmgate.typed import convert

LIMITS = {"events": StreamLimits(max_bytes=10_000), "answers": StreamLimits(max_bytes=10_000)}


async def test_append_peek_in_order_and_ack_is_idempotent(tmp_path: Path) -> None:
    async with Store(tmp_path / "s.db", LIMITS) as store:
        ids = [await store.append("events", f"e{i}".encode(), {"n": i}) for i in range(5)]
        await store.append("answers", b"other stream")
        recs = await store.peek("events", limit=3)
        assert [r.payload for r in recs] == [b"e0", b"e1", b"e2"]
        assert [r.meta["n"] for r in recs] == [0, 1, 2]
        later = await store.peek("events", after=recs[-1].id)
        assert [r.id for r in later] == ids[3:]
        assert await store.ack("events", [ids[0], ids[1]]) == 2
        assert await store.ack("events", [ids[0], ids[1]]) == 0  # a second PUBACK: no harm
        assert await store.ack("answers", [ids[2]]) == 0  # another stream's id is not ours
        assert [r.payload for r in await store.peek("events")] == [b"e2", b"e3", b"e4"]
        st = store.stats()
        assert (st["events"].depth, st["answers"].depth) == (3, 1)
        assert st["events"].bytes == sum(len(b"e2") + len(b'{"n":2}') for _ in range(3))


async def test_concurrent_appends_keep_call_order(tmp_path: Path) -> None:
    async with Store(tmp_path / "s.db", LIMITS) as store:
        ids = await asyncio.gather(*(store.append("events", b"%d" % i) for i in range(200)))
        assert ids == sorted(ids)
        assert [int(r.payload) for r in await store.peek("events", limit=500)] == list(range(200))


async def test_ids_keep_growing_and_records_survive_reopen(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with Store(path, LIMITS) as store:
        first = await store.append("events", b"a")
        await store.ack("events", [first])
        second = await store.append("events", b"b")
    async with Store(path, LIMITS) as store:
        third = await store.append("events", b"c")
        assert first < second < third  # an acked id is never handed out again
        assert [r.payload for r in await store.peek("events")] == [b"b", b"c"]


async def test_full_stream_drops_oldest_and_counts_across_restart(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    small = {"events": StreamLimits(max_bytes=100)}
    async with Store(path, small) as store:
        for i in range(10):
            await store.append("events", bytes([65 + i]) * 30)  # 32 bytes each with "{}"
        kept = [r.payload[:1] for r in await store.peek("events")]
        assert kept == [b"H", b"I", b"J"]
        assert store.stats()["events"].dropped_full == 7
        assert store.stats()["events"].bytes <= 100
    async with Store(path, small) as store:
        assert store.stats()["events"].dropped_full == 7
        assert store.stats()["events"].depth == 3


async def test_an_entry_larger_than_the_stream_is_refused(tmp_path: Path) -> None:
    async with Store(tmp_path / "s.db", {"events": StreamLimits(max_bytes=10)}) as store:
        await store.append("events", b"keep")
        with pytest.raises(StoreError, match=r"exceeds store\.streams\.events\.max_bytes"):
            await store.append("events", b"x" * 11)
        with pytest.raises(StoreError, match="no store stream 'nope'"):
            await store.append("nope", b"x")
        assert [r.payload for r in await store.peek("events")] == [b"keep"]


async def test_old_entries_expire_with_a_counter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = SimpleNamespace(now=1_000_000.0)
    monkeypatch.setattr(db_module, "time", SimpleNamespace(time=lambda: clock.now))
    aged = {"events": StreamLimits(max_bytes=10_000, max_age_s=60)}
    async with Store(tmp_path / "s.db", aged) as store:
        await store.append("events", b"old")
        clock.now += 30
        await store.append("events", b"young")
        clock.now += 40  # "old" is 70 s old, "young" 40 s
        await store.expire()
        assert [r.payload for r in await store.peek("events")] == [b"young"]
        assert store.stats()["events"].dropped_expired == 1
        clock.now -= 3600  # the clock stepped back: nothing is "older than" the future
        await store.expire()
        assert store.stats()["events"].depth == 1


def test_appended_entries_survive_sigkill(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    script = textwrap.dedent(f"""
        import asyncio, os, signal
        from pathlib import Path
        from wasmgate.runtime.field.store import Store, StreamLimits
        async def main():
            store = Store(Path({str(path)!r}), {{"events": StreamLimits(1 << 20)}})
            await store.__aenter__()
            for i in range(50):
                await store.append("events", b"%d" % i)
            os.kill(os.getpid(), signal.SIGKILL)  # no close, no checkpoint
        asyncio.run(main())
    """)
    proc = subprocess.run([sys.executable, "-c", script], check=False, timeout=60)
    assert proc.returncode == -signal.SIGKILL

    async def read() -> list[int]:
        async with Store(path, {"events": StreamLimits(1 << 20)}) as store:
            return [int(r.payload) for r in await store.peek("events", limit=100)]

    assert asyncio.run(read()) == list(range(50))


async def test_a_corrupt_file_is_refused_and_left_in_place(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match=r"s\.db: .*not a usable SQLite database; move it aside"):
        async with Store(path, LIMITS):
            pass
    assert path.read_bytes() == b"this is not a database" * 100


async def test_a_locked_file_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with Store(path, LIMITS) as store:
        await store.append("events", b"kept")
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("PRAGMA locking_mode = EXCLUSIVE")
        other.execute("BEGIN EXCLUSIVE")
        with pytest.raises(StoreError, match=r"locked.*another process holds it locked"):
            async with Store(path, LIMITS):
                pass
    finally:
        other.close()
    async with Store(path, LIMITS) as store:
        assert [r.payload for r in await store.peek("events")] == [b"kept"]


def test_config_names_only_known_streams(tmp_path: Path) -> None:
    conf = {"store": {"path": tmp_path / "s.db", "streams": {"evnets": {"max_bytes": 10}}}}
    with pytest.raises(ConfigError, match=r"store\.streams: unknown stream 'evnets'"):
        build_store(convert(conf, Settings, strict=False))
    conf["store"]["streams"] = {"events": {"max_bytes": 10}}
    store = build_store(convert(conf, Settings, strict=False))
    assert store.limits("events").max_bytes == 10
    assert store.limits("answers") == StreamLimits(64 * 1024 * 1024, 7 * 86400)
