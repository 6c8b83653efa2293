"""The expiry watch: applies the expiry policy when a serving bundle's ``expires`` passes.

Start-up and trust reloads check expiry themselves (`Registry.start`, `apply_trust`); this
task covers a bundle that expires while the daemon runs. It sleeps until the earliest
``expires`` of what serves (woken early when what serves changes), then asks the registry
to re-check everything (`Registry.enforce`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator

from wasmgate.runtime.bundles.registry import Registry
from wasmgate.runtime.errors import DaemonError
from wasmgate.runtime.ops.tasks import wake_or_timeout

log = logging.getLogger("wasmgate.registry")

MAX_SLEEP_S = 60.0
_MARGIN_S = 0.05
"""Wake just after ``expires``: the store's check is ``expires <= now``."""


async def _watch(registry: Registry, changed: asyncio.Event) -> None:
    while True:
        changed.clear()
        due = registry.next_expiry()
        wait = MAX_SLEEP_S if due is None else due - time.time() + _MARGIN_S
        # woken early by a change of what serves; a shutdown cancel always ends the loop
        await wake_or_timeout(changed, min(max(wait, _MARGIN_S), MAX_SLEEP_S))
        if due is None or time.time() < due:
            continue
        try:
            await registry.enforce("expiry")
        except (DaemonError, OSError):
            log.exception("expiry check failed")
        if registry.next_expiry() == due:  # not the store's version (a staged slot's old one)
            await asyncio.sleep(MAX_SLEEP_S)


@contextlib.asynccontextmanager
async def expiry_watch(registry: Registry) -> AsyncIterator[None]:
    """Run the watch while the context is open; cancelled and awaited on exit."""
    changed = asyncio.Event()
    registry.on_change.append(changed.set)
    task = asyncio.create_task(_watch(registry, changed), name="wasmgate-expiry-watch")
    try:
        yield
    finally:
        registry.on_change.remove(changed.set)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
