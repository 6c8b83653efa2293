"""Spare instances: never used twice, their request's deadline and limits, closed with the
adapter, and none for adapters whose start code calls the host."""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import msgspec
import pytest

from tests.sandbox.test_malicious import DEADLINE, MARGIN, module
from wasmgate.sandbox import (
    Adapter,
    Ceilings,
    GuestDeadlineExceeded,
    GuestLimits,
    GuestResourceExhausted,
    SandboxEngine,
)
from wasmgate.sandbox.adapter import NoModels

MIB = 1024 * 1024
LONG = GuestLimits(deadline_s=10.0, memory_bytes=16 * MIB)
SHORT = GuestLimits(deadline_s=DEADLINE, memory_bytes=16 * MIB)


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[SandboxEngine]:
    """An engine of its own: one spare per adapter, so each test knows which one it gets."""
    with SandboxEngine(tmp_path / "cache", Ceilings(spare_instances=1)) as eng:
        yield eng


@pytest.fixture
def probe(engine: SandboxEngine, wat_guest: Callable[[str], bytes]) -> Iterator[Adapter]:
    adapter = engine.compile(wat_guest("spare_probe"), name="spare_probe")
    yield adapter
    adapter.close()


def op(mode: int, arg: int = 0) -> bytes:
    return struct.pack("<BI", mode, arg)


def state_seen(adapter: Adapter, limits: GuestLimits = LONG) -> tuple[int, int, bool]:
    """(global, heap word) the request found, and whether it ran on a spare."""
    res = adapter.run(op(0), {}, NoModels(), limits)
    g, heap = struct.unpack("<II", res.output)
    return g, heap, res.from_spare


def test_a_spare_is_never_used_twice(engine: SandboxEngine, probe: Adapter) -> None:
    assert state_seen(probe) == (0, 0, False)  # no spare before the first request
    for _ in range(5):
        assert engine.settle()
        assert probe.spares_ready == 1
        assert state_seen(probe) == (0, 0, True)  # request N's global and heap are gone
    assert probe.spares_taken == 5


def test_two_spares_refill_in_one_wake_and_never_hand_out_a_used_instance(
    tmp_path: Path, wat_guest: Callable[[str], bytes]
) -> None:
    """With two spares a used instance waits, open, while a spare is still ready; the
    request that takes the last one has both closed and both spares rebuilt. No request
    ever gets a waiting instance, and closing the adapter closes them."""
    with SandboxEngine(tmp_path / "cache", Ceilings(spare_instances=2)) as eng:
        adapter = eng.compile(wat_guest("spare_probe"), name="spare_probe")
        assert state_seen(adapter) == (0, 0, False)
        waiting = []
        for _ in range(6):
            assert eng.settle()
            assert state_seen(adapter) == (0, 0, True)  # nothing of the earlier requests
            waiting.append(adapter.spares_waiting)
        assert waiting == [1, 0] * 3  # one wake-up per two requests
        adapter.close()
        assert (adapter.spares_waiting, adapter.spares_ready) == (0, 0)


def test_concurrent_requests_each_get_an_unused_instance(probe: Adapter) -> None:
    with ThreadPoolExecutor(max_workers=6) as pool:
        seen = list(pool.map(lambda _: state_seen(probe)[:2], range(120)))
    assert set(seen) == {(0, 0)}


def test_a_spare_runs_under_its_requests_short_deadline(
    engine: SandboxEngine, probe: Adapter
) -> None:
    probe.run(op(0), {}, NoModels(), LONG)  # the spare is built under a 10 s deadline
    assert engine.settle()
    start = time.monotonic()
    with pytest.raises(GuestDeadlineExceeded):
        probe.run(op(2), {}, NoModels(), SHORT)  # an endless loop: only the epoch stops it
    assert time.monotonic() - start < DEADLINE + MARGIN
    assert probe.spares_taken == 1


def test_a_spare_gets_its_own_full_deadline_when_taken(
    engine: SandboxEngine, probe: Adapter, wat_guest: Callable[[str], bytes]
) -> None:
    probe.run(op(0), {}, NoModels(), SHORT)  # the spare is built under a 200 ms deadline
    assert engine.settle()
    spinner = engine.compile(wat_guest("spare_probe"), name="spinner")
    stopped: list[BaseException] = []

    def spin() -> None:  # the epoch advances well past the spare's build-time deadline
        try:
            spinner.run(op(2), {}, NoModels(), msgspec.structs.replace(SHORT, deadline_s=0.5))
        except GuestDeadlineExceeded as e:
            stopped.append(e)

    thread = threading.Thread(target=spin)
    thread.start()
    thread.join()
    spinner.close()
    assert len(stopped) == 1
    res = probe.run(op(1, 300), {}, NoModels(), GuestLimits(deadline_s=5.0, memory_bytes=16 * MIB))
    assert (res.output, res.from_spare) == (b"slept", True)


def test_a_spare_has_its_requests_memory_limit(engine: SandboxEngine, probe: Adapter) -> None:
    big = GuestLimits(deadline_s=10.0, memory_bytes=64 * MIB)
    grow = op(3, 300)  # + 300 pages (18.75 MiB): above 16 MiB, within 64 MiB
    probe.run(op(0), {}, NoModels(), LONG)
    assert engine.settle()
    res = probe.run(grow, {}, NoModels(), LONG)  # a spare built for 16 MiB
    assert (struct.unpack("<i", res.output)[0], res.from_spare) == (-1, True)
    assert engine.settle()
    res = probe.run(grow, {}, NoModels(), big)  # the 16 MiB spare is not for this request
    assert (struct.unpack("<i", res.output)[0], res.from_spare) == (1, False)
    assert engine.settle()
    res = probe.run(grow, {}, NoModels(), big)  # the next spare was built for 64 MiB
    assert (struct.unpack("<i", res.output)[0], res.from_spare) == (1, True)


def test_a_spare_has_its_requests_fuel(tmp_path: Path, wat_guest: Callable[[str], bytes]) -> None:
    lim = GuestLimits(deadline_s=10.0, fuel=1_000_000)
    with SandboxEngine(tmp_path / "f", Ceilings(fuel_enabled=True)) as eng:
        adapter = eng.compile(wat_guest("spare_probe"))
        adapter.run(op(0), {}, NoModels(), lim)
        assert eng.settle()
        with pytest.raises(GuestResourceExhausted) as info:
            adapter.run(op(2), {}, NoModels(), lim)
        assert (info.value.cause, adapter.spares_taken) == ("fuel", 1)
        adapter.close()


def test_closing_the_adapter_discards_its_spares(engine: SandboxEngine, probe: Adapter) -> None:
    probe.run(op(0), {}, NoModels(), LONG)
    assert engine.settle()
    assert probe.spares_ready == 1
    probe.close()
    assert probe.spares_ready == 0
    assert state_seen(probe) == (0, 0, False)  # still serves, on its own path
    assert engine.settle()
    assert probe.spares_ready == 0  # and makes no new spare
    probe.close()  # idempotent


def test_a_spare_built_while_closing_is_closed(engine: SandboxEngine, probe: Adapter) -> None:
    probe.run(op(0), {}, NoModels(), LONG)  # queues the build; close races with it
    probe.close()
    assert engine.settle()
    assert probe.spares_ready == 0


def test_start_code_that_calls_the_host_gets_no_spares(engine: SandboxEngine) -> None:
    init = """(import "wasmgate" "log" (func $log (param i32 i32 i32)))
      (data (i32.const 100) "init")
      (func (export "_initialize") (call $log (i32.const 1) (i32.const 100) (i32.const 4)))"""
    adapter = engine.compile(module(init), name="chatty")
    for _ in range(3):
        res = adapter.run(b"", {}, NoModels(), LONG)
        assert (res.logs, res.from_spare) == (["info: init"], False)  # its log, every time
        assert engine.settle()
    assert (adapter.spares_ready, adapter.spares_taken) == (0, 0)


def test_start_code_that_sleeps_gets_no_spares(engine: SandboxEngine) -> None:
    sleep = """(import "wasi_snapshot_preview1" "poll_oneoff"
        (func $poll (param i32 i32 i32 i32) (result i32)))
      (func (export "_initialize")  ;; 1 ms on the monotonic clock: a request's deadline
        (i32.store (i32.const 272) (i32.const 1))
        (i64.store (i32.const 280) (i64.const 1000000))
        (drop (call $poll (i32.const 256) (i32.const 512) (i32.const 1) (i32.const 600))))"""
    adapter = engine.compile(module(sleep), name="sleepy")
    for _ in range(3):
        assert adapter.run(b"", {}, NoModels(), LONG).from_spare is False
        assert engine.settle()
    assert adapter.spares_ready == 0


def test_a_failed_instantiation_asks_for_no_spare(engine: SandboxEngine) -> None:
    spin = '(func (export "_initialize") (loop $l (br $l)))'
    adapter = engine.compile(module(spin), name="spin")
    for _ in range(2):
        with pytest.raises(GuestDeadlineExceeded):
            adapter.run(b"", {}, NoModels(), SHORT)
        assert engine.settle()
        assert adapter.spares_ready == 0  # no background spinning for a broken start


def test_spares_do_not_outlive_the_engine(
    tmp_path: Path, wat_guest: Callable[[str], bytes]
) -> None:
    eng = SandboxEngine(tmp_path / "e")
    adapter = eng.compile(wat_guest("spare_probe"))
    adapter.run(op(0), {}, NoModels(), LONG)
    eng.close()  # the background thread stops; queued work is dropped
    assert state_seen(adapter)[:2] == (0, 0)  # runs still work, used stores close inline
    adapter.close()
    assert adapter.spares_ready == 0


def test_after_runs_the_recycling_where_the_caller_says(
    engine: SandboxEngine, probe: Adapter
) -> None:
    """A caller on an event loop hands its own ``call_soon``: nothing happens on the
    background thread, and the next spare exists only once the caller ran the job."""
    jobs: list[Callable[[], None]] = []
    res = probe.run(op(0), {}, NoModels(), LONG, after=jobs.append)
    assert (res.from_spare, len(jobs)) == (False, 1)
    assert engine.settle()
    assert probe.spares_ready == 0  # the background thread was not asked
    jobs.pop()()
    assert probe.spares_ready == 1
    assert state_seen(probe, LONG) == (0, 0, True)  # the spare it built is unused
