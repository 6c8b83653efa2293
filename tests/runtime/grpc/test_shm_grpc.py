"""The shared-memory messages speak Triton's wire format, under Triton's method paths."""

from __future__ import annotations

import pytest
from tritonclient.grpc import service_pb2 as triton_service

from tests.runtime.grpc.test_stubs import _same_fields
from wasmgate.runtime.grpc import kserve_v2_shm_pb2 as pb
from wasmgate.runtime.grpc.shm import SERVICE, SharedMemoryServicer


@pytest.mark.parametrize("name", sorted(pb.DESCRIPTOR.message_types_by_name))
def test_every_message_matches_tritonclients_field_by_field(name: str) -> None:
    theirs = triton_service.DESCRIPTOR.message_types_by_name[name]
    _same_fields(pb.DESCRIPTOR.message_types_by_name[name], theirs)


def test_the_rpcs_are_tritons() -> None:
    service = triton_service.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    assert service.full_name == SERVICE
    ours = {m for m in vars(SharedMemoryServicer) if m.startswith("SystemSharedMemory")}
    assert ours == {"SystemSharedMemoryStatus", "SystemSharedMemoryRegister",
                    "SystemSharedMemoryUnregister"}  # fmt: skip
    for name in ours:
        method = service.methods_by_name[name]
        assert method.input_type.name == f"{name}Request"
        assert method.output_type.name == f"{name}Response"
