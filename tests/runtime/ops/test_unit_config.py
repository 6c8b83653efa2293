"""The unit starts without a config file (docs/deploy.md calls /etc/wasmgate/config.toml
optional), and the package's unit tells its users to change it in a drop-in, not a copy."""

from __future__ import annotations

import shlex
import signal
import subprocess
import urllib.request
from pathlib import Path

import pytest

from tests.fixtures.net import reserved_port
from tests.fixtures.waits import until
from wasmgate.runtime.ops.config import DEFAULT_CONFIG_PATH
from wasmgate.runtime.ops.unit import current_executable, render_unit


def settings(unit: str, key: str) -> list[str]:
    return [line.split("=", 1)[1] for line in unit.splitlines() if line.startswith(f"{key}=")]


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=1) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def test_the_unit_names_no_config_file_unless_told_another(tmp_path: Path) -> None:
    (default,) = settings(render_unit("/usr/local/bin/wasmgate"), "ExecStart")
    assert default == "/usr/local/bin/wasmgate serve"
    other = tmp_path / "my config.toml"
    (named,) = settings(render_unit("/usr/local/bin/wasmgate", str(other)), "ExecStart")
    assert named == f"/usr/local/bin/wasmgate serve --config {shlex.quote(str(other))}"


@pytest.mark.timeout(180)
def test_the_units_command_serves_on_defaults_without_the_config_file(tmp_path: Path) -> None:
    """What `--print-unit` writes, run as systemd would (its Environment=, paths moved into
    tmp_path) on a machine without /etc/wasmgate/config.toml: ready, and SIGTERM ends it 0.
    Before, the unit passed --config for that file and serve exited 2 (a restart loop)."""
    if DEFAULT_CONFIG_PATH.exists():
        pytest.skip(f"{DEFAULT_CONFIG_PATH} exists on this machine")
    unit = render_unit(current_executable())
    env = dict(e.split("=", 1) for e in settings(unit, "Environment"))
    moved = {k: str(tmp_path / Path(v).name) for k, v in env.items() if k.startswith("WASMGATE_")}
    port, hold = reserved_port()
    hold.close()
    env = {**env, **moved, "HOME": str(tmp_path), "WASMGATE_HTTP__PORT": str(port)}
    (command,) = settings(unit, "ExecStart")
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(shlex.split(command), env=env, stdout=out, stderr=out)
    try:
        until(lambda: ready(port) or proc.poll() is not None, "ready or exited", timeout=120)
        assert proc.poll() is None, log.read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    assert code == 0, log.read_text()


def test_an_explicit_config_that_is_missing_still_stops_serve(tmp_path: Path) -> None:
    done = subprocess.run(
        [current_executable(), "serve", "--config", str(tmp_path / "absent.toml")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "absent.toml" in done.stderr


def test_the_packaged_unit_says_drop_in_not_copy() -> None:
    packaged = render_unit("/opt/wasmgate/bin/wasmgate")
    header = [line for line in packaged.splitlines() if line.startswith("#")][:6]
    text = " ".join(header)
    assert "systemctl edit wasmgate" in text
    assert "--print-unit >" not in text  # no copy into /etc/systemd/system for package users
    assert "Install:" in render_unit("/usr/local/bin/wasmgate")  # the venv install's header
    venv = render_unit("/opt/wasmgate/bin/wasmgate".replace("/opt/", "/srv/"))
    assert packaged.split("[Unit]")[1] == venv.split("[Unit]")[1].replace("/srv/", "/opt/")
