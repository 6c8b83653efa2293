"""The Zig example: built by ``zig build-exe`` through the same build step, same answers as C."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.fixtures.models import ModelFiles
from tests.guest_adapters.helpers import Runner, make_runner
from wasmgate.sandbox import SandboxEngine


@pytest.fixture(scope="module")
def zig(engine: SandboxEngine, models: ModelFiles) -> Runner:
    return make_runner(engine, models, "digits-zig")


@pytest.fixture(scope="module")
def c(engine: SandboxEngine, models: ModelFiles) -> Runner:
    return make_runner(engine, models, "digits")


def test_same_digits_as_the_c_adapter(zig: Runner, c: Runner, models: ModelFiles) -> None:
    data = np.load(models.digits_test)
    hits = 0
    for row, label in zip(data["x"], data["y"], strict=True):
        payload = [int(v) for v in row]
        from_zig, _ = zig.run(payload)
        from_c, _ = c.run(payload)
        assert from_zig.status == from_c.status == 0
        a, b = json.loads(from_zig.output), json.loads(from_c.output)
        assert a["digit"] == b["digit"]
        assert abs(a["confidence"] - b["confidence"]) < 1e-6
        assert from_zig.fallback_reason == from_c.fallback_reason
        hits += a["digit"] == int(label)
    assert hits / len(data["y"]) >= 0.97  # the model: 0.9733


def test_raw_bytes_and_bad_input(zig: Runner, models: ModelFiles) -> None:
    row = np.load(models.digits_test)["x"][0]
    res, _ = zig.run(bytes(round(float(v) * 255 / 16) for v in row))
    assert json.loads(res.output)["digit"] == int(np.load(models.digits_test)["y"][0])
    for bad in (b"", b"[1, 2, 3]", b"[" * 10_000, json.dumps([20] * 64).encode(), b"{}"):
        res, provider = zig.run(bad)
        assert res.status == 1, bad
        assert provider.loaded == []
