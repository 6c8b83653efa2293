"""A durable, bounded, per-stream queue on SQLite: what a gateway keeps while a link is down.

Streams are names (``answers``, ``events``, ``cloud``, ``samples``, ...); each has its own
`StreamLimits` (bytes and age). Entries are appended, read in order with `Store.peek`, and
deleted with `Store.ack` once delivered; when a stream is full or its entries too old, the
oldest are dropped and counted (``dropped_full`` / ``dropped_expired``, kept across
restarts). A consumer delivers at least once: an entry is gone only after its ack committed.

API (all on the event loop; the disk work runs on the store's one worker thread)::

    async with Store(path, {"events": StreamLimits(8 << 20, 86400)}, sync="normal") as store:
        rid = await store.append("events", b"...", {"topic": "t"})  # durable when it returns
        for rec in await store.peek("events", after=0, limit=64):  # oldest first
            ...                                                     # rec.id, .payload, .meta
        await store.ack("events", [rec.id])                         # idempotent
        store.stats()["events"]        # depth, bytes, oldest_age_s, dropped_full/expired
        await store.expire()           # apply age limits now (an owner calls it periodically)
        store.watch("events", wake)    # an asyncio.Event set after each append to "events"

Appends arriving together are committed in one transaction (group commit), so a burst costs
one WAL write (and one fsync under ``sync="full"``) instead of one per entry.

Durability (``store.sync``): the database is in WAL mode. ``normal`` (the default) makes
every committed append survive a crash or SIGKILL of the daemon (the WAL is in the kernel's
page cache); only an OS crash or power cut may lose the last commits. ``full`` fsyncs the WAL
at every commit, surviving power loss too, at the cost measured in ``bench/bench_store.py``.
A file that is not a database, fails its integrity check or is locked by another process is
refused at open with `StoreError` naming the file: nothing is deleted or recreated.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any, ParamSpec, TypeVar

import msgspec

from wasmgate._compat import Self
from wasmgate.runtime.field.db import Quota, Record, StoreDb, StreamLimits, StreamStats, Sync

__all__ = ["Quota", "Record", "Store", "StoreError", "StreamLimits", "StreamStatus", "Sync"]
T = TypeVar("T")
P = ParamSpec("P")


class StoreError(Exception):
    """The store file cannot be used (corrupt, locked, unreadable) or an entry is refused."""


class StreamStatus(msgspec.Struct, frozen=True):
    """What metrics and ``/v1/status`` show per stream."""

    depth: int
    bytes: int
    oldest_age_s: float
    dropped_full: int
    dropped_expired: int
    max_bytes: int
    max_age_s: float


class Store:
    """Owns the SQLite file, its one connection and the worker thread that uses it."""

    def __init__(
        self,
        path: Path,
        limits: Mapping[str, StreamLimits],
        *,
        sync: Sync = "normal",
    ) -> None:
        self.path = path
        self._limits = dict(limits)
        self._sync = sync
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="wasmgate-store")
        self._db: StoreDb | None = None
        self._batch: list[tuple[str, bytes, Mapping[str, Any], asyncio.Future[int]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._watchers: dict[str, list[asyncio.Event]] = {}

    async def __aenter__(self) -> Self:
        try:
            self._db = await self._run(StoreDb.open, self.path, self._sync)
        except (sqlite3.Error, OSError) as e:
            self._worker.shutdown(wait=False)
            raise StoreError(_why_unusable(self.path, e)) from e
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._flusher is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher  # appends already accepted are committed, not lost
        if self._db is not None:
            await self._run(self._db.close)
            self._db = None
        self._worker.shutdown(wait=True)

    @property
    def streams(self) -> list[str]:
        return sorted(self._limits)

    def limits(self, stream: str) -> StreamLimits:
        try:
            return self._limits[stream]
        except KeyError:
            raise StoreError(f"no store stream {stream!r} (known: {self.streams})") from None

    # -- writes ---------------------------------------------------------------------------

    async def append(
        self, stream: str, payload: bytes, meta: Mapping[str, Any] | None = None
    ) -> int:
        """Store one entry; returns its id once committed. StoreError if it can never fit."""
        self._fits(stream, payload)
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._batch.append((stream, payload, meta or {}, fut))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush(), name="store-flush")
        return await asyncio.shield(fut)  # a cancelled caller does not un-append

    async def append_within(
        self, stream: str, payload: bytes, meta: Mapping[str, Any], quota: Quota
    ) -> int | None:
        """Store one entry if ``quota`` has room, counted over every process that uses this
        file (its id once committed), else None. Not group-committed: for rare entries."""
        self._fits(stream, payload)
        try:
            rid = await self._run(
                self._db_or_fail().append_within, (stream, payload, meta), self._limits, quota
            )
        except sqlite3.Error as e:
            raise StoreError(f"store append failed: {e}") from e
        if rid is not None:
            self._signal(stream)
        return rid

    def _fits(self, stream: str, payload: bytes) -> None:
        lim = self.limits(stream)
        if len(payload) > lim.max_bytes:
            raise StoreError(
                f"entry of {len(payload)} bytes exceeds store.streams.{stream}.max_bytes "
                f"({lim.max_bytes}; store.defaults.max_bytes when the stream sets none)"
            )

    async def _flush(self) -> None:
        while self._batch:
            batch, self._batch = self._batch, []
            items = [(s, p, m) for s, p, m, _ in batch]
            try:
                ids = await self._run(self._db_or_fail().append, items, self._limits)
            except Exception as e:  # disk full, I/O error: every waiting append learns it
                for *_, fut in batch:
                    if not fut.done():
                        fut.set_exception(StoreError(f"store append failed: {e}"))
                continue
            for (*_, fut), rid in zip(batch, ids, strict=True):
                if not fut.done():
                    fut.set_result(rid)
            for stream in {s for s, _, _ in items}:
                self._signal(stream)

    async def ack(self, stream: str, ids: Iterable[int]) -> int:
        """Delete delivered entries (ids already gone are ignored); how many went."""
        wanted = list(ids)
        if not wanted:
            return 0
        return await self._run(self._db_or_fail().ack, stream, wanted)

    async def expire(self) -> None:
        """Drop what the age and size limits no longer allow, counting it."""
        await self._run(self._db_or_fail().expire, self._limits)

    async def refresh(self) -> None:
        """Read every stream's figures again (`stats`, `first_id`): other processes of the
        gateway append to and drain the same file (``[workers] count`` > 1)."""
        await self._run(self._db_or_fail().reload_stats)

    # -- reads ----------------------------------------------------------------------------

    async def peek(self, stream: str, *, after: int = 0, limit: int = 64) -> list[Record]:
        """Up to ``limit`` entries of ``stream`` with id > ``after``, oldest first."""
        self.limits(stream)
        return await self._run(self._db_or_fail().peek, stream, after, limit)

    def watch(self, stream: str, event: asyncio.Event) -> None:
        """Set ``event`` after every committed append to ``stream`` (a consumer's wake-up)."""
        self._watchers.setdefault(stream, []).append(event)

    def _signal(self, stream: str) -> None:
        for event in self._watchers.get(stream, ()):
            event.set()

    def first_id(self, stream: str) -> int | None:
        """The oldest stored id of ``stream`` (every id below it is acked or dropped)."""
        st = self._db.stats.get(stream) if self._db is not None else None
        return st.oldest_id if st is not None else None

    def stats(self) -> dict[str, StreamStatus]:
        """Every configured stream's depth, bytes, oldest age and drop counters."""
        db_stats = self._db.stats if self._db is not None else {}
        now = time.time()
        out: dict[str, StreamStatus] = {}
        for stream, lim in sorted(self._limits.items()):
            st = db_stats.get(stream, StreamStats())
            age = max(0.0, now - st.oldest_at) if st.oldest_at is not None else 0.0
            out[stream] = StreamStatus(
                st.depth, st.bytes, age, st.dropped_full, st.dropped_expired,
                lim.max_bytes, lim.max_age_s,
            )  # fmt: skip
        return out

    # -- plumbing -------------------------------------------------------------------------

    def _db_or_fail(self) -> StoreDb:
        if self._db is None:
            raise StoreError("the store is not open (use `async with Store(...)`)")
        return self._db

    async def _run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        call = functools.partial(fn, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._worker, call)


def _why_unusable(path: Path, e: BaseException) -> str:
    text = str(e)
    if "locked" in text:
        hint = "another process holds it locked; stop it"
    elif isinstance(e, sqlite3.DatabaseError):
        hint = (
            "it is not a usable SQLite database; move it aside to start with an empty store "
            "(its undelivered entries stay in the moved file)"
        )
    else:
        hint = "check its directory and permissions"
    return f"store file {path}: {text} ({hint})"
