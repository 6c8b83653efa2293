"""``[samples]`` with an OCI registry: one sink at a time (a clear error, exit 2, for two),
and ``wasmgate doctor``'s check of the samples' registry against a real one."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.net import free_port
from tests.fixtures.registry import Registry
from wasmgate.runtime.cli._registry_probe import probe_samples_registry
from wasmgate.runtime.errors import ConfigError
from wasmgate.runtime.ops.config import RegistrySettings, SamplesSettings, load_settings
from wasmgate.typed import replace


def _config(tmp: Path, samples: dict[str, object]) -> Path:
    lines = ["[samples]", *(f"{k} = {json.dumps(v)}" for k, v in samples.items())]
    path = tmp / "wasmgate.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(
    ("samples", "problem"),
    [
        ({"oci_repository": "lab/Samples"}, "is not HOST[:PORT]/REPO"),
        ({"oci_repository": "lab:5000/samples:v1"}, "is not HOST[:PORT]/REPO"),
        ({"oci_repository": "lab:5000/s", "http_path": "/v1/s"}, "both set: samples go to one"),
        ({"oci_repository": "lab:5000/s", "mqtt": True}, "mqtt = true and oci_repository"),
        ({"http_path": "/v1/s", "mqtt": True}, "mqtt = true and http_path"),
    ],
)
def test_one_sink_at_a_time_and_a_clear_error(
    tmp_path: Path, samples: dict[str, object], problem: str
) -> None:
    path = _config(tmp_path, samples)
    with pytest.raises(ConfigError, match=re.escape(problem)) as err:
        load_settings(path)
    assert str(err.value).startswith(f"{path}: samples")


@pytest.mark.parametrize(
    ("samples", "sink"),
    [
        ({}, "mqtt"),
        ({"mqtt": False}, None),
        ({"oci_repository": "lab:5000/s"}, "oci"),
        ({"oci_repository": "[::1]:5000/a/b", "mqtt": False}, "oci"),
        ({"http_path": "/v1/s"}, "http"),
    ],
)
def test_the_configured_sink(tmp_path: Path, samples: dict[str, object], sink: str | None) -> None:
    assert load_settings(_config(tmp_path, samples)).samples.sink == sink


def test_serve_with_two_sinks_exits_2(tmp_path: Path) -> None:
    path = _config(tmp_path, {"oci_repository": "lab:5000/s", "http_path": "/v1/s"})
    proc = subprocess.run(
        [sys.executable, "-m", "wasmgate", "serve", "--config", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert "http_path and oci_repository are both set" in line


def test_doctor_checks_the_samples_registry(registry: Registry) -> None:
    reg = RegistrySettings(insecure=True)
    samples = SamplesSettings(oci_repository=f"{registry.address}/lab/samples")
    assert probe_samples_registry(SamplesSettings(), reg).level == "skip"
    ok = probe_samples_registry(samples, reg)
    assert (ok.check, ok.level) == ("samples registry", "ok")
    assert registry.address in ok.message
    elsewhere = replace(reg, host="other:5000", username="ci", password="x")
    warned = probe_samples_registry(samples, elsewhere)
    assert warned.level == "warn"
    assert "registry.host" in (warned.fix or "")
    down = SamplesSettings(oci_repository=f"127.0.0.1:{free_port()}/lab/samples")
    failed = probe_samples_registry(down, reg)
    assert failed.level == "error"
    assert "samples.oci_repository" in (failed.fix or "")
