"""The service's tenants: one admission `Gate` and one pool `TenantExecutor` per adapter and
per directly served model, under the manifest's limits capped by the daemon's.

Looked up once per request, so everything derived from a manifest's limits is built once
per distinct value and kept: the capped limits, the gate (resized only when its limits
change), the tenant's executor and the span attributes of its admission stage. A request
of a tiny model then pays one dict lookup here, not a rebuild.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from wasmgate.runtime.ops.config import LimitSettings
from wasmgate.runtime.served.loaded import AdmissionLimits
from wasmgate.runtime.serving.admission import Gate
from wasmgate.runtime.serving.scheduler import FairPool, TenantExecutor
from wasmgate.runtime.serving.slots import GatewaySlots

_MAX_DISTINCT_LIMITS = 4096


@dataclass
class Tenant:
    """One adapter's (``adapter:<name>``) or model's (``model:<name>``) admission and share."""

    key: str
    gate: Gate
    executor: TenantExecutor
    admission: AdmissionLimits
    attributes: Mapping[str, str]
    """Span attributes of its admission stage."""


class Tenants:
    """Gates and executors by tenant key (owned by the service; event loop only)."""

    def __init__(
        self, pool: FairPool, limits: LimitSettings, slots: GatewaySlots | None = None
    ) -> None:
        self._pool = pool
        self._slots = slots
        self._limits = limits
        self._tenants: dict[str, Tenant] = {}
        self._capped: dict[AdmissionLimits, AdmissionLimits] = {}

    def update_limits(self, limits: LimitSettings) -> None:
        """New daemon-wide ceilings (config reload): later admissions are capped by them."""
        self._limits = limits
        self._capped.clear()  # new capped objects: each tenant is resized on its next request

    def capped(self, wanted: AdmissionLimits) -> AdmissionLimits:
        """A manifest's limits under the daemon's ceilings (one object per distinct value)."""
        capped = self._capped.get(wanted)
        if capped is None:
            if len(self._capped) >= _MAX_DISTINCT_LIMITS:
                self._capped.clear()
            capped = self._capped[wanted] = self._cap(wanted)
        return capped

    def of(self, key: str, admission: AdmissionLimits) -> Tenant:
        """``key``'s tenant under ``admission`` (a `capped` value): made on first use, its
        gate resized and executor re-weighted when the limits changed (a new version)."""
        tenant = self._tenants.get(key)
        if tenant is None:
            gate = Gate(key, admission.max_in_flight, admission.queue_size, slots=self._slots)
            tenant = Tenant(key, gate, self._pool.for_tenant(key, admission.weight), admission,
                            {"wasmgate.tenant": key})  # fmt: skip
            self._tenants[key] = tenant
        elif tenant.admission is not admission:
            tenant.gate.resize(admission.max_in_flight, admission.queue_size)
            tenant.executor = self._pool.for_tenant(key, admission.weight)
            tenant.admission = admission
        return tenant

    def gate_figures(self) -> dict[str, tuple[int, int]]:
        """``(running, waiting)`` per adapter/model name (metrics read it at scrape time)."""
        out: dict[str, tuple[int, int]] = {}
        for key, tenant in list(self._tenants.items()):
            stats = tenant.gate.stats
            out[key.partition(":")[2]] = (stats.running, stats.waiting)  # one namespace
        return out

    def _cap(self, wanted: AdmissionLimits) -> AdmissionLimits:
        lim = self._limits
        return AdmissionLimits(
            max_in_flight=min(wanted.max_in_flight, lim.max_in_flight),
            queue_size=min(wanted.queue_size, lim.queue_size),
            deadline_s=min(wanted.deadline_s, lim.deadline_ms / 1000),
            max_input_bytes=wanted.max_input_bytes,
            weight=min(wanted.weight, lim.max_weight),
        )
