"""Protobuf KServe V2 messages to and from the V2 codec's form (`codec.InferRequest`).

A request's tensors come either all in ``raw_input_contents`` (raw little-endian, BYTES
with 4-byte length prefixes: the bytes the HTTP binary extension carries, decoded by the
same `tensors.decode_binary`) or all in typed ``contents`` (decoded by the same strict
`tensors.decode_json` as JSON ``data``: no truncation, no wrap-around). Only the wire
format is checked here; the tensors are checked against the model once, by the service.

Answers always carry their outputs in ``raw_output_contents``, whatever the request used:
what Triton does, and what perf_analyzer and clients that index ``raw_output_contents``
expect (tritonclient's ``as_numpy`` reads either).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from wasmgate.runtime.errors import BadRequest
from wasmgate.runtime.grpc import kserve_v2_pb2 as pb
from wasmgate.runtime.protocol.codec import (
    SHM_PARAMETERS,
    Array,
    InferRequest,
    RegionInputs,
    RequestedOutput,
)
from wasmgate.runtime.protocol.tensors import (
    array_datatype,
    checked_datatype,
    checked_shape,
    decode_binary,
    decode_json,
    encode_binary,
)
from wasmgate.sandbox.models import DATATYPES

TYPED_FIELDS = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}
"""V2 datatype -> its ``InferTensorContents`` field; FP16 and BF16 have none (raw only)."""
_INT64_MAX = 2**63 - 1
Parameters = Mapping[str, "pb.InferParameter"]


def parameters(params: Parameters) -> dict[str, Any]:
    """A protobuf parameter map as plain values (bool, int, str or float)."""
    return {key: getattr(p, p.WhichOneof("parameter_choice") or "string_param") for key, p in
            params.items()}  # fmt: skip


def set_parameter(target: pb.InferParameter, value: object) -> None:
    if isinstance(value, bool):
        target.bool_param = value
    elif isinstance(value, int):
        if value > _INT64_MAX:
            target.uint64_param = value
        else:
            target.int64_param = value
    elif isinstance(value, float):
        target.double_param = value
    else:
        target.string_param = str(value)


def _typed(tensor: pb.ModelInferRequest.InferInputTensor, datatype: str, label: str) -> Array:
    field = TYPED_FIELDS.get(datatype)
    if field is None:
        raise BadRequest(f"{label}: {datatype} has no typed contents: send raw_input_contents")
    present = sorted(f.name for f, _ in tensor.contents.ListFields())
    if present and present != [field]:
        raise BadRequest(f"{label}: {datatype} data goes in contents.{field}, got {present}")
    shape = checked_shape(list(tensor.shape), label)
    values = list(getattr(tensor.contents, field))
    return decode_json(
        values, datatype, DATATYPES[datatype], shape, label, unit=f"contents.{field}"
    )


def _in_shm(tensor: pb.ModelInferRequest.InferInputTensor) -> bool:
    return any(k in tensor.parameters for k in SHM_PARAMETERS)


def _shared(
    tensor: pb.ModelInferRequest.InferInputTensor, datatype: str, shm: RegionInputs | None
) -> Array:
    """An input held in a shared memory region (Triton's extension)."""
    label = f"input '{tensor.name}'"
    if shm is None:
        raise BadRequest(f"{label}: shared memory is not served here")
    if tensor.contents.ListFields():
        raise BadRequest(f"{label}: contents and shared_memory_region both given")
    shape = checked_shape(list(tensor.shape), label)
    return shm.input(datatype, shape, parameters(tensor.parameters), label)


def _inputs(request: pb.ModelInferRequest, shm: RegionInputs | None) -> dict[str, Array]:
    raw = request.raw_input_contents
    shared = [_in_shm(t) for t in request.inputs]
    direct = len(shared) - sum(shared)
    if raw and len(raw) != direct:
        raise BadRequest(
            f"raw_input_contents has {len(raw)} entries for {direct} inputs not in shared "
            "memory (when used, every such input is raw, in order)"
        )
    arrays: dict[str, Array] = {}
    index = 0
    for tensor, in_shm in zip(request.inputs, shared, strict=True):
        label = f"input '{tensor.name}'"
        if tensor.name in arrays:
            raise BadRequest(f"{label} appears twice")
        datatype = checked_datatype(tensor.datatype, label)
        if in_shm:
            arrays[tensor.name] = _shared(tensor, datatype, shm)
            continue
        if not raw:
            arrays[tensor.name] = _typed(tensor, datatype, label)
            continue
        if tensor.contents.ListFields():
            raise BadRequest(f"{label}: typed contents and raw_input_contents both given")
        shape = checked_shape(list(tensor.shape), label)
        arrays[tensor.name] = decode_binary(raw[index], datatype, DATATYPES[datatype], shape, label)
        index += 1
    return arrays


def _outputs(request: pb.ModelInferRequest) -> tuple[RequestedOutput, ...] | None:
    if not request.outputs:
        return None
    for output in request.outputs:
        if parameters(output.parameters).get("classification"):
            raise BadRequest(
                f"output '{output.name}': the classification extension is not supported"
            )
    return tuple(
        RequestedOutput(o.name, parameters=parameters(o.parameters)) for o in request.outputs
    )


def parse_request(request: pb.ModelInferRequest, shm: RegionInputs | None = None) -> InferRequest:
    """The codec's `InferRequest` for a protobuf one (BadRequest naming the tensor); inputs
    in shared memory come from ``shm``."""
    return InferRequest(
        inputs=_inputs(request, shm),
        outputs=_outputs(request),
        id=request.id or None,
        parameters=parameters(request.parameters),
        input_parameters={t.name: parameters(t.parameters) for t in request.inputs},
    )


def typed_size(request: pb.ModelInferRequest) -> int:
    """Elements in typed contents (decoding them costs Python work per element)."""
    fields = set(TYPED_FIELDS.values())
    return sum(len(getattr(t.contents, f)) for t in request.inputs for f in fields)


def encode_response(
    model: str,
    version: str,
    outputs: Mapping[str, Array],
    request: InferRequest,
    *,
    params: Mapping[str, object],
    placed: Collection[str] = (),
) -> pb.ModelInferResponse:
    """A protobuf answer, every output in ``raw_output_contents`` (as Triton always sends:
    perf_analyzer and hand-written clients read ``raw_output_contents[i]``).

    ``placed``: outputs written into shared memory, answered without data (an empty raw
    entry, as Triton sends, so the others keep their index)."""
    response = pb.ModelInferResponse(model_name=model, model_version=version, id=request.id)
    for key, value in params.items():
        set_parameter(response.parameters[key], value)
    for name, array in outputs.items():
        datatype = array_datatype(array)
        response.outputs.add(name=name, datatype=datatype, shape=array.shape)
        if name in placed:
            response.raw_output_contents.append(b"")
        else:
            response.raw_output_contents.append(encode_binary(array, datatype, f"output '{name}'"))
    return response
