"""A circuit breaker for calls to a remote endpoint (the cloud fallback).

Closed: calls flow; it opens after ``failures`` consecutive failures, or when the failure
rate over the last ``window`` calls reaches ``failure_rate``. Open: calls are refused at
once for ``reset_s``. Half-open: up to ``probes`` trial calls; a success closes the
breaker, a failure opens it again for another ``reset_s`` (Nygard's pattern, the defaults
of pybreaker). Only the caller decides what a failure is: timeouts, refused connections
and 5xx/429 answers are; a 4xx answer shows the endpoint is up and counts as a success.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol

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


@dataclass
class BreakerFields:
    """The state every call reads and changes (in one process, or in a file that every
    process of the gateway maps: `wasmgate.runtime.cloud.breaker_shared`)."""

    state: BreakerState = BreakerState.CLOSED
    opened_at: float = 0.0
    consecutive: int = 0
    probing: int = 0
    outcomes: list[bool] = field(default_factory=list)
    """The last ``window`` calls' outcomes, oldest first (True: a success)."""


class BreakerCell(Protocol):
    """Where a breaker's fields live: ``held()`` gives them for one step, alone."""

    def held(self) -> AbstractContextManager[BreakerFields]: ...


class LocalCell:
    """The fields in this process's memory (the event loop is the only caller)."""

    def __init__(self) -> None:
        self._fields = BreakerFields()

    @contextlib.contextmanager
    def held(self) -> Iterator[BreakerFields]:
        yield self._fields


class CircuitBreaker:
    """Used from the event loop only; ``cell``: where its state lives (this process's
    memory by default; a gateway's workers share one, so they open and close together)."""

    def __init__(
        self,
        *,
        failures: int,
        reset_s: float,
        window: int = 20,
        failure_rate: float = 1.0,
        probes: int = 1,
        clock: Callable[[], float] = time.monotonic,
        cell: BreakerCell | None = None,
    ) -> None:
        self._max_failures = failures
        self._reset_s = reset_s
        self._rate = failure_rate
        self._probes = probes
        self._clock = clock
        self._window = window
        self._cell: BreakerCell = cell if cell is not None else LocalCell()
        self.opens = 0
        """Times this process opened it (each opening happens in exactly one process)."""
        self.rejected = 0
        self.on_change: list[Callable[[BreakerState], None]] = []
        """Hooks called with the new state on every transition this process makes."""

    @property
    def state(self) -> BreakerState:
        with self._cell.held() as f:
            return self._now(f)

    def _now(self, f: BreakerFields) -> BreakerState:
        """The state, an open breaker whose reset time passed entering half-open."""
        if f.state is BreakerState.OPEN and self._clock() - f.opened_at >= self._reset_s:
            f.probing = 0
            self._enter(f, BreakerState.HALF_OPEN)
        return f.state

    def current(self) -> BreakerState:
        """The state a call would meet now, without entering it: a pure read for metrics
        (an open breaker whose reset time passed reads half-open, and stays open inside)."""
        with self._cell.held() as f:
            if f.state is BreakerState.OPEN and self._clock() - f.opened_at >= self._reset_s:
                return BreakerState.HALF_OPEN
            return f.state

    def _enter(self, f: BreakerFields, state: BreakerState) -> None:
        f.state = state
        for hook in self.on_change:
            hook(state)

    def allow(self) -> bool:
        """True when a call may go out now (in half-open: it is one of the probes)."""
        with self._cell.held() as f:
            state = self._now(f)
            if state is BreakerState.CLOSED:
                return True
            if state is BreakerState.HALF_OPEN and f.probing < self._probes:
                f.probing += 1
                return True
        self.rejected += 1
        return False

    def success(self) -> None:
        with self._cell.held() as f:
            if f.state is BreakerState.HALF_OPEN:
                self._close(f)
                return
            f.consecutive = 0
            self._record(f, ok=True)

    def failure(self) -> None:
        with self._cell.held() as f:
            if f.state is BreakerState.HALF_OPEN:
                self._open(f)
                return
            f.consecutive += 1
            self._record(f, ok=False)
            if f.consecutive >= self._max_failures or self._rate_exceeded(f):
                self._open(f)

    def release(self) -> None:
        """The call ended without telling anything (cancelled): free its probe slot."""
        with self._cell.held() as f:
            if f.state is BreakerState.HALF_OPEN and f.probing > 0:
                f.probing -= 1

    def _record(self, f: BreakerFields, *, ok: bool) -> None:
        f.outcomes.append(ok)
        del f.outcomes[: -self._window]

    def _rate_exceeded(self, f: BreakerFields) -> bool:
        return len(f.outcomes) >= self._window and _failure_rate(f) >= self._rate

    def _open(self, f: BreakerFields) -> None:
        f.opened_at = self._clock()
        f.probing = 0
        self.opens += 1
        self._enter(f, BreakerState.OPEN)

    def _close(self, f: BreakerFields) -> None:
        f.consecutive = 0
        f.probing = 0
        f.outcomes.clear()
        self._enter(f, BreakerState.CLOSED)

    def snapshot(self) -> BreakerSnapshot:
        with self._cell.held() as f:
            state = self._now(f)
            retry = 0.0
            if state is BreakerState.OPEN:
                retry = max(0.0, self._reset_s - (self._clock() - f.opened_at))
            return BreakerSnapshot(
                state, f.consecutive, _failure_rate(f), self.opens, self.rejected, retry
            )


def _failure_rate(f: BreakerFields) -> float:
    if not f.outcomes:
        return 0.0
    return f.outcomes.count(False) / len(f.outcomes)
