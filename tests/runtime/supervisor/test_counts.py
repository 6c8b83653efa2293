"""`GatewayCounts` without processes: what ended workers counted stays, and no summed
series is exposed below its last value."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from wasmgate.runtime.supervisor.counts import GatewayCounts


def _text(requests: float, in_flight: float) -> str:
    counter = f'# TYPE r_total counter\nr_total{{name="a"}} {requests}\n'
    gauge = f"# TYPE wasmgate_in_flight gauge\nwasmgate_in_flight {in_flight}\n"  # summed
    return counter + gauge


def _values(exposition: bytes) -> dict[str, float]:
    return {
        s.name: s.value
        for family in text_string_to_metric_families(exposition.decode())
        for s in family.samples
    }


def test_an_ended_workers_final_counts_stay_and_its_gauges_go() -> None:
    counts = GatewayCounts()
    assert _values(counts.merge(_text(1, 0), [(10, _text(5, 2)), (11, _text(7, 1))])) == {
        "r_total": 13, "wasmgate_in_flight": 3,
    }  # fmt: skip
    counts.final(10, _text(6, 0))  # it answered one more after the last scrape
    # Leaving: no longer scraped, its final counts stand in until it has ended.
    assert _values(counts.merge(_text(1, 0), [(11, _text(8, 1))])) == {
        "r_total": 15,
        "wasmgate_in_flight": 1,
    }
    counts.ended(10)
    counts.ended(10)  # a second report of the same end adds nothing
    assert _values(counts.merge(_text(1, 0), [(11, _text(8, 1)), (12, _text(0, 0))])) == {
        "r_total": 15, "wasmgate_in_flight": 1,
    }  # fmt: skip


def test_a_killed_worker_holds_the_series_level_until_counted_again() -> None:
    counts = GatewayCounts()
    counts.merge("", [(10, _text(5, 0))])  # the last scrape of it: 5
    counts.ended(10)  # killed after serving 3 more, never scraped
    assert _values(counts.merge("", [(11, _text(0, 0))]))["r_total"] == 5
    # Another process's count that never reached an exposition is not invented either.
    assert _values(counts.merge("", [(11, _text(2, 0))]))["r_total"] == 7
    counts.seen(12, _text(4, 0))
    counts.ended(12)
    assert _values(counts.merge("", [(11, _text(2, 0))]))["r_total"] == 11
