"""Adapter state on disk: one SQLite database (WAL) in the state dir, one namespace per bundle.

`StateDb` owns the connection (the composition root opens and closes it); `TenantState` is
the `wasmgate.sandbox.state.AdapterState` one bundle's adapter gets, bound to its name and
its manifest's ``[state]`` grant.

Invariants:
- A tenant's queries always carry its own name: adapter A can never read or change B's keys.
- Each call is one transaction (``BEGIN IMMEDIATE`` for writes), so a refused or failed
  write changes nothing and a set that returned OK is committed. WAL with
  ``synchronous=NORMAL``: a committed write survives the daemon being killed (SIGKILL); a
  power cut may lose the last writes (SQLite's documented WAL trade-off), never corrupt.
- Expired entries are invisible at once and purged by the next write of their tenant, so
  they never count against the grant.
- The grant is checked at every write against what is stored; a new bundle version with a
  smaller grant keeps the old entries (readable, deletable) but refuses growth.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from wasmgate._compat import Self
from wasmgate.sandbox.state import StateErrno, StateError

log = logging.getLogger("wasmgate.state")
T = TypeVar("T")

FILE_NAME = "adapter-state.sqlite3"
_LOG_EVERY_S = 60.0
_SCHEMA = """
CREATE TABLE IF NOT EXISTS kv (
    tenant TEXT NOT NULL,
    key BLOB NOT NULL,
    value BLOB NOT NULL,
    expires REAL,
    PRIMARY KEY (tenant, key)
) WITHOUT ROWID
"""
_LIVE = "(expires IS NULL OR expires > ?)"


class StateDb:
    """The adapter-state database; thread-safe (one connection behind a lock)."""

    def __init__(self, path: Path | None, clock: Callable[[], float] = time.time) -> None:
        """Open (creating) ``path``; None keeps everything in memory (``adapter test``)."""
        target = ":memory:" if path is None else str(path)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(target, isolation_level=None, check_same_thread=False)
        self._lock = threading.Lock()
        self.clock = clock
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(_SCHEMA)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection (idempotent); later calls answer ``FAILED``."""
        with self._lock:
            self._db.close()

    def tenant(self, name: str, max_bytes: int, max_keys: int) -> TenantState:
        """The namespace of bundle ``name`` under its grant."""
        return TenantState(self, name, max_bytes, max_keys)

    def usage(self, tenant: str) -> tuple[int, int]:
        """(live keys, live bytes) of ``tenant``."""
        return self.run(lambda db: _usage(db, tenant, self.clock()))

    def run(self, work: Callable[[sqlite3.Connection], T], *, write: bool = False) -> T:
        """Run ``work`` as one transaction; sqlite failures become ``StateError(FAILED)``."""
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                try:
                    result = work(self._db)
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
                self._db.execute("COMMIT")
            except sqlite3.Error as e:
                raise StateError(StateErrno.FAILED, f"state store: {e}") from e
            return result


def _usage(
    db: sqlite3.Connection, tenant: str, now: float, but: bytes | None = None
) -> tuple[int, int]:
    row = db.execute(
        f"SELECT count(*), coalesce(sum(length(key) + length(value)), 0) FROM kv "  # noqa: S608 - constant
        f"WHERE tenant = ? AND key IS NOT ? AND {_LIVE}",
        (tenant, but, now),
    ).fetchone()
    return int(row[0]), int(row[1])


class TenantState:
    """One bundle's keys under its ``[state]`` grant (`AdapterState`)."""

    def __init__(self, db: StateDb, tenant: str, max_bytes: int, max_keys: int) -> None:
        self._db = db
        self.tenant = tenant
        self._max_bytes = max_bytes
        self.max_keys = max_keys
        self._logged_at = -_LOG_EVERY_S

    @property
    def max_bytes(self) -> int:
        return self._max_bytes

    def get(self, key: bytes) -> bytes | None:
        now = self._db.clock()
        row = self._db.run(
            lambda db: db.execute(
                f"SELECT value FROM kv WHERE tenant = ? AND key = ? AND {_LIVE}",  # noqa: S608
                (self.tenant, key, now),
            ).fetchone()
        )
        return None if row is None else bytes(row[0])

    def set(self, key: bytes, value: bytes, ttl_s: float | None) -> None:
        now = self._db.clock()
        expires = None if ttl_s is None else now + ttl_s

        def write(db: sqlite3.Connection) -> None:
            db.execute("DELETE FROM kv WHERE tenant = ? AND expires <= ?", (self.tenant, now))
            keys, used = _usage(db, self.tenant, now, but=key)
            self._check(keys + 1, used + len(key) + len(value))
            db.execute(
                "INSERT OR REPLACE INTO kv (tenant, key, value, expires) VALUES (?, ?, ?, ?)",
                (self.tenant, key, value, expires),
            )

        try:
            self._db.run(write, write=True)
        except StateError as e:
            self._warn(e)
            raise

    def delete(self, key: bytes) -> bool:
        now = self._db.clock()

        def remove(db: sqlite3.Connection) -> bool:
            cur = db.execute(
                f"DELETE FROM kv WHERE tenant = ? AND key = ? AND {_LIVE}",  # noqa: S608
                (self.tenant, key, now),
            )
            return cur.rowcount > 0

        return self._db.run(remove, write=True)

    def _check(self, keys: int, used: int) -> None:
        if keys > self.max_keys:
            raise StateError(
                StateErrno.TOO_MANY_KEYS, f"{keys} keys would exceed max_keys {self.max_keys}"
            )
        if used > self._max_bytes:
            raise StateError(
                StateErrno.VALUE_TOO_BIG,
                f"{used} bytes stored would exceed max_bytes {self._max_bytes}",
            )

    def _warn(self, e: StateError) -> None:
        """One log line per tenant per minute: a guest refused on every request must not
        flood the daemon's log (the guest's own log gets every refusal)."""
        now = time.monotonic()
        if now - self._logged_at >= _LOG_EVERY_S:
            self._logged_at = now
            log.warning("adapter state write refused: %s", e, extra={"bundle": self.tenant})
