"""Triton's system shared-memory RPCs (``SystemSharedMemoryStatus/Register/Unregister``).

Served by a generic handler of their own under ``inference.GRPCInferenceService`` (see
kserve_v2_shm.proto), beside the generated one: grpc asks each handler in turn for a
method path, and the generated one answers only for its own methods. Every call, and every
ModelInfer naming a region (`peer.attachment`), is checked by `Regions.allow`: the extension on,
a loopback peer (``context.peer()``), the token in metadata ``authorization`` when one is
set. Errors are answered from the one table, as every RPC's. The CUDA extension's three
RPCs are answered as a CPU-only Triton does (`wasmgate.runtime.shm.cuda`), under the same
checks. In a data-plane worker (``gateway`` given) register and unregister are the
gateway's: relayed to the supervisor, which applies them on every worker, so a region
registered on one connection serves on every other (`wasmgate.runtime.grpc.gateway`).
"""

from __future__ import annotations

import itertools
from typing import Any

import grpc

from wasmgate.runtime.errors import BadRequest
from wasmgate.runtime.grpc import kserve_v2_shm_pb2 as pb
from wasmgate.runtime.grpc.gateway import Gateway, region_path, relay
from wasmgate.runtime.grpc.peer import authorization, peer_address
from wasmgate.runtime.grpc.servicer import rpc
from wasmgate.runtime.shm.cuda import refuse_register
from wasmgate.runtime.shm.registry import Regions

SERVICE = "inference.GRPCInferenceService"


class SharedMemoryServicer:
    """The six RPCs over the daemon's `Regions` (None: answered as not served)."""

    def __init__(self, regions: Regions | None, gateway: Gateway | None = None) -> None:
        self._regions = regions
        self._gateway = gateway

    def _allowed(self, context: Any) -> Regions:
        if self._regions is None:
            raise BadRequest("system shared memory is not served here")
        self._regions.allow(peer_address(context), authorization(context))
        return self._regions

    @rpc
    async def SystemSharedMemoryStatus(  # noqa: N802
        self, request: pb.SystemSharedMemoryStatusRequest, context: Any
    ) -> pb.SystemSharedMemoryStatusResponse:
        found = self._allowed(context).status(request.name or None)
        answer = pb.SystemSharedMemoryStatusResponse()
        for doc in found:
            answer.regions[str(doc["name"])].CopyFrom(
                pb.SystemSharedMemoryStatusResponse.RegionStatus(**doc)  # type: ignore[arg-type]
            )
        return answer

    @rpc
    async def SystemSharedMemoryRegister(  # noqa: N802
        self, request: pb.SystemSharedMemoryRegisterRequest, context: Any
    ) -> pb.SystemSharedMemoryRegisterResponse:
        regions = self._allowed(context)
        if self._gateway is not None:
            doc = {"key": request.key, "offset": request.offset, "byte_size": request.byte_size}
            await relay(self._gateway, region_path(request.name, "register"), doc, context)
        else:
            regions.register(request.name, request.key, request.offset, request.byte_size)
        return pb.SystemSharedMemoryRegisterResponse()

    @rpc
    async def SystemSharedMemoryUnregister(  # noqa: N802
        self, request: pb.SystemSharedMemoryUnregisterRequest, context: Any
    ) -> pb.SystemSharedMemoryUnregisterResponse:
        regions = self._allowed(context)
        if self._gateway is not None:
            await relay(self._gateway, region_path(request.name, "unregister"), {}, context)
        else:
            regions.unregister(request.name or None)
        return pb.SystemSharedMemoryUnregisterResponse()

    @rpc
    async def CudaSharedMemoryStatus(  # noqa: N802
        self, _request: pb.CudaSharedMemoryStatusRequest, context: Any
    ) -> pb.CudaSharedMemoryStatusResponse:
        self._allowed(context)
        return pb.CudaSharedMemoryStatusResponse()

    @rpc
    async def CudaSharedMemoryRegister(  # noqa: N802
        self, request: pb.CudaSharedMemoryRegisterRequest, context: Any
    ) -> pb.CudaSharedMemoryRegisterResponse:
        self._allowed(context)
        raise refuse_register(request.name)

    @rpc
    async def CudaSharedMemoryUnregister(  # noqa: N802
        self, _request: pb.CudaSharedMemoryUnregisterRequest, context: Any
    ) -> pb.CudaSharedMemoryUnregisterResponse:
        self._allowed(context)
        return pb.CudaSharedMemoryUnregisterResponse()


def handler(regions: Regions | None, gateway: Gateway | None = None) -> Any:
    """The generic handler serving the six RPCs (``server.add_generic_rpc_handlers``)."""
    servicer = SharedMemoryServicer(regions, gateway)
    methods = {}
    for kind, method in itertools.product(("System", "Cuda"), ("Status", "Register", "Unregister")):
        name = f"{kind}SharedMemory{method}"
        request, response = getattr(pb, f"{name}Request"), getattr(pb, f"{name}Response")
        methods[name] = grpc.unary_unary_rpc_method_handler(
            getattr(servicer, name),
            request_deserializer=request.FromString,
            response_serializer=response.SerializeToString,
        )
    return grpc.method_handlers_generic_handler(SERVICE, methods)
