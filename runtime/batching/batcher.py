"""Dynamic batching per model: many concurrent callers, one batched backend call.

Requests queue in a bounded deque (full → `Busy`). A thread of the daemon's shared
`BatchDispatcher` takes the oldest request once its batch is ready, concatenates compatible
requests along axis 0 (same dtypes and trailing shapes; others wait for the next batch),
runs the model once and splits the outputs back by row counts. A request larger than
``max_batch_size`` runs alone, unsplit. Only models whose inputs and outputs all have a
dynamic first dimension can be batched. ``workers`` > 1 lets that many batches of this
model run at once (like Triton's instance count).

When a batch is ready and how large it gets are measured (`wasmgate.runtime.batching.pacing`):
a request that finds a worker free and nothing queued starts at once — a blocking `infer`
on its caller's thread, no hand-off — unless the measured arrival rate says companions come
within ``max_queue_delay_us`` and each saves more model time than it takes to arrive.
Requests that queue while the workers are busy form the next batch, of at most the rows
that measurably pay. Where batching does not pay (a conv net on 2 cores) callers pass
through: batch-1 runs side by side, as with an unbatched model.

Deadlines: a queued request whose deadline passes leaves the queue with `DeadlineExceeded`
without running; a blocking `infer` caller waits at most until its deadline (running the
model itself, until the backend stops the run at it, like an unbatched model's caller); a
running batch gets the latest deadline of its requests, so the backend stops it (ONNX
Runtime's terminate) only when every request in it has passed its deadline — one patient
request keeps the batch going for itself. `close()` finishes what is queued, then detaches.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from concurrent import futures
from concurrent.futures import Future
from functools import partial

from wasmgate._compat import Self
from wasmgate.runtime.backends.base import Array, LoadedModel
from wasmgate.runtime.batching.batch_queue import (
    BatcherStats,
    Item,
    Request,
    capped,
    new_item,
)
from wasmgate.runtime.batching.dispatch import (
    BatchDispatcher,
)
from wasmgate.runtime.batching.queued import BatchHook, QueuedModel
from wasmgate.runtime.errors import (
    BackendError,
    Busy,
    DeadlineExceeded,
    NotReady,
)

__all__ = ["BatchHook", "Batcher", "BatcherStats", "capped"]


class Batcher(QueuedModel):
    """Wraps a `LoadedModel`; satisfies `ModelHandle` (``infer`` blocks, thread-safe).

    ``dispatcher``: the daemon's shared pool; None = a private one-thread-per-worker
    dispatcher that `close()` stops (standalone use and tests).
    """

    def __init__(
        self,
        model: LoadedModel,
        max_batch_size: int,
        max_queue_delay_us: int,
        queue_size: int = 256,
        *,
        on_batch: BatchHook | None = None,
        workers: int = 1,
        dispatcher: BatchDispatcher | None = None,
    ) -> None:
        if not model.dynamic_batch:
            raise BackendError(
                f"{model.name}: batching needs a dynamic first dimension on every input "
                "and output; this model has fixed shapes"
            )
        if min(max_batch_size, queue_size, workers) < 1 or max_queue_delay_us < 0:
            raise ValueError(
                "max_batch_size, queue_size and workers must be ≥ 1, max_queue_delay_us ≥ 0"
            )
        super().__init__(
            model,
            max_batch_size,
            max_queue_delay_us,
            queue_size=queue_size,
            workers=workers,
            on_batch=on_batch,
        )
        self._own = dispatcher is None
        self._dispatcher = dispatcher or BatchDispatcher(workers, f"batcher-{model.name}")
        self._cond = self._dispatcher.cond
        self._dispatcher.attach(self)

    # -- callers -------------------------------------------------------------------------

    def submit(
        self, inputs: Sequence[Array], *, deadline: float | None = None
    ) -> Future[list[Array]]:
        """Queue one request (validated inputs); the future resolves to its outputs.

        ``deadline`` (``time.monotonic()`` based): a request still queued when it passes is
        failed with `DeadlineExceeded` at that moment, without being computed.
        """
        item = new_item(self.name, inputs, deadline, self._queue)
        with self._cond:
            self._admit(item)
            self._queue.append(item)
            self._wake_for(item)
        return item.future

    def submit_async(
        self, inputs: Sequence[Array], *, deadline: float | None = None
    ) -> tuple[asyncio.Future[list[Array]], Future[list[Array]]]:
        """`submit` for a caller on the running event loop: (the asyncio future to await,
        completed on that loop, a batch's futures of one loop together — no per-request
        cross-thread hand-off, as awaiting `submit`'s future through ``wrap_future`` has —
        and the request's own future, which ends when its batch really ended). Cancelling
        the first takes the request out of the queue if it has not started; a caller that
        gives up on a running one keeps its admission slot until the second is done. As
        with `submit`, only a queued request fails at ``deadline``: bound the await itself."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[list[Array]] = loop.create_future()
        item = new_item(self.name, inputs, deadline, self._queue)
        item.future.waiter = (loop, waiter)
        with self._cond:
            self._admit(item)
            self._queue.append(item)
            self._wake_for(item)
        waiter.add_done_callback(partial(self._gave_up, item.future))
        return waiter, item.future

    def _gave_up(self, request: Request, waiter: asyncio.Future[list[Array]]) -> None:
        if waiter.cancelled():
            with self._cond:
                self._queue.withdraw(request)

    def infer(self, inputs: Sequence[Array], *, deadline: float | None = None) -> list[Array]:
        """Blocking `ModelHandle` call (wasi-nn compute): returns or raises by ``deadline``."""
        item = new_item(self.name, inputs, deadline, self._queue)
        with self._cond:
            self._admit(item)
            alone = self._runs_alone_now(item)
            if alone:
                self._start_alone()
            else:
                self._queue.append(item)
                self._wake_for(item)
        if alone:
            return self._run_alone(item)
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            return item.future.result(timeout)
        except futures.TimeoutError:  # TimeoutError itself from 3.11; not on 3.10
            with self._cond:
                self._queue.withdraw(item.future)
            message = f"model {self.name}: deadline passed waiting for the batch"
            raise DeadlineExceeded(message) from None

    def passes_through(self) -> bool:
        """Whether batching does not pay now: callers run batch 1 side by side, as for an
        unbatched model. Read without the lock: a hint (`infer_now` decides under it)."""
        return self.pacer.passthrough()

    def run_cost(self) -> float | None:
        """Seconds the last batch-1 run took (None: none yet): the model's own time, without
        the hand-off to the dispatcher, for the inline decision (read without the lock)."""
        return self._last_one_s

    def infer_now(
        self, inputs: Sequence[Array], *, deadline: float | None = None
    ) -> list[Array] | None:
        """`infer` when it would start at once on the caller's thread, else None with
        nothing queued: for a caller that must never wait for a batch (the event loop
        running a tiny model inline), which then awaits `submit_async` instead."""
        item = new_item(self.name, inputs, deadline, self._queue)
        with self._cond:
            if self._closed or not self._runs_alone_now(item):
                return None
            self._admit(item)
            self._start_alone()
        return self._run_alone(item)

    def _start_alone(self) -> None:
        """(Lock held.) A request runs on its caller's thread now."""
        self._inline += 1
        self._stats.at_once += 1
        self._stats.inline += 1

    def stats(self) -> BatcherStats:
        """A snapshot of the counters and the current pacing decisions (for metrics)."""
        with self._cond:
            s = self._stats
            limit = self.pacer.limit()
            return BatcherStats(
                s.batches, s.requests, s.rows, s.rejected_busy, s.expired, dict(s.batch_sizes),
                s.at_once, s.waited, s.inline, limit, self.pacer.delay(1, limit, time.monotonic()),
            )  # fmt: skip

    def close(self, timeout: float | None = 10.0) -> None:
        """Stop accepting, finish the queued requests, then detach. Idempotent."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            while self._queue or self.running or self._inline:
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    break
                self._cond.wait(left)
            self._queue.abandon()
        self._dispatcher.detach(self)
        if self._own:
            self._dispatcher.close(timeout)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -------------------------------------------------------------------------

    def _wake_for(self, item: Item) -> None:
        """Wake a dispatcher thread unless no batch of this model can start (workers all
        busy) and a waiting thread looks by the request's deadline anyway: waking on every
        arrival cost a busy model a futex wake and a GIL hand-off per request. (Whether a
        held batch is full now is the woken thread's to work out, not the event loop's.)"""
        if not self._saturated() or not self._dispatcher.wakes_by(item.deadline):
            self._cond.notify()

    def _admit(self, item: Item) -> None:
        """Refuse when closed or full, else count the arrival (lock held)."""
        if self._closed:
            raise NotReady(f"model {self.name} is shutting down (batcher closed)")
        if len(self._queue) >= self.queue_size:
            self._stats.rejected_busy += 1
            raise Busy(
                f"model {self.name}: batch queue full ({self.queue_size} requests waiting); "
                "retry later"
            )
        self.pacer.arrived(item.arrived)

    def _runs_alone_now(self, item: Item) -> bool:
        """Nothing is queued, a worker is free (or batching does not pay, so callers run
        side by side as unbatched ones would) and no companion is worth waiting for."""
        if self.pacer.passthrough():
            return True
        if self._queue or self.running + self._inline >= self.workers:
            return False
        return self.pacer.delay(item.rows, self.pacer.limit(), item.arrived) <= 0
