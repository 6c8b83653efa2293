"""`deploy/quickstart.sh` run again on a newer checkout upgrades its environment in place
(docs/quickstart.md), with the real script, pip and git: a clone of this checkout
(tests/fixtures/clones.py), the quickstart once, one more commit, the quickstart again.

To keep it to seconds, the environment sees this test run's packages through a ``.pth``
line (the dependencies are satisfied, as they are on a second run anyway): what pip
installs each time is wasmgate itself, built from the clone as the script asks.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.fixtures.clones import commit_empty, git, snapshot

DOC = Path(__file__).resolve().parents[2] / "docs" / "quickstart.md"
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def quickstart(clone: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        ["sh", str(clone / "deploy" / "quickstart.sh"), "--install-only"],
        env=env, capture_output=True, text=True, timeout=500, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def test_a_second_run_on_a_newer_checkout_upgrades_in_place(tmp_path: Path) -> None:
    clone = snapshot(tmp_path / "wasmgate")
    venv = tmp_path / ".local" / "share" / "wasmgate-venv"  # the defaults, HOME=tmp_path
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    (site,) = (venv / "lib").glob("python3.*/site-packages")
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    data = tmp_path / ".local" / "share" / "wasmgate-quickstart"
    data.mkdir()
    (data / "kept").write_text("the demo's key and bundles live here")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WASMGATE_")}
    env["HOME"] = str(tmp_path)
    first = quickstart(clone, env)
    assert f"(commit {git(clone, 'rev-parse', '--short=9', 'HEAD')}" in first, first
    commit_empty(clone, "a newer checkout")
    second = quickstart(clone, env)
    assert f"(commit {git(clone, 'rev-parse', '--short=9', 'HEAD')}" in second, second
    assert first.split()[1] != second.split()[1], (first, second)
    said = subprocess.run(
        [str(venv / "bin" / "wasmgate"), "--version"], capture_output=True, text=True, check=True
    )
    assert said.stdout.strip() == second  # the venv's own command runs the new code
    assert (data / "kept").exists()
    # docs/quickstart.md's removal leaves nothing of the quickstart in its home.
    (remove,) = re.findall(r"`(rm -rf ~/\.local/share/wasmgate-venv\s[^`]*)`", DOC.read_text())
    subprocess.run(["sh", "-c", " ".join(remove.split())], env=env, check=True)
    assert not [p for p in (tmp_path / ".local").rglob("*") if not p.is_dir()]
