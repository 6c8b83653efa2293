"""The status page's ring of samples: rates from counters, bounded, one per app."""

from __future__ import annotations

from wasmgate.runtime.http.history import History
from wasmgate.runtime.ops.metrics import Metrics


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_rates_per_interval_from_the_counters() -> None:
    metrics, clock = Metrics(), Clock()
    metrics.set_known_names(["digits"], ["digits-mlp"])
    history = History(metrics, interval_s=5, size=4, clock=clock)
    assert history.due()
    for i in range(10):
        error = "Busy" if i < 2 else None
        source = "cloud" if i in (2, 3, 4) else "local"
        metrics.observe_request("adapter", "digits", source, {"sandbox": 0.002}, error)
    metrics.observe_batch("digits-mlp", 4)
    metrics.observe_batch("digits-mlp", 2)
    metrics.watch_gates(lambda: {"digits": (0, 3)})
    clock.now += 5
    history.sample()
    assert not history.due()
    doc = history.as_json()
    assert doc["t"] == [0.0]
    digits = doc["series"]["digits"]
    assert (digits["kind"], digits["rps"], digits["error_pct"]) == ("adapter", [2.0], [20.0])
    assert digits["fallback_pct"] == [30.0]
    assert digits["p50_ms"] == [2.0]
    assert digits["queue"] == [3.0]
    assert doc["series"]["digits-mlp"]["batch"] == [3.0]
    clock.now += 5
    history.sample()  # an idle interval: no rate of errors over zero requests
    digits = history.as_json()["series"]["digits"]
    assert (digits["rps"][-1], digits["error_pct"][-1]) == (0.0, None)


def test_the_ring_is_bounded_and_not_shared() -> None:
    clock = Clock()
    one, two = History(Metrics(), size=3, clock=clock), History(Metrics(), size=3, clock=clock)
    for _ in range(10):
        clock.now += 5
        one.sample()
    assert len(one.as_json()["t"]) == 3
    assert one.as_json()["t"] == [-10.0, -5.0, 0.0]
    assert two.as_json()["t"] == []
