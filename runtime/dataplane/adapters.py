"""Adapters as V2 models, and what a V2 call produces (`InferOutcome`).

As a V2 model an adapter has one BYTES input and one BYTES output: every element of the
input is one payload (run concurrently), the output has the input's shape. An input
parameter ``content_type`` is passed to the adapter.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from wasmgate.runtime.errors import BadRequest
from wasmgate.runtime.protocol.codec import InferRequest
from wasmgate.runtime.served.api import (
    AdapterAnswer,
    AdapterRequest,
    ModelInfo,
    ServiceAPI,
    Source,
)
from wasmgate.sandbox.models import InputMismatch, validate


@dataclass
class InferOutcome:
    """What one V2 inference produced (a model's outputs, or an adapter run as a V2 model)."""

    outputs: dict[str, np.ndarray[Any, Any]]
    source: Source
    version: int
    timings: dict[str, float]
    fallback_reason: str | None


def _merge_timings(answers: list[AdapterAnswer]) -> dict[str, float]:
    # Elements run concurrently: the slowest one is the request's latency per stage.
    merged: dict[str, float] = {}
    for answer in answers:
        for stage, seconds in answer.timings.items():
            merged[stage] = max(merged.get(stage, 0.0), seconds)
    return merged


async def infer_adapter(
    service: ServiceAPI,
    info: ModelInfo,
    request: InferRequest,
    deadline: float | None,
    *,
    meta: Mapping[str, str],
    key: str | None,
    version: str | None,
) -> InferOutcome:
    """Run a V2 request on an adapter model: one adapter run per BYTES element."""
    # The service runs adapters on payload bytes, not tensors: this is the request's one check
    # of its tensors against the adapter's (BYTES in) signature.
    try:
        (array,) = validate(info.inputs, request.inputs, f"adapter {info.name!r}")
    except InputMismatch as e:
        raise BadRequest(str(e)) from None
    input_name = info.inputs[0].name
    content_type = request.input_parameters.get(input_name, {}).get("content_type")
    if content_type is not None and not isinstance(content_type, str):
        raise BadRequest(f"input '{input_name}': parameter content_type must be a string")
    calls = [
        service.run_adapter(
            AdapterRequest(info.name, bytes(item), content_type, meta, deadline, key, version)
        )
        for item in array.ravel()
    ]
    answers = list(await asyncio.gather(*calls))
    bodies = np.empty(len(answers), dtype=np.object_)
    bodies[:] = [answer.body for answer in answers]
    cloud = [a for a in answers if a.source == "cloud"]
    first = cloud[0] if cloud else (answers[0] if answers else None)
    return InferOutcome(
        outputs={info.outputs[0].name: bodies.reshape(array.shape)},
        source=first.source if first else "local",
        version=max((a.version for a in answers), default=info.version),
        timings=_merge_timings(answers),
        fallback_reason=first.fallback_reason if first else None,
    )
