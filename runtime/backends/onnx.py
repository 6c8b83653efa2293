"""ONNX Runtime backend: sessions from verified bytes, on the providers the device profile
names (chosen and reported by `onnx_providers`), optimized graphs cached per host."""

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
from wasmgate.runtime.backends.onnx_openvino import blob_cache, check_device
from wasmgate.runtime.backends.onnx_plugins import PluginChoice, choose_plugins
from wasmgate.runtime.backends.onnx_providers import (
    choose_providers,
    ep_context,
    placement_text,
    report_fallback,
)
from wasmgate.runtime.backends.onnx_shared import Held, shared_session
from wasmgate.runtime.errors import BackendError, DeadlineExceeded
from wasmgate.typed import replace

if TYPE_CHECKING:
    from wasmgate.sealed import SealedFile
    from wasmgate.signing.derived import DerivedCache
    from wasmgate.signing.records import VerifiedBlob

log = logging.getLogger(__name__)


class OnnxModel(LoadedModel):
    """A loaded ONNX Runtime session. ``node_placement`` counts nodes per provider."""

    def __init__(
        self,
        session: ort.InferenceSession,
        spec: ModelSpec,
        options: LoadOptions,
        notes: list[str],
        held: Held | None = None,
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
        self.placement = placement_text(self.node_placement)
        # One tuple: a run in flight keeps the session and the weights it reads in place
        # (`held`) alive together, whenever close() drops them.
        self._live: tuple[ort.InferenceSession, Held | None] | None = (session, held)
        self._input_names = [s.name for s in self.inputs]
        self._output_names = [s.name for s in self.outputs]
        self._watchdog = options.watchdog
        self._spare_options: list[ort.RunOptions] = []  # list.pop/append: thread-safe

    def _run(self, inputs: Sequence[Array], deadline: float | None) -> list[Array]:
        live = self._live  # ORT's run() is thread-safe; close() only drops the ref
        if live is None:
            raise BackendError(f"{self.name}: model is closed")
        session = live[0]
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
        live, self._live = self._live, None
        if live is not None and live[1] is not None:
            live[1].release()  # the supervisor's files; the mapping goes with the last run


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
        plugin = choose_plugins(settings, notes)
        providers = choose_providers(settings, notes, plugin=plugin is not None)
        check_device(providers, notes)
        if bf16:
            notes.append(
                "bf16: fp32 model with ARM64 BF16 fast-math GEMM (MatMulAddFusion disabled)"
            )
        held: Held | None = None
        with blob_cache(blob, options, providers, notes) as run_on:
            shared = None if plugin else _shared(blob, spec, options, (run_on, bf16), notes)
            if shared is None:
                eps = (run_on, plugin)
                session = self._create(blob, spec, options, eps, bf16=bf16, notes=notes)
            else:
                session, held = shared
        try:
            model = OnnxModel(session, spec, options, notes, held=held)
        except BaseException:
            if held is not None:
                held.release()
            raise
        try:  # a model refused here lets its shared weights go at once
            requested = [p for p, _ in providers] + (plugin.names if plugin else [])
            report_fallback(model, requested, settings)
            check_declared(spec.name, "inputs", spec.inputs, model.inputs)
            check_declared(spec.name, "outputs", spec.outputs, model.outputs)
        except BaseException:
            model.close()
            raise
        for note in model.notes:
            log.info("model %s: %s", spec.name, note)
        return model

    def _create(
        self,
        model: tuple[bytes, str | None],
        spec: ModelSpec,
        options: LoadOptions,
        eps: tuple[list[tuple[str, dict[str, str]]], PluginChoice | None],
        *,
        bf16: bool,
        notes: list[str],
    ) -> ort.InferenceSession:
        """A session of ``model`` (bytes, the store's SHA-256 of them or None), from the
        optimized-graph cache when the profile keeps one; ``eps``: the providers list and
        the plugin EPs' devices."""
        data, providers = model[0], eps[0]
        settings, extra = ep_context(model, options, providers, notes)
        keyed = providers + [(name, {}) for name in (eps[1].names if eps[1] else [])]
        found = _optimized_cache(model, keyed, options, notes, bf16=bf16)
        if found is None:
            sup.refuse_external_data(data)
            return _session(data, spec, settings, eps, bf16=bf16, optimized=None, extra=extra)
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
                return _session(cached, spec, offline, eps, bf16=bf16, optimized=None, extra=extra)
        tmp = cache.folder / f".{key}.{os.getpid()}-{threading.get_ident()}.tmp"
        try:
            session = _session(data, spec, settings, eps, bf16=bf16, optimized=tmp, extra=extra)
        except BackendError as e:  # some EPs refuse to save optimized graphs: load uncached
            tmp.unlink(missing_ok=True)
            notes.append(f"optimized-model cache disabled for this model: {e}")
            return _session(data, spec, settings, eps, bf16=bf16, optimized=None, extra=extra)
        if tmp.exists():
            sup.save_optimized(cache, name, source, key, tmp)
            notes.append(f"optimized graph saved to cache {key[:16]}")
        return session


def _shared(
    model: tuple[bytes, str | None],
    spec: ModelSpec,
    options: LoadOptions,
    eps: tuple[list[tuple[str, dict[str, str]]], bool],
    notes: list[str],
) -> tuple[ort.InferenceSession, Held] | None:
    """A session over the gateway's shared weights (`onnx_shared`), or None. ``eps``: the
    providers, and whether BF16 fast-math is on."""
    if options.weights is None:
        return None
    providers, bf16 = eps
    settings, extra = ep_context(model, options, providers, notes)
    context = (settings, extra, providers)

    def cache() -> tuple[DerivedCache, str, str] | None:
        return _optimized_cache(model, providers, options, notes, bf16=bf16)

    try:
        return shared_session(model, options, context, bf16=bf16, notes=notes, cache=cache)
    except (BackendError, OSError) as e:
        raise BackendError(f"{spec.name}: cannot load the model with shared weights: {e}") from e
    except Exception as e:  # ORT's own errors
        raise BackendError(f"{spec.name}: ONNX Runtime cannot load the model: {e}") from e


def _session(
    data: bytes | SealedFile,
    spec: ModelSpec,
    settings: OnnxRuntimeSettings,
    eps: tuple[list[tuple[str, dict[str, str]]], PluginChoice | None],
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
    providers, plugin = eps
    if plugin is not None:  # the devices live in the options: ORT takes no list beside them
        plugin.apply(so)
        providers = []
    try:
        return sup.open_session(data, so, list(providers))
    except Exception as e:
        names = ", ".join([p for p, _ in providers] + (plugin.names if plugin else []))
        raise BackendError(
            f"{spec.name}: ONNX Runtime cannot load the model on [{names}]: {e}"
        ) from e


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
