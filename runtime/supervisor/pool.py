"""The supervisor's workers as one pool: start them, keep them running, replace them all
when what they serve changes, pass signals and management calls on, stop them.

What they serve changes through the supervisor only (an install, a removal, a promotion, a
trust change): the registry's change hook asks for a `roll`, which replaces the workers one
at a time — a new worker loads the bundles from the store and starts accepting, then the
old one stops accepting, finishes what it has and exits — so at every moment some worker
serves and none serves a mix. Calls that change a worker's memory but not the store (the
repository API's load/unload, shared-memory regions, bundle variables) are applied by the
supervisor, then sent to every worker (`fan_out`) and replayed to each new one in order.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from wasmgate.runtime.ops.config import Settings
from wasmgate.runtime.ops.tasks import background
from wasmgate.runtime.serving.slots import COLUMNS, GatewaySlots
from wasmgate.runtime.supervisor.children import (
    Worker,
    WorkerSpec,
    private_socket,
    retire,
    unix_session,
)
from wasmgate.runtime.supervisor.plan import WorkerPlan, share_connections, share_limits
from wasmgate.runtime.supervisor.zygote import ProcessHandle, Seed, Zygote
from wasmgate.typed import replace

__all__ = ["Call", "WorkerPool"]

log = logging.getLogger("wasmgate.supervisor")

_READY_S = 300.0  # how long a new worker may load the bundles before a start or roll gives up
_REPLAY_MAX = 1000


@dataclass(frozen=True)
class Call:
    """A management call every worker must apply, as the supervisor received it."""

    method: str
    path: str
    body: bytes
    headers: dict[str, str]


class WorkerPool:
    """N workers, worker ``i`` accepting on listening socket ``i`` (which it inherits)."""

    def __init__(
        self,
        plan: WorkerPlan,
        settings: Settings,
        config_path: Path | None,
        listeners: list[socket.socket],
        run_dir: Path,
        *,
        slots: GatewaySlots,
        seed: Seed | None = None,
    ) -> None:
        """``seed``: the zygote ``serve`` forked (`wasmgate.runtime.supervisor.zygote`)."""
        self._plan, self._settings, self._config = plan, settings, config_path
        self._listeners, self._run_dir = listeners, run_dir
        self._slots, self._zygote = slots, Zygote(seed, wanted=settings.workers.zygote)
        self._columns = set(range(1, COLUMNS))  # 0 is the supervisor's
        self.control = str(run_dir / "control.sock")
        self.dedupe = run_dir / "mqtt-dedupe"
        """The MQTT dedupe table the supervisor and its workers share."""
        self.workers = [Worker(i, private_socket(run_dir, i, 0)) for i in range(plan.count)]
        self._generation = 0
        self._replay: list[Call] = []
        self._recorded = 0  # calls ever fanned out: the last one's sequence number
        self._pulled: dict[str, int] = {}  # a starting worker's socket: what it took itself
        self._rolling = asyncio.Lock()
        self._stopping = False
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._reaping: set[asyncio.Task[None]] = set()
        self.on_state: list[Callable[[], None]] = []
        self.on_exit: list[Callable[[int], None]] = []
        """Called with a worker's pid once its process has ended (and been reaped)."""
        self._leaving: set[int] = set()

    def spec(
        self, index: int, private: str, column: int, replaces: int | None = None
    ) -> WorkerSpec:
        """A worker's settings: the supervisor's, with its share of the gateway's caps (the
        supervisor, serving MQTT, takes a share too)."""
        parts = self._plan.count + 1
        return WorkerSpec(
            index=index,
            settings=replace(
                self._settings,
                limits=share_limits(self._settings.limits, index + 1, parts),
                http=share_connections(self._settings.http, self._plan.count, index),
            ),
            config_path=str(self._config) if self._config is not None else None,
            control=self.control,
            private=private,
            listen_fd=self._listeners[index].fileno(),
            allowed=sorted(self._plan.cpus.allowed),
            cpu=min(self._plan.cpu_of(index)),
            part=index + 1,
            parts=parts,
            slots=str(self._run_dir / "slots"),
            slot_column=column,
            dedupe=str(self.dedupe),
            replaces=replaces,
        )

    async def start(self) -> None:
        """Start every worker and wait until each serves (or gives up: the log says why).
        A roll asked for meanwhile waits for the start, then replaces them."""
        async with self._rolling:
            await self._start()

    async def _start(self) -> None:
        await self._zygote.__aenter__()  # closed by `stop`
        for worker in self.workers:
            await self._launch(worker)
        results = await asyncio.gather(*(w.ready(_READY_S) for w in self.workers))
        for worker, ok in zip(self.workers, results, strict=True):
            if ok:
                await self._replay_to(worker)
            else:
                log.error("worker %d did not become ready", worker.index)
            self._tasks[worker.index] = asyncio.create_task(self._keep(worker))

    async def _launch(self, worker: Worker, replaces: int | None = None) -> None:
        worker.column = min(self._columns)
        self._columns.discard(worker.column)
        spec = self.spec(worker.index, worker.private, worker.column, replaces)
        await worker.spawn(spec, spec.listen_fd, self._zygote)

    def _ended(self, column: int, pid: int | None) -> None:
        """A worker process is gone: its running slots with it (it ran nothing more)."""
        self._slots.forget(column)
        self._columns.add(column)
        if pid is not None:
            self._leaving.discard(pid)
            for hook in self.on_exit:
                hook(pid)

    def known(self, pid: int) -> bool:
        """``pid`` is one of this pool's workers, serving or finishing after a roll."""
        return pid in self._leaving or any(w.pid == pid for w in self.workers)

    async def _keep(self, worker: Worker) -> None:
        """Restart ``worker`` whenever its process ends, until the pool stops."""
        while not self._stopping:
            proc = worker.proc
            assert proc is not None  # noqa: S101 - launched before kept
            async with background(worker.watch(), f"watchdog-{worker.index}"):
                code = await proc.wait()
            if self.stopping() or worker.proc is not proc:
                return  # stopped, or replaced by a roll (which frees the old column)
            self._ended(worker.column, proc.pid)
            pause = worker.exited(code)
            log.error(
                "worker %d ended (%s): %s",
                worker.index, worker.last_exit,
                f"restarting in {pause:.1f} s" if pause else "restarting",
            )  # fmt: skip
            self._changed()
            await asyncio.sleep(pause)
            if self.stopping():
                return
            await self._launch(worker)
            if await worker.ready(_READY_S):
                await self._replay_to(worker)
            self._changed()

    def stopping(self) -> bool:
        return self._stopping

    def _changed(self) -> None:
        for hook in self.on_state:
            hook()

    async def roll(self, last: int | None = None) -> None:
        """Replace every worker, one at a time (see the module docstring); the one with pid
        ``last`` (relaying the call that waits for this roll) after the others, so it still
        runs to pass the answer on."""
        async with self._rolling:
            self._generation += 1
            for worker in sorted(self.workers, key=lambda w: last is not None and w.pid == last):
                if self._stopping:
                    return
                await self._replace(worker)

    async def _replace(self, worker: Worker) -> None:
        old = worker.proc
        fresh = Worker(worker.index, private_socket(self._run_dir, worker.index, self._generation))
        await self._launch(fresh, worker.pid if old is not None else None)
        if not await fresh.ready(_READY_S):
            log.error("worker %d: its replacement did not become ready; kept", worker.index)
            fresh.signal(signal.SIGKILL)
            if fresh.proc is not None:
                await fresh.proc.wait()
            self._ended(fresh.column, fresh.pid)
            return
        await self._replay_to(fresh)
        old_column = worker.column
        worker.proc, worker.private, worker.pid = fresh.proc, fresh.private, fresh.pid
        worker.started_at, worker.state, worker.column = fresh.started_at, "serving", fresh.column
        self._tasks[worker.index] = asyncio.create_task(self._keep(worker))
        if old is None:
            self._ended(old_column, None)
            return
        self._leaving.add(old.pid)
        await retire(old, self._listeners[worker.index])
        # Its exit is not awaited: it may be relaying the call that waits for this roll.
        reap = asyncio.create_task(self._reap(old, old_column))
        self._reaping.add(reap)
        reap.add_done_callback(self._reaping.discard)

    async def _reap(self, old: ProcessHandle, column: int) -> None:
        await old.wait()
        self._ended(column, old.pid)

    def hup(self) -> None:
        for worker in self.workers:
            worker.signal(signal.SIGHUP)

    async def stop(self, drain_s: float) -> None:
        """SIGTERM every worker; SIGKILL those still running after ``drain_s`` (the
        gateway's whole drain: a worker's own stop fits in it)."""
        self._stopping = True
        await self._zygote.__aexit__()  # first: none is started again while the workers stop
        for worker in self.workers:
            worker.signal(signal.SIGTERM)
        procs = [w.proc for w in self.workers if w.proc is not None]
        waits = [asyncio.ensure_future(p.wait()) for p in procs]
        if waits:
            _done, late = await asyncio.wait(waits, timeout=drain_s)
            for worker in self.workers:
                if worker.proc is not None and worker.proc.returncode is None and late:
                    worker.signal(signal.SIGKILL)
            await asyncio.gather(*waits, return_exceptions=True)
        for task in self._tasks.values():
            task.cancel()
        if self._reaping:
            await asyncio.wait(self._reaping, timeout=drain_s + 5)

    async def fan_out(self, call: Call) -> None:
        """Apply ``call`` on every serving worker, and on every later one."""
        self._replay.append(call)
        self._recorded += 1
        del self._replay[:-_REPLAY_MAX]
        await asyncio.gather(*(self._send(w.private, call) for w in self.workers))

    def replay_log(self, private: str) -> list[Call]:
        """The calls a starting worker (its private socket) applies itself once its bundles
        are loaded, before it accepts (`wasmgate.runtime.http.forward.Forwarder.catch_up`);
        its replay once ready then sends only the later ones. Pushed after it accepted, a
        change and its undoing (an unload, then a load) left a moment in which the new
        worker refused what every other one served."""
        self._pulled[private] = self._recorded
        return list(self._replay)

    async def _replay_to(self, worker: Worker) -> None:
        done = self._pulled.pop(worker.private, 0)
        while done < self._recorded:  # fan_out may add calls while this one sends
            first = self._recorded - len(self._replay) + 1  # the oldest kept call's number
            done = max(done, first - 1)
            await self._send(worker.private, self._replay[done - first + 1])
            done += 1

    async def _send(self, private: str, call: Call) -> None:
        try:
            async with (
                unix_session(private, 10.0) as http,
                http.request(
                    call.method,
                    f"http://localhost{call.path}",
                    data=call.body,
                    headers=call.headers,
                ) as answer,
            ):
                if answer.status >= 300:
                    log.warning("worker refused %s %s: %s", call.method, call.path, answer.status)
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            log.warning("worker unreachable for %s %s: %s", call.method, call.path, e)

    def describe(self) -> dict[str, object]:
        return {
            "count": self._plan.count,
            "why": self._plan.why,
            "workers": [w.describe() for w in self.workers],
            "zygote": self._zygote.describe(),
        }
