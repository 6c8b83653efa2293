"""``/metrics`` of the whole gateway: the supervisor's own registry plus every worker's,
each request counted once (in the process that served it).

prometheus_client's multiprocess mode would need every collector to be a plain
Counter/Gauge/Histogram writing to mmapped files; the daemon's collectors read live
objects (``set_function``, custom collectors over the store, the MQTT client, the breaker),
so instead the supervisor asks each worker for its exposition over the worker's private
socket and adds the samples up: counters, histograms and summaries are summed per label
set; gauges that count something in every process (requests in flight, queued, memory)
are summed too; every other gauge (a state: the breaker, MQTT, a model's backend, expiry)
is the supervisor's value, or the first worker's when the supervisor has none.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

__all__ = ["merge_expositions"]

_SUMMED_GAUGES = frozenset(
    {
        "wasmgate_in_flight",
        "wasmgate_queue_depth",
        "wasmgate_inline_runs",
        "process_resident_memory_bytes",
        "process_virtual_memory_bytes",
        "process_open_fds",
    }
)
SUMMED_TYPES = frozenset({"counter", "histogram", "summary", "gaugehistogram"})
"""Families whose samples are counts of what each process did: summed over processes."""
Key = tuple[str, tuple[tuple[str, str], ...]]


def merge_expositions(
    own: str,
    workers: Iterable[str],
    *,
    floor: dict[Key, float] | None = None,
    families: Iterable[Metric] = (),
) -> bytes:
    """One exposition from the supervisor's (``own``, first) and the workers' texts (and
    ``families`` already parsed). ``floor``: the last value exposed per summed sample,
    kept and raised here; no summed sample goes below it
    (`wasmgate.runtime.supervisor.counts`)."""
    kept: dict[str, Metric] = {}
    values: dict[str, dict[Key, float]] = {}
    parsed = (f for text in (own, *workers) for f in text_string_to_metric_families(text))
    for family in (*families, *parsed):
        first = kept.setdefault(family.name, family)
        table = values.setdefault(family.name, {})
        summed = first.type in SUMMED_TYPES or first.name in _SUMMED_GAUGES
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue  # a creation time is not a count
            key = (sample.name, tuple(sorted(sample.labels.items())))
            if key not in table:
                table[key] = sample.value
            elif summed:
                table[key] += sample.value
    for name, family in kept.items():
        if floor is not None and family.type in SUMMED_TYPES:
            _raise_to(values[name], floor)
        family.samples = [
            Sample(sample, dict(labels), value) for (sample, labels), value in values[name].items()
        ]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(list(kept.values())))
    return generate_latest(registry)


def _raise_to(table: dict[Key, float], floor: dict[Key, float]) -> None:
    for key, value in table.items():
        table[key] = floor[key] = max(value, floor.get(key, value))


class _Fixed:
    """A collector of metric families already made."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)
