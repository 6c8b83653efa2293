"""`StatusCounts`: the page's counts of ended workers stay; gauges do not."""

from __future__ import annotations

from typing import Any

from wasmgate.runtime.supervisor.status_counts import StatusCounts, add_counts


def _doc(requests: int, received: int, in_flight: int) -> dict[str, Any]:
    return {
        "models": [{"kind": "adapter", "name": "a", "requests": requests, "errors": 1,
                    "adapter_calls": None, "sources": {"local": requests}, "p50_ms": 2.0}],
        "errors": {"total": 1, "recent": []},
        "components": {"mqtt": {"received": received, "in_flight": in_flight,
                                "by_status": {"200": received}}},
    }  # fmt: skip


def test_an_ended_workers_counts_are_added_and_its_gauges_are_not() -> None:
    page = StatusCounts()
    page.seen(10, _doc(5, 7, 3))
    page.final(10, _doc(6, 8, 0))
    page.seen(10, _doc(1, 1, 1))  # a scrape after the hand-over changes nothing
    page.ended(10)
    merged = _doc(2, 2, 4)  # what the running processes say now
    add_counts(merged, page.gone(running={11}))
    row = merged["models"][0]
    assert (row["requests"], row["errors"], row["sources"]) == (8, 2, {"local": 8})
    assert row["adapter_calls"] is None
    assert row["p50_ms"] == 2.0
    assert merged["errors"]["total"] == 2
    mqtt = merged["components"]["mqtt"]
    assert (mqtt["received"], mqtt["in_flight"], mqtt["by_status"]) == (10, 4, {"200": 10})


def test_a_replaced_worker_counts_until_it_has_ended_and_then_once() -> None:
    page = StatusCounts()
    page.seen(10, _doc(5, 0, 0))
    leaving = page.gone(running={11})  # rolled out, still finishing
    assert leaving["rows"]["adapter/a"]["requests"] == 5
    page.ended(10)
    page.ended(10)
    assert page.gone(running={11})["rows"]["adapter/a"]["requests"] == 5
