"""`InferenceService`: the one transport-neutral core every bridge (HTTP, MQTT) calls.

Request path: look the adapter up in the registry (a lease keeps its version alive),
admission control (`Gate`), run the adapter in the sandbox on the worker pool (`FairPool`:
each adapter and model is a tenant with the manifest's weight) with the
bundle's models (Batchers) behind wasi-nn ``compute``, map the outcome to an answer or a
`wasmgate.runtime.errors` type, and apply the bundle's cloud fallback policy.
"""

from __future__ import annotations

import time
from typing import Any

from wasmgate.runtime.bundles.table import ServingTable
from wasmgate.runtime.cloud.policy import CloudClient, Deferrer, FallbackRunner
from wasmgate.runtime.errors import (
    BadRequest,
    Busy,
    DaemonError,
    DeadlineExceeded,
    InferenceFailed,
    NotReady,
    PayloadTooLarge,
)
from wasmgate.runtime.field.events import EventSink
from wasmgate.runtime.field.samples import Origin, SampleKeeper
from wasmgate.runtime.ops.config import LimitSettings
from wasmgate.runtime.ops.metrics import Metrics
from wasmgate.runtime.ops.tasks import wake_or_timeout
from wasmgate.runtime.ops.throttle_shared import SharedThrottle
from wasmgate.runtime.served.api import (
    AdapterAnswer,
    AdapterRequest,
    ModelAnswer,
    ModelInfo,
    ModelRequest,
)
from wasmgate.runtime.served.loaded import LoadedBundle, ServedModel
from wasmgate.runtime.serving.execute import execute_adapter, execute_model
from wasmgate.runtime.serving.flight import InFlight
from wasmgate.runtime.serving.inline import (
    ADAPTER_CAP_S,
    CROWDED_ADAPTER_CAP_S,
    InlinePolicy,
)
from wasmgate.runtime.serving.scheduler import FairPool
from wasmgate.runtime.serving.slots import GatewaySlots
from wasmgate.runtime.serving.tenants import Tenants
from wasmgate.sandbox.errors import GuestTrap
from wasmgate.sandbox.models import InputMismatch, validate
from wasmgate.sandbox.spans import record

ADAPTER_CONTENT_TYPE = "application/octet-stream"


class InferenceService:
    """Implements `wasmgate.runtime.served.api.ServiceAPI`."""

    def __init__(
        self,
        table: ServingTable,
        pool: FairPool,
        limits: LimitSettings,
        cloud: CloudClient | None = None,
        metrics: Metrics | None = None,
        *,
        events: EventSink | None = None,
        deferrer: Deferrer | None = None,
        samples: SampleKeeper | None = None,
        inline_adapters: InlinePolicy | None = None,
        slots: GatewaySlots | None = None,
        log_limits: SharedThrottle | None = None,
    ) -> None:
        """``inline_adapters`` decides which adapter runs stay on the event loop (default:
        `InlinePolicy` with ``ADAPTER_CAP_S``; ``InlinePolicy(cap_s=0)``: none).
        ``slots`` and ``log_limits``: the gateway's running slots and log-line limits when
        several processes serve (workers)."""
        self._table = table
        self._events = events
        self._samples = samples
        self._pool = pool
        self._limits = limits
        self._metrics = metrics
        self._model_calls = metrics.model_calls.add if metrics is not None else None
        observe = metrics.observe_fallback if metrics else None
        self._fallback = FallbackRunner(cloud, observe, deferrer, log_limits)
        self._tenants = Tenants(pool, limits, slots)
        if metrics is not None:
            metrics.watch_gates(self._tenants.gate_figures)
        self._inline = InlinePolicy()
        self._inline_adapters = inline_adapters or InlinePolicy(
            ADAPTER_CAP_S, crowded_cap_s=CROWDED_ADAPTER_CAP_S
        )
        if metrics is not None:
            metrics.watch_inline(self.inline_figures)
        self._draining = False
        self._opening = False
        self._flight = InFlight()

    # -- state ------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        return self._table.started and not self._opening and not self._draining

    def opening(self) -> None:
        """Not ready until `opened`, even with every bundle loaded: the daemon still starts
        what the loaded bundles need (MQTT bridge, gRPC, fleet) after the loading."""
        self._opening = True

    def opened(self) -> None:
        self._opening = False

    def start_draining(self) -> None:
        """Refuse new requests with NotReady; requests already admitted finish."""
        self._draining = True

    async def drained(self, wait_s: float) -> bool:
        """Wait until no request is running or queued (at most ``wait_s``); True if so."""
        return await wake_or_timeout(self._flight.idle, wait_s)

    def update_limits(self, limits: LimitSettings) -> None:
        """New daemon-wide ceilings (config reload); apply to later admissions."""
        self._tenants.update_limits(limits)

    def in_flight(self) -> int:
        """Requests inside the service now (queued, running or in fallback)."""
        return self._flight.active

    # -- metadata ---------------------------------------------------------------------

    def adapter_names(self) -> list[str]:
        return self._table.adapter_names()

    def list_models(self) -> list[ModelInfo]:
        return self._table.model_infos()

    def model_info(self, name: str, version: str | None = None) -> ModelInfo:
        return self._table.model_info(name, version)

    # -- adapters ---------------------------------------------------------------------

    async def run_adapter(self, req: AdapterRequest) -> AdapterAnswer:
        self._check_ready()
        bundle = self._table.lease_adapter(req.adapter, req.key, req.version, req.namespace)
        try:
            with self._flight.counted(bundle):
                answer = await self._run_leased(bundle, req)
                if answer.events and self._events is not None and bundle.mqtt_name:
                    # Here, not in a bridge: an HTTP request's events reach MQTT too.
                    await self._events.emit(bundle.mqtt_name, answer.events)
                return answer
        finally:
            self._table.release(bundle)

    async def _run_leased(self, bundle: LoadedBundle, req: AdapterRequest) -> AdapterAnswer:
        admission = self._tenants.capped(bundle.admission)
        deadline = _earliest(req.deadline, time.monotonic() + admission.deadline_s)
        if admission.max_input_bytes is not None and len(req.payload) > admission.max_input_bytes:
            raise PayloadTooLarge(
                f"{req.adapter}: payload of {len(req.payload)} bytes exceeds the bundle's "
                f"limits.max_input_bytes ({admission.max_input_bytes})"
            )
        if bundle.missing_models and self._fallback.enabled(bundle.fallback.on_missing_model):
            reason = f"model {bundle.missing_models[0]!r} is not loaded on this device"
            return await self._fallback.adapter(bundle, req, reason, req.deadline, {})
        timings: dict[str, float] = {}
        tenant = self._tenants.of(f"adapter:{req.adapter}", admission)
        gate = tenant.gate
        try:
            async with gate.admit(deadline) as queued:
                timings["queue"] = queued
                record("admission", queued, tenant.attributes)
                answer = await execute_adapter(
                    tenant.executor, bundle, req, deadline, timings, hold=gate.hold,
                    policy=self._inline_adapters, pool_busy=self._pool.has_queued(tenant.key),
                    crowded=self._flight.active > 1, calls=self._model_calls,
                )  # fmt: skip
        except (Busy, DeadlineExceeded, InferenceFailed) as e:
            self._note_trap(req.adapter, e)
            if not self._fallback.wants(bundle.fallback, e):
                raise
            return await self._fallback.adapter(bundle, req, str(e), req.deadline, timings, e)
        if answer.fallback_reason is None:
            return answer
        final = answer
        if self._fallback.enabled(bundle.fallback.on_adapter_request):
            final = await self._fallback.adapter(
                bundle, req, answer.fallback_reason, req.deadline, timings, local_answer=answer
            )
        if self._samples is not None:  # a hard example: the guest was unsure
            origin = Origin(bundle.name, bundle.version, bundle.mqtt_name or req.adapter,
                            bundle.samples)  # fmt: skip
            await self._samples.consider(origin, req, answer, final)
        return final

    # -- models -----------------------------------------------------------------------

    async def infer_model(self, req: ModelRequest) -> ModelAnswer:
        self._check_ready()
        bundle, served = self._table.lease_model(req.model, req.version, req.key)
        try:
            with self._flight.counted(bundle):
                return await self._infer_leased(bundle, served, req)
        finally:
            self._table.release(bundle)

    async def _infer_leased(
        self, bundle: LoadedBundle, served: ServedModel, req: ModelRequest
    ) -> ModelAnswer:
        if served.handle is None:
            if self._fallback.enabled(bundle.fallback.on_missing_model):
                reason = f"model {served.name!r} is not loaded on this device"
                return await self._fallback.model(bundle, req, reason, {})
            raise NotReady(f"model {served.name!r} is not loaded on this device")
        try:  # the request's one check of its tensors against the model's contract
            ordered = validate(served.inputs, req.inputs, f"model {served.name!r}", text=True)
        except InputMismatch as e:
            raise BadRequest(str(e)) from None
        names = _output_names(served, req.outputs)
        admission = self._tenants.capped(bundle.admission)
        deadline = _earliest(req.deadline, time.monotonic() + admission.deadline_s)
        tenant = self._tenants.of(f"model:{served.name}", admission)
        gate = tenant.gate
        timings: dict[str, float] = {}
        try:
            timings["queue"] = await gate.enter(deadline)
            try:  # `leave` gives the slot back on every way out
                record("admission", timings["queue"], tenant.attributes)
                outputs = await execute_model(
                    tenant.executor, served, ordered, deadline, timings, hold=gate.hold,
                    policy=self._inline, pool_busy=self._pool.has_queued(),
                )  # fmt: skip
            finally:
                gate.leave()
        except (Busy, DeadlineExceeded, InferenceFailed) as e:
            if not self._fallback.wants(bundle.fallback, e):
                raise
            return await self._fallback.model(bundle, req, str(e), timings, e)
        by_name = {spec.name: out for spec, out in zip(served.outputs, outputs, strict=False)}
        return ModelAnswer(
            outputs=by_name if names is None else {n: by_name[n] for n in names},
            source="local",
            version=bundle.version,
            timings=timings,
        )

    # -- helpers ----------------------------------------------------------------------

    def _check_ready(self) -> None:
        if self._draining:
            raise NotReady("the daemon is shutting down")
        if not self._table.started:
            raise NotReady("the daemon is still loading bundles")

    def _note_trap(self, adapter: str, error: DaemonError) -> None:
        cause = error.__cause__
        if self._metrics is not None and isinstance(cause, GuestTrap):
            self._metrics.observe_trap(adapter, cause.cause)

    def inline_figures(self) -> dict[str, tuple[int, int]]:
        """Per adapter and model (``adapter:<name>``, model name): runs made inline on the
        event loop and inline budget strikes so far (see `wasmgate.runtime.serving.inline`)."""
        return self._inline.figures() | self._inline_adapters.figures()


def _earliest(a: float | None, b: float) -> float:
    return b if a is None else min(a, b)


def _output_names(served: ServedModel, wanted: Any) -> list[str] | None:
    """The requested outputs, in the requested order; None: all, in the declared order."""
    if wanted is None:
        return None
    declared = [spec.name for spec in served.outputs]
    unknown = [n for n in wanted if n not in declared]
    if unknown:
        raise BadRequest(f"model {served.name!r} has no output {unknown[0]!r}")
    return list(wanted)


__all__ = ["ADAPTER_CONTENT_TYPE", "DaemonError", "InferenceService"]
