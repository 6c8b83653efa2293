"""A bundle as the daemon serves it: compiled adapter, loaded models, limits, reference count.

A `LoadedBundle` is built by `wasmgate.runtime.bundles.loader` from a verified manifest and is
immutable while it serves. Requests hold a lease (`acquire`/`release`); a bundle replaced
by a newer version is `retire`d and closed by the registry once its last lease is gone, so
requests in flight always finish on the version they started on.
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from wasmgate.runtime.ops import startgc
from wasmgate.sandbox.models import ModelHandle, ModelProvider, TensorSpec
from wasmgate.sandbox.state import AdapterState
from wasmgate.signing.manifest import SamplesGrant
from wasmgate.signing.variables import Variable

log = logging.getLogger("wasmgate.bundles")


class GuestOutcome(Protocol):
    """What the service reads from `wasmgate.sandbox.GuestResult`."""

    status: int
    output: bytes
    fallback_reason: str | None
    events: list[bytes]
    logs: list[str]
    instantiate_s: float
    run_s: float
    infer_s: float
    model_calls: Mapping[str, int]


class RunnableAdapter(Protocol):
    """A compiled adapter (`wasmgate.sandbox.Adapter`): blocking, one fresh instance per run."""

    def run(
        self,
        payload: bytes,
        meta: Mapping[str, str],
        models: ModelProvider,
        limits: Any,
        *,
        state: AdapterState | None = None,
        after: Callable[[Callable[[], None]], object] | None = None,
    ) -> GuestOutcome: ...

    def close(self) -> None:
        """Free what the adapter keeps between runs (its spare instances)."""


class AdmissionLimits(msgspec.Struct, frozen=True):
    """Per-adapter admission: the manifest's values capped by `settings.limits`."""

    max_in_flight: int
    queue_size: int
    deadline_s: float
    max_input_bytes: int | None = None
    weight: int = 1
    """Worker-pool share of each of the bundle's tenants (adapter, models)."""


class FallbackPolicy(msgspec.Struct, frozen=True):
    """When a request of this bundle may go to the cloud (all off unless the manifest allows)."""

    on_error: bool = False
    on_busy: bool = False
    on_deadline: bool = False
    on_missing_model: bool = False
    on_adapter_request: bool = False
    send_payload: bool = False
    defer: bool = False
    """Keep the request and send it when the cloud is back (``fallback.defer``)."""


@dataclass
class ServedModel:
    """One declared model: its handle (a Batcher, or the LoadedModel when batching is off)."""

    name: str
    handle: ModelHandle | None
    """None when the model could not be loaded on this device (``missing_model`` fallback)."""
    batched: bool = False
    """``handle`` is a `wasmgate.runtime.batching.batcher.Batcher` (set by whoever made it:
    this vocabulary sits below the batching package and does not import it)."""
    sha256s: frozenset[str] = frozenset()
    """Digests of every variant file, so ``from_bytes`` accepts only declared models."""
    platform: str = "onnxruntime_onnx"
    max_batch_size: int = 0
    max_queue_delay_us: int = 0
    details: Mapping[str, str] = field(default_factory=dict)
    inputs: Sequence[TensorSpec] = ()
    outputs: Sequence[TensorSpec] = ()
    closers: Sequence[Callable[[], None]] = ()


class BundleModels:
    """The `ModelProvider` a guest of this bundle sees: only the bundle's declared models."""

    def __init__(self, models: Mapping[str, ServedModel]) -> None:
        self._models = dict(models)

    def by_name(self, name: str) -> ModelHandle | None:
        served = self._models.get(name)
        return served.handle if served is not None else None

    def from_bytes(self, data: bytes, encoding: str, target: str) -> ModelHandle | None:
        del encoding, target  # the device profile decides where declared models run
        digest = hashlib.sha256(data).hexdigest()
        for served in self._models.values():
            if digest in served.sha256s:
                return served.handle
        return None


RECENT_LATENCIES = 2048


@dataclass
class Outcomes:
    """What this version answered since it was loaded: the input of a release's gates.

    Updated on the event loop only (the service records each request when it ends).
    """

    requests: int = 0
    errors: int = 0
    latencies: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_LATENCIES))

    def record(self, seconds: float, failed: bool) -> None:
        self.requests += 1
        self.errors += failed
        self.latencies.append(seconds)

    def p99(self) -> float | None:
        """p99 of the recent latencies (seconds), None before the first request."""
        if not self.latencies:
            return None
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


@dataclass
class LoadedBundle:
    """One version of one bundle, ready to serve."""

    name: str
    version: int
    digest: str
    adapter_name: str | None
    adapter: RunnableAdapter | None
    models: dict[str, ServedModel]
    admission: AdmissionLimits
    fallback: FallbackPolicy
    guest_limits: Callable[[float | None], Any] = lambda _remaining: None
    """Builds the sandbox `GuestLimits` for a request with ``remaining`` seconds left."""
    params: Mapping[str, str] = field(default_factory=dict)
    """What the guest reads as ``param.<name>``: signed params with operator variables
    applied; replaced as a whole when a variable changes (`runtime.bundles.variables`)."""
    answer_content_type: str = "application/octet-stream"
    installed_at: float = 0.0
    adapter_sha256: str | None = None
    """The adapter's wasm digest (its compiled-module cache entry is kept while installed)."""
    expires: float = math.inf
    """The manifest's ``expires`` as POSIX time (the registry's expiry watch wakes then)."""
    mqtt_name: str | None = None
    """The adapter's name on the MQTT topic tree (``routes.mqtt``); None without adapter."""
    outcomes: Outcomes = field(default_factory=Outcomes)
    state: AdapterState | None = None
    """The adapter's key-value namespace when the manifest grants ``[state]``."""
    declared: Mapping[str, Variable] = field(default_factory=dict)
    """The params an operator may override (``[variables]``); ``params`` holds the result."""
    signed_params: Mapping[str, bool | int | float | str] = field(default_factory=dict)
    """The manifest's ``[params]`` as signed (typed)."""
    samples: SamplesGrant | None = None
    """The manifest's ``[samples]`` (hard examples it allows keeping); None: none."""
    calls_batched: bool = field(init=False, default=False)
    """True when one of ``models`` is served through a `Batcher`: the adapter then never runs
    inline (`guest_run.may_inline`). Set once here, as ``models`` is fixed once built, instead
    of being looked up on every adapter request."""
    _refs: int = 0
    _retired: bool = False
    _closed: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.calls_batched = any(m.batched for m in self.models.values())

    @property
    def provider(self) -> BundleModels:
        return BundleModels(self.models)

    @property
    def missing_models(self) -> list[str]:
        return [m.name for m in self.models.values() if m.handle is None]

    def acquire(self) -> None:
        with self._lock:
            self._refs += 1

    def release(self) -> bool:
        """Drop a lease; True when the bundle is retired and this was the last lease."""
        with self._lock:
            self._refs -= 1
            return self._retired and self._refs == 0 and not self._closed

    def retire(self) -> bool:
        """Mark as replaced; True when nothing holds it (the caller closes it now)."""
        with self._lock:
            self._retired = True
            return self._refs == 0 and not self._closed

    @property
    def in_flight(self) -> int:
        return self._refs

    @property
    def closed(self) -> bool:
        """True once unloaded (a replaced version after its last request finished)."""
        return self._closed

    def close(self) -> None:
        """Unload the models (stops batchers, frees sessions) and the adapter's spare
        instances. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self.adapter is not None:
            self.adapter.close()
        for served in self.models.values():
            for closer in served.closers:
                try:
                    closer()
                except Exception:
                    log.exception("closing model failed", extra={"model": served.name})
        startgc.thaw()  # a bundle loaded at start was frozen with it: let its cycles go
        log.info("unloaded", extra={"bundle": self.name, "version": self.version})
