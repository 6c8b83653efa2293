from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.device_profiles.trees import build_tree
from wasmgate.device_profiles import list_profiles
from wasmgate.runtime.cli import main


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["profiles", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_list_shows_every_profile(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["list"], capsys)
    assert code == 0
    for name in list_profiles():
        assert name in out
    assert "bf16 > int8 > fp32" in out


def test_show_describes_providers_and_detection(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["show", "qualcomm-qcs6490"], capsys)
    assert code == 0
    assert "QNNExecutionProvider (backend_type=htp" in out
    assert "precision order: int8 > fp16 > fp32" in out
    assert "dt_compatible qcom,qcs6490" in out


def test_show_json_round_trips(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["show", "aws-graviton3", "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    assert data["precision"] == ["int4", "bf16", "int8", "fp32"]


def test_show_says_what_is_unverified_on_real_hardware(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = _run(["show", "ti-am62a"], capsys)
    assert code == 0
    assert "  - TIDLExecutionProvider (artifacts_folder=/opt/model_zoo/artifacts" in out
    assert "unverified on real hardware: onnxruntime.providers: TIDLExecutionProvider" in out


def test_show_unknown_profile_fails(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(["show", "nope"], capsys)
    assert code == 1
    assert "no device profile named 'nope'" in err


def test_detect_with_root_prints_profile_and_evidence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(["detect", "--root", str(build_tree("nxp-imx8mp", tmp_path))], capsys)
    assert code == 0
    assert out.startswith("profile: nxp-imx8mp")
    assert "  - device-tree compatible fsl,imx8mp" in out
    assert "  - path /dev/galcore" in out
    assert "also matched: generic-arm64 (priority 0)" in out


def test_detect_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = build_tree("intel-core-ultra-npu", tmp_path)
    code, out, _ = _run(["detect", "--root", str(root), "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    assert data["profile"] == "intel-core-ultra-npu"
    assert data["facts"]["accel_drivers"] == ["intel_vpu"]


def test_detect_bad_roots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(["detect", "--root", str(tmp_path / "missing")], capsys)
    assert (code, "not a directory" in err) == (1, True)
    code, _, err = _run(["detect", "--root", str(tmp_path)], capsys)
    assert (code, "no device profile matches" in err) == (1, True)


def test_detect_this_machine(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["detect"], capsys)
    assert code == 0
    assert out.startswith("profile: ")


def test_schema_documents_every_field(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["schema"], capsys)
    assert code == 0
    assert "onnxruntime.providers[].options  (dict[str, str | int | float | bool])" in out
    assert "onnxruntime.accelerator_required  (bool)" in out
    assert "detect.accel_drivers  (list[str])" in out
