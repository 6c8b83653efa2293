"""KServe V2 / Open Inference Protocol codec, transport-neutral (HTTP and MQTT use it).

Requests: JSON, or JSON followed by raw tensors (the ``binary_tensor_data`` extension; the
caller passes the JSON length from ``Inference-Header-Content-Length``). Responses: JSON, or
JSON + raw tensors when an output asks for ``binary_data`` (or the request sets
``binary_data_output``). Raw tensors are little-endian, row-major; BOOL is one byte 0/1;
BYTES elements carry a 4-byte little-endian length prefix. BF16 travels in binary only and
decodes to ``ml_dtypes.bfloat16`` arrays (what tritonclient uses). BYTES tensors decode to
object arrays of ``bytes``; outputs may hold ``bytes`` or ``str`` (ONNX Runtime gives ``str``).

Only the wire format is checked here; the tensors are checked against the model's declared
inputs once, by the service (`wasmgate.sandbox.models.validate`). Unknown top-level keys
(the kserve SDK sends ``model_name``) and unknown parameters are tolerated; Triton's
classification extension is refused rather than silently ignored.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Protocol

import msgspec
import numpy as np
import numpy.typing as npt

from wasmgate.runtime.errors import BadRequest
from wasmgate.runtime.protocol import bulkjson, jsonio
from wasmgate.runtime.protocol.tensors import (
    array_datatype,
    checked_datatype,
    checked_shape,
    decode_binary,
    decode_json,
    encode_binary,
    encode_json,
)
from wasmgate.sandbox.models import DATATYPES

Array = npt.NDArray[Any]

JSON_CONTENT_TYPE = "application/json"
BINARY_CONTENT_TYPE = "application/octet-stream"


class RequestedOutput(msgspec.Struct, frozen=True):
    name: str
    binary: bool | None = None
    """Per-output ``binary_data``; None = the request-level default."""
    parameters: Mapping[str, Any] = msgspec.field(default_factory=dict)
    """The output's own parameters (``shared_memory_region`` and its kin)."""


class RegionInputs(Protocol):
    """Inputs held in shared memory (`wasmgate.runtime.shm.attach.Attachment`)."""

    def input(
        self, datatype: str, shape: Sequence[int], params: Mapping[str, Any], label: str
    ) -> Array: ...


SHM_PARAMETERS = ("shared_memory_region", "shared_memory_byte_size")
"""Parameters that put a tensor in shared memory (Triton's extension)."""


class InferRequest(msgspec.Struct, frozen=True):
    """A decoded V2 inference request."""

    inputs: dict[str, Array]
    outputs: tuple[RequestedOutput, ...] | None = None
    """None = all outputs, with the request-level binary default."""
    id: str | None = None
    binary_output: bool = False
    """Request-level ``binary_data_output``."""
    parameters: Mapping[str, Any] = msgspec.field(default_factory=dict)
    input_parameters: Mapping[str, Mapping[str, Any]] = msgspec.field(default_factory=dict)
    """Per-input ``parameters`` (e.g. ``content_type`` for adapter payloads)."""

    @property
    def output_names(self) -> list[str] | None:
        return None if self.outputs is None else [o.name for o in self.outputs]


class Encoded(msgspec.Struct, frozen=True):
    """An encoded V2 message: body, content type, and the JSON length when binary follows."""

    body: bytes
    content_type: str
    header_length: int | None = None


def _load_json(data: bytes, what: str) -> dict[str, Any]:
    try:
        doc = bulkjson.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(f"{what} is not valid JSON: {exc}") from None
    except RecursionError:
        raise BadRequest(f"{what} is nested too deeply") from None
    if not isinstance(doc, dict):
        raise BadRequest(f"{what} must be a JSON object, got {type(doc).__name__}")
    return doc


def _split(body: bytes, header_length: int | None) -> tuple[bytes, bytes]:
    if header_length is None:
        return body, b""
    if not 0 <= header_length <= len(body):
        raise BadRequest(
            f"Inference-Header-Content-Length {header_length} is outside the body "
            f"of {len(body)} bytes"
        )
    return body[:header_length], body[header_length:]


def _params(entry: Mapping[str, Any], what: str) -> Mapping[str, Any]:
    params = entry.get("parameters") or {}
    if not isinstance(params, dict):
        raise BadRequest(f"{what}: 'parameters' must be an object")
    return params


def _tensor_entries(doc: Mapping[str, Any], key: str, what: str) -> list[dict[str, Any]]:
    entries = doc.get(key)
    if not isinstance(entries, list):
        raise BadRequest(f"{what}: '{key}' must be a list of objects")
    for entry in entries:
        if not isinstance(entry, dict):
            raise BadRequest(f"{what}: '{key}' must be a list of objects")
    for entry in entries:
        if not isinstance(entry.get("name"), str):
            raise BadRequest(f"{what}: every entry of '{key}' needs a string 'name'")
    return entries


def _decode_one(
    entry: Mapping[str, Any], blob: bytes, offset: int, label: str, shm: RegionInputs | None
) -> tuple[Array, int]:
    """One tensor from its JSON entry (``data``), the binary part at ``offset`` or a shared
    memory region."""
    datatype = checked_datatype(entry.get("datatype"), label)
    shape = checked_shape(entry.get("shape"), label)
    params = _params(entry, label)
    if any(k in params for k in SHM_PARAMETERS):
        if shm is None:
            raise BadRequest(f"{label}: shared memory is not served over this transport")
        if "data" in entry:
            raise BadRequest(f"{label}: 'data' and shared_memory_region both given")
        return shm.input(datatype, shape, params, label), offset
    size = params.get("binary_data_size")
    if size is not None:
        if not isinstance(size, int) or size < 0 or offset + size > len(blob):
            raise BadRequest(
                f"{label}: binary_data_size {size!r} does not fit the "
                f"{len(blob) - offset} binary bytes left"
            )
        chunk = blob[offset : offset + size]
        return decode_binary(chunk, datatype, DATATYPES[datatype], shape, label), offset + size
    if "data" in entry:
        return decode_json(entry["data"], datatype, DATATYPES[datatype], shape, label), offset
    raise BadRequest(f"{label}: needs 'data' or parameters.binary_data_size")


def _decode_tensors(
    entries: list[dict[str, Any]], blob: bytes, what: str, shm: RegionInputs | None = None
) -> tuple[dict[str, Array], dict[str, Mapping[str, Any]]]:
    tensors: dict[str, Array] = {}
    params_by_name: dict[str, Mapping[str, Any]] = {}
    offset = 0
    for entry in entries:
        name = entry["name"]
        label = f"{what} '{name}'"
        if name in tensors:
            raise BadRequest(f"{label} appears twice")
        tensors[name], offset = _decode_one(entry, blob, offset, label, shm)
        params_by_name[name] = _params(entry, label)
    if offset != len(blob):
        raise BadRequest(
            f"{len(blob) - offset} binary bytes after the JSON header are not claimed by "
            "any binary_data_size"
        )
    return tensors, params_by_name


def _requested_outputs(doc: Mapping[str, Any]) -> tuple[RequestedOutput, ...] | None:
    if doc.get("outputs") is None:
        return None
    result: list[RequestedOutput] = []
    for entry in _tensor_entries(doc, "outputs", "request"):
        label = f"output '{entry['name']}'"
        params = _params(entry, label)
        if params.get("classification"):
            raise BadRequest(f"{label}: the classification extension is not supported")
        binary = params.get("binary_data")
        if binary is not None and not isinstance(binary, bool):
            raise BadRequest(f"{label}: binary_data must be true or false")
        result.append(RequestedOutput(entry["name"], binary, params))
    return tuple(result)


def parse_request(
    body: bytes, header_length: int | None = None, shm: RegionInputs | None = None
) -> InferRequest:
    """Decode a V2 inference request (JSON, or binary with the JSON header length); inputs
    in shared memory come from ``shm`` (None: the parameters are not looked at)."""
    head, blob = _split(body, header_length)
    doc = _load_json(head, "inference request")
    request_id = doc.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise BadRequest("request 'id' must be a string")
    params = _params(doc, "request")
    binary_output = params.get("binary_data_output", False)
    if not isinstance(binary_output, bool):
        raise BadRequest("binary_data_output must be true or false")
    entries = _tensor_entries(doc, "inputs", "request")
    inputs, input_params = _decode_tensors(entries, blob, "input", shm)
    return InferRequest(
        inputs=inputs,
        outputs=_requested_outputs(doc),
        id=request_id,
        binary_output=binary_output,
        parameters=params,
        input_parameters=input_params,
    )


def _wants_binary(name: str, request: InferRequest | None) -> bool:
    if request is None:
        return False
    for requested in request.outputs or ():
        if requested.name == name and requested.binary is not None:
            return requested.binary
    return request.binary_output


def encode_response(
    model_name: str,
    model_version: str | None,
    outputs: Mapping[str, Array],
    request: InferRequest | None = None,
    *,
    parameters: Mapping[str, Any] | None = None,
    allow_binary: bool = True,
    placed: Collection[str] = (),
) -> Encoded:
    """Encode outputs as a V2 response; binary per the request unless ``allow_binary`` is off.

    ``placed``: outputs already written into shared memory, answered without data."""
    doc: dict[str, Any] = {"model_name": model_name}
    if model_version is not None:
        doc["model_version"] = model_version
    if request is not None and request.id is not None:
        doc["id"] = request.id
    if parameters:
        doc["parameters"] = dict(parameters)
    entries, blobs, floats = [], [], []
    for name, array in outputs.items():
        datatype = array_datatype(array)
        entry: dict[str, Any] = {"name": name, "datatype": datatype, "shape": list(array.shape)}
        if name in placed:
            pass  # name, datatype and shape only: the data is in the client's region
        elif allow_binary and _wants_binary(name, request):
            raw = encode_binary(array, datatype)
            entry["parameters"] = {"binary_data_size": len(raw)}
            blobs.append(raw)
        else:
            entry["data"] = encode_json(array, datatype, f"output '{name}'")
            if array.dtype.kind == "f":
                floats.append(array)
        entries.append(entry)
    doc["outputs"] = entries
    head = jsonio.dumps(doc)
    # orjson writes NaN and infinities as null: only when a null is there at all can a float
    # output be non-finite, and only then is it checked (np.isfinite costs µs per tensor).
    if b"null" in head and not all(np.isfinite(a).all() for a in floats):
        head = jsonio.dumps(doc, finite=False)
    if not blobs:
        return Encoded(head, JSON_CONTENT_TYPE)
    return Encoded(b"".join([head, *blobs]), BINARY_CONTENT_TYPE, len(head))


__all__ = [
    "BINARY_CONTENT_TYPE",
    "JSON_CONTENT_TYPE",
    "Encoded",
    "InferRequest",
    "RegionInputs",
    "RequestedOutput",
    "encode_response",
    "parse_request",
]
