"""``deploy/quickstart.sh`` (the README's first command) on a machine like a fresh Debian 12.

There, ``python3 -m venv`` fails until Debian's ``python3.X-venv`` is installed. The machine's
parts the script decides on are stand-ins on ``PATH``: ``python3`` (the real interpreter,
except that ``-m venv`` fails until ``apt-get install`` ran, leaving a venv without pip as
Debian's does, and that a venv's ``pip install`` and ``wasmgate`` only record their call),
``apt-get``, ``sudo`` and ``id``. What is under test is the script's own path: which
package, as whom, retried how, and the one-line refusals. The real install of the wheel is
`tests/test_readme_install.py` and the Python smoke set.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

QUICKSTART = Path(__file__).resolve().parents[2] / "deploy" / "quickstart.sh"
PKG = f"python{sys.version_info[0]}.{sys.version_info[1]}-venv"

FAKE_PYTHON = """#!/bin/sh
if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then
  mkdir -p "$3/bin"
  [ -e "$STATE/venv-installed" ] || { echo "ensurepip is not available" >&2; exit 1; }
  printf '#!/bin/sh\\necho "pip $*" >> "$STATE/log"\\n' > "$3/bin/python"
  printf '#!/bin/sh\\necho "wasmgate $*" >> "$STATE/log"\\n' > "$3/bin/wasmgate"
  printf 'echo "data $WASMGATE_PATHS__DATA_DIR" >> "$STATE/log"\\n' >> "$3/bin/wasmgate"
  cp "$3/bin/python" "$3/bin/pip"
  chmod +x "$3/bin/python" "$3/bin/wasmgate" "$3/bin/pip"
  exit 0
fi
exec "$REAL_PYTHON" "$@"
"""
FAKE_APT = """#!/bin/sh
echo "apt-get $* as $(id -u)" >> "$STATE/log"
case "$*" in *install*) touch "$STATE/venv-installed" ;; esac
"""
FAKE_SUDO = """#!/bin/sh
echo "sudo" >> "$STATE/log"
FAKE_UID=0 exec "$@"
"""
FAKE_ID = """#!/bin/sh
echo "${FAKE_UID:-1000}"
"""


def machine(tmp: Path, *, sudo: bool, uid: int = 1000) -> dict[str, str]:
    """The environment of the stand-in machine (``tmp/bin`` first on PATH)."""
    bin_dir, state = tmp / "bin", tmp / "state"
    bin_dir.mkdir()
    state.mkdir()
    parts = {"python3": FAKE_PYTHON, "apt-get": FAKE_APT, "id": FAKE_ID}
    if sudo:
        parts["sudo"] = FAKE_SUDO
    for name, text in parts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    system = "/usr/bin:/bin"  # sh, mkdir, cp...; never a real sudo or apt-get before ours
    return {
        "PATH": f"{bin_dir}:{system}",
        "HOME": str(tmp / "home"),
        "STATE": str(state),
        "REAL_PYTHON": sys.executable,
        "FAKE_UID": str(uid),
    }


def run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(QUICKSTART), "--port", "18080"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def log(env: dict[str, str]) -> list[str]:
    return (Path(env["STATE"]) / "log").read_text().splitlines()


def test_a_user_with_sudo_gets_the_venv_package_then_the_demo(tmp_path: Path) -> None:
    env = machine(tmp_path, sudo=True)
    done = run(env)
    assert done.returncode == 0, done.stderr
    steps = log(env)
    assert steps[:4] == [
        "sudo",
        "apt-get update -qq as 0",
        "sudo",
        f"apt-get install -y -qq {PKG} as 0",
    ]
    assert steps[4].startswith("pip -m pip install -q --disable-pip-version-check ")
    assert steps[4].endswith(str(QUICKSTART.parents[1]))
    assert steps[5] == "wasmgate serve --demo --port 18080"  # arguments passed on
    venv = Path(env["HOME"]) / ".local/share/wasmgate-venv"
    assert (venv / "bin" / "pip").exists()


def test_root_needs_no_sudo_and_a_second_run_installs_nothing_more(tmp_path: Path) -> None:
    env = machine(tmp_path, sudo=False, uid=0)
    assert run(env).returncode == 0
    assert log(env)[:2] == ["apt-get update -qq as 0", f"apt-get install -y -qq {PKG} as 0"]
    (Path(env["STATE"]) / "log").unlink()
    assert run(env).returncode == 0  # the venv is there: only the install and the demo
    assert [line.split()[0] for line in log(env)] == ["pip", "wasmgate", "data"]


def test_a_user_without_sudo_is_told_the_one_command_to_run_as_root(tmp_path: Path) -> None:
    env = machine(tmp_path, sudo=False)
    done = run(env)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"quickstart: python3 cannot make a virtual environment: as root, run apt-get install {PKG}"
    ]
    assert not (Path(env["STATE"]) / "log").exists()  # nothing was attempted


def test_an_unsupported_python_is_refused_in_one_line(tmp_path: Path) -> None:
    env = machine(tmp_path, sudo=True)
    old = Path(env["PATH"].split(":")[0]) / "python3.9"
    old.write_text('#!/bin/sh\n[ "$1" = -V ] && echo "Python 3.9.18" && exit 0\nexit 1\n')
    old.chmod(0o755)
    done = run({**env, "PYTHON": "python3.9"})
    assert done.returncode == 2
    assert "Python 3.9.18 is not supported: use Python 3.10 to 3.13" in done.stderr
    assert not (Path(env["STATE"]) / "log").exists()  # refused before anything ran


def test_the_demo_keeps_its_data_apart_from_the_packages_service(tmp_path: Path) -> None:
    """As root too: never /var/lib/wasmgate, the Debian package's state (apt purge deletes
    it), but the quickstart's own directory; WASMGATE_DATA moves it."""
    env = machine(tmp_path, sudo=False, uid=0)
    assert run(env).returncode == 0
    assert log(env)[-1] == f"data {env['HOME']}/.local/share/wasmgate-quickstart"
    assert run({**env, "WASMGATE_DATA": str(tmp_path / "elsewhere")}).returncode == 0
    assert log(env)[-1] == f"data {tmp_path / 'elsewhere'}"
