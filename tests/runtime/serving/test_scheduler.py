"""`FairPool`: per-tenant queues picked by weighted fair share, a per-tenant worker cap."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, wait

import pytest

from wasmgate.runtime.serving.scheduler import FairPool

WAIT_S = 30.0


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """Jobs that block on this event hold their worker until the test opens it."""
    ev = threading.Event()
    yield ev
    ev.set()


def _order_of(pool: FairPool, jobs: Sequence[tuple[str, float]]) -> list[str]:
    """Submit ``(tenant, weight)`` jobs (each ~2 ms of worker time); the run order."""
    order: list[str] = []
    lock = threading.Lock()

    def job(tenant: str) -> None:
        time.sleep(0.002)
        with lock:
            order.append(tenant)

    futures = [pool.submit_as(t, w, job, t) for t, w in jobs]
    done, _ = wait(futures, WAIT_S)
    assert len(done) == len(futures)
    return order


def test_a_quiet_tenant_is_not_queued_behind_a_flood(gate: threading.Event) -> None:
    with FairPool(1) as pool:
        blocker = pool.submit_as("flood", 1, gate.wait, WAIT_S)
        flood = [pool.submit_as("flood", 1, time.sleep, 0.001) for _ in range(30)]
        quiet = pool.submit_as("quiet", 1, lambda: sum(not f.done() for f in flood))
        gate.set()
        # Submitted after 30 flood jobs, the quiet job runs right after the blocking one.
        assert quiet.result(WAIT_S) >= 29
        assert blocker.result(WAIT_S)


def _running(pool: FairPool, tenant: str, count: int) -> None:
    deadline = time.monotonic() + WAIT_S
    while pool.stats().get(tenant, {}).get("running") != count:
        assert time.monotonic() < deadline, pool.stats()
        time.sleep(0.01)


def test_one_tenant_never_holds_every_worker(gate: threading.Event) -> None:
    with FairPool(3) as pool:
        try:
            flood = [pool.submit_as("flood", 1, gate.wait, WAIT_S) for _ in range(10)]
            _running(pool, "flood", 2)  # all but one worker
            quiet = pool.submit_as("quiet", 1, lambda: "served")
            assert quiet.result(WAIT_S) == "served"  # all flood jobs still blocked
        finally:
            gate.set()
        wait(flood, WAIT_S)


def test_a_recent_tenant_keeps_its_share_free(gate: threading.Event) -> None:
    with FairPool(4) as pool:
        try:
            for tenant in ("quiet", "flood", "slow"):  # all seen lately: a share each
                pool.submit_as(tenant, 1, int).result(WAIT_S)
            flood = [pool.submit_as("flood", 1, gate.wait, WAIT_S) for _ in range(10)]
            slow = [pool.submit_as("slow", 1, gate.wait, WAIT_S) for _ in range(10)]
            _running(pool, "flood", 1)  # 4 workers / 3 tenants seen: one each
            _running(pool, "slow", 1)
            assert pool.submit_as("quiet", 1, lambda: "served").result(WAIT_S) == "served"
            assert pool.stats()["flood"]["running"] == 1
        finally:
            gate.set()
        wait([*flood, *slow], WAIT_S)


def test_the_cap_is_configurable(gate: threading.Event) -> None:
    with FairPool(3, max_tenant_workers=1) as pool:
        try:
            flood = [pool.submit_as("flood", 1, gate.wait, WAIT_S) for _ in range(4)]
            other = pool.submit_as("other", 1, gate.wait, WAIT_S)
            _running(pool, "other", 1)
            assert pool.stats()["flood"]["running"] == 1
        finally:
            gate.set()
        wait([*flood, other], WAIT_S)


def test_tenants_alternate_by_weight(gate: threading.Event) -> None:
    with FairPool(1) as pool:
        pool.submit_as("warm", 1, gate.wait, WAIT_S)  # hold the worker while all are queued
        timer = threading.Timer(0.2, gate.set)
        timer.start()
        order = _order_of(pool, [("a", 3)] * 40 + [("b", 1)] * 40)
        timer.join()
    first = order[:40]
    # Equal job costs, weights 3:1: "a" gets about 3/4 of the first half, never all of it.
    assert 20 <= first.count("a") <= 36, first
    assert first.count("b") >= 4, first


def test_a_cancelled_job_never_runs(gate: threading.Event) -> None:
    ran: list[int] = []
    with FairPool(1) as pool:
        pool.submit_as("t", 1, gate.wait, WAIT_S)
        doomed: Future[None] = pool.submit_as("t", 1, ran.append, 1)
        kept = pool.submit_as("t", 1, ran.append, 2)
        assert doomed.cancel()
        gate.set()
        kept.result(WAIT_S)
    assert ran == [2]


def test_exceptions_reach_the_caller_and_the_worker_survives() -> None:
    with FairPool(1) as pool:
        bad = pool.submit_as("t", 1, int, "x")
        with pytest.raises(ValueError, match="invalid literal"):
            bad.result(WAIT_S)
        assert pool.submit(int, "7").result(WAIT_S) == 7
        assert pool.stats() == {}  # idle tenants keep no state


def test_bad_weight_and_closed_pool_are_refused() -> None:
    pool = FairPool(1)
    with pytest.raises(ValueError, match="weight"):
        pool.submit_as("t", 0, int)
    with pytest.raises(ValueError, match="weight"):
        pool.submit_as("t", float("nan"), int)
    pool.shutdown()
    with pytest.raises(RuntimeError, match="closed"):
        pool.submit(int)


def test_queued_jobs_of_other_tenants_only(gate: threading.Event) -> None:
    # An inline run must not overtake another tenant's queued job, but its own tenant's
    # queue must not keep it off the loop (see FairPool.has_queued).
    with FairPool(1) as pool:
        running = pool.submit_as("a", 1.0, gate.wait, WAIT_S)
        queued = pool.submit_as("a", 1.0, gate.wait, WAIT_S)
        assert pool.has_queued()
        assert not pool.has_queued("a")
        assert pool.has_queued("b")
        other = pool.submit_as("b", 1.0, gate.wait, WAIT_S)
        assert pool.has_queued("a")
        gate.set()
        wait([running, queued, other], WAIT_S)
        assert not pool.has_queued("a")
