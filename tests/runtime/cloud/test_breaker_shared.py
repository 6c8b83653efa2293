"""One cloud breaker for a gateway's processes (`SharedCell`): two breakers over one file,
as two workers have them (each its own descriptor and mapping), open, probe and close
together; a breaker of its own (the default) is unchanged."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from wasmgate.runtime.cloud.breaker import BreakerState, CircuitBreaker
from wasmgate.runtime.cloud.breaker_shared import SharedCell


@contextmanager
def _pair(path: Path, now: list[float], window: int = 20) -> Iterator[list[CircuitBreaker]]:
    cells = [SharedCell(path, window), SharedCell(path, window)]
    try:
        yield [
            CircuitBreaker(
                failures=3,
                reset_s=30.0,
                window=window,
                failure_rate=0.5,
                clock=lambda: now[0],
                cell=cell,
            )
            for cell in cells
        ]
    finally:
        for cell in cells:
            cell.close()


def test_failures_in_either_process_open_it_for_both(tmp_path: Path) -> None:
    now = [100.0]
    with _pair(tmp_path / "breaker", now) as (a, b):
        a.failure()
        b.failure()
        assert a.state is BreakerState.CLOSED
        a.failure()  # the third of the gateway's: open everywhere
        assert (a.state, b.state) == (BreakerState.OPEN, BreakerState.OPEN)
        assert not b.allow()
        assert (a.opens, b.opens, b.rejected) == (1, 0, 1)  # counted where it happened
        assert b.snapshot().retry_in_s == 30.0


def test_half_open_lets_one_probe_out_for_the_gateway(tmp_path: Path) -> None:
    now = [100.0]
    with _pair(tmp_path / "breaker", now) as (a, b):
        for _ in range(3):
            a.failure()
        now[0] += 30.0
        assert a.allow()  # the probe
        assert not b.allow()  # not a second one from the other process
        a.success()
        assert (a.state, b.state) == (BreakerState.CLOSED, BreakerState.CLOSED)
        assert b.allow()


def test_a_success_elsewhere_resets_the_run_of_failures(tmp_path: Path) -> None:
    now = [100.0]
    with _pair(tmp_path / "breaker", now, window=100) as (a, b):
        a.failure()
        a.failure()
        b.success()
        a.failure()
        assert a.state is BreakerState.CLOSED
        assert a.snapshot().consecutive_failures == 1
        assert round(b.snapshot().failure_rate, 2) == 0.75


def test_the_window_of_outcomes_is_the_gateways(tmp_path: Path) -> None:
    now = [100.0]
    with _pair(tmp_path / "breaker", now, window=4) as (a, b):
        for breaker in (a, b, a, b):  # half of the last 4 fail, never 3 in a row
            breaker.success() if breaker is a else breaker.failure()
        assert a.state is BreakerState.OPEN  # failure_rate 0.5 over the gateway's window


def test_a_new_process_finds_the_state_it_left(tmp_path: Path) -> None:
    now = [100.0]
    with _pair(tmp_path / "breaker", now) as (a, _b):
        for _ in range(3):
            a.failure()
    with _pair(tmp_path / "breaker", now) as (c, _d):  # a replaced worker's successor
        assert c.state is BreakerState.OPEN
