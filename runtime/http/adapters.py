"""Adapters over HTTP: the raw endpoint ``POST /v1/adapters/{name}`` and adapters as V2 models.

Raw endpoint: body = device payload (any content type, or none), answer = the adapter's
output with its content type (202 with ``{"deferred": id, "topic": ...}`` when a cloud
fallback was deferred), plus ``X-Wasmgate-Source`` (local|cloud|deferred),
``X-Wasmgate-Version`` and ``Server-Timing`` (queue/sandbox/inference/fallback, ms).

As a V2 model an adapter has one BYTES input and one BYTES output: every element of the
input is one payload (run concurrently), the output has the input's shape. An input
parameter ``content_type`` is passed to the adapter.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import numpy as np
from aiohttp import hdrs, web

from wasmgate.runtime.errors import BadRequest
from wasmgate.runtime.http import edge
from wasmgate.runtime.http.common import (
    InferOutcome,
    Observation,
    answer_headers,
    canary_key,
    deadline_of,
    pinned_version,
    read_body,
)
from wasmgate.runtime.http.keys import METRICS, SERVICE
from wasmgate.runtime.protocol import codec as v2
from wasmgate.runtime.serving.api import AdapterAnswer, AdapterRequest, ModelInfo, ServiceAPI
from wasmgate.sandbox.models import InputMismatch, validate

Array = v2.Array


def request_meta(request: web.Request) -> dict[str, str]:
    return {"transport": "http", "client": request.remote or ""}


async def raw_adapter(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    observation = Observation(request.app.get(METRICS), "adapter", name)
    try:
        payload = await read_body(request)
        answer = await request.app[SERVICE].run_adapter(
            AdapterRequest(
                adapter=name,
                payload=payload,
                content_type=request.headers.get(hdrs.CONTENT_TYPE),
                meta=request_meta(request),
                deadline=deadline_of(request),
                key=canary_key(request),
                version=pinned_version(request),
            )
        )
    except Exception as exc:
        observation.failed(exc)
        raise
    observation.ok(answer.source, answer.timings)
    headers = answer_headers(
        answer.source, answer.version, answer.timings, observation.elapsed(), answer.fallback_reason
    )
    headers[hdrs.CONTENT_TYPE] = answer.content_type
    # Deferred: kept for the cloud, answered later on MQTT (the body names id and topic).
    status = 202 if answer.source == "deferred" else 200
    return web.Response(body=answer.body, status=status, headers=headers)


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
    inputs: Mapping[str, Array],
    input_parameters: Mapping[str, Mapping[str, Any]],
    deadline: float | None,
    *,
    meta: Mapping[str, str],
    key: str | None,
    version: str | None,
) -> InferOutcome:
    """Run a V2 request on an adapter model: one adapter run per BYTES element (any
    transport: HTTP and gRPC pass their own ``meta``, canary ``key`` and pinned ``version``)."""
    # The service runs adapters on payload bytes, not tensors: this is the request's one check
    # of its tensors against the adapter's (BYTES in) signature.
    try:
        (array,) = validate(info.inputs, inputs, f"adapter {info.name!r}")
    except InputMismatch as e:
        raise BadRequest(str(e)) from None
    input_name = info.inputs[0].name
    content_type = input_parameters.get(input_name, {}).get("content_type")
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


def setup(app: web.Application) -> None:
    """``POST /v1/adapters/{name}``; expects ``app[SERVICE]`` (optional ``app[METRICS]``)."""
    routes = edge.routes(app)
    routes.add_post("/v1/adapters/{name}", raw_adapter)
