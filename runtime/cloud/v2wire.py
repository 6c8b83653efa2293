"""KServe V2 inference bodies as the cloud client (`client.py`) writes and reads them.

A request is written with the same tensor encoder as our own HTTP answers (JSON, or the
binary tensor extension when a BF16 or BYTES input needs it), plus the request's and the
inputs' parameters and the outputs it asks for; a response is read with the same decoder
as our own requests (its outputs have the schema of a request's inputs). An adapter's
payload travels as the one BYTES input ``payload``; its answer is the BYTES output
``answer`` (or the only output).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from wasmgate.runtime.errors import BadRequest
from wasmgate.runtime.protocol import codec as v2
from wasmgate.runtime.protocol.tensors import array_datatype

Array = npt.NDArray[Any]
HEADER_LENGTH = "Inference-Header-Content-Length"
_BINARY_TYPES = frozenset({"BF16", "BYTES"})


def encode_v2_request(
    inputs: Mapping[str, Array],
    *,
    outputs: Sequence[str] | None = None,
    binary_outputs: bool = False,
    parameters: Mapping[str, Any] | None = None,
    input_parameters: Mapping[str, Mapping[str, Any]] | None = None,
) -> tuple[bytes, int | None]:
    """A V2 inference request body and its JSON header length (None = plain JSON)."""
    binary = any(array_datatype(a) in _BINARY_TYPES for a in inputs.values())
    # The response encoder writes exactly the tensor entries a request needs.
    enc = v2.encode_response("", None, inputs, v2.InferRequest({}, binary_output=binary))
    head_len = enc.header_length if enc.header_length is not None else len(enc.body)
    doc = json.loads(enc.body[:head_len])
    entries = doc["outputs"]
    for entry in entries:
        extra = (input_parameters or {}).get(entry["name"])
        if extra:
            entry["parameters"] = {**entry.get("parameters", {}), **extra}
    request: dict[str, Any] = {"inputs": entries}
    if outputs is not None:
        out_params = {"binary_data": True} if binary_outputs else {}
        request["outputs"] = [{"name": n, "parameters": out_params} for n in outputs]
    if parameters:
        request["parameters"] = dict(parameters)
    head = json.dumps(request, separators=(",", ":")).encode()
    if enc.header_length is None:
        return head, None
    return head + enc.body[head_len:], len(head)


def decode_v2_response(body: bytes, header_length: int | None) -> dict[str, Array]:
    """The outputs of a V2 inference response (JSON or binary), by name."""
    head, blob = (
        (body, b"") if header_length is None else (body[:header_length], body[header_length:])
    )
    try:
        doc = json.loads(head)
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRequest(f"not JSON: {e}") from e
    if not isinstance(doc, dict) or not isinstance(doc.get("outputs"), list):
        raise BadRequest("no 'outputs' list")
    # A response's outputs have the schema of a request's inputs: reuse the request decoder.
    as_request = json.dumps({"inputs": doc["outputs"]}).encode()
    length = len(as_request) if header_length is not None else None
    return v2.parse_request(as_request + blob, length).inputs


def adapter_request(
    payload: bytes, content_type: str | None
) -> tuple[dict[str, Array], dict[str, dict[str, Any]] | None]:
    """An adapter's payload as the one BYTES input ``payload`` (with its content type)."""
    array = np.empty(1, dtype=np.object_)
    array[:] = [payload]
    params = {"payload": {"content_type": content_type}} if content_type else None
    return {"payload": array}, params


def adapter_answer(outputs: Mapping[str, Array]) -> bytes | None:
    """The output ``answer`` (or the only output) as bytes; None unless one element."""
    answer = outputs.get("answer")
    if answer is None and len(outputs) == 1:
        (answer,) = outputs.values()
    if answer is None or answer.size != 1:
        return None
    item = answer.ravel()[0]
    return item if isinstance(item, bytes) else str(item).encode()
