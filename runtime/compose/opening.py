"""The daemon's start in two stages: listen first, load after.

Stage one is the app's ``cleanup_ctx`` chain (`wasmgate.runtime.compose.app`): every resource that
is quick to make, up to an empty registry and its service. Stage two, `Opening`, loads the
start-up bundles (seconds to minutes: module compiles, model sessions) and then enters what
needs them loaded, in order: the bundle watcher and expiry checks, the gRPC listener, the
fleet member, the MQTT bridge (closed in reverse).

With ``background`` (what `wasmgate.runtime.compose.daemon.run_daemon` uses) stage two runs in a
task of its own once the runner is set up, so the HTTP listener — health, the status page
with the loading progress — answers while the bundles load. Until stage two is done the
service is not ready (``/v2/health/ready`` 503, systemd gets no READY=1): `done` resolves
then, or carries what failed (the daemon exits with it, as it did when everything loaded
before listening). Without it (an app a test harness builds and sets up), stage two runs
inside the runner's setup: set up means loaded, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager

from aiohttp import web

__all__ = ["Opening", "Stage"]

Stage = Callable[[web.Application], AbstractAsyncContextManager[None]]
"""One part of stage two: entered after the loading, exited before stage one closes."""


class Opening:
    """Stage two of one app: ``load``, then the ``stages``, then ``opened`` (ready)."""

    def __init__(
        self,
        load: Callable[[web.Application], Awaitable[None]],
        stages: Sequence[Stage],
        opened: Callable[[web.Application], None],
        *,
        background: bool,
    ) -> None:
        self._load = load
        self._stages = tuple(stages)
        self._opened = opened
        self._background = background
        self.done: asyncio.Future[None] | None = None
        """Set by `ctx`: resolves when stage two is done, or holds its exception."""

    @contextlib.asynccontextmanager
    async def _open(self, app: web.Application) -> AsyncIterator[None]:
        await self._load(app)
        async with contextlib.AsyncExitStack() as stack:
            for stage in self._stages:
                await stack.enter_async_context(stage(app))
            self._opened(app)
            yield

    async def ctx(self, app: web.Application) -> AsyncIterator[None]:
        """The app's last ``cleanup_ctx`` entry."""
        done = self.done = asyncio.get_running_loop().create_future()
        if not self._background:
            async with self._open(app):
                done.set_result(None)
                yield
            return
        stop = asyncio.Event()
        task = asyncio.create_task(self._hold(app, done, stop), name="wasmgate-opening")
        try:
            yield
        finally:
            stop.set()
            if not done.done():
                task.cancel()  # a stop while loading: the rest of the loading is not wanted
            # What failed was raised from `done` by its waiter; here it only ends the task.
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _hold(
        self, app: web.Application, done: asyncio.Future[None], stop: asyncio.Event
    ) -> None:
        """Stage two in one task (its context managers are entered and left in the same
        task, as task groups and timeouts require), held open until the app stops."""
        try:
            async with self._open(app):
                done.set_result(None)
                await stop.wait()
        except BaseException as e:
            if not done.done():
                if isinstance(e, asyncio.CancelledError):
                    done.cancel()
                else:
                    done.set_exception(e)
            raise
