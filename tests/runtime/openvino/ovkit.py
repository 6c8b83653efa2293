"""What the OpenVINO tests share: the Intel gateway environments CI provides, a profile
choosing OpenVINO on the CPU, a signed bundle of the digits and MobileNet models, and V2
calls.

The environments come from `.ci/openvino-setup` (run by .ci/run): ``WASMGATE_OPENVINO_PYTHON``
is a venv whose `onnxruntime` is the `onnxruntime-openvino` build, ``WASMGATE_OV_PLUGIN_PATH``
a folder holding the `onnxruntime-ep-openvino` plugin package. Without them (a developer's
machine) the tests skip with the command that provides them; under CI they fail instead.
"""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.fixtures.models import ModelFiles
from wasmgate.device_profiles import load_profile
from wasmgate.signing.build import build_bundle
from wasmgate.signing.keys import generate_key
from wasmgate.signing.trust import TrustStore

SETUP = "eval export $(.ci/openvino-setup)"


def environment(variable: str) -> str:
    """The path CI exports in ``variable``; a skip (a failure under CI) when it is missing."""
    value = os.environ.get(variable, "")
    if value and Path(value).exists():
        return value
    what = f"{variable} is not set (or missing): run `{SETUP}` first"
    if os.environ.get("CI"):
        pytest.fail(f"CI must provide the OpenVINO environments: {what}")
    pytest.skip(what)


def packaged_openvino_options(profile: str) -> dict[str, Any]:
    """A packaged profile's OpenVINO options with the device swapped to CPU (no NPU here)."""
    for ep in load_profile(profile).onnxruntime.providers:
        if ep.name == "OpenVINOExecutionProvider":
            return {**ep.options, "device_type": "CPU"}
    raise AssertionError(f"{profile} lists no OpenVINOExecutionProvider")


def openvino_profile(path: Path, options: dict[str, Any]) -> Path:
    """A profile file: OpenVINO with ``options``, then the CPU EP."""
    pairs = ", ".join(f"{k} = {json.dumps(v)}" for k, v in options.items())
    path.write_text(
        'name = "ov-test"\ndescription = "OpenVINO on the CPU"\n'
        'precision = ["int8", "fp32"]\n[cpu]\narch = "x86_64"\n[onnxruntime]\n'
        f'providers = [{{ name = "OpenVINOExecutionProvider", options = {{ {pairs} }} }}, '
        '{ name = "CPUExecutionProvider" }]\n'
    )
    return path


MODELS = {  # served name -> (variant, ModelFiles attribute, input, output, shape of a row)
    "digits-fp32": ("fp32", "digits_fp32", "input", "probs", (64,)),
    "digits-int8": ("int8", "digits_int8", "input", "probs", (64,)),
    "mobilenet": ("fp32", "mobilenet_fp32", "input", "logits", (3, 128, 128)),
}


def signed_bundle(
    root: Path, models: ModelFiles, names: tuple[str, ...] = tuple(MODELS)
) -> tuple[Path, Path]:
    """(bundle, trust file): the models ``names`` of `MODELS` in one signed bundle."""
    src = root / "src"
    src.mkdir(parents=True)
    text = 'name = "ov"\nversion = 1\n'
    for name in names:
        variant, attr, inp, out, row = MODELS[name]
        dims = ", ".join(str(d) for d in (-1, *row))
        text += (
            f'\n[[models]]\nname = "{name}"\nformat = "onnx"\n'
            f'variants = {{ {variant} = "{getattr(models, attr)}" }}\n'
            f'inputs = [{{ name = "{inp}", datatype = "FP32", shape = [{dims}] }}]\n'
            f'outputs = [{{ name = "{out}", datatype = "FP32", shape = [-1, '
            f"{10 if name.startswith('digits') else 1000}] }}]\n"
        )
    (src / "bundle.toml").write_text(text)
    key = generate_key()
    bundles = root / "data" / "bundles"
    bundles.mkdir(parents=True)
    bundle = bundles / "ov-1.wgb"
    build_bundle(src, key, bundle)
    trust = root / "trust.json"
    TrustStore.empty().with_signer(key.verify_key, ["*"], {}).save(trust)
    return bundle, trust


def infer(url: str, model: str, x: np.ndarray) -> np.ndarray:
    """POST a V2 request with ``x`` as the model's input; its output as an array."""
    inp, out = MODELS[model][2], MODELS[model][3]
    body = {"inputs": [{"name": inp, "datatype": "FP32", "shape": list(x.shape),
                        "data": x.ravel().tolist()}]}  # fmt: skip
    req = urllib.request.Request(
        f"{url}/v2/models/{model}/infer",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        answer = json.loads(r.read())
    (tensor,) = [o for o in answer["outputs"] if o["name"] == out]
    return np.asarray(tensor["data"], np.float32).reshape(tensor["shape"])


def model_rows(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``/v1/status`` models by name."""
    return {row["name"]: row for row in status["models"] if row["kind"] == "model"}
