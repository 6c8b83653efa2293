"""The vendored stubs are current, and speak the wire format Triton's clients speak."""

from __future__ import annotations

import subprocess
import sys

import pytest
from google.protobuf.descriptor import Descriptor, EnumDescriptor
from tritonclient.grpc import model_config_pb2 as triton_config
from tritonclient.grpc import service_pb2 as triton_service

from tests.runtime.grpc.stubs import PACKAGE_DIR, generate
from wasmgate.runtime.grpc import kserve_v2_pb2 as pb
from wasmgate.runtime.grpc import kserve_v2_repository_pb2 as rpb
from wasmgate.runtime.grpc import kserve_v2_repository_service_pb2_grpc as rpb_grpc
from wasmgate.runtime.grpc import kserve_v2_service_pb2_grpc as pb_grpc

MESSAGES = {**pb.DESCRIPTOR.message_types_by_name, **rpb.DESCRIPTOR.message_types_by_name}


def test_vendored_stubs_match_a_fresh_generation() -> None:
    for name, content in generate().items():
        vendored = (PACKAGE_DIR / name).read_bytes()
        assert vendored == content, f"{name} is stale: run python -m tests.runtime.grpc.stubs"


def _triton(name: str) -> Descriptor:
    for module in (triton_service, triton_config):
        found = module.DESCRIPTOR.message_types_by_name.get(name)
        if found is not None:
            return found
    raise AssertionError(f"tritonclient has no message {name}")


def _same_fields(ours: Descriptor, theirs: Descriptor) -> None:
    for field in ours.fields:
        other = theirs.fields_by_number.get(field.number)
        where = f"{ours.full_name}.{field.name}"
        assert other is not None, where
        assert (other.name, other.type, other.is_repeated) == (
            field.name, field.type, field.is_repeated), where  # fmt: skip
        if field.message_type is not None and not field.message_type.GetOptions().map_entry:
            _same_fields(field.message_type, other.message_type)
        if field.enum_type is not None:
            _same_enum(field.enum_type, other.enum_type)


def _same_enum(ours: EnumDescriptor, theirs: EnumDescriptor) -> None:
    assert {(v.name, v.number) for v in ours.values} <= {(v.name, v.number) for v in theirs.values}


@pytest.mark.parametrize("name", sorted(MESSAGES))
def test_every_message_matches_tritonclients_field_by_field(name: str) -> None:
    _same_fields(MESSAGES[name], _triton(name))


def test_method_paths_are_the_kserve_service() -> None:
    servicer = pb_grpc.GRPCInferenceServiceServicer
    ours = {m for m in vars(servicer) if not m.startswith("_")}
    theirs = triton_service.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    assert theirs.full_name == "inference.GRPCInferenceService"
    assert ours <= {m.name for m in theirs.methods}
    assert ours >= {"ServerLive", "ServerReady", "ModelReady", "ServerMetadata", "ModelMetadata",
                    "ModelInfer", "ModelConfig", "ModelStatistics"}  # fmt: skip
    source = (PACKAGE_DIR / "kserve_v2_service_pb2_grpc.py").read_text()
    assert "'/inference.GRPCInferenceService/ModelInfer'" in source


def test_stubs_import_beside_other_kserve_stubs_in_one_process() -> None:
    # tritonclient and MLServer collide on "inference.*" in protobuf's default pool; ours
    # must not, in either import order.
    for first, second in (("tritonclient.grpc", "wasmgate.runtime.grpc.servicer"),
                          ("wasmgate.runtime.grpc.servicer", "tritonclient.grpc")):  # fmt: skip
        code = f"import {first}, {second}"
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_repository_rpcs_are_a_part_of_the_same_service() -> None:
    ours = {m for m in vars(rpb_grpc.GRPCInferenceServiceServicer) if not m.startswith("_")}
    assert ours == {"RepositoryIndex", "RepositoryModelLoad", "RepositoryModelUnload"}
    theirs = triton_service.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    assert ours <= {m.name for m in theirs.methods}
    source = (PACKAGE_DIR / "kserve_v2_repository_service_pb2_grpc.py").read_text()
    assert "'/inference.GRPCInferenceService/RepositoryIndex'" in source
