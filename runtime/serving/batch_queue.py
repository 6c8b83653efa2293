"""The batcher's queue (`BatchQueue`: order, expiry, batch assembly), its data, and one
batch's run (join the requests' rows, run the model once, split the outputs back).

`BatchQueue` is not thread-safe by itself: the owning `Batcher` calls it under its
dispatcher's lock; the run functions are called with no lock held.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np
from opentelemetry import context as otel_context

from wasmgate.device_profiles.schema import BatchingCap
from wasmgate.runtime.backends.base import Array, LoadedModel
from wasmgate.runtime.errors import BackendError, BadRequest, DeadlineExceeded, NotReady
from wasmgate.sandbox.models import TensorSpec


@dataclass
class BatcherStats:
    batches: int = 0
    requests: int = 0
    rows: int = 0
    rejected_busy: int = 0
    expired: int = 0
    """Requests whose deadline passed while queued (never run)."""
    batch_sizes: dict[int, int] = field(default_factory=dict)
    at_once: int = 0
    """Batches started as soon as their first request came (idle worker, no wait)."""
    waited: int = 0
    """Batches held back for companions (the measured arrival rate said they would come)."""
    inline: int = 0
    """Of ``at_once``: requests the blocking caller ran on its own thread."""
    limit: int = 0
    """The most rows a batch takes now (measured: what pays), at the snapshot."""
    delay_s: float = 0.0
    """How long a lone queued request would now wait for companions, at the snapshot."""

    def count(self, rows: int, requests: int) -> None:
        self.batches += 1
        self.requests += requests
        self.rows += rows
        self.batch_sizes[rows] = self.batch_sizes.get(rows, 0) + 1

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


def new_item(name: str, inputs: Sequence[Array], deadline: float | None) -> Item:
    """A request as queued: its rows, its compatibility key, a future, the caller's trace."""
    rows = int(inputs[0].shape[0]) if inputs else 0
    if any(int(a.shape[0]) != rows for a in inputs):
        raise BadRequest(f"{name}: inputs disagree on the batch dimension")
    key = tuple((a.dtype.str, tuple(a.shape[1:])) for a in inputs)
    future: Future[list[Array]] = Future()
    now = time.monotonic()
    return Item(list(inputs), rows, key, future, now, deadline, otel_context.get_current())


def capped(
    max_batch_size: int, max_queue_delay_us: int, cap: BatchingCap | None
) -> tuple[int, int]:
    """Apply a device profile's batching caps to a manifest's request."""
    if cap is None:
        return max_batch_size, max_queue_delay_us
    return min(max_batch_size, cap.max_batch_size), min(max_queue_delay_us, cap.max_queue_delay_us)


class BatchQueue:
    """The queued requests of one model, oldest first."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.items: deque[Item] = deque()

    def __len__(self) -> int:
        return len(self.items)

    def next_deadline(self) -> float | None:
        return min((i.deadline for i in self.items if i.deadline is not None), default=None)

    def compatible_rows(self) -> int:
        """Rows queued that could join the oldest request's batch."""
        key = self.items[0].key
        return sum(item.rows for item in self.items if item.key == key)

    def expire(self, now: float) -> int:
        """Fail requests whose deadline passed, drop cancelled ones; how many expired."""
        if not any(_gone(item, now) for item in self.items):
            return 0
        keep: deque[Item] = deque()
        expired = 0
        for item in self.items:
            if not _gone(item, now):
                keep.append(item)
            elif item.future.set_running_or_notify_cancel():
                expired += 1
                waited = (now - item.arrived) * 1e3
                message = f"model {self.name}: deadline passed after {waited:.1f} ms queued"
                item.future.set_exception(DeadlineExceeded(message))
        self.items = keep
        return expired

    def take(self, limit: int) -> list[Item]:
        """The oldest request and the compatible ones behind it within ``limit`` rows (the
        oldest alone may be larger: it runs unsplit)."""
        first = self.items.popleft()
        batch, rows, keep = [first], first.rows, deque[Item]()
        while self.items:
            item = self.items.popleft()
            if item.key == first.key and rows + item.rows <= limit:
                batch.append(item)
                rows += item.rows
            else:
                keep.append(item)
        self.items = keep
        return batch

    def withdraw(self, future: Future[list[Array]]) -> None:
        """Take a request out (its caller stopped waiting)."""
        if future.cancel():
            self.items = deque(i for i in self.items if i.future is not future)

    def abandon(self) -> None:
        """Fail everything queued: nothing will ever run it, callers must not wait."""
        for item in self.items:
            if item.future.set_running_or_notify_cancel():
                item.future.set_exception(NotReady(f"model {self.name} closed before it ran"))
        self.items.clear()


def _gone(item: Item, now: float) -> bool:
    return item.future.cancelled() or (item.deadline is not None and item.deadline <= now)


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


def resolve(live: list[Item], outputs: list[Array]) -> None:
    """Give every request its rows of the outputs, in queue order."""
    offset = 0
    for item in live:
        item.future.set_result([out[offset : offset + item.rows] for out in outputs])
        offset += item.rows


def span_attributes(name: str, live: list[Item]) -> dict[str, str | int]:
    return {
        "wasmgate.model": name,
        "wasmgate.batch.size": sum(item.rows for item in live),
        "wasmgate.batch.requests": len(live),
    }
