"""The worker plan and the caps' shares (`wasmgate.runtime.supervisor.plan`, `.pool`)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from wasmgate.runtime.errors import ConfigError
from wasmgate.runtime.ops.config import settings_from
from wasmgate.runtime.ops.cpus import CpuPlan
from wasmgate.runtime.supervisor.children import Worker
from wasmgate.runtime.supervisor.plan import plan_workers, share_limits, shares

FOUR = CpuPlan(frozenset({0, 1, 2, 3}), frozenset({0, 1, 2, 3}))


def _meminfo(tmp_path: Path, mib: int) -> Path:
    path = tmp_path / "meminfo"
    path.write_text(f"MemTotal: 99999999 kB\nMemAvailable: {mib * 1024} kB\n")
    return path


def test_auto_is_the_affinity_bounded_by_memory(tmp_path: Path) -> None:
    auto = settings_from({"workers": {"count": "auto"}})
    assert plan_workers(auto, FOUR, _meminfo(tmp_path, 8000)).count == 4
    tight = plan_workers(auto, FOUR, _meminfo(tmp_path, 600))
    assert tight.count == 2
    assert "memory for 2" in tight.why
    assert plan_workers(auto, FOUR, _meminfo(tmp_path, 100)).count == 1
    one = CpuPlan(frozenset({3}), frozenset({3}))
    assert plan_workers(auto, one, _meminfo(tmp_path, 8000)).count == 1


def test_a_number_is_taken_as_given_and_one_is_the_default(tmp_path: Path) -> None:
    assert plan_workers(settings_from({}), FOUR).count == 1
    assert plan_workers(settings_from({"workers": {"count": 3}}), FOUR).count == 3


@pytest.mark.parametrize("bad", [0, -1, 65, "two", 1.5, True])
def test_a_bad_count_is_refused_naming_the_key(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"workers\.count"):
        settings_from({"workers": {"count": bad}})


def test_each_worker_has_its_own_cpu_round_the_allowed_set() -> None:
    plan = plan_workers(settings_from({"workers": {"count": 6}}), FOUR)
    assert [min(plan.cpu_of(i)) for i in range(6)] == [3, 2, 1, 0, 3, 2]


@pytest.mark.parametrize(("total", "parts"), [(64, 3), (256, 5), (7, 3), (3, 3), (100, 1)])
def test_the_shares_of_a_cap_add_up_to_the_gateways_cap(total: int, parts: int) -> None:
    """Admission caps hold for the gateway as a whole: never more than the cap in all."""
    got = [shares(total, parts, i) for i in range(parts)]
    assert sum(got) == total
    assert max(got) - min(got) <= 1


def test_share_limits_splits_the_queue_and_keeps_the_rest() -> None:
    """``max_in_flight`` is counted over every process (the slot table), not split."""
    limits = settings_from({"limits": {"max_in_flight": 10, "queue_size": 7, "memory_mb": 99}})
    part = share_limits(limits.limits, 1, 3)
    assert (part.max_in_flight, part.queue_size, part.memory_mb) == (10, 2, 99)
    none = settings_from({"limits": {"queue_size": 0}})
    assert share_limits(none.limits, 1, 3).queue_size == 0


def test_a_worker_that_keeps_crashing_backs_off() -> None:
    worker = Worker(0, "/nonexistent")
    pauses = []
    for _ in range(10):
        worker.started_at = time.monotonic()  # each exit right after its start
        pauses.append(worker.exited(-9))
    assert pauses[0] == 0.0  # the first crash restarts at once
    assert pauses[1:4] == [0.5, 1.0, 2.0]
    assert pauses[-1] == 30.0
    assert worker.state == "crashing"
    assert worker.last_exit == "signal 9"
