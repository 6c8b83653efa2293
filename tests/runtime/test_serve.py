"""`wasmgate serve` as a subprocess: health endpoints, logs, clean stop on signals."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.daemon import Daemon


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
