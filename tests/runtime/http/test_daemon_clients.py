"""tritonclient and the kserve SDK against ``wasmgate serve`` as a subprocess (demo bundles).

The daemon here is the real composition: signed bundles, the sandbox, ORT sessions chosen by
the host's device profile, the batcher. These tests only check what the clients see.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as triton

from tests.fixtures.daemon import Daemon
from tests.fixtures.models import ModelFiles
from tests.runtime.http.test_kserve import kserve_check
from tests.runtime.http.test_metrics import value
from tests.runtime.stack import host_profile_name
from wasmgate.guest_adapters.examples import example_dir
from wasmgate.runtime.bundles.demo import prepare_demo


@pytest.fixture
def daemon(tmp_path: Path, daemon_factory: Callable[..., Daemon]) -> Daemon:
    setup = prepare_demo(tmp_path / "demo-data")
    paths = {
        "bundle_dir": setup.bundle_dir,
        "trust_file": setup.trust_file,
        "state_dir": setup.state_dir,
        "cache_dir": setup.cache_dir,
    }
    return daemon_factory(config={"paths": paths, "profile": host_profile_name()})


@pytest.fixture
def client(daemon: Daemon) -> Iterator[triton.InferenceServerClient]:
    client = triton.InferenceServerClient(daemon.url.removeprefix("http://"))
    try:
        yield client
    finally:
        client.close()


def digits_input(x: np.ndarray[Any, Any], binary: bool) -> triton.InferInput:
    tensor = triton.InferInput("input", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x, binary_data=binary)
    return tensor


def test_tritonclient_against_the_daemon(
    client: triton.InferenceServerClient, daemon: Daemon, models: ModelFiles
) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("digits-mlp")
    meta = client.get_model_metadata("digits-mlp")
    assert meta["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 64]}]
    assert client.get_model_config("digits-mlp")["max_batch_size"] > 0
    data = np.load(models.digits_test)
    x, y = data["x"][:20].astype(np.float32), data["y"][:20]
    probs = {}
    for binary in (False, True):
        outputs = [triton.InferRequestedOutput("probs", binary_data=binary)]
        result = client.infer("digits-mlp", [digits_input(x, binary)], outputs=outputs)
        probs[binary] = result.as_numpy("probs")
    np.testing.assert_allclose(probs[True], probs[False], rtol=1e-6)
    assert (np.argmax(probs[True], axis=1) == y).sum() >= 18

    noise = (example_dir("digits-pipeline") / "samples" / "noise.json").read_bytes()
    payload = triton.InferInput("payload", [1], "BYTES")
    payload.set_data_from_numpy(np.array([noise], dtype=object))
    answer = client.infer("digits-pipeline", [payload]).as_numpy("answer")
    assert answer is not None
    assert json.loads(answer[0])["is_digit"] is False

    # The digits adapter is a V2 model too (one BYTES in, one BYTES out), beside its model.
    pixels = triton.InferInput("payload", [1], "BYTES")
    pixels.set_data_from_numpy(np.array([json.dumps(x[0].tolist()).encode()], dtype=object))
    digit = client.infer("digits", [pixels]).as_numpy("answer")
    assert digit is not None
    assert json.loads(digit[0])["digit"] == y[0]

    with urllib.request.urlopen(f"{daemon.url}/metrics", timeout=10) as response:
        text = response.read().decode()
    labels = {"transport": "http", "kind": "model", "name": "digits-mlp", "source": "local"}
    assert value(text, "wasmgate_requests_total", **labels) == 2


def test_kserve_sdk_against_the_daemon(daemon: Daemon) -> None:
    outputs = kserve_check(daemon.url, "digits-mlp", "input", 2, 64)
    probs = np.array(outputs["binary"]["probs"], dtype=np.float32)
    assert probs.shape == (2, 10)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=0.02)  # int8 softmax
    np.testing.assert_allclose(np.array(outputs["json"]["probs"], np.float32), probs, rtol=1e-6)
