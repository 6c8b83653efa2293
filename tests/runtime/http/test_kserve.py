"""The kserve SDK's REST client against the real server, run from the kserve virtualenv.

CI: ``python -m venv /opt/kserve-venv && /opt/kserve-venv/bin/pip install kserve`` and
``WASMGATE_KSERVE_PYTHON=/opt/kserve-venv/bin/python`` (kserve's pins conflict with the
project's environment; see kserve_check.py). Without it the test fails, it does not skip.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from tests.runtime.http.server import LiveServer

CHECK = Path(__file__).with_name("kserve_check.py")


def kserve_check(url: str, model: str, name: str, rows: int, cols: int) -> dict[str, Any]:
    """Run kserve_check.py with the kserve interpreter; its outputs (json and binary)."""
    python = os.environ.get("WASMGATE_KSERVE_PYTHON")
    assert python, "set WASMGATE_KSERVE_PYTHON to a python with `pip install kserve`"
    result = subprocess.run(
        [python, str(CHECK), url, model, name, str(rows), str(cols)],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    outputs: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return outputs


def test_kserve_sdk_rest_client(server: LiveServer) -> None:
    outputs = kserve_check(f"http://{server.url}", "add", "INPUT0", 2, 4)
    x = (np.arange(8, dtype=np.float32) / 4).reshape(2, 4)
    for mode in ("json", "binary"):
        np.testing.assert_array_equal(np.array(outputs[mode]["OUTPUT0"], np.float32), x + 1)
        np.testing.assert_array_equal(np.array(outputs[mode]["OUTPUT1"], np.float32), x * 2)
