"""`wasmgate serve` as a subprocess: health endpoints, logs, clean stop on signals."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.daemon import Daemon, write_config


def test_health_endpoints(daemon_factory: Callable[..., Daemon]) -> None:
    daemon = daemon_factory()
    assert daemon.get_json("/v2/health/live") == {"live": True}
    assert daemon.get_json("/v2/health/ready") == {"ready": True}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_clean_stop_on_signal(daemon_factory: Callable[..., Daemon], sig: signal.Signals) -> None:
    daemon = daemon_factory()
    assert daemon.proc is not None
    started = time.monotonic()
    daemon.proc.send_signal(sig)
    assert daemon.proc.wait(timeout=15) == 0
    assert time.monotonic() - started < 10
    assert "stopped" in daemon.log()


def test_json_logs(daemon_factory: Callable[..., Daemon], tmp_path: Path) -> None:
    daemon = daemon_factory(config={"log": {"format": "json"}})
    daemon.stop()
    records = [json.loads(line) for line in daemon.log().splitlines() if line.startswith("{")]
    assert any(r["msg"] == "listening" for r in records)
    assert all({"ts", "level", "logger", "msg"} <= r.keys() for r in records)


@pytest.mark.timeout(300)
def test_demo_mode_serves_signed_examples(daemon_factory: Callable[..., Daemon]) -> None:
    import urllib.request  # noqa: PLC0415

    daemon = daemon_factory(extra_args=("--demo",))
    request = urllib.request.Request(
        f"{daemon.url}/v1/adapters/digits", data=json.dumps([0.0] * 64).encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        body = json.loads(answer.read())
    assert set(body) == {"digit", "confidence"}
    assert "DEMO MODE: trusting demo key" in daemon.log()


def _serve_once(config: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``wasmgate serve`` expected to refuse at once: its exit code and output."""
    cmd = [sys.executable, "-m", "wasmgate", "serve", "--config", str(config)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)


def test_port_in_use_is_one_line_before_loading(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        config = write_config(
            tmp_path / "c.toml",
            {"paths": {"data_dir": tmp_path / "data"}, "http": {"host": "127.0.0.1", "port": port}},
        )
        done = _serve_once(config)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"wasmgate serve: cannot listen on 127.0.0.1:{port}: address already in use"
    )
    assert "loading" not in done.stderr  # refused before any bundle work


def test_second_daemon_on_one_data_dir_is_refused_and_sigkill_frees_it(
    daemon_factory: Callable[..., Daemon],
) -> None:
    first = daemon_factory(name="one")
    assert first.proc is not None
    second = Daemon(first.workdir, {})  # same data dir, its own free port
    done = _serve_once(second.config_path)
    assert done.returncode == 2, done.stderr
    assert f"is in use by another wasmgate serve (pid {first.proc.pid})" in done.stderr
    assert "Traceback" not in done.stderr
    first.kill()  # SIGKILL: the kernel drops the lock with the process
    second.start()
    assert second.get_json("/v2/health/ready") == {"ready": True}
    second.stop()


OPERATOR = Path(__file__).resolve().parents[2] / "docs" / "operator.md"


def _doc_line_pattern(line: str) -> re.Pattern[str]:
    """A documented log line as a pattern: its time, numbers and paths vary, nothing else."""
    out = ""
    for token in re.split(r"(\s+)", line):
        if token.isspace():
            out += r"\s+"
        elif re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", token):
            out += r"\S+"
        elif token.startswith("trust_file="):
            out += r"trust_file=\S+"
        else:
            out += re.sub(r"\\\d(?:\\?\d|\\\.)*|\d[\d.]*", r"[\\d.]+", re.escape(token))
    return re.compile(out + r"$")


def test_start_up_log_lines_look_as_docs_operator_shows(
    daemon_factory: Callable[..., Daemon],
) -> None:
    """The trust, bundles and listening lines of a real start match docs/operator.md's
    first-start example field by field; no value is a Python repr."""
    block = OPERATOR.read_text(encoding="utf-8").split("## The first start", 1)[1]
    shown = block.split("```\n", 2)[1].splitlines()
    wanted = [ln for ln in shown if re.search(r"trust file loaded|bundles loaded|listening", ln)]
    assert len(wanted) == 3
    daemon = daemon_factory()
    daemon.stop()
    lines = daemon.log().splitlines()
    for doc_line in wanted:
        pattern = _doc_line_pattern(doc_line)
        assert any(pattern.match(ln) for ln in lines), f"{doc_line}\nnot in:\n{daemon.log()}"
    for line in lines:
        assert not re.search(r"\w=[\[\(\{]", line), f"a Python repr in a log field: {line}"
