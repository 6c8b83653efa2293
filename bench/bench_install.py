"""What a gateway installs, and how soon the demo serves on a machine without Zig.

``python -m bench.bench_install [--quick] [--json OUT]``

- the core install's size: the wheel built from this checkout, ``pip install``-ed (no
  extras) into a fresh virtual environment, measured like ``du`` (allocated blocks), beside
  the goal of 450 MB (876 MB when the compiler was in the core). The packages come from the
  pip cache or the configured index; when they cannot be had the figure is skipped with a
  line saying so (nothing is measured over a network);
- the demo's cold start: ``wasmgate serve --demo`` from that environment (no ``ziglang`` in
  it), a fresh data directory and cache, until systemd's ``READY=1`` (a notification socket
  of our own) and until ``/v2/health/live`` answers, beside the goal of 3 s. Median of 3.

``--quick`` installs nothing: the size is the core's dependency closure as installed in this
environment (each distribution's RECORD), and the demo starts once from this environment
with ``ziglang`` hidden (`tests.fixtures.without`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

from bench.common import Figure, median, script_main
from tests.fixtures.net import free_port
from tests.fixtures.notify_socket import NotifySocket

REPO = Path(__file__).resolve().parent.parent
GOAL_MB, GOAL_READY_S = 450.0, 3.0  # the install was 876 MB with the compiler in the core
MIB = 1024 * 1024


def du_mb(path: Path) -> float:
    """Allocated size of a tree in MiB, as ``du -sm`` counts it (hard links once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            st = os.lstat(os.path.join(root, name))  # noqa: PTH118 - os.walk gives strings
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total / MIB


def core_closure_mb() -> float:
    """The installed size of wasmgate's core dependencies (no extras) in this environment."""
    todo, done, total = ["wasmgate"], set(), 0
    while todo:
        name = todo.pop().lower().replace("_", "-")
        if name in done:
            continue
        done.add(name)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        total += sum(
            Path(str(dist.locate_file(f))).stat().st_size
            for f in dist.files or []
            if Path(str(dist.locate_file(f))).is_file()
        )
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return total / MIB


def _run(cmd: Sequence[str | Path], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        [str(c) for c in cmd], capture_output=True, text=True, check=False, **kw
    )


def install_core(tmp: Path) -> tuple[Path, float] | str:
    """A fresh venv with the wheel (core only): (venv, pip seconds), or why it could not."""
    wheels = tmp / "wheels"
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    built = _run([*cmd, "-w", wheels, REPO], timeout=600)
    if built.returncode != 0:
        return f"building the wheel failed: {built.stderr.strip()[-300:]}"
    venv = tmp / "venv"
    made = _run([sys.executable, "-m", "venv", venv], timeout=300)
    if made.returncode != 0:
        return f"python -m venv failed: {made.stderr.strip()[-300:]}"
    began = time.monotonic()
    wheel = next(wheels.glob("wasmgate-*.whl"))
    pip: list[str | Path] = [
        venv / "bin" / "python",
        "-m",
        "pip",
        "install",
        "-q",
        "--disable-pip-version-check",
    ]
    done = _run([*pip, wheel], timeout=1200)
    if done.returncode != 0:
        lines = [ln for ln in done.stderr.splitlines() if "is ignored" not in ln]
        return "the core's packages are neither cached nor reachable: " + " ".join(lines)[-300:]
    return venv, time.monotonic() - began


def _live(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def demo_cold_start(command: Sequence[str | Path], tmp: Path) -> tuple[float, float]:
    """Seconds from spawning ``command serve --demo`` on a fresh data directory to its
    listener answering ``/v2/health/live``, and to ``READY=1``."""
    port = free_port()
    sock = NotifySocket(tmp / "notify")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "WASMGATE_"))}
    env |= {
        "NOTIFY_SOCKET": sock.address,
        "HOME": str(tmp / "home"),  # no Zig cache, no build cache, no data of another run
        "WASMGATE_PATHS__DATA_DIR": str(tmp / "data"),
        "PYTHONDONTWRITEBYTECODE": "",  # installed code is byte-compiled (see bench_daemon)
        "PYTHONPATH": str(REPO),  # only the quick variant's wrapper needs it
    }
    log = (tmp / "demo.log").open("wb")
    began = time.monotonic()
    proc = subprocess.Popen(
        [*map(str, command), "serve", "--demo", "--port", str(port)],
        env=env,
        cwd=tmp,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    live = None
    try:
        while not sock.with_field("READY", "1"):
            if proc.poll() is not None or time.monotonic() - began > 180:
                raise RuntimeError(f"demo did not get ready: {(tmp / 'demo.log').read_text()}")
            if live is None and _live(f"http://127.0.0.1:{port}/v2/health/live"):
                live = time.monotonic() - began
            time.sleep(0.01)
        ready = sock.with_field("READY", "1")[0].at - began
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()
        sock.close()
    return (live if live is not None else ready), ready


def _demo_runs(command: Sequence[str | Path], runs: int) -> tuple[float, float]:
    lives, readies = [], []
    for i in range(runs):
        with tempfile.TemporaryDirectory(prefix=f"wasmgate-demo{i}-") as tmp:
            live, ready = demo_cold_start(command, Path(tmp))
        lives.append(live)
        readies.append(ready)
    return median(lives), median(readies)


def run(quick: bool) -> list[Figure]:
    if quick:
        size = core_closure_mb()
        hidden = [sys.executable, "-m", "tests.fixtures.without", "ziglang", "--"]
        live, ready = _demo_runs(hidden, 1)
        return [
            Figure("install", "core closure, this env (MB)", size, "MB", "goal", GOAL_MB),
            Figure("demo", "cold start to READY, no Zig", ready, "s", "goal", GOAL_READY_S),
            Figure("demo", "cold start to live (listener)", live, "s", "READY", ready),
        ]
    with tempfile.TemporaryDirectory(prefix="wasmgate-install-") as tmp:
        got = install_core(Path(tmp))
        if isinstance(got, str):
            print(f"bench_install: skipping the install: {got}", flush=True)
            return []
        venv, pip_s = got
        size = du_mb(venv)
        zig = (venv / "lib").glob("python3*/site-packages/ziglang")
        if any(zig):
            raise RuntimeError("the core install brought ziglang: the sdk extra leaked")
        live, ready = _demo_runs([venv / "bin" / "wasmgate"], 3)
    return [
        Figure("install", "core venv, installed (MB)", size, "MB", "goal", GOAL_MB),
        Figure("install", "pip install of the wheel", pip_s, "s", "demo READY", ready),
        Figure("demo", "cold start to READY, no Zig", ready, "s", "goal", GOAL_READY_S),
        Figure("demo", "cold start to live (listener)", live, "s", "READY", ready),
    ]


if __name__ == "__main__":
    script_main(__doc__, run, "no install: the closure in this env, one demo start")
