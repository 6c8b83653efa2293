"""docs/openvino.md's install steps are what CI builds its OpenVINO environment with."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[3]


def _steps() -> list[str]:
    text = (ROOT / "docs" / "openvino.md").read_text()
    block = re.search(r"```sh\n(python3 -m venv /opt/wasmgate-openvino\n.*?)```", text, re.DOTALL)
    assert block, "the install block of docs/openvino.md"
    return block.group(1).splitlines()


def test_the_doc_and_the_setup_script_take_the_same_steps() -> None:
    steps = _steps()
    assert steps[1:] == [
        "/opt/wasmgate-openvino/bin/pip install .",
        "/opt/wasmgate-openvino/bin/pip uninstall -y onnxruntime",
        "/opt/wasmgate-openvino/bin/pip install onnxruntime-openvino==1.24.1",
    ]
    script = (ROOT / ".ci" / "openvino-setup").read_text()
    pin = re.search(r'OV_PIN="(.+)"', script)
    assert pin
    assert steps[3].endswith(f" {pin.group(1)}")
    order = [
        script.index('pip install -q -e "$top"'),
        script.index("pip uninstall -q -y onnxruntime"),
        script.index('pip install -q "$OV_PIN"'),
    ]
    assert order == sorted(order)
