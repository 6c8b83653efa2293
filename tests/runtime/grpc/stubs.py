"""Generates the vendored gRPC stubs of `wasmgate.runtime.grpc` with grpcio-tools.

``python -m tests.runtime.grpc.stubs`` rewrites them; `test_stubs` checks they are current.
The protos are compiled from a temporary tree laid out like the package, so the generated
imports read ``from wasmgate.runtime.grpc import kserve_v2_pb2``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[3] / "runtime" / "grpc"
PROTO_PATH = "wasmgate/runtime/grpc"
PROTOS = (
    ("kserve_v2.proto", "kserve_v2_service.proto", "kserve_v2_shm.proto"),
    ("kserve_v2_repository.proto", "kserve_v2_repository_service.proto"),
)
"""One protoc run per group: both service files define ``inference.GRPCInferenceService``
(each a part of it), which protoc refuses within one run."""
VENDORED = (
    "kserve_v2_pb2.py",
    "kserve_v2_pb2.pyi",
    "kserve_v2_service_pb2_grpc.py",
    "kserve_v2_shm_pb2.py",
    "kserve_v2_shm_pb2.pyi",
    "kserve_v2_repository_pb2.py",
    "kserve_v2_repository_pb2.pyi",
    "kserve_v2_repository_service_pb2_grpc.py",
)
"""The services' own ``_pb2`` are left out on purpose (see kserve_v2_service.proto)."""


def generate() -> dict[str, bytes]:
    """File name -> content of a fresh generation of every vendored stub."""
    with tempfile.TemporaryDirectory(prefix="wasmgate-protoc-") as tmp:
        src, out = Path(tmp) / "src", Path(tmp) / "out"
        (src / PROTO_PATH).mkdir(parents=True)
        out.mkdir()
        for proto in (p for group in PROTOS for p in group):
            shutil.copy(PACKAGE_DIR / proto, src / PROTO_PATH / proto)
        for group in PROTOS:
            cmd = [sys.executable, "-m", "grpc_tools.protoc", f"-I{src}", f"--python_out={out}",
                   f"--pyi_out={out}", f"--grpc_python_out={out}",
                   *(f"{PROTO_PATH}/{p}" for p in group)]  # fmt: skip
            subprocess.run(cmd, check=True, capture_output=True)
        return {name: (out / PROTO_PATH / name).read_bytes() for name in VENDORED}


def main() -> None:
    for name, content in generate().items():
        (PACKAGE_DIR / name).write_bytes(content)
        print(f"wrote {PACKAGE_DIR / name}")


if __name__ == "__main__":
    main()
