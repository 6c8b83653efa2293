"""From a verified manifest to a `LoadedBundle`: compile the adapter, load the models, selftest.

Everything here is blocking (wasmtime compilation, ONNX Runtime session creation): the
registry runs it off the event loop. Any failure raises `BundleRejected` naming the step;
models already loaded for the failed bundle are closed again. The targets are checked
before and the selftest runs after (`acceptance.py`).
Adapter and model bytes are re-hashed by the store right before each compile or backend
load; a model goes to its backend as the store's `VerifiedBlob` (bytes and the digest just
computed from them), so the backend keys its derived cache without hashing it again.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from wasmgate.device_profiles import DeviceProfile
from wasmgate.runtime.backends import LoadOptions, ModelSpec, create_backend, negotiate
from wasmgate.runtime.backends.base import InferenceBackend, LoadedModel
from wasmgate.runtime.backends.watchdog import Watchdog
from wasmgate.runtime.backends.weight_share import WeightShare
from wasmgate.runtime.batching.batcher import Batcher, BatchHook, capped
from wasmgate.runtime.batching.dispatch import BatchDispatcher
from wasmgate.runtime.bundles.acceptance import check_targets, selftest
from wasmgate.runtime.bundles.kv import StateDb, TenantState
from wasmgate.runtime.bundles.variables import Variables, render
from wasmgate.runtime.errors import BundleRejected, DaemonError
from wasmgate.runtime.ops.config import LimitSettings
from wasmgate.runtime.ops.cpus import CpuPlan
from wasmgate.runtime.served.loaded import (
    AdmissionLimits,
    FallbackPolicy,
    LoadedBundle,
    ServedModel,
)
from wasmgate.sandbox import Ceilings, GuestLimits, SandboxEngine, SandboxError, TensorSpec
from wasmgate.sandbox.limits import ManifestLimits
from wasmgate.signing.manifest import Manifest, ModelEntry, TensorSig
from wasmgate.signing.records import VerifiedBlob

log = logging.getLogger("wasmgate.loader")
_OCTETS = "application/octet-stream"
_PLATFORMS = {"onnx": "onnxruntime_onnx", "tflite": "tensorflow_lite"}


class BlobSource(Protocol):
    """The part of `wasmgate.signing.BundleStore` the loader reads."""

    def verify_blob_again(self, sha256: str) -> bytes: ...
    def verified_blob(self, sha256: str) -> VerifiedBlob: ...


@dataclass
class LoaderDeps:
    """What loading needs from the daemon (built by the composition root)."""

    engine: SandboxEngine
    profile: DeviceProfile
    limits: LimitSettings
    cache_dir: Path | None = None
    batch_hook: Callable[[str], BatchHook | None] = lambda _model: None
    backends: dict[str, InferenceBackend] = field(default_factory=dict)
    dispatcher: BatchDispatcher | None = None
    """The daemon's shared batch threads (None: each batcher gets its own)."""
    watchdog: Watchdog | None = None
    """Stops backend runs at their deadline (None: runs are never stopped)."""
    state: StateDb | None = None
    """Adapter state (``[state]`` grants); None: every grant is ignored (not granted)."""
    variables: Variables | None = None
    """Operator variables; None: every variable keeps its manifest default."""
    cpus: CpuPlan | None = None
    """Where native inference threads may run (None: wherever the loading thread may)."""
    weights: WeightShare | None = None
    """The gateway's shared model weights (None: a single process keeps its own)."""

    _backend_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def backend(self, fmt: str) -> InferenceBackend:
        # Bundles load on several threads at the start: without the lock two of them could
        # each create a backend of a format, and one would never be closed.
        with self._backend_lock:
            if fmt not in self.backends:
                self.backends[fmt] = create_backend(fmt)
            return self.backends[fmt]

    def close(self) -> None:
        for backend in self.backends.values():
            backend.close()
        self.backends.clear()


def load_bundle(
    deps: LoaderDeps, blobs: BlobSource, manifest: Manifest, digest: str
) -> LoadedBundle:
    """Build a ready `LoadedBundle` (blocking); `BundleRejected` on any failure."""
    check_targets(manifest, deps.profile)
    models: dict[str, ServedModel] = {}
    bundle: LoadedBundle | None = None
    try:
        for entry in manifest.models:
            models[entry.name] = _load_model(deps, blobs, manifest, entry)
        bundle = _assemble(deps, blobs, manifest, digest, models)
        selftest(bundle, manifest)
    except BaseException:
        if bundle is not None and bundle.adapter is not None:
            bundle.adapter.close()  # its selftest may have left spare instances
        for served in models.values():
            for closer in served.closers:
                closer()
        raise
    return bundle


def _specs(sigs: Sequence[TensorSig]) -> list[TensorSpec]:
    return [TensorSpec(s.name, s.datatype, tuple(s.shape)) for s in sigs]


def _load_model(
    deps: LoaderDeps, blobs: BlobSource, manifest: Manifest, entry: ModelEntry
) -> ServedModel:
    digests = {v: manifest.file_digest(f) for v, f in entry.variants.items()}
    base = ServedModel(
        name=entry.name,
        handle=None,
        sha256s=frozenset(digests.values()),
        platform=_PLATFORMS.get(entry.format, entry.format),
        inputs=_specs(entry.inputs),
        outputs=_specs(entry.outputs),
    )
    spec = ModelSpec(entry.name, base.inputs or None, base.outputs or None)
    variants: dict[str, Callable[[], VerifiedBlob]] = {
        v: functools.partial(blobs.verified_blob, sha) for v, sha in digests.items()
    }
    options = LoadOptions(
        profile=deps.profile, cache_dir=deps.cache_dir, watchdog=deps.watchdog,
        weights=deps.weights,
    )  # fmt: skip
    try:
        # A backend's own thread pools start with the session: on every allowed CPU.
        with deps.cpus.native() if deps.cpus is not None else nullcontext():
            negotiated = negotiate(deps.backend(entry.format), spec, variants, options)
    except DaemonError as e:
        if manifest.fallback.allowed and manifest.fallback.on_missing_model:
            log.warning("model not loaded, cloud fallback will answer", extra={"error": str(e)})
            base.details = {"error": str(e)}
            return base
        raise BundleRejected(f"{manifest.label()}: model {entry.name!r}: {e}") from e
    return _serve(deps, base, entry, negotiated.model, negotiated.summary())


def _serve(
    deps: LoaderDeps, base: ServedModel, entry: ModelEntry, model: LoadedModel, summary: str
) -> ServedModel:
    size, delay = capped(
        entry.batching.max_batch_size, entry.batching.max_queue_delay_us, deps.profile.batching
    )
    size = min(size, deps.limits.max_batch_size)
    base.inputs, base.outputs = list(model.inputs), list(model.outputs)
    base.details = {
        "backend": model.backend,
        "provider": ",".join(model.providers),
        "precision": model.precision,
        "notes": "; ".join(model.notes),
        "placement": model.placement,
        "summary": summary,
    }
    if size > 1 and model.dynamic_batch:
        queue = max(1, deps.limits.queue_size)
        hook = deps.batch_hook(entry.name)
        batcher = Batcher(model, size, delay, queue, on_batch=hook, dispatcher=deps.dispatcher)
        base.handle, base.max_batch_size, base.max_queue_delay_us = batcher, size, delay
        base.batched = True
        base.closers = (batcher.close, model.close)
    else:
        base.handle, base.closers = model, (model.close,)
        base.max_batch_size = size if model.dynamic_batch else 0
    return base


def _assemble(
    deps: LoaderDeps,
    blobs: BlobSource,
    manifest: Manifest,
    digest: str,
    models: dict[str, ServedModel],
) -> LoadedBundle:
    adapter, sha = None, None
    if manifest.adapter is not None:
        sha = manifest.file_digest(manifest.adapter.file)
        try:
            compiled = deps.engine.compile(blobs.verify_blob_again(sha), sha, name=manifest.name)
            adapter = compiled.with_mode(manifest.adapter.mode)
        except SandboxError as e:
            raise BundleRejected(f"{manifest.label()}: adapter: {e}") from e
    lim = manifest.limits
    engine = deps.engine
    return LoadedBundle(
        name=manifest.name,
        version=manifest.version,
        digest=digest,
        adapter_name=manifest.routes.http if adapter is not None else None,
        mqtt_name=manifest.routes.mqtt if adapter is not None else None,
        adapter=adapter,
        models=models,
        admission=AdmissionLimits(
            lim.max_in_flight,
            lim.queue_size,
            lim.deadline_ms / 1000,
            lim.max_input_bytes,
            lim.weight,
        ),
        fallback=_policy(manifest),
        guest_limits=_GuestLimits(manifest.limits, engine),
        params=_params(deps, manifest),
        declared=dict(manifest.variables or {}),
        signed_params=dict(manifest.params),
        samples=manifest.samples,
        answer_content_type=str(
            manifest.params.get("answer_content_type", "application/octet-stream")
        ),
        installed_at=time.time(),
        adapter_sha256=sha,
        expires=manifest.expires.timestamp(),
        state=_state(deps, manifest) if adapter is not None else None,
    )


def _state(deps: LoaderDeps, manifest: Manifest) -> TenantState | None:
    grant = manifest.state
    if grant is None or deps.state is None:
        return None
    # The namespace is the bundle's signed name: a new version keeps its state, and the
    # trust store decides who may sign that name.
    return deps.state.tenant(manifest.name, grant.max_bytes, grant.max_keys)


class _GuestLimits:
    """A bundle's guest limits for a request with ``left`` seconds: the manifest's limits
    capped by the engine's ceilings are built once per ceilings (a SIGHUP reload replaces
    them, so they are read per request), not per request (five dataclass copies)."""

    def __init__(self, limits: ManifestLimits, engine: SandboxEngine) -> None:
        self._limits, self._engine = limits, engine
        self._ceilings: Ceilings | None = None
        self._base: GuestLimits | None = None

    def __call__(self, left: float | None) -> GuestLimits:
        ceilings = self._engine.ceilings
        base = self._base
        if base is None or ceilings is not self._ceilings:
            base = GuestLimits.from_manifest(self._limits, ceilings)
            self._base, self._ceilings = base, ceilings
        return base.within(left)


def _params(deps: LoaderDeps, manifest: Manifest) -> dict[str, str]:
    declared = manifest.variables or {}
    if deps.variables is None:
        return {k: render(v) for k, v in (manifest.params | manifest.variable_defaults()).items()}
    return deps.variables.params(manifest.name, manifest.params, declared)


def _policy(manifest: Manifest) -> FallbackPolicy:
    fb = manifest.fallback
    on = fb.allowed
    return FallbackPolicy(
        on_error=on and fb.on_error,
        on_busy=on and fb.on_busy,
        on_deadline=on and fb.on_deadline,
        on_missing_model=on and fb.on_missing_model,
        on_adapter_request=on and fb.on_adapter_request,
        send_payload=on and fb.send_payload,
        defer=on and fb.send_payload and fb.defer,  # kept to be sent: it must be allowed out
    )
