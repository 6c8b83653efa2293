"""The deployment report (format ``wasmgate-deployment/1``) and the fleet metrics.

One `Reporter` builds the report from the reconciler's state and the registry (bundles
serving that the fleet did not install are ``local``), and hands it to every reader:
``GET /v1/status`` (``components.fleet``), ``GET /v1/desired``, the status page, the
retained ``<prefix>/<gateway>/deployment`` topic (see `attach`) and Prometheus:

- ``wasmgate_fleet_serial``: serial of the last accepted document (0: none yet);
- ``wasmgate_fleet_bundle_state{bundle,state}``: 1 for each bundle's current state;
- ``wasmgate_fleet_refusals_total{error}``: documents refused, by error class.

``time`` is when the report last changed (not when it was sent), so a republished report
on reconnect is byte-identical and readers can tell a stale gateway from a busy one.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import asdict
from datetime import datetime
from typing import Any

import msgspec
from prometheus_client import Counter, Gauge

from wasmgate._compat import UTC
from wasmgate.runtime.bundles.registry import Registry
from wasmgate.runtime.fleet.reconcile import Reconciler, Refusal
from wasmgate.runtime.ops.metrics import Metrics

log = logging.getLogger("wasmgate.fleet")

FORMAT = "wasmgate-deployment/1"
Publish = Callable[[bytes], None]


class FleetMetrics:
    """The fleet's series, registered in the daemon's own `Metrics` registry."""

    def __init__(self, metrics: Metrics) -> None:
        reg = metrics.registry
        self.serial = Gauge(
            "wasmgate_fleet_serial", "Serial of the last accepted fleet document (0: none).",
            registry=reg,
        )  # fmt: skip
        self.bundle_state = Gauge(
            "wasmgate_fleet_bundle_state", "1 for the fleet state of each bundle.",
            ["bundle", "state"], registry=reg,
        )  # fmt: skip
        self.refusals = Counter(
            "wasmgate_fleet_refusals", "Fleet documents refused, by error class.",
            ["error"], registry=reg,
        )  # fmt: skip

    def update(self, report: dict[str, Any]) -> None:
        self.serial.set(report["serial"] or 0)
        self.bundle_state.clear()
        for name, entry in report["bundles"].items():
            self.bundle_state.labels(name, entry["state"]).set(1)

    def refused(self, refusal: Refusal) -> None:
        self.refusals.labels(refusal.error.partition(":")[0]).inc()


class Reporter:
    """Builds the report and pushes it to the publisher on every change."""

    def __init__(
        self,
        reconciler: Reconciler,
        registry: Registry,
        gateway: str,
        groups: tuple[str, ...],
        metrics: Metrics | None = None,
    ) -> None:
        self._reconciler = reconciler
        self._registry = registry
        self._gateway = gateway
        self._groups = groups
        self._metrics = FleetMetrics(metrics) if metrics is not None else None
        self._publish: Publish | None = None
        self._last: dict[str, Any] | None = None
        self._time = _now()
        reconciler.on_change.append(self.changed)
        registry.on_change.append(self.changed)  # local installs and removals show at once
        if self._metrics is not None:
            reconciler.on_refusal.append(self._metrics.refused)
        self.changed()

    def close(self) -> None:
        for hooks in (self._reconciler.on_change, self._registry.on_change):
            if self.changed in hooks:
                hooks.remove(self.changed)

    def document(self) -> dict[str, Any]:
        """The report as FLEET.md defines it (JSON-ready)."""
        rec = self._reconciler
        refused = msgspec.structs.asdict(rec.refused) if rec.refused is not None else None
        failure = rec.last_failure
        last_failure = msgspec.structs.asdict(failure) if failure is not None else None
        return {
            "format": FORMAT,
            "gateway": self._gateway,
            "groups": list(self._groups),
            "serial": rec.record.serial,
            "state": rec.state,
            "reason": rec.reason,
            "refused": refused,
            "last_failure": last_failure,
            "bundles": self._bundles(),
            "time": self._time,
        }

    def _bundles(self) -> dict[str, dict[str, Any]]:
        rec = self._reconciler
        out = {name: asdict(outcome) for name, outcome in rec.bundles.items()}
        owned = set(rec.record.owned)
        for name, slot in sorted(self._registry.table.slots().items()):
            if name not in out and name not in owned:
                current = slot.current
                out[name] = {
                    "version": current.version,
                    "digest": current.digest,
                    "state": "local",
                    "error": None,
                    "staged_percent": None,
                    "downgraded_from": None,
                }
        return dict(sorted(out.items()))

    def payload(self) -> bytes:
        return json.dumps(self.document(), separators=(",", ":")).encode()

    def attach(self, publish: Publish | None) -> None:
        """Send every changed report to ``publish`` (None: stop); sends the current one now."""
        self._publish = publish
        if publish is not None:
            publish(self.payload())

    def changed(self) -> None:
        report = {**self.document(), "time": None}
        if report == self._last:
            return
        self._last = report
        self._time = _now()
        if self._metrics is not None:
            self._metrics.update(report)
        if self._publish is not None:
            try:
                self._publish(self.payload())
            except Exception:
                log.exception("publishing the deployment report failed")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
