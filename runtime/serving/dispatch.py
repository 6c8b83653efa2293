"""`BatchDispatcher`: one bounded pool of threads that runs the batches of every `Batcher`.

A thread per batched model does not scale (64 batched models were 64-128 threads, the
unit's ``TasksMax`` is 128): the daemon owns one dispatcher with a fixed number of threads,
and every batcher registers its queue with it. A dispatcher thread scans the batchers
(round robin, so no model starves another) for one whose batch is ready — a full batch, the
oldest request's ``max_queue_delay`` over, or the batcher closing — and runs it. The same
scan fails queued requests whose deadline passed, so they leave the queue at their deadline
without running. All batcher queue state is guarded by the dispatcher's one condition.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Self

if TYPE_CHECKING:
    from wasmgate.runtime.serving.batch_queue import Item
    from wasmgate.runtime.serving.batcher import Batcher


class BatchDispatcher:
    """``threads`` threads shared by every attached `Batcher`; `close()` joins them."""

    def __init__(self, threads: int, name: str = "wasmgate-batch") -> None:
        if threads < 1:
            raise ValueError("a batch dispatcher needs at least one thread")
        self.cond = threading.Condition()
        self._batchers: list[Batcher] = []
        self._closed = False
        self._threads = [
            threading.Thread(target=self._loop, name=f"{name}-{i}", daemon=True)
            for i in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    @property
    def threads(self) -> list[threading.Thread]:
        return list(self._threads)

    def attach(self, batcher: Batcher) -> None:
        with self.cond:
            if self._closed:
                raise RuntimeError("batch dispatcher is closed")
            self._batchers.append(batcher)

    def detach(self, batcher: Batcher) -> None:
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
                    batcher.running -= 1
                    self.cond.notify_all()

    def _next_job(self) -> tuple[Batcher, list[Item]] | None:
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
            self.cond.wait(None if wake is None else max(0.0, wake - now))
