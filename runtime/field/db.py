"""The SQLite side of the store: one connection, used by one thread (the store's worker).

Nothing here is async and nothing here is shared: `wasmgate.runtime.field.store.Store` owns
one `StoreDb`, creates it on its worker thread and calls it only from there (``sqlite3``
refuses a connection used from another thread). Every method is one transaction.

Layout: ``records`` holds every stream's entries under one AUTOINCREMENT id, so ids only grow
(an acked id is never reused, even after a restart) and id order is append order; ``streams``
holds the drop counters, which survive restarts like the records they account for.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import msgspec

from wasmgate.runtime.protocol import jsonio

Sync = Literal["normal", "full"]
_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    stream TEXT NOT NULL,
    at REAL NOT NULL,
    size INTEGER NOT NULL,
    payload BLOB NOT NULL,
    meta BLOB NOT NULL
);
-- Covers depth and byte sums (COUNT/SUM per stream) without reading payloads.
CREATE INDEX IF NOT EXISTS records_by_stream ON records (stream, id, size);
CREATE TABLE IF NOT EXISTS streams (
    stream TEXT PRIMARY KEY,
    dropped_full INTEGER NOT NULL DEFAULT 0,
    dropped_expired INTEGER NOT NULL DEFAULT 0
);
-- When each entry appended under a quota was (`StoreDb.append_within`): a cap such as
-- samples' max_per_hour holds for every process appending to this file, across restarts.
CREATE TABLE IF NOT EXISTS quota (key TEXT NOT NULL, at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS quota_by_key ON quota (key, at);
"""
_BUMP = {
    "dropped_full": "UPDATE streams SET dropped_full = dropped_full + ? WHERE stream = ?",
    "dropped_expired": "UPDATE streams SET dropped_expired = dropped_expired + ? WHERE stream = ?",
}
_BUSY_MS = 2000
"""How long opening waits for another process's lock before it reports the file locked."""


class StreamLimits(msgspec.Struct, frozen=True):
    """Bounds of one stream. Beyond either, the oldest entries are dropped and counted."""

    max_bytes: int
    """Payload plus metadata bytes kept at most."""
    max_age_s: float = 0.0
    """Entries older than this are dropped (0 = no age limit)."""


class Record(msgspec.Struct, frozen=True):
    """One stored entry, as appended."""

    id: int
    stream: str
    at: float
    """Wall-clock time of the append (Unix seconds): ages must survive a restart."""
    payload: bytes
    meta: Mapping[str, Any]


class Quota(msgspec.Struct, frozen=True):
    """At most ``cap`` entries appended under ``key`` in any ``window_s`` ending at ``now``
    (wall-clock Unix seconds: the window outlives a restart)."""

    key: str
    cap: int
    window_s: float
    now: float


class StreamStats(msgspec.Struct, frozen=True):
    depth: int = 0
    bytes: int = 0
    oldest_at: float | None = None
    oldest_id: int | None = None
    """The first entry still stored: every id below it was acked or dropped."""
    dropped_full: int = 0
    dropped_expired: int = 0


class StoreDb:
    """The store's tables on one connection (open with `StoreDb.open`)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self.stats: dict[str, StreamStats] = {}

    @classmethod
    def open(cls, path: Path, sync: Sync) -> StoreDb:
        """Open (creating) and check the file; `sqlite3.DatabaseError` when unusable."""
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, timeout=_BUSY_MS / 1000, isolation_level=None)
        try:
            conn.execute(f"PRAGMA busy_timeout = {_BUSY_MS}")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            _require(str(mode).lower() == "wal", f"cannot switch to WAL mode (got {mode!r})")
            conn.execute(f"PRAGMA synchronous = {sync.upper()}")
            problem = conn.execute("PRAGMA quick_check").fetchone()[0]
            _require(problem == "ok", f"integrity check failed: {problem}")
            conn.executescript(_SCHEMA)
            db = cls(conn)
            db.reload_stats()
        except BaseException:
            conn.close()
            raise
        return db

    def close(self) -> None:
        self._conn.close()

    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield self._conn
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    def reload_stats(self) -> None:
        found: dict[str, StreamStats] = {}
        rows = self._conn.execute(
            "SELECT s.stream, s.dropped_full, s.dropped_expired,"
            " (SELECT COUNT(*) FROM records r WHERE r.stream = s.stream),"
            " (SELECT COALESCE(SUM(size), 0) FROM records r WHERE r.stream = s.stream)"
            " FROM streams s"
        )
        for stream, full, expired, depth, size in rows.fetchall():
            found[stream] = StreamStats(depth, size, *self._oldest(stream), full, expired)
        self.stats = found

    def _oldest(self, stream: str) -> tuple[float | None, int | None]:
        row = self._conn.execute(
            "SELECT at, id FROM records WHERE stream = ? ORDER BY id LIMIT 1", (stream,)
        ).fetchone()
        return (float(row[0]), int(row[1])) if row is not None else (None, None)

    # -- writes ---------------------------------------------------------------------------

    def append(
        self,
        items: Sequence[tuple[str, bytes, Mapping[str, Any]]],
        limits: Mapping[str, StreamLimits],
    ) -> list[int]:
        """Append ``(stream, payload, meta)`` items in one transaction; their ids, in order.

        Then each touched stream is cut back to its limits, oldest first (which may drop
        what was just appended when a burst alone exceeds ``max_bytes``)."""
        with self._tx() as conn:
            ids = self._insert(conn, items, limits)
        self._refresh({s for s, _, _ in items})
        return ids

    def _insert(
        self,
        conn: sqlite3.Connection,
        items: Sequence[tuple[str, bytes, Mapping[str, Any]]],
        limits: Mapping[str, StreamLimits],
    ) -> list[int]:
        now = time.time()
        ids: list[int] = []
        for stream, payload, meta in items:
            encoded = jsonio.dumps(dict(meta))
            cur = conn.execute(
                "INSERT INTO records (stream, at, size, payload, meta) VALUES (?, ?, ?, ?, ?)",
                (stream, now, len(payload) + len(encoded), payload, encoded),
            )
            ids.append(int(cur.lastrowid or 0))
            conn.execute("INSERT OR IGNORE INTO streams (stream) VALUES (?)", (stream,))
        for stream in {s for s, _, _ in items}:
            self._enforce(conn, stream, limits[stream], now)
        return ids

    def append_within(
        self,
        item: tuple[str, bytes, Mapping[str, Any]],
        limits: Mapping[str, StreamLimits],
        quota: Quota,
    ) -> int | None:
        """Append one item if ``quota`` has room (its id), else nothing (None): the count and
        the append are one transaction, so processes sharing the file never overshoot."""
        with self._tx() as conn:
            conn.execute(
                "DELETE FROM quota WHERE key = ? AND at <= ?",
                (quota.key, quota.now - quota.window_s),
            )
            (used,) = conn.execute(
                "SELECT COUNT(*) FROM quota WHERE key = ?", (quota.key,)
            ).fetchone()
            if used >= quota.cap:
                return None
            conn.execute("INSERT INTO quota (key, at) VALUES (?, ?)", (quota.key, quota.now))
            (rid,) = self._insert(conn, [item], limits)
        self._refresh({item[0]})
        return rid

    def ack(self, stream: str, ids: Iterable[int]) -> int:
        """Delete delivered entries; ids already gone are ignored (acks are idempotent)."""
        wanted = [(stream, i) for i in ids]
        with self._tx() as conn:
            before = conn.total_changes
            conn.executemany("DELETE FROM records WHERE stream = ? AND id = ?", wanted)
            done = conn.total_changes - before
        self._refresh({stream})
        return done

    def expire(self, limits: Mapping[str, StreamLimits]) -> None:
        """Apply every known stream's limits now (ages grow while nothing is appended)."""
        now = time.time()
        with self._tx() as conn:
            for stream in list(self.stats):
                if stream in limits:
                    self._enforce(conn, stream, limits[stream], now)
        self._refresh(set(self.stats))

    def _enforce(
        self, conn: sqlite3.Connection, stream: str, lim: StreamLimits, now: float
    ) -> None:
        if lim.max_age_s > 0:
            # `at > now` (the clock went back) is young, not expired.
            cur = conn.execute(
                "DELETE FROM records WHERE stream = ? AND at < ?", (stream, now - lim.max_age_s)
            )
            self._count(conn, stream, "dropped_expired", cur.rowcount)
        total = conn.execute(
            "SELECT COALESCE(SUM(size), 0) FROM records WHERE stream = ?", (stream,)
        ).fetchone()[0]
        excess = int(total) - lim.max_bytes
        if excess <= 0:
            return
        doomed: list[tuple[int]] = []
        for rid, size in conn.execute(
            "SELECT id, size FROM records WHERE stream = ? ORDER BY id", (stream,)
        ):
            doomed.append((rid,))
            excess -= size
            if excess <= 0:
                break
        conn.executemany("DELETE FROM records WHERE id = ?", doomed)
        self._count(conn, stream, "dropped_full", len(doomed))

    @staticmethod
    def _count(conn: sqlite3.Connection, stream: str, column: str, n: int) -> None:
        if n > 0:
            conn.execute(_BUMP[column], (n, stream))

    def _refresh(self, streams: set[str]) -> None:
        for stream in streams:
            depth, size = self._conn.execute(
                "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM records WHERE stream = ?", (stream,)
            ).fetchone()
            full, expired = self._conn.execute(
                "SELECT dropped_full, dropped_expired FROM streams WHERE stream = ?", (stream,)
            ).fetchone() or (0, 0)
            self.stats[stream] = StreamStats(depth, size, *self._oldest(stream), full, expired)

    # -- reads ----------------------------------------------------------------------------

    def peek(self, stream: str, after: int, limit: int) -> list[Record]:
        rows = self._conn.execute(
            "SELECT id, at, payload, meta FROM records WHERE stream = ? AND id > ?"
            " ORDER BY id LIMIT ?",
            (stream, after, limit),
        ).fetchall()
        return [Record(rid, stream, at, bytes(p), jsonio.loads(bytes(m))) for rid, at, p, m in rows]


def _require(ok: bool, problem: str) -> None:
    if not ok:
        raise sqlite3.DatabaseError(problem)
