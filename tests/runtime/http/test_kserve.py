"""The kserve SDK's REST client against the real server, run from the kserve virtualenv.

CI: ``python -m venv /opt/kserve-venv && /opt/kserve-venv/bin/pip install kserve`` and
``WASMGATE_KSERVE_PYTHON=/opt/kserve-venv/bin/python`` (kserve's pins conflict with the
project's environment; see kserve_check.py). Without it the test fails, it does not skip.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.runtime.http.server import LiveServer

CHECK = Path(__file__).with_name("kserve_check.py")


def test_kserve_sdk_rest_client(server: LiveServer) -> None:
    python = os.environ.get("WASMGATE_KSERVE_PYTHON")
    assert python, "set WASMGATE_KSERVE_PYTHON to a python with `pip install kserve`"
    result = subprocess.run(
        [python, str(CHECK), f"http://{server.url}"],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "all checks passed" in result.stdout
