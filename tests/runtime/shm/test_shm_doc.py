"""docs/shared-memory.md as a reader uses it: its config block and its Python example, run
verbatim against a real daemon."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import msgspec

from tests.fixtures.daemon import Daemon
from wasmgate._compat import tomllib
from wasmgate.runtime.ops.config import settings_from
from wasmgate.runtime.ops.config_shm import SharedMemorySettings

DOC = Path(__file__).resolve().parents[3] / "docs" / "shared-memory.md"


def block(language: str) -> str:
    found = re.search(rf"```{language}\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)
    assert found is not None, f"no {language} block in {DOC.name}"
    return found.group(1)


def test_the_config_block_is_valid_and_its_comments_are_the_defaults() -> None:
    text = block("toml")
    assert settings_from(tomllib.loads(text)).shared_memory.enabled is True
    defaults = msgspec.structs.asdict(SharedMemorySettings())
    commented = re.findall(r"^# (\w+) = (\d+)", text, re.MULTILINE)
    assert len(commented) == 3
    for key, value in commented:
        assert defaults[key] == int(value), key


def test_the_python_example_runs_verbatim(tmp_path: Path) -> None:
    # The doc's daemon: `WASMGATE_SHARED_MEMORY__ENABLED=true wasmgate serve --demo`, whose
    # digits-mlp ships with the package (the example once needed a model shipped nowhere).
    env = {"WASMGATE_SHARED_MEMORY__ENABLED": "true"}
    daemon = Daemon(tmp_path, {}, extra_args=("--demo",), env=env)
    daemon.start(timeout=240)
    try:
        env = {**os.environ, "WASMGATE_URL": daemon.url.removeprefix("http://")}
        done = subprocess.run([sys.executable, "-c", block("python")], env=env,
                              capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert lines[0] == "(2, 10) [0, 0]"  # blank images
        assert "'key': '/camera_input'" in lines[1]
    finally:
        daemon.stop()
