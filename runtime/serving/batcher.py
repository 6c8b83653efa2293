"""Dynamic batching per model: many concurrent callers, one batched backend call.

Requests queue in a bounded deque (full → `Busy`). One dedicated thread takes the oldest
request, waits up to ``max_queue_delay_us`` from its arrival for more rows (until
``max_batch_size`` rows), concatenates compatible requests along axis 0 (same dtypes and
trailing shapes; others wait for the next batch), runs the model once and splits the outputs
back by row counts. A request larger than ``max_batch_size`` runs alone, unsplit.
Only models whose inputs and outputs all have a dynamic first dimension can be batched.
``workers`` > 1 runs that many batches concurrently (like Triton's instance count): on a CPU
two concurrent ORT runs can use the cores better than one. `close()` finishes what is
queued, then stops the threads.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Self

import numpy as np

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
from wasmgate.sandbox.models import TensorSpec

BatchHook = Callable[[int, int, float], None]
"""Called after each batch with (rows, requests, seconds spent in the model)."""


@dataclass
class BatcherStats:
    batches: int = 0
    requests: int = 0
    rows: int = 0
    rejected_busy: int = 0
    batch_sizes: dict[int, int] = field(default_factory=dict)

    @property
    def mean_batch_rows(self) -> float:
        return self.rows / self.batches if self.batches else 0.0


@dataclass
class _Item:
    inputs: list[Array]
    rows: int
    key: tuple[tuple[str, tuple[int, ...]], ...]
    future: Future[list[Array]]
    arrived: float
    deadline: float | None


def capped(
    max_batch_size: int, max_queue_delay_us: int, cap: BatchingCap | None
) -> tuple[int, int]:
    """Apply a device profile's batching caps to a manifest's request."""
    if cap is None:
        return max_batch_size, max_queue_delay_us
    return min(max_batch_size, cap.max_batch_size), min(max_queue_delay_us, cap.max_queue_delay_us)


class Batcher:
    """Wraps a `LoadedModel`; satisfies `ModelHandle` (``infer`` blocks, thread-safe)."""

    def __init__(
        self,
        model: LoadedModel,
        max_batch_size: int,
        max_queue_delay_us: int,
        queue_size: int = 256,
        *,
        on_batch: BatchHook | None = None,
        workers: int = 1,
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
        self._on_batch = on_batch
        self._stats = BatcherStats()
        self._pending: deque[_Item] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._threads = [
            threading.Thread(target=self._loop, name=f"batcher-{model.name}-{i}", daemon=True)
            for i in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    # -- callers -------------------------------------------------------------------------

    def submit(self, inputs: Sequence[Array], deadline: float | None = None) -> Future[list[Array]]:
        """Queue one request; the future resolves to its outputs (or the backend's error).

        ``deadline`` (``time.monotonic()`` based): a request still queued when it passes is
        failed with `DeadlineExceeded` instead of being computed.
        """
        self.model.check_inputs(inputs)
        rows = int(inputs[0].shape[0]) if inputs else 0
        if any(int(a.shape[0]) != rows for a in inputs):
            raise BadRequest(f"{self.name}: inputs disagree on the batch dimension")
        key = tuple((a.dtype.str, tuple(a.shape[1:])) for a in inputs)
        future: Future[list[Array]] = Future()
        item = _Item(list(inputs), rows, key, future, time.monotonic(), deadline)
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
            self._cond.notify()
        return future

    def infer(self, inputs: Sequence[Array], deadline: float | None = None) -> list[Array]:
        """Blocking ModelHandle call (used by wasi-nn compute from worker threads)."""
        future = self.submit(inputs, deadline)
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic()) + 1.0
        return future.result(timeout)

    def stats(self) -> BatcherStats:
        """A snapshot of the counters (for metrics)."""
        with self._cond:
            s = self._stats
            return BatcherStats(s.batches, s.requests, s.rows, s.rejected_busy, dict(s.batch_sizes))

    def close(self, timeout: float | None = 10.0) -> None:
        """Stop accepting, finish the queued requests, join the thread. Idempotent."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the batching thread -------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            batch = self._collect()
            if batch is None:
                return
            self._run(batch)

    def _collect(self) -> list[_Item] | None:
        with self._cond:
            while True:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if not self._pending:
                    return None
                self._wait_for_rows()
                if self._pending:  # another worker may have taken them meanwhile
                    return self._take()

    def _wait_for_rows(self) -> None:
        """Wait (lock held) until a full batch is queued or the oldest request's delay ends."""
        while self._pending and not self._closed:
            if self._compatible_rows() >= self.max_batch_size:
                return
            remaining = self._pending[0].arrived + self.max_queue_delay - time.monotonic()
            if remaining <= 0:
                return
            self._cond.wait(remaining)

    def _compatible_rows(self) -> int:
        key = self._pending[0].key
        return sum(item.rows for item in self._pending if item.key == key)

    def _take(self) -> list[_Item]:
        first = self._pending.popleft()
        batch, rows, keep = [first], first.rows, deque[_Item]()
        while self._pending:
            item = self._pending.popleft()
            if item.key == first.key and rows + item.rows <= self.max_batch_size:
                batch.append(item)
                rows += item.rows
            else:
                keep.append(item)
        self._pending.extendleft(reversed(keep))
        return batch

    def _start(self, batch: list[_Item]) -> list[_Item]:
        """Drop cancelled requests and fail the ones whose deadline passed while queued."""
        now, live = time.monotonic(), []
        for item in batch:
            if not item.future.set_running_or_notify_cancel():
                continue
            if item.deadline is not None and item.deadline <= now:
                waited = (now - item.arrived) * 1e3
                message = f"model {self.name}: deadline passed after {waited:.1f} ms queued"
                item.future.set_exception(DeadlineExceeded(message))
                continue
            live.append(item)
        return live

    def _run(self, batch: list[_Item]) -> None:
        live = self._start(batch)
        if not live:
            return
        rows = sum(item.rows for item in live)
        started = time.perf_counter()
        try:
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

    def _infer_batch(self, live: list[_Item], rows: int) -> list[Array]:
        if len(live) == 1:
            outputs = self.model.infer(live[0].inputs)
        else:
            columns = zip(*(item.inputs for item in live), strict=True)
            outputs = self.model.infer([np.concatenate(col, axis=0) for col in columns])
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
