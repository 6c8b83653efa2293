"""ONNX sessions over a gateway's shared weights (`onnx_weights`, `weight_share`).

Used only where a `WeightShare` was given (``[workers] count`` > 1) and the model runs on
ONNX Runtime's CPU EP alone (its in-place use of a supplied initializer is for tensors on
the CPU); everything else, and a single process, loads as before. The supervisor, which
loads every model before its workers do, checks the model, has ORT optimize it once, splits
the optimized graph and publishes it; each worker asks for it by key and maps it.
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

__all__ = ["Held", "shared_session"]

_SHARE_VERSION = "weights:1"
_CPU = "CPUExecutionProvider"


@dataclass
class Held:
    """What a session over shared weights needs alive beside it, and how to let go."""

    mapped: Mapped
    release: Callable[[], None]


Providers = list[tuple[str, dict[str, str]]]


def shared_session(
    model: tuple[bytes, str | None],
    options: LoadOptions,
    context: tuple[OnnxRuntimeSettings, dict[str, str], Providers],
    *,
    bf16: bool,
    notes: list[str],
) -> tuple[ort.InferenceSession, Held] | None:
    """A session whose large initializers are the gateway's shared, read-only weights, or
    None to load as before (not the CPU EP alone, a small model, a worker's miss).
    ``context``: the settings, the extra session entries and the providers to use."""
    share, (settings, extra, providers) = options.weights, context
    if share is None or [p for p, _ in providers] != [_CPU]:
        return None
    if len(model[0]) < weights.SHARE_MIN_BYTES:  # cannot hold enough: no split, no round trip
        return None
    key = _key(model, options, settings, extra, bf16=bf16)
    found = share.lookup(key)
    if found is None and share.makes:
        found = _make(model[0], settings, (extra, providers), bf16=bf16, name=key[:16])
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
    name: str,
) -> SharedWeights | None:
    """Check ``data``, have ORT optimize it (into a memfd: no file to change after), split."""
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
    return split(graph, name)
