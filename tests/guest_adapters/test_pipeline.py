"""The digits-pipeline example: the gate answers non-digits early, digits go to the classifier."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.fixtures.models import ModelFiles
from tests.guest_adapters.helpers import Runner, make_runner
from wasmgate.sandbox import SandboxEngine


@pytest.fixture(scope="module")
def pipeline(engine: SandboxEngine, models: ModelFiles) -> Runner:
    return make_runner(engine, models, "digits-pipeline")


def test_gate_then_classifier_on_the_gate_test_set(pipeline: Runner, models: ModelFiles) -> None:
    gate = np.load(models.gate_test)
    digits = np.load(models.digits_test)
    x, is_digit = gate["x"], gate["y"]
    correct_gate = 0
    for i, row in enumerate(x):
        res, provider = pipeline.run([float(v) for v in row])
        assert res.status == 0, res.output
        answer = json.loads(res.output)
        correct_gate += answer["is_digit"] == bool(is_digit[i])
        if answer["is_digit"]:
            assert provider.loaded == ["pipeline-gate", "pipeline-digits"]
            assert 0 <= answer["digit"] <= 9
        else:
            assert provider.loaded == ["pipeline-gate"]  # the classifier never ran
            assert set(answer) == {"is_digit", "gate"}
    assert correct_gate / len(x) >= 0.99  # the gate model itself: 1.0
    # The first 450 gate-test images are the held-out digits, in the same order.
    np.testing.assert_array_equal(x[: len(digits["x"])], digits["x"])


def test_digit_answer_matches_the_digits_example(pipeline: Runner, models: ModelFiles) -> None:
    data = np.load(models.digits_test)
    hits = 0
    for row, label in zip(data["x"][:100], data["y"][:100], strict=True):
        res, _ = pipeline.run({"pixels": [float(v) for v in row]})
        hits += json.loads(res.output).get("digit") == int(label)
    assert hits >= 95


def test_bad_input_runs_no_model(pipeline: Runner) -> None:
    res, provider = pipeline.run(b"[1, 2, 3]")
    assert res.status == 1
    assert res.output == b"expected an array of 64 numbers (8x8, 0..16)"
    assert provider.loaded == []
