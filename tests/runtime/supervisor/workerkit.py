"""What the tests of a gateway with data-plane workers share: a real daemon started until its
workers serve, waits on the worker table of ``/v1/status``, and the calls they make.

Not a test module, so that the tests of each concern import it without importing (and
pytest collecting twice) one another."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.benchkit import BenchKit
from tests.fixtures.daemon import Daemon

REPO = Path(__file__).resolve().parents[3]
SAMPLE = (REPO / "guest_adapters" / "examples" / "digits" / "samples" / "zero.json").read_bytes()
TOKEN = "s3cret-token"
ADAPTER_REQUESTS = (
    'wasmgate_requests_total{kind="adapter",name="digits",source="local",transport="http"}'
)


@contextmanager
def demo_gateway(
    tmp_path_factory: pytest.TempPathFactory, name: str, **sections: object
) -> Iterator[Daemon]:
    """``serve --demo`` with two workers and the management token, plus ``sections`` of
    config: what a module's ``gateway`` fixture yields."""
    config: dict[str, object] = {"workers": {"count": 2}, "http": {"management_token": TOKEN}}
    config.update(sections)
    with serving(Daemon(tmp_path_factory.mktemp(name), config, ("--demo",))) as daemon:
        yield daemon


@contextmanager
def digits_gateway(
    root: Path, models: Any, **sections: object
) -> Iterator[tuple[Daemon, BenchKit]]:
    """A 2-worker gateway serving the signed ``digits`` bundle of a kit under ``root``
    (the kit signs what a test installs next), plus ``sections`` of config."""
    kit = BenchKit(root / "kit")
    kit.build("digits", models.digits_fp32)
    config = kit.config({"workers": {"count": 2}, **sections})
    (root / "gw").mkdir()
    with serving(Daemon(root / "gw", config)) as daemon:
        yield daemon, kit


@contextmanager
def serving(daemon: Daemon, count: int = 2) -> Iterator[Daemon]:
    """``daemon`` started, for the ``with`` block, once its ``count`` workers serve."""
    daemon.start(timeout=240)
    try:
        until_serving(daemon, count)
        yield daemon
    finally:
        daemon.stop()


def until_serving(daemon: Daemon, count: int, timeout: float = 60.0) -> list[dict[str, object]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        workers = daemon.get_json("/v1/status")["components"]["workers"]["workers"]
        if sum(1 for w in workers if w["state"] == "serving") == count:
            return list(workers)
        time.sleep(0.05)
    raise TimeoutError(f"workers not serving: {workers}")


def until_replaced(daemon: Daemon, pid: object, timeout: float = 10.0) -> list[dict[str, object]]:
    """The workers once none is ``pid`` and both serve."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        workers = until_serving(daemon, 2, timeout)
        if all(w["pid"] != pid for w in workers):
            return workers
        time.sleep(0.02)
    raise TimeoutError(f"worker {pid} not replaced")


def call(daemon: Daemon, path: str, body: bytes | None = None, token: bool = False) -> int:
    headers = {"Authorization": f"Bearer {TOKEN}"} if token else {}
    req = urllib.request.Request(f"{daemon.url}{path}", data=body, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as answer:
            answer.read()
            return int(answer.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def call_quietly(daemon: Daemon) -> int:
    """The digits adapter's status for one sample, -1 when no answer came."""
    try:
        return call(daemon, "/v1/adapters/digits", SAMPLE)
    except (urllib.error.URLError, OSError):
        return -1


def cpu_ticks(pid: object) -> int:
    """User + system clock ticks of ``pid`` so far (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])
