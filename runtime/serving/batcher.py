"""Dynamic batching per model: many concurrent callers, one batched backend call.

Requests queue in a bounded deque (full → `Busy`). A thread of the daemon's shared
`BatchDispatcher` takes the oldest request once its batch is ready — ``max_batch_size`` rows
queued or ``max_queue_delay_us`` since its arrival — concatenates compatible requests along
axis 0 (same dtypes and trailing shapes; others wait for the next batch), runs the model
once and splits the outputs back by row counts. A request larger than ``max_batch_size``
runs alone, unsplit. Only models whose inputs and outputs all have a dynamic first
dimension can be batched. ``workers`` > 1 lets that many batches of this model run at once
(like Triton's instance count).

Deadlines: a queued request whose deadline passes leaves the queue with `DeadlineExceeded`
without running; a blocking `infer` caller waits at most until its deadline; a running batch
gets the latest deadline of its requests, so the backend stops it (ONNX Runtime's
terminate) only when every request in it has passed its deadline — one patient request
keeps the batch going for itself. `close()` finishes what is queued, then detaches.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Self

import numpy as np
from opentelemetry import context as otel_context

from wasmgate.device_profiles.schema import BatchingCap
from wasmgate.runtime.backends.base import Array, LoadedModel
from wasmgate.runtime.errors import (
    BackendError,
    BadRequest,
    Busy,
    DaemonError,
    DeadlineExceeded,
    NotReady,
)
from wasmgate.runtime.serving.dispatch import BatchDispatcher
from wasmgate.sandbox.models import TensorSpec
from wasmgate.sandbox.spans import joint_span

BatchHook = Callable[[int, int, float], None]
"""Called after each batch with (rows, requests, seconds spent in the model)."""


@dataclass
class BatcherStats:
    batches: int = 0
    requests: int = 0
    rows: int = 0
    rejected_busy: int = 0
    expired: int = 0
    """Requests whose deadline passed while queued (never run)."""
    batch_sizes: dict[int, int] = field(default_factory=dict)

    @property
    def mean_batch_rows(self) -> float:
        return self.rows / self.batches if self.batches else 0.0


@dataclass
class Item:
    """One queued request."""

    inputs: list[Array]
    rows: int
    key: tuple[tuple[str, tuple[int, ...]], ...]
    future: Future[list[Array]]
    arrived: float
    deadline: float | None
    context: otel_context.Context = field(default_factory=otel_context.Context)
    """The caller's trace context: the batch span's parent (or link) runs on another thread."""


def capped(
    max_batch_size: int, max_queue_delay_us: int, cap: BatchingCap | None
) -> tuple[int, int]:
    """Apply a device profile's batching caps to a manifest's request."""
    if cap is None:
        return max_batch_size, max_queue_delay_us
    return min(max_batch_size, cap.max_batch_size), min(max_queue_delay_us, cap.max_queue_delay_us)


class Batcher:
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
        self.model = model
        self.name: str = model.name
        self.inputs: Sequence[TensorSpec] = model.inputs
        self.outputs: Sequence[TensorSpec] = model.outputs
        self.max_batch_size = max_batch_size
        self.max_queue_delay = max_queue_delay_us / 1e6
        self.queue_size = queue_size
        self.workers = workers
        self.running = 0
        """Batches of this model running now (dispatcher lock held to read or write)."""
        self._on_batch = on_batch
        self._stats = BatcherStats()
        self._pending: deque[Item] = deque()
        self._closed = False
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
        rows = int(inputs[0].shape[0]) if inputs else 0
        if any(int(a.shape[0]) != rows for a in inputs):
            raise BadRequest(f"{self.name}: inputs disagree on the batch dimension")
        key = tuple((a.dtype.str, tuple(a.shape[1:])) for a in inputs)
        future: Future[list[Array]] = Future()
        item = Item(
            list(inputs), rows, key, future, time.monotonic(), deadline, otel_context.get_current()
        )
        with self._cond:
            if self._closed:
                raise NotReady(f"model {self.name} is shutting down (batcher closed)")
            if len(self._pending) >= self.queue_size:
                self._stats.rejected_busy += 1
                raise Busy(
                    f"model {self.name}: batch queue full ({self.queue_size} requests waiting); "
                    "retry later"
                )
            self._pending.append(item)
            self._cond.notify_all()
        return future

    def infer(self, inputs: Sequence[Array], *, deadline: float | None = None) -> list[Array]:
        """Blocking `ModelHandle` call (wasi-nn compute): returns or raises by ``deadline``."""
        future = self.submit(inputs, deadline=deadline)
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            return future.result(timeout)
        except TimeoutError:
            self._withdraw(future)
            message = f"model {self.name}: deadline passed waiting for the batch"
            raise DeadlineExceeded(message) from None

    def stats(self) -> BatcherStats:
        """A snapshot of the counters (for metrics)."""
        with self._cond:
            s = self._stats
            return BatcherStats(
                s.batches, s.requests, s.rows, s.rejected_busy, s.expired, dict(s.batch_sizes)
            )

    def close(self, timeout: float | None = 10.0) -> None:
        """Stop accepting, finish the queued requests, then detach. Idempotent."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            while self._pending or self.running:
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    break
                self._cond.wait(left)
            self._abandon()
        self._dispatcher.detach(self)
        if self._own:
            self._dispatcher.close(timeout)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- called by the dispatcher (its lock held, except run_batch) ------------------------

    def pending_count(self) -> int:
        return len(self._pending)

    def ready_at(self, now: float) -> float | None:
        """When the next batch is ready (≤ now: ready), None with nothing to start."""
        if not self._pending or self.running >= self.workers:
            return None
        if self._closed or self._compatible_rows() >= self.max_batch_size:
            return now
        return self._pending[0].arrived + self.max_queue_delay

    def next_deadline(self) -> float | None:
        deadlines = [i.deadline for i in self._pending if i.deadline is not None]
        return min(deadlines, default=None)

    def expire(self, now: float) -> None:
        """Fail queued requests whose deadline passed and drop cancelled ones."""
        if not any(self._gone(item, now) for item in self._pending):
            return
        keep: deque[Item] = deque()
        for item in self._pending:
            if not self._gone(item, now):
                keep.append(item)
            elif item.future.set_running_or_notify_cancel():
                self._stats.expired += 1
                waited = (now - item.arrived) * 1e3
                message = f"model {self.name}: deadline passed after {waited:.1f} ms queued"
                item.future.set_exception(DeadlineExceeded(message))
        self._pending = keep
        self._cond.notify_all()

    @staticmethod
    def _gone(item: Item, now: float) -> bool:
        return item.future.cancelled() or (item.deadline is not None and item.deadline <= now)

    def take(self) -> list[Item]:
        first = self._pending.popleft()
        batch, rows, keep = [first], first.rows, deque[Item]()
        while self._pending:
            item = self._pending.popleft()
            if item.key == first.key and rows + item.rows <= self.max_batch_size:
                batch.append(item)
                rows += item.rows
            else:
                keep.append(item)
        self._pending = keep
        return batch

    def run_batch(self, batch: list[Item]) -> None:
        """Run one batch (no lock held) and resolve its futures."""
        live = [item for item in batch if item.future.set_running_or_notify_cancel()]
        if not live:
            return
        rows = sum(item.rows for item in live)
        started = time.perf_counter()
        try:
            with joint_span("batch", [item.context for item in live], lambda: self._attrs(live)):
                outputs = self._infer_batch(live, rows)
        except Exception as e:
            error = e if isinstance(e, DaemonError) else BackendError(f"{self.name}: {e}")
            for item in live:
                item.future.set_exception(error)
            return
        finally:
            self._record(rows, len(live), time.perf_counter() - started)
        offset = 0
        for item in live:
            item.future.set_result([out[offset : offset + item.rows] for out in outputs])
            offset += item.rows

    # -- internals -------------------------------------------------------------------------

    def _attrs(self, live: list[Item]) -> dict[str, str | int]:
        return {
            "wasmgate.model": self.name,
            "wasmgate.batch.size": sum(item.rows for item in live),
            "wasmgate.batch.requests": len(live),
        }

    def _abandon(self) -> None:
        """Fail what is still queued after close() gave up waiting (lock held): once
        detached nothing would ever run it, and its callers must not wait for nothing."""
        for item in self._pending:
            if item.future.set_running_or_notify_cancel():
                item.future.set_exception(NotReady(f"model {self.name} closed before it ran"))
        self._pending.clear()

    def _withdraw(self, future: Future[list[Array]]) -> None:
        """Take a caller's request out of the queue (it stopped waiting)."""
        with self._cond:
            if future.cancel():
                self._pending = deque(i for i in self._pending if i.future is not future)

    def _compatible_rows(self) -> int:
        key = self._pending[0].key
        return sum(item.rows for item in self._pending if item.key == key)

    def _infer_batch(self, live: list[Item], rows: int) -> list[Array]:
        deadlines = [item.deadline for item in live]
        # Stop the run only once every request in it has given up (see module docstring).
        deadline = None if None in deadlines else max(d for d in deadlines if d is not None)
        if len(live) == 1:
            outputs = self.model.infer(live[0].inputs, deadline=deadline)
        else:
            columns = zip(*(item.inputs for item in live), strict=True)
            joined = [np.concatenate(col, axis=0) for col in columns]
            outputs = self.model.infer(joined, deadline=deadline)
        for spec, out in zip(self.outputs, outputs, strict=True):
            if out.shape[:1] != (rows,):
                raise BackendError(
                    f"{self.name}: output {spec.name!r} has {out.shape[:1]} rows for a batch "
                    f"of {rows}; cannot split it back"
                )
        return outputs

    def _record(self, rows: int, requests: int, seconds: float) -> None:
        with self._cond:
            s = self._stats
            s.batches += 1
            s.requests += requests
            s.rows += rows
            s.batch_sizes[rows] = s.batch_sizes.get(rows, 0) + 1
        if self._on_batch is not None:
            self._on_batch(rows, requests, seconds)
