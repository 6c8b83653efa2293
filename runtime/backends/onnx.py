"""ONNX Runtime backend: sessions from verified bytes, providers from the device profile.

Providers requested = the profile's ordered list ∩ `onnxruntime.get_available_providers()`
(absent ones are dropped *by us*, with a note, so ORT's own silent drop never happens). After
creation `get_providers()` is compared with the request: a provider that ORT dropped while
creating the session (EP creation error → CPU retry) is reported as a silent CPU fallback.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import onnxruntime as ort

from wasmgate.device_profiles.ort import OnnxRuntimeSettings
from wasmgate.runtime.backends import onnx_support as sup
from wasmgate.runtime.backends.base import (
    Array,
    InferenceBackend,
    LoadedModel,
    LoadOptions,
    ModelSpec,
    check_declared,
    model_bytes,
)
from wasmgate.runtime.errors import BackendError, DeadlineExceeded
from wasmgate.typed import replace

if TYPE_CHECKING:
    from wasmgate.sealed import SealedFile
    from wasmgate.signing.derived import DerivedCache
    from wasmgate.signing.records import VerifiedBlob

log = logging.getLogger(__name__)

_CPU = "CPUExecutionProvider"
_NON_COMPILING = frozenset({_CPU, "AzureExecutionProvider", "XnnpackExecutionProvider"})


class OnnxModel(LoadedModel):
    """A loaded ONNX Runtime session. ``node_placement`` counts nodes per provider."""

    def __init__(
        self,
        session: ort.InferenceSession,
        spec: ModelSpec,
        options: LoadOptions,
        notes: list[str],
    ) -> None:
        super().__init__(
            name=spec.name,
            inputs=sup.tensor_specs(session.get_inputs()),
            outputs=sup.tensor_specs(session.get_outputs()),
            backend="onnx",
            providers=tuple(session.get_providers()),
            precision=options.precision,
            notes=notes,
        )
        self.node_placement = sup.node_placement(session)
        self._session: ort.InferenceSession | None = session
        self._input_names = [s.name for s in self.inputs]
        self._output_names = [s.name for s in self.outputs]
        self._watchdog = options.watchdog
        self._spare_options: list[ort.RunOptions] = []  # list.pop/append: thread-safe

    def _run(self, inputs: Sequence[Array], deadline: float | None) -> list[Array]:
        session = self._session  # ORT's run() is thread-safe; close() only drops the ref
        if session is None:
            raise BackendError(f"{self.name}: model is closed")
        feed = dict(zip(self._input_names, inputs, strict=True))
        if self._watchdog is None or deadline is None:
            return self._call(session, feed, None)
        try:  # a RunOptions per run in flight (its terminate flag is that run's), reused
            run_options = self._spare_options.pop()
        except IndexError:
            run_options = ort.RunOptions()

        def stop() -> None:  # called from the watchdog thread, which ORT allows
            run_options.terminate = True

        guard = self._watchdog.guard(deadline, stop, self.name)
        try:
            with guard:
                return self._call(session, feed, run_options)
        except BackendError as e:
            if guard.fired:  # ORT raises Fail("Exiting due to terminate flag ...")
                raise DeadlineExceeded(f"{self.name}: run stopped at its deadline") from e
            raise
        finally:
            # Past the guard, `fired` is final (the watchdog fires under the lock the guard
            # took to leave): a RunOptions never told to terminate is good for the next run.
            if not guard.fired:
                self._spare_options.append(run_options)

    def _call(
        self,
        session: ort.InferenceSession,
        feed: dict[str, Array],
        run_options: ort.RunOptions | None,
    ) -> list[Array]:
        try:
            outputs: list[Array] = session.run(self._output_names, feed, run_options)
        except Exception as e:
            raise BackendError(f"{self.name}: inference failed: {e}") from e
        return outputs

    def close(self) -> None:
        self._session = None


class OnnxBackend(InferenceBackend):
    """Loads ONNX models into ONNX Runtime sessions configured from a device profile."""

    type_key = "onnx"

    def load(
        self, source: bytes | VerifiedBlob, spec: ModelSpec, options: LoadOptions
    ) -> OnnxModel:
        blob = model_bytes(source)
        settings = options.profile.onnxruntime
        notes: list[str] = []
        bf16 = sup.bf16_mode(options)
        providers = _choose_providers(settings, notes)
        if bf16:
            notes.append(
                "bf16: fp32 model with ARM64 BF16 fast-math GEMM (MatMulAddFusion disabled)"
            )
        session = self._create(blob, spec, options, providers, bf16=bf16, notes=notes)
        model = OnnxModel(session, spec, options, notes)
        _report_fallback(model, [p for p, _ in providers], settings)
        check_declared(spec.name, "inputs", spec.inputs, model.inputs)
        check_declared(spec.name, "outputs", spec.outputs, model.outputs)
        for note in model.notes:
            log.info("model %s: %s", spec.name, note)
        return model

    def _create(
        self,
        model: tuple[bytes, str | None],
        spec: ModelSpec,
        options: LoadOptions,
        providers: list[tuple[str, dict[str, str]]],
        *,
        bf16: bool,
        notes: list[str],
    ) -> ort.InferenceSession:
        """A session of ``model`` (bytes, the store's SHA-256 of them or None), from the
        optimized-graph cache when the profile keeps one."""
        data = model[0]
        settings, extra = _ep_context(model, options, providers, notes)
        found = _optimized_cache(model, providers, options, notes, bf16=bf16)
        if found is None:
            sup.refuse_external_data(data)
            return _session(data, spec, settings, providers, bf16=bf16, optimized=None, extra=extra)
        cache, key, source = found
        name = f"{key}.onnx"
        # None unless this daemon derived it from data; sealed, so ORT reads what was checked.
        cached = cache.load_sealed(name, source, key)
        if cached is None:
            sup.refuse_external_data(data)
        else:
            # No check again: this daemon saved the graph only after these very bytes (the
            # key holds their SHA-256 and the checks' version) passed it.
            notes.append(f"optimized graph loaded from cache {key[:16]}")
            # Offline-optimized graphs load with optimizations off (ORT's documented recipe).
            offline = replace(settings, graph_optimization_level="disable")
            with cached:
                return _session(
                    cached, spec, offline, providers, bf16=bf16, optimized=None, extra=extra
                )
        tmp = cache.folder / f".{key}.{os.getpid()}-{threading.get_ident()}.tmp"
        try:
            session = _session(
                data, spec, settings, providers, bf16=bf16, optimized=tmp, extra=extra
            )
        except BackendError as e:  # some EPs refuse to save optimized graphs: load uncached
            tmp.unlink(missing_ok=True)
            notes.append(f"optimized-model cache disabled for this model: {e}")
            return _session(data, spec, settings, providers, bf16=bf16, optimized=None, extra=extra)
        if tmp.exists():
            sup.save_optimized(cache, name, source, key, tmp)
            notes.append(f"optimized graph saved to cache {key[:16]}")
        return session


def _session(
    data: bytes | SealedFile,
    spec: ModelSpec,
    settings: OnnxRuntimeSettings,
    providers: list[tuple[str, dict[str, str]]],
    *,
    bf16: bool,
    optimized: Path | None,
    extra: dict[str, str],
) -> ort.InferenceSession:
    so = sup.session_options(
        settings,
        bf16=bf16,
        optimized_path=None if optimized is None else str(optimized),
        extra=extra,
    )
    try:
        return sup.open_session(data, so, list(providers))
    except Exception as e:
        names = ", ".join(p for p, _ in providers)
        raise BackendError(
            f"{spec.name}: ONNX Runtime cannot load the model on [{names}]: {e}"
        ) from e


def _ep_context(
    model: tuple[bytes, str | None],
    options: LoadOptions,
    providers: list[tuple[str, dict[str, str]]],
    notes: list[str],
) -> tuple[OnnxRuntimeSettings, dict[str, str]]:
    """`ep.context_enable` caches a compiling EP's graph; from bytes ORT needs a file path,
    which we derive from the cache directory. Without a compiling EP or a cache it is off."""
    settings = options.profile.onnxruntime
    if settings.session_config.get("ep.context_enable") != "1":
        return settings, {}
    config = {k: v for k, v in settings.session_config.items() if not k.startswith("ep.context")}
    stripped = replace(settings, session_config=config)
    if all(p in _NON_COMPILING for p, _ in providers):
        notes.append("ep.context_enable ignored: no compiling execution provider in use")
        return stripped, {}
    if options.cache_dir is None:
        notes.append("ep.context_enable ignored: no cache directory configured")
        return stripped, {}
    folder = options.cache_dir / "ep-context"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{sup.model_sha256(model)}_ctx.onnx"
    return settings, {"ep.context_file_path": str(path)}


def _choose_providers(
    settings: OnnxRuntimeSettings, notes: list[str]
) -> list[tuple[str, dict[str, str]]]:
    available = set(ort.get_available_providers())
    chosen: list[tuple[str, dict[str, str]]] = []
    for provider in settings.providers:
        if provider.name in available:
            chosen.append((provider.name, sup.provider_options(dict(provider.options))))
        else:
            notes.append(f"{provider.name} not in this ONNX Runtime build; skipped")
    if settings.accelerator_required and not chosen:
        wanted = ", ".join(p.name for p in settings.providers)
        raise BackendError(f"accelerator required ({wanted}) but none is available")
    if not chosen:
        notes.append("no listed provider available; running on CPUExecutionProvider")
        chosen.append((_CPU, {}))
    return chosen


def _report_fallback(model: OnnxModel, requested: list[str], settings: OnnxRuntimeSettings) -> None:
    lost = [p for p in requested if p not in model.providers]
    if lost:
        model.notes.append(
            f"silent fallback: requested {', '.join(lost)} but the session runs on "
            f"{', '.join(model.providers)}"
        )
    placement = model.node_placement
    on_cpu, total = placement.get(_CPU, 0), sum(placement.values())
    idle = [p for p in model.providers if p != _CPU and placement and p not in placement]
    if not placement and model.providers != (_CPU,):  # ONNX Runtime 1.23 (Python 3.10)
        model.notes.append(
            f"node placement unknown: ONNX Runtime {ort.__version__} does not report it, so "
            "a provider that takes no nodes cannot be told"
        )
    if idle:
        model.notes.append(
            f"{', '.join(idle)} registered but assigned no nodes: all {total} run on {_CPU}"
        )
    elif on_cpu and on_cpu < total:
        model.notes.append(f"partial offload: {on_cpu} of {total} nodes on {_CPU}")
    if settings.accelerator_required and model.providers == (_CPU,):
        raise BackendError(f"{model.name}: accelerator required but the session runs on CPU only")


def _optimized_cache(
    model: tuple[bytes, str | None],
    providers: list[tuple[str, dict[str, str]]],
    options: LoadOptions,
    notes: list[str],
    *,
    bf16: bool,
) -> tuple[DerivedCache, str, str] | None:
    """(cache, key of the options, sha256 of the model) when the profile caches."""
    settings = options.profile.onnxruntime
    if not settings.optimized_model_cache or options.cache_dir is None:
        return None
    host = options.resolved_host()
    config = sorted(settings.session_config.items())
    extra = f"{host.machine}:{sorted(host.cpu_flags)}:{bf16}:{config}"
    source = sup.model_sha256(model)
    key = sup.cache_key(source, [p for p, _ in providers], settings, extra)
    # Imported here: the backends also run where only the inference stack is installed
    # (the arm64 probe under qemu has no PyNaCl), and only a cache needs wasmgate.signing.
    from wasmgate.signing.derived import DerivedCache  # noqa: PLC0415
    from wasmgate.signing.errors import SigningError  # noqa: PLC0415

    try:
        cache = DerivedCache(options.cache_dir / "ort-optimized")
    except SigningError as e:
        notes.append(f"optimized-model cache off: {e}")
        return None
    return cache, key, source
