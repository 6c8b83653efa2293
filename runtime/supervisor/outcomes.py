"""The workers' answers added to the supervisor's bundle versions, every second, so a
staged release's gates (`wasmgate.runtime.bundles.release`) judge the whole gateway's
traffic: requests, errors and recent latencies of each version, as deltas since the last
look at each worker process (a new process starts from zero)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

import aiohttp

from wasmgate.runtime.bundles.table import ServingTable
from wasmgate.runtime.supervisor.children import unix_session
from wasmgate.runtime.supervisor.pool import WorkerPool

__all__ = ["Outcomes"]

log = logging.getLogger("wasmgate.supervisor")

_EVERY_S = 1.0
Seen = dict[tuple[int | None, str, int], tuple[int, int]]
"""(worker pid, bundle, version) -> (requests, errors) at the last look."""


class Outcomes:
    def __init__(self, table: ServingTable, pool: WorkerPool) -> None:
        self._table, self._pool = table, pool
        self._seen: Seen = {}

    async def run(self) -> None:
        while True:
            await asyncio.sleep(_EVERY_S)
            for worker in list(self._pool.workers):
                rows = await _fetch(worker.private)
                if rows is not None:
                    self.add(worker.pid, rows)

    def add(self, pid: int | None, rows: list[dict[str, object]]) -> None:
        """Merge one worker's rows into the supervisor's versions of the same bundles."""
        versions = {
            (b.name, b.version): b for slot in self._table.slots().values() for b in slot.versions()
        }
        for row in rows:
            name, version = str(row["name"]), int(str(row["version"]))
            requests, errors = int(str(row["requests"])), int(str(row["errors"]))
            before = self._seen.get((pid, name, version), (0, 0))
            self._seen[(pid, name, version)] = (requests, errors)
            new = requests - before[0]
            bundle = versions.get((name, version))
            if bundle is None or new <= 0:
                continue
            out = bundle.outcomes
            out.requests += new
            out.errors += max(0, errors - before[1])
            latencies = row.get("latencies")
            if isinstance(latencies, list):
                out.latencies.extend(float(x) for x in latencies[-new:])


async def _fetch(private: str) -> list[dict[str, object]] | None:
    with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError, ValueError):
        async with (
            unix_session(private, 2.0) as http,
            http.get("http://localhost/v1/outcomes") as answer,
        ):
            if answer.status == 200:
                rows = json.loads(await answer.read())
                return rows if isinstance(rows, list) else None
    return None
