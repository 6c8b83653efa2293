"""`wasmgate doctor` says where a test model really runs and gives the fix for a fallback:
on stock onnxruntime the OpenVINO install line, in the OpenVINO venv the absent NPU (the
packaged Core Ultra profile on a machine without one), and ok for OpenVINO on the CPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.runtime.openvino.ovkit import (
    environment,
    openvino_profile,
    packaged_openvino_options,
)


def _placement(python: str, tmp_path: Path, profile: str) -> dict[str, Any]:
    config = tmp_path / "config.toml"
    config.write_text(f'profile = {json.dumps(profile)}\n[paths]\ndata_dir = "{tmp_path}"\n')
    done = subprocess.run(
        [python, "-m", "wasmgate", "doctor", "--config", str(config), "--json"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    findings = json.loads(done.stdout)["findings"]
    (found,) = [f for f in findings if f["check"] == "providers: placement"]
    return dict(found)


def test_stock_onnxruntime_gets_the_install_line(tmp_path: Path) -> None:
    found = _placement(sys.executable, tmp_path, "intel-core-ultra-npu")
    assert found["level"] == "warn", found
    assert "runs on CPUExecutionProvider 100% (5/5)" in found["message"]
    assert found["fix"].startswith("pip install onnxruntime-openvino")


def test_absent_npu_is_said_in_the_openvino_venv(tmp_path: Path) -> None:
    found = _placement(environment("WASMGATE_OPENVINO_PYTHON"), tmp_path, "intel-core-ultra-npu")
    assert found["level"] == "warn", found
    assert "device NPU not available (OpenVINO sees: CPU" in found["message"]
    assert "device_type" in found["fix"]


def test_openvino_on_the_cpu_is_ok(tmp_path: Path) -> None:
    profile = openvino_profile(
        tmp_path / "ov.toml", packaged_openvino_options("intel-core-ultra-npu")
    )
    found = _placement(environment("WASMGATE_OPENVINO_PYTHON"), tmp_path, str(profile))
    assert found["level"] == "ok", found
    assert "runs on OpenVINOExecutionProvider 100% (5/5)" in found["message"]
