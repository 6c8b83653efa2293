"""The README's first command, run verbatim, installs the daemon and serves the demo.

The command is read from the README's ``## Two commands`` section (its first ``sh`` block)
and run by ``bash -c`` in a copy of this checkout, with a scratch ``HOME``: it creates a
fresh virtual environment, ``pip install .`` into it (from the pip cache, which is kept) and
runs ``wasmgate serve --demo`` in the foreground, which the test waits on through
``/v2/health/ready`` and then stops with SIGTERM. The environment only moves what would
collide with this machine: the port (``WASMGATE_HTTP__PORT``) and, for root, the data
directory (``WASMGATE_PATHS__DATA_DIR``).

It takes about a minute with a warm pip cache (a venv, ~50 wheels unpacked and
byte-compiled), so it runs only when ``WASMGATE_TEST_README=1``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.fixtures.net import free_port

REPO = Path(__file__).resolve().parent.parent
VENV = ".local/share/wasmgate-venv"

pytestmark = pytest.mark.skipif(
    os.environ.get("WASMGATE_TEST_README") != "1",
    reason="installs the wheel into a fresh venv (~1 min): set WASMGATE_TEST_README=1",
)


def first_command() -> str:
    """The first ``sh`` block of the README's ``## Two commands`` section, as written."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Two commands\n", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"```sh\n(.*?)\n```", section, re.DOTALL)
    assert found is not None, "no sh block in ## Two commands"
    return found.group(1)


def test_the_first_command_is_the_quickstart_script() -> None:
    # Its steps (venv support from apt-get, as root or through sudo) are held by
    # tests/deploy/test_quickstart.py; this module runs it for real.
    assert first_command() == "sh deploy/quickstart.sh"


def _checkout_copy(dest: Path) -> Path:
    """This checkout's files (tracked and new, not ignored): what a clone has."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return bool(json.loads(r.read()).get("ready"))
    except (urllib.error.URLError, OSError, ValueError):
        return False


@pytest.mark.timeout(900)
def test_readme_first_command_serves_the_demo(tmp_path: Path) -> None:
    checkout = _checkout_copy(tmp_path / "wasmgate")
    home = tmp_path / "home"
    home.mkdir()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "WASMGATE_"))}
    env |= {
        "HOME": str(home),
        # The pip cache of the real home: the packages come from it, not the network.
        "PIP_CACHE_DIR": os.environ.get("PIP_CACHE_DIR", str(Path.home() / ".cache" / "pip")),
        "WASMGATE_HTTP__PORT": str(port),
        "WASMGATE_PATHS__DATA_DIR": str(tmp_path / "data"),
    }
    log = (tmp_path / "command.log").open("wb")
    began = time.monotonic()
    proc = subprocess.Popen(
        ["bash", "-c", first_command()],
        cwd=checkout,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: pip, then the daemon
    )
    try:
        while not _ready(f"http://127.0.0.1:{port}/v2/health/ready"):
            assert proc.poll() is None, (tmp_path / "command.log").read_text()[-4000:]
            assert time.monotonic() - began < 800, "not ready after 800 s"
            time.sleep(0.5)
        print(f"README command: ready after {time.monotonic() - began:.0f} s")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/status", timeout=10) as r:
            models = {m["name"] for m in json.loads(r.read())["models"]}
        assert {"digits", "vibration-anomaly"} <= models
        site = next((home / VENV / "lib").glob("python3*/site-packages"))
        assert (site / "wasmgate").is_dir()
        assert not (site / "ziglang").exists()  # the core install: no compiler
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        code = proc.wait(timeout=60)
        log.close()
    assert code == 0, (tmp_path / "command.log").read_text()[-4000:]
