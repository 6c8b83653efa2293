"""Epoch deadlines keep to wall-clock time when the ticker runs late (a loaded machine).

The ticker is made late for real: its wait between ticks overshoots by tens of
milliseconds, as on a machine that gives the thread no core (or no GIL) for that long, and
a real endless-loop guest runs under a deadline armed meanwhile.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import wasmtime

from wasmgate.sandbox import SandboxEngine
from wasmgate.sandbox.epoch import MAX_LAG_TICKS

SPIN = '(module (func (export "spin") (loop (br 0))))'
BUDGET_S = 0.005  # the inline budget: 2 ticks of 5 ms
LATE_S = 0.04


class _LateWait:
    """Stands in for the ticker's stop event: its next wait lasts until ``release()``."""

    def __init__(self, stop: threading.Event) -> None:
        self._stop = stop
        self._released = threading.Event()
        self.stalled = threading.Event()

    def wait(self, timeout: float) -> bool:
        if not self._released.is_set():
            self.stalled.set()
            self._released.wait()  # the overshoot; then the ticker catches up at once
            return self._stop.is_set()
        return self._stop.wait(timeout)

    def is_set(self) -> bool:
        return self._stop.is_set()

    def set(self) -> None:
        self.release()
        self._stop.set()

    def release(self) -> None:
        self._released.set()


def _late(engine: SandboxEngine, monkeypatch: pytest.MonkeyPatch) -> _LateWait:
    late = _LateWait(engine.epoch._stop)  # noqa: SLF001 - the wait a loaded machine stretches
    monkeypatch.setattr(engine.epoch, "_stop", late)
    assert late.stalled.wait(1.0)
    return late


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[SandboxEngine]:
    with SandboxEngine(tmp_path / "cache") as e:
        yield e


def _spinner(engine: SandboxEngine, store: wasmtime.Store) -> wasmtime.Func:
    spin = wasmtime.Instance(store, wasmtime.Module(engine.engine, SPIN), []).exports(store)
    func = spin["spin"]
    assert isinstance(func, wasmtime.Func)
    return func


def test_a_deadline_armed_while_the_ticker_is_late_gets_its_whole_time(
    engine: SandboxEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Counted from the epoch alone, the late ticker's catch-up (8 ticks at once) would
    # fire a 2-tick deadline the moment it woke: 0.3 ms into a 5 ms inline budget was
    # seen on a loaded machine, and the tiny adapter lost its inline standing for it.
    store = wasmtime.Store(engine.engine)
    store.set_epoch_deadline(1000)
    spin = _spinner(engine, store)  # compiled and instantiated before the clock starts
    with engine.guest_running():
        late = _late(engine, monkeypatch)
        time.sleep(LATE_S)
        armed = time.monotonic()
        store.set_epoch_deadline(engine.deadline_ticks(BUDGET_S))
        late.release()  # the ticker wakes and catches up 8 ticks at once
        with pytest.raises(wasmtime.Trap):
            spin(store)
        since_armed = time.monotonic() - armed
    assert BUDGET_S <= since_armed < 1.0, since_armed  # its whole time, and then it fires


def test_a_stalled_ticker_cannot_stretch_a_deadline(
    engine: SandboxEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    with engine.guest_running():
        late = _late(engine, monkeypatch)  # a ticker that does not come back
        time.sleep(0.2)  # 40 ticks' worth, past the lag a deadline makes up for
        ticks = engine.deadline_ticks(BUDGET_S)
        late.release()
    assert ticks <= MAX_LAG_TICKS + int(BUDGET_S / engine.ceilings.tick_s) + 1


def test_an_idle_ticker_counts_from_now(engine: SandboxEngine) -> None:
    time.sleep(0.05)  # no guest has run: the ticker goes to sleep at once
    deadline = engine.deadline_ticks(BUDGET_S)
    assert deadline == int(BUDGET_S / engine.ceilings.tick_s) + 1
