from __future__ import annotations

from pathlib import Path

import pytest

from tests.device_profiles.trees import NEAR_MISSES, TREES, build_tree, write_tree
from wasmgate.device_profiles import DetectionError, detect, list_profiles, read_facts

EXPECTED_EVIDENCE = {
    "generic-x86_64": "arch x86_64",
    "generic-arm64": "arch aarch64",
    "raspberry-pi-5": "device-tree compatible brcm,bcm2712",
    "nvidia-jetson-orin": "device-tree compatible nvidia,tegra234",
    "nxp-imx8mp": "path /dev/galcore",
    "rockchip-rk3588": "accel driver rocket",
    "qualcomm-qcs6490": "path /dev/fastrpc-cdsp",
    "intel-core-ultra-npu": "accel driver intel_vpu",
    "aws-graviton3": "CPU part 0xd40",
    "ti-am62a": "device-tree compatible ti,am62a7",
    "amd-kria-k26": "device-tree compatible xlnx,zynqmp-smk-k26",
    "google-coral-devboard": "path /dev/apex_0",
}


def test_every_profile_has_a_fixture_tree() -> None:
    assert set(TREES) == set(list_profiles()) == set(EXPECTED_EVIDENCE)


@pytest.mark.parametrize("name", sorted(TREES))
def test_detects_each_profile_from_its_tree(name: str, tmp_path: Path) -> None:
    detection = detect(build_tree(name, tmp_path))
    assert detection.profile.name == name
    assert EXPECTED_EVIDENCE[name] in detection.evidence
    assert detection.candidates[0][0] == name


@pytest.mark.parametrize("case", sorted(NEAR_MISSES))
def test_near_misses_fall_back_to_generic(case: str, tmp_path: Path) -> None:
    tree, expected = NEAR_MISSES[case]
    assert detect(write_tree(tree, tmp_path)).profile.name == expected


def test_facts_are_parsed(tmp_path: Path) -> None:
    facts = read_facts(build_tree("rockchip-rk3588", tmp_path))
    assert facts.arch == "aarch64"
    assert facts.cpu_parts == {"0xd05", "0xd0b"}
    assert "asimddp" in facts.cpu_flags
    assert facts.dt_model == "Radxa ROCK 5B"
    assert facts.dt_compatible == ("radxa,rock-5b", "rockchip,rk3588")
    assert facts.accel_drivers == {"rocket"}


def test_graviton3_evidence_lists_bf16(tmp_path: Path) -> None:
    detection = detect(build_tree("aws-graviton3", tmp_path))
    assert any("bf16" in e for e in detection.evidence)
    assert "DMI 'Amazon EC2 c7g.large'" in detection.evidence


def test_empty_tree_matches_nothing(tmp_path: Path) -> None:
    with pytest.raises(DetectionError, match="no device profile matches"):
        detect(tmp_path)


def test_this_machine_is_detected() -> None:
    detection = detect()
    assert detection.profile.cpu.arch == detection.facts.arch
