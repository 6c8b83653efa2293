"""``inference.GRPCInferenceService``: the KServe V2 RPCs over the same service as HTTP.

Every RPC goes through the transport-neutral `ServiceAPI` (admission control, validation,
deadlines, fallback) and the metadata documents HTTP answers with
(`wasmgate.runtime.protocol.metadata`, parsed into protobuf). Errors are answered from
the one table (`error_table`: its gRPC column) with the message HTTP gives, internal ones
logged and answered with the generic message. A ModelInfer's deadline is the sooner of
the gRPC deadline (``context.time_remaining()``) and the V2 ``timeout`` parameter
(microseconds), carried into the service's deadline like HTTP's. ModelReady answers
``ready: false`` for an unknown model (the question has an answer; no error).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import grpc
from google.protobuf import json_format

from wasmgate.runtime.dataplane.answer import answer_headers
from wasmgate.runtime.dataplane.plane import DataPlane, Route, off_loop
from wasmgate.runtime.dataplane.stats import statistics
from wasmgate.runtime.errors import NotFound
from wasmgate.runtime.grpc import convert
from wasmgate.runtime.grpc import kserve_v2_pb2 as pb
from wasmgate.runtime.grpc.peer import attachment
from wasmgate.runtime.ops.metrics import Metrics
from wasmgate.runtime.ops.tracing import Tracing, mark_status, metadata_carrier
from wasmgate.runtime.protocol import metadata
from wasmgate.runtime.protocol.error_table import log_failure, public_message, status_of
from wasmgate.runtime.served import timeouts
from wasmgate.runtime.served.api import ServiceAPI
from wasmgate.runtime.shm.registry import Regions

R = TypeVar("R")
M = TypeVar("M")
Handler = Callable[[Any, Any, Any], Awaitable[R]]
KEY_METADATA = ("x-wasmgate-canary-key", "x-request-id")
"""Metadata that picks the side of a staged release (as HTTP's headers of the same name)."""
TYPED_ELEMENT_BYTES = 8
"""Rough Python cost of one typed element, in bytes of `off_loop`'s threshold."""


def rpc(method: Handler[R]) -> Handler[R]:
    """Answer an RPC's exception from the error table (logged when it is ours to fix)."""

    @functools.wraps(method)
    async def answered(self: Any, request: Any, context: Any) -> R:
        try:
            return await method(self, request, context)
        except Exception as exc:
            answer = status_of(exc)
            log_failure("grpc", method.__name__, exc, answer)
            await context.abort(grpc.StatusCode[answer.grpc], public_message(exc, answer))
            raise  # abort() raises; this line is for the type checker

    return answered


def _parse(doc: dict[str, Any], message: M) -> M:
    """``message`` filled from a V2 JSON document (the proto's field names)."""
    json_format.ParseDict(doc, message)
    return message


def _route(context: Any) -> Route:
    """The gRPC deadline, canary key metadata and peer (the V2 ``timeout`` parameter is the
    data plane's to merge)."""
    remaining = context.time_remaining()
    deadline = None
    if remaining is not None:  # finite whatever the client sent (the service caps it too)
        deadline = timeouts.after(min(max(remaining, 0.0), timeouts.MAX_BUDGET_S))
    found = dict(context.invocation_metadata() or ())
    key = next((found[k] for k in KEY_METADATA if found.get(k)), None)
    return Route(
        deadline=deadline,
        key=key if isinstance(key, str) else None,
        key_field=f"metadata {' / '.join(KEY_METADATA)}",
        meta={"transport": "grpc", "client": str(context.peer() or "")},
    )


class InferenceServicer:
    """The RPC handlers; ``add_GRPCInferenceServiceServicer_to_server`` registers them."""

    def __init__(
        self,
        service: ServiceAPI,
        metrics: Metrics | None,
        tracing: Tracing | None = None,
        regions: Regions | None = None,
    ) -> None:
        self._regions = regions
        """Shared-memory regions inputs and outputs may name (`wasmgate.runtime.grpc.shm`)."""
        self._service = service
        self._metrics = metrics
        self._plane = DataPlane(service, metrics)
        self._tracing = tracing

    @rpc
    async def ServerLive(self, _request: Any, _context: Any) -> pb.ServerLiveResponse:  # noqa: N802
        return pb.ServerLiveResponse(live=True)

    @rpc
    async def ServerReady(self, _request: Any, _context: Any) -> pb.ServerReadyResponse:  # noqa: N802
        return pb.ServerReadyResponse(ready=self._service.ready)

    @rpc
    async def ModelReady(  # noqa: N802
        self, request: pb.ModelReadyRequest, _context: Any
    ) -> pb.ModelReadyResponse:
        try:
            info = self._service.model_info(request.name, request.version or None)
        except NotFound:
            return pb.ModelReadyResponse(ready=False)
        return pb.ModelReadyResponse(ready=info.ready)

    @rpc
    async def ServerMetadata(self, _request: Any, _context: Any) -> pb.ServerMetadataResponse:  # noqa: N802
        return _parse(metadata.server_metadata(), pb.ServerMetadataResponse())

    @rpc
    async def ModelMetadata(  # noqa: N802
        self, request: pb.ModelMetadataRequest, _context: Any
    ) -> pb.ModelMetadataResponse:
        info = self._service.model_info(request.name, request.version or None)
        return _parse(metadata.model_metadata(info), pb.ModelMetadataResponse())

    @rpc
    async def ModelConfig(  # noqa: N802
        self, request: pb.ModelConfigRequest, _context: Any
    ) -> pb.ModelConfigResponse:
        info = self._service.model_info(request.name, request.version or None)
        config = _parse(metadata.model_config(info), pb.ModelConfig())
        return pb.ModelConfigResponse(config=config)

    @rpc
    async def ModelStatistics(  # noqa: N802
        self, request: pb.ModelStatisticsRequest, _context: Any
    ) -> pb.ModelStatisticsResponse:
        doc = statistics(
            self._service, self._metrics, request.name or None, request.version or None
        )
        return _parse(doc, pb.ModelStatisticsResponse())

    @rpc
    async def ModelInfer(  # noqa: N802
        self, request: pb.ModelInferRequest, context: Any
    ) -> pb.ModelInferResponse:
        with self._traced(request, context):
            return await self._model_infer(request, context)

    @contextlib.contextmanager
    def _traced(self, request: pb.ModelInferRequest, context: Any) -> Iterator[None]:
        """The ``grpc receive`` span in the caller's trace (metadata ``traceparent``)."""
        carrier = metadata_carrier(context.invocation_metadata())
        tracing = self._tracing
        if tracing is None or not tracing.wants(carrier):
            yield
            return
        attrs = {
            "rpc.system": "grpc",
            "rpc.method": "ModelInfer",
            "wasmgate.model": request.model_name,
        }
        with tracing.receive("grpc", carrier, attrs) as current:
            # Set now so that an error answer (context.abort) carries the trace context too.
            context.set_trailing_metadata(tuple(tracing.answer_carrier().items()))
            try:
                yield
            except Exception as exc:
                mark_status(current, "wasmgate.status", status_of(exc).status)
                raise
            mark_status(current, "wasmgate.status", 200)

    async def _model_infer(
        self, request: pb.ModelInferRequest, context: Any
    ) -> pb.ModelInferResponse:
        name = request.model_name
        async with self._plane.v2("grpc", name, request.model_version or None) as call:
            # Typed contents cost Python work per element: big ones are decoded off the loop.
            typed = convert.typed_size(request) * TYPED_ELEMENT_BYTES
            with attachment(self._regions, context) as regions:  # inputs/outputs in shm
                req = await off_loop(typed, lambda: convert.parse_request(request, regions))
                regions.want_outputs({o.name: o.parameters for o in req.outputs or ()})
                result = await call.infer(req, _route(context))
                placed = regions.write(result.outputs) if regions.targets else set()
            answer = await off_loop(
                typed,
                lambda: convert.encode_response(
                    name, str(result.version), result.outputs, req,
                    params={"source": result.source}, placed=placed,
                ),
            )  # fmt: skip
        headers = answer_headers(
            result.source, result.version, result.timings, call.observation.elapsed(),
            result.fallback_reason,
        )  # fmt: skip
        headers.update(Tracing.answer_carrier())  # the request's W3C trace context, if any
        context.set_trailing_metadata(tuple((k.lower(), v) for k, v in headers.items()))
        return answer
