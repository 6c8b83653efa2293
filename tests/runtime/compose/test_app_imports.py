"""What a daemon's config does not use, the daemon does not import (start-up time, idle RSS).

A real ``wasmgate serve``, HTTP only, with one signed ONNX bundle, started twice on one
data directory with ``PYTHONPROFILEIMPORTTIME=1``: the interpreter logs every module the
process imports, also those imported inside functions on the way to READY. The warm start
(compiled adapter and optimized graph cached) must not import the MQTT bridge, gRPC, the
OCI client of the fleet pull and the samples sink, the ``onnx`` package (the optimized
graph stands for a model that passed its check), the OpenTelemetry SDK or LiteRT, nor map
their native libraries; nor, with no ``cloud.url``, the cloud client, nor ml_dtypes (BF16
tensors only), the run-guest runner or, with no fleet document, its models; nor
pydantic-settings (the environment's settings are read by `config_env`). The cold start
is the counter-check that the log is read right: it does import ``onnx``, for the
external-data check of a graph seen for the first time.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fixtures.benchkit import BenchKit, daemon_pid
from tests.fixtures.models import ModelFiles

LAZY = {
    "mqtt": ("paho", "wasmgate.runtime.mqtt"),
    "grpc": ("grpc", "wasmgate.runtime.grpc"),
    "fleet pull": ("wasmgate.runtime.fleet.pull", "wasmgate.runtime.oci.client", "oras"),
    "samples sink": ("wasmgate.runtime.field.samples_oci",),
    "oci deps": ("requests", "jsonschema", "urllib3"),
    "onnx": ("onnx",),
    "otel sdk": ("opentelemetry.sdk", "opentelemetry.exporter"),
    "litert": ("wasmgate.runtime.backends.tflite", "ai_edge_litert", "tflite_runtime"),
    "cloud client": ("wasmgate.runtime.cloud.client", "wasmgate.runtime.field.samples_http"),
    "bf16 dtype": ("ml_dtypes",),
    "run-guest runner": ("wasmgate.sandbox.runner",),
    "fleet documents": ("wasmgate.signing.fleetdoc",),
    "large JSON walk": ("simdjson", "wasmgate.runtime.protocol.simdwalk"),
    "settings sources": ("pydantic_settings", "dotenv"),
}
NATIVE = {"onnx": "onnx_cpp2py_export", "grpc": "cygrpc", "oci deps": "rpds"}


@dataclass(frozen=True)
class Start:
    modules: frozenset[str]
    maps: str


def _imported(log: str) -> frozenset[str]:
    lines = (ln for ln in log.splitlines() if ln.startswith("import time:"))
    return frozenset(ln.rsplit("|", 1)[-1].strip() for ln in lines)


def _start(kit: BenchKit, workdir: Path) -> Start:
    daemon = kit.daemon(workdir, env={"PYTHONPROFILEIMPORTTIME": "1"})
    before = len(daemon.log())
    daemon.start(timeout=120)
    try:
        maps = Path(f"/proc/{daemon_pid(daemon)}/maps").read_text()
    finally:
        daemon.stop()
    return Start(_imported(daemon.log()[before:]), maps)


@pytest.fixture(scope="module")
def starts(tmp_path_factory: pytest.TempPathFactory, models: ModelFiles) -> tuple[Start, Start]:
    root = tmp_path_factory.mktemp("lazy")
    kit = BenchKit(root / "kit")
    kit.build("digits", models.digits_fp32)
    cold = _start(kit, root / "daemon")
    return cold, _start(kit, root / "daemon")


def _matches(modules: frozenset[str], prefixes: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes))


@pytest.mark.parametrize("what", sorted(LAZY))
def test_the_warm_start_does_not_import(starts: tuple[Start, Start], what: str) -> None:
    warm = starts[1]
    assert _matches(warm.modules, LAZY[what]) == []
    if what in NATIVE:
        assert NATIVE[what] not in warm.maps


def test_the_counter_check_sees_what_the_daemon_does_import(starts: tuple[Start, Start]) -> None:
    cold, warm = starts
    for start in starts:
        assert {"onnxruntime", "wasmtime", "wasmgate.runtime.backends.onnx"} <= start.modules
    assert "onnx" in cold.modules  # the first sight of a graph runs the external-data check
    assert "onnx_cpp2py_export" in cold.maps
    assert "onnx" not in warm.modules
