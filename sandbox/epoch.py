"""The engine's epoch ticker, and epoch deadlines that keep to wall-clock time.

Invariants:
- Exactly one ticker thread increments the engine's epoch every ``tick_s`` of wall-clock
  time while a guest runs (`guest_running`) and for ``LINGER_S`` after the last one ended,
  then sleeps until the next: an idle daemon's ticker takes the GIL 0 times a second
  instead of 1/tick_s, and a busy one is not woken (a futex wake and a GIL hand-off,
  mid-request) for every request. ``close()`` stops and joins it.
- On a loaded machine a wait overshoots (the ticker waits for a core, then for the GIL:
  one switch interval is 5 ms, a whole tick). The ticker then increments the epoch for
  the time that really passed, so a deadline of N ticks stays N x tick_s of wall-clock time.
- `deadline_ticks` counts a deadline from the wall-clock time the current epoch stands
  for (the last tick), not from the epoch itself. Counting from the epoch alone, a
  ticker running late by L caught up L of a guest's deadline the moment it woke: a 5 ms
  inline budget (2 ticks) fired 0.3 ms into a run on a loaded machine, which sent a
  tiny adapter back to the worker pool for hundreds of requests. A deadline now fires
  no earlier than its seconds after it was armed, and at most one tick late; the lag it
  counts is capped (``MAX_LAG_TICKS``) so a stuck ticker cannot stretch deadlines.
"""

from __future__ import annotations

import threading
import time

import wasmtime

__all__ = ["LINGER_S", "MAX_LAG_TICKS", "EpochTicker"]

LINGER_S = 0.1
"""How long the ticker keeps ticking after the last guest ended (20 ticks of 5 ms)."""
MAX_LAG_TICKS = 20
"""The most ticker lag a new deadline makes up for (100 ms at 5 ms ticks)."""


class EpochTicker:
    """Owns the ticker thread of one ``wasmtime.Engine`` (see the module invariants)."""

    def __init__(self, engine: wasmtime.Engine, tick_s: float) -> None:
        """Start the ticker thread (idle until the first guest runs)."""
        self._engine = engine
        self.tick_s = tick_s
        self.ticks = 0
        """Epoch increments so far (observability: an idle engine does not tick)."""
        self._stop = threading.Event()
        self._guests = 0
        self._cv = threading.Condition()
        self._left_at = 0.0  # when the last guest ended (monotonic)
        self._idle = False  # the ticker waits for a guest (set under _cv)
        self._epoch_at = time.monotonic()  # the wall-clock time the current epoch stands for
        self.running = _GuestRunning(self)
        """Held around any guest code (instantiation, calls): the epoch ticks meanwhile."""
        self._thread = threading.Thread(target=self._tick, name="wasmgate-epoch", daemon=True)
        self._thread.start()

    def deadline_ticks(self, seconds: float) -> int:
        """Ticks from the current epoch until ``seconds`` from now, rounded up to a tick."""
        # Read without the lock: ``_epoch_at`` is written before ``_idle`` is cleared (and
        # after the increments it stands for), so a reader never sees a stale time with a
        # working ticker, at worst ticks it just counted (the deadline that much later).
        lag = 0.0 if self._idle else time.monotonic() - self._epoch_at
        lag = min(max(lag, 0.0), MAX_LAG_TICKS * self.tick_s)
        return int((lag + seconds) / self.tick_s) + 1

    def _tick(self) -> None:
        tick_s = self.tick_s
        while True:
            with self._cv:
                if self._guests == 0 and time.monotonic() - self._left_at >= LINGER_S:
                    self._idle = True
                    while self._guests == 0 and not self._stop.is_set():
                        self._cv.wait()
                    self._epoch_at = time.monotonic()  # an idle pause is no guest's time
                    self._idle = False
            if self._stop.wait(tick_s):
                return
            due = max(1, int((time.monotonic() - self._epoch_at) / tick_s))
            for _ in range(due):
                self._engine.increment_epoch()
            self.ticks += due
            self._epoch_at += due * tick_s

    def enter(self) -> None:
        with self._cv:
            self._guests += 1
            if self._idle:
                self._cv.notify()

    def leave(self) -> None:
        with self._cv:
            self._guests -= 1
            if self._guests == 0:
                self._left_at = time.monotonic()

    @property
    def closed(self) -> bool:
        return self._stop.is_set()

    def close(self) -> None:
        """Stop and join the ticker thread (idempotent)."""
        self._stop.set()
        with self._cv:
            self._cv.notify()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()


class _GuestRunning:
    """``EpochTicker.running``: a plain context manager, not a generator (it runs per request)."""

    __slots__ = ("_ticker",)

    def __init__(self, ticker: EpochTicker) -> None:
        self._ticker = ticker

    def __enter__(self) -> None:
        self._ticker.enter()

    def __exit__(self, *exc: object) -> None:
        self._ticker.leave()
