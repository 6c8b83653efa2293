"""KServe V2 / Open Inference Protocol routes, as tritonclient, kserve and perf_analyzer use them.

- ``GET /v2`` (extensions: ``binary_tensor_data`` only: perf_analyzer would query
  ``/stats`` in Triton's exact format if ``statistics`` were listed),
- ``GET /v2/health/live|ready`` with ``{"live": true}`` / ``{"ready": true}`` bodies (the
  kserve SDK parses them); ready is 503 until the service is ready and while draining,
- ``GET /v2/models/{m}[/versions/{v}]``, ``…/ready``, Triton's ``…/config`` and ``…/stats``,
- ``POST /v2/models/{m}[/versions/{v}]/infer``: JSON or binary tensors both ways; no
  ``Content-Type`` required (tritonclient sends none). Adapters are V2 models too.
"""

from __future__ import annotations

from aiohttp import web

from wasmgate.runtime.dataplane.adapters import InferOutcome
from wasmgate.runtime.dataplane.answer import answer_headers
from wasmgate.runtime.dataplane.plane import off_loop
from wasmgate.runtime.errors import BadRequest, NotReady
from wasmgate.runtime.http import adapters, edge, shm, stats
from wasmgate.runtime.http.common import (
    check_json_size,
    plane,
    read_body,
    route_of,
)
from wasmgate.runtime.http.errors import error_response
from wasmgate.runtime.http.keys import SERVICE
from wasmgate.runtime.protocol import codec as v2
from wasmgate.runtime.protocol import metadata
from wasmgate.runtime.served.api import ModelInfo

HEADER_LENGTH = "Inference-Header-Content-Length"


def _model_info(request: web.Request) -> ModelInfo:
    name = request.match_info["model"]
    return request.app[SERVICE].model_info(name, request.match_info.get("version"))


async def server_metadata(_request: web.Request) -> web.Response:
    return web.json_response(metadata.server_metadata())


async def live(_request: web.Request) -> web.Response:
    return web.json_response({"live": True})


async def ready(request: web.Request) -> web.Response:
    service = request.app.get(SERVICE)
    if service is None or not service.ready:
        # Answered, not raised: "not yet" is the probe's answer while the bundles load (the
        # listener is up before them), not a failure worth a warning per poll.
        return error_response(503, "the daemon is not ready (starting or draining)")
    return web.json_response({"ready": True})


async def model_metadata(request: web.Request) -> web.Response:
    return web.json_response(metadata.model_metadata(_model_info(request)))


async def model_ready(request: web.Request) -> web.Response:
    info = _model_info(request)
    if not info.ready:
        raise NotReady(f"{info.kind} {info.name!r} is not ready")
    return web.json_response({"name": info.name, "ready": True})


async def model_config(request: web.Request) -> web.Response:
    return web.json_response(metadata.model_config(_model_info(request)))


def _header_length(request: web.Request) -> int | None:
    raw = request.headers.get(HEADER_LENGTH)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise BadRequest(f"{HEADER_LENGTH} must be an integer, got {raw!r}") from None


def _encode(name: str, result: InferOutcome, req: v2.InferRequest, placed: set[str]) -> v2.Encoded:
    return v2.encode_response(
        name, str(result.version), result.outputs, req, parameters={"source": result.source},
        placed=placed,
    )  # fmt: skip


async def infer(request: web.Request) -> web.Response:
    name, version = request.match_info["model"], request.match_info.get("version")
    async with plane(request).v2("http", name, version) as call:
        length = _header_length(request)
        check_json_size(request.content_length if length is None else length, request)
        body = await read_body(request)
        check_json_size(len(body) if length is None else None, request)
        with shm.attachment(request) as regions:  # inputs and outputs in shared memory
            req = await off_loop(len(body), lambda: v2.parse_request(body, length, regions))
            regions.want_outputs({o.name: o.parameters for o in req.outputs or ()})
            result = await call.infer(req, route_of(request))
            placed = regions.write(result.outputs) if regions.targets else set()
        size = 0
        for array in result.outputs.values():  # a loop, not sum() over a generator
            size += array.nbytes
        encoded = await off_loop(size, lambda: _encode(name, result, req, placed))
    headers = answer_headers(
        result.source, result.version, result.timings, call.observation.elapsed(),
        result.fallback_reason,
    )  # fmt: skip
    headers["Content-Type"] = encoded.content_type
    if encoded.header_length is not None:
        headers[HEADER_LENGTH] = str(encoded.header_length)
    return web.Response(body=encoded.body, headers=headers)


def setup(app: web.Application) -> None:
    """Register the V2 routes and the raw adapter endpoint.

    Expects ``app[SERVICE]`` (a `ServiceAPI`) before requests arrive; ``app[METRICS]`` is
    optional. Set `wasmgate.runtime.http.edge` up first (or install
    `wasmgate.runtime.http.errors.setup`) for V2 error bodies.
    """
    router = edge.routes(app)
    # aiohttp tries the routes under one static prefix (/v2/models) in registration order:
    # the inference routes first, so a request matches on the first try.
    router.add_post("/v2/models/{model}/infer", infer)
    router.add_post("/v2/models/{model}/versions/{version}/infer", infer)
    router.add_get("/v2", server_metadata)
    router.add_get("/v2/health/live", live)
    router.add_get("/v2/health/ready", ready)
    stats.setup(app)
    shm.setup(app)
    for base in ("/v2/models/{model}", "/v2/models/{model}/versions/{version}"):
        router.add_get(base, model_metadata)
        router.add_get(f"{base}/ready", model_ready)
        router.add_get(f"{base}/config", model_config)
    adapters.setup(app)
