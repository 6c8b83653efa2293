"""The plugin EP path on stock onnxruntime: `onnxruntime-ep-openvino` registered by a real
daemon, its devices enumerated and chosen by type, vendor or ORT's policy, never a crash.

The plugin's factory offers a device only on Intel CPUs: on one (`GenuineIntel` in
/proc/cpuinfo) the digits model runs 100 % on it; elsewhere the daemon says "registered, no
device" and serves on the CPU EP. Either way what happened is in the model's notes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.daemon import Daemon
from tests.fixtures.models import ModelFiles
from tests.runtime.openvino.ovkit import environment, model_rows, signed_bundle

OV = "OpenVINOExecutionProvider"
INTEL = "GenuineIntel" in Path("/proc/cpuinfo").read_text()


def _profile(path: Path, plugin: dict[str, Any], policy: str | None = None) -> Path:
    pairs = ", ".join(f"{k} = {json.dumps(v)}" for k, v in plugin.items())
    text = (
        'name = "ov-plugin"\ndescription = "OpenVINO plugin EP"\nprecision = ["fp32"]\n'
        '[cpu]\narch = "x86_64"\n[onnxruntime]\nproviders = [{ name = "CPUExecutionProvider" }]\n'
        f"plugins = [{{ ep_name = {json.dumps(OV)}, {pairs} }}]\n"
    )
    path.write_text(text + (f'selection_policy = "{policy}"\n' if policy else ""))
    return path


@pytest.fixture
def serve(tmp_path: Path, models: ModelFiles) -> Iterator[Callable[..., dict[str, Any]]]:
    """Start a daemon (stock onnxruntime, the plugin on its path) with a plugin profile;
    the digits model's ``/v1/status`` row."""
    plugin_dir = environment("WASMGATE_OV_PLUGIN_PATH")
    _, trust = signed_bundle(tmp_path, models, ("digits-fp32",))
    started: list[Daemon] = []

    def start(plugin: dict[str, Any], policy: str | None = None) -> dict[str, Any]:
        work = tmp_path / f"d{len(started)}"
        work.mkdir()
        profile = _profile(work / "profile.toml", plugin, policy)
        paths = {"trust_file": trust, "data_dir": tmp_path / "data"}
        daemon = Daemon(work, {"paths": paths, "profile": profile}, env={"PYTHONPATH": plugin_dir})
        started.append(daemon)
        daemon.start(timeout=120)
        row: dict[str, Any] = model_rows(daemon.get_json("/v1/status"))["digits-fp32"]
        return row

    yield start
    for daemon in started:
        daemon.stop()


def test_registered_and_chosen_by_device_type_and_vendor(serve: Callable[..., Any]) -> None:
    row = serve({"package": "onnxruntime_ep_openvino", "device_types": ["NPU", "CPU"],
                 "vendor": "Intel"})  # fmt: skip
    if INTEL:
        assert f"plugin {OV}: CPU (Intel" in row["notes"], row["notes"]
        assert row["placement"].startswith(f"{OV} 100% ("), row
    else:
        assert f"plugin {OV} registered, no device" in row["notes"], row["notes"]
        assert row["placement"].startswith("CPUExecutionProvider 100% ("), row


def test_no_device_of_the_wanted_type_is_said_and_policy_decides(
    serve: Callable[..., Any],
) -> None:
    row = serve({"package": "onnxruntime_ep_openvino", "device_types": ["NPU"]}, "PREFER_CPU")
    assert f"plugin {OV} registered, no device" in row["notes"], row["notes"]
    if INTEL:  # what it offered is named
        assert "offered: CPU (Intel" in row["notes"], row["notes"]
    assert "device selection by ONNX Runtime's policy PREFER_CPU" in row["notes"]
    assert row["ready"], row
    assert row["placement"], row


def test_a_library_that_cannot_load_is_said_and_the_model_serves(
    serve: Callable[..., Any], tmp_path: Path
) -> None:
    bogus = tmp_path / "libnot_an_ep.so"
    bogus.write_bytes(b"\x7fELF not really")
    row = serve({"library": str(bogus), "device_types": ["CPU"]})
    assert f"plugin {OV}: {bogus} did not register" in row["notes"], row["notes"]
    assert row["placement"].startswith("CPUExecutionProvider 100% ("), row


def test_a_missing_package_names_its_install_line(serve: Callable[..., Any]) -> None:
    row = serve({"package": "onnxruntime_ep_nothing_here"})
    assert "pip install onnxruntime-ep-nothing-here" in row["notes"], row["notes"]
