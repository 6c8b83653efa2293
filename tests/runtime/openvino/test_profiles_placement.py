"""`wasmgate profiles` says where the test models run on a profile here, and lists the
devices ONNX Runtime enumerates beside the detection rules' evidence."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.runtime.openvino.ovkit import environment, openvino_profile, packaged_openvino_options


def _wasmgate(python: str, *args: str) -> str:
    done = subprocess.run(
        [python, "-m", "wasmgate", "profiles", *args],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return done.stdout


def test_placement_on_openvino_per_variant(tmp_path: Path) -> None:
    profile = openvino_profile(
        tmp_path / "ov.toml", packaged_openvino_options("intel-core-ultra-npu")
    )
    out = _wasmgate(environment("WASMGATE_OPENVINO_PYTHON"), "show", str(profile), "--placement")
    assert "digits-fp32.onnx: OpenVINOExecutionProvider 100% (5/5)" in out, out
    assert "digits-int8.onnx: OpenVINOExecutionProvider 100% (19/19)" in out, out


def test_placement_on_stock_onnxruntime_names_the_fallback() -> None:
    out = _wasmgate(sys.executable, "show", "intel-core-ultra-npu", "--placement")
    assert "digits-int8.onnx: CPUExecutionProvider 100% (19/19)" in out, out
    assert "OpenVINOExecutionProvider not in this ONNX Runtime build" in out
    assert "pip install onnxruntime-openvino" in out


def test_detect_lists_onnx_runtime_devices() -> None:
    found = json.loads(_wasmgate(sys.executable, "detect", "--json"))
    assert any(d.startswith("CPUExecutionProvider: CPU (") for d in found["onnxruntime_devices"])
    assert "onnxruntime devices (get_ep_devices):" in _wasmgate(sys.executable, "detect")
