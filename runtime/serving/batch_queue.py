"""The batcher's queue (`BatchQueue`: bounded order, expiry, batch assembly) and its data.

Not thread-safe by itself: the owning `Batcher` calls it with its dispatcher's lock held.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field

from opentelemetry import context as otel_context

from wasmgate.device_profiles.schema import BatchingCap
from wasmgate.runtime.backends.base import Array
from wasmgate.runtime.errors import DeadlineExceeded, NotReady


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
