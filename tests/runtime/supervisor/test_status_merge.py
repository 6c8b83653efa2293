"""`merge_status`'s traffic chart: the gateway's, summed over its processes point by point
from the newest (each samples on its own clock, every ``interval_s``)."""

from __future__ import annotations

from typing import Any

from wasmgate.runtime.supervisor.status_merge import merge_history, merge_status

FIELDS = ("rps", "p50_ms", "p99_ms", "error_pct", "fallback_pct", "batch", "queue")


def series(kind: str = "adapter", **values: list[Any]) -> dict[str, Any]:
    size = len(next(iter(values.values())))
    return {"kind": kind, **{f: values.get(f, [None] * size) for f in FIELDS}}


def test_rates_add_up_and_percentages_are_weighted_by_rate() -> None:
    own = {"interval_s": 5.0, "t": [-10.0, -5.0, 0.0],
           "series": {"digits": series(rps=[0.0, 0.0, 0.0])}}  # fmt: skip
    w0 = {
        "t": [-5.0, 0.0],
        "series": {
            "digits": series(
                rps=[10.0, 30.0], error_pct=[10.0, 0.0], p99_ms=[5.0, 9.0], queue=[1.0, 2.0]
            )
        },
    }
    w1 = {
        "t": [-10.0, -5.0, 0.0],
        "series": {
            "digits": series(
                rps=[1.0, 30.0, 10.0], error_pct=[None, 0.0, 50.0], p99_ms=[7.0, 4.0, 3.0]
            )
        },
    }
    merged = merge_history(own, [w0, w1])["series"]["digits"]
    assert merged["rps"] == [1.0, 40.0, 40.0]  # the worker that started later: none before
    assert merged["error_pct"] == [None, 2.5, 12.5]  # (10*10 + 0*30) / 40, (0*30 + 50*10) / 40
    assert merged["p99_ms"] == [7.0, 4.0, 9.0]  # the busiest process's, never a sum
    assert merged["queue"] == [None, 1.0, 2.0]


def test_a_name_only_the_workers_served_appears_and_nothing_else_changes() -> None:
    own = {"t": [-5.0, 0.0], "series": {}}
    w0 = {"t": [0.0], "series": {"double": series("model", rps=[3.0], batch=[2.0])}}
    merged = merge_history(own, [w0, None, {"series": None}])["series"]
    assert merged == {"double": {"kind": "model", "rps": [None, 3.0], "p50_ms": [None, None],
                                 "p99_ms": [None, None], "error_pct": [None, None],
                                 "fallback_pct": [None, None], "batch": [None, 2.0],
                                 "queue": [None, None]}}  # fmt: skip


def test_merge_status_merges_the_chart() -> None:
    own = {"models": [], "history": {"t": [0.0], "series": {}}}
    doc = merge_status(own, [{"history": {"t": [0.0], "series": {"d": series(rps=[2.0])}}}])
    assert doc["history"]["series"]["d"]["rps"] == [2.0]


def cloud(state: str, requests: int, error_at: float, opens: int) -> dict[str, Any]:
    breaker = {"state": state, "consecutive_failures": 0, "failure_rate": 0.0,
               "opens": opens, "rejected": 1, "retry_in_s": 0.0}  # fmt: skip
    return {"url": "http://c", "breaker": breaker, "requests": requests, "failures": 1,
            "in_flight": 0, "last_error": f"e{error_at}", "last_error_at": error_at}  # fmt: skip


def test_the_cloud_card_shows_the_most_open_breaker_and_attention_follows() -> None:
    """Each process has its own breaker: one worker's open breaker is the gateway's news."""
    own = {"models": [], "components": {"cloud": cloud("closed", 0, 0.0, 0)}, "attention": []}
    workers = [{"components": {"cloud": cloud("open", 40, 5.0, 2)}},
               {"components": {"cloud": cloud("closed", 30, 9.0, 1)}}]  # fmt: skip
    doc = merge_status(own, workers)
    card = doc["components"]["cloud"]
    assert card["breaker"]["state"] == "open"
    assert (card["breaker"]["opens"], card["breaker"]["rejected"]) == (3, 3)
    assert (card["requests"], card["failures"], card["last_error"]) == (70, 3, "e9.0")
    assert card["workers"] == [{"breaker": "open"}, {"breaker": "closed"}]
    assert doc["attention"] == [{"what": "cloud", "message": "cloud fallback breaker open"}]
