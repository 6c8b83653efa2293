"""`BatchDispatcher`: one bounded pool of threads that runs the batches of every `Batcher`,
and one batch's run (join the requests' rows, run the model once, split the outputs back).

A thread per batched model does not scale (64 batched models were 64-128 threads, the
unit's ``TasksMax`` is 128): the daemon owns one dispatcher with a fixed number of threads,
and every batcher registers its queue with it. A dispatcher thread scans the batchers
(round robin, so no model starves another) for one whose batch is ready — a full batch, the
oldest request's ``max_queue_delay`` over, or the batcher closing — and runs it. The same
scan fails queued requests whose deadline passed, so they leave the queue at their deadline
without running. All batcher queue state is guarded by the dispatcher's one condition.

Wake-ups are what a busy model pays per request (a futex wake, then a GIL hand-off to a
thread that scans and goes back to sleep), so threads are woken only when a scan could do
something: an arriving request wakes one unless its model's workers are all busy and a
waiting thread looks again by the request's deadline anyway (`wakes_by`); a thread whose
batch ended scans again itself, waking the others only when more than its own next batch
may be ready (another model's queue, callers passing through, several workers, closing).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from wasmgate._compat import Self
from wasmgate.runtime.backends.base import Array, LoadedModel
from wasmgate.runtime.batching.batch_queue import Item, Outcome, Request, settle
from wasmgate.runtime.errors import BackendError
from wasmgate.sandbox.models import TensorSpec

if TYPE_CHECKING:
    from wasmgate.runtime.batching.queued import QueuedModel


class BatchDispatcher:
    """``threads`` threads shared by every attached `Batcher`; `close()` joins them."""

    def __init__(self, threads: int, name: str = "wasmgate-batch") -> None:
        if threads < 1:
            raise ValueError("a batch dispatcher needs at least one thread")
        self.cond = threading.Condition()
        self._batchers: list[QueuedModel] = []
        self._closed = False
        self._timers: list[float] = []  # when each waiting thread wakes by itself (inf: never)
        self._threads = [
            threading.Thread(target=self._loop, name=f"{name}-{i}", daemon=True)
            for i in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    @property
    def threads(self) -> list[threading.Thread]:
        return list(self._threads)

    @property
    def timers(self) -> list[float]:
        """When each waiting thread wakes by itself (inf: only when notified)."""
        with self.cond:
            return list(self._timers)

    def attach(self, batcher: QueuedModel) -> None:
        with self.cond:
            if self._closed:
                raise RuntimeError("batch dispatcher is closed")
            self._batchers.append(batcher)

    def detach(self, batcher: QueuedModel) -> None:
        with self.cond:
            if batcher in self._batchers:
                self._batchers.remove(batcher)
            self.cond.notify_all()

    def close(self, timeout: float | None = 10.0) -> None:
        """Run what is queued, then stop the threads. Idempotent."""
        with self.cond:
            self._closed = True
            self.cond.notify_all()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def wakes_by(self, when: float | None) -> bool:
        """(Lock held.) Whether a scan comes by ``when`` unasked: a waiting thread's timer
        fires by then, or none waits (a busy thread scans as its batch ends)."""
        return when is None or not self._timers or min(self._timers) <= when

    def _loop(self) -> None:
        while True:
            with self.cond:
                job = self._next_job()
            if job is None:
                return
            batcher, batch = job
            try:
                batcher.run_batch(batch)
            finally:
                with self.cond:
                    self._finished(batcher)

    def _finished(self, batcher: QueuedModel) -> None:
        """(Lock held.) A batch of ``batcher`` ended; this thread scans again next, so the
        others are woken only when more than its own next batch may be ready."""
        batcher.running -= 1
        if (
            self._closed
            or batcher.wants_scans()
            or any(b.pending_count() for b in self._batchers if b is not batcher)
        ):
            self.cond.notify_all()

    def _next_job(self) -> tuple[QueuedModel, list[Item]] | None:
        """Wait (lock held) for a ready batch; None once closed and every queue is empty."""
        while True:
            now = time.monotonic()
            wake: float | None = None
            for i, batcher in enumerate(self._batchers):
                batcher.expire(now)
                ready_at = batcher.ready_at(now)
                if ready_at is not None and ready_at <= now:
                    # Round robin: the batcher served now goes to the back of the scan.
                    self._batchers.append(self._batchers.pop(i))
                    batcher.running += 1
                    return batcher, batcher.take()
                for when in (ready_at, batcher.next_deadline()):
                    if when is not None:
                        wake = when if wake is None else min(wake, when)
            if self._closed and not any(b.pending_count() for b in self._batchers):
                return None
            self._wait(wake, now)

    def _wait(self, wake: float | None, now: float) -> None:
        timer = math.inf if wake is None else wake
        self._timers.append(timer)
        try:
            self.cond.wait(None if wake is None else max(0.0, wake - now))
        finally:
            self._timers.remove(timer)


# -- one batch's run: join the rows, run once, hand each request its rows back -----------


def latest_deadline(live: Sequence[Item]) -> float | None:
    """The batch's deadline: the run is stopped only once every request in it gave up."""
    deadlines = [item.deadline for item in live]
    return None if None in deadlines else max(d for d in deadlines if d is not None)


def infer_joined(
    model: LoadedModel, outputs: Sequence[TensorSpec], live: list[Item]
) -> list[Array]:
    """Run ``live`` as one call (a single request's arrays go in as they are)."""
    rows = sum(item.rows for item in live)
    deadline = latest_deadline(live)
    if len(live) == 1:
        result = model.infer(live[0].inputs, deadline=deadline)
    else:
        columns = zip(*(item.inputs for item in live), strict=True)
        joined = [np.concatenate(col, axis=0) for col in columns]
        result = model.infer(joined, deadline=deadline)
    for spec, out in zip(outputs, result, strict=True):
        if out.shape[:1] != (rows,):
            raise BackendError(
                f"{model.name}: output {spec.name!r} has {out.shape[:1]} rows for a batch "
                f"of {rows}; cannot split it back"
            )
    return result


def resolve(live: list[Item], outputs: list[Array] | Exception) -> None:
    """Give every request its rows of the outputs, in queue order (or the batch's error)."""
    if isinstance(outputs, Exception):
        settle([(item.future, outputs) for item in live])
        return
    done: list[tuple[Request, Outcome]] = []
    offset = 0
    for item in live:
        done.append((item.future, [out[offset : offset + item.rows] for out in outputs]))
        offset += item.rows
    settle(done)


def span_attributes(name: str, live: list[Item]) -> dict[str, str | int]:
    return {
        "wasmgate.model": name,
        "wasmgate.batch.size": sum(item.rows for item in live),
        "wasmgate.batch.requests": len(live),
    }
