"""A real daemon on the `onnxruntime-openvino` build serves with every node on OpenVINO.

The profile is the packaged `intel-core-ultra-npu` one's OpenVINO options with the device
swapped to CPU (no NPU here), so its option names run against the real EP. The daemon runs
in the OpenVINO venv (`WASMGATE_OPENVINO_PYTHON`); the reference outputs come from the CPU
EP of this process's stock onnxruntime, the same run. Then the blob cache: written at the
first start, loaded at the next, refused after tampering; and the same profile on stock
onnxruntime, where the missing accelerator is said, with its install line.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from tests.fixtures.daemon import Daemon
from tests.fixtures.models import ModelFiles
from tests.runtime.http.cdp import LOADED, chromium_page
from tests.runtime.openvino.ovkit import (
    MODELS,
    environment,
    infer,
    model_rows,
    openvino_profile,
    packaged_openvino_options,
    signed_bundle,
)

OV = "OpenVINOExecutionProvider"
Config = dict[str, Any]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, models: ModelFiles) -> tuple[Path, Config]:
    root = tmp_path_factory.mktemp("ov")
    _, trust = signed_bundle(root, models)
    profile = openvino_profile(root / "ov.toml", packaged_openvino_options("intel-core-ultra-npu"))
    return root, _config(trust, profile, root / "data")


def _config(trust: Path, profile: Path, data: Path) -> Config:
    return {"paths": {"trust_file": trust, "data_dir": data}, "profile": profile}


@pytest.fixture(scope="module")
def ov_daemon(site: tuple[Path, Config]) -> Iterator[Daemon]:
    root, config = site
    (root / "ovd").mkdir()
    daemon = Daemon(root / "ovd", config, python=environment("WASMGATE_OPENVINO_PYTHON"))
    daemon.start(timeout=120)
    yield daemon
    daemon.stop()


def _reference(path: Path, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    out: np.ndarray = session.run(None, {"input": x})[0]
    return out


def _output_step(path: Path) -> float:
    """One quantization step of a QDQ model's output: the scale of its last Dequantize."""
    model = onnx.load(str(path))
    (last,) = [n for n in model.graph.node if n.output[0] == model.graph.output[0].name]
    scales = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    return float(scales[last.input[1]])


def _inputs(models: ModelFiles, name: str, rows: int) -> np.ndarray:
    if name.startswith("digits"):
        x: np.ndarray = np.load(models.digits_test)["x"][:rows]
        return x
    return np.random.default_rng(7).standard_normal((rows, 3, 128, 128)).astype(np.float32)


def test_every_node_runs_on_openvino(ov_daemon: Daemon) -> None:
    rows = model_rows(ov_daemon.get_json("/v1/status"))
    assert set(rows) == set(MODELS)
    for name, row in rows.items():
        placement = row["placement"]
        assert placement.startswith(f"{OV} 100% ("), (name, placement, row["notes"])
        assert "CPUExecutionProvider" not in placement, (name, placement)


def test_the_status_page_says_where_models_run(ov_daemon: Daemon, tmp_path: Path) -> None:
    """Chromium renders the page: each model's "Runs on" is OpenVINO 100 %, with the
    placement and notes on hover."""

    async def cells() -> list[list[str]]:
        async with chromium_page(tmp_path) as page:
            await page.open(ov_daemon.url + "/", 1280, LOADED)
            found: list[list[str]] = await page.evaluate(
                "[...document.querySelectorAll('tr')].map(r => [r.textContent, "
                "[...r.querySelectorAll('span[title]')].map(s => s.title).join('|')])"
                ".filter(([t]) => t.includes('mobilenet') || t.includes('digits-'))"
            )
            return found

    rows = asyncio.run(cells())
    assert len(rows) >= len(MODELS), rows
    for text, titles in rows:
        assert "OpenVINO 100%" in text, text
        assert f"{OV} 100% (" in titles, titles


@pytest.mark.parametrize("name", list(MODELS))
def test_outputs_match_the_cpu_ep(ov_daemon: Daemon, models: ModelFiles, name: str) -> None:
    path = getattr(models, MODELS[name][1])
    for rows in (1, 8) if name.startswith("digits") else (1, 2):  # 2 MobileNet rows: ~1 MB JSON
        x = _inputs(models, name, rows)
        got, want = infer(ov_daemon.url, name, x), _reference(path, x)
        if name.endswith("int8"):  # rounding may differ by one step at a boundary
            assert np.abs(got - want).max() <= _output_step(path) * 1.0001
        else:
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


def test_blob_cache_written_reused_and_refused_after_tampering(
    ov_daemon: Daemon, site: tuple[Path, Config]
) -> None:
    root, _ = site
    folder = root / "data" / "cache" / "models" / "openvino"
    notes = {n: r["notes"] for n, r in model_rows(ov_daemon.get_json("/v1/status")).items()}
    assert all("OpenVINO blobs compiled and saved to cache" in n for n in notes.values()), notes
    entries = sorted(folder.glob("*.ovblobs"))
    assert len(entries) == len(MODELS)
    assert not [p for p in folder.iterdir() if p.name.startswith(".run-")]  # no loose blobs
    ov_daemon.stop()
    ov_daemon.start(timeout=120)
    notes = {n: r["notes"] for n, r in model_rows(ov_daemon.get_json("/v1/status")).items()}
    assert all("OpenVINO blobs loaded from cache" in n for n in notes.values()), notes
    ov_daemon.stop()
    for entry in entries:  # an attacker's edit: one byte of each compiled blob
        data = bytearray(entry.read_bytes())
        data[len(data) // 2] ^= 0x01
        entry.write_bytes(bytes(data))
    since = len(ov_daemon.log())
    ov_daemon.start(timeout=120)
    notes = {n: r["notes"] for n, r in model_rows(ov_daemon.get_json("/v1/status")).items()}
    assert all("OpenVINO blobs compiled and saved to cache" in n for n in notes.values()), notes
    assert ov_daemon.log()[since:].count("refused: not what this daemon derived") == len(MODELS)
    x = np.load(Path(__file__).parents[3] / "guest_adapters/models/digits-test.npz")["x"][:2]
    assert infer(ov_daemon.url, "digits-fp32", x).shape == (2, 10)  # rebuilt, serving


def test_a_foreign_blob_is_never_loaded(ov_daemon: Daemon, site: tuple[Path, Config]) -> None:
    """Another model's genuine entry copied over this one's: its tag binds it to its own
    source digest, so it is refused and this model's blobs are compiled again."""
    root, _ = site
    folder = root / "data" / "cache" / "models" / "openvino"
    ov_daemon.stop()
    entries = sorted(folder.glob("*.ovblobs"), key=lambda p: p.stat().st_size)
    small, large = entries[0], entries[-1]
    large.write_bytes(small.read_bytes())
    since = len(ov_daemon.log())
    ov_daemon.start(timeout=120)
    assert ov_daemon.log()[since:].count("refused: not what this daemon derived") == 1
    rows = model_rows(ov_daemon.get_json("/v1/status"))
    assert rows["mobilenet"]["placement"].startswith(f"{OV} 100% (")


def test_stock_onnxruntime_shows_the_missing_accelerator(
    site: tuple[Path, Config], tmp_path: Path
) -> None:
    root, config = site
    data = tmp_path / "data"
    daemon = Daemon(tmp_path, _config(config["paths"]["trust_file"], config["profile"], data))
    (data / "bundles").mkdir(parents=True)
    bundle = root / "data" / "bundles" / "ov-1.wgb"
    (data / "bundles" / bundle.name).write_bytes(bundle.read_bytes())
    daemon.start(timeout=120)
    try:
        for name, row in model_rows(daemon.get_json("/v1/status")).items():
            assert row["placement"].startswith("CPUExecutionProvider 100% ("), name
            assert f"{OV} not in this ONNX Runtime build" in row["notes"], row["notes"]
            assert "pip install onnxruntime-openvino" in row["notes"], row["notes"]
    finally:
        daemon.stop()
