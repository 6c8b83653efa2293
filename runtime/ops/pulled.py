"""Metrics read at scrape time from their owner instead of set on every change.

The admission gates change twice per request (a slot taken, a slot freed); setting two
labelled gauges each time cost a few percent of a tiny model's V2 request (lock, label
lookup, float store, four times). The numbers live in the gates anyway, so the service hands
`Metrics.watch_gates` a pure read of them and the families are built when scraped. The
inline counts (`Metrics.watch_inline`) are read the same way from the service's policies.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

GateFigures = tuple[int, int]
"""(running, waiting) of one name's admission gate."""


class GateGauge(Collector):
    """One gauge family per name, from ``(running, waiting)``: ``field`` 0 or 1 (a counter
    family instead with ``counter``: the inline ``(runs, strikes)``)."""

    def __init__(self, name: str, documentation: str, field: int, *, counter: bool = False) -> None:
        self._name, self._doc, self._field = name, documentation, field
        self._kind = CounterMetricFamily if counter else GaugeMetricFamily
        self._read: Callable[[], Mapping[str, GateFigures]] = dict

    def watch(self, read: Callable[[], Mapping[str, GateFigures]]) -> None:
        """``read`` must not change anything: scraping is observation only."""
        self._read = read

    def collect(self) -> Iterator[Metric]:
        family = self._kind(self._name, self._doc, labels=["name"])
        for name, figures in self._read().items():
            family.add_metric([name], figures[self._field])
        yield family
