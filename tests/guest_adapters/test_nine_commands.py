"""The README's "make your own adapter in nine commands", run as written against a daemon
that is already serving (real subprocess), as the guide tells the reader to have it.

The commands are read from ``guest_adapters/README.md`` itself, so the guide cannot drift
from what is tested. Only what is the reader's own is substituted: ``$EDITOR`` (a ``sed``
edit), ``$HOME`` and ``$XDG_DATA_HOME`` (temporary directories; the daemon's data dir is
the one the guide copies into) and the port. The key that ``trust add`` adds to the trust
file must reach the running daemon without a restart or a ``touch``.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.cache import cache_dir
from tests.fixtures.daemon import Daemon
from wasmgate.guest_adapters.build import package_root

GUIDE = package_root() / "README.md"


def nine_commands() -> list[str]:
    text = GUIDE.read_text(encoding="utf-8")
    section = text.split("## Make your own adapter (nine commands)", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert block is not None
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_the_guide_has_nine_commands() -> None:
    assert len(nine_commands()) == 9


def _env(home: Path, xdg: Path) -> dict[str, str]:
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return {
        **os.environ,
        "PATH": path,  # `wasmgate` as the reader's shell finds it
        "HOME": str(home),
        "XDG_DATA_HOME": str(xdg),
        # As root the default data dir is /var/lib/wasmgate; the guide's `cp` line names the
        # user's one, so point the CLI's default at it (the documented override).
        "WASMGATE_PATHS__DATA_DIR": str(xdg / "wasmgate"),
        "EDITOR": "sed -i s/low.confidence/not.sure/",
        "WASMGATE_BUILD_CACHE": str(cache_dir("adapters")),
    }


def _answer_within(url: str, payload: bytes, timeout: float) -> bytes:
    """The daemon notices a dropped file within a poll or two: retry the guide's curl."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            request = urllib.request.Request(url, data=payload, method="POST")
            with urllib.request.urlopen(request, timeout=10) as answer:
                body: bytes = answer.read()
                return body
        except urllib.error.HTTPError as e:  # 404 until the bundle is installed
            e.close()
            last = e
        except (urllib.error.URLError, OSError) as e:
            last = e
        time.sleep(0.2)
    raise AssertionError(f"no answer from {url} after {timeout}s: {last}")


@pytest.mark.timeout(600)
# "as-written": the guide's order. "sighup": the bundle dropped before its key is trusted,
# refused, then `kill -HUP` (the trust-file watch would also retry it; the SIGHUP path alone
# is covered in tests/runtime/bundles/test_registry.py).
@pytest.mark.parametrize("nudge", ["as-written", "sighup"])
def test_nine_commands_against_a_running_daemon(
    tmp_path: Path, daemon_factory: Callable[..., Daemon], nudge: str
) -> None:
    home, xdg, work = tmp_path / "home", tmp_path / "xdg", tmp_path / "work"
    for d in (home, xdg, work):
        d.mkdir()
    daemon = daemon_factory(config={"paths": {"data_dir": xdg / "wasmgate"}})
    env = _env(home, xdg)
    *steps, curl = nine_commands()
    if nudge == "sighup":
        # The bundle first, the key after: the file is refused, then SIGHUP retries it.
        steps = [s for s in steps if "trust add" not in s] + [s for s in steps if "trust add" in s]
    for step in steps:
        done = subprocess.run(
            ["bash", "-c", step],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert done.returncode == 0, f"{step}\n{done.stdout}\n{done.stderr}"
        if nudge == "sighup" and step.startswith("cp "):
            _wait_for(daemon, "not trusted")
    if nudge == "sighup":
        assert daemon.proc is not None
        daemon.proc.send_signal(signal.SIGHUP)
    match = re.search(r"--data-binary @(\S+) 127\.0\.0\.1:8080(/\S+)", curl)
    assert match is not None, curl
    answer = _answer_within(daemon.url + match.group(2), (work / match.group(1)).read_bytes(), 60)
    assert b'"digit":0' in answer.replace(b" ", b"")


def _wait_for(daemon: Daemon, text: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while text not in daemon.log():
        assert time.monotonic() < deadline, daemon.log()[-3000:]
        time.sleep(0.1)
