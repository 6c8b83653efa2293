"""Every OpenVINO option name the profile schema accepts is one the real EP accepts, and a
name outside the schema is one the EP refuses (it then falls back to the CPU EP): the
schema's list is tested against `onnxruntime-openvino`, not copied from its docs."""

from __future__ import annotations

import json
import subprocess

from tests.runtime.openvino.ovkit import environment
from wasmgate.device_profiles.ort import KNOWN_PROVIDER_OPTIONS, MANAGED_PROVIDER_OPTIONS

OV = "OpenVINOExecutionProvider"
VALUES = {  # a valid value per option, device CPU
    "device_type": "CPU", "precision": "FP32", "num_of_threads": "1", "num_streams": "1",
    "load_config": "{}", "enable_qdq_optimizer": "false", "disable_dynamic_shapes": "false",
    "cache_dir": "",
}  # fmt: skip

PROBE = """
import json, sys
import onnxruntime as ort
from wasmgate.guest_adapters.examples import models_dir
model = str(models_dir() / "digits-fp32.onnx")
out = {}
for name, value in json.loads(sys.argv[1]).items():
    so = ort.SessionOptions()
    so.log_severity_level = 4
    try:
        ep = ("OpenVINOExecutionProvider", {name: value})
        session = ort.InferenceSession(model, so, providers=[ep])
        out[name] = session.get_providers()[0]
    except Exception as e:
        out[name] = "error: " + str(e)
print(json.dumps(out))
"""


def test_schema_option_names_are_the_eps() -> None:
    names = KNOWN_PROVIDER_OPTIONS[OV] | set(MANAGED_PROVIDER_OPTIONS[OV])
    assert names <= set(VALUES), "give the new option a value here"
    options = {n: VALUES[n] for n in names} | {"device_typ": "CPU"}
    done = subprocess.run(
        [environment("WASMGATE_OPENVINO_PYTHON"), "-c", PROBE, json.dumps(options)],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    said = done.stdout + done.stderr  # ORT prints its fallback on stdout
    runs_on = json.loads(done.stdout.splitlines()[-1])
    for name in names:  # accepted: the session runs on OpenVINO
        assert runs_on[name] == OV, (name, runs_on[name])
    assert runs_on["device_typ"] == "CPUExecutionProvider"  # refused by the EP: fell back
    assert "Invalid OpenVINO EP option: device_typ" in said
