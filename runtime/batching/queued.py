"""`QueuedModel`: one model's request queue, pacing and counters, as the `BatchDispatcher`
sees them: when its next batch is ready, which requests it holds, running it and recording
what it cost. `Batcher` adds the callers' side (submit, infer, close) on top.

Locking: the dispatcher's condition (``_cond``) guards the queue, the pacer, the counters
and ``running``; the dispatcher holds it when it calls these methods, except `run_batch`,
which runs the model without it and takes it only to record the run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from wasmgate.runtime.backends.base import Array, LoadedModel
from wasmgate.runtime.batching.batch_queue import BatcherStats, BatchQueue, Item
from wasmgate.runtime.batching.dispatch import infer_joined, resolve, span_attributes
from wasmgate.runtime.batching.pacing import Pacer
from wasmgate.runtime.errors import BackendError, DaemonError
from wasmgate.sandbox.models import TensorSpec
from wasmgate.sandbox.spans import joint_span

BatchHook = Callable[[int, int, float], None]
"""Called after each batch with (rows, requests, seconds spent in the model)."""


class QueuedModel:
    """A model's queue and its measurements; the methods the dispatcher calls."""

    _cond: threading.Condition  # the dispatcher's, set by the subclass that attaches

    def __init__(
        self,
        model: LoadedModel,
        max_batch_size: int,
        max_queue_delay_us: int,
        *,
        queue_size: int,
        workers: int,
        on_batch: BatchHook | None,
    ) -> None:
        self.model = model
        self.name: str = model.name
        self.inputs: Sequence[TensorSpec] = model.inputs
        self.outputs: Sequence[TensorSpec] = model.outputs
        self.max_batch_size = max_batch_size
        self.max_queue_delay = max_queue_delay_us / 1e6
        self.queue_size = queue_size
        self.workers = workers
        self.running = 0
        """Batches of this model the dispatcher runs now (its lock held to read or write)."""
        self._inline = 0  # requests callers run on their own threads now
        self._last_one_s: float | None = None  # the last batch-1 run's seconds
        self.pacer = Pacer(max_batch_size, self.max_queue_delay)
        """Arrival and cost measurements (dispatcher lock held to read or write)."""
        self._on_batch = on_batch
        self._stats = BatcherStats()
        self._queue = BatchQueue(model.name)
        self._closed = False
        self._held = False  # ready_at() held the next batch back for companions

    # -- called by the dispatcher (its lock held, except run_batch) ------------------------

    def pending_count(self) -> int:
        return len(self._queue)

    def ready_at(self, now: float) -> float | None:
        """When the next batch is ready (≤ now: ready), None with nothing to start."""
        if not self._queue or self._saturated():
            return None
        limit = self.pacer.limit()
        rows = self._queue.compatible_rows()
        if self._closed or rows >= limit:
            return now
        when = self.pacer.ready_at(self._queue.items[0].arrived, rows, limit, now)
        if when is None or when <= now:
            return now
        self._held = True
        return when

    def wants_scans(self) -> bool:
        """Whether a batch's end may make more than one batch of this model ready."""
        return self._closed or self.workers > 1 or self.pacer.passthrough()

    def next_deadline(self) -> float | None:
        return self._queue.next_deadline()

    def expire(self, now: float) -> None:
        """Fail queued requests whose deadline passed and drop cancelled ones."""
        expired = self._queue.expire(now)
        self._stats.expired += expired
        if expired:
            self._cond.notify_all()

    def take(self) -> list[Item]:
        """The next batch: the oldest request and the compatible ones behind it that fit."""
        held, self._held = self._held, False
        self._stats.waited += held
        self._stats.at_once += not held
        return self._queue.take(self.pacer.limit())

    def run_batch(self, batch: list[Item]) -> None:
        """Run one batch (no lock held) and resolve its futures."""
        live = [item for item in batch if item.future.set_running_or_notify_cancel()]
        if not live:
            return
        rows = sum(item.rows for item in live)
        started = time.perf_counter()
        try:
            contexts = [item.context for item in live]
            with joint_span("batch", contexts, lambda: span_attributes(self.name, live)):
                outputs = infer_joined(self.model, self.outputs, live)
        except Exception as e:
            self._record(rows, len(live), time.perf_counter() - started, ok=False)
            error = e if isinstance(e, DaemonError) else BackendError(f"{self.name}: {e}")
            resolve(live, error)
            return
        self._record(rows, len(live), time.perf_counter() - started, ok=True)
        resolve(live, outputs)

    def _run_alone(self, item: Item) -> list[Array]:
        """Run one request on its caller's thread (no future to resolve, one lock taken
        after the run: this path is the one a lightly loaded model takes every time)."""
        started, ok = time.perf_counter(), False
        try:
            with joint_span("batch", [item.context], lambda: span_attributes(self.name, [item])):
                outputs = infer_joined(self.model, self.outputs, [item])
            ok = True
        except DaemonError:
            raise
        except Exception as e:
            raise BackendError(f"{self.name}: {e}") from e
        finally:
            self._record(item.rows, 1, time.perf_counter() - started, ok=ok, inline=True)
        return outputs

    def _saturated(self) -> bool:
        # Passing through, batch-1 runs go side by side (up to the dispatcher's threads)
        # as an unbatched model's do. A batch to be measured waits for callers' own runs
        # to end, so that it runs alone.
        busy = self.running + (self._inline if self.pacer.measuring() else 0)
        return busy >= self.workers and not self.pacer.passthrough()

    def _record(
        self, rows: int, requests: int, seconds: float, *, ok: bool, inline: bool = False
    ) -> None:
        with self._cond:
            self._stats.count(rows, requests)
            if ok:  # a failed or stopped run says nothing about what a batch costs
                self.pacer.ran(rows, seconds, queued=not inline)
                if rows == 1:
                    self._last_one_s = seconds
            if inline:
                self._inline -= 1
                if self._closed or self._queue:  # close() or a queued batch waits for it
                    self._cond.notify_all()
        if self._on_batch is not None:
            self._on_batch(rows, requests, seconds)
