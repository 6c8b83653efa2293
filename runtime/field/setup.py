"""The daemon's store from ``[store]``: its file, its streams and their limits, its upkeep."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from wasmgate.runtime.errors import ConfigError
from wasmgate.runtime.field.store import Store, StoreError, StreamLimits, StreamStatus
from wasmgate.runtime.ops.config import Settings

log = logging.getLogger("wasmgate.field")

STREAMS = ("answers", "events", "cloud", "samples")
"""Every stream the daemon keeps (``store.streams`` may only name these)."""
EXPIRE_EVERY_S = 30.0
"""How often age limits are applied while nothing is appended or drained."""


def store_path(settings: Settings) -> Path:
    path = settings.store.path
    return path if path is not None else settings.paths.resolved("state_dir") / "store.db"


def build_store(settings: Settings) -> Store:
    """The `Store` of ``[store]`` (unopened); ConfigError naming an unknown stream."""
    conf = settings.store
    unknown = sorted(set(conf.streams) - set(STREAMS))
    if unknown:
        raise ConfigError(f"store.streams: unknown stream {unknown[0]!r} (known: {STREAMS})")
    limits = {}
    for name in STREAMS:
        lim = conf.limits_of(name)
        limits[name] = StreamLimits(lim.max_bytes, lim.max_age_s)
    return Store(store_path(settings), limits, sync=conf.sync)


REFRESH_EVERY_S = 1.0
"""How often a process sharing the file reads its figures again."""


async def upkeep(store: Store, *, shared: bool) -> None:
    """Apply age limits every `EXPIRE_EVERY_S`; when other processes share the file (a
    supervisor and its workers: each process's figures are otherwise its own writes'), also
    read `Store.stats` again every `REFRESH_EVERY_S`. Run under `ops.tasks.background`."""
    tick = REFRESH_EVERY_S if shared else EXPIRE_EVERY_S
    expire_at = time.monotonic() + EXPIRE_EVERY_S
    while True:
        await asyncio.sleep(tick)
        try:
            if time.monotonic() >= expire_at - tick / 2:
                expire_at = time.monotonic() + EXPIRE_EVERY_S
                await store.expire()
            if shared:
                await store.refresh()
        except StoreError as e:
            log.warning("store upkeep failed: %s", e)


def status_of(store: Store) -> dict[str, object]:
    """The ``store`` section of ``/v1/status``."""
    return {
        "path": str(store.path),
        "streams": {name: _row(st) for name, st in store.stats().items()},
    }


def _row(st: StreamStatus) -> dict[str, object]:
    return {
        "depth": st.depth,
        "bytes": st.bytes,
        "oldest_age_s": round(st.oldest_age_s, 3),
        "dropped_full": st.dropped_full,
        "dropped_expired": st.dropped_expired,
        "max_bytes": st.max_bytes,
        "max_age_s": st.max_age_s,
    }
