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
from wasmgate.typed import convert, plain, replace

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
        ('\nextra = "x"', r"bad\.toml: onnxruntime\.extra: unknown field"),
        (
            '\nsession_config = { "session.intra_op.alow_spinning" = "0" }',
            r"onnxruntime\.session_config: unknown session config key 'session\.intra_op\.alow",
        ),
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


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (BASE.replace('name = "x"', 'name = "x"\nnmae = "y"'), "nmae"),
        (BASE.replace('arch = "x86_64"', 'arch = "x86_64"\nflags = []'), r"cpu\.flags"),
        (
            BASE.replace(
                '{ name = "CPUExecutionProvider" }', '{ name = "CPUExecutionProvider", opts = {} }'
            ),
            r"onnxruntime\.providers\.0\.opts",
        ),
        (BASE + "[batching]\nmax_batch = 3\n", r"batching\.max_batch"),
        (BASE + "[detect]\npriorty = 5\n", r"detect\.priorty"),
        (
            BASE + '[tflite]\ndelegates = [{ name = "a", library = "l", opts = {} }]\n',
            r"tflite\.delegates\.0\.opts",
        ),
    ],
)
def test_unknown_keys_are_refused_at_every_level_by_name(text: str, where: str) -> None:
    with pytest.raises(InvalidProfile, match=rf"^bad\.toml: {where}: unknown field"):
        parse_profile(text, "bad.toml")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ('\n[tflite]\nthreads = "many"', r"tflite\.threads: Expected `int`"),
        ("\nintra_op_threads = true", r"onnxruntime\.intra_op_threads: Expected `int`"),
        ("\nintra_op_threads = 1.5", r"onnxruntime\.intra_op_threads: Expected `int`"),
        ("\noptimized_model_cache = []", r"onnxruntime\.optimized_model_cache: Expected `bool`"),
        (
            '\nsession_config = { "session.x64quantprecision" = 1 }',
            r"onnxruntime\.session_config\[\.\.\.\]: Expected `str`",
        ),
        ("\nintra_op_threads = -1", r"onnxruntime\.intra_op_threads: Expected `int` >= 0"),
        ("\n[batching]\nmax_batch_size = 0", r"batching\.max_batch_size: Expected `int` >= 1"),
        ('\n[detect]\ndt_model = "rk3588"', r"detect\.dt_model: Expected `array`"),
    ],
)
def test_wrong_types_and_bounds_are_refused(change: str, message: str) -> None:
    with pytest.raises(InvalidProfile, match=rf"^bad\.toml: {message}"):
        parse_profile(BASE + change, "bad.toml")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (BASE.replace('name = "x"', 'name = "X"'), r"name: Expected `str` matching regex"),
        (BASE.replace('name = "x"', 'name = "x\\n"'), r"name: Expected `str` matching regex"),
        (BASE.replace('"int8", "fp32"', '"int9"'), r"precision\.0: Invalid enum value 'int9'"),
        (BASE.replace('"int8", "fp32"', ""), r"precision: Expected `array` of length >= 1"),
        (BASE.replace('"int8", "fp32"', '"int8", "int8"'), r"\(top\): precision .* twice"),
        (BASE.replace('x86_64"', 'x86_64"\nfeatures = "avx2"'), r"cpu\.features: Expected `array`"),
        (
            BASE.replace('[cpu]\narch = "x86_64"\n', ""),
            r"\(top\): Object missing required field `cpu`",
        ),
    ],
)
def test_top_level_fields_are_checked(text: str, message: str) -> None:
    with pytest.raises(InvalidProfile, match=rf"^bad\.toml: {message}"):
        parse_profile(text, "bad.toml")


def test_numbers_convert_as_they_always_did() -> None:
    # Profiles were read leniently (pydantic's default) and still are: "4" and 4.0 are 4.
    text = BASE + '\nintra_op_threads = "4"\ninter_op_threads = 2.0'
    ort = parse_profile(text).onnxruntime
    assert (ort.intra_op_threads, ort.inter_op_threads) == (4, 2)
    assert type(ort.inter_op_threads) is int


def test_option_values_keep_their_toml_types() -> None:
    text = BASE.replace(
        '{ name = "CPUExecutionProvider" }',
        '{ name = "QNNExecutionProvider", options = { backend_type = "htp", device_id = 1, '
        "vtcm_mb = 2.5, enable_htp_fp16_precision = true } }",
    )
    options = parse_profile(text).onnxruntime.providers[0].options
    assert options == {
        "backend_type": "htp", "device_id": 1, "vtcm_mb": 2.5, "enable_htp_fp16_precision": True
    }  # fmt: skip
    assert [type(v) for v in options.values()] == [str, int, float, bool]


@pytest.mark.parametrize("profile", load_all(), ids=lambda p: p.name)
def test_profiles_survive_a_json_round_trip(profile: DeviceProfile) -> None:
    assert convert(plain(profile), DeviceProfile) == profile


def test_cross_field_checks_hold_when_built_or_copied() -> None:
    """The checks run on construction and on `replace` too, not only when a file is read."""
    ort = parse_profile(BASE).onnxruntime
    with pytest.raises(ValueError, match="managed by the runtime"):
        replace(ort, session_config={"session.disable_cpu_ep_fallback": "1"})
    with pytest.raises(ValueError, match="conflicts with CPUExecutionProvider"):
        replace(ort, accelerator_required=True)
    with pytest.raises(ValueError, match="listed twice"):
        replace(ort, providers=[*ort.providers, *ort.providers])
    profile = parse_profile(BASE)
    with pytest.raises(ValueError, match="bf16"):
        replace(profile, precision=["bf16", "fp32"])
    assert replace(ort, graph_optimization_level="basic").graph_optimization_level == "basic"


def test_schema_rows_name_types_and_nested_tables() -> None:
    rows = {path: kind for path, kind, _ in field_docs()}
    assert rows["onnxruntime"] == "table"
    assert rows["onnxruntime.providers"] == "array of tables"
    assert rows["onnxruntime.providers[].options"] == "dict[str, str | int | float | bool]"
    assert rows["cpu.arch"] == "Literal['x86_64', 'aarch64']"
    assert rows["tflite.threads"] == "int"
    assert rows["detect.paths"] == "list[str]"
