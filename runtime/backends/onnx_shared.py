"""ONNX sessions over a gateway's shared weights (`onnx_weights`, `weight_share`).

Used only where a `WeightShare` was given (``[workers] count`` > 1) and the model runs on
ONNX Runtime's CPU EP alone (its in-place use of a supplied initializer is for tensors on
the CPU); everything else, and a single process, loads as before. The supervisor, which
loads every model before its workers do, takes the optimized graph from the cache (or
checks the model and has ORT optimize it), splits it and publishes it; each worker asks
for it by key and maps it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import onnxruntime as ort

from wasmgate.runtime.backends import onnx_support as sup
from wasmgate.runtime.backends import onnx_weights as weights
from wasmgate.runtime.backends.onnx_weights import (
    Mapped,
    SharedWeights,
    in_place_options,
    map_weights,
    split,
)
from wasmgate.typed import replace

if TYPE_CHECKING:
    from collections.abc import Callable

    from wasmgate.device_profiles.ort import OnnxRuntimeSettings
    from wasmgate.runtime.backends.base import LoadOptions
    from wasmgate.signing.derived import DerivedCache

__all__ = ["Held", "shared_session"]

_SHARE_VERSION = "weights:1"
_CPU = "CPUExecutionProvider"


@dataclass
class Held:
    """What a session over shared weights needs alive beside it, and how to let go."""

    mapped: Mapped
    release: Callable[[], None]


Providers = list[tuple[str, dict[str, str]]]
Cached = tuple["DerivedCache", str, str]


def shared_session(
    model: tuple[bytes, str | None],
    options: LoadOptions,
    context: tuple[OnnxRuntimeSettings, dict[str, str], Providers],
    *,
    bf16: bool,
    notes: list[str],
    cache: Callable[[], Cached | None] = lambda: None,
) -> tuple[ort.InferenceSession, Held] | None:
    """A session whose large initializers are the gateway's shared, read-only weights, or
    None to load as before (not the CPU EP alone, a small model, a worker's miss).
    ``context``: the settings, the extra session entries and the providers to use;
    ``cache``: the optimized-graph cache (store, key, source digest), asked only to split."""
    share, (settings, extra, providers) = options.weights, context
    if share is None or [p for p, _ in providers] != [_CPU]:
        return None
    if len(model[0]) < weights.SHARE_MIN_BYTES:  # cannot hold enough: no split, no round trip
        return None
    key = _key(model, options, settings, extra, bf16=bf16)
    found = share.lookup(key)
    if found is None and share.makes:
        cached = cache()
        eps = (extra, providers)
        found = _make(model[0], settings, eps, bf16=bf16, cache=(cached, notes), name=key[:16])
        if found is not None:
            share.publish(key, found)
    if found is None:
        return None
    try:
        mapped = map_weights(found)
        offline = replace(settings, graph_optimization_level="disable")
        so = sup.session_options(offline, bf16=bf16, optimized_path=None, extra=extra)
        in_place_options(so, mapped)
        session = ort.InferenceSession(found.graph.data, so, providers=providers)
    except BaseException:
        share.release(key)
        raise
    finally:
        found.close()  # the mapping keeps the weights; the supervisor's copy keeps the files
    size = sum(e.length for e in found.index)
    notes.append(f"weights shared in place: {len(found.index)} tensors, {size / 2**20:.1f} MiB")
    return session, Held(mapped, lambda: share.release(key))


def _key(
    model: tuple[bytes, str | None],
    options: LoadOptions,
    settings: OnnxRuntimeSettings,
    extra: dict[str, str],
    *,
    bf16: bool,
) -> str:
    """Everything that shapes the optimized graph, as the optimized-graph cache keys it."""
    host = options.resolved_host()
    config = sorted({**settings.session_config, **extra}.items())
    what = f"{_SHARE_VERSION}:{host.machine}:{sorted(host.cpu_flags)}:{bf16}:{config}"
    return sup.cache_key(sup.model_sha256(model), [_CPU], settings, what)


def _make(
    data: bytes,
    settings: OnnxRuntimeSettings,
    eps: tuple[dict[str, str], Providers],
    *,
    bf16: bool,
    cache: tuple[Cached | None, list[str]],
    name: str,
) -> SharedWeights | None:
    """The checked, optimized graph of ``data``, split: from the optimized-graph cache
    when it holds it (saved by this daemon only after the check), else checked here and
    optimized by ORT into a memfd (no file to change after), then saved to the cache.
    ``cache``: the cache's (store, key, source digest) or None, and the notes to add to."""
    cached, notes = cache
    if cached is not None:
        store, key, source = cached
        sealed = store.load_sealed(f"{key}.onnx", source, key)
        if sealed is not None:
            notes.append(f"optimized graph loaded from cache {key[:16]}")
            with sealed, sealed.view() as view:
                return split(view, name)
    sup.refuse_external_data(data)
    extra, providers = eps
    fd = os.memfd_create("wasmgate-optimizing", os.MFD_CLOEXEC)
    try:
        path = f"/proc/self/fd/{fd}"
        so = sup.session_options(settings, bf16=bf16, optimized_path=path, extra=extra)
        ort.InferenceSession(data, so, providers=providers)  # writes the optimized graph
        graph = os.pread(fd, os.fstat(fd).st_size, 0)
    finally:
        os.close(fd)
    if cached is not None:
        cached[0].store(f"{cached[1]}.onnx", cached[2], cached[1], graph)
        notes.append(f"optimized graph saved to cache {cached[1][:16]}")
    return split(graph, name)
