"""Deadlines stop native work: the watchdog terminates real ONNX Runtime runs at their deadline."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest

from tests.runtime.backends.conftest import X86
from tests.runtime.bundlekit import slow_model
from wasmgate.device_profiles import DeviceProfile
from wasmgate.runtime.backends import LoadOptions, ModelSpec
from wasmgate.runtime.backends.onnx import OnnxBackend, OnnxModel
from wasmgate.runtime.backends.watchdog import Watchdog
from wasmgate.runtime.errors import DeadlineExceeded

X = np.ones((2, 4), np.float32)


@pytest.fixture
def fired() -> list[str]:
    return []


@pytest.fixture
def watchdog(fired: list[str]) -> Iterator[Watchdog]:
    with Watchdog(on_fire=fired.append) as dog:
        yield dog


def _slow(profile: DeviceProfile, watchdog: Watchdog | None, iterations: int) -> OnnxModel:
    options = LoadOptions(profile, host=X86, watchdog=watchdog)
    return OnnxBackend().load(slow_model(iterations), ModelSpec("slow"), options)


def test_a_run_past_its_deadline_is_terminated(
    cpu_profile: DeviceProfile, watchdog: Watchdog, fired: list[str]
) -> None:
    # 1M iterations would run for an hour: only the terminate flag can end it in time.
    model = _slow(cpu_profile, watchdog, 1_000_000)
    with pytest.raises(DeadlineExceeded, match="slow: run stopped at its deadline"):
        model.infer([X], deadline=time.monotonic() + 0.3)
    assert watchdog.fired == 1
    assert fired == ["slow"]


def test_runs_within_their_deadline_are_left_alone(
    cpu_profile: DeviceProfile, watchdog: Watchdog
) -> None:
    model = _slow(cpu_profile, watchdog, 2)
    for _ in range(20):
        np.testing.assert_array_equal(model.infer([X], deadline=time.monotonic() + 60)[0], X)
    np.testing.assert_array_equal(model.infer([X])[0], X)  # no deadline: not watched
    assert watchdog.fired == 0


def test_a_stopped_run_leaves_nothing_for_the_next(
    cpu_profile: DeviceProfile, watchdog: Watchdog
) -> None:
    # Run options are reused between runs: one told to terminate must never be, or every
    # later run of the model would fail at once.
    model = _slow(cpu_profile, watchdog, 5_000)
    for _ in range(3):
        with pytest.raises(DeadlineExceeded, match="stopped at its deadline"):
            model.infer([X], deadline=time.monotonic() + 0.01)
        for _ in range(2):
            np.testing.assert_array_equal(model.infer([X], deadline=time.monotonic() + 60)[0], X)
    assert watchdog.fired == 3


def test_a_run_never_starts_past_its_deadline(
    cpu_profile: DeviceProfile, watchdog: Watchdog
) -> None:
    model = _slow(cpu_profile, watchdog, 1_000_000)
    with pytest.raises(DeadlineExceeded, match="before the run started"):
        model.infer([X], deadline=time.monotonic() - 0.001)
    assert watchdog.fired == 0


def test_concurrent_runs_stop_each_at_its_own_deadline(
    cpu_profile: DeviceProfile, watchdog: Watchdog
) -> None:
    slow = _slow(cpu_profile, watchdog, 1_000_000)
    quick = _slow(cpu_profile, watchdog, 2)
    errors: list[BaseException] = []

    def doomed() -> None:
        try:
            slow.infer([X], deadline=time.monotonic() + 0.2)
        except DeadlineExceeded as e:
            errors.append(e)

    threads = [threading.Thread(target=doomed) for _ in range(3)]
    for t in threads:
        t.start()
    # Meanwhile a patient caller of another model is never cancelled.
    np.testing.assert_array_equal(quick.infer([X], deadline=time.monotonic() + 120)[0], X)
    for t in threads:
        t.join(120)
    assert len(errors) == 3
    assert watchdog.fired == 3


def test_without_a_watchdog_a_run_goes_on(cpu_profile: DeviceProfile) -> None:
    model = _slow(cpu_profile, None, 20)
    np.testing.assert_array_equal(model.infer([X], deadline=time.monotonic() + 60)[0], X)


def test_closed_watchdog_joins_its_thread() -> None:
    before = threading.active_count()
    dog = Watchdog()
    assert threading.active_count() == before + 1
    dog.close()
    dog.close()  # idempotent
    assert threading.active_count() == before


def _settle(dog: Watchdog) -> int:
    """The wake-up count once the thread has gone back to sleep."""
    seen = -1
    while seen != dog.wakeups:
        seen = dog.wakeups
        time.sleep(0.05)
    return seen


def test_later_deadlines_do_not_wake_the_thread_an_earlier_one_does(watchdog: Watchdog) -> None:
    """A guard wakes the watchdog only for a deadline earlier than the one it sleeps until,
    and that earlier one still fires on time while the later ones stay open."""
    cancelled: list[str] = []
    far = time.monotonic() + 60
    with watchdog.guard(far, lambda: cancelled.append("first")):
        before = _settle(watchdog)
        for i in range(500):  # tiny runs: each guard opened and closed, deadlines growing
            with watchdog.guard(far + i, lambda: cancelled.append("later")):
                pass
        assert _settle(watchdog) == before  # no wake-up for any of them
        near = threading.Event()
        with watchdog.guard(time.monotonic() + 0.05, near.set):
            assert near.wait(10), "the earlier deadline never fired"
    assert cancelled == []
    assert watchdog.fired == 1


def test_finished_guards_leave_the_heap(watchdog: Watchdog) -> None:
    """Without a wake-up to prune it, the heap still holds only runs in flight."""
    far = time.monotonic() + 60
    with watchdog.guard(far, lambda: None):
        for i in range(1000):
            with watchdog.guard(far + i, lambda: None):
                pass
        assert len(watchdog._heap) <= 2 * 64 + 2  # noqa: SLF001 - the bound is the point
    assert len(watchdog._heap) <= 64 + 1  # noqa: SLF001


def test_steady_short_deadlines_do_not_wake_the_thread_per_guard(watchdog: Watchdog) -> None:
    """Guards of 5 ms deadlines opened back to back (an inline adapter's model calls): the
    thread keeps its tick instead of being woken by each guard, and still fires on time."""
    _settle(watchdog)
    before = watchdog.wakeups
    started = time.monotonic()
    guards = 0
    while time.monotonic() - started < 0.3:
        with watchdog.guard(time.monotonic() + 0.005, lambda: None):
            guards += 1
        time.sleep(0.0002)
    woke = watchdog.wakeups - before
    # One wake-up per 5 ms tick (plus slack for a loaded machine), not one per guard.
    assert guards > 300
    assert woke < guards / 3, (woke, guards)
    near = threading.Event()
    with watchdog.guard(time.monotonic() + 0.05, near.set):
        assert near.wait(10), "a deadline no longer fired"
