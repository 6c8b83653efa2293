"""``RepositoryIndex``, ``RepositoryModelLoad``, ``RepositoryModelUnload`` of
``inference.GRPCInferenceService``: Triton's model repository extension over gRPC, the same
`Repository` as HTTP's routes (`wasmgate.runtime.dataplane.repository`).

Registered beside the inference RPCs on the same server (its own generated stubs,
kserve_v2_repository_service.proto). The management token comes as the metadata entry
``authorization: Bearer …`` (tritonclient: ``headers={"authorization": "Bearer …"}``);
errors are answered from the one error table, like every RPC. In a data-plane worker
(``gateway`` given) load and unload are the gateway's: relayed to the supervisor, which
applies them on every worker (`wasmgate.runtime.grpc.gateway`).
"""

from __future__ import annotations

from typing import Any

from wasmgate.runtime.dataplane.repository import Repository
from wasmgate.runtime.grpc import kserve_v2_repository_pb2 as rpb
from wasmgate.runtime.grpc.gateway import Gateway, relay, repository_path
from wasmgate.runtime.grpc.servicer import rpc


def _parameters(params: Any) -> dict[str, Any]:
    """A protobuf ``ModelRepositoryParameter`` map as plain values."""
    return {key: getattr(p, p.WhichOneof("parameter_choice") or "string_param") for key, p in
            params.items()}  # fmt: skip


class RepositoryServicer:
    """The three RPCs; ``add_GRPCInferenceServiceServicer_to_server`` of the repository
    stubs registers them."""

    def __init__(self, repository: Repository, gateway: Gateway | None = None) -> None:
        self._repository = repository
        self._gateway = gateway

    async def _change(self, context: Any, name: str, action: str, params: Any) -> bool:
        """Relay load/unload to the gateway (True), or leave it to this process (False)."""
        if self._gateway is None:
            return False
        doc = {"parameters": _parameters(params)}
        await relay(self._gateway, repository_path(name, action), doc, context)
        return True

    def _authorize(self, context: Any) -> None:
        found = dict(context.invocation_metadata() or ())
        self._repository.authorize(found.get("authorization"), str(context.peer() or ""))

    @rpc
    async def RepositoryIndex(  # noqa: N802
        self, request: rpb.RepositoryIndexRequest, context: Any
    ) -> rpb.RepositoryIndexResponse:
        self._authorize(context)
        response = rpb.RepositoryIndexResponse()
        for entry in self._repository.index(ready_only=request.ready):
            response.models.add(
                name=entry.name, version=entry.version, state=entry.state, reason=entry.reason
            )
        return response

    @rpc
    async def RepositoryModelLoad(  # noqa: N802
        self, request: rpb.RepositoryModelLoadRequest, context: Any
    ) -> rpb.RepositoryModelLoadResponse:
        if not await self._change(context, request.model_name, "load", request.parameters):
            self._authorize(context)
            self._repository.load(request.model_name, _parameters(request.parameters))
        return rpb.RepositoryModelLoadResponse()

    @rpc
    async def RepositoryModelUnload(  # noqa: N802
        self, request: rpb.RepositoryModelUnloadRequest, context: Any
    ) -> rpb.RepositoryModelUnloadResponse:
        if not await self._change(context, request.model_name, "unload", request.parameters):
            self._authorize(context)
            self._repository.unload(request.model_name, _parameters(request.parameters))
        return rpb.RepositoryModelUnloadResponse()
