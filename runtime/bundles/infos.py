"""What a served name looks like from outside: the `ModelInfo` of a model or an adapter of a
loaded bundle (V2 metadata, the index, the status page), and the names a bundle claims.

An adapter is a V2 model too: one BYTES input ``payload`` and one BYTES output ``answer``.
"""

from __future__ import annotations

from wasmgate.runtime.served.api import ModelInfo
from wasmgate.runtime.served.loaded import LoadedBundle, ServedModel
from wasmgate.sandbox.models import TensorSpec

ADAPTER_PLATFORM = "wasmgate_adapter"
ADAPTER_INPUT = TensorSpec("payload", "BYTES", (1,))
ADAPTER_OUTPUT = TensorSpec("answer", "BYTES", (1,))


def claims(bundle: LoadedBundle) -> list[str]:
    """Every name ``bundle`` makes reachable: adapter (HTTP and MQTT) and model names."""
    names = [n for n in (bundle.adapter_name, bundle.mqtt_name) if n is not None]
    return [*dict.fromkeys([*names, *bundle.models])]


def adapter_info(name: str, bundle: LoadedBundle) -> ModelInfo:
    return ModelInfo(
        name=name,
        version=bundle.version,
        platform=ADAPTER_PLATFORM,
        inputs=(ADAPTER_INPUT,),
        outputs=(ADAPTER_OUTPUT,),
        kind="adapter",
        bundle=bundle.name,
        ready=not bundle.missing_models or bundle.fallback.on_missing_model,
        details={"models": ",".join(bundle.models), "digest": bundle.digest},
        mqtt_name=bundle.mqtt_name,
    )


def served_info(served: ServedModel, bundle: LoadedBundle) -> ModelInfo:
    return ModelInfo(
        name=served.name,
        version=bundle.version,
        platform=served.platform,
        inputs=tuple(served.inputs),
        outputs=tuple(served.outputs),
        max_batch_size=served.max_batch_size,
        max_queue_delay_us=served.max_queue_delay_us,
        kind="model",
        bundle=bundle.name,
        ready=served.handle is not None,
        details=dict(served.details),
    )
