"""One thread that stops native runs at their deadline (ONNX Runtime's ``RunOptions.terminate``).

A backend run that can be cancelled registers ``(deadline, cancel)`` for its duration
(`Watchdog.guard`); when the deadline passes first, the watchdog calls ``cancel`` from its
own thread (ORT documents ``terminate`` as settable from another thread: the run then fails
with "Exiting due to terminate flag being set to true"). One watchdog serves every model of
a daemon, so cancellation costs no thread per model or per run. The composition root owns
it (``with Watchdog() as w``) and passes it to the backends through ``LoadOptions``.

A guard wakes the thread only when its deadline is earlier than the one the thread sleeps
until: deadlines of one daemon mostly grow (now + the same budget), so a run of tens of
microseconds costs a heap push, not a thread wake-up and the GIL hand-off that comes with
it (which py-spy showed as the largest item of the tiny-model V2 path). With nothing left
to watch the thread keeps waking every ``_TICK_S`` for ``_LINGER_S`` after the last guard
instead of sleeping for good: under steady traffic with short deadlines (an inline
adapter's 5 ms budget) the next guard's deadline is then later than the next tick and
wakes nobody, where an empty heap would have had every guard wake the thread.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

from wasmgate._compat import Self

log = logging.getLogger(__name__)

_PRUNE_MIN = 64
_TICK_S = 0.005
_LINGER_S = 0.1
_NEVER = float("inf")


class Guard:
    """One registered run; ``fired`` once the watchdog cancelled it. A context manager
    (`Watchdog.guard`): watched inside its block. A class, not a generator-based context
    manager, because a tiny model's every run opens one."""

    __slots__ = ("_deadline", "_dog", "cancel", "done", "fired", "label")

    def __init__(
        self, dog: Watchdog, deadline: float | None, cancel: Callable[[], None], label: str
    ) -> None:
        self.label = label
        self.cancel = cancel
        self.fired = False
        self.done = False
        self._dog = dog
        self._deadline = deadline

    def __enter__(self) -> Self:
        if self._deadline is not None:
            self._dog.watch(self, self._deadline)
        return self

    def __exit__(self, *_: object) -> None:
        if self._deadline is not None:
            self._dog.unwatch(self)


class Watchdog:
    """Calls each guard's ``cancel`` once its deadline passes while the run still goes on."""

    def __init__(self, on_fire: Callable[[str], None] | None = None) -> None:
        """``on_fire(label)`` is told of every cancellation (metrics)."""
        self._on_fire = on_fire
        self._heap: list[tuple[float, int, Guard]] = []
        self._seq = itertools.count()
        # A plain lock (the default is an RLock): taken twice per guarded run, never nested.
        self._cond = threading.Condition(threading.Lock())
        self._closed = False
        self._finished = 0  # finished entries still in the heap
        self._wake_at = float("inf")  # what the thread sleeps until (lock held to change)
        self._last_guard = 0.0  # when the last guard with a deadline opened (monotonic)
        self.fired = 0
        self.wakeups = 0  # times the thread woke (tests: a later deadline must not wake it)
        self._thread = threading.Thread(target=self._loop, name="wasmgate-watchdog", daemon=True)
        self._thread.start()

    def guard(self, deadline: float | None, cancel: Callable[[], None], label: str = "") -> Guard:
        """``with watchdog.guard(...)``: ``cancel()`` is called if ``deadline`` passes inside
        the block (no deadline: nothing is watched)."""
        return Guard(self, deadline, cancel, label)

    def watch(self, entry: Guard, deadline: float) -> None:
        """Start watching ``entry`` (its block was entered)."""
        with self._cond:
            self._last_guard = time.monotonic()
            heapq.heappush(self._heap, (deadline, next(self._seq), entry))
            if deadline < self._wake_at:
                self._wake_at = deadline
                self._cond.notify()

    def unwatch(self, entry: Guard) -> None:
        """Stop watching ``entry`` (its block was left)."""
        with self._cond:
            entry.done = True
            self._finished += 1
            self._prune()

    def _prune(self) -> None:
        """Drop finished entries (lock held) once they are over half the heap: without a
        wake-up per run the heap would otherwise hold every run of the last deadline budget;
        rebuilding at that size costs O(1) per run, amortized."""
        if self._finished > _PRUNE_MIN and 2 * self._finished > len(self._heap):
            self._heap = [item for item in self._heap if not item[2].done]
            heapq.heapify(self._heap)
            self._finished = 0

    def close(self) -> None:
        """Stop the thread; guards still open are no longer watched. Idempotent."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        if self._thread is not threading.current_thread():
            self._thread.join()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _loop(self) -> None:
        with self._cond:
            while not self._closed:
                due = self._due()
                if due is None:
                    self._wake_at = self._next_wake()
                    wait = self._wake_at - time.monotonic() if self._wake_at < _NEVER else None
                    self._cond.wait(wait)
                    self.wakeups += 1
                    continue
                due.fired = True
                self.fired += 1
                self._fire(due)

    def _next_wake(self) -> float:
        """The first deadline, else the next tick while lingering, else never (lock held)."""
        if self._heap:
            return self._heap[0][0]
        now = time.monotonic()
        return now + _TICK_S if now - self._last_guard < _LINGER_S else _NEVER

    def _due(self) -> Guard | None:
        """The first guard whose deadline passed (lock held); finished ones are discarded."""
        now = time.monotonic()
        while self._heap and (self._heap[0][2].done or self._heap[0][0] <= now):
            _, _, entry = heapq.heappop(self._heap)
            if not entry.done:
                return entry
            self._finished -= 1
        return None

    def _fire(self, entry: Guard) -> None:
        try:
            entry.cancel()
        except Exception:
            log.exception("cancelling a run at its deadline failed", extra={"model": entry.label})
        if self._on_fire is not None:
            self._on_fire(entry.label)
        log.info("run stopped at its deadline", extra={"model": entry.label})
