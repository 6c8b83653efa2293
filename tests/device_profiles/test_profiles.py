from __future__ import annotations

from pathlib import Path

import pytest

from wasmgate.device_profiles import (
    DeviceProfile,
    InvalidProfile,
    ProfileNotFound,
    list_profiles,
    load_all,
    load_profile,
    parse_profile,
)
from wasmgate.device_profiles.schema import field_docs

BASE = """
name = "x"
description = "d"
precision = ["int8", "fp32"]
[cpu]
arch = "x86_64"
[onnxruntime]
providers = [{ name = "CPUExecutionProvider" }]
"""


def test_all_required_profiles_ship() -> None:
    assert set(list_profiles()) >= {
        "generic-x86_64",
        "generic-arm64",
        "raspberry-pi-5",
        "nvidia-jetson-orin",
        "nxp-imx8mp",
        "rockchip-rk3588",
        "qualcomm-qcs6490",
        "intel-core-ultra-npu",
        "aws-graviton3",
    }


@pytest.mark.parametrize("profile", load_all(), ids=lambda p: p.name)
def test_profiles_are_complete(profile: DeviceProfile) -> None:
    assert profile.name in list_profiles()
    # fp32 is the last resort (every model has an fp32 variant), never merely listed.
    assert profile.precision[-1] == "fp32"
    assert profile.onnxruntime.providers
    generic = profile.name.startswith("generic-")
    assert generic == (not profile.detect.has_identity)


def test_graviton3_is_the_bf16_profile() -> None:
    graviton = load_profile("aws-graviton3")
    # INT4 weight-only first (a bundle ships it only for matmul-heavy models), then BF16.
    assert graviton.precision[:2] == ["int4", "bf16"]
    assert {"bf16", "i8mm"} <= set(graviton.cpu.features)
    assert [p.name for p in load_all() if "bf16" in p.precision] == ["aws-graviton3"]


def test_int4_only_where_the_cpu_ep_runs_matmulnbits() -> None:
    # MatMulNBits is an ONNX Runtime CPU-EP kernel: NPU/GPU boards never ask for int4.
    with_int4 = {p.name for p in load_all() if "int4" in p.precision}
    assert with_int4 == {"generic-x86_64", "generic-arm64", "raspberry-pi-5", "aws-graviton3"}
    for name in with_int4:
        assert load_profile(name).onnxruntime.providers[0].name == "CPUExecutionProvider"


def test_load_by_path_and_unknown_names(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(BASE)
    assert load_profile(path).name == "x"
    assert load_profile(str(path)).name == "x"
    with pytest.raises(ProfileNotFound, match=r"no device profile named 'nope'.*generic-x86_64"):
        load_profile("nope")
    with pytest.raises(ProfileNotFound, match="no profile file at"):
        load_profile(tmp_path / "missing.toml")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ('\nextra = "x"', "extra: Extra inputs are not permitted"),
        ('\nsession_config = { "session.intra_op.alow_spinning" = "0" }', "unknown session config"),
        (
            '\nsession_config = { "session.disable_cpu_ep_fallback" = "1" }',
            "managed by the runtime: set onnxruntime.accelerator_required",
        ),
        ("\naccelerator_required = true", "conflicts with CPUExecutionProvider"),
        ("\ngraph_optimization_level = 3", "graph_optimization_level"),
    ],
)
def test_invalid_onnxruntime_settings(change: str, message: str) -> None:
    with pytest.raises(InvalidProfile, match=message):
        parse_profile(BASE + change, "bad.toml")


def test_unknown_provider_and_option() -> None:
    text = BASE.replace("CPUExecutionProvider", "QnnExecutionProvider")
    with pytest.raises(InvalidProfile, match="unknown execution provider 'QnnExecutionProvider'"):
        parse_profile(text)
    text = BASE.replace(
        '{ name = "CPUExecutionProvider" }',
        '{ name = "QNNExecutionProvider", options = { backend = "htp" } }',
    )
    with pytest.raises(InvalidProfile, match="QNNExecutionProvider: unknown option"):
        parse_profile(text)


def test_bf16_only_on_arm64_with_the_feature() -> None:
    text = BASE.replace('["int8", "fp32"]', '["bf16", "fp32"]')
    with pytest.raises(InvalidProfile, match=r"bf16.*aarch64"):
        parse_profile(text)


def test_not_toml() -> None:
    with pytest.raises(InvalidProfile, match=r"bad\.toml: not valid TOML"):
        parse_profile("name = ", "bad.toml")


def test_every_field_is_documented() -> None:
    rows = field_docs()
    assert len(rows) > 30
    undocumented = [path for path, _, doc in rows if not doc]
    assert not undocumented
