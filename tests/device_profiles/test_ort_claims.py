"""Every profile claim is tested or marked: managed OpenVINO options, plugin entries, and
`wasmgate profiles show` naming each EP's options as tested or unverified with a source."""

from __future__ import annotations

import pytest

from wasmgate.device_profiles import InvalidProfile, load_all, parse_profile
from wasmgate.device_profiles.ort import OPTION_SOURCES, option_source
from wasmgate.runtime.cli import main

HEAD = 'name = "t"\ndescription = "t"\nprecision = ["fp32"]\n[cpu]\narch = "x86_64"\n'


def _profile(onnxruntime: str) -> str:
    return HEAD + "[onnxruntime]\n" + onnxruntime


def test_openvino_cache_dir_is_the_runtimes() -> None:
    text = _profile(
        'providers = [{ name = "OpenVINOExecutionProvider", options = { cache_dir = "/tmp/x" } }]'
    )
    with pytest.raises(InvalidProfile, match="OpenVINOExecutionProvider: option cache_dir is "
                       "managed by the runtime"):  # fmt: skip
        parse_profile(text)


def test_a_misspelled_openvino_option_names_option_and_ep() -> None:
    text = _profile(
        'providers = [{ name = "OpenVINOExecutionProvider", options = { device_typ = "CPU" } }]'
    )
    with pytest.raises(InvalidProfile, match=r"OpenVINOExecutionProvider: unknown option\(s\) "
                       r"device_typ"):  # fmt: skip
        parse_profile(text)


@pytest.mark.parametrize(
    ("plugin", "error"),
    [
        ('{ ep_name = "OpenVINOExecutionProvider" }', "exactly one of package and library"),
        (
            '{ ep_name = "X", package = "p", library = "/l.so" }',
            "exactly one of package and library",
        ),
        ('{ ep_name = "X", library = "rel.so" }', "absolute path"),
        ('{ ep_name = "X", package = "p", device_types = ["TPU"] }', "Invalid enum value 'TPU'"),
        (
            '{ ep_name = "OpenVINOExecutionProvider", package = "p", options = { bogus = "1" } }',
            "OpenVINOExecutionProvider: unknown option.s. bogus",
        ),
    ],
)
def test_bad_plugin_entries_are_refused(plugin: str, error: str) -> None:
    text = _profile(f'providers = [{{ name = "CPUExecutionProvider" }}]\nplugins = [{plugin}]\n')
    with pytest.raises(InvalidProfile, match=error):
        parse_profile(text)


def test_a_bad_selection_policy_is_refused() -> None:
    text = _profile('providers = [{ name = "CPUExecutionProvider" }]\nselection_policy = "FAST"\n')
    with pytest.raises(InvalidProfile, match="selection_policy"):
        parse_profile(text)


def test_every_packaged_provider_is_tested_or_has_a_source() -> None:
    for profile in load_all():
        for ep in profile.onnxruntime.providers:
            assert ep.name in OPTION_SOURCES, (profile.name, ep.name)


def test_show_marks_untested_options_with_their_source(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profiles", "show", "qualcomm-qcs6490"]) == 0
    out = capsys.readouterr().out
    source = option_source("QNNExecutionProvider")
    assert "QNNExecutionProvider (" in out
    assert f"[unverified: options from {source}]" in out
    assert main(["profiles", "show", "intel-core-ultra-npu"]) == 0
    out = capsys.readouterr().out
    assert "OpenVINOExecutionProvider (device_type=NPU" in out
    assert "[options tested in CI against the real EP]" in out
    assert "device_type NPU not run on an NPU" in out
