"""The batcher's queue (`BatchQueue`: order, expiry, batch assembly) and its data: the
queued `Item`s and their futures (`Request`).

`BatchQueue` is not thread-safe by itself: the owning `Batcher` calls it under its
dispatcher's lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from opentelemetry import context as otel_context

from wasmgate.device_profiles.schema import BatchingCap
from wasmgate.runtime.backends.base import Array
from wasmgate.runtime.errors import BadRequest, DeadlineExceeded, NotReady


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


Outcome = list[Array] | Exception
Waiter = tuple[asyncio.AbstractEventLoop, "asyncio.Future[list[Array]]"]


class Request(Future[list[Array]]):
    """A queued request's future; a cancel marks its queue for the next scan to look at
    (so a scan need not ask every queued future whether it was cancelled). ``waiter``: the
    asyncio future a caller on an event loop awaits instead (`Batcher.submit_async`)."""

    def __init__(self, queue: BatchQueue | None = None) -> None:
        super().__init__()
        self.queue = queue
        self.waiter: Waiter | None = None

    def cancel(self) -> bool:
        cancelled = super().cancel()
        if cancelled and self.queue is not None:
            self.queue.cancelled = True  # (one store: no lock needed to raise the flag)
        return cancelled


def settle(done: Sequence[tuple[Request, Outcome]]) -> None:
    """Complete each future with its outcome; the asyncio waiters among them are woken on
    their loops, all of one loop's together in one ``call_soon_threadsafe``: one wake-up of
    the loop per batch, where a ``wrap_future`` per request costs a cross-thread hand-off
    (a self-pipe write, a loop wake-up, two more callbacks) for every request."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[list[Array]], Outcome]]]
    by_loop = {}
    for future, outcome in done:
        if isinstance(outcome, Exception):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)
        if future.waiter is not None:
            loop, waiter = future.waiter
            by_loop.setdefault(loop, []).append((waiter, outcome))
    for loop, woken in by_loop.items():
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody awaits there now
            loop.call_soon_threadsafe(_wake, woken)


def _wake(woken: list[tuple[asyncio.Future[list[Array]], Outcome]]) -> None:
    for waiter, outcome in woken:
        if waiter.done():  # cancelled: its caller gave up
            continue
        if isinstance(outcome, Exception):
            waiter.set_exception(outcome)
        else:
            waiter.set_result(outcome)


@dataclass(slots=True)
class Item:
    """One queued request."""

    inputs: list[Array]
    rows: int
    key: tuple[tuple[str, tuple[int, ...]], ...]
    future: Request
    arrived: float
    deadline: float | None
    context: otel_context.Context = field(default_factory=otel_context.Context)
    """The caller's trace context: the batch span's parent (or link) runs on another thread."""


def new_item(
    name: str, inputs: Sequence[Array], deadline: float | None, queue: BatchQueue | None = None
) -> Item:
    """A request as queued: its rows, its compatibility key, a future, the caller's trace."""
    arrays = list(inputs)
    rows = int(arrays[0].shape[0]) if arrays else 0
    for a in arrays:
        if a.shape[0] != rows:
            raise BadRequest(f"{name}: inputs disagree on the batch dimension")
    key = tuple([(a.dtype.str, a.shape[1:]) for a in arrays])
    now = time.monotonic()
    return Item(arrays, rows, key, Request(queue), now, deadline, otel_context.get_current())


def capped(
    max_batch_size: int, max_queue_delay_us: int, cap: BatchingCap | None
) -> tuple[int, int]:
    """Apply a device profile's batching caps to a manifest's request."""
    if cap is None:
        return max_batch_size, max_queue_delay_us
    return min(max_batch_size, cap.max_batch_size), min(max_queue_delay_us, cap.max_queue_delay_us)


class BatchQueue:
    """The queued requests of one model, oldest first, with the sums a scan asks for kept
    as they change (rows per compatibility key, the earliest deadline): a dispatcher scans
    on every wake-up, and walking the queue there made each batch cost O(queue²)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.items: deque[Item] = deque()
        self.cancelled = False
        """A queued future may have been cancelled since the last `expire`."""
        self._rows: dict[tuple[tuple[str, tuple[int, ...]], ...], int] = {}
        self._earliest: float | None = None

    def __len__(self) -> int:
        return len(self.items)

    def append(self, item: Item) -> None:
        self.items.append(item)
        self._rows[item.key] = self._rows.get(item.key, 0) + item.rows
        if item.deadline is not None and (self._earliest is None or item.deadline < self._earliest):
            self._earliest = item.deadline

    def next_deadline(self) -> float | None:
        return self._earliest

    def compatible_rows(self) -> int:
        """Rows queued that could join the oldest request's batch."""
        return self._rows[self.items[0].key]

    def expire(self, now: float) -> int:
        """Fail requests whose deadline passed, drop cancelled ones; how many expired."""
        if not self.cancelled and (self._earliest is None or self._earliest > now):
            return 0
        self.cancelled = False
        keep: deque[Item] = deque()
        failed: list[tuple[Request, Outcome]] = []
        for item in self.items:
            if not _gone(item, now):
                keep.append(item)
            elif item.future.set_running_or_notify_cancel():
                waited = (now - item.arrived) * 1e3
                message = f"model {self.name}: deadline passed after {waited:.1f} ms queued"
                failed.append((item.future, DeadlineExceeded(message)))
        self._replace(keep)
        settle(failed)
        return len(failed)

    def take(self, limit: int) -> list[Item]:
        """The oldest request and the compatible ones behind it within ``limit`` rows (the
        oldest alone may be larger: it runs unsplit)."""
        items = self.items
        first = items.popleft()
        batch, rows = [first], first.rows
        while items and rows < limit and items[0].key == first.key:
            if rows + items[0].rows > limit:
                break
            item = items.popleft()  # the common case: the head of the queue fits
            batch.append(item)
            rows += item.rows
        if items and rows < limit and self._rows[first.key] - rows > 0:
            batch, rows = self._take_behind(batch, rows, limit)
        else:
            self._taken(batch)
        return batch

    def _take_behind(self, batch: list[Item], rows: int, limit: int) -> tuple[list[Item], int]:
        """The rest of `take`: compatible requests behind others (a mixed queue)."""
        key, keep = batch[0].key, deque[Item]()
        for item in self.items:
            if item.key == key and rows + item.rows <= limit:
                batch.append(item)
                rows += item.rows
            else:
                keep.append(item)
        self._replace(keep)
        return batch, rows

    def _taken(self, batch: list[Item]) -> None:
        key = batch[0].key
        left = self._rows[key] - sum(item.rows for item in batch)
        if left:
            self._rows[key] = left
        else:
            del self._rows[key]
        if self._earliest is not None and any(i.deadline == self._earliest for i in batch):
            self._earliest = _earliest(self.items)

    def _replace(self, keep: deque[Item]) -> None:
        self.items = keep
        self._rows = {}
        for item in keep:
            self._rows[item.key] = self._rows.get(item.key, 0) + item.rows
        self._earliest = _earliest(keep)

    def withdraw(self, future: Future[list[Array]]) -> None:
        """Take a request out (its caller stopped waiting)."""
        if future.cancel():
            self._replace(deque(i for i in self.items if i.future is not future))

    def abandon(self) -> None:
        """Fail everything queued: nothing will ever run it, callers must not wait."""
        error = NotReady(f"model {self.name} closed before it ran")
        settle([(i.future, error) for i in self.items if i.future.set_running_or_notify_cancel()])
        self._replace(deque())


def _earliest(items: deque[Item]) -> float | None:
    return min((i.deadline for i in items if i.deadline is not None), default=None)


def _gone(item: Item, now: float) -> bool:
    return item.future.cancelled() or (item.deadline is not None and item.deadline <= now)
