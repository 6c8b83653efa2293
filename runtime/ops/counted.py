"""Figures kept as plain numbers by their owner and turned into families at scrape time.

- `ModelCalls`: runs of each model that adapters started through wasi-nn. They are not
  requests (``wasmgate_requests_total`` counts what arrived at a bridge, and one adapter
  request may run several models, or none), so they get their own family,
  ``wasmgate_model_calls_total{model}``. The service adds each adapter run's counts when the
  run ends, on the event loop: one dict update per model the run called, no lock.
- `MqttGauge`: the MQTT connection (``wasmgate_mqtt_connected`` 0/1, and the connects and
  connection losses since start), read from the client's own state when scraped. Without
  MQTT (no ``mqtt.host``) the families are absent, not 0: nothing is disconnected.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


class ModelCalls(Collector):
    """``wasmgate_model_calls_total{model}``; `add` only from the event loop."""

    def __init__(self) -> None:
        self._calls: dict[str, int] = {}

    def add(self, calls: Mapping[str, int]) -> None:
        """One adapter run's model calls (name -> count)."""
        counts = self._calls
        for name, n in calls.items():
            counts[name] = counts.get(name, 0) + n

    def counts(self) -> dict[str, int]:
        """A copy (``dict(d)`` copies under the GIL in one step: safe from any thread)."""
        return dict(self._calls)

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "wasmgate_model_calls",
            "Runs of a model started by adapters through wasi-nn (not requests).",
            labels=["model"],
        )
        for name, n in sorted(self.counts().items()):
            family.add_metric([name], n)
        yield family


class MqttFigures(Protocol):
    """What `MqttGauge` reads (`wasmgate.runtime.mqtt.connection.ClientState`)."""

    @property
    def connected(self) -> bool: ...
    @property
    def connects(self) -> int: ...
    @property
    def disconnects(self) -> int: ...


class MqttGauge(Collector):
    """The MQTT connection's families; empty until `watch` is given the client's state."""

    def __init__(self) -> None:
        self._read: Callable[[], MqttFigures] | None = None

    def watch(self, read: Callable[[], MqttFigures]) -> None:
        """``read`` must not change anything: scraping is observation only."""
        self._read = read

    def collect(self) -> Iterator[Metric]:
        if self._read is None:
            return
        state = self._read()
        yield GaugeMetricFamily(
            "wasmgate_mqtt_connected", "1 while connected to the MQTT broker, else 0.",
            value=1 if state.connected else 0,
        )  # fmt: skip
        yield CounterMetricFamily(
            "wasmgate_mqtt_connects", "Connections to the MQTT broker accepted (CONNACK).",
            value=state.connects,
        )  # fmt: skip
        yield CounterMetricFamily(
            "wasmgate_mqtt_disconnects", "Connections to the MQTT broker lost (not at stop).",
            value=state.disconnects,
        )  # fmt: skip
