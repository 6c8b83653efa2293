"""A circuit breaker for calls to a remote endpoint (the cloud fallback).

Closed: calls flow; it opens after ``failures`` consecutive failures, or when the failure
rate over the last ``window`` calls reaches ``failure_rate``. Open: calls are refused at
once for ``reset_s``. Half-open: up to ``probes`` trial calls; a success closes the
breaker, a failure opens it again for another ``reset_s`` (Nygard's pattern, the defaults
of pybreaker). Only the caller decides what a failure is: timeouts, refused connections
and 5xx/429 answers are; a 4xx answer shows the endpoint is up and counts as a success.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from dataclasses import dataclass

from wasmgate._compat import StrEnum


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(frozen=True)
class BreakerSnapshot:
    """What metrics and the status page show."""

    state: BreakerState
    consecutive_failures: int
    failure_rate: float
    opens: int
    rejected: int
    retry_in_s: float


class CircuitBreaker:
    """Not thread-safe: used from the event loop only."""

    def __init__(
        self,
        *,
        failures: int,
        reset_s: float,
        window: int = 20,
        failure_rate: float = 1.0,
        probes: int = 1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max_failures = failures
        self._reset_s = reset_s
        self._rate = failure_rate
        self._probes = probes
        self._clock = clock
        self._outcomes: collections.deque[bool] = collections.deque(maxlen=window)
        self._state = BreakerState.CLOSED
        self._opened_at = 0.0
        self._consecutive = 0
        self._probing = 0
        self.opens = 0
        self.rejected = 0
        self.on_change: list[Callable[[BreakerState], None]] = []
        """Hooks called with the new state on every transition (e.g. a metrics gauge)."""

    @property
    def state(self) -> BreakerState:
        if self._state is BreakerState.OPEN and self._clock() - self._opened_at >= self._reset_s:
            self._probing = 0
            self._enter(BreakerState.HALF_OPEN)
        return self._state

    def current(self) -> BreakerState:
        """The state a call would meet now, without entering it: a pure read for metrics
        (an open breaker whose reset time passed reads half-open, and stays open inside)."""
        if self._state is BreakerState.OPEN and self._clock() - self._opened_at >= self._reset_s:
            return BreakerState.HALF_OPEN
        return self._state

    def _enter(self, state: BreakerState) -> None:
        self._state = state
        for hook in self.on_change:
            hook(state)

    def allow(self) -> bool:
        """True when a call may go out now (in half-open: it is one of the probes)."""
        state = self.state
        if state is BreakerState.CLOSED:
            return True
        if state is BreakerState.HALF_OPEN and self._probing < self._probes:
            self._probing += 1
            return True
        self.rejected += 1
        return False

    def success(self) -> None:
        if self._state is BreakerState.HALF_OPEN:
            self._close()
            return
        self._consecutive = 0
        self._outcomes.append(True)

    def failure(self) -> None:
        if self._state is BreakerState.HALF_OPEN:
            self._open()
            return
        self._consecutive += 1
        self._outcomes.append(False)
        if self._consecutive >= self._max_failures or self._rate_exceeded():
            self._open()

    def release(self) -> None:
        """The call ended without telling anything (cancelled): free its probe slot."""
        if self._state is BreakerState.HALF_OPEN and self._probing > 0:
            self._probing -= 1

    def _rate_exceeded(self) -> bool:
        full = len(self._outcomes) == self._outcomes.maxlen
        return full and self._failure_rate() >= self._rate

    def _failure_rate(self) -> float:
        if not self._outcomes:
            return 0.0
        return self._outcomes.count(False) / len(self._outcomes)

    def _open(self) -> None:
        self._opened_at = self._clock()
        self._probing = 0
        self.opens += 1
        self._enter(BreakerState.OPEN)

    def _close(self) -> None:
        self._consecutive = 0
        self._probing = 0
        self._outcomes.clear()
        self._enter(BreakerState.CLOSED)

    def snapshot(self) -> BreakerSnapshot:
        state = self.state
        retry = 0.0
        if state is BreakerState.OPEN:
            retry = max(0.0, self._reset_s - (self._clock() - self._opened_at))
        return BreakerSnapshot(
            state, self._consecutive, self._failure_rate(), self.opens, self.rejected, retry
        )
