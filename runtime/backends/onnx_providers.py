"""Which execution providers a session gets, and what is said about the ones it did not.

Requested = the device profile's ordered list ∩ this ONNX Runtime build's providers (absent
ones are dropped here, with a note, so ORT's own silent drop never happens). After the session
exists, the providers it really runs on and where its nodes went are compared with the request:
a provider ORT dropped, one that took no nodes, a partial offload, each becomes a note in
`/v1/status`; an accelerator the profile requires and the session lacks is a load error.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import onnxruntime as ort

from wasmgate.device_profiles.ort import OnnxRuntimeSettings
from wasmgate.runtime.backends import onnx_support as sup
from wasmgate.runtime.backends.base import LoadOptions
from wasmgate.runtime.errors import BackendError
from wasmgate.typed import replace

if TYPE_CHECKING:
    from wasmgate.runtime.backends.onnx import OnnxModel

CPU = "CPUExecutionProvider"
# How an operator gets a missing EP into the daemon's environment (each build replaces the
# `onnxruntime` module: one per environment).
INSTALL = {
    "OpenVINOExecutionProvider": "pip install onnxruntime-openvino (it replaces onnxruntime; "
    "see docs/openvino.md)",
    "CUDAExecutionProvider": "pip install onnxruntime-gpu (it replaces onnxruntime)",
    "TensorrtExecutionProvider": "pip install onnxruntime-gpu (it replaces onnxruntime)",
    "QNNExecutionProvider": "pip install onnxruntime-qnn (it replaces onnxruntime)",
}
# Providers that run the graph as it is: no compiled context worth caching.
_NON_COMPILING = frozenset({CPU, "AzureExecutionProvider", "XnnpackExecutionProvider"})


def ep_context(
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
    # Keyed like every derivative: the model's signed digest, the EPs and this build of ORT.
    # The daemon writes the file for the EP and never loads it as a model, so what is on
    # disk there (edited or planted) cannot reach a session.
    build = hashlib.sha256(repr(([p for p, _ in providers], ort.__version__)).encode())
    path = folder / f"{sup.model_sha256(model)}-{build.hexdigest()[:16]}_ctx.onnx"
    return settings, {"ep.context_file_path": str(path)}


def choose_providers(
    settings: OnnxRuntimeSettings, notes: list[str], *, plugin: bool = False
) -> list[tuple[str, dict[str, str]]]:
    """The profile's providers this build has; ``plugin``: a plugin EP's devices were chosen
    (they, not this list, then run the session, with the CPU EP behind them)."""
    available = set(ort.get_available_providers())
    chosen: list[tuple[str, dict[str, str]]] = []
    for provider in settings.providers:
        if provider.name in available:
            chosen.append((provider.name, sup.provider_options(dict(provider.options))))
        else:
            fix = INSTALL.get(provider.name)
            notes.append(
                f"{provider.name} not in this ONNX Runtime build ({ort.__version__}); skipped"
                + (f": {fix}" if fix else "")
            )
    if settings.accelerator_required and not chosen and not plugin:
        wanted = ", ".join(p.name for p in settings.providers)
        raise BackendError(f"accelerator required ({wanted}) but none is available")
    if not chosen:
        if not plugin:
            notes.append("no listed provider available; running on CPUExecutionProvider")
        chosen.append((CPU, {}))
    return chosen


def placement_text(placement: dict[str, int]) -> str:
    """Where the nodes run, largest share first: ``OpenVINOExecutionProvider 100% (7/7)``."""
    total = sum(placement.values())
    shares = sorted(placement.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{ep} {100 * n // total}% ({n}/{total})" for ep, n in shares)


def report_fallback(model: OnnxModel, requested: list[str], settings: OnnxRuntimeSettings) -> None:
    lost = [p for p in requested if p not in model.providers]
    if lost:
        model.notes.append(
            f"silent fallback: requested {', '.join(lost)} but the session runs on "
            f"{', '.join(model.providers)}"
        )
    placement = model.node_placement
    on_cpu, total = placement.get(CPU, 0), sum(placement.values())
    idle = [p for p in model.providers if p != CPU and placement and p not in placement]
    if not placement and model.providers != (CPU,):  # ONNX Runtime 1.23 (Python 3.10)
        model.notes.append(
            f"node placement unknown: ONNX Runtime {ort.__version__} does not report it, so "
            "a provider that takes no nodes cannot be told"
        )
    if idle:
        model.notes.append(
            f"{', '.join(idle)} registered but assigned no nodes: all {total} run on {CPU}"
        )
    elif on_cpu and on_cpu < total:
        model.notes.append(f"partial offload: {on_cpu} of {total} nodes on {CPU}")
    if settings.accelerator_required and model.providers == (CPU,):
        raise BackendError(f"{model.name}: accelerator required but the session runs on CPU only")
