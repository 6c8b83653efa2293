"""The pure rollout rules: wave planning, percent rounding, abort decisions, serials."""

from __future__ import annotations

import pytest

from wasmgate.runtime.fleet.rollout import (
    Outcome,
    RolloutUsageError,
    Size,
    Wanted,
    downgrades_for,
    next_serial,
    parse_size,
    parse_waves,
    plan_waves,
    should_abort,
    with_bundle,
)

A, F, T = Outcome.APPLIED, Outcome.FAILED, Outcome.TIMEOUT


def _names(n: int) -> list[str]:
    return [f"gw-{i:03d}" for i in range(n)]


def _sizes(waves: list[list[str]]) -> list[int]:
    return [len(w) for w in waves]


@pytest.mark.parametrize(
    ("spec", "total", "sizes"),
    [
        ("1,10%,50%,100%", 300, [1, 29, 120, 150]),
        ("1,10%,50%,100%", 3, [1, 1, 1]),  # 10 % of 3 is 1: that wave adds nobody
        ("1,10%,100%", 10, [1, 9]),
        ("10%", 300, [30, 270]),  # a last wave short of 100 % is extended
        ("5", 3, [3]),  # a count above the group is the group
        ("33%,66%", 3, [1, 1, 1]),
        ("0.5%", 300, [2, 298]),
        ("100%", 0, []),
    ],
)
def test_wave_sizes_are_cumulative_and_rounded_up(spec: str, total: int, sizes: list[int]) -> None:
    waves = plan_waves(_names(total), parse_waves(spec))
    assert _sizes(waves) == sizes
    assert [g for w in waves for g in w] == _names(total)  # each gateway once, in name order


def test_waves_take_gateways_in_name_order_and_ignore_duplicates() -> None:
    waves = plan_waves(["c", "a", "b", "a"], parse_waves("1,2"))
    assert waves == [["a"], ["b"], ["c"]]


@pytest.mark.parametrize("bad", ["", "x", "-1", "0", "10%%", "101%", "1.5", "1,,2", "nan", "1e9"])
def test_bad_wave_lists_are_refused_with_the_part(bad: str) -> None:
    with pytest.raises(RolloutUsageError, match="wave"):
        parse_waves(bad)


def test_size_parsing() -> None:
    assert parse_size("10%") == Size(10, percent=True)
    assert parse_size(" 3 ") == Size(3, percent=False)
    assert str(parse_size("12.5%")) == "12.5%"
    with pytest.raises(RolloutUsageError, match="abort"):
        parse_size("ten", what="abort")


def test_abort_needs_min_done_finished() -> None:
    assert not should_abort({"a": F, "b": F}, Size(10, percent=True), min_done=3)
    assert should_abort({"a": F, "b": F, "c": A}, Size(10, percent=True), min_done=3)
    assert not should_abort({}, Size(0, percent=True), min_done=0)


def test_abort_threshold_is_strictly_more_than_the_percent() -> None:
    ten = {f"g{i}": A for i in range(9)} | {"bad": F}  # exactly 10 % failed
    assert not should_abort(ten, Size(10, percent=True), min_done=1)
    assert should_abort(ten | {"bad2": F}, Size(10, percent=True), min_done=1)
    assert should_abort({"a": F}, Size(0, percent=True), min_done=1)


def test_abort_threshold_as_a_count() -> None:
    assert not should_abort({"a": F, "b": A}, Size(1, percent=False), min_done=1)
    assert should_abort({"a": F, "b": F, "c": A}, Size(1, percent=False), min_done=1)


def test_timeouts_count_as_failed() -> None:
    assert should_abort({"a": T, "b": A}, Size(10, percent=True), min_done=2)
    assert should_abort({"a": T, "b": T}, Size(1, percent=False), min_done=1)
    assert not should_abort({"a": A, "b": A}, Size(0, percent=True), min_done=2)


def test_serial_beats_every_report_and_the_clock() -> None:
    assert next_serial(1000, [None, 5, 7]) == 1000
    assert next_serial(1000, [5, 2000]) == 2001
    assert next_serial(1000, []) == 1000


def test_bundle_sets_and_downgrades() -> None:
    old = [Wanted("digits", 1, "r/d@sha256:1"), Wanted("audio", 4, "r/a@sha256:4")]
    new = Wanted("digits", 2, "r/d@sha256:2")
    assert with_bundle(old, new) == [old[1], new]
    assert downgrades_for(old, new) == [("digits", 1)]
    assert downgrades_for([old[1]], new) == []  # not there before: removed, no permission
    assert downgrades_for([Wanted("digits", 3, "x")], new) == []  # rollback goes up: none
