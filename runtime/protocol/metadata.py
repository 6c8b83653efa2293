"""KServe V2 metadata documents, shared by the HTTP routes and the gRPC service.

Each function returns the JSON document HTTP answers; the gRPC service parses the same
document into its protobuf message (`google.protobuf.json_format.ParseDict`: the field
names are the proto's), so both transports describe a model identically.
"""

from __future__ import annotations

from typing import Any

import wasmgate
from wasmgate.runtime.served.api import ModelInfo
from wasmgate.sandbox.models import DATATYPES, TensorSpec

EXTENSIONS = ("binary_tensor_data",)
"""Not ``statistics``: perf_analyzer would then query the stats in Triton's exact format."""
TRITON_TYPES = {name: f"TYPE_{name}" for name in DATATYPES} | {"BYTES": "TYPE_STRING"}


def _tensor(meta: TensorSpec) -> dict[str, Any]:
    return {"name": meta.name, "datatype": meta.datatype, "shape": list(meta.shape)}


def _config_tensor(meta: TensorSpec, batched: bool) -> dict[str, Any]:
    dims = meta.shape[1:] if batched and meta.shape else meta.shape
    return {"name": meta.name, "data_type": TRITON_TYPES[meta.datatype], "dims": list(dims)}


def server_metadata() -> dict[str, Any]:
    return {"name": "wasmgate", "version": wasmgate.__version__, "extensions": list(EXTENSIONS)}


def model_metadata(info: ModelInfo) -> dict[str, Any]:
    return {
        "name": info.name,
        "versions": [str(info.version)],
        "platform": info.platform,
        "inputs": [_tensor(t) for t in info.inputs],
        "outputs": [_tensor(t) for t in info.outputs],
    }


def model_config(info: ModelInfo) -> dict[str, Any]:
    """Triton's model configuration (perf_analyzer needs it: ``max_batch_size`` > 0 makes it
    treat the first dimension as the batch)."""
    batched = info.max_batch_size > 0
    config: dict[str, Any] = {
        "name": info.name,
        "platform": info.platform,
        "max_batch_size": info.max_batch_size,
        "input": [_config_tensor(t, batched) for t in info.inputs],
        "output": [_config_tensor(t, batched) for t in info.outputs],
    }
    if batched:
        config["dynamic_batching"] = {"max_queue_delay_microseconds": info.max_queue_delay_us}
    return config
